//! The official SDK clients reading what leaves the gate (issue 24, "Real parts"): the
//! TypeScript SDK 1.32.2 client (legacy 2025-11-25 sessions) and the Python SDK 2.3.0 client
//! (modern 2026-07-28 where the inner server answers `server/discover`, legacy otherwise) list
//! everything through a gate whose policy hides every entry with a name (or URI segment)
//! starting `hidden_`. Three inner servers stand behind the gate:
//!
//! - a scripted one written here, answering each listing in a framing from a fixed, seeded
//!   sample of valid WHATWG event streams and JSON bodies, plus a few unreadable answers;
//! - rmcp, with its defaults (sessions, answers as event streams);
//! - the TypeScript SDK's own server (`tests/peers/ts-lists-server.mjs`), behind a plain
//!   reverse proxy.
//!
//! Each client process is started once per inner server and lists every method for every
//! case in one run (`tests/peers/ts-lists.mjs`, `tests/peers/py_lists.py`). The tests fail if
//! any line a client printed (results and the error texts the SDK raised alike) holds a hidden
//! entry's name, if a readable answer does not surface every visible entry in order, or if an
//! unreadable one surfaces anything but the layer's `-32603` refusal with its `problem`
//! (`result_on_error_status`, `no_response`, `after_response`).

use crate::common;

use std::fmt::Write as _;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use common::peers::{GatedServer, ensure_peers, peers_dir};
use common::scripted::{LISTINGS, Listing};
use common::tokens::{TestKey, claims};
use http::{Method, StatusCode, header};
use mcp_gate::policy::{Decision, Evaluation};
use mcp_gate::{Gate, GateBuilder, Issuer, StaticKeys};
use rmcp::model::{
    ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

const ISSUER: &str = "https://as.example";
/// Where a client's request names the case the scripted server answers with.
const CASE_KEY: &str = "mcp-gate-test/case";
/// The seed of the framing sample: the same cases on every run.
const SEED: u64 = 0x6d63_702d_6761_7465;
/// How many readable framings the sample holds (besides the unreadable answers).
const READABLE_CASES: usize = 12;
/// What a client waits for one answer before it gives up on it.
const REQUEST_TIMEOUT_MS: &str = "2500";

// ---------------------------------------------------------------------------------------------
// What every inner server lists
// ---------------------------------------------------------------------------------------------

fn listing(method: &str) -> Option<Listing> {
    LISTINGS.iter().copied().find(|l| l.method == method)
}

/// The names each listing holds: two visible and two hidden ones, interleaved. Hidden names
/// are `hidden_<tag>_…` with a tag drawn for this run, so that a hidden name found in a
/// client's output cannot come from anywhere but the inner server's list.
#[derive(Clone, Debug)]
struct Catalogue {
    tag: String,
}

impl Catalogue {
    fn new() -> Self {
        let mut bytes = [0u8; 6];
        getrandom::fill(&mut bytes).expect("random bytes");
        Self {
            tag: bytes.iter().fold(String::new(), |mut tag, b| {
                let _ = write!(tag, "{b:02x}");
                tag
            }),
        }
    }

    /// The text every hidden name starts with.
    fn hidden_marker(&self) -> String {
        format!("hidden_{}", self.tag)
    }

    fn short(listing: Listing) -> String {
        listing.method.replace('/', "_")
    }

    fn visible(&self, listing: Listing) -> Vec<String> {
        (0..2)
            .map(|k| format!("shown_{}_{k}", Self::short(listing)))
            .collect()
    }

    fn hidden(&self, listing: Listing) -> Vec<String> {
        (0..2)
            .map(|k| format!("{}_{}_{k}", self.hidden_marker(), Self::short(listing)))
            .collect()
    }

    /// Every name of a listing, in the inner server's order.
    fn all(&self, listing: Listing) -> Vec<String> {
        self.visible(listing)
            .into_iter()
            .zip(self.hidden(listing))
            .flat_map(|(shown, hidden)| [shown, hidden])
            .collect()
    }

    /// The listing's entries as a server lists them.
    fn entries(&self, listing: Listing, names: &[String]) -> Vec<Value> {
        names.iter().map(|name| entry(listing, name)).collect()
    }
}

/// One list entry named `name`, shaped as `listing`'s result holds it.
fn entry(listing: Listing, name: &str) -> Value {
    match listing.entries {
        "tools" => {
            json!({"name": name, "description": "a tool", "inputSchema": {"type": "object"}})
        }
        "prompts" => json!({"name": name, "description": "a prompt"}),
        "resources" => json!({"uri": format!("test://r/{name}"), "name": name}),
        "resourceTemplates" => {
            json!({"uriTemplate": format!("test://t/{name}/{{id}}"), "name": name})
        }
        _ => {
            json!({"uri": format!("skill://{name}/SKILL.md"), "name": name, "description": "a skill"})
        }
    }
}

/// The policy: an entry (or request) whose name or URI has a `/`-separated segment starting
/// `hidden_` is undisclosed; everything else is allowed.
async fn hide_hidden(evaluation: Evaluation) -> Result<Decision, std::convert::Infallible> {
    let hidden = evaluation
        .target()
        .name()
        .is_some_and(|name| name.split('/').any(|s| s.starts_with("hidden_")));
    Ok(if hidden {
        Decision::undisclosed("")
    } else {
        Decision::allow()
    })
}

// ---------------------------------------------------------------------------------------------
// The seeded sample of framings
// ---------------------------------------------------------------------------------------------

/// SplitMix64: a small, seeded generator, so the sample is the same on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn coin(&mut self) -> bool {
        self.next() & 1 == 1
    }
}

