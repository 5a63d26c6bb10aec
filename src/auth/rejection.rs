//! Request-time refusals and their wire form.
//!
//! Every way a request can fail authentication is one [`AuthError`] variant with a fixed HTTP
//! status, a `WWW-Authenticate` challenge and a small JSON body that says the same thing as the
//! header. Reason codes (`AuthError::reason`) are stable strings, used in logs and in
//! `error_description`; they never contain a token, a claim value or anything else a client sent.

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};

use super::challenge::{BEARER, Challenge, DPOP, ErrorCode};
use super::dpop::DpopError;
use super::scope::ScopeSet;

/// `Retry-After` of [`AuthError::KeysUnavailable`]: no key set was ever fetched, and the next
/// fetch is tried at most once per refresh cooldown (`KeyRefresh::cooldown`, 10 s by
/// default), so an earlier retry is refused the same way.
const KEYS_UNAVAILABLE_RETRY_AFTER: &str = "10";

/// `Retry-After` of [`AuthError::IntrospectionUnavailable`]: every request introspects again
/// (a failure is not cached), so a retry is worth it as soon as the endpoint may be back; one
/// introspection call waits at most 5 s by default.
const INTROSPECTION_UNAVAILABLE_RETRY_AFTER: &str = "5";

/// `Retry-After` of [`AuthError::DpopReplayUnavailable`] when the replay store is unreachable
/// (it reconnects by itself within seconds).
const DPOP_REPLAY_UNAVAILABLE_RETRY_AFTER: &str = "2";

/// `Retry-After` of [`AuthError::DpopReplayUnavailable`] when the replay store is full or the
/// key's quota is used: room comes back as recorded proofs pass their window.
const DPOP_REPLAY_FULL_RETRY_AFTER: &str = "30";

/// The header that carries a server-chosen DPoP nonce (RFC 9449 §8).
pub(crate) const DPOP_NONCE: &str = "dpop-nonce";

/// What a refusal says about DPoP when DPoP is enabled: the accepted algorithms, and whether
/// the caller presented its token with the DPoP scheme (its error challenge is then a `DPoP`
/// one, RFC 9449 §7.1; otherwise `Bearer`, with a `DPoP algs="…"` challenge beside it).
#[derive(Clone, Copy, Debug)]
pub(crate) struct DpopChallenge<'a> {
    /// The accepted proof algorithms, space-separated.
    pub algs: &'a str,
    /// Whether the caller used the DPoP scheme.
    pub presented: bool,
}
/// `Retry-After` of [`AuthError::RevocationsUnavailable`]: the feed is reconnected (and its
/// set reloaded) every second while it is down.
const REVOCATIONS_UNAVAILABLE_RETRY_AFTER: &str = "1";

/// Why a request was malformed (RFC 6750 `invalid_request`, HTTP 400).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum InvalidRequest {
    /// More than one `Authorization` header.
    MultipleAuthorizationHeaders,
    /// The `Authorization: Bearer` value is not one RFC 6750 `b64token`.
    MalformedAuthorizationHeader,
    /// A token in the query string (`access_token`), which the layer never accepts.
    TokenInQuery,
    /// A form-encoded body, the RFC 6750 §2.2 token carrier, which the layer never accepts.
    FormEncodedBody,
}

impl InvalidRequest {
    /// Stable reason code.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::MultipleAuthorizationHeaders => "multiple_authorization_headers",
            Self::MalformedAuthorizationHeader => "malformed_authorization_header",
            Self::TokenInQuery => "token_in_query",
            Self::FormEncodedBody => "form_encoded_body",
        }
    }

    fn description(self) -> &'static str {
        match self {
            Self::MultipleAuthorizationHeaders => "more than one Authorization header",
            Self::MalformedAuthorizationHeader => {
                "the Authorization header is not a valid Bearer credential"
            }
            Self::TokenInQuery => {
                "access tokens are accepted only in the Authorization header, not in the query"
            }
            Self::FormEncodedBody => {
                "access tokens are accepted only in the Authorization header, not in a form body"
            }
        }
    }
}

