//! The gate in force, swapped whole on reload.
//!
//! Every request is served by the [`Current`] it found when it arrived: a reload installs a
//! new one for the requests after it, and a request in flight finishes on the one it started
//! with (its gate, its policy, its upstream client), so a reload fails no request.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use arc_swap::ArcSwap;
use axum::Router;
use axum::body::Body;
use http::{Request, Response};
use tower::ServiceExt;

use crate::assemble::Assembled;

/// What serves requests now.
pub struct Current {
    /// The gate.
    pub gate: mcp_gate::Gate,
    /// The client-facing routes: MCP behind the gate, and the metadata.
    pub router: Router,
    /// The operations routes over this gate.
    pub operations: Router,
    /// The Cedar policy, when one decides.
    pub cedar: Option<mcp_gate::policy::cedar::CedarPolicy>,
    /// How the banner names what decides.
    pub policy_name: String,
    /// The minter of upstream identity tokens, with `[identity]`.
    pub identity: Option<crate::identity::Minter>,
}

impl Current {
    /// `assembled` with its operations routes.
    pub fn new(assembled: Assembled, operations: Router) -> Self {
        Self {
            gate: assembled.gate,
            router: assembled.router,
            operations,
            cedar: assembled.cedar,
            policy_name: assembled.policy_name,
            identity: assembled.identity,
        }
    }
}

/// The slot the current gate is held in; cloning shares it.
#[derive(Clone)]
pub struct Live {
    current: Arc<ArcSwap<Current>>,
    /// Set once the gateway has begun to drain (SIGTERM): `/readyz` then answers `503`.
    draining: Arc<AtomicBool>,
}

impl Live {
    /// A slot holding `current`.
    pub fn new(current: Current) -> Self {
        Self {
            current: Arc::new(ArcSwap::from_pointee(current)),
            draining: Arc::default(),
        }
    }

    /// What serves requests now.
    pub fn load(&self) -> Arc<Current> {
        self.current.load_full()
    }

    /// Installs `next` for every request from now on.
    pub fn install(&self, next: Current) {
        self.current.store(Arc::new(next));
    }

    /// Serves `request` on the client-facing routes of the gate in force.
    pub async fn serve(self, request: Request<Body>) -> Result<Response<Body>, Infallible> {
        let router = self.current.load().router.clone();
        router.oneshot(request).await
    }

    /// From now on `/readyz` answers `503` (`"draining": true`), whatever the gate's checks
    /// say: the gateway has stopped taking connections and finishes the calls in flight, so a
    /// load balancer should send new clients elsewhere.
    pub fn begin_draining(&self) {
        self.draining.store(true, Ordering::Release);
    }

    /// Serves `request` on the operations routes of the gate in force (`/readyz` while
    /// draining: see [`Live::begin_draining`]).
    pub async fn serve_operations(
        self,
        request: Request<Body>,
    ) -> Result<Response<Body>, Infallible> {
        if self.draining.load(Ordering::Acquire) && request.uri().path() == "/readyz" {
            return Ok(draining());
        }
        let router = self.current.load().operations.clone();
        router.oneshot(request).await
    }
}

/// `/readyz` while the gateway drains.
fn draining() -> Response<Body> {
    let mut response = Response::new(Body::from(r#"{"ready":false,"draining":true,"checks":[]}"#));
    *response.status_mut() = http::StatusCode::SERVICE_UNAVAILABLE;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response.headers_mut().insert(
        http::header::CACHE_CONTROL,
        http::HeaderValue::from_static("no-store"),
    );
    response
}
