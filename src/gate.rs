//! [`Gate`]: the built, shareable configuration behind the layer.

use std::sync::Arc;

use http::{HeaderMap, Uri};

use crate::auth::authenticator::FirstStep;
use crate::auth::metadata::ProtectedResourceMetadata;
use crate::auth::{AuthRejection, Principal};
use crate::layer::{GateLayer, GateService};
use crate::resource::ResourceUri;
use crate::settings::Settings;

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
    pub(crate) inner: Arc<Settings>,
}

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gate")
            .field("resource", &self.inner.resource.uri)
            .field("required_scopes", &self.inner.resource.endpoint_scope)
            .finish_non_exhaustive()
    }
}

impl Gate {
    pub(crate) fn from_settings(inner: Settings) -> Self {
        Self {
            inner: Arc::new(inner),
        }
    }

    /// The Tower layer that authenticates and authorizes every request before the inner
    /// service sees it.
    pub fn layer(&self) -> GateLayer {
        GateLayer::new(self.clone())
    }

    /// The pinned SEP-2643 revision every denial is rendered in.
    pub fn revision(&self) -> crate::denial::Revision {
        self.inner.denial.revision
    }

    /// Decisions on the calls this gate holds for approval, in its task store: approve or
    /// refuse a task, list those waiting. Refusals are rendered in this gate's revision.
    pub fn tasks(&self) -> crate::tasks::Approvals {
        crate::tasks::Approvals::new(self.inner.tasks.store.clone())
            .with_revision(self.inner.denial.revision)
    }

    /// Task notifications dropped in this process because a listen's reader was slower than
    /// its queue (0 when task notifications are off).
    pub fn task_notifications_dropped(&self) -> u64 {
        self.inner
            .tasks
            .notifications
            .as_ref()
            .map_or(0, |listeners| listeners.dropped())
    }

    /// The canonical resource URI.
    pub fn resource(&self) -> &ResourceUri {
        &self.inner.resource.uri
    }

    /// The Protected Resource Metadata document this gate publishes.
    pub fn metadata(&self) -> &ProtectedResourceMetadata {
        &self.inner.resource.metadata
    }

    /// The absolute URL of the metadata document, as sent in every challenge.
    pub fn metadata_url(&self) -> &str {
        &self.inner.resource.metadata_url
    }

    /// The paths the metadata document is served at: the resource-specific one, and the bare
    /// well-known path when the resource has a path of its own.
    pub fn metadata_paths(&self) -> &[String] {
        &self.inner.resource.metadata_paths
    }

    /// An axum router serving the metadata document, outside authentication and with CORS.
    #[cfg(feature = "axum")]
    pub fn metadata_router<S: Clone + Send + Sync + 'static>(&self) -> axum::Router<S> {
        crate::auth::metadata::router(
            &self.inner.resource.metadata_paths,
            self.inner.resource.metadata_bytes.clone(),
        )
    }

    /// Authenticates a request's credentials without a layer: extraction, cache, verification
    /// and the endpoint-wide scope check, exactly as the layer does. A refusal is the layer's
    /// own answer: [`AuthRejection`] is an axum `IntoResponse`, and
    /// [`error`](AuthRejection::error) says why. A token presented with the DPoP scheme is
    /// refused here ([`AuthError::UnsupportedScheme`](crate::AuthError::UnsupportedScheme)):
    /// its proof names the request's method and URL, which only the layer sees; a DPoP-bound
    /// token presented as `Bearer` is refused as everywhere.
    pub async fn authenticate(
        &self,
        headers: &HeaderMap,
        uri: &Uri,
    ) -> Result<Principal, AuthRejection> {
        let outcome = match self.inner.authenticator.first_step(headers, uri) {
            FirstStep::Decided(outcome) => outcome,
            FirstStep::Verify { token, key } => self.inner.authenticator.verify(token, key).await,
            // A proof is checked against the request's method and URL, which are not given
            // here: a DPoP presentation is for the layer.
            FirstStep::Prove { .. } => Err(crate::AuthError::UnsupportedScheme),
        };
        outcome.map_err(|error| {
            AuthRejection::new(
                error,
                self.inner.resource.metadata_url.as_str(),
                self.inner.resource.endpoint_scope.as_str(),
            )
        })
    }

    /// Whether this gate can serve now: keys loaded for every issuer with remote keys, each
    /// store reachable, the policy loaded. An issuer whose keys were never fetched starts a
    /// fetch (unless one is cooling down), so a probe that asks again finds them. Serve it
    /// with [`readiness::handler`](crate::readiness::handler).
    pub async fn readiness(&self) -> crate::readiness::Readiness {
        crate::readiness::report(&self.inner, false).await
    }

    /// The key prefetch before serving: fetches every remote issuer's keys now (each waited
    /// for, at most twice its request timeout), then reports as
    /// [`readiness`](Self::readiness) does. Keys are otherwise fetched at the first token.
    ///
    /// ```no_run
    /// # async fn run(gate: mcp_gate::Gate) {
    /// let report = gate.load_keys().await;
    /// if !report.is_ready() {
    ///     eprintln!("starting anyway: {report}");
    /// }
    /// # }
    /// ```
    pub async fn load_keys(&self) -> crate::readiness::Readiness {
        crate::readiness::report(&self.inner, true).await
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
}

// Revocation (`docs/revocation.md`).
impl Gate {
    /// Puts `revocation` in force on every replica that shares this gate's revocation set: a
    /// token, a `jti`, a subject or a client refused from the moment this returns `Ok` (on
    /// this replica at once, on the others within a second through a shared set). Refused
    /// when revocation is not configured, when the revocation names an empty value, when the
    /// set is full or unreachable: the caller must then know the revocation is not in force.
    ///
    /// ```no_run
    /// # async fn run(gate: mcp_gate::Gate) -> Result<(), mcp_gate::revocation::RevokeError> {
    /// use mcp_gate::auth::Revocation;
    /// gate.revoke(Revocation::subject("https://auth.example.com", "alice")).await?;
    /// # Ok(()) }
    /// ```
    pub async fn revoke(
        &self,
        revocation: crate::auth::Revocation,
    ) -> Result<crate::revocation::Revoked, crate::revocation::RevokeError> {
        match &self.inner.revocations {
            Some(revocations) => revocations.revoke(revocation).await,
            None => Err(crate::revocation::RevokeError::NotConfigured),
        }
    }
}

// The layer's public constructors take a `Gate`; they are written here so that the shell
// (`layer`) holds only the settings and never names the gate.
impl GateLayer {
    /// A layer enforcing `gate` (the same as [`Gate::layer`]).
    pub fn new(gate: Gate) -> Self {
        Self {
            settings: gate.inner,
        }
    }
}

impl<S> GateService<S> {
    /// Wraps `inner` with `gate`.
    pub fn new(inner: S, gate: Gate) -> Self {
        Self::with_settings(inner, gate.inner)
    }
}
