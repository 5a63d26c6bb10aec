//! The gate's `tracing` spans: one per HTTP request, one per JSON-RPC request read from it,
//! and one around each verification, policy call and inner call.
//!
//! Threat: a span attribute is a channel out of the gate, to whoever reads the traces. So
//! every attribute here is a closed set of the crate's own words (a method, a decision, a
//! reason code), a number, or a digest: never the token, the arguments, the body, the subject,
//! a URI's query, or a raw session id (a session id is a bearer secret in the legacy era: its
//! attribute is the first 16 hex digits of its SHA-256, enough to follow one session across
//! requests, too little to replay it). Nothing a caller wrote is recorded as written: the
//! attributes OpenTelemetry's MCP conventions name take the crate's words for it. The method
//! is the method table's name, else `other`; the tool's name only when the inner server lists
//! that tool, else `other`; the protocol version only when the crate supports it, else
//! `other`; the JSON-RPC id as written when it is an integer (the SDKs count), and a string id
//! as the 16-hex digest its session id gets (the id can be any text a client sends, so it is
//! followed, not read). `tests/canary.rs` holds the line: no span field carries a value sent.
//!
//! Cost: with no subscriber interested, a span is tracing's disabled fast path (one load of
//! the callsite's interest), then the empty span ([`or_none`]), and nothing is formatted or
//! allocated for it: every recording that would allocate is behind [`Span::is_disabled`].
//!
//! | span | target | kind | attributes |
//! |---|---|---|---|
//! | `mcp_gate::http` | `mcp_gate::http` | server | `http.request.method`, `http.response.status_code`, `mcp.session.id`, `error.type` |
//! | `mcp_gate::request` | `mcp_gate::request` | server | `mcp.method.name`, `jsonrpc.request.id`, `mcp.protocol.version`, `gen_ai.tool.name`, `gen_ai.operation.name`, `mcp.session.id`, `mcp_gate.decision`, `error.type` |
//! | `mcp_gate::verify` | `mcp_gate::verify` | internal | `mcp_gate.cache` (`hit`, `miss`), `mcp_gate.outcome` (`ok` or the refusal's reason code) |
//! | `mcp_gate::policy` | `mcp_gate::policy` | internal | `mcp_gate.phase`, `mcp_gate.decision`, `error.type` |
//! | `mcp_gate::inner` | `mcp_gate::inner` | internal | none |

use http::header::HeaderMap;
use http::{Method, Request};
use serde_json::Value;
use sha2::{Digest, Sha256};
use tower_service::Service;
use tracing::Span;
use tracing::field::Empty;

use crate::mcp::era::{SESSION_HEADER, SUPPORTED_VERSIONS};
use crate::mcp::method_label;
use crate::mcp::request::McpRequest;
use crate::mcp::{ProtocolContext, Target};
pub(crate) use crate::measure::traced::{or_none, wanted};

/// The longest tool name an attribute carries, in bytes; a longer listed name is cut on a
/// character boundary.
pub(crate) const MAX_TEXT: usize = 128;

/// The span of one HTTP request the layer handles; with feature `opentelemetry`, its parent
/// is the `traceparent` header's context when it has a valid one.
pub(crate) fn http_span(method: &Method, headers: &HeaderMap) -> Span {
    if !wanted() {
        return Span::none();
    }
    let span = tracing::info_span!(
        target: "mcp_gate::http",
        "mcp_gate::http",
        otel.name = Empty,
        otel.kind = "server",
        http.request.method = Empty,
        http.response.status_code = Empty,
        mcp.session.id = Empty,
        error.type = Empty,
    );
    if span.is_disabled() {
        return Span::none();
    }
    let method = method_word(method);
    span.record("otel.name", method);
    span.record("http.request.method", method);
    record_session(&span, headers);
    #[cfg(feature = "opentelemetry")]
    super::otel::continue_from_headers(&span, headers);
    span
}

