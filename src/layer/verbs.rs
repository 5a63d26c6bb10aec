//! Which HTTP methods the MCP endpoint takes, decided before anything else.
//!
//! Only POST carries an operation (one JSON-RPC message, read and judged whole). GET opens the
//! event stream, DELETE ends a legacy session, and OPTIONS asks what the endpoint allows: they
//! go on after authentication and the session check, without a body. A CORS preflight (OPTIONS
//! with `Origin` and `Access-Control-Request-Method`) goes on without a token, because a
//! browser cannot attach one to it; it carries no body and no credentials, and reaches the
//! inner service only to be answered by its CORS handling. Every other method, whatever it is
//! (PUT, PATCH, HEAD, a method of its own), gets `405` with `Allow` and never reaches the inner
//! service.

use bytes::Bytes;
use http::{HeaderMap, Method, StatusCode, header};

use crate::enforce::Carries;
use crate::enforce::reply::Reply;
use crate::headers::fixed_response;

/// What the endpoint allows, as the `Allow` header says it.
pub(crate) const ALLOWED: &str = "POST, GET, DELETE, OPTIONS";

/// What to do with a request, by its HTTP method alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Admission {
    /// Authenticate, then hand on as carrying a message or nothing.
    Authenticate(Carries),
    /// A CORS preflight: forwarded without authentication and without a body.
    Preflight,
    /// Refused with 405.
    NotAllowed,
}

/// How a request is let in. A method that no branch names is not allowed.
pub(crate) fn admission(method: &Method, headers: &HeaderMap) -> Admission {
    if method == Method::POST {
        Admission::Authenticate(Carries::Message)
    } else if method == Method::OPTIONS
        && headers.contains_key(header::ORIGIN)
        && headers.contains_key(header::ACCESS_CONTROL_REQUEST_METHOD)
    {
        Admission::Preflight
    } else if method == Method::GET || method == Method::DELETE || method == Method::OPTIONS {
        Admission::Authenticate(Carries::Nothing)
    } else {
        Admission::NotAllowed
    }
}

/// The answer to a method the endpoint does not take.
pub(crate) fn not_allowed(method: &Method) -> Reply {
    tracing::info!(target: "mcp_gate::request", status = 405, method = crate::mcp::http_method_label(method), "request refused: HTTP method not allowed");
    let text = b"method not allowed: this MCP endpoint takes POST, GET, DELETE and OPTIONS\n";
    let headers = [
        (header::ALLOW, ALLOWED),
        (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
    ];
    fixed_response(
        StatusCode::METHOD_NOT_ALLOWED,
        Bytes::from_static(text),
        &headers,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::headers::insert_fixed;

    #[test]
    fn only_the_named_methods_get_in() {
        let none = HeaderMap::new();
        let mut preflight = HeaderMap::new();
        let asked = [
            (header::ORIGIN, "https://app.example"),
            (header::ACCESS_CONTROL_REQUEST_METHOD, "POST"),
        ];
        insert_fixed(&mut preflight, &asked);
        assert_eq!(
            admission(&Method::POST, &none),
            Admission::Authenticate(Carries::Message)
        );
        assert_eq!(
            admission(&Method::GET, &none),
            Admission::Authenticate(Carries::Nothing)
        );
        assert_eq!(
            admission(&Method::DELETE, &none),
            Admission::Authenticate(Carries::Nothing)
        );
        assert_eq!(
            admission(&Method::OPTIONS, &none),
            Admission::Authenticate(Carries::Nothing)
        );
        assert_eq!(
            admission(&Method::OPTIONS, &preflight),
            Admission::Preflight
        );
        // A preflight header on another method changes nothing.
        assert_eq!(
            admission(&Method::GET, &preflight),
            Admission::Authenticate(Carries::Nothing)
        );
        for method in [
            "PUT", "PATCH", "HEAD", "TRACE", "CONNECT", "PROPFIND", "post",
        ] {
            let method = Method::from_bytes(method.as_bytes()).unwrap();
            assert_eq!(
                admission(&method, &preflight),
                Admission::NotAllowed,
                "{method}"
            );
        }
    }
}
