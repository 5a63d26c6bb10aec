//! Composition: the layer under `Router::layer`, under `Router::route_layer`, inside a
//! `tower::ServiceBuilder` stack with tower-http's trace, CORS and timeout layers, and in front of
//! an MCP server that is not rmcp (the official TypeScript SDK server, behind a reverse proxy).
//!
//! The first three drive an axum `Router` with `tower::ServiceExt::oneshot` and tokens signed by
//! a local test key; the last one runs real peers: `oidc-provider`, the TypeScript SDK server
//! (`tests/peers/ts-server.mjs`) and the TypeScript SDK client, all on 127.0.0.1.

use crate::common;

use std::convert::Infallible;
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use axum::{Json, Router};
use common::peers::{AuthServer, GatedServer, Sdk, ensure_peers, peers_dir, run_client};
use common::tokens::{TestKey, claims};
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, header};
use mcp_gate::denial::ENVELOPE_KEY;
use mcp_gate::{Decision, Evaluation, Gate, Issuer, Principal, StaticKeys};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tower::{Service, ServiceBuilder, ServiceExt};
use tower_http::cors::CorsLayer;
use tower_http::timeout::TimeoutLayer;
use tower_http::trace::TraceLayer;

const ISSUER: &str = "https://as.example";
const RESOURCE: &str = "http://127.0.0.1:8080/mcp";
const MCP_SESSION_ID: HeaderName = HeaderName::from_static("mcp-session-id");
const MCP_PROTOCOL_VERSION: HeaderName = HeaderName::from_static("mcp-protocol-version");

// ---------------------------------------------------------------------------------------------
// In-process harness: a gate with a local key, and an inner MCP handler that records its calls
// ---------------------------------------------------------------------------------------------

/// The policy of every test here: the tool `forbidden` is never allowed, everything else is.
async fn deny_forbidden(evaluation: Evaluation) -> Result<Decision, Infallible> {
    Ok(match evaluation.tool() {
        Some("forbidden") => Decision::unavailable("The forbidden tool is never allowed."),
        _ => Decision::allow(),
    })
}

struct Local {
    gate: Gate,
    key: TestKey,
}

impl Local {
    fn new() -> Self {
        let key = TestKey::es256("compose-key");
        let keys = StaticKeys::from_jwks_json(&key.jwks_json()).expect("jwks");
        let gate = Gate::builder()
            .evaluate(deny_forbidden)
            .resource(RESOURCE)
            .issuer(Issuer::with_keys(ISSUER, keys))
            .required_scopes(["mcp:read"])
            // The browser client of the CORS test is served from another origin.
            .allowed_origins([BROWSER_ORIGIN])
            .build()
            .expect("gate builds");
        Self { gate, key }
    }

    fn token(&self) -> String {
        self.key.mint(&claims(ISSUER, RESOURCE, "mcp:read"))
    }
}

/// An allowed `echo` through `app` reaches the inner handler as its first hit: without the
/// token, with the caller's subject.
async fn assert_echo_reaches_inner(app: &Router, local: &Local, inner: &Inner) {
    let ok = send(app, tools_call("/mcp", Some(&local.token()), "echo")).await;
    assert_eq!(ok.status, StatusCode::OK, "{}", ok.body);
    assert_eq!(
        ok.seen(),
        json!({"tool": "echo", "authorization": false, "subject": "user-1"})
    );
    assert_eq!(inner.hits.load(Ordering::SeqCst), 1);
}

/// What the inner handler saw.
#[derive(Clone, Default)]
struct Inner {
    /// Requests that reached the handler.
    hits: Arc<AtomicUsize>,
    /// Calls of the `slow` tool whose sleep ran to its end.
    slow_finished: Arc<AtomicUsize>,
}

/// A minimal MCP endpoint: answers every `tools/call` with a text result describing what it
/// received. The tool `slow` sleeps for a minute first.
async fn inner_mcp(
    State(inner): State<Inner>,
    headers: HeaderMap,
    principal: Option<Principal>,
    body: Bytes,
) -> Json<Value> {
    inner.hits.fetch_add(1, Ordering::SeqCst);
    let message: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let tool = message["params"]["name"].as_str().unwrap_or_default();
    if tool == "slow" {
        tokio::time::sleep(Duration::from_secs(60)).await;
        inner.slow_finished.fetch_add(1, Ordering::SeqCst);
    }
    let seen = json!({
        "tool": tool,
        "authorization": headers.contains_key(header::AUTHORIZATION),
        "subject": principal.as_ref().and_then(|p| p.subject().map(str::to_owned)),
    });
    Json(json!({
        "jsonrpc": "2.0",
        "id": message["id"].clone(),
        "result": {"content": [{"type": "text", "text": seen.to_string()}]},
    }))
}