/// Why a token was refused (RFC 6750 `invalid_token`, HTTP 401).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum InvalidToken {
    /// Not a JWS compact serialisation, or its parts do not decode.
    Malformed,
    /// Longer than the configured maximum token length.
    TooLarge,
    /// The JWT `typ` header is not an access-token type.
    UnsupportedType,
    /// The JWT header names critical extensions (`crit`).
    CriticalHeader,
    /// The `alg` is not allowed for the key that would verify it.
    DisallowedAlgorithm,
    /// No known key matches the token's `kid`, even after a key refresh.
    UnknownKey,
    /// The signature does not verify.
    BadSignature,
    /// `exp` has passed (beyond the leeway).
    Expired,
    /// `nbf` is in the future (beyond the leeway).
    NotYetValid,
    /// `iss` is missing or is not a configured issuer.
    WrongIssuer,
    /// `aud` does not contain the canonical resource URI.
    WrongAudience,
    /// A required claim (`exp`, `aud`) is missing.
    MissingClaim,
    /// A claim has the wrong type (for example `scope` as a number).
    BadClaim,
    /// The introspection endpoint says the token is not active.
    Inactive,
    /// The token is not a JWT and no introspection endpoint is configured.
    Unverifiable,
    /// The token is bound (`cnf`) by a confirmation method the layer cannot check (mutual
    /// TLS, `x5t#S256`).
    UnsupportedBinding,
    /// The token is bound to a DPoP key (`cnf.jkt`) and was presented as a bearer token
    /// (RFC 9449 §7.2): it is accepted only with the DPoP scheme and a proof.
    DpopBound,
    /// The token is not DPoP-bound, and it was presented with the DPoP scheme, or the
    /// resource requires DPoP-bound tokens.
    NotDpopBound,
    /// The token, its `jti`, its subject or its client was revoked (`docs/revocation.md`).
    Revoked,
}

impl InvalidToken {
    /// Stable reason code.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Malformed => "malformed",
            Self::TooLarge => "too_large",
            Self::UnsupportedType => "unsupported_type",
            Self::CriticalHeader => "critical_header",
            Self::DisallowedAlgorithm => "disallowed_algorithm",
            Self::UnknownKey => "unknown_key",
            Self::BadSignature => "bad_signature",
            Self::Expired => "expired",
            Self::NotYetValid => "not_yet_valid",
            Self::WrongIssuer => "wrong_issuer",
            Self::WrongAudience => "wrong_audience",
            Self::MissingClaim => "missing_claim",
            Self::BadClaim => "bad_claim",
            Self::Inactive => "inactive",
            Self::Unverifiable => "unverifiable",
            Self::UnsupportedBinding => "unsupported_binding",
            Self::DpopBound => "dpop_bound",
            Self::NotDpopBound => "not_dpop_bound",
            Self::Revoked => "revoked",
        }
    }

    fn description(self) -> &'static str {
        match self {
            Self::Malformed => "the token is malformed",
            Self::TooLarge => "the token is too large",
            Self::UnsupportedType => "the token type is not an access token",
            Self::CriticalHeader => "the token has critical header extensions",
            Self::DisallowedAlgorithm => "the token algorithm is not allowed",
            Self::UnknownKey => "the token was signed with an unknown key",
            Self::BadSignature => "the token signature is invalid",
            Self::Expired => "the token has expired",
            Self::NotYetValid => "the token is not yet valid",
            Self::WrongIssuer => "the token issuer is not trusted",
            Self::WrongAudience => "the token audience is not this resource",
            Self::MissingClaim => "the token lacks a required claim",
            Self::BadClaim => "the token has a malformed claim",
            Self::Inactive => "the token is not active",
            Self::Unverifiable => "the token cannot be verified",
            Self::UnsupportedBinding => "the token is bound by a method this resource cannot check",
            Self::DpopBound => {
                "the token is DPoP-bound: present it with the DPoP scheme and a proof"
            }
            Self::NotDpopBound => "the token is not DPoP-bound, and this request needs one that is",
            Self::Revoked => "the token has been revoked",
        }
    }
}