/// How the lines of an event stream end.
#[derive(Clone, Copy, Debug)]
enum Ending {
    Lf,
    CrLf,
    Cr,
    /// Each line its own ending, drawn from the three.
    Mixed,
}

/// One valid framing of an answer holding exactly one response for the request's id.
#[derive(Clone, Debug)]
#[allow(clippy::struct_excessive_bools)] // each flag is one independent feature of the grammar
struct Framing {
    /// An event stream; `false` is one `application/json` body.
    stream: bool,
    /// A `charset=utf-8` parameter on the content type.
    charset: bool,
    ending: Ending,
    /// A leading U+FEFF.
    bom: bool,
    /// A comment line in each event.
    comments: bool,
    /// An unknown field (`x-unknown: …`) and a field line without a colon in each event.
    unknown_fields: bool,
    /// The JSON spread over several `data` lines (joined with LF by the reader).
    multiline: bool,
    /// `data:` with no space before the value.
    no_space: bool,
    /// A first event with an id and a retry but no data (nothing dispatched).
    priming: bool,
    /// A server notification before the response.
    notification: bool,
    /// `id:` and `retry:` fields on each event.
    ids: bool,
    /// `event: message` named on each event.
    named_event: bool,
    /// How many pieces the body is sent in.
    chunks: usize,
}

/// What the scripted server answers for one case.
#[derive(Clone, Debug)]
enum Answer {
    Readable(Framing),
    /// HTTP 500 whose JSON body is a response with the full, unfiltered result.
    ErrorStatusWithResult,
    /// An event stream holding a notification (with every entry in its params) and no response.
    NoResponse,
    /// An event stream with a response, then a second response to the same id with every entry.
    SecondResponse,
}

impl Answer {
    fn readable(&self) -> bool {
        matches!(self, Answer::Readable(_))
    }

    /// The `problem` of the layer's refusal of an unreadable answer (`None` for a readable one).
    fn problem(&self) -> Option<&'static str> {
        match self {
            Answer::Readable(_) => None,
            Answer::ErrorStatusWithResult => Some("result_on_error_status"),
            Answer::NoResponse => Some("no_response"),
            Answer::SecondResponse => Some("after_response"),
        }
    }
}

/// One named case of the sample.
#[derive(Clone, Debug)]
struct Case {
    name: String,
    answer: Answer,
}