fn tools_call(path: &str, token: Option<&str>, tool: &str) -> http::Request<Body> {
    let body = json!({
        "jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": tool, "arguments": {}},
    });
    let mut request = http::Request::post(path)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::ACCEPT, "application/json, text/event-stream");
    if let Some(token) = token {
        request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
    }
    request.body(Body::from(body.to_string())).expect("request")
}

fn get_request(path: &str) -> http::Request<Body> {
    http::Request::get(path)
        .body(Body::empty())
        .expect("request")
}

struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: Value,
}

impl Answer {
    /// The `seen` object the inner handler wrote into its tool result.
    fn seen(&self) -> Value {
        let text = self.body["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_else(|| panic!("not a tool result: {}", self.body));
        serde_json::from_str(text).expect("seen JSON")
    }

    fn header(&self, name: impl http::header::AsHeaderName) -> &str {
        self.headers
            .get(name)
            .map(|v| v.to_str().expect("ascii"))
            .unwrap_or("")
    }
}

async fn send(app: &Router, request: http::Request<Body>) -> Answer {
    let response = app.clone().oneshot(request).await.expect("infallible");
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .expect("body");
    Answer {
        status,
        headers,
        body: serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned())),
    }
}

fn assert_challenge(answer: &Answer, gate: &Gate) {
    assert_eq!(answer.status, StatusCode::UNAUTHORIZED, "{}", answer.body);
    assert_eq!(
        answer.header(header::WWW_AUTHENTICATE),
        format!(
            "Bearer scope=\"mcp:read\", resource_metadata=\"{}\"",
            gate.metadata_url()
        ),
    );
}

// ---------------------------------------------------------------------------------------------
// 1. Router::layer
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn router_layer_guards_the_router_and_leaves_merged_routes_public() {
    let local = Local::new();
    let inner = Inner::default();
    let app = Router::new()
        .route("/mcp", post(inner_mcp))
        .with_state(inner.clone())
        .layer(local.gate.layer())
        .merge(local.gate.metadata_router());

    assert_challenge(
        &send(&app, tools_call("/mcp", None, "echo")).await,
        &local.gate,
    );
    assert_eq!(inner.hits.load(Ordering::SeqCst), 0);

    // Where unknown paths go depends on axum's fallback, not on the gate. `Router::layer` wraps
    // the router's own fallback, so on its own the layered router challenges them; once
    // `metadata_router()` is merged, the merged (unlayered) default fallback answers 404.
    let bare = Router::new()
        .route("/mcp", post(inner_mcp))
        .with_state(inner.clone())
        .layer(local.gate.layer());
    assert_challenge(
        &send(&bare, tools_call("/nope", None, "echo")).await,
        &local.gate,
    );
    let unknown = send(&app, tools_call("/nope", None, "echo")).await;
    assert_eq!(unknown.status, StatusCode::NOT_FOUND);

    assert_echo_reaches_inner(&app, &local, &inner).await;

    // The metadata router was merged after the layer: public, no token needed.
    for path in local.gate.metadata_paths() {
        let metadata = send(&app, get_request(path)).await;
        assert_eq!(metadata.status, StatusCode::OK, "{path}");
        assert_eq!(metadata.body["resource"], RESOURCE);
    }
}