/// A request refused before it reaches the inner service.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AuthError {
    /// No credential at all (401, a challenge without an error code, RFC 6750 §3.1).
    #[error("no bearer token was presented")]
    MissingCredential,
    /// An `Authorization` header with another scheme (401, like a missing credential).
    #[error("the Authorization header does not use the Bearer scheme")]
    UnsupportedScheme,
    /// A malformed request (400 `invalid_request`).
    #[error("invalid request: {}", .0.as_str())]
    InvalidRequest(InvalidRequest),
    /// A token that does not verify (401 `invalid_token`).
    #[error("invalid token: {}", .0.as_str())]
    InvalidToken(InvalidToken),
    /// A valid token without every scope the endpoint needs (403 `insufficient_scope`).
    #[error("insufficient scope")]
    InsufficientScope {
        /// Every scope the endpoint needs (not only the missing ones).
        required: ScopeSet,
    },
    /// Keys could not be fetched and none are known yet (503).
    #[error("verification keys are unavailable")]
    KeysUnavailable,
    /// The introspection endpoint could not be reached or answered nonsense (503).
    #[error("token introspection is unavailable")]
    IntrospectionUnavailable,
    /// A DPoP proof that is missing, several, or fails a check, replayed included (401
    /// `invalid_dpop_proof`, RFC 9449 §7.1).
    #[error("invalid DPoP proof: {}", .0.code())]
    InvalidDpopProof(DpopError),
    /// The DPoP proof lacks the server's current nonce (401 `use_dpop_nonce`, RFC 9449 §9);
    /// the response carries `nonce` in `DPoP-Nonce`.
    #[error("the DPoP proof must carry the server's nonce")]
    UseDpopNonce {
        /// A fresh nonce for the client's next proof.
        nonce: String,
    },
    /// The replay store could not record the proof's `jti` (503): unreachable, full, or the
    /// key's quota used. The proof is refused, never let through unrecorded.
    #[error("the DPoP replay store cannot record the proof")]
    DpopReplayUnavailable {
        /// Whether the store is full (or the key's quota used) rather than unreachable.
        full: bool,
    },
    /// The revocation feed is unreachable, or its last confirmed sync is older than the
    /// configuration accepts (503; `docs/revocation.md`).
    #[error("the revocation feed is unavailable")]
    RevocationsUnavailable,
}

impl AuthError {
    /// The HTTP status of the refusal.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::MissingCredential
            | Self::UnsupportedScheme
            | Self::InvalidToken(_)
            | Self::InvalidDpopProof(_)
            | Self::UseDpopNonce { .. } => StatusCode::UNAUTHORIZED,
            Self::InvalidRequest(_) => StatusCode::BAD_REQUEST,
            Self::InsufficientScope { .. } => StatusCode::FORBIDDEN,
            Self::KeysUnavailable
            | Self::IntrospectionUnavailable
            | Self::DpopReplayUnavailable { .. }
            | Self::RevocationsUnavailable => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// The RFC 6750 error code, if the refusal has one.
    pub fn error_code(&self) -> Option<ErrorCode> {
        match self {
            Self::MissingCredential | Self::UnsupportedScheme => None,
            Self::InvalidRequest(_) => Some(ErrorCode::InvalidRequest),
            Self::InvalidToken(_) => Some(ErrorCode::InvalidToken),
            Self::InsufficientScope { .. } => Some(ErrorCode::InsufficientScope),
            Self::InvalidDpopProof(_) => Some(ErrorCode::InvalidDpopProof),
            Self::UseDpopNonce { .. } => Some(ErrorCode::UseDpopNonce),
            Self::KeysUnavailable
            | Self::IntrospectionUnavailable
            | Self::DpopReplayUnavailable { .. }
            | Self::RevocationsUnavailable => None,
        }
    }