/// The fixed sample: `READABLE_CASES` framings drawn from `SEED` (the first one JSON, the
/// event streams cycling through the four kinds of line ending), then the unreadable answers.
fn sample() -> Vec<Case> {
    let mut rng = Rng(SEED);
    let endings = [Ending::Lf, Ending::CrLf, Ending::Cr, Ending::Mixed];
    let mut cases: Vec<Case> = (0..READABLE_CASES)
        .map(|i| Case {
            name: format!("f{i}"),
            answer: Answer::Readable(Framing {
                stream: i != 0 && (i % 5 != 0 || rng.coin()),
                charset: rng.coin(),
                ending: endings[i % endings.len()],
                bom: rng.coin(),
                comments: rng.coin(),
                unknown_fields: rng.coin(),
                multiline: rng.coin(),
                no_space: rng.coin(),
                priming: rng.coin(),
                notification: rng.coin(),
                ids: rng.coin(),
                named_event: rng.coin(),
                chunks: 1 + rng.below(4),
            }),
        })
        .collect();
    for (name, answer) in [
        ("error_status_with_result", Answer::ErrorStatusWithResult),
        ("no_response", Answer::NoResponse),
        ("second_response", Answer::SecondResponse),
    ] {
        cases.push(Case {
            name: name.to_owned(),
            answer,
        });
    }
    cases
}

/// The lines of one event carrying `message`, as `framing` writes it.
fn event_lines(framing: &Framing, n: usize, message: &Value, lines: &mut Vec<String>) {
    if framing.comments {
        lines.push(": a comment the reader ignores".to_owned());
    }
    if framing.unknown_fields {
        lines.push("x-unknown: a field the reader ignores".to_owned());
        lines.push("nocolon".to_owned());
    }
    if framing.named_event {
        lines.push("event: message".to_owned());
    }
    if framing.ids {
        lines.push(format!("id: ev-{n}"));
    }
    let text = if framing.multiline {
        serde_json::to_string_pretty(message).expect("json")
    } else {
        message.to_string()
    };
    let prefix = if framing.no_space { "data:" } else { "data: " };
    lines.extend(text.split('\n').map(|line| format!("{prefix}{line}")));
    if framing.ids {
        lines.push("retry: 2000".to_owned());
    }
    lines.push(String::new());
}

/// `messages` as an event stream in `framing`.
fn event_stream(framing: &Framing, messages: &[Value], rng: &mut Rng) -> Vec<u8> {
    let mut lines = Vec::new();
    if framing.priming {
        lines.extend([
            "id: prime".to_owned(),
            "retry: 1000".to_owned(),
            String::new(),
        ]);
    }
    for (n, message) in messages.iter().enumerate() {
        event_lines(framing, n, message, &mut lines);
    }
    let mut text = String::new();
    if framing.bom {
        text.push('\u{feff}');
    }
    let mut after_cr = false;
    for line in lines {
        text.push_str(&line);
        let ending = match framing.ending {
            Ending::Lf => "\n",
            Ending::CrLf => "\r\n",
            Ending::Cr => "\r",
            // A CR then an empty line ended by LF would read as one CRLF: never drawn.
            Ending::Mixed if after_cr && line.is_empty() => ["\r", "\r\n"][rng.below(2)],
            Ending::Mixed => ["\n", "\r\n", "\r"][rng.below(3)],
        };
        after_cr = ending == "\r";
        text.push_str(ending);
    }
    // A lone CR as the stream's very last byte is a valid line end, but the TypeScript SDK's
    // reader waits for a possible LF after it and so never dispatches the last event: the
    // last ending is made CRLF (still one line end).
    if after_cr {
        text.push('\n');
    }
    text.into_bytes()
}

/// `bytes` cut into `pieces` chunks at drawn positions.
fn chunked(bytes: Vec<u8>, pieces: usize, rng: &mut Rng) -> Body {
    let mut cuts: Vec<usize> = (1..pieces).map(|_| rng.below(bytes.len().max(1))).collect();
    cuts.sort_unstable();
    let mut chunks = Vec::new();
    let mut start = 0;
    for cut in cuts.into_iter().chain([bytes.len()]) {
        if cut > start {
            chunks.push(Ok::<_, std::io::Error>(Bytes::copy_from_slice(
                &bytes[start..cut],
            )));
            start = cut;
        }
    }
    Body::from_stream(futures_util::stream::iter(chunks))
}

// ---------------------------------------------------------------------------------------------
// (a) The scripted inner server
// ---------------------------------------------------------------------------------------------

