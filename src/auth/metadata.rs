//! The Protected Resource Metadata document (RFC 9728) and the routes that serve it.
//!
//! The document is served outside authentication, since it is what an unauthenticated client
//! reads to learn where to get a token. It is built and serialised once, when the layer is
//! built. It is served at `/.well-known/oauth-protected-resource` followed by the resource's
//! path (RFC 9728 §3.1) and, for clients that only probe the root, at the bare well-known path,
//! with CORS open to every origin so browser-based clients can read it.

use bytes::Bytes;
use http::{HeaderName, Method, Response, StatusCode, header};
use serde::Serialize;

use crate::headers::fixed_response;

/// RFC 9728 Protected Resource Metadata, as the layer publishes it.
#[derive(Clone, Debug, Serialize)]
#[non_exhaustive]
pub struct ProtectedResourceMetadata {
    /// The canonical resource URI, exactly what clients must use as `resource`.
    pub resource: String,
    /// Issuer identifiers of the authorization servers that issue tokens for this resource.
    pub authorization_servers: Vec<String>,
    /// Scopes clients may request.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub scopes_supported: Vec<String>,
    /// Always `["header"]`: the only accepted way to send a token.
    pub bearer_methods_supported: Vec<String>,
    /// A human-readable name of the resource.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource_name: Option<String>,
    /// A URL of human-readable documentation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource_documentation: Option<String>,
    /// RFC 9396 authorization details types this resource understands.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub authorization_details_types_supported: Vec<String>,
    /// The DPoP proof algorithms accepted (RFC 9728 §2, RFC 9449), when DPoP is enabled.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub dpop_signing_alg_values_supported: Vec<String>,
    /// `true` when only DPoP-bound tokens are accepted (RFC 9728 §2); absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dpop_bound_access_tokens_required: Option<bool>,
}

impl ProtectedResourceMetadata {
    pub(crate) fn to_bytes(&self) -> Bytes {
        Bytes::from(serde_json::to_vec(self).unwrap_or_default())
    }
}

/// What the document is served with (to `GET` and `HEAD`).
const DOCUMENT_HEADERS: &[(HeaderName, &str)] = &[
    (header::ACCESS_CONTROL_ALLOW_ORIGIN, "*"),
    (header::CONTENT_TYPE, "application/json"),
    (header::CACHE_CONTROL, "public, max-age=300"),
];

/// The answer to a CORS preflight (`OPTIONS`).
const PREFLIGHT_HEADERS: &[(HeaderName, &str)] = &[
    (header::ACCESS_CONTROL_ALLOW_ORIGIN, "*"),
    (header::ACCESS_CONTROL_ALLOW_METHODS, "GET, OPTIONS"),
    (header::ACCESS_CONTROL_ALLOW_HEADERS, "*"),
];

/// The refusal of any other method.
const NOT_ALLOWED_HEADERS: &[(HeaderName, &str)] = &[
    (header::ACCESS_CONTROL_ALLOW_ORIGIN, "*"),
    (header::ALLOW, "GET, HEAD, OPTIONS"),
];

/// The answer at a metadata path, for the router and the layer alike: the document with
/// `Cache-Control: public, max-age=300` to `GET` and `HEAD`, an open CORS preflight to
/// `OPTIONS`, `405` to anything else; `Access-Control-Allow-Origin: *` on all of them (the
/// document is public, and browser clients discover through it).
pub(crate) fn answer(document: &Bytes, method: &Method) -> Response<Bytes> {
    let (status, body, headers) = match *method {
        Method::GET | Method::HEAD => (StatusCode::OK, document.clone(), DOCUMENT_HEADERS),
        Method::OPTIONS => (StatusCode::NO_CONTENT, Bytes::new(), PREFLIGHT_HEADERS),
        _ => (
            StatusCode::METHOD_NOT_ALLOWED,
            Bytes::new(),
            NOT_ALLOWED_HEADERS,
        ),
    };
    fixed_response(status, body, headers)
}

/// The metadata routes: [`answer`] at each path.
#[cfg(feature = "axum")]
pub(crate) fn router<S: Clone + Send + Sync + 'static>(
    paths: &[String],
    document: Bytes,
) -> axum::Router<S> {
    use axum::routing::any;

    let serve = move |method: Method| {
        let response = answer(&document, &method).map(axum::body::Body::from);
        async move { response }
    };
    // The paths are literal: a resource path may hold `:`, `*`, `{` or `}`, which axum would
    // otherwise read as route syntax (or refuse with a panic).
    let mut router = axum::Router::new().without_v07_checks();
    for path in paths {
        let literal = path.replace('{', "{{").replace('}', "}}");
        router = router.route(&literal, any(serve.clone()));
    }
    router
}