    /// A stable reason code for logs and metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::MissingCredential => "missing_credential",
            Self::UnsupportedScheme => "unsupported_scheme",
            Self::InvalidRequest(r) => r.as_str(),
            Self::InvalidToken(r) => r.as_str(),
            Self::InsufficientScope { .. } => "insufficient_scope",
            Self::KeysUnavailable => "keys_unavailable",
            Self::IntrospectionUnavailable => "introspection_unavailable",
            Self::InvalidDpopProof(e) => e.reason(),
            Self::UseDpopNonce { .. } => "use_dpop_nonce",
            Self::DpopReplayUnavailable { .. } => "dpop_replay_unavailable",
            Self::RevocationsUnavailable => "revocations_unavailable",
        }
    }

    /// The `Retry-After` seconds of a refusal that is no fault of the request (a 503, sent
    /// without a challenge); `None` for every other refusal.
    fn retry_after(&self) -> Option<&'static str> {
        match self {
            Self::KeysUnavailable => Some(KEYS_UNAVAILABLE_RETRY_AFTER),
            Self::IntrospectionUnavailable => Some(INTROSPECTION_UNAVAILABLE_RETRY_AFTER),
            Self::DpopReplayUnavailable { full: false } => {
                Some(DPOP_REPLAY_UNAVAILABLE_RETRY_AFTER)
            }
            Self::DpopReplayUnavailable { full: true } => Some(DPOP_REPLAY_FULL_RETRY_AFTER),
            Self::RevocationsUnavailable => Some(REVOCATIONS_UNAVAILABLE_RETRY_AFTER),
            _ => None,
        }
    }

    pub(crate) fn description(&self) -> &'static str {
        match self {
            Self::MissingCredential => "this resource needs a bearer token",
            Self::UnsupportedScheme => "this resource accepts only Bearer credentials",
            Self::InvalidRequest(r) => r.description(),
            Self::InvalidToken(r) => r.description(),
            Self::InsufficientScope { .. } => "the token lacks scopes this resource needs",
            Self::KeysUnavailable => "token verification keys are temporarily unavailable",
            Self::IntrospectionUnavailable => "token introspection is temporarily unavailable",
            Self::InvalidDpopProof(_) => "the DPoP proof is missing or invalid",
            Self::UseDpopNonce { .. } => "the DPoP proof must carry the nonce in DPoP-Nonce",
            Self::DpopReplayUnavailable { .. } => {
                "DPoP proofs cannot be checked for replay at the moment"
            }
            Self::RevocationsUnavailable => "the revocation feed is temporarily unavailable",
        }
    }

    /// Renders the refusal: status, `WWW-Authenticate`, `Cache-Control: no-store` and a JSON
    /// body that agrees with the header.
    ///
    /// `endpoint_scope` is the space-separated set of scopes the endpoint needs; it is sent as
    /// the challenge's `scope` so that clients request everything at once.
    pub(crate) fn to_response(
        &self,
        resource_metadata: &str,
        endpoint_scope: &str,
    ) -> Response<Bytes> {
        self.to_response_in(resource_metadata, endpoint_scope, None)
    }

    /// Whether the refusal is about the DPoP proof rather than the token.
    fn is_dpop_error(&self) -> bool {
        matches!(self, Self::InvalidDpopProof(_) | Self::UseDpopNonce { .. })
    }

    /// [`to_response`](Self::to_response), with the `DPoP` challenge beside (or instead of,
    /// for a DPoP caller's error) the `Bearer` one when DPoP is enabled, and `DPoP-Nonce` on a
    /// `use_dpop_nonce` refusal.
    pub(crate) fn to_response_in(
        &self,
        resource_metadata: &str,
        endpoint_scope: &str,
        dpop: Option<DpopChallenge<'_>>,
    ) -> Response<Bytes> {
        let scope_text;
        let scope = match self {
            Self::InsufficientScope { required } => {
                scope_text = required
                    .iter()
                    .map(String::as_str)
                    .collect::<Vec<_>>()
                    .join(" ");
                Some(scope_text.as_str())
            }
            _ => Some(endpoint_scope).filter(|s| !s.is_empty()),
        };
        let error = self.error_code();
        let description = error.map(|_| self.description());

        let mut body = serde_json::Map::new();
        if let Some(code) = error {
            body.insert("error".into(), code.as_str().into());
        }
        body.insert("error_description".into(), self.description().into());
        if let Some(scope) = scope {
            body.insert("scope".into(), scope.into());
        }
        body.insert("resource_metadata".into(), resource_metadata.into());
        let body = serde_json::to_vec(&body).unwrap_or_default();

        let mut response = Response::new(Bytes::from(body));
        *response.status_mut() = self.status();
        let headers = response.headers_mut();
        match self.retry_after() {
            Some(seconds) => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from_static(seconds));
            }
            None => {
                // The error goes in the scheme the caller used (RFC 9449 §7.1); the other
                // scheme's challenge, without an error, says what else is accepted.
                let dpop_first = dpop.is_some_and(|d| d.presented || self.is_dpop_error());
                let challenge = Challenge {
                    scheme: if dpop_first { DPOP } else { BEARER },
                    algs: dpop.filter(|_| dpop_first).map(|d| d.algs),
                    resource_metadata,
                    scope,
                    error,
                    error_description: description,
                    authorization_remediation: None,
                };
                headers.insert(header::WWW_AUTHENTICATE, challenge.to_header_value());
                if let Some(dpop) = dpop {
                    let other = Challenge {
                        scheme: if dpop_first { BEARER } else { DPOP },
                        algs: (!dpop_first).then_some(dpop.algs),
                        resource_metadata,
                        scope,
                        error: None,
                        error_description: None,
                        authorization_remediation: None,
                    };
                    headers.append(header::WWW_AUTHENTICATE, other.to_header_value());
                }
                if let Self::UseDpopNonce { nonce } = self
                    && let Ok(value) = HeaderValue::from_str(nonce)
                {
                    headers.insert(http::HeaderName::from_static(DPOP_NONCE), value);
                }
            }
        }
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        response
    }
}

