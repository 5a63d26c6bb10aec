//! Which headers cross the gateway, each way.
//!
//! Towards the upstream the list is closed: only the headers MCP's streamable HTTP transport
//! and tracing need are copied, so a header the gateway has never heard of (a cookie, a
//! second credential, a proxy's own) never reaches the upstream. The client's
//! `Authorization` and `DPoP` are never among them: MCP forbids passing the client's token
//! through, and the upstream's identity for the caller is the gateway's own signed token, when
//! configured. Back towards the client the list is closed too: the answer's content type,
//! caching, `Retry-After`, `Vary` and the `Mcp-*` headers. An upstream's challenge, cookies
//! or server banner never reach the client as if the gateway had said them, and hyper writes
//! the framing of the client's own connection.

use http::{HeaderMap, HeaderName, header};

/// The request headers copied to the upstream, besides every `Mcp-*` header.
const FORWARDED: [HeaderName; 7] = [
    header::CONTENT_TYPE,
    header::ACCEPT,
    header::USER_AGENT,
    header::ACCEPT_LANGUAGE,
    HeaderName::from_static("last-event-id"),
    HeaderName::from_static("traceparent"),
    HeaderName::from_static("tracestate"),
];

/// Whether the request header `name` is copied to the upstream.
pub fn forwards_request_header(name: &HeaderName) -> bool {
    FORWARDED.contains(name) || name.as_str().starts_with("mcp-")
}

/// The answer headers copied back to the client, besides every `Mcp-*` header: what the
/// streamable HTTP transport and its event streams need. Never a challenge
/// (`WWW-Authenticate`: the gate writes the challenges), a cookie, or a header that describes
/// the upstream's connection or framing (hyper writes the client's own).
const RETURNED: [HeaderName; 5] = [
    header::CONTENT_TYPE,
    header::CACHE_CONTROL,
    header::RETRY_AFTER,
    header::VARY,
    HeaderName::from_static("x-accel-buffering"),
];

/// Whether the answer header `name` is copied back to the client.
pub fn returns_response_header(name: &HeaderName) -> bool {
    RETURNED.contains(name) || name.as_str().starts_with("mcp-")
}

/// The headers of one connection (RFC 9110 §7.6.1), and the framing hyper writes itself: a
/// name the identity token may not be sent in.
pub fn is_connection_header(name: &HeaderName) -> bool {
    [
        header::CONNECTION,
        header::PROXY_AUTHENTICATE,
        header::PROXY_AUTHORIZATION,
        header::TE,
        header::TRAILER,
        header::TRANSFER_ENCODING,
        header::UPGRADE,
        header::CONTENT_LENGTH,
    ]
    .contains(name)
        || matches!(name.as_str(), "keep-alive" | "proxy-connection")
}

/// The request headers for the upstream: the forwarded ones of `incoming`.
pub fn upstream_request_headers(incoming: &HeaderMap) -> HeaderMap {
    let mut headers = HeaderMap::with_capacity(incoming.len());
    for (name, value) in incoming {
        if forwards_request_header(name) {
            headers.append(name.clone(), value.clone());
        }
    }
    headers
}

/// The answer's headers for the client: the returned ones of `upstream`.
pub fn client_response_headers(upstream: &HeaderMap) -> HeaderMap {
    let mut headers = HeaderMap::with_capacity(upstream.len());
    for (name, value) in upstream {
        if returns_response_header(name) {
            headers.append(name.clone(), value.clone());
        }
    }
    headers
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    #[test]
    fn credentials_cookies_and_unknown_headers_stay_behind() {
        let mut incoming = HeaderMap::new();
        for (name, value) in [
            ("authorization", "Bearer client-token"),
            ("dpop", "proof"),
            ("cookie", "session=1"),
            ("proxy-authorization", "Basic x"),
            ("x-unknown", "1"),
            ("host", "gateway"),
            ("content-type", "application/json"),
            ("accept", "application/json, text/event-stream"),
            ("mcp-session-id", "abc"),
            ("mcp-protocol-version", "2025-11-25"),
            ("last-event-id", "7"),
            (
                "traceparent",
                "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            ),
        ] {
            incoming.append(
                HeaderName::from_static(name),
                HeaderValue::from_static(value),
            );
        }
        let sent = upstream_request_headers(&incoming);
        let names: Vec<&str> = sent.keys().map(HeaderName::as_str).collect();
        assert_eq!(
            names,
            [
                "content-type",
                "accept",
                "mcp-session-id",
                "mcp-protocol-version",
                "last-event-id",
                "traceparent"
            ]
        );
    }

    #[test]
    fn an_answer_keeps_what_the_transport_needs_only() {
        let mut upstream = HeaderMap::new();
        for (name, value) in [
            ("content-type", "text/event-stream"),
            ("mcp-session-id", "abc"),
            ("connection", "keep-alive"),
            ("transfer-encoding", "chunked"),
            ("content-length", "12"),
            ("cache-control", "no-cache"),
            ("www-authenticate", "Bearer realm=\"upstream\""),
            ("set-cookie", "upstream=1"),
            ("x-powered-by", "Express"),
        ] {
            upstream.append(
                HeaderName::from_static(name),
                HeaderValue::from_static(value),
            );
        }
        let kept = client_response_headers(&upstream);
        let names: Vec<&str> = kept.keys().map(HeaderName::as_str).collect();
        assert_eq!(names, ["content-type", "mcp-session-id", "cache-control"]);
    }
}
