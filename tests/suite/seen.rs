//! What `evaluate` sees of the HTTP request beyond the MCP message: the client's address
//! (axum's `ConnectInfo`), and the extension types the builder named, set by outer middleware.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::routing::post;
use mcp_gate::policy::{Decision, Evaluation};
use mcp_gate::{Gate, Issuer, StaticKeys};
use serde_json::json;

use crate::common::fixtures::through;
use crate::common::tokens::{TestKey, claims};

const ISSUER: &str = "https://as.example";
const RESOURCE: &str = "https://mcp.example.com/mcp";

/// Set by an outer middleware: shown to `evaluate`.
#[derive(Clone, Debug, PartialEq)]
struct Tenant(&'static str);

/// Set by an outer middleware too, but not named to the builder: never shown.
#[derive(Clone, Debug, PartialEq)]
struct Internal(&'static str);

#[tokio::test]
async fn evaluate_sees_the_client_address_and_the_named_extensions_only() {
    let key = TestKey::es256("seen");
    let keys = StaticKeys::from_jwks_json(&key.jwks_json()).expect("a key set");
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = Arc::clone(&seen);
    let gate = Gate::builder()
        .resource(RESOURCE)
        .issuer(Issuer::with_keys(ISSUER, keys))
        .evaluation_extension::<Tenant>()
        .evaluate(move |evaluation: Evaluation| {
            let row = (
                evaluation.client_address(),
                evaluation.extension::<Tenant>().cloned(),
                evaluation.extension::<Internal>().cloned(),
            );
            record.lock().expect("not poisoned").push(row);
            async { Ok::<_, Infallible>(Decision::unavailable("recorded")) }
        })
        .build()
        .expect("a gate");
    let app = Router::new()
        .route("/mcp", post(|| async { "never reached" }))
        .layer(gate.layer());
    let address: SocketAddr = "203.0.113.7:4711".parse().expect("an address");
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": "hi"}}});
    let mut request = http::Request::post("/mcp")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header(
            "authorization",
            format!("Bearer {}", key.mint(&claims(ISSUER, RESOURCE, ""))),
        )
        .body(Body::from(body.to_string()))
        .expect("a request");
    // What the server and the outer middleware put on the request.
    request.extensions_mut().insert(ConnectInfo(address));
    request.extensions_mut().insert(Tenant("acme"));
    request.extensions_mut().insert(Internal("secret"));
    let response = through(&app, request).await;
    assert_eq!(response.status(), 200);
    let seen = seen.lock().expect("not poisoned").clone();
    assert_eq!(seen, [(Some(address), Some(Tenant("acme")), None)]);
}