/// A refusal ready to be answered: an [`AuthError`] together with what the layer writes beside
/// it in every refusal, the resource metadata URL and the endpoint's required scopes.
///
/// A bare `AuthError` cannot be rendered on its own: the `WWW-Authenticate` challenge must
/// name the metadata document (RFC 9728 §5.1), and a challenge without an error code names the
/// endpoint's scopes. `AuthRejection` carries both, so its response is the one the layer sends
/// for the same failure: the status, the challenge (or `Retry-After` when keys or introspection
/// are unavailable), `Cache-Control: no-store` and a JSON body that agrees with the header.
/// With the `axum` feature it is an `IntoResponse`, so a handler can return it as is:
///
/// ```
/// # #[cfg(feature = "axum")] {
/// use axum::response::IntoResponse;
/// use http::{StatusCode, header};
/// use mcp_gate::{AuthError, AuthRejection};
///
/// let rejection = AuthRejection::new(
///     AuthError::MissingCredential,
///     "https://mcp.example.com/.well-known/oauth-protected-resource/mcp",
///     "mcp:read",
/// );
/// assert_eq!(rejection.error(), &AuthError::MissingCredential);
/// let response = rejection.into_response();
/// assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
/// assert_eq!(
///     response.headers()[header::WWW_AUTHENTICATE],
///     "Bearer scope=\"mcp:read\", \
///      resource_metadata=\"https://mcp.example.com/.well-known/oauth-protected-resource/mcp\""
/// );
/// assert_eq!(response.headers()[header::CACHE_CONTROL], "no-store");
/// # }
/// ```
///
/// Rendering logs nothing; the layer logs its own refusals.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuthRejection {
    error: AuthError,
    resource_metadata: String,
    endpoint_scope: String,
}