/// The layer answers its own metadata paths, so the order of `.layer(...)` and `.merge(...)`
/// does not matter, and neither does leaving the metadata router out: every composition serves
/// the same document without a token, with the router's headers, and guards `/mcp` the same.
#[tokio::test]
async fn composition_does_not_depend_on_order() {
    let local = Local::new();
    let inner = Inner::default();
    let mcp = || {
        Router::new()
            .route("/mcp", post(inner_mcp))
            .with_state(inner.clone())
    };
    let compositions = [
        (
            "layer, then merge",
            mcp()
                .layer(local.gate.layer())
                .merge(local.gate.metadata_router()),
        ),
        (
            "merge, then layer",
            mcp()
                .merge(local.gate.metadata_router())
                .layer(local.gate.layer()),
        ),
        ("layer alone", mcp().layer(local.gate.layer())),
    ];
    let mut documents = Vec::new();
    for (name, app) in &compositions {
        for path in local.gate.metadata_paths() {
            let metadata = send(app, get_request(path)).await;
            assert_eq!(metadata.status, StatusCode::OK, "{name} {path}");
            assert_eq!(metadata.body["resource"], RESOURCE, "{name}");
            assert_eq!(
                metadata.header(header::CONTENT_TYPE),
                "application/json",
                "{name}"
            );
            assert_eq!(
                metadata.header(header::ACCESS_CONTROL_ALLOW_ORIGIN),
                "*",
                "{name}: open to every origin"
            );
            documents.push(metadata.body);
        }
        // A browser on another origin reads the document too (no Origin check there).
        let mut cross = get_request(&local.gate.metadata_paths()[0]);
        cross.headers_mut().insert(
            header::ORIGIN,
            HeaderValue::from_static("https://inspector.example"),
        );
        assert_eq!(send(app, cross).await.status, StatusCode::OK, "{name}");
        assert_challenge(
            &send(app, tools_call("/mcp", None, "echo")).await,
            &local.gate,
        );
        let ok = send(app, tools_call("/mcp", Some(&local.token()), "echo")).await;
        assert_eq!(ok.status, StatusCode::OK, "{name}: {}", ok.body);
    }
    assert!(
        documents.windows(2).all(|pair| pair[0] == pair[1]),
        "one document whatever the composition"
    );
    assert_eq!(inner.hits.load(Ordering::SeqCst), compositions.len());
}

// ---------------------------------------------------------------------------------------------
// 2. Router::route_layer
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn route_layer_guards_only_the_mcp_route() {
    let local = Local::new();
    let inner = Inner::default();
    let app = Router::new()
        .route("/mcp", post(inner_mcp))
        .route_layer(local.gate.layer())
        // Added after `route_layer`: outside the gate.
        .route("/health", get(|| async { "ok" }))
        .with_state(inner.clone())
        .merge(local.gate.metadata_router());

    // `route_layer` runs only for matched routes: an unknown path is axum's 404, not a 401.
    let unknown = send(&app, tools_call("/nope", None, "echo")).await;
    assert_eq!(unknown.status, StatusCode::NOT_FOUND);
    assert!(unknown.headers.get(header::WWW_AUTHENTICATE).is_none());

    let health = send(&app, get_request("/health")).await;
    assert_eq!(health.status, StatusCode::OK);
    assert_eq!(health.body, "ok");
    let metadata = send(&app, get_request(&local.gate.metadata_paths()[0])).await;
    assert_eq!(metadata.status, StatusCode::OK);

    assert_challenge(
        &send(&app, tools_call("/mcp", None, "echo")).await,
        &local.gate,
    );
    let denied = send(&app, tools_call("/mcp", Some(&local.token()), "forbidden")).await;
    assert_eq!(denied.status, StatusCode::OK, "{}", denied.body);
    assert_eq!(denied.body["result"]["isError"], true, "{}", denied.body);
    assert_eq!(inner.hits.load(Ordering::SeqCst), 0);

    let ok = send(&app, tools_call("/mcp", Some(&local.token()), "echo")).await;
    assert_eq!(ok.status, StatusCode::OK, "{}", ok.body);
    assert_eq!(ok.seen()["authorization"], false);
    assert_eq!(inner.hits.load(Ordering::SeqCst), 1);
}

// ---------------------------------------------------------------------------------------------
// 3. tower::ServiceBuilder with tower-http trace, CORS and timeout
// ---------------------------------------------------------------------------------------------

const BROWSER_ORIGIN: &str = "http://app.example";
const TIMEOUT: Duration = Duration::from_secs(1);

/// An inner service that counts its clones and says, in each answer, whether the instance
/// that answered was readied by `poll_ready` first.
struct Counted {
    clones: Arc<AtomicUsize>,
    ready: bool,
}

impl Clone for Counted {
    fn clone(&self) -> Self {
        self.clones.fetch_add(1, Ordering::SeqCst);
        Self {
            clones: self.clones.clone(),
            ready: false,
        }
    }
}