/// The HTTP method as OpenTelemetry names it: the known methods, any other `_OTHER` (an
/// extension method is the caller's word).
fn method_word(method: &Method) -> &'static str {
    const KNOWN: [Method; 9] = [
        Method::GET,
        Method::POST,
        Method::DELETE,
        Method::OPTIONS,
        Method::HEAD,
        Method::PUT,
        Method::PATCH,
        Method::CONNECT,
        Method::TRACE,
    ];
    const WORDS: [&str; 9] = [
        "GET", "POST", "DELETE", "OPTIONS", "HEAD", "PUT", "PATCH", "CONNECT", "TRACE",
    ];
    KNOWN
        .iter()
        .position(|known| known == method)
        .map_or("_OTHER", |at| WORDS[at])
}

/// The HTTP status of the response, on the HTTP request's span.
pub(crate) fn responded(span: &Span, status: http::StatusCode) {
    span.record("http.response.status_code", status.as_u16());
}

/// A refusal's reason code (the crate's own word), on `span`.
pub(crate) fn refused(span: &Span, reason: &'static str) {
    span.record("error.type", reason);
}

/// The span of one JSON-RPC request, under the HTTP request's span; with feature
/// `opentelemetry`, its parent is `params._meta`'s trace context when it has a valid one
/// (the MCP request's own, which wins over the transport's), linked to the HTTP span.
/// `listed` says whether the inner server lists a tool of that name.
pub(crate) fn request_span(
    request: &McpRequest,
    headers: &HeaderMap,
    listed: impl FnOnce(&str) -> bool,
) -> Span {
    if !wanted() {
        return Span::none();
    }
    let span = tracing::info_span!(
        target: "mcp_gate::request",
        "mcp_gate::request",
        otel.name = Empty,
        otel.kind = "server",
        mcp.method.name = Empty,
        jsonrpc.request.id = Empty,
        mcp.protocol.version = Empty,
        gen_ai.tool.name = Empty,
        gen_ai.operation.name = Empty,
        mcp.session.id = Empty,
        mcp_gate.decision = Empty,
        error.type = Empty,
    );
    if span.is_disabled() {
        return Span::none();
    }
    let method = method_label(request.method.as_ref());
    span.record("mcp.method.name", method);
    record_id(&span, &request.id);
    match &request.target {
        Target::Tool { name, .. } => {
            let name = if listed(name) { cut(name) } else { "other" };
            span.record("otel.name", format!("{method} {name}").as_str());
            span.record("gen_ai.tool.name", name);
            span.record("gen_ai.operation.name", "execute_tool");
        }
        _ => {
            span.record("otel.name", method);
        }
    }
    record_session(&span, headers);
    #[cfg(feature = "opentelemetry")]
    super::otel::continue_from_meta(&span, request.meta());
    span
}

/// The JSON-RPC request's span, carried in a forwarded request's extensions from the route
/// that made it to the step that forwards it, and taken out before the inner service sees
/// them. Carried only when a subscriber is interested: no allocation otherwise.
#[derive(Clone)]
pub(crate) struct RequestSpan(Span);

impl RequestSpan {
    /// Puts `span` in `extensions`, unless it is disabled.
    pub(crate) fn carry(extensions: &mut http::Extensions, span: &Span) {
        if !span.is_disabled() {
            extensions.insert(Self(span.clone()));
        }
    }

    /// Takes the span out of `extensions` (a disabled span if there is none).
    pub(crate) fn take(extensions: &mut http::Extensions) -> Span {
        extensions
            .remove::<Self>()
            .map_or_else(Span::none, |carried| carried.0)
    }
}

/// The protocol version the request's era settled on, on its span: one the crate supports,
/// or `other`.
pub(crate) fn protocol(span: &Span, protocol: &ProtocolContext) {
    if let Some(version) = &protocol.protocol_version {
        let word = SUPPORTED_VERSIONS
            .iter()
            .find(|known| **known == version.as_str())
            .map_or("other", |known| *known);
        span.record("mcp.protocol.version", word);
    }
}

