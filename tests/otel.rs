//! The gate's spans as OpenTelemetry exports them (feature `opentelemetry`).
//!
//! The example rmcp server runs behind a gate on 127.0.0.1, wrapped in a middleware that
//! records the `traceparent` header each request reaches it with. The tracing subscriber
//! bridges to an OpenTelemetry SDK tracer whose spans go to the SDK's in-memory exporter.
//! Checked: the span names and attributes (OpenTelemetry's MCP conventions; no token, no
//! argument, no raw session id), the nesting (verify under the HTTP span, policy and inner
//! under the request span), the trace continued from `params._meta.traceparent`, from the
//! `traceparent` header, `_meta` winning over the header, the inner server's `traceparent`
//! naming the gate's inner span, and an invalid `traceparent` ignored.
//!
//! ```text
//! cargo test --features introspection,redis,metrics,opentelemetry --test otel
//! ```
//!
//! Its own binary: it installs the global tracing subscriber. The tests share it, so they run
//! one at a time (a lock), each reading the spans exported since it began.

mod common;

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use axum::Router;
use axum::extract::Request;
use axum::middleware::{self, Next};
use axum::response::Response;
use common::modern::modern;
use common::peers::{GatedServer, Reply, Sdk, run_client};
use common::tokens::{TestKey, claims};
use common::tools;
use opentelemetry::trace::{SpanId, TraceId, TracerProvider};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tracing_subscriber::layer::SubscriberExt;

const ISSUER: &str = "https://as.example";
/// The argument sent to `echo`: it must appear in no attribute.
const SECRET_ARGUMENT: &str = "argument-that-must-not-leak";
const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT_ID: &str = "00f067aa0ba902b7";
const HEADER_TRACE_ID: &str = "0af7651916cd43dd8448eb211c80319c";
const HEADER_PARENT_ID: &str = "b7ad6b7169203331";

/// The exporter the global subscriber's tracer writes to, set up once.
fn exporter() -> &'static InMemorySpanExporter {
    static EXPORTER: OnceLock<InMemorySpanExporter> = OnceLock::new();
    EXPORTER.get_or_init(|| {
        let exporter = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(exporter.clone())
            .build();
        let tracer = provider.tracer("mcp-gate-test");
        let subscriber =
            tracing_subscriber::registry().with(tracing_opentelemetry::layer().with_tracer(tracer));
        tracing::subscriber::set_global_default(subscriber).expect("the only subscriber");
        exporter
    })
}

/// One test at a time: they read one exporter.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The `traceparent` header of each request the inner server received.
type Seen = Arc<Mutex<Vec<Option<String>>>>;

struct Setup {
    server: GatedServer,
    key: TestKey,
    seen: Seen,
}

impl Setup {
    /// The example server behind an allow-all gate, its `traceparent` headers recorded;
    /// `stateful`: with legacy sessions.
    async fn start(stateful: bool) -> Self {
        let seen = Seen::default();
        let record = seen.clone();
        let service: StreamableHttpService<_, LocalSessionManager> = StreamableHttpService::new(
            || Ok(tools::DemoServer::default()),
            Default::default(),
            StreamableHttpServerConfig::default()
                .with_legacy_session_mode(stateful)
                .with_json_response(true),
        );
        let mcp = Router::new()
            .nest_service("/mcp", service)
            .layer(middleware::from_fn(move |request: Request, next: Next| {
                let record = record.clone();
                async move { recorded(record, request, next).await }
            }));
        let key = TestKey::es256("k1");
        let server = GatedServer::start_trusting(
            ISSUER,
            &key,
            |builder| builder.evaluate(mcp_gate::policy::allow_all()),
            mcp,
        )
        .await;
        let setup = Self { server, key, seen };
        if !stateful {
            setup.learn_tools().await;
        }
        setup
    }