#[derive(Clone)]
struct Scripted {
    catalogue: Catalogue,
    cases: Arc<Vec<Case>>,
}

fn response(id: &Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

fn list_result(listing: Listing, entries: Vec<Value>) -> Value {
    // A modern client requires `ttlMs` and `cacheScope` (SEP-2549); the inner server says
    // "public", which a list filtered per caller must never leave the gate with.
    let mut result = json!({"resultType": "complete", "ttlMs": 60_000, "cacheScope": "public"});
    result[listing.entries] = Value::Array(entries);
    result
}

fn json_answer(status: StatusCode, message: &Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        message.to_string(),
    )
        .into_response()
}

fn capabilities() -> Value {
    json!({"tools": {}, "prompts": {}, "resources": {}})
}

/// Answers `initialize`, `server/discover` and the six listings; notifications get 202, other
/// verbs 405.
async fn scripted(State(inner): State<Scripted>, request: Request) -> Response {
    if request.method() != Method::POST {
        return StatusCode::METHOD_NOT_ALLOWED.into_response();
    }
    let Ok(body) = axum::body::to_bytes(request.into_body(), 1 << 20).await else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    let Ok(message) = serde_json::from_slice::<Value>(&body) else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    let Some(id) = message.get("id").cloned() else {
        return StatusCode::ACCEPTED.into_response();
    };
    let method = message["method"].as_str().unwrap_or_default();
    let info = json!({"name": "scripted-lists", "version": "0.0.0"});
    match method {
        "initialize" => json_answer(
            StatusCode::OK,
            &response(
                &id,
                json!({
                    "protocolVersion": message["params"]["protocolVersion"],
                    "capabilities": capabilities(),
                    "serverInfo": info,
                }),
            ),
        ),
        "server/discover" => json_answer(
            StatusCode::OK,
            &response(
                &id,
                json!({
                    "resultType": "complete",
                    "supportedVersions": ["2026-07-28", "2025-11-25"],
                    "capabilities": capabilities(),
                    "serverInfo": info,
                    "ttlMs": 0,
                    "cacheScope": "private",
                }),
            ),
        ),
        _ => match listing(method) {
            Some(listing) => {
                let case = message["params"]["_meta"][CASE_KEY].as_str();
                inner.list_answer(listing, &id, case)
            }
            None => json_answer(
                StatusCode::OK,
                &json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": "no such method"}}),
            ),
        },
    }
}