impl tower::Service<http::Request<Body>> for Counted {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = std::future::Ready<Result<Self::Response, Infallible>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Infallible>> {
        self.ready = true;
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: http::Request<Body>) -> Self::Future {
        let result = json!({"content": [{"type": "text", "text": json!({"ready": self.ready}).to_string()}]});
        let body = json!({"jsonrpc": "2.0", "id": 7, "result": result}).to_string();
        std::future::ready(Ok(http::Response::new(Body::from(body))))
    }
}

#[tokio::test]
async fn each_request_gets_one_readied_clone_of_the_inner_service() {
    let local = Local::new();
    let clones = Arc::new(AtomicUsize::new(0));
    let service = tower::Layer::layer(
        &local.gate.layer(),
        Counted {
            clones: clones.clone(),
            ready: false,
        },
    );
    let token = local.token();
    // As axum serves a route: a clone of the service per request, readied, then called.
    for round in 1..=3 {
        let response = service
            .clone()
            .oneshot(tools_call("/mcp", Some(&token), "echo"))
            .await
            .expect("infallible");
        let bytes = axum::body::to_bytes(Body::new(response.into_body()), 1 << 20)
            .await
            .expect("body");
        let answer: Value = serde_json::from_slice(&bytes).expect("JSON");
        let text = answer["result"]["content"][0]["text"]
            .as_str()
            .expect("text");
        assert_eq!(
            text, r#"{"ready":true}"#,
            "the call went to the readied clone"
        );
        // One copy of the inner service per request: cloning the gate's service shares it.
        assert_eq!(clones.load(Ordering::SeqCst), round);
    }
    // A refusal does not reach the inner service, and the readied clone is kept for the next
    // call on the same service.
    let mut held = service.clone();
    let refused = held
        .ready()
        .await
        .expect("ready")
        .call(tools_call("/mcp", None, "echo"))
        .await
        .expect("infallible");
    assert_eq!(refused.status(), StatusCode::UNAUTHORIZED);
    let allowed = held
        .ready()
        .await
        .expect("ready")
        .call(tools_call("/mcp", Some(&token), "echo"))
        .await
        .expect("infallible");
    assert_eq!(allowed.status(), StatusCode::OK);
    assert_eq!(clones.load(Ordering::SeqCst), 4);
    // The inner service is still there to be read, and to be taken back.
    assert!(
        !held.get_ref().ready,
        "the shared service is never readied or called"
    );
    assert!(!held.into_inner().ready);
}