/// The JSON-RPC id on `span`: an integer as written, a string as its 16-hex digest (any
/// other id, a fraction say, as `other`).
fn record_id(span: &Span, id: &Value) {
    match id {
        Value::Number(number) if number.is_i64() || number.is_u64() => {
            span.record("jsonrpc.request.id", tracing::field::display(number));
        }
        Value::String(text) => {
            let digest = session_digest(text.as_bytes());
            if let Ok(digest) = std::str::from_utf8(&digest) {
                span.record("jsonrpc.request.id", digest);
            }
        }
        _ => {
            span.record("jsonrpc.request.id", "other");
        }
    }
}

/// The span around one token verification (`cache`: `hit` when the token cache answered,
/// `miss` when the token was verified), under the HTTP request's span.
pub(crate) fn verify_span(parent: &Span, cache: &'static str) -> Span {
    if !wanted() {
        return Span::none();
    }
    or_none(tracing::info_span!(
        target: "mcp_gate::verify",
        parent: parent,
        "mcp_gate::verify",
        otel.kind = "internal",
        mcp_gate.cache = cache,
        mcp_gate.outcome = Empty,
    ))
}

/// What verification came to: `ok`, or the refusal's reason code.
pub(crate) fn verified(span: &Span, refusal: Option<&'static str>) {
    span.record("mcp_gate.outcome", refusal.unwrap_or("ok"));
}

/// Calls the inner service inside a span of its own, returned to instrument the call's
/// future with. With feature `opentelemetry`, the request carries that span's trace context
/// (`traceparent`, `tracestate`) in place of the caller's; its body is sent unchanged.
pub(crate) fn call_inner<S, B>(service: &mut S, request: Request<B>) -> (S::Future, Span)
where
    S: Service<Request<B>>,
{
    let span = if wanted() {
        or_none(tracing::info_span!(
            target: "mcp_gate::inner",
            "mcp_gate::inner",
            otel.kind = "internal",
        ))
    } else {
        Span::none()
    };
    #[cfg(feature = "opentelemetry")]
    let request = {
        let mut request = request;
        if !span.is_disabled() {
            super::otel::inject(&span, request.headers_mut());
        }
        request
    };
    let future = if span.is_none() {
        service.call(request)
    } else {
        span.in_scope(|| service.call(request))
    };
    (future, span)
}

/// The legacy session the request names, as its digest, on `span`.
fn record_session(span: &Span, headers: &HeaderMap) {
    if let Some(session) = headers.get(SESSION_HEADER) {
        let digest = session_digest(session.as_bytes());
        if let Ok(digest) = std::str::from_utf8(&digest) {
            span.record("mcp.session.id", digest);
        }
    }
}

/// The first 16 hex digits (8 bytes) of the SHA-256 of a session id (or a string JSON-RPC
/// id): what its span carries.
pub(crate) fn session_digest(session: &[u8]) -> [u8; 16] {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let hash = Sha256::digest(session);
    let mut text = [0u8; 16];
    for (at, byte) in hash.iter().take(8).enumerate() {
        text[2 * at] = HEX[usize::from(byte >> 4)];
        text[2 * at + 1] = HEX[usize::from(byte & 0x0f)];
    }
    text
}

/// `text`, cut to at most [`MAX_TEXT`] bytes on a character boundary.
fn cut(text: &str) -> &str {
    if text.len() <= MAX_TEXT {
        return text;
    }
    let mut end = MAX_TEXT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_digest_is_16_hex_digits_of_its_sha256() {
        // SHA-256("abc") = ba7816bf8f01cfea...
        assert_eq!(&session_digest(b"abc"), b"ba7816bf8f01cfea");
    }

    #[test]
    fn long_text_is_cut_on_a_character_boundary() {
        let long = "é".repeat(100);
        let cut = cut(&long);
        assert!(cut.len() <= MAX_TEXT && cut.len() == 128);
        assert_eq!(super::cut("echo"), "echo");
    }

    #[test]
    fn an_extension_method_is_other() {
        let method = Method::from_bytes(b"SECRET").expect("a method");
        assert_eq!(method_word(&method), "_OTHER");
        assert_eq!(method_word(&Method::POST), "POST");
    }
}