impl Scripted {
    /// The answer to one listing request in the framing its case names (plain JSON without one).
    fn list_answer(&self, listing: Listing, id: &Value, case: Option<&str>) -> Response {
        let all = self
            .catalogue
            .entries(listing, &self.catalogue.all(listing));
        let full = response(id, list_result(listing, all.clone()));
        let Some(case) = case.and_then(|name| self.cases.iter().find(|c| c.name == name)) else {
            return json_answer(StatusCode::OK, &full);
        };
        let mut rng = Rng(SEED
            ^ case
                .name
                .bytes()
                .fold(0u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b))));
        let stream = |bytes: Vec<u8>, chunks: usize, rng: &mut Rng| {
            Response::builder()
                .status(StatusCode::OK)
                .header(header::CONTENT_TYPE, "text/event-stream")
                .header(header::CACHE_CONTROL, "no-cache")
                .body(chunked(bytes, chunks, rng))
                .expect("response")
        };
        let plain_events = Framing {
            stream: true,
            charset: false,
            ending: Ending::Lf,
            bom: false,
            comments: false,
            unknown_fields: false,
            multiline: false,
            no_space: false,
            priming: false,
            notification: false,
            ids: false,
            named_event: true,
            chunks: 1,
        };
        match &case.answer {
            Answer::Readable(framing) if !framing.stream => {
                let text = if framing.multiline {
                    serde_json::to_string_pretty(&full).expect("json")
                } else {
                    full.to_string()
                };
                let content_type = if framing.charset {
                    "application/json; charset=utf-8"
                } else {
                    "application/json"
                };
                Response::builder()
                    .status(StatusCode::OK)
                    .header(header::CONTENT_TYPE, content_type)
                    .body(chunked(text.into_bytes(), framing.chunks, &mut rng))
                    .expect("response")
            }
            Answer::Readable(framing) => {
                let mut messages = Vec::new();
                if framing.notification {
                    messages.push(json!({"jsonrpc": "2.0", "method": "notifications/message",
                        "params": {"level": "info", "data": "listing"}}));
                }
                messages.push(full);
                let bytes = event_stream(framing, &messages, &mut rng);
                let mut answer = stream(bytes, framing.chunks, &mut rng);
                if framing.charset {
                    answer.headers_mut().insert(
                        header::CONTENT_TYPE,
                        http::HeaderValue::from_static("text/event-stream; charset=utf-8"),
                    );
                }
                answer
            }
            Answer::ErrorStatusWithResult => json_answer(StatusCode::INTERNAL_SERVER_ERROR, &full),
            Answer::NoResponse => {
                let note = json!({"jsonrpc": "2.0", "method": "notifications/message",
                    "params": {"level": "info", "data": all}});
                stream(event_stream(&plain_events, &[note], &mut rng), 1, &mut rng)
            }
            Answer::SecondResponse => {
                let visible = self
                    .catalogue
                    .entries(listing, &self.catalogue.visible(listing));
                let first = response(id, list_result(listing, visible));
                let bytes = event_stream(&plain_events, &[first, full], &mut rng);
                stream(bytes, 1, &mut rng)
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// (b) rmcp and (c) the TypeScript SDK's server
// ---------------------------------------------------------------------------------------------

/// An rmcp server listing the catalogue's tools, prompts, resources and templates (rmcp has
/// no `resources/directory/read` or `skills/list`: it answers them "method not found").
#[derive(Clone)]
struct RmcpLists {
    catalogue: Catalogue,
}

impl RmcpLists {
    fn result<T: serde::de::DeserializeOwned>(&self, method: &str) -> Result<T, ErrorData> {
        let listing = listing(method).expect("a listing");
        let entries = self
            .catalogue
            .entries(listing, &self.catalogue.all(listing));
        let mut result = json!({});
        result[listing.entries] = Value::Array(entries);
        serde_json::from_value(result).map_err(|e| ErrorData::internal_error(e.to_string(), None))
    }
}

/// The `ServerHandler` listing methods, each answering its listing from the catalogue.
macro_rules! lists {
    ($($handler:ident: $result:ty = $method:literal;)*) => {
        $(
            async fn $handler(
                &self,
                _: Option<PaginatedRequestParams>,
                _: RequestContext<RoleServer>,
            ) -> Result<$result, ErrorData> {
                self.result($method)
            }
        )*
    };
}

impl ServerHandler for RmcpLists {
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder().enable_tools();
        ServerConfig::new(capabilities.enable_prompts().enable_resources().build())
    }

    lists! {
        list_tools: ListToolsResult = "tools/list";
        list_prompts: ListPromptsResult = "prompts/list";
        list_resources: ListResourcesResult = "resources/list";
        list_resource_templates: ListResourceTemplatesResult = "resources/templates/list";
    }
}

/// `tests/peers/ts-lists-server.mjs`, listing the catalogue's tools, prompts, resources and
/// templates.
struct TsListsServer {
    _child: tokio::process::Child,
    url: String,
}

impl TsListsServer {
    async fn start(catalogue: &Catalogue) -> Self {
        ensure_peers();
        let names = |method: &str| catalogue.all(listing(method).expect("a listing"));
        let entries = json!({
            "tools": names("tools/list"),
            "prompts": names("prompts/list"),
            "resources": names("resources/list"),
            "templates": names("resources/templates/list"),
        });
        let mut child = tokio::process::Command::new("node")
            .arg(peers_dir().join("ts-lists-server.mjs"))
            .env("TS_LISTS_ENTRIES", entries.to_string())
            .env("TS_SERVER_EXIT_ON_STDIN_EOF", "1")
            .env("TS_SERVER_MAX_SECONDS", "120")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn node ts-lists-server.mjs");
        let stdout = child.stdout.take().expect("stdout");
        let line = tokio::time::timeout(
            Duration::from_secs(30),
            BufReader::new(stdout).lines().next_line(),
        )
        .await
        .expect("ts-lists-server.mjs did not start within 30 s")
        .expect("read ts-lists-server.mjs stdout")
        .expect("ts-lists-server.mjs exited before printing its address");
        let ready: Value = serde_json::from_str(&line).expect("ready line is JSON");
        Self {
            _child: child,
            url: ready["url"].as_str().expect("url").to_owned(),
        }
    }
}

/// A plain reverse proxy to `upstream`: the request with its end-to-end headers, the answer
/// streamed back as it arrives (`common::proxy`).
async fn reverse_proxy(State(upstream): State<Arc<String>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let Ok(body) = axum::body::to_bytes(body, 4 << 20).await else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    let mut forward = reqwest::Client::new().request(parts.method, upstream.as_str());
    for (name, value) in &parts.headers {
        if !common::proxy::is_hop_by_hop(name) {
            forward = forward.header(name, value);
        }
    }
    match forward.body(body).send().await {
        Ok(answer) => common::proxy::streamed(answer),
        Err(_) => StatusCode::BAD_GATEWAY.into_response(),
    }
}

// ---------------------------------------------------------------------------------------------
// The gate, the clients, the verdict
// ---------------------------------------------------------------------------------------------

/// The gate in front of `mcp`, and a token it accepts.
async fn gate_in_front_of(mcp: Router) -> (GatedServer, String) {
    let key = TestKey::es256("sdk-lists");
    let keys = StaticKeys::from_jwks_json(&key.jwks_json()).expect("jwks");
    let configure = move |_: &str| -> GateBuilder {
        Gate::builder()
            .issuer(Issuer::with_keys(ISSUER, keys))
            .evaluate(hide_hidden)
    };
    let server = GatedServer::start_with(configure, mcp).await;
    let token = key.mint(&claims(ISSUER, &server.url, "mcp:read"));
    (server, token)
}

/// Which official SDK client lists.
#[derive(Clone, Copy, Debug)]
enum Client {
    TypeScript,
    Python,
}

/// The era the Python client asks for (the TypeScript one always speaks 2025-11-25).
#[derive(Clone, Copy, Debug)]
enum Era {
    /// `server/discover` first: 2026-07-28 where the server answers it.
    Auto,
    /// `initialize` only (2025-11-25).
    Legacy,
}

impl Era {
    fn python_mode(self) -> &'static str {
        match self {
            Era::Auto => "auto",
            Era::Legacy => "legacy",
        }
    }
}