#[tokio::test]
async fn service_builder_with_trace_cors_and_timeout() {
    let local = Local::new();
    let inner = Inner::default();
    let traced: Arc<Mutex<Vec<u16>>> = Arc::default();
    let trace_log = traced.clone();

    let stack = ServiceBuilder::new()
        // Outermost: every answer is traced, the gate's refusals and the timeout's 408 included.
        .layer(TraceLayer::new_for_http().on_response(
            move |response: &http::Response<_>, _latency: Duration, _span: &tracing::Span| {
                trace_log
                    .lock()
                    .expect("trace log")
                    .push(response.status().as_u16());
            },
        ))
        // CORS must sit outside the gate. A browser sends its preflight (OPTIONS) without any
        // credentials, so a gate in front of CORS would answer it 401 and the browser would
        // never send the real request. And the gate's own 401/403 must carry the CORS headers
        // (with `WWW-Authenticate` exposed), or a browser client cannot read the challenge
        // that tells it where the metadata is.
        .layer(
            CorsLayer::new()
                .allow_origin(HeaderValue::from_static(BROWSER_ORIGIN))
                .allow_methods([Method::GET, Method::POST, Method::DELETE])
                .allow_headers([
                    header::AUTHORIZATION,
                    header::CONTENT_TYPE,
                    header::ACCEPT,
                    MCP_SESSION_ID,
                    MCP_PROTOCOL_VERSION,
                ])
                .expose_headers([header::WWW_AUTHENTICATE, MCP_SESSION_ID]),
        )
        // Outside the gate, the timeout also bounds the gate's own work (a key fetch, the body).
        .layer(TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            TIMEOUT,
        ))
        // CORS and the timeout build some answers themselves and need `ResBody: Default`:
        // `GateBody` is, so the gate sits directly inside them in one stack.
        .layer(local.gate.layer());
    let app = Router::new()
        .route("/mcp", post(inner_mcp))
        .with_state(inner.clone())
        .layer(stack)
        .merge(local.gate.metadata_router());

    // A CORS preflight is answered by the CORS layer, without a token.
    let preflight = http::Request::builder()
        .method(Method::OPTIONS)
        .uri("/mcp")
        .header(header::ORIGIN, BROWSER_ORIGIN)
        .header(header::ACCESS_CONTROL_REQUEST_METHOD, "POST")
        .header(
            header::ACCESS_CONTROL_REQUEST_HEADERS,
            "authorization,content-type,mcp-protocol-version",
        )
        .body(Body::empty())
        .expect("preflight");
    let preflight = send(&app, preflight).await;
    assert_eq!(preflight.status, StatusCode::OK, "{}", preflight.body);
    assert_eq!(
        preflight.header(header::ACCESS_CONTROL_ALLOW_ORIGIN),
        BROWSER_ORIGIN
    );
    assert!(
        preflight
            .header(header::ACCESS_CONTROL_ALLOW_METHODS)
            .contains("POST")
    );
    assert!(
        preflight
            .header(header::ACCESS_CONTROL_ALLOW_HEADERS)
            .contains("authorization")
    );
    assert!(preflight.headers.get(header::WWW_AUTHENTICATE).is_none());

    // The gate's 401, answered at once, with its challenge readable by a browser.
    let started = Instant::now();
    let mut request = tools_call("/mcp", None, "echo");
    request
        .headers_mut()
        .insert(header::ORIGIN, HeaderValue::from_static(BROWSER_ORIGIN));
    let refused = send(&app, request).await;
    assert!(started.elapsed() < TIMEOUT, "{:?}", started.elapsed());
    assert_challenge(&refused, &local.gate);
    assert_eq!(
        refused.header(header::ACCESS_CONTROL_ALLOW_ORIGIN),
        BROWSER_ORIGIN
    );
    assert!(
        refused
            .header(header::ACCESS_CONTROL_EXPOSE_HEADERS)
            .contains("www-authenticate"),
        "{:?}",
        refused.headers
    );

    // A policy denial is the gate's own answer too: not delayed, never reaching the handler.
    let started = Instant::now();
    let denied = send(&app, tools_call("/mcp", Some(&local.token()), "forbidden")).await;
    assert!(started.elapsed() < TIMEOUT, "{:?}", started.elapsed());
    assert_eq!(denied.status, StatusCode::OK, "{}", denied.body);
    assert_eq!(denied.body["result"]["isError"], true, "{}", denied.body);
    assert_eq!(
        denied.body["result"]["_meta"][ENVELOPE_KEY]["remediation"],
        "unavailable"
    );
    assert_eq!(inner.hits.load(Ordering::SeqCst), 0);

    // A real call goes through the whole stack.
    assert_echo_reaches_inner(&app, &local, &inner).await;

    // A slow handler, behind an authorized call, is cut by the timeout.
    let started = Instant::now();
    let slow = send(&app, tools_call("/mcp", Some(&local.token()), "slow")).await;
    let elapsed = started.elapsed();
    assert_eq!(slow.status, StatusCode::REQUEST_TIMEOUT, "{}", slow.body);
    assert!(
        elapsed >= TIMEOUT && elapsed < TIMEOUT * 10,
        "cut after {elapsed:?}"
    );
    assert_eq!(inner.hits.load(Ordering::SeqCst), 2, "the slow call got in");
    assert_eq!(inner.slow_finished.load(Ordering::SeqCst), 0);

    assert_eq!(
        *traced.lock().expect("trace log"),
        vec![200, 401, 200, 200, 408],
        "the trace layer saw every answer"
    );
}

// ---------------------------------------------------------------------------------------------
// 4. A non-rmcp MCP server: the TypeScript SDK server behind a reverse proxy behind the gate
// ---------------------------------------------------------------------------------------------

/// `tests/peers/ts-server.mjs`: the official TypeScript SDK MCP server, no auth of its own.
struct TsServer {
    _child: tokio::process::Child,
    url: String,
    log_url: String,
}

impl TsServer {
    async fn start() -> Self {
        ensure_peers();
        let mut child = tokio::process::Command::new("node")
            .arg(peers_dir().join("ts-server.mjs"))
            .env("TS_SERVER_EXIT_ON_STDIN_EOF", "1")
            .env("TS_SERVER_MAX_SECONDS", "300")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn node ts-server.mjs");
        let stdout = child.stdout.take().expect("stdout");
        let line = tokio::time::timeout(
            Duration::from_secs(30),
            BufReader::new(stdout).lines().next_line(),
        )
        .await
        .expect("ts-server.mjs did not start within 30 s")
        .expect("read ts-server.mjs stdout")
        .expect("ts-server.mjs exited before printing its address");
        let ready: Value = serde_json::from_str(&line).expect("ready line is JSON");
        Self {
            _child: child,
            url: ready["url"].as_str().expect("url").to_owned(),
            log_url: ready["log_url"].as_str().expect("log_url").to_owned(),
        }
    }