impl AuthRejection {
    /// A refusal of `error`, whose challenge names `resource_metadata` (the absolute URL of the
    /// metadata document, as `Gate::metadata_url` gives it) and, when the error has no scope
    /// of its own, `endpoint_scope` (the endpoint's required scopes, space-separated; empty
    /// for none). Values are escaped in the header, so no value can break out of it.
    pub fn new(
        error: AuthError,
        resource_metadata: impl Into<String>,
        endpoint_scope: impl Into<String>,
    ) -> Self {
        Self {
            error,
            resource_metadata: resource_metadata.into(),
            endpoint_scope: endpoint_scope.into(),
        }
    }

    /// Why the request was refused.
    pub fn error(&self) -> &AuthError {
        &self.error
    }

    /// The [`AuthError`], without the rendering context.
    pub fn into_error(self) -> AuthError {
        self.error
    }

    /// The HTTP status of the refusal ([`AuthError::status`]).
    pub fn status(&self) -> StatusCode {
        self.error.status()
    }

    /// A stable reason code for logs and metrics ([`AuthError::reason`]).
    pub fn reason(&self) -> &'static str {
        self.error.reason()
    }

    /// The metadata URL the challenge names.
    pub fn resource_metadata(&self) -> &str {
        &self.resource_metadata
    }

    /// The endpoint's required scopes, space-separated, as the challenge names them.
    pub fn endpoint_scope(&self) -> &str {
        &self.endpoint_scope
    }

    /// The response the layer sends for this refusal, for plain `http`/Tower services.
    pub fn to_response(&self) -> Response<Bytes> {
        self.error
            .to_response(&self.resource_metadata, &self.endpoint_scope)
    }
}

impl std::fmt::Display for AuthRejection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&self.error, f)
    }
}

impl std::error::Error for AuthRejection {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        // The message is the error's own, so the error is not repeated as a source.
        std::error::Error::source(&self.error)
    }
}

impl From<AuthRejection> for AuthError {
    fn from(rejection: AuthRejection) -> Self {
        rejection.error
    }
}

/// Compares the refusal's reason, ignoring the rendering context.
impl PartialEq<AuthError> for AuthRejection {
    fn eq(&self, other: &AuthError) -> bool {
        self.error == *other
    }
}

