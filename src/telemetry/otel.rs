//! W3C trace context in and out (feature `opentelemetry`): the caller's trace continued into
//! the gate's spans, and the gate's own passed on to the inner server.
//!
//! Threat: trace context is the caller's text, and a span attribute is a channel out. Only a
//! well-formed `traceparent` (and its `tracestate`) is read, by OpenTelemetry's own
//! [`TraceContextPropagator`]; anything it does not accept is ignored and the request starts
//! a fresh trace, never refused. Nothing of the context becomes an attribute.
//!
//! Where the context comes from, in order:
//!
//! 1. `params._meta.traceparent` / `tracestate` of a JSON-RPC request (MCP 2026-07-28,
//!    SEP-414): the MCP request's own context. It parents the `mcp_gate::request` span, which
//!    links to the HTTP request's span.
//! 2. The `traceparent` / `tracestate` headers: the transport's. They parent the
//!    `mcp_gate::http` span, and so the `mcp_gate::request` span under it when `_meta` has
//!    none.
//! 3. Otherwise the span's parent is the current one (an application's own HTTP span).
//!
//! Why two server spans: `tracing-opentelemetry` fixes a span's parent when the span starts
//! (it is first entered, or a child is made under it), and the token is verified before the
//! body is read (an unauthenticated caller never makes the gate buffer a body). `_meta` is
//! only known after that, so the span that covers verification (`mcp_gate::http`, made in
//! `GateService::call`) cannot take it as a parent; the span made once the request is read
//! (`mcp_gate::request`, covering the policy and the inner call) can. This is the shape
//! OpenTelemetry's MCP conventions describe: the MCP server span under the transport's, or
//! under `_meta`'s context with a link to the transport's.
//!
//! Why this propagator: SEP-414 names W3C trace context, so `_meta` is read as that and
//! nothing else, and the headers too, rather than with whatever global propagator the
//! application installed (which may be none, or B3). The propagator lives in
//! `opentelemetry_sdk` (the API crate has none), depended on with its `trace` feature only.
//!
//! Out: the inner server's request carries `traceparent` (and `tracestate` when there is one)
//! of the gate's `mcp_gate::inner` span, in place of the caller's, so that the inner server
//! continues the trace under the gate. The body, and the `_meta` in it, is forwarded as it was
//! judged: the layer never rewrites a message to carry a trace.

use http::header::{HeaderMap, HeaderName, HeaderValue};
use opentelemetry::Context;
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::TraceContextExt;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use serde_json::{Map, Value};
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The W3C keys, in headers and in `_meta` alike.
const TRACEPARENT: &str = "traceparent";
/// The vendor state that travels with `traceparent`.
const TRACESTATE: &str = "tracestate";

/// HTTP headers, read as a carrier.
struct Headers<'a>(&'a HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|value| value.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(HeaderName::as_str).collect()
    }
}

/// `params._meta`, read as a carrier: its string values under the W3C keys only.
struct Meta<'a>(&'a Map<String, Value>);

impl Extractor for Meta<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(Value::as_str)
    }

    fn keys(&self) -> Vec<&str> {
        [TRACEPARENT, TRACESTATE]
            .into_iter()
            .filter(|key| self.0.contains_key(*key))
            .collect()
    }
}

/// HTTP headers, written as a carrier: a value that is not a valid header is left out.
struct HeadersOut<'a>(&'a mut HeaderMap);

impl Injector for HeadersOut<'_> {
    fn set(&mut self, key: &str, value: String) {
        if value.is_empty() {
            return;
        }
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(key.as_bytes()),
            HeaderValue::from_str(&value),
        ) {
            self.0.insert(name, value);
        }
    }
}

/// The remote context `carrier` holds, when its `traceparent` is valid.
fn remote(carrier: &dyn Extractor) -> Option<Context> {
    let context = TraceContextPropagator::new().extract(carrier);
    let valid = context.span().span_context().is_valid();
    valid.then_some(context)
}

/// Parents the HTTP request's `span` on the `traceparent` header's context, if valid.
pub(crate) fn continue_from_headers(span: &Span, headers: &HeaderMap) {
    if let Some(context) = remote(&Headers(headers)) {
        // Fails only without an OpenTelemetry layer, or once started: the span is new.
        let _ = span.set_parent(context);
    }
}

/// Parents the JSON-RPC request's `span` on `_meta`'s context, if valid, linking it to the
/// HTTP request's span (the current one) it was made under.
pub(crate) fn continue_from_meta(span: &Span, meta: Option<&Map<String, Value>>) {
    let Some(context) = meta.and_then(|meta| remote(&Meta(meta))) else {
        return;
    };
    let transport = Span::current().context().span().span_context().clone();
    let _ = span.set_parent(context);
    if transport.is_valid() {
        span.add_link(transport);
    }
}

/// Puts `span`'s trace context on the headers of the inner server's request, in place of the
/// caller's; without a valid context (no OpenTelemetry layer), the headers stay as they are.
pub(crate) fn inject(span: &Span, headers: &mut HeaderMap) {
    let context = span.context();
    if !context.span().span_context().is_valid() {
        return;
    }
    headers.remove(TRACEPARENT);
    headers.remove(TRACESTATE);
    TraceContextPropagator::new().inject_context(&context, &mut HeadersOut(headers));
}