/// What one client process printed.
struct Listed {
    client: Client,
    /// stdout exactly as printed.
    raw: String,
    /// Its JSON lines.
    lines: Vec<Value>,
}

/// Runs one client process: it connects once and lists every method for every case.
async fn list_with(client: Client, url: &str, token: &str, cases: &[Case], era: Era) -> Listed {
    let mut command = match client {
        Client::TypeScript => {
            let mut c = tokio::process::Command::new("node");
            c.arg(peers_dir().join("ts-lists.mjs"));
            c
        }
        Client::Python => {
            let mut c = tokio::process::Command::new(peers_dir().join(".venv/bin/python"));
            c.arg(peers_dir().join("py_lists.py"));
            c.args(["--mode", era.python_mode()]);
            c
        }
    };
    command
        .arg(url)
        .args(["--token", token])
        .args(["--request-timeout-ms", REQUEST_TIMEOUT_MS])
        .args(["--timeout-ms", "50000"])
        .kill_on_drop(true);
    if !cases.is_empty() {
        let names: Vec<&str> = cases.iter().map(|c| c.name.as_str()).collect();
        command.args(["--cases", &names.join(",")]);
    }
    let output = tokio::time::timeout(Duration::from_secs(60), command.output())
        .await
        .expect("the client finished within 60 s")
        .expect("the client ran");
    let raw = String::from_utf8_lossy(&output.stdout).into_owned();
    let lines = raw
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect();
    let listed = Listed { client, raw, lines };
    assert!(
        output.status.success(),
        "{client:?} did not run to its end: {}\nstderr: {}",
        listed.raw,
        String::from_utf8_lossy(&output.stderr)
    );
    listed
}