    /// Lists the tools through the gate, so that it knows their names (a span names only a
    /// listed tool), then forgets the listing's spans and what the inner server saw of it.
    /// With a token of its own, so that the tests' first use of theirs is a cache miss.
    async fn learn_tools(&self) {
        let mut lister = claims(ISSUER, &self.server.url, "mcp:read");
        lister["sub"] = json!("tool-lister");
        let list = modern(1, "tools/list", json!({}), "", json!({}));
        let reply = post(self, &self.key.mint(&lister), &list, &[]).await;
        assert_eq!(reply.status, 200, "{reply:?}");
        spans_with("tools/list").await;
        exporter().reset();
        self.seen.lock().expect("not poisoned").clear();
    }

    fn token(&self) -> String {
        self.key.mint(&claims(ISSUER, &self.server.url, "mcp:read"))
    }

    fn seen(&self) -> Vec<Option<String>> {
        self.seen.lock().expect("not poisoned").clone()
    }
}

async fn recorded(seen: Seen, request: Request, next: Next) -> Response {
    let traceparent = request
        .headers()
        .get("traceparent")
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned);
    seen.lock().expect("not poisoned").push(traceparent);
    next.run(request).await
}

/// A modern `tools/call echo` with `id`, `_meta` extended by `meta`.
fn echo_call(id: u64, meta: Value) -> (String, Vec<(&'static str, String)>) {
    let params = json!({"name": "echo", "arguments": {"text": SECRET_ARGUMENT}});
    let (body, headers) = modern(id, "tools/call", params, "echo", json!({}));
    let mut body: Value = serde_json::from_str(&body).expect("a JSON body");
    if let (Some(into), Some(meta)) = (body["params"]["_meta"].as_object_mut(), meta.as_object()) {
        into.extend(meta.clone());
    }
    (body.to_string(), headers)
}

/// Posts `request` with its headers and `extra` ones.
async fn post(
    setup: &Setup,
    token: &str,
    request: &(String, Vec<(&'static str, String)>),
    extra: &[(&'static str, &str)],
) -> Reply {
    let (body, headers) = request;
    let mut all: Vec<(&str, &str)> = headers.iter().map(|(h, v)| (*h, v.as_str())).collect();
    all.extend_from_slice(extra);
    setup.server.post(Some(token), &all, body).await
}

/// The spans exported so far, once one named `name` is among them (the spans of a request
/// end as its future is dropped, which may be just after the client has its answer).
async fn spans_with(name: &str) -> Vec<SpanData> {
    for _ in 0..100 {
        let spans = exporter().get_finished_spans().expect("spans");
        if spans.iter().any(|span| span.name == name) {
            return spans;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("no span named {name}");
}

fn named<'a>(spans: &'a [SpanData], name: &str) -> &'a SpanData {
    spans
        .iter()
        .find(|span| span.name == name)
        .unwrap_or_else(|| panic!("no span named {name} in {:?}", names(spans)))
}

fn names(spans: &[SpanData]) -> Vec<&str> {
    spans.iter().map(|span| span.name.as_ref()).collect()
}

fn attribute(span: &SpanData, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| kv.value.to_string())
}

fn parent_of<'a>(spans: &'a [SpanData], span: &SpanData) -> Option<&'a SpanData> {
    spans
        .iter()
        .find(|candidate| candidate.span_context.span_id() == span.parent_span_id)
}

/// Whether `ancestor` is above `span`.
fn descends(spans: &[SpanData], span: &SpanData, ancestor: &SpanData) -> bool {
    let mut at = span;
    while let Some(parent) = parent_of(spans, at) {
        if parent.span_context.span_id() == ancestor.span_context.span_id() {
            return true;
        }
        at = parent;
    }
    false
}

/// Each `traceparent` the inner server received names one of the gate's inner spans, in
/// `trace`, each under the request span (a modern call is forwarded, and the gate may ask the
/// inner server for its identity beside it: one inner span per call).
fn assert_inner_parents(spans: &[SpanData], seen: &[Option<String>], trace: TraceId) {
    let request = named(spans, "tools/call echo");
    let inner: Vec<&SpanData> = spans
        .iter()
        .filter(|span| span.name == "mcp_gate::inner")
        .collect();
    assert_eq!(inner.len(), seen.len(), "{seen:?}");
    for span in &inner {
        assert!(descends(spans, span, request), "{spans:#?}");
        assert_eq!(span.span_context.trace_id(), trace);
    }
    for header in seen {
        let header = header.as_deref().expect("a traceparent");
        assert!(
            inner.iter().any(|span| header
                == format!(
                    "00-{}-{}-01",
                    span.span_context.trace_id(),
                    span.span_context.span_id()
                )),
            "{header} names no inner span of the gate's"
        );
    }
}

fn trace_id(hex: &str) -> TraceId {
    TraceId::from_hex(hex).expect("a trace id")
}

fn span_id(hex: &str) -> SpanId {
    SpanId::from_hex(hex).expect("a span id")
}

#[tokio::test]
async fn the_request_span_names_the_call_and_nothing_secret() {
    let _serial = SERIAL.lock().await;
    exporter().reset();
    let setup = Setup::start(false).await;
    let token = setup.token();
    let reply = post(&setup, &token, &echo_call(41, json!({})), &[]).await;
    assert_eq!(reply.status, 200, "{reply:?}");
    assert!(reply.text.contains(SECRET_ARGUMENT), "{reply:?}");

    let spans = spans_with("tools/call echo").await;
    let request = named(&spans, "tools/call echo");
    assert_eq!(
        attribute(request, "mcp.method.name").as_deref(),
        Some("tools/call")
    );
    assert_eq!(
        attribute(request, "gen_ai.tool.name").as_deref(),
        Some("echo")
    );
    assert_eq!(
        attribute(request, "gen_ai.operation.name").as_deref(),
        Some("execute_tool")
    );
    assert_eq!(
        attribute(request, "jsonrpc.request.id").as_deref(),
        Some("41")
    );
    assert_eq!(
        attribute(request, "mcp.protocol.version").as_deref(),
        Some("2026-07-28")
    );
    assert_eq!(
        attribute(request, "mcp_gate.decision").as_deref(),
        Some("allow")
    );
    assert_eq!(request.span_kind, opentelemetry::trace::SpanKind::Server);

    let http = named(&spans, "POST");
    assert_eq!(
        attribute(http, "http.request.method").as_deref(),
        Some("POST")
    );
    assert_eq!(
        attribute(http, "http.response.status_code").as_deref(),
        Some("200")
    );
    assert_eq!(request.parent_span_id, http.span_context.span_id());

    let verify = named(&spans, "mcp_gate::verify");
    let policy = named(&spans, "mcp_gate::policy");
    let inner = named(&spans, "mcp_gate::inner");
    assert!(descends(&spans, verify, http), "{spans:#?}");
    assert_eq!(attribute(verify, "mcp_gate.outcome").as_deref(), Some("ok"));
    assert_eq!(attribute(verify, "mcp_gate.cache").as_deref(), Some("miss"));
    assert!(descends(&spans, policy, request), "{spans:#?}");
    assert_eq!(
        attribute(policy, "mcp_gate.phase").as_deref(),
        Some("invocation")
    );
    assert_eq!(
        attribute(policy, "mcp_gate.decision").as_deref(),
        Some("allow")
    );
    assert!(descends(&spans, inner, request), "{spans:#?}");
    for span in [request, http, verify, policy, inner] {
        assert_eq!(span.span_context.trace_id(), http.span_context.trace_id());
    }
    // The inner server continued the trace under the gate's inner spans.
    assert_inner_parents(&spans, &setup.seen(), http.span_context.trace_id());

    assert_nothing_secret(&spans, &token);

    // A second call with the same token: the cache answers.
    exporter().reset();
    let reply = post(&setup, &token, &echo_call(42, json!({})), &[]).await;
    assert_eq!(reply.status, 200, "{reply:?}");
    let spans = spans_with("tools/call echo").await;
    assert!(
        spans.iter().any(|span| span.name == "mcp_gate::verify"
            && attribute(span, "mcp_gate.cache").as_deref() == Some("hit")),
        "{spans:#?}"
    );
    assert_nothing_secret(&spans, &token);
}

/// No attribute of any span carries the token or the argument.
fn assert_nothing_secret(spans: &[SpanData], token: &str) {
    assert_no_attribute_holds(spans, &[token, SECRET_ARGUMENT]);
}

/// No attribute of any span holds any of `words`.
fn assert_no_attribute_holds(spans: &[SpanData], words: &[&str]) {
    for span in spans {
        for kv in &span.attributes {
            let value = kv.value.to_string();
            for word in words {
                assert!(
                    !value.contains(word),
                    "{} carries {word:?}: {value}",
                    kv.key
                );
            }
        }
    }
}

#[tokio::test]
async fn a_legacy_session_is_named_by_its_digest() {
    let _serial = SERIAL.lock().await;
    exporter().reset();
    let setup = Setup::start(true).await;
    let token = setup.token();
    let initialize = json!({
        "jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "otel", "version": "0"}}
    });
    let reply = setup
        .server
        .post(Some(&token), &[], &initialize.to_string())
        .await;
    assert_eq!(reply.status, 200, "{reply:?}");
    let session = reply.headers["mcp-session-id"]
        .to_str()
        .expect("a session id")
        .to_owned();
    let headers = [
        ("mcp-session-id", session.as_str()),
        ("mcp-protocol-version", "2025-11-25"),
    ];
    let initialized = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    let reply = setup.server.post(Some(&token), &headers, initialized).await;
    assert_eq!(reply.status, 202, "{reply:?}");
    // The session lists the tools: the gate learns their names.
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}});
    let reply = setup
        .server
        .post(Some(&token), &headers, &list.to_string())
        .await;
    assert_eq!(reply.status, 200, "{reply:?}");
    let call = json!({"jsonrpc": "2.0", "id": "call-7", "method": "tools/call",
                      "params": {"name": "echo", "arguments": {"text": SECRET_ARGUMENT}}});
    let reply = setup
        .server
        .post(Some(&token), &headers, &call.to_string())
        .await;
    assert_eq!(reply.status, 200, "{reply:?}");

    let spans = spans_with("tools/call echo").await;
    let request = named(&spans, "tools/call echo");
    // A string id is any text a client sends: the span carries its digest, as a session's.
    let id_digest: String = Sha256::digest(b"call-7")[..8]
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect();
    assert_eq!(
        attribute(request, "jsonrpc.request.id").as_deref(),
        Some(id_digest.as_str())
    );
    assert_eq!(
        attribute(request, "mcp.protocol.version").as_deref(),
        Some("2025-11-25")
    );
    let digest = attribute(request, "mcp.session.id").expect("a session attribute");
    assert_eq!(digest.len(), 16, "{digest}");
    assert!(digest.bytes().all(|b| b.is_ascii_hexdigit()), "{digest}");
    assert_ne!(digest, session);
    for span in &spans {
        for kv in &span.attributes {
            let value = kv.value.to_string();
            assert!(
                !value.contains(&session),
                "{} carries the session id",
                kv.key
            );
            assert!(!value.contains(&token), "{} carries the token", kv.key);
        }
    }
}

