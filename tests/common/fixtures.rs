//! Shared fixtures of the hostile-input, refusal and golden suites.
#![allow(dead_code)]

use axum::Router;
use axum::body::Body;
use axum::response::Response;
use tower::ServiceExt as _;

/// A current-thread runtime with timers and I/O, for a test that drives the gate without
/// `#[tokio::test]` (a property test, a thread of its own).
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a current-thread runtime builds")
}

/// `request` through `app`, in process.
pub async fn through(app: &Router, request: http::Request<Body>) -> Response {
    app.clone()
        .oneshot(request)
        .await
        .expect("the router is infallible")
}