/// What an inner server can answer: every method, or the ones it knows.
#[derive(Clone, Copy)]
enum Expect {
    /// Every listing is answered, in the framing of its case.
    Scripted,
    /// These methods are answered with the whole list; others with an error of the server's.
    Lists(&'static [&'static str]),
}

/// Every way `listed` falls short: a hidden name anywhere in the output, a readable answer
/// that does not surface exactly the visible entries in order, an unreadable one that surfaces
/// anything but the layer's `-32603` with the `problem` the answer calls for.
fn shortfalls(
    listed: &Listed,
    catalogue: &Catalogue,
    cases: &[Case],
    expect: Expect,
) -> Vec<String> {
    let mut found = Vec::new();
    let client = listed.client;
    let marker = catalogue.hidden_marker();
    for line in listed.raw.lines().filter(|line| line.contains(&marker)) {
        let value: Value = serde_json::from_str(line).unwrap_or(Value::Null);
        let case = value["case"].as_str().unwrap_or("-");
        let answer = cases
            .iter()
            .find(|c| c.name == case)
            .map_or_else(|| "plain".to_owned(), |c| format!("{:?}", c.answer));
        let mut names: Vec<&str> = line
            .match_indices(&marker)
            .filter_map(|(at, _)| line[at..].split(['"', '\\', '/']).next())
            .collect();
        names.sort_unstable();
        names.dedup();
        let surfaced = if value["ok"] == true {
            "in the result".to_owned()
        } else {
            format!("in the {} error", value["error"]["class"])
        };
        found.push(format!(
            "LEAK {client:?} {} case {case} [{answer}]: {names:?} {surfaced}",
            value["method"].as_str().unwrap_or("?"),
        ));
    }
    let rounds: Vec<Option<&Case>> = if cases.is_empty() {
        vec![None]
    } else {
        cases.iter().map(Some).collect()
    };
    for case in rounds {
        for listing in LISTINGS {
            let case_name = case.map(|c| c.name.as_str());
            let Some(line) = listed
                .lines
                .iter()
                .find(|l| l["method"] == listing.method && l["case"].as_str() == case_name)
            else {
                found.push(format!(
                    "MISSING {client:?} {} case {case_name:?}: no line",
                    listing.method
                ));
                continue;
            };
            let readable = case.is_none_or(|c| c.answer.readable());
            let answered = match expect {
                Expect::Scripted => true,
                Expect::Lists(methods) => methods.contains(&listing.method),
            };
            let what = case.map_or_else(|| "plain".to_owned(), |c| format!("{:?}", c.answer));
            if readable && answered {
                let names: Option<Vec<&str>> = line["result"][listing.entries]
                    .as_array()
                    .map(|entries| entries.iter().filter_map(|e| e["name"].as_str()).collect());
                let visible = catalogue.visible(listing);
                if names != Some(visible.iter().map(String::as_str).collect()) {
                    found.push(format!(
                        "NOT SURFACED {client:?} {} case {case_name:?} [{what}]: wanted {visible:?}, got {line}",
                        listing.method
                    ));
                }
            } else if let Some(problem) = case.and_then(|c| c.answer.problem()) {
                let refused = line["ok"] == false
                    && line["error"]["code"] == -32603
                    && line["error"]["data"]["problem"] == problem;
                if !refused {
                    found.push(format!(
                        "NOT REFUSED {client:?} {} case {case_name:?} [{what}]: wanted the layer's -32603 \
                         with problem {problem}, got {line}",
                        listing.method
                    ));
                }
            }
        }
    }
    found
}

/// Runs both clients through the gate in front of `mcp` and fails with every shortfall.
async fn both_clients(
    mcp: Router,
    catalogue: &Catalogue,
    cases: &[Case],
    expect: Expect,
    era: Era,
) {
    let (server, token) = gate_in_front_of(mcp).await;
    ensure_peers();
    let (ts, py) = tokio::join!(
        list_with(Client::TypeScript, &server.url, &token, cases, era),
        list_with(Client::Python, &server.url, &token, cases, era),
    );
    let mut found = Vec::new();
    for listed in [&ts, &py] {
        let connect = listed.lines.iter().find(|l| l["step"] == "connect");
        eprintln!(
            "{:?} connected: {}",
            listed.client,
            connect.map_or_else(|| "?".to_owned(), Value::to_string)
        );
        let short = shortfalls(listed, catalogue, cases, expect);
        if !short.is_empty() {
            eprintln!("{:?} printed:\n{}", listed.client, listed.raw);
        }
        found.extend(short);
    }
    assert!(
        found.is_empty(),
        "{} shortfalls:\n{}",
        found.len(),
        found.join("\n")
    );
}

