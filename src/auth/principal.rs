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
//!
//! [`Principal::builder`] makes one by hand, to unit-test a policy or a handler:
//!
//! ```
//! use mcp_gate::Principal;
//! use serde_json::json;
//!
//! let alice = Principal::builder()
//!     .issuer("https://auth.example.com")
//!     .subject("alice")
//!     .client_id("claude-desktop")
//!     .scopes(["mcp:read", "mcp:admin"])
//!     .claims(json!({"tenant": "acme"}))
//!     .build()
//!     .expect("a well-formed principal");
//! assert!(alice.has_scope("mcp:admin"));
//! assert_eq!(alice.claims()["sub"], "alice");
//! assert_eq!(alice.claims()["tenant"], "acme");
//! ```

use std::sync::Arc;

use serde_json::{Map, Value};

use super::claims::principal_from_claims;
use super::scope::{ScopeHierarchy, ScopeSet, is_valid_scope_token};

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
///
/// The layer never takes a `Principal` from outside. It inserts the one it verified into the
/// request it forwards, replacing any value already there, and reads one back only after that;
/// a request it refuses never reaches the inner service. A principal made with
/// [`Principal::builder`] is for tests and for calling a policy by hand: it proves nothing,
/// and code that puts one into a request itself vouches for it.
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
    /// `cnf.jkt`: the thumbprint of the DPoP key the token is bound to (RFC 9449 §6).
    dpop_jkt: Option<String>,
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
    pub dpop_jkt: Option<String>,
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
            dpop_jkt: parts.dpop_jkt,
        }))
    }

    /// Starts a principal by hand, for tests and for hand-written callers of a policy.
    ///
    /// The built principal is read from its claims by the same code that reads a verified
    /// token's, so its accessors agree with [`claims`](Self::claims) exactly as they would for
    /// a token carrying those claims. See [`PrincipalBuilder`].
    pub fn builder() -> PrincipalBuilder {
        PrincipalBuilder::default()
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

    /// The SHA-256 thumbprint of the key the token is bound to (`cnf.jkt`, RFC 9449 §6), if
    /// it is DPoP-bound. The layer admits such a token only with a valid DPoP proof made with
    /// that key.
    pub fn dpop_jkt(&self) -> Option<&str> {
        self.0.dpop_jkt.as_deref()
    }
}

/// Why [`PrincipalBuilder::build`] made no principal.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PrincipalError {
    /// The claims given to [`PrincipalBuilder::claims`] are not a JSON object.
    #[error("the claims must be a JSON object")]
    ClaimsNotAnObject,
    /// No issuer: neither [`PrincipalBuilder::issuer`] nor a string `iss` claim, or an empty
    /// one. The layer never admits a token without an issuer it trusts.
    #[error("no issuer: call PrincipalBuilder::issuer or give a non-empty string `iss` claim")]
    MissingIssuer,
    /// A scope given to [`PrincipalBuilder::scopes`] does not follow RFC 6749 §3.3.
    #[error(
        "invalid scope {0:?}: scopes are printable ASCII without spaces, quotes or backslashes"
    )]
    InvalidScope(String),
    /// A claim the layer reads has a type a verified token could not have had (for example
    /// `scope` as a number, or an `authorization_details` entry that is not an object): the
    /// layer would have refused such a token as `invalid_token`.
    #[error(
        "a claim the layer reads (iss, sub, client_id, azp, scope, scp, authorization_details, exp) \
         has the wrong type"
    )]
    BadClaim,
}