    /// Every request the server received on `/mcp`.
    async fn log(&self) -> Vec<Value> {
        reqwest::get(&self.log_url)
            .await
            .expect("log")
            .json()
            .await
            .expect("log JSON")
    }
}

/// One request as the proxy received it from the gate.
#[derive(Debug, Clone)]
struct Forwarded {
    method: Method,
    rpc: Option<String>,
    tool: Option<String>,
    authorization: bool,
}

/// A plain reverse proxy to one upstream URL: it knows nothing about OAuth or MCP.
#[derive(Clone)]
struct Proxy {
    upstream: String,
    client: reqwest::Client,
    forwarded: Arc<Mutex<Vec<Forwarded>>>,
}

/// Forwards the request with every end-to-end header (so an `Authorization` header, had the
/// gate let one through, would reach the upstream), and streams the answer back: SSE streams
/// (POST answers and the GET stream of the TypeScript server) pass chunk by chunk.
async fn reverse_proxy(State(proxy): State<Proxy>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let Ok(body) = axum::body::to_bytes(body, 4 << 20).await else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    let message: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    proxy.forwarded.lock().expect("log").push(Forwarded {
        method: parts.method.clone(),
        rpc: message["method"].as_str().map(str::to_owned),
        tool: message["params"]["name"].as_str().map(str::to_owned),
        authorization: parts.headers.contains_key(header::AUTHORIZATION),
    });

    let upstream = proxy.client.request(parts.method, &proxy.upstream);
    let upstream = common::proxy::forwarding(upstream, &parts.headers, body);
    let answer = match upstream.send().await {
        Ok(answer) => answer,
        Err(_) => return StatusCode::BAD_GATEWAY.into_response(),
    };

    common::proxy::streamed(answer)
}

