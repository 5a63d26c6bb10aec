//! The verified caller, handed to the inner service in request extensions.
//!
//! The layer inserts a [`Principal`] into every request it forwards and removes the
//! `Authorization` header, so the inner service learns who is calling without ever holding the
//! bearer token. Axum handlers take it as an extractor; rmcp tool handlers read it from
//! `Extension<http::request::Parts>`:
//!
//! ```
//! use mcp_gate::Principal;
//!
//! async fn handler(principal: Principal) -> String {
//!     format!("hello {}", principal.subject().unwrap_or("anonymous"))
//! }
//! # let _ = axum::Router::<()>::new().route("/", axum::routing::get(handler));
//! ```

use std::sync::Arc;

use serde_json::{Map, Value};

use super::scope::ScopeSet;

/// How the token was verified.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TokenKind {
    /// A JWT verified against the issuer's keys.
    Jwt,
    /// An opaque token checked by RFC 7662 introspection.
    Introspected,
}

/// A caller whose access token the layer verified.
///
/// Cheap to clone (one reference count).
#[derive(Clone, Debug)]
pub struct Principal(Arc<PrincipalData>);

#[derive(Debug)]
struct PrincipalData {
    issuer: String,
    subject: Option<String>,
    client_id: Option<String>,
    scopes: ScopeSet,
    effective_scopes: ScopeSet,
    authorization_details: Vec<Value>,
    claims: Map<String, Value>,
    expires_at: Option<u64>,
    kind: TokenKind,
}

/// The parts a [`Principal`] is made of; used by the verifiers.
pub(crate) struct PrincipalParts {
    pub issuer: String,
    pub subject: Option<String>,
    pub client_id: Option<String>,
    pub scopes: ScopeSet,
    pub effective_scopes: ScopeSet,
    pub authorization_details: Vec<Value>,
    pub claims: Map<String, Value>,
    pub expires_at: Option<u64>,
    pub kind: TokenKind,
}

impl Principal {
    pub(crate) fn new(parts: PrincipalParts) -> Self {
        Self(Arc::new(PrincipalData {
            issuer: parts.issuer,
            subject: parts.subject,
            client_id: parts.client_id,
            scopes: parts.scopes,
            effective_scopes: parts.effective_scopes,
            authorization_details: parts.authorization_details,
            claims: parts.claims,
            expires_at: parts.expires_at,
            kind: parts.kind,
        }))
    }

    /// The issuer (`iss`) that vouched for the token.
    pub fn issuer(&self) -> &str {
        &self.0.issuer
    }

    /// The subject (`sub`), if the token names one.
    pub fn subject(&self) -> Option<&str> {
        self.0.subject.as_deref()
    }

    /// The OAuth client the token was issued to (`client_id`, or `azp` when that is absent).
    pub fn client_id(&self) -> Option<&str> {
        self.0.client_id.as_deref()
    }

    /// The scopes the token was granted, as the issuer wrote them (`scope` and `scp`).
    pub fn scopes(&self) -> &ScopeSet {
        &self.0.scopes
    }

    /// Whether the token grants `scope`, directly or through the configured scope hierarchy.
    pub fn has_scope(&self, scope: &str) -> bool {
        self.0.effective_scopes.contains(scope)
    }

    /// The granted scopes plus everything they imply under the scope hierarchy.
    pub fn effective_scopes(&self) -> &ScopeSet {
        &self.0.effective_scopes
    }

    /// RFC 9396 `authorization_details` carried by the token (empty when absent).
    pub fn authorization_details(&self) -> &[Value] {
        &self.0.authorization_details
    }

    /// Every claim of the token (for a JWT) or every member of the introspection response.
    pub fn claims(&self) -> &Map<String, Value> {
        &self.0.claims
    }

    /// The expiry (`exp`, seconds since the Unix epoch), if known.
    pub fn expires_at(&self) -> Option<u64> {
        self.0.expires_at
    }

    /// How the token was verified.
    pub fn token_kind(&self) -> TokenKind {
        self.0.kind
    }
}

#[cfg(feature = "axum")]
mod extract {
    use axum::extract::{FromRequestParts, OptionalFromRequestParts};
    use axum::response::{IntoResponse, Response};
    use http::StatusCode;
    use http::request::Parts;

    use super::Principal;

    /// Rejection of the [`Principal`] extractor: the route is not behind the layer.
    ///
    /// This is a server misconfiguration, so it answers 500 rather than 401: a request can only
    /// reach such a handler if the layer was never applied to it.
    #[derive(Debug, Clone, Copy)]
    pub struct MissingPrincipal;

    impl IntoResponse for MissingPrincipal {
        fn into_response(self) -> Response {
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "no verified principal: this route is not behind the mcp-gate layer",
            )
                .into_response()
        }
    }

    impl std::fmt::Display for MissingPrincipal {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("no verified principal: this route is not behind the mcp-gate layer")
        }
    }

    impl std::error::Error for MissingPrincipal {}

    impl<S: Send + Sync> FromRequestParts<S> for Principal {
        type Rejection = MissingPrincipal;

        async fn from_request_parts(
            parts: &mut Parts,
            _state: &S,
        ) -> Result<Self, Self::Rejection> {
            parts
                .extensions
                .get::<Principal>()
                .cloned()
                .ok_or(MissingPrincipal)
        }
    }

    impl<S: Send + Sync> OptionalFromRequestParts<S> for Principal {
        type Rejection = std::convert::Infallible;

        async fn from_request_parts(
            parts: &mut Parts,
            _state: &S,
        ) -> Result<Option<Self>, Self::Rejection> {
            Ok(parts.extensions.get::<Principal>().cloned())
        }
    }
}

#[cfg(feature = "axum")]
pub use extract::MissingPrincipal;