#[cfg(feature = "axum")]
impl axum::response::IntoResponse for AuthRejection {
    fn into_response(self) -> axum::response::Response {
        self.to_response().map(axum::body::Body::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const META: &str = "http://127.0.0.1:8080/.well-known/oauth-protected-resource/mcp";

    fn json(response: &Response<Bytes>) -> serde_json::Value {
        serde_json::from_slice(response.body()).unwrap()
    }

    #[test]
    fn missing_credential_has_no_error_code() {
        let r = AuthError::MissingCredential.to_response(META, "mcp:read");
        assert_eq!(r.status(), 401);
        assert_eq!(
            r.headers()[header::WWW_AUTHENTICATE],
            format!("Bearer scope=\"mcp:read\", resource_metadata=\"{META}\"").as_str()
        );
        assert_eq!(r.headers()[header::CACHE_CONTROL], "no-store");
        assert!(json(&r).get("error").is_none());
    }

    #[test]
    fn insufficient_scope_lists_every_required_scope() {
        let required: ScopeSet = ["mcp:read", "mcp:admin"].map(String::from).into();
        let r = AuthError::InsufficientScope { required }.to_response(META, "mcp:read");
        assert_eq!(r.status(), 403);
        let header = r.headers()[header::WWW_AUTHENTICATE].to_str().unwrap();
        assert!(header.contains("error=\"insufficient_scope\""));
        assert!(header.contains("scope=\"mcp:admin mcp:read\""));
        let body = json(&r);
        assert_eq!(body["error"], "insufficient_scope");
        assert_eq!(body["scope"], "mcp:admin mcp:read");
    }

    #[test]
    fn invalid_request_is_400_and_body_agrees() {
        let r = AuthError::InvalidRequest(InvalidRequest::TokenInQuery).to_response(META, "");
        assert_eq!(r.status(), 400);
        let header = r.headers()[header::WWW_AUTHENTICATE].to_str().unwrap();
        assert!(header.starts_with("Bearer error=\"invalid_request\""));
        assert!(!header.contains("scope="));
        assert_eq!(json(&r)["error"], "invalid_request");
    }

    #[test]
    fn a_rejection_renders_as_the_layer_does() {
        let required: ScopeSet = ["mcp:admin"].map(String::from).into();
        for error in [
            AuthError::MissingCredential,
            AuthError::InvalidToken(InvalidToken::Expired),
            AuthError::InsufficientScope { required },
            AuthError::IntrospectionUnavailable,
        ] {
            let rejection = AuthRejection::new(error.clone(), META, "mcp:read");
            assert_eq!(rejection, error);
            assert_eq!(rejection.to_string(), error.to_string());
            assert_eq!(rejection.status(), error.status());
            assert_eq!(rejection.reason(), error.reason());
            let (ours, layers) = (rejection.to_response(), error.to_response(META, "mcp:read"));
            assert_eq!(ours.status(), layers.status());
            assert_eq!(ours.headers(), layers.headers());
            assert_eq!(ours.body(), layers.body());
            assert_eq!(AuthError::from(rejection), error);
        }
    }

    #[cfg(feature = "axum")]
    #[tokio::test]
    async fn a_rejection_is_an_axum_response() {
        use axum::response::IntoResponse;

        let rejection = AuthRejection::new(
            AuthError::InvalidToken(InvalidToken::BadSignature),
            META,
            "mcp:read",
        );
        let expected = rejection.to_response();
        let response = rejection.into_response();
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
        let challenge = response.headers()[header::WWW_AUTHENTICATE]
            .to_str()
            .unwrap();
        assert!(challenge.starts_with("Bearer error=\"invalid_token\", scope=\"mcp:read\""));
        assert!(challenge.contains(&format!("resource_metadata=\"{META}\"")));
        assert_eq!(response.headers()[header::CACHE_CONTROL], "no-store");
        assert_eq!(response.headers()[header::CONTENT_TYPE], "application/json");
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        assert_eq!(body, expected.body());
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body["error"], "invalid_token");
        assert_eq!(body["resource_metadata"], META);

        let unavailable = AuthRejection::new(AuthError::KeysUnavailable, META, "").into_response();
        assert_eq!(unavailable.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(
            unavailable
                .headers()
                .get(header::WWW_AUTHENTICATE)
                .is_none()
        );
        assert_eq!(unavailable.headers()[header::RETRY_AFTER], "10");
        assert_eq!(unavailable.headers()[header::CACHE_CONTROL], "no-store");
    }

    #[test]
    fn unavailable_keys_are_503_without_challenge() {
        let r = AuthError::KeysUnavailable.to_response(META, "");
        assert_eq!(r.status(), 503);
        assert!(r.headers().get(header::WWW_AUTHENTICATE).is_none());
    }

    #[test]
    fn every_503_has_retry_after_and_nothing_else_has() {
        let every = [
            AuthError::MissingCredential,
            AuthError::UnsupportedScheme,
            AuthError::InvalidRequest(InvalidRequest::MultipleAuthorizationHeaders),
            AuthError::InvalidToken(InvalidToken::Expired),
            AuthError::InsufficientScope {
                required: ScopeSet::default(),
            },
            AuthError::KeysUnavailable,
            AuthError::IntrospectionUnavailable,
        ];
        for error in every {
            let r = error.to_response(META, "");
            let retry_after = r.headers().get(header::RETRY_AFTER);
            assert_eq!(retry_after.is_some(), r.status() == 503, "{error:?}");
            if let Some(seconds) = retry_after {
                let seconds: u64 = seconds.to_str().unwrap().parse().unwrap();
                assert!((1..=30).contains(&seconds), "{error:?}");
            }
        }
    }
}