/// Builds a [`Principal`] by hand; made by [`Principal::builder`].
///
/// Every setter is optional except the issuer (by [`issuer`](Self::issuer) or an `iss`
/// claim). A typed setter replaces the claim of the same name in [`claims`](Self::claims),
/// whatever the order of the calls: `issuer` sets `iss`, `subject` sets `sub`, `client_id` sets
/// `client_id`, `scopes` sets `scope` (and removes `scp`), `authorization_details` and
/// `expires_at` (`exp`) set theirs. The principal is then read from the claims by the code that
/// reads a verified token's, with the [scope hierarchy](Self::scope_hierarchy) if one is given,
/// so it holds nothing a token carrying those claims would not have given it.
///
/// ```
/// use mcp_gate::{Principal, ScopeHierarchy, TokenKind};
/// use serde_json::json;
///
/// let principal = Principal::builder()
///     .claims(json!({"iss": "https://auth.example.com", "sub": "bob", "scp": ["mcp:admin"]}))
///     .scope_hierarchy(ScopeHierarchy::new().implies("mcp:admin", ["mcp:read"]))
///     .token_kind(TokenKind::Introspected)
///     .build()?;
/// assert_eq!(principal.issuer(), "https://auth.example.com");
/// assert_eq!(principal.subject(), Some("bob"));
/// assert!(principal.has_scope("mcp:read"));
/// assert!(!principal.scopes().contains("mcp:read"));
///
/// assert!(Principal::builder().subject("no issuer").build().is_err());
/// # Ok::<_, mcp_gate::auth::PrincipalError>(())
/// ```
#[derive(Clone, Debug, Default)]
#[must_use]
pub struct PrincipalBuilder {
    issuer: Option<String>,
    subject: Option<String>,
    client_id: Option<String>,
    scopes: Option<Vec<String>>,
    authorization_details: Option<Vec<Value>>,
    claims: Option<Value>,
    expires_at: Option<u64>,
    hierarchy: ScopeHierarchy,
    kind: Option<TokenKind>,
}

impl PrincipalBuilder {
    /// The issuer that vouched for the token (`iss`).
    pub fn issuer(mut self, issuer: impl Into<String>) -> Self {
        self.issuer = Some(issuer.into());
        self
    }

    /// The subject (`sub`).
    pub fn subject(mut self, subject: impl Into<String>) -> Self {
        self.subject = Some(subject.into());
        self
    }

    /// The OAuth client the token was issued to (`client_id`).
    pub fn client_id(mut self, client_id: impl Into<String>) -> Self {
        self.client_id = Some(client_id.into());
        self
    }

    /// The granted scopes (`scope`); replaces any `scope` and `scp` claim. Each must be one
    /// RFC 6749 scope token.
    pub fn scopes<I, S>(mut self, scopes: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.scopes = Some(scopes.into_iter().map(Into::into).collect());
        self
    }

    /// RFC 9396 `authorization_details`; each entry must be a JSON object.
    pub fn authorization_details<I>(mut self, details: I) -> Self
    where
        I: IntoIterator<Item = Value>,
    {
        self.authorization_details = Some(details.into_iter().collect());
        self
    }

    /// Every claim of the token, as a JSON object. Claims the layer does not read are kept as
    /// given; the typed setters replace the ones they name.
    pub fn claims(mut self, claims: Value) -> Self {
        self.claims = Some(claims);
        self
    }

    /// The expiry (`exp`, seconds since the Unix epoch).
    pub fn expires_at(mut self, expires_at: u64) -> Self {
        self.expires_at = Some(expires_at);
        self
    }

    /// The scope hierarchy that widens [`Principal::effective_scopes`], as
    /// `GateBuilder::scope_hierarchy` does for verified tokens. None by default.
    pub fn scope_hierarchy(mut self, hierarchy: ScopeHierarchy) -> Self {
        self.hierarchy = hierarchy;
        self
    }

    /// How the token was verified ([`TokenKind::Jwt`] by default).
    pub fn token_kind(mut self, kind: TokenKind) -> Self {
        self.kind = Some(kind);
        self
    }