/// The scripted inner server answering `cases` from `catalogue`.
fn scripted_router(catalogue: &Catalogue, cases: &[Case]) -> Router {
    let state = Scripted {
        catalogue: catalogue.clone(),
        cases: Arc::new(cases.to_vec()),
    };
    Router::new()
        .route("/mcp", axum::routing::any(scripted))
        .with_state(state)
}

#[tokio::test]
async fn sdk_clients_see_no_hidden_entry_in_any_framing_of_a_scripted_server() {
    let catalogue = Catalogue::new();
    let cases = sample();
    let mcp = scripted_router(&catalogue, &cases);
    both_clients(mcp, &catalogue, &cases, Expect::Scripted, Era::Auto).await;
}

/// The control: every readable case of the sample is valid. The TypeScript SDK client (whose
/// event-stream reader follows WHATWG) reading the scripted server directly, without the gate,
/// surfaces every entry of every readable case, hidden ones included, in order. (The Python
/// SDK 2.3.0 reader is not the control: it does not split lines at a lone CR.)
#[tokio::test]
async fn the_sample_is_read_whole_by_the_typescript_sdk_client_without_the_gate() {
    let catalogue = Catalogue::new();
    let cases = sample();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}/mcp", listener.local_addr().expect("addr"));
    let app = scripted_router(&catalogue, &cases);
    let server = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    ensure_peers();
    let readable: Vec<Case> = cases.into_iter().filter(|c| c.answer.readable()).collect();
    let listed = list_with(Client::TypeScript, &url, "no-gate", &readable, Era::Auto).await;
    server.abort();
    let mut unread = Vec::new();
    for case in &readable {
        for listing in LISTINGS {
            let line = listed
                .lines
                .iter()
                .find(|l| l["method"] == listing.method && l["case"] == case.name.as_str());
            let names: Option<Vec<&str>> = line
                .and_then(|l| l["result"][listing.entries].as_array())
                .map(|entries| entries.iter().filter_map(|e| e["name"].as_str()).collect());
            let all = catalogue.all(listing);
            if names != Some(all.iter().map(String::as_str).collect()) {
                unread.push(format!(
                    "{} {} [{:?}]: {line:?}",
                    case.name, listing.method, case.answer
                ));
            }
        }
    }
    assert!(unread.is_empty(), "not read whole:\n{}", unread.join("\n"));
}

/// The four listings rmcp and the TypeScript SDK server answer.
const SERVED: &[&str] = &[
    "tools/list",
    "prompts/list",
    "resources/list",
    "resources/templates/list",
];

#[tokio::test]
async fn sdk_clients_see_no_hidden_entry_listed_by_rmcp() {
    let catalogue = Catalogue::new();
    let lists = RmcpLists {
        catalogue: catalogue.clone(),
    };
    let service = StreamableHttpService::new(
        move || Ok(lists.clone()),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default(),
    );
    let mcp = Router::new().nest_service("/mcp", service);
    // Python in legacy mode: rmcp 3.11's 2026-07-28 list results have no `resultType`, which
    // the Python SDK 2.3.0 requires (a ValidationError with or without the gate).
    both_clients(mcp, &catalogue, &[], Expect::Lists(SERVED), Era::Legacy).await;
}

#[tokio::test]
async fn sdk_clients_see_no_hidden_entry_listed_by_the_typescript_sdk_server() {
    let catalogue = Catalogue::new();
    let ts = TsListsServer::start(&catalogue).await;
    let mcp = Router::new()
        .route("/mcp", axum::routing::any(reverse_proxy))
        .with_state(Arc::new(ts.url.clone()));
    // The TypeScript SDK server answers `server/discover` 400: Python falls back to legacy.
    both_clients(mcp, &catalogue, &[], Expect::Lists(SERVED), Era::Auto).await;
}
