//! The Tower shell: [`GateLayer`] makes [`GateService`]s, whose calls return a
//! [`ResponseFuture`] with a [`GateBody`].
//!
//! The shell does what any HTTP middleware would, before anything of MCP: it answers the
//! metadata paths itself, refuses a disallowed `Origin`, lets in only the HTTP methods an MCP
//! endpoint takes, and looks the bearer token up in the verified-token cache. Everything after
//! that (verification when the cache missed, the session, reading and judging the MCP message,
//! forwarding or answering) is the MCP flow's, in `src/enforce/`. A refusal answers at once
//! with its status and challenge; the inner service never sees the request.
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

mod future;
mod metadata;
pub(crate) mod origin;
mod service;
mod verbs;

pub use crate::enforce::body::GateBody;
pub use future::ResponseFuture;
pub use service::GateService;

use std::sync::Arc;

use tower_layer::Layer;

use crate::settings::Settings;

/// Applies [`GateService`] to an inner service. Made by [`Gate::layer`](crate::Gate::layer).
#[derive(Clone)]
pub struct GateLayer {
    pub(crate) settings: Arc<Settings>,
}

impl std::fmt::Debug for GateLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GateLayer")
            .field("resource", &self.settings.resource.uri)
            .finish_non_exhaustive()
    }
}

impl<S> Layer<S> for GateLayer {
    type Service = GateService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        GateService::with_settings(inner, self.settings.clone())
    }
}
