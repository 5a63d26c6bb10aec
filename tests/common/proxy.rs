//! The pieces of the small reverse proxies the tests put in front of gateways.

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use http::{HeaderName, StatusCode, header};

/// Headers that belong to one connection and are never forwarded (RFC 9110 §7.6.1), plus
/// `host` and `content-length`, which the outgoing client sets itself.
pub fn is_hop_by_hop(name: &HeaderName) -> bool {
    [
        header::CONNECTION,
        header::PROXY_AUTHENTICATE,
        header::PROXY_AUTHORIZATION,
        header::TE,
        header::TRAILER,
        header::TRANSFER_ENCODING,
        header::UPGRADE,
        header::HOST,
        header::CONTENT_LENGTH,
    ]
    .contains(name)
        || matches!(name.as_str(), "keep-alive" | "proxy-connection")
}

/// The upstream's answer, as the client gets it: its status and end-to-end headers, and its
/// body streamed as it arrives (an event stream may stay open).
pub fn streamed(answer: reqwest::Response) -> Response {
    let mut response = Response::builder().status(answer.status());
    for (name, value) in answer.headers() {
        if !is_hop_by_hop(name) {
            response = response.header(name, value);
        }
    }
    let chunks = futures_util::stream::unfold(Some(answer), |answer| async move {
        let mut answer = answer?;
        match answer.chunk().await {
            Ok(Some(chunk)) => Some((Ok(chunk), Some(answer))),
            Ok(None) => None,
            Err(error) => Some((Err(error), None)),
        }
    });
    response
        .body(Body::from_stream(chunks))
        .unwrap_or_else(|_| StatusCode::BAD_GATEWAY.into_response())
}

/// The upstream request of a test's reverse proxy: `upstream` with every end-to-end header
/// of `headers` (an `Authorization` header, had the gate let one through, included) and
/// `body` when there is one.
pub fn forwarding(
    mut upstream: reqwest::RequestBuilder,
    headers: &http::HeaderMap,
    body: axum::body::Bytes,
) -> reqwest::RequestBuilder {
    for (name, value) in headers {
        if !is_hop_by_hop(name) {
            upstream = upstream.header(name, value);
        }
    }
    if !body.is_empty() {
        upstream = upstream.body(body);
    }
    upstream
}
