//! The Tower layer: [`GateLayer`] makes [`GateService`]s, whose calls return a [`ResponseFuture`]
//! with a [`GateBody`].
//!
//! Per request, in order: extract the bearer token (header only); look it up in the
//! verified-token cache; otherwise verify it (JWT or introspection); check the endpoint-wide
//! scopes; then forward the request with the [`Principal`](crate::Principal) in its extensions
//! and the `Authorization` header removed. Any failure answers the request at once with the
//! refusal's status and challenge; the inner service never sees it.
//!
//! ```
//! use axum::{Router, routing::post, body::Body};
//! use http::{Request, StatusCode, header};
//! use mcp_gate::{Gate, Issuer, StaticKeys};
//! use tower::ServiceExt;
//!
//! # tokio_test();
//! # #[tokio::main(flavor = "current_thread")] async fn tokio_test() {
//! let keys = StaticKeys::from_jwks_json(r#"{"keys":[{"kty":"EC","crv":"P-256","kid":"k1",
//!   "x":"MKBCTNIcKUSDii11ySs3526iDZ8AiTo7Tu6KPAqv7D4","y":"4Etl6SRW2YiLUrN5vfvVHuhp7x8PxltmWWlbbM4IFyM"}]}"#).unwrap();
//! let gate = Gate::builder()
//!     .evaluate(mcp_gate::policy::allow_all())
//!     .resource("http://127.0.0.1:8080/mcp")
//!     .issuer(Issuer::with_keys("http://127.0.0.1:9000", keys))
//!     .build()
//!     .unwrap();
//! let app = Router::new().route("/mcp", post(|| async { "reached" })).layer(gate.layer());
//!
//! let response = app.oneshot(Request::post("/mcp").body(Body::empty()).unwrap()).await.unwrap();
//! assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
//! assert_eq!(
//!     response.headers()[header::WWW_AUTHENTICATE],
//!     "Bearer resource_metadata=\"http://127.0.0.1:8080/.well-known/oauth-protected-resource/mcp\""
//! );
//! # }
//! ```

mod advertise;
mod answer;
mod audit;
mod body;
mod bounds;
pub(crate) mod buffer;
mod conceal;
mod discovery;
mod future;
mod guarded;
mod interaction;
mod metadata;
pub(crate) mod origin;
mod pipeline;
mod refuse;
mod service;
mod sessions;
pub(crate) mod tasks;
mod verbs;
mod whole;

pub use body::GateBody;
pub use future::ResponseFuture;
pub use service::GateService;

use tower_layer::Layer;

use crate::gate::Gate;

/// Applies [`GateService`] to an inner service.
#[derive(Clone, Debug)]
pub struct GateLayer {
    gate: Gate,
}

impl GateLayer {
    /// A layer enforcing `gate`.
    pub fn new(gate: Gate) -> Self {
        Self { gate }
    }
}

impl<S> Layer<S> for GateLayer {
    type Service = GateService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        GateService::new(inner, self.gate.clone())
    }
}