#[tokio::test]
async fn the_trace_continues_from_meta() {
    let _serial = SERIAL.lock().await;
    exporter().reset();
    let setup = Setup::start(false).await;
    let traceparent = format!("00-{TRACE_ID}-{PARENT_ID}-01");
    let meta = json!({"traceparent": traceparent, "tracestate": "vendor=value"});
    let reply = post(&setup, &setup.token(), &echo_call(43, meta), &[]).await;
    assert_eq!(reply.status, 200, "{reply:?}");

    let spans = spans_with("tools/call echo").await;
    let request = named(&spans, "tools/call echo");
    assert_eq!(request.span_context.trace_id(), trace_id(TRACE_ID));
    assert_eq!(request.parent_span_id, span_id(PARENT_ID));
    assert!(request.parent_span_is_remote);
    // Linked to the HTTP request's span, which started a trace of its own (no header).
    let http = named(&spans, "POST");
    assert!(
        request
            .links
            .iter()
            .any(|link| link.span_context.span_id() == http.span_context.span_id()),
        "{request:#?}"
    );
    assert_inner_parents(&spans, &setup.seen(), trace_id(TRACE_ID));
}

#[tokio::test]
async fn the_trace_continues_from_the_traceparent_header() {
    let _serial = SERIAL.lock().await;
    exporter().reset();
    let setup = Setup::start(false).await;
    let traceparent = format!("00-{HEADER_TRACE_ID}-{HEADER_PARENT_ID}-01");
    let extra = [("traceparent", traceparent.as_str())];
    let reply = post(&setup, &setup.token(), &echo_call(44, json!({})), &extra).await;
    assert_eq!(reply.status, 200, "{reply:?}");

    let spans = spans_with("tools/call echo").await;
    let http = named(&spans, "POST");
    assert_eq!(http.span_context.trace_id(), trace_id(HEADER_TRACE_ID));
    assert_eq!(http.parent_span_id, span_id(HEADER_PARENT_ID));
    let request = named(&spans, "tools/call echo");
    assert_eq!(request.span_context.trace_id(), trace_id(HEADER_TRACE_ID));
    assert_eq!(request.parent_span_id, http.span_context.span_id());
    assert_inner_parents(&spans, &setup.seen(), trace_id(HEADER_TRACE_ID));
}

