//! [`Gate`]: the built, shareable configuration behind the layer.

use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, Response, Uri};

use crate::auth::authenticator::{Authenticator, FirstStep};
use crate::auth::metadata::ProtectedResourceMetadata;
use crate::auth::{AuthError, Principal};
use crate::builder::GateBuilder;
use crate::layer::GateLayer;
use crate::resource::ResourceUri;

/// A built gate: verification keys, caches, policy and metadata, shared by every clone.
///
/// Build one with [`Gate::builder`], put [`Gate::layer`] in front of the MCP service, and
/// serve [`Gate::metadata_router`] beside it.
///
/// ```no_run
/// use axum::Router;
/// use mcp_gate::Gate;
///
/// # async fn run(mcp_service: Router) -> Result<(), Box<dyn std::error::Error>> {
/// let gate = Gate::builder()
///     .evaluate(mcp_gate::policy::allow_all())
///     .resource("https://mcp.example.com/mcp")
///     .issuer("https://auth.example.com")
///     .required_scopes(["mcp:read"])
///     .build()?;
/// let app = Router::new()
///     .nest_service("/mcp", mcp_service)
///     .layer(gate.layer())
///     .merge(gate.metadata_router());
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
/// axum::serve(listener, app).await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Gate {
    pub(crate) inner: Arc<GateInner>,
}

pub(crate) struct GateInner {
    pub resource: ResourceUri,
    pub resource_metadata_url: String,
    pub metadata: ProtectedResourceMetadata,
    pub metadata_bytes: Bytes,
    pub metadata_paths: Vec<String>,
    pub endpoint_scope: String,
    pub authenticator: Authenticator,
    pub mcp: McpSettings,
}

/// Everything after authentication: body limits, the policy, denial shapes, legacy sessions.
pub(crate) struct McpSettings {
    pub max_body_bytes: usize,
    pub body_timeout: std::time::Duration,
    pub policy: Arc<dyn crate::policy::Policy>,
    pub evaluate_timeout: std::time::Duration,
    pub denial: crate::denial::render::DenialSettings,
    /// Legacy session bindings.
    pub sessions: Arc<dyn crate::mcp::SessionStore>,
    /// Which `Origin`s may call the endpoint.
    pub origins: crate::layer::origin::Origins,
    /// Whether methods outside the method table go to `evaluate` instead of `-32601`.
    pub evaluate_unknown_methods: bool,
    pub state: crate::continuation::StateCodec,
    pub max_rounds: u32,
    pub development_mode: bool,
    /// Tool annotations learned from `tools/list` answers, by tool name.
    pub tool_annotations: crate::mcp::annotations::ToolAnnotations,
    pub cursor_ttl: std::time::Duration,
    /// Conceal mode: refusals answered as the inner server answers unknown components.
    pub conceal: bool,
    pub max_list_bytes: usize,
    /// Longest the layer waits for an inner answer it must read whole (a list, a probe).
    pub inner_read_timeout: std::time::Duration,
    /// Durable approval tasks.
    pub tasks: crate::layer::tasks::TaskSettings,
    /// The inner server's identity, for the results the layer writes.
    pub server_identity: crate::mcp::identity::ServerIdentity,
}

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gate")
            .field("resource", &self.inner.resource)
            .field("required_scopes", &self.inner.endpoint_scope)
            .finish_non_exhaustive()
    }
}

impl Gate {
    /// Starts a configuration.
    pub fn builder() -> GateBuilder {
        GateBuilder::default()
    }

    pub(crate) fn from_inner(inner: GateInner) -> Self {
        Self {
            inner: Arc::new(inner),
        }
    }

    /// The Tower layer that authenticates every request before the inner service sees it.
    pub fn layer(&self) -> GateLayer {
        GateLayer::new(self.clone())
    }

    /// The pinned SEP-2643 revision every denial is rendered in.
    pub fn revision(&self) -> crate::denial::Revision {
        self.inner.mcp.denial.revision
    }

    /// Decisions on the calls this gate holds for approval, in its task store: approve or
    /// refuse a task, list those waiting. Refusals are rendered in this gate's revision.
    pub fn tasks(&self) -> crate::tasks::Approvals {
        crate::tasks::Approvals::new(self.inner.mcp.tasks.store.clone())
            .with_revision(self.inner.mcp.denial.revision)
    }

    /// The canonical resource URI.
    pub fn resource(&self) -> &ResourceUri {
        &self.inner.resource
    }

    /// The Protected Resource Metadata document this gate publishes.
    pub fn metadata(&self) -> &ProtectedResourceMetadata {
        &self.inner.metadata
    }

    /// The absolute URL of the metadata document, as sent in every challenge.
    pub fn metadata_url(&self) -> &str {
        &self.inner.resource_metadata_url
    }

    /// The paths the metadata document is served at: the resource-specific one, and the bare
    /// well-known path when the resource has a path of its own.
    pub fn metadata_paths(&self) -> &[String] {
        &self.inner.metadata_paths
    }

    /// An axum router serving the metadata document, outside authentication and with CORS.
    #[cfg(feature = "axum")]
    pub fn metadata_router<S: Clone + Send + Sync + 'static>(&self) -> axum::Router<S> {
        crate::auth::metadata::router(
            &self.inner.metadata_paths,
            self.inner.metadata_bytes.clone(),
        )
    }

    /// Authenticates a request's credentials without a layer: extraction, cache, verification
    /// and the endpoint-wide scope check, exactly as the layer does.
    pub async fn authenticate(
        &self,
        headers: &HeaderMap,
        uri: &Uri,
    ) -> Result<Principal, AuthError> {
        match self.inner.authenticator.first_step(headers, uri) {
            FirstStep::Decided(outcome) => outcome,
            FirstStep::Verify { token, key } => self.inner.authenticator.verify(token, key).await,
        }
    }

    /// How many times a JWK set document was requested, over every remote issuer. A figure for
    /// monitoring and tests: unknown-`kid` refreshes are single-flight and rate-limited, so
    /// this grows slowly however many requests carry unknown keys.
    pub fn jwks_fetch_count(&self) -> u64 {
        #[cfg(feature = "jwks")]
        {
            use crate::auth::keys::KeySource;
            self.inner
                .authenticator
                .jwt
                .iter()
                .flat_map(|jwt| jwt.issuers())
                .map(|issuer| match &issuer.keys {
                    KeySource::Remote(remote) => remote.jwks_fetches(),
                    KeySource::Static(_) => 0,
                })
                .sum()
        }
        #[cfg(not(feature = "jwks"))]
        0
    }

    /// Logs a refusal and renders its response. Authentication happens before the body is
    /// read, so the response also closes an HTTP/1.x connection whose body is left unread.
    pub(crate) fn refuse(
        &self,
        error: &AuthError,
        request: &http::request::Parts,
    ) -> Response<Bytes> {
        let status = error.status().as_u16();
        tracing::info!(
            target: "mcp_gate::auth",
            status,
            error = error.error_code().map(|c| c.as_str()).unwrap_or("none"),
            reason = error.reason(),
            method = %request.method,
            "request refused"
        );
        let mut response = error.to_response(
            &self.inner.resource_metadata_url,
            &self.inner.endpoint_scope,
        );
        crate::layer::buffer::close_if_unread(&mut response, request);
        response
    }
}
