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
use http::{HeaderMap, Method, Response, StatusCode, header};

use crate::headers::fixed_response;

/// What the endpoint allows, as the `Allow` header says it.
pub(crate) const ALLOWED: &str = "POST, GET, DELETE, OPTIONS";

/// How the layer treats one HTTP method.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verb {
    /// POST: one JSON-RPC message.
    Post,
    /// GET, DELETE, or OPTIONS that is not a preflight: no operation and no body.
    Bodyless,
}

/// What to do with a request, by its HTTP method alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Door {
    /// Authenticate, then treat as `Verb`.
    Authenticate(Verb),
    /// A CORS preflight: forwarded without authentication and without a body.
    Preflight,
    /// Refused with 405.
    NotAllowed,
}

/// The door a request comes through. A method that no branch names is not allowed.
pub(crate) fn door(method: &Method, headers: &HeaderMap) -> Door {
    if method == Method::POST {
        Door::Authenticate(Verb::Post)
    } else if method == Method::OPTIONS
        && headers.contains_key(header::ORIGIN)
        && headers.contains_key(header::ACCESS_CONTROL_REQUEST_METHOD)
    {
        Door::Preflight
    } else if method == Method::GET || method == Method::DELETE || method == Method::OPTIONS {
        Door::Authenticate(Verb::Bodyless)
    } else {
        Door::NotAllowed
    }
}

/// The answer to a method the endpoint does not take.
pub(crate) fn not_allowed(method: &Method) -> Response<Bytes> {
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
        assert_eq!(door(&Method::POST, &none), Door::Authenticate(Verb::Post));
        assert_eq!(
            door(&Method::GET, &none),
            Door::Authenticate(Verb::Bodyless)
        );
        assert_eq!(
            door(&Method::DELETE, &none),
            Door::Authenticate(Verb::Bodyless)
        );
        assert_eq!(
            door(&Method::OPTIONS, &none),
            Door::Authenticate(Verb::Bodyless)
        );
        assert_eq!(door(&Method::OPTIONS, &preflight), Door::Preflight);
        // A preflight header on another method changes nothing.
        assert_eq!(
            door(&Method::GET, &preflight),
            Door::Authenticate(Verb::Bodyless)
        );
        for method in [
            "PUT", "PATCH", "HEAD", "TRACE", "CONNECT", "PROPFIND", "post",
        ] {
            let method = Method::from_bytes(method.as_bytes()).unwrap();
            assert_eq!(door(&method, &preflight), Door::NotAllowed, "{method}");
        }
    }
}