#[tokio::test]
async fn meta_wins_over_the_header() {
    let _serial = SERIAL.lock().await;
    exporter().reset();
    let setup = Setup::start(false).await;
    let header = format!("00-{HEADER_TRACE_ID}-{HEADER_PARENT_ID}-01");
    let meta = json!({"traceparent": format!("00-{TRACE_ID}-{PARENT_ID}-01")});
    let extra = [("traceparent", header.as_str())];
    let reply = post(&setup, &setup.token(), &echo_call(45, meta), &extra).await;
    assert_eq!(reply.status, 200, "{reply:?}");

    let spans = spans_with("tools/call echo").await;
    let request = named(&spans, "tools/call echo");
    assert_eq!(request.span_context.trace_id(), trace_id(TRACE_ID));
    assert_eq!(request.parent_span_id, span_id(PARENT_ID));
    // The transport's span still continues the header's trace.
    let http = named(&spans, "POST");
    assert_eq!(http.span_context.trace_id(), trace_id(HEADER_TRACE_ID));
    assert_inner_parents(&spans, &setup.seen(), trace_id(TRACE_ID));
}

#[tokio::test]
async fn an_invalid_traceparent_starts_a_fresh_trace() {
    let _serial = SERIAL.lock().await;
    exporter().reset();
    let setup = Setup::start(false).await;
    // All-zero trace id: invalid by the W3C rules.
    let invalid = format!("00-{}-{PARENT_ID}-01", "0".repeat(32));
    let meta = json!({"traceparent": "not a traceparent"});
    let extra = [("traceparent", invalid.as_str())];
    let reply = post(&setup, &setup.token(), &echo_call(46, meta), &extra).await;
    assert_eq!(reply.status, 200, "{reply:?}");
    assert!(reply.text.contains(SECRET_ARGUMENT), "{reply:?}");

    let spans = spans_with("tools/call echo").await;
    let http = named(&spans, "POST");
    assert_eq!(http.parent_span_id, SpanId::INVALID);
    let request = named(&spans, "tools/call echo");
    assert_eq!(
        request.span_context.trace_id(),
        http.span_context.trace_id()
    );
    assert_eq!(request.parent_span_id, http.span_context.span_id());
    assert_ne!(request.span_context.trace_id(), trace_id(TRACE_ID));
}