#[tokio::test]
async fn typescript_sdk_server_behind_a_reverse_proxy() {
    let (auth, ts) = tokio::join!(AuthServer::start(&[]), TsServer::start());
    let forwarded: Arc<Mutex<Vec<Forwarded>>> = Arc::default();
    let proxy = Proxy {
        upstream: ts.url.clone(),
        client: reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .expect("client"),
        forwarded: forwarded.clone(),
    };
    let issuer = auth.issuer.clone();
    // `GatedServer` serves the router as `mcp.layer(gate.layer()).merge(gate.metadata_router())`.
    let server = GatedServer::start_with(
        |_| {
            Gate::builder()
                .evaluate(deny_forbidden)
                .issuer(issuer.as_str())
                .required_scopes(["mcp:read"])
        },
        Router::new()
            .route("/mcp", any(reverse_proxy))
            .with_state(proxy),
    )
    .await;

    let calls = [
        r#"echo={"text":"through the proxy"}"#,
        "seen_headers",
        "forbidden",
    ];
    let args = common::clients::calling(common::clients::read_scope_args(&auth, &[]), &calls);
    let run = run_client(Sdk::TypeScript, &server.url, &args).await;
    assert!(run.success, "{run:#?}");

    // Discovery: a 401 challenge, the metadata document, a token, then success.
    let first = &run.http[0];
    assert_eq!(first["status"], 401, "{run:#?}");
    assert!(
        first["www_authenticate"]
            .as_str()
            .is_some_and(|c| c.contains(server.gate.metadata_url())),
        "{first}"
    );
    let fetched = |url: &str| {
        run.http
            .iter()
            .any(|h| h["url"] == url && h["status"] == 200)
    };
    assert!(fetched(server.gate.metadata_url()), "{run:#?}");
    assert!(fetched(&auth.token_endpoint), "{run:#?}");

    // The TypeScript server lists four tools; the gate hid the one its policy refuses.
    let list = run
        .steps
        .iter()
        .find(|s| s["step"] == "list")
        .expect("list step");
    assert_eq!(
        list["tools"],
        json!(["echo", "seen_headers", "slow"]),
        "{list}"
    );

    assert_eq!(
        run.call("echo")["result"]["content"][0]["text"],
        "through the proxy"
    );
    let seen: Value = serde_json::from_str(
        run.call("seen_headers")["result"]["content"][0]["text"]
            .as_str()
            .expect("seen_headers text"),
    )
    .expect("seen_headers JSON");
    assert_eq!(seen["authorization"], false, "{seen}");
    assert_eq!(seen["any_request_had_authorization"], false, "{seen}");
    let names = seen["headers"].as_array().expect("header names");
    assert!(names.contains(&json!("mcp-session-id")), "{seen}");
    assert!(names.contains(&json!("mcp-protocol-version")), "{seen}");

    // The denial is the gate's answer (legacy: a tool error with the SEP-2643 envelope).
    let denied = &run.call("forbidden")["result"];
    assert_eq!(denied["isError"], true, "{denied}");
    assert_eq!(
        denied["content"][0]["text"],
        "The forbidden tool is never allowed."
    );
    assert_eq!(denied["_meta"][ENVELOPE_KEY]["remediation"], "unavailable");

    // Neither the proxy nor the TypeScript server saw the denied call or any token.
    let forwarded = forwarded.lock().expect("log").clone();
    assert!(
        forwarded
            .iter()
            .any(|f| f.tool.as_deref() == Some("echo") && f.method == Method::POST),
        "{forwarded:#?}"
    );
    assert!(
        forwarded
            .iter()
            .any(|f| f.rpc.as_deref() == Some("initialize")),
        "{forwarded:#?}"
    );
    assert!(
        !forwarded
            .iter()
            .any(|f| f.tool.as_deref() == Some("forbidden")),
        "{forwarded:#?}"
    );
    assert!(!forwarded.iter().any(|f| f.authorization), "{forwarded:#?}");
    // The client's standalone SSE stream (GET) went through, streamed while it stayed open.
    assert!(
        forwarded.iter().any(|f| f.method == Method::GET),
        "{forwarded:#?}"
    );
    let log = ts.log().await;
    assert!(!log.is_empty());
    assert!(
        log.iter().all(|entry| entry["authorization"] == false),
        "{log:#?}"
    );
    assert!(
        !log.iter().any(|entry| entry["tool"] == "forbidden"),
        "{log:#?}"
    );
    assert!(log.iter().any(|entry| entry["tool"] == "echo"), "{log:#?}");
    // The session the TypeScript server opened travelled back through proxy and gate: every
    // request after `initialize` carried it.
    assert!(
        log.iter()
            .filter(|entry| entry["rpc"] != "initialize")
            .all(|entry| entry["session"].is_string()),
        "{log:#?}"
    );

    // DELETE ends a session through the same stack; without a token it never gets there.
    let token = auth.client_token("mcp:read", &server.url).await;
    let initialize = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "compose-test", "version": "0"},
        },
    });
    let opened = server
        .post(Some(&token), &[], &initialize.to_string())
        .await;
    assert_eq!(opened.status, 200, "{}", opened.text);
    assert!(
        opened.text.contains("mcp-gate-ts-server"),
        "{}",
        opened.text
    );
    let session = opened
        .headers
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .expect("a session id from the TypeScript server")
        .to_owned();
    let delete = |token: Option<&str>| {
        let mut request = reqwest::Client::new()
            .delete(&server.url)
            .header("mcp-session-id", &session)
            .header("mcp-protocol-version", "2025-11-25");
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        request.send()
    };
    let before = ts.log().await.len();
    let refused = delete(None).await.expect("delete");
    assert_eq!(refused.status(), 401);
    assert_eq!(
        ts.log().await.len(),
        before,
        "a refused DELETE never reached it"
    );
    let ended = delete(Some(&token)).await.expect("delete");
    assert_eq!(ended.status(), 200);
    let log = ts.log().await;
    assert_eq!(log.len(), before + 1);
    assert_eq!(log[before]["method"], "DELETE");
    assert_eq!(log[before]["session"], session.as_str());
    assert_eq!(log[before]["authorization"], false);
    // The session is gone on the TypeScript server: its 404 comes back through the gate.
    let gone = server
        .post(
            Some(&token),
            &[
                ("mcp-session-id", &session),
                ("mcp-protocol-version", "2025-11-25"),
            ],
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{}}"#,
        )
        .await;
    assert_eq!(gone.status, 404, "{}", gone.text);
}