    /// The principal, read from the claims as a verified token's would be.
    pub fn build(self) -> Result<Principal, PrincipalError> {
        let mut claims = match self.claims {
            None => Map::new(),
            Some(Value::Object(claims)) => claims,
            Some(_) => return Err(PrincipalError::ClaimsNotAnObject),
        };
        if let Some(issuer) = self.issuer {
            claims.insert("iss".into(), Value::String(issuer));
        }
        if let Some(subject) = self.subject {
            claims.insert("sub".into(), Value::String(subject));
        }
        if let Some(client_id) = self.client_id {
            claims.insert("client_id".into(), Value::String(client_id));
        }
        if let Some(scopes) = self.scopes {
            if let Some(bad) = scopes.iter().find(|s| !is_valid_scope_token(s)) {
                return Err(PrincipalError::InvalidScope(bad.clone()));
            }
            claims.remove("scp");
            claims.insert("scope".into(), Value::String(scopes.join(" ")));
        }
        if let Some(details) = self.authorization_details {
            claims.insert("authorization_details".into(), Value::Array(details));
        }
        if let Some(expires_at) = self.expires_at {
            claims.insert("exp".into(), Value::from(expires_at));
        }
        let issuer = match claims.get("iss") {
            Some(Value::String(issuer)) if !issuer.is_empty() => issuer.clone(),
            None | Some(Value::Null) | Some(Value::String(_)) => {
                return Err(PrincipalError::MissingIssuer);
            }
            Some(_) => return Err(PrincipalError::BadClaim),
        };
        let kind = self.kind.unwrap_or(TokenKind::Jwt);
        principal_from_claims(claims, &issuer, kind, &self.hierarchy)
            .map_err(|_| PrincipalError::BadClaim)
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn alice() -> PrincipalBuilder {
        Principal::builder().issuer("https://as.example")
    }

    #[test]
    fn typed_setters_and_claims_agree() {
        let p = alice()
            .subject("alice")
            .client_id("cli")
            .scopes(["b", "a"])
            .authorization_details([json!({"type": "payment"})])
            .expires_at(1_700_000_000)
            .claims(json!({"sub": "mallory", "scp": ["root"], "azp": "other", "tenant": "t"}))
            .build()
            .unwrap();
        assert_eq!(p.issuer(), "https://as.example");
        assert_eq!(p.subject(), Some("alice"));
        assert_eq!(p.client_id(), Some("cli"));
        assert_eq!(p.scopes().iter().collect::<Vec<_>>(), ["a", "b"]);
        assert!(!p.has_scope("root"), "scopes() replaces scp");
        assert_eq!(p.authorization_details(), [json!({"type": "payment"})]);
        assert_eq!(p.expires_at(), Some(1_700_000_000));
        assert_eq!(p.token_kind(), TokenKind::Jwt);
        let claims = p.claims();
        assert_eq!(claims["iss"], "https://as.example");
        assert_eq!(claims["sub"], "alice");
        assert_eq!(claims["client_id"], "cli");
        assert_eq!(claims["scope"], "b a");
        assert_eq!(claims["exp"], 1_700_000_000u64);
        assert_eq!(claims["tenant"], "t");
        assert!(claims.get("scp").is_none());
    }

    #[test]
    fn read_like_a_token() {
        let p = Principal::builder()
            .claims(json!({"iss": "https://as.example", "azp": "cli", "scope": "x  y"}))
            .scope_hierarchy(ScopeHierarchy::new().implies("x", ["z"]))
            .build()
            .unwrap();
        assert_eq!(p.client_id(), Some("cli"));
        assert!(p.has_scope("z"));
        assert!(!p.scopes().contains("z"));
        assert!(p.subject().is_none());
    }

    #[test]
    fn what_no_verified_token_could_give_is_refused() {
        assert_eq!(
            Principal::builder().build().err(),
            Some(PrincipalError::MissingIssuer)
        );
        assert_eq!(
            Principal::builder().issuer("").build().err(),
            Some(PrincipalError::MissingIssuer)
        );
        assert_eq!(
            alice().claims(json!(["not", "an", "object"])).build().err(),
            Some(PrincipalError::ClaimsNotAnObject)
        );
        assert_eq!(
            alice().scopes(["a b"]).build().err(),
            Some(PrincipalError::InvalidScope("a b".into()))
        );
        for claims in [
            json!({"iss": 7}),
            json!({"sub": 5}),
            json!({"scope": ["a"]}),
            json!({"exp": "soon"}),
        ] {
            let built = Principal::builder()
                .issuer_if_absent(&claims)
                .claims(claims.clone())
                .build();
            assert_eq!(built.err(), Some(PrincipalError::BadClaim), "{claims}");
        }
        assert_eq!(
            alice().authorization_details([json!("x")]).build().err(),
            Some(PrincipalError::BadClaim)
        );
    }

    impl PrincipalBuilder {
        /// Sets an issuer unless the claims carry `iss` (whose type the test is about).
        fn issuer_if_absent(self, claims: &Value) -> Self {
            if claims.get("iss").is_some() {
                self
            } else {
                self.issuer("https://as.example")
            }
        }
    }
}