/// The official Python SDK client, run inside a trace: the SDK itself writes the trace context
/// into `_meta` of every request it sends (SEP-414), and the gate continues it in each request's
/// span and passes it on to the inner server from its own inner spans.
#[tokio::test]
async fn the_trace_continues_from_the_python_sdks_meta() {
    let _serial = SERIAL.lock().await;
    exporter().reset();
    let setup = Setup::start(false).await;
    let traceparent = format!("00-{TRACE_ID}-{PARENT_ID}-01");
    let token = setup.token();
    let call = format!(r#"echo={{"text":"{SECRET_ARGUMENT}"}}"#);
    let run = run_client(
        Sdk::Python,
        &setup.server.url,
        &[
            "--token",
            &token,
            "--call",
            &call,
            "--traceparent",
            &traceparent,
        ],
    )
    .await;
    assert!(run.success, "{:#?}\n{}", run.steps, run.stderr);
    assert_eq!(
        run.steps.first().map(|step| &step["protocol_version"]),
        Some(&json!("2026-07-28")),
        "a modern connection: {:#?}",
        run.steps
    );

    let spans = spans_with("tools/call echo").await;
    // Every JSON-RPC request the SDK sent (its discovery and the call) continues the trace.
    let requests: Vec<&SpanData> = spans
        .iter()
        .filter(|span| attribute(span, "mcp.method.name").is_some())
        .collect();
    assert!(requests.len() >= 2, "{spans:#?}");
    for request in &requests {
        assert_eq!(
            request.span_context.trace_id(),
            trace_id(TRACE_ID),
            "{request:#?}"
        );
        assert_eq!(request.parent_span_id, span_id(PARENT_ID), "{request:#?}");
        assert!(request.parent_span_is_remote);
    }
    let call = named(&spans, "tools/call echo");
    assert_eq!(attribute(call, "gen_ai.tool.name").as_deref(), Some("echo"));
    // What reached the inner server names the gate's inner spans, in the SDK's trace.
    let inner: Vec<&SpanData> = spans
        .iter()
        .filter(|span| span.name == "mcp_gate::inner")
        .collect();
    let seen = setup.seen();
    assert!(!seen.is_empty());
    for header in &seen {
        let header = header.as_deref().expect("a traceparent");
        assert!(
            inner
                .iter()
                .any(|span| header == format!("00-{TRACE_ID}-{}-01", span.span_context.span_id())),
            "{header} names no inner span of the gate's in the SDK's trace"
        );
    }
    assert_nothing_secret(&spans, &token);
}

/// What a caller chose is never an attribute: a tool the inner server does not list is
/// `other`, a method outside the method table is `other`.
#[tokio::test]
async fn names_no_one_lists_are_other() {
    let _serial = SERIAL.lock().await;
    exporter().reset();
    let setup = Setup::start(false).await;
    let token = setup.token();
    let (body, headers) = modern(
        47,
        "tools/call",
        json!({"name": "unlisted-tool-name", "arguments": {}}),
        "unlisted-tool-name",
        json!({}),
    );
    let reply = post(&setup, &token, &(body, headers), &[]).await;
    assert!(reply.status < 500, "{reply:?}");
    let spans = spans_with("tools/call other").await;
    let request = named(&spans, "tools/call other");
    assert_eq!(
        attribute(request, "gen_ai.tool.name").as_deref(),
        Some("other")
    );

    exporter().reset();
    let unknown = modern(48, "vendor/secretMethod", json!({}), "", json!({}));
    let reply = post(&setup, &token, &unknown, &[]).await;
    assert!(reply.status < 500, "{reply:?}");
    let spans = spans_with("other").await;
    let request = named(&spans, "other");
    assert_eq!(
        attribute(request, "mcp.method.name").as_deref(),
        Some("other")
    );
    assert_no_attribute_holds(&spans, &["unlisted-tool-name", "secretMethod"]);
}
