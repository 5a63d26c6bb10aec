//! The example server's Cedar policy set (`examples/server/cedar`, with the context hook of
//! `examples/server/cedar_policy.rs`) against the closure it reproduces (`DemoPolicy`,
//! `examples/server/policy.rs`): the same answers, byte for byte after the golden
//! normalisation.
//!
//! Two gates run side by side in this process, each in front of its own copy of the example's
//! rmcp server with its own approval store and approval pages: one decides with `DemoPolicy`,
//! the other with the Cedar set. Both have the same resource URI and trust the same test key,
//! so one token is good for both. Each test sends the same sequence of requests to each side,
//! normalises every answer (status, the headers the golden fixtures pin, the body) and
//! compares the two sequences answer by answer:
//!
//! - every tool of the example server, in both eras (legacy 2025-11-25 without capabilities,
//!   modern 2026-07-28 without and with every capability), for tokens with every scope set
//!   and with or without `authorization_details` covering the payment;
//! - `tools/list`, `prompts/list`, `resources/list` for the same tokens, the prompts and
//!   resources (the admin-only `layoffs` and `demo://payroll` among them) and the other
//!   methods the gate asks the policy about;
//! - every exchange of the scripted demo (`examples/demo.rs`), its round trips included;
//! - the decisions themselves, asked directly of both policies, for what the wire cannot
//!   reach in one request (the approval phase, methods the example server does not serve);
//! - the official TypeScript and Python SDK clients, which must see the same on both.
//!
//! The normalisation follows the golden fixtures' (`tests/suite/golden.rs`: continuation states,
//! context ids, task ids, timestamps), plus the two values that are random in the example
//! itself: the id of a pending approval in `/approve/<id>`, and the clock the tool `now` reads.
//!
//! Where the two policies differ by design (the Cedar set refuses what does not fit its
//! schema; the closure lets the inner server answer it), a test says so explicitly.
//!
//! The committed `schema.cedarschema` and `tools.json` are checked against the example
//! server's live `tools/list`; `MCP_GATE_BLESS=1` rewrites them.

use crate::common;

use crate::common::cedar_policy;

use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock, Mutex};

use axum::Router;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use common::approvals::Approvals;
use common::normalize::normalize as golden_normalize;
use common::peers::{AuthServer, ClientRun, GatedServer, Reply, Sdk, run_client_visiting};
use common::policy;
use common::policy::DemoPolicy;
use common::tokens::{TestKey, claims};
use common::tools::{DeployCount, mcp_service_counting};
use mcp_gate::mcp::{CompletionReference, Era};
use mcp_gate::policy::cedar::generate_schema;
use mcp_gate::policy::{Evaluation, Phase, Policy};
use mcp_gate::{Gate, GateBuilder, Issuer, StaticKeys};
use serde_json::{Map, Value, json};

const ISSUER: &str = "https://as.example";
/// The resource both gates serve (each listens on its own loopback port).
const RESOURCE: &str = "https://mcp.example.com/mcp";
/// Where both policies say their approval pages are (each side serves its own on loopback).
const ORIGIN: &str = "https://mcp.example.com";
const MODERN: &str = "2026-07-28";
const LEGACY: &str = "2025-11-25";
const BLESS_ENV: &str = "MCP_GATE_BLESS";

static KEY: LazyLock<TestKey> = LazyLock::new(|| TestKey::es256("equivalence"));

fn cedar_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/server/cedar")
}

// ---------------------------------------------------------------------------------------------
// The golden fixtures' normalisation (tests/suite/golden.rs), and the example's own random values
// ---------------------------------------------------------------------------------------------

/// Replaces `after` followed by exactly `len` characters that `ok` accepts (and no more of
/// them) with `after` and `placeholder`.
fn normalize_run(
    text: &str,
    after: &str,
    len: usize,
    ok: fn(u8) -> bool,
    placeholder: &str,
) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(after) {
        let start = at + after.len();
        out.push_str(&rest[..start]);
        let run = rest[start..].bytes().take_while(|b| ok(*b)).count();
        if run == len {
            out.push_str(placeholder);
            rest = &rest[start + len..];
        } else {
            rest = &rest[start..];
        }
    }
    out.push_str(rest);
    out
}

/// The golden normalisation, then the pending approval's id (`/approve/` and 24 lower-case
/// hex digits, `Approvals::request`) and the clock of the tool `now` (`SystemTime`'s Debug).
fn normalize(text: &str) -> String {
    let golden = golden_normalize(text);
    let hex = |b: u8| b.is_ascii_digit() || (b'a'..=b'f').contains(&b);
    let approvals = normalize_run(&golden, "/approve/", 24, hex, "<id>");
    let seconds = normalize_run(&approvals, "tv_sec: ", 10, |b| b.is_ascii_digit(), "<s>");
    let digits = |b: u8| b.is_ascii_digit();
    let mut out = String::with_capacity(seconds.len());
    let mut rest = seconds.as_str();
    while let Some(at) = rest.find("tv_nsec: ") {
        let start = at + "tv_nsec: ".len();
        out.push_str(&rest[..start]);
        let run = rest[start..].bytes().take_while(|b| digits(*b)).count();
        out.push_str(if run > 0 { "<ns>" } else { "" });
        rest = &rest[start + run..];
    }
    out.push_str(rest);
    out
}

#[test]
fn the_normalisation_replaces_only_what_it_must() {
    let id = "0123456789abcdef01234567";
    assert_eq!(
        normalize(&format!("https://x/approve/{id}\"")),
        "https://x/approve/<id>\""
    );
    assert_eq!(normalize("/approve/0123"), "/approve/0123", "too short");
    assert_eq!(
        normalize(&format!("/approve/{id}0")),
        format!("/approve/{id}0"),
        "too long"
    );
    assert_eq!(
        normalize("SystemTime { tv_sec: 1767225600, tv_nsec: 12345 }"),
        "SystemTime { tv_sec: <s>, tv_nsec: <ns> }"
    );
    assert_eq!(normalize("actx_AAAAAAAAAAAAAAAAAAAAAA"), "actx_<random>");
    assert_eq!(normalize("tsk_AAAAAAAAAAAAAAAAAAAAAA."), "tsk_<random>.");
    assert_eq!(normalize("2026-01-01T00:00:00Z"), "<timestamp>");
    assert_eq!(normalize("deploy run #1"), "deploy run #1");
}

// ---------------------------------------------------------------------------------------------
// Two gates side by side
// ---------------------------------------------------------------------------------------------

/// Which policy a side decides with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Which {
    Closure,
    Cedar,
}

const SIDES: [Which; 2] = [Which::Closure, Which::Cedar];

/// The example policy of `which`, over `approvals`, with approval pages at `origin`.
fn example_policy(which: Which, approvals: &Approvals, origin: &str) -> Box<dyn Policy> {
    match which {
        Which::Closure => Box::new(DemoPolicy::new(approvals.clone(), origin)),
        Which::Cedar => Box::new(
            cedar_policy::cedar_policy(&cedar_dir(), approvals.clone(), origin)
                .unwrap_or_else(|e| panic!("the example's Cedar set loads: {e}")),
        ),
    }
}

/// One gate in front of its own example server, with its own approval store and pages.
struct Side {
    server: GatedServer,
    http: reqwest::Client,
    /// `http://127.0.0.1:<port>`: where this side's approval pages really are.
    pages: String,
    pages_task: tokio::task::JoinHandle<()>,
}

impl Drop for Side {
    fn drop(&mut self) {
        self.pages_task.abort();
    }
}

impl Side {
    /// The example server as `cargo run --example server` builds it (`configure` adds
    /// options), deciding with `which`.
    async fn start(which: Which, configure: fn(GateBuilder) -> GateBuilder) -> Self {
        let approvals = Approvals::default();
        let policy = example_policy(which, &approvals, ORIGIN);
        Self::start_with(approvals, policy, configure).await
    }

    /// The example server deciding with `policy` over `approvals` (`configure` adds options).
    async fn start_with(
        approvals: Approvals,
        policy: Box<dyn Policy>,
        configure: impl FnOnce(GateBuilder) -> GateBuilder,
    ) -> Self {
        let keys = StaticKeys::from_jwks_json(&KEY.jwks_json()).expect("keys");
        let deploys = DeployCount::default();
        let server = GatedServer::start_replica(
            RESOURCE,
            |_| {
                configure(
                    Gate::builder()
                        .evaluate(policy)
                        .issuer(Issuer::with_keys(ISSUER, keys))
                        .resource_name("mcp-gate example server")
                        .development_mode(),
                )
            },
            Router::new().nest_service("/mcp", mcp_service_counting(deploys)),
        )
        .await;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let pages = format!("http://{}", listener.local_addr().expect("addr"));
        let router = approvals.router(server.gate.clone());
        let pages_task = tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        Self {
            server,
            http: reqwest::Client::new(),
            pages,
            pages_task,
        }
    }

    async fn both(configure: fn(GateBuilder) -> GateBuilder) -> [Side; 2] {
        [
            Side::start(Which::Closure, configure).await,
            Side::start(Which::Cedar, configure).await,
        ]
    }

    /// Sends `request` as `GatedServer::post` does, through this side's one client (a client
    /// per request would spend most of the test building TLS configurations).
    async fn send(&self, token: Option<&str>, request: &Rpc) -> Reply {
        let mut post = self
            .http
            .post(&self.server.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(request.body.to_string());
        for (name, value) in &request.headers {
            post = post.header(*name, value);
        }
        if let Some(token) = token {
            post = post.bearer_auth(token);
        }
        Reply::from(post.send().await.expect("post")).await
    }

    /// Approves, as the holder of `token`, the approval page `url` names (on this side's
    /// page server); returns the page's status.
    async fn visit(&self, url: &str, token: &str) -> u16 {
        let path = url
            .strip_prefix(ORIGIN)
            .unwrap_or_else(|| panic!("an approval URL at {ORIGIN}: {url}"));
        self.http
            .post(format!("{}{path}", self.pages))
            .bearer_auth(token)
            .send()
            .await
            .expect("approval page")
            .status()
            .as_u16()
    }
}

fn no_options(builder: GateBuilder) -> GateBuilder {
    builder
}

/// As the demo runs it: every request needs `mcp:read`.
fn demo_options(builder: GateBuilder) -> GateBuilder {
    builder.required_scopes(["mcp:read"])
}

/// A token for `scope` (none when empty), with `authorization_details` when given.
fn token(scope: &str, details: Option<Value>) -> String {
    let mut claims = claims(ISSUER, RESOURCE, scope);
    if scope.is_empty() {
        claims.as_object_mut().expect("claims").remove("scope");
    }
    if let Some(details) = details {
        claims["authorization_details"] = details;
    }
    KEY.mint(&claims)
}

// ---------------------------------------------------------------------------------------------
// Requests and answers
// ---------------------------------------------------------------------------------------------

/// How a request is made.
#[derive(Clone, Debug)]
enum Client {
    /// 2025-11-25 without a session: no capabilities.
    Legacy,
    /// 2026-07-28, declaring these capabilities.
    Modern(&'static str, Value),
}

fn clients() -> Vec<Client> {
    vec![
        Client::Legacy,
        Client::Modern("no capabilities", json!({})),
        Client::Modern(
            "every capability",
            json!({"elicitation": {"form": {}, "url": {}},
                   "extensions": {"io.modelcontextprotocol/tasks": {}}}),
        ),
    ]
}

impl Client {
    fn label(&self) -> String {
        match self {
            Client::Legacy => format!("legacy {LEGACY}"),
            Client::Modern(caps, _) => format!("modern {MODERN}, {caps}"),
        }
    }
}

/// One JSON-RPC request and the headers it travels with.
#[derive(Clone, Debug)]
struct Rpc {
    body: Value,
    headers: Vec<(&'static str, String)>,
}

impl Rpc {
    /// `method` with `params` as `client` sends it; `name` is what a modern request mirrors in
    /// `Mcp-Name` (a tool, prompt, resource or task).
    fn new(client: &Client, id: u64, method: &str, mut params: Value, name: Option<&str>) -> Self {
        let mut headers = Vec::new();
        match client {
            Client::Legacy => {
                headers.push(("mcp-protocol-version", LEGACY.to_owned()));
            }
            Client::Modern(_, capabilities) => {
                let meta = params["_meta"].as_object().cloned().unwrap_or_default();
                let mut meta = Value::Object(meta);
                meta["io.modelcontextprotocol/protocolVersion"] = json!(MODERN);
                meta["io.modelcontextprotocol/clientCapabilities"] = capabilities.clone();
                params["_meta"] = meta;
                headers.push(("mcp-protocol-version", MODERN.to_owned()));
                headers.push(("mcp-method", method.to_owned()));
                if let Some(name) = name {
                    headers.push(("mcp-name", name.to_owned()));
                }
            }
        }
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        Self { body, headers }
    }

    fn call(client: &Client, id: u64, tool: &str, arguments: Value) -> Self {
        let params = json!({"name": tool, "arguments": arguments});
        Self::new(client, id, "tools/call", params, Some(tool))
    }
}

/// An answer as compared: status, the headers the golden fixtures pin, the body, normalised.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Answer {
    status: u16,
    headers: Vec<(&'static str, Option<String>)>,
    body: String,
}

impl From<&Reply> for Answer {
    fn from(reply: &Reply) -> Self {
        let header = |name: &'static str| {
            let value = reply
                .headers
                .get(name)
                .map(|v| normalize(v.to_str().expect("a text header")));
            (name, value)
        };
        Answer {
            status: reply.status,
            headers: vec![
                header("content-type"),
                header("www-authenticate"),
                header("cache-control"),
            ],
            body: normalize(&reply.text),
        }
    }
}

/// What one side answered, exchange by exchange.
#[derive(Default)]
struct Transcript(Vec<(String, Answer)>);

impl Transcript {
    fn record(&mut self, label: impl Into<String>, reply: &Reply) {
        self.0.push((label.into(), Answer::from(reply)));
    }
}

/// Compares the two sides' transcripts exchange by exchange; panics listing every exchange
/// that differs. Returns how many were compared.
fn assert_same(what: &str, closure: &Transcript, cedar: &Transcript) -> usize {
    let labels = |t: &Transcript| t.0.iter().map(|(l, _)| l.clone()).collect::<Vec<_>>();
    assert_eq!(
        labels(closure),
        labels(cedar),
        "{what}: both sides ran the same exchanges"
    );
    let differences: Vec<String> = closure
        .0
        .iter()
        .zip(&cedar.0)
        .filter(|((_, a), (_, b))| a != b)
        .map(|((label, a), (_, b))| format!("- {label}\n    closure: {a:?}\n    cedar:   {b:?}"))
        .collect();
    assert!(
        differences.is_empty(),
        "{what}: {} of {} exchanges differ between DemoPolicy and the Cedar set:\n{}",
        differences.len(),
        closure.0.len(),
        differences.join("\n")
    );
    closure.0.len()
}

// ---------------------------------------------------------------------------------------------
// The generated files
// ---------------------------------------------------------------------------------------------

/// The example server's `tools/list` result, as rmcp answers it without the gate.
async fn live_tools_list() -> Value {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}/mcp", listener.local_addr().expect("addr"));
    let app = Router::new().nest_service("/mcp", common::tools::mcp_service());
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    let reply: Value = reqwest::Client::new()
        .post(&url)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", LEGACY)
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}))
        .send()
        .await
        .expect("tools/list")
        .json()
        .await
        .expect("a JSON answer");
    task.abort();
    let result = reply["result"].clone();
    assert!(
        result["tools"].is_array() && result.get("nextCursor").is_none(),
        "one page of tools: {reply}"
    );
    result
}

/// `tools.json` is the example server's own `tools/list` result, and `schema.cedarschema` is
/// what cedar-for-agents' generator makes of it and `stub.cedarschema`. `MCP_GATE_BLESS=1`
/// writes both.
#[tokio::test]
async fn the_schema_is_generated_from_the_example_servers_tools() {
    let dir = cedar_dir();
    let live = live_tools_list().await;
    let stub = std::fs::read_to_string(dir.join("stub.cedarschema")).expect("the stub");
    let tools_text = serde_json::to_string_pretty(&live).expect("JSON") + "\n";
    let schema = generate_schema(&stub, &tools_text).expect("the schema generates");
    if std::env::var_os(BLESS_ENV).is_some() {
        std::fs::write(dir.join("tools.json"), &tools_text).expect("write tools.json");
        std::fs::write(dir.join("schema.cedarschema"), &schema).expect("write the schema");
    }
    let committed: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("tools.json")).expect("tools.json"))
            .expect("tools.json is JSON");
    assert_eq!(
        committed, live,
        "tools.json is the example server's tools/list; regenerate with {BLESS_ENV}=1"
    );
    let committed = std::fs::read_to_string(dir.join("schema.cedarschema")).expect("the schema");
    assert_eq!(
        committed, schema,
        "schema.cedarschema is generated from stub.cedarschema and tools.json; regenerate with {BLESS_ENV}=1"
    );
}

// ---------------------------------------------------------------------------------------------
// Every tool, both eras, every token
// ---------------------------------------------------------------------------------------------

/// Each tool of the example server with arguments it accepts.
fn tool_calls() -> Vec<(&'static str, Value)> {
    vec![
        ("echo", json!({"text": "hello"})),
        ("whoami", json!({})),
        ("transfer", payment("40.00")),
        ("admin_report", json!({})),
        ("delete_everything", json!({})),
        ("secret_sauce", json!({})),
        ("share_folder", json!({"folder": "team-docs"})),
        ("delete_file", json!({"path": "notes.txt"})),
        ("deploy", json!({"env": "prod"})),
        ("uppercase", json!({"text": "hello"})),
        ("word_count", json!({"text": "one two three"})),
        ("now", json!({})),
        ("add", json!({"a": 40, "b": 2})),
    ]
}

fn payment(amount: &str) -> Value {
    json!({"amount": amount, "currency": "EUR", "iban": "DE00TEST"})
}

/// The payment details `transfer` needs for `amount` (`policy::payment_details`).
fn payment_details(amount: &str) -> Value {
    let arguments = payment(amount);
    json!([policy::payment_details(
        arguments.as_object().expect("an object")
    )])
}

/// Every token of the comparison: each scope set, without `authorization_details`, with
/// details covering the 40 EUR payment, with details for another amount only, and with
/// details of another type.
fn tokens() -> Vec<(String, String)> {
    let mut tokens = Vec::new();
    for scope in ["", "mcp:tools", "mcp:admin", "mcp:tools mcp:admin"] {
        let scopes = if scope.is_empty() { "no scope" } else { scope };
        let details = [
            ("no details", None),
            ("details for 40 EUR", Some(payment_details("40.00"))),
            ("details for 400 EUR", Some(payment_details("400.00"))),
            (
                "details of another type",
                Some(json!([{"type": "account_information", "actions": ["read"]}])),
            ),
        ];
        for (what, details) in details {
            tokens.push((format!("{scopes}, {what}"), token(scope, details)));
        }
    }
    tokens
}

/// Every tool, as every client, with every token: the first answer of each call.
async fn every_call(side: &Side, tokens: &[(String, String)]) -> Transcript {
    let mut transcript = Transcript::default();
    let mut id = 0;
    for client in clients() {
        for (label, token) in tokens {
            for (tool, arguments) in tool_calls() {
                id += 1;
                let request = Rpc::call(&client, id, tool, arguments);
                let reply = side.send(Some(token), &request).await;
                transcript.record(format!("{tool} / {} / {label}", client.label()), &reply);
            }
        }
        // And without a token.
        for (tool, arguments) in tool_calls() {
            id += 1;
            let reply = side
                .send(None, &Rpc::call(&client, id, tool, arguments))
                .await;
            transcript.record(format!("{tool} / {} / no token", client.label()), &reply);
        }
    }
    transcript
}

#[tokio::test]
async fn every_tool_answers_alike_in_both_eras_for_every_token() {
    let sides = Side::both(no_options).await;
    let tokens = tokens();
    let closure = every_call(&sides[0], &tokens).await;
    let cedar = every_call(&sides[1], &tokens).await;
    let compared = assert_same("tools/call", &closure, &cedar);
    assert_eq!(compared, 3 * (16 + 1) * 13, "every case ran");
    // The comparison is not vacuous: every kind of answer is among them.
    let bodies: Vec<&str> = closure.0.iter().map(|(_, a)| a.body.as_str()).collect();
    for expected in [
        "\"text\":\"hello\"",
        "This transfer needs a payment-specific authorization.",
        "transferred 40.00 EUR to DE00TEST",
        "Deleting everything is never allowed.",
        "You cannot use this tool.",
        "Approve sharing folder team-docs, then try again.",
        "https://mcp.example.com/approve/<id>",
        "Delete notes.txt?",
        "\"resultType\":\"task\"",
        "admin report: all systems nominal",
        "\"text\":\"42\"",
    ] {
        assert!(
            bodies.iter().any(|b| b.contains(expected)),
            "some answer holds {expected:?}"
        );
    }
    let statuses: Vec<u16> = closure.0.iter().map(|(_, a)| a.status).collect();
    for status in [200, 401, 403] {
        assert!(statuses.contains(&status), "some answer is {status}");
    }
}

// ---------------------------------------------------------------------------------------------
// Lists, prompts, resources, the other methods
// ---------------------------------------------------------------------------------------------

/// The requests other than tool calls: the three lists, every prompt and resource, and the
/// other methods the gate asks the policy about.
fn other_requests(client: &Client, id: u64) -> Vec<(String, Rpc)> {
    let rpc = |method: &str, params: Value, name: Option<&str>| {
        Rpc::new(client, id, method, params, name)
    };
    let mut requests = vec![
        ("tools/list".to_owned(), rpc("tools/list", json!({}), None)),
        (
            "prompts/list".to_owned(),
            rpc("prompts/list", json!({}), None),
        ),
        (
            "resources/list".to_owned(),
            rpc("resources/list", json!({}), None),
        ),
        (
            "resources/templates/list".to_owned(),
            rpc("resources/templates/list", json!({}), None),
        ),
    ];
    for (prompt, arguments) in [
        ("layoffs", json!({})),
        ("greet", json!({"who": "Ada"})),
        ("summarize", json!({})),
    ] {
        requests.push((
            format!("prompts/get {prompt}"),
            rpc(
                "prompts/get",
                json!({"name": prompt, "arguments": arguments}),
                Some(prompt),
            ),
        ));
    }
    for uri in ["demo://payroll", "demo://readme", "demo://changelog"] {
        for method in [
            "resources/read",
            "resources/subscribe",
            "resources/unsubscribe",
        ] {
            requests.push((
                format!("{method} {uri}"),
                rpc(method, json!({"uri": uri}), Some(uri)),
            ));
        }
    }
    requests.push((
        "completion/complete layoffs".to_owned(),
        rpc(
            "completion/complete",
            json!({"ref": {"type": "ref/prompt", "name": "layoffs"},
                   "argument": {"name": "who", "value": "A"}}),
            None,
        ),
    ));
    requests.push((
        "logging/setLevel".to_owned(),
        rpc("logging/setLevel", json!({"level": "info"}), None),
    ));
    if matches!(client, Client::Legacy) {
        requests.push(("tasks/list".to_owned(), rpc("tasks/list", json!({}), None)));
    }
    requests
}

async fn every_other_request(side: &Side, tokens: &[(String, String)]) -> Transcript {
    let mut transcript = Transcript::default();
    let mut id = 0;
    for client in clients() {
        for (label, token) in tokens {
            id += 1;
            for (what, request) in other_requests(&client, id) {
                let reply = side.send(Some(token), &request).await;
                transcript.record(format!("{what} / {} / {label}", client.label()), &reply);
            }
        }
    }
    transcript
}

#[tokio::test]
async fn lists_prompts_resources_and_other_methods_answer_alike() {
    let sides = Side::both(no_options).await;
    let tokens: Vec<(String, String)> = ["", "mcp:tools", "mcp:admin", "mcp:tools mcp:admin"]
        .iter()
        .map(|scope| (format!("scope {scope:?}"), token(scope, None)))
        .collect();
    let closure = every_other_request(&sides[0], &tokens).await;
    let cedar = every_other_request(&sides[1], &tokens).await;
    let compared = assert_same("lists and other methods", &closure, &cedar);
    let per_token: usize = clients().iter().map(|c| other_requests(c, 0).len()).sum();
    assert_eq!(compared, per_token * tokens.len());
    // Lists differ by scope: admin_report, layoffs and payroll only for mcp:admin, and never
    // the secret nor what is never allowed.
    let answer = |label: &str| {
        let (_, answer) = closure
            .0
            .iter()
            .find(|(l, _)| l == label)
            .unwrap_or_else(|| panic!("no exchange {label}"));
        answer.clone()
    };
    let listed = |label: &str| answer(label).body;
    let plain = listed("tools/list / legacy 2025-11-25 / scope \"mcp:tools\"");
    let admin = listed("tools/list / legacy 2025-11-25 / scope \"mcp:admin\"");
    assert!(
        plain.contains("\"echo\"") && !plain.contains("admin_report"),
        "{plain}"
    );
    assert!(admin.contains("admin_report"), "{admin}");
    for hidden in ["secret_sauce", "delete_everything"] {
        assert!(!admin.contains(hidden), "{admin}");
    }
    let prompts = listed("prompts/list / legacy 2025-11-25 / scope \"mcp:tools\"");
    assert!(
        prompts.contains("greet") && !prompts.contains("layoffs"),
        "{prompts}"
    );
    let resources = listed("resources/list / legacy 2025-11-25 / scope \"mcp:admin\"");
    assert!(resources.contains("demo://payroll"), "{resources}");
    let payroll = answer("resources/read demo://payroll / legacy 2025-11-25 / scope \"mcp:tools\"");
    assert_eq!(payroll.status, 403, "{payroll:?}");
    let payroll = answer("resources/read demo://payroll / legacy 2025-11-25 / scope \"mcp:admin\"");
    assert!(
        payroll.body.contains("Salaries: confidential."),
        "{payroll:?}"
    );
}

/// With `list_remediable_entries`, a list also shows what a remedy would unlock: the two
/// policies hide the same entries there too (the Cedar set's list rules are `undisclosed`,
/// like the closure's).
#[tokio::test]
async fn lists_with_remediable_entries_answer_alike() {
    let sides = Side::both(|b| b.list_remediable_entries()).await;
    let tokens: Vec<(String, String)> = ["", "mcp:admin"]
        .iter()
        .map(|scope| (format!("scope {scope:?}"), token(scope, None)))
        .collect();
    let mut transcripts = Vec::new();
    for side in &sides {
        let mut transcript = Transcript::default();
        for client in clients() {
            for (label, token) in &tokens {
                for method in ["tools/list", "prompts/list", "resources/list"] {
                    let reply = side
                        .send(Some(token), &Rpc::new(&client, 1, method, json!({}), None))
                        .await;
                    transcript.record(format!("{method} / {} / {label}", client.label()), &reply);
                }
            }
        }
        transcripts.push(transcript);
    }
    assert_eq!(
        assert_same("remediable lists", &transcripts[0], &transcripts[1]),
        3 * 2 * 3
    );
}

// ---------------------------------------------------------------------------------------------
// The scripted demo (examples/demo.rs), exchange by exchange
// ---------------------------------------------------------------------------------------------

/// The demo's legacy `tools/call` (no protocol header, no session).
fn demo_call(id: u64, tool: &str, arguments: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": tool, "arguments": arguments}})
}

/// The demo's modern `tools/call`, with `extra` params.
fn demo_modern_call(id: u64, tool: &str, arguments: Value, caps: &Value, extra: Value) -> Value {
    let mut message = demo_call(id, tool, arguments);
    message["params"]["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": caps,
    });
    if let (Some(params), Value::Object(extra)) = (message["params"].as_object_mut(), extra) {
        params.extend(extra);
    }
    message
}

fn demo_headers(tool: &str) -> Vec<(&'static str, String)> {
    vec![
        ("mcp-protocol-version", MODERN.to_owned()),
        ("mcp-method", "tools/call".to_owned()),
        ("mcp-name", tool.to_owned()),
    ]
}

fn text_of(value: &Value) -> String {
    value.as_str().unwrap_or_default().to_owned()
}

/// Every exchange of the demo's tour against one side, in order; each side follows its own
/// answers (states, URLs, task ids) as the demo does.
async fn demo_tour(side: &Side) -> Transcript {
    let mut t = Transcript::default();
    let send = |token: Option<String>, body: Value, headers: Vec<(&'static str, String)>| {
        let request = Rpc { body, headers };
        async move { side.send(token.as_deref(), &request).await }
    };
    let read = token("mcp:read", None);
    let admin = token("mcp:read mcp:admin", None);

    // 1. No token.
    let reply = send(None, demo_call(1, "echo", json!({"text": "hello"})), vec![]).await;
    t.record("1. echo without a token", &reply);

    // 2. The metadata document.
    let path = side
        .server
        .gate
        .metadata_url()
        .strip_prefix(ORIGIN)
        .expect("metadata at the resource's origin")
        .to_owned();
    let base = side.server.url.trim_end_matches("/mcp");
    let response = reqwest::get(format!("{base}{path}"))
        .await
        .expect("metadata");
    t.record("2. metadata", &Reply::from(response).await);

    // 3. Allowed.
    let reply = send(
        Some(read.clone()),
        demo_call(2, "echo", json!({"text": "hello"})),
        vec![],
    )
    .await;
    t.record("3. echo", &reply);

    // 4. Scope step-up.
    let reply = send(
        Some(read.clone()),
        demo_call(3, "admin_report", json!({})),
        vec![],
    )
    .await;
    t.record("4. admin_report with mcp:read", &reply);
    let reply = send(
        Some(admin.clone()),
        demo_call(4, "admin_report", json!({})),
        vec![],
    )
    .await;
    t.record("4. admin_report with mcp:admin", &reply);

    // 5, 6, 7. unavailable, undisclosed, and undisclosed to a modern client.
    let reply = send(
        Some(read.clone()),
        demo_call(5, "delete_everything", json!({})),
        vec![],
    )
    .await;
    t.record("5. delete_everything", &reply);
    let reply = send(
        Some(read.clone()),
        demo_call(6, "secret_sauce", json!({})),
        vec![],
    )
    .await;
    t.record("6. secret_sauce", &reply);
    let modern = demo_modern_call(7, "secret_sauce", json!({}), &json!({}), json!({}));
    let reply = send(Some(read.clone()), modern, demo_headers("secret_sauce")).await;
    t.record("7. secret_sauce, modern", &reply);

    // 8. The credential remedy, the token it asks for, and a payment that token does not cover.
    let reply = send(
        Some(read.clone()),
        demo_call(8, "transfer", payment("40.00")),
        vec![],
    )
    .await;
    t.record("8. transfer without details", &reply);
    let remedy: Value = URL_SAFE_NO_PAD
        .decode(text_of(&reply.body["authorization_remediation"]))
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or_default();
    let paid = token("mcp:read", Some(remedy["authorization_details"].clone()));
    let reply = send(
        Some(paid.clone()),
        demo_call(9, "transfer", payment("40.00")),
        vec![],
    )
    .await;
    t.record("8. transfer with the details asked for", &reply);
    let reply = send(
        Some(paid),
        demo_call(10, "transfer", payment("400.00")),
        vec![],
    )
    .await;
    t.record("8. transfer of another amount", &reply);

    // 9. URL approval: ask, approve at the page, retry with the state and the context id.
    let caps = json!({"elicitation": {"form": {}, "url": {}}});
    let folder = json!({"folder": "team-docs"});
    let share = demo_modern_call(11, "share_folder", folder.clone(), &caps, json!({}));
    let reply = send(Some(read.clone()), share, demo_headers("share_folder")).await;
    t.record("9. share_folder", &reply);
    let result = &reply.body["result"];
    let url = text_of(&result["inputRequests"]["mcp-gate/approval"]["params"]["url"]);
    let state = text_of(&result["requestState"]);
    let context_id = text_of(
        &result["_meta"]["io.modelcontextprotocol/authorization"]["authorizationContextId"],
    );
    let visited = if url.starts_with(ORIGIN) {
        side.visit(&url, &read).await
    } else {
        0
    };
    t.0.push((
        "9. the approval page".to_owned(),
        Answer {
            status: visited,
            headers: vec![],
            body: String::new(),
        },
    ));
    let mut retry = demo_modern_call(
        12,
        "share_folder",
        folder,
        &caps,
        json!({"requestState": state, "inputResponses": {"mcp-gate/approval": {"action": "accept"}}}),
    );
    retry["params"]["_meta"]["io.modelcontextprotocol/authorization-context-id"] =
        json!(context_id);
    let reply = send(Some(read.clone()), retry, demo_headers("share_folder")).await;
    t.record("9. share_folder, approved", &reply);

    // 10, 11. Confirmation, accepted then declined.
    let path = json!({"path": "notes.txt"});
    for (id, action, label) in [(13, "accept", "10."), (15, "decline", "11.")] {
        let delete = demo_modern_call(id, "delete_file", path.clone(), &caps, json!({}));
        let reply = send(Some(read.clone()), delete, demo_headers("delete_file")).await;
        t.record(format!("{label} delete_file"), &reply);
        let state = text_of(&reply.body["result"]["requestState"]);
        let answer = match action {
            "accept" => json!({"action": "accept", "content": {"approve": true}}),
            _ => json!({"action": "decline"}),
        };
        let answered = demo_modern_call(
            id + 1,
            "delete_file",
            path.clone(),
            &caps,
            json!({"requestState": state, "inputResponses": {"mcp-gate/confirm": answer}}),
        );
        let reply = send(Some(read.clone()), answered, demo_headers("delete_file")).await;
        t.record(format!("{label} delete_file, {action}ed"), &reply);
    }

    // 12, 13. Held for approval: approved and run once; refused.
    let tasks_caps = json!({"extensions": {"io.modelcontextprotocol/tasks": {}}});
    for (id, approve, label) in [(17, true, "12."), (20, false, "13.")] {
        let deploy = demo_modern_call(id, "deploy", json!({"env": "prod"}), &tasks_caps, json!({}));
        let reply = send(Some(read.clone()), deploy, demo_headers("deploy")).await;
        t.record(format!("{label} deploy"), &reply);
        let task_id = text_of(&reply.body["result"]["taskId"]);
        let poll = |id: u64| {
            let body = json!({"jsonrpc": "2.0", "id": id, "method": "tasks/get",
            "params": {"taskId": task_id, "_meta": {
                "io.modelcontextprotocol/protocolVersion": MODERN,
                "io.modelcontextprotocol/clientCapabilities": tasks_caps,
            }}});
            let headers = vec![
                ("mcp-protocol-version", MODERN.to_owned()),
                ("mcp-method", "tasks/get".to_owned()),
                ("mcp-name", task_id.clone()),
            ];
            send(Some(read.clone()), body, headers)
        };
        if approve {
            let reply = poll(id + 1).await;
            t.record(format!("{label} tasks/get, waiting"), &reply);
            let decided = side
                .server
                .gate
                .tasks()
                .approve(&task_id, "release-manager")
                .await;
            t.0.push((
                format!("{label} approved"),
                decision_answer(decided.is_ok()),
            ));
            let reply = poll(id + 2).await;
            t.record(format!("{label} tasks/get, approved"), &reply);
        } else {
            let decided = side
                .server
                .gate
                .tasks()
                .refuse(&task_id, "change freeze")
                .await;
            t.0.push((format!("{label} refused"), decision_answer(decided.is_ok())));
            let reply = poll(id + 1).await;
            t.record(format!("{label} tasks/get, refused"), &reply);
        }
    }
    t
}

/// An approver's decision, as a comparable answer.
fn decision_answer(ok: bool) -> Answer {
    Answer {
        status: if ok { 200 } else { 0 },
        headers: vec![],
        body: String::new(),
    }
}

#[tokio::test]
async fn every_exchange_of_the_demo_answers_alike() {
    let sides = Side::both(demo_options).await;
    let closure = demo_tour(&sides[0]).await;
    let cedar = demo_tour(&sides[1]).await;
    let compared = assert_same("the demo", &closure, &cedar);
    assert_eq!(compared, 25);
    // The tour went as the demo expects (so the comparison covers every kind of decision).
    let body = |label: &str| {
        closure
            .0
            .iter()
            .find(|(l, _)| l == label)
            .map(|(_, a)| a.clone())
            .unwrap_or_else(|| panic!("no exchange {label}"))
    };
    assert_eq!(body("1. echo without a token").status, 401);
    assert_eq!(body("4. admin_report with mcp:read").status, 403);
    assert_eq!(body("4. admin_report with mcp:admin").status, 200);
    assert_eq!(body("8. transfer without details").status, 401);
    assert_eq!(body("8. transfer with the details asked for").status, 200);
    assert_eq!(body("8. transfer of another amount").status, 401);
    assert_eq!(body("9. the approval page").status, 200);
    assert!(
        body("9. share_folder, approved")
            .body
            .contains("shared folder team-docs")
    );
    assert!(
        body("10. delete_file, accepted")
            .body
            .contains("deleted notes.txt")
    );
    assert!(
        body("12. tasks/get, approved")
            .body
            .contains("deployed to prod (deploy run #1 of this server)")
    );
    assert!(
        body("13. tasks/get, refused")
            .body
            .contains("\"isError\":true")
    );
}

// ---------------------------------------------------------------------------------------------
// The decisions themselves, for every phase and every method the gate asks about
// ---------------------------------------------------------------------------------------------

/// The example server's listed input schemas, from the committed `tools.json`.
fn listed_input_schemas() -> Map<String, Value> {
    let text = std::fs::read_to_string(cedar_dir().join("tools.json")).expect("tools.json");
    let tools: Value = serde_json::from_str(&text).expect("JSON");
    tools["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|tool| (text_of(&tool["name"]), tool["inputSchema"].clone()))
        .collect()
}

/// Every evaluation of the comparison for `principal`, labelled: each tool in each phase
/// and era, each prompt, resource, completion, task and skill, and the target-less methods.
fn evaluations(principal: &mcp_gate::Principal) -> Vec<(String, Evaluation)> {
    let schemas = listed_input_schemas();
    let base = || Evaluation::builder(principal.clone());
    let mut all = Vec::new();
    let mut add = |label: String, built: Result<Evaluation, _>| {
        let evaluation = built.unwrap_or_else(|e| panic!("{label}: {e}"));
        all.push((label, evaluation));
    };
    for (tool, arguments) in tool_calls() {
        let schema = schemas[tool].clone();
        let call = || {
            base()
                .tool(tool, arguments.clone())
                .input_schema(schema.clone())
        };
        add(format!("{tool}, modern"), call().build());
        add(format!("{tool}, legacy"), call().era(Era::Legacy).build());
        add(
            format!("{tool}, approved"),
            call().approval("tsk_held", "release-manager").build(),
        );
        let listed = base()
            .tool(tool, Value::Null)
            .input_schema(schema.clone())
            .phase(Phase::Discovery);
        add(format!("{tool}, listed"), listed.build());
    }
    for prompt in ["layoffs", "greet", "summarize"] {
        add(
            format!("prompts/get {prompt}"),
            base().prompt(prompt, json!({})).build(),
        );
        let listed = base().prompt(prompt, Value::Null).phase(Phase::Discovery);
        add(format!("prompts/list {prompt}"), listed.build());
        let reference = CompletionReference::Prompt {
            name: prompt.to_owned(),
        };
        add(
            format!("completion/complete {prompt}"),
            base().completion(reference, "who").build(),
        );
    }
    for uri in [
        "demo://payroll",
        "demo://readme",
        "skill://payroll/SKILL.md",
    ] {
        for method in [
            "resources/read",
            "resources/subscribe",
            "resources/unsubscribe",
            "subscriptions/listen",
        ] {
            add(
                format!("{method} {uri}"),
                base().resource(uri).method(method).build(),
            );
        }
        for method in [
            "resources/list",
            "resources/templates/list",
            "resources/directory/read",
        ] {
            let listed = base().resource(uri).method(method).phase(Phase::Discovery);
            add(format!("{method} {uri}"), listed.build());
        }
        add(format!("skills/get {uri}"), base().skill(uri).build());
        let listed = base().skill(uri).phase(Phase::Discovery);
        add(format!("skills/list {uri}"), listed.build());
    }
    let reference = CompletionReference::Resource {
        uri: "demo://payroll".to_owned(),
    };
    add(
        "completion/complete demo://payroll".to_owned(),
        base().completion(reference, "part").build(),
    );
    for method in ["tasks/get", "tasks/update", "tasks/cancel", "tasks/result"] {
        add(
            method.to_owned(),
            base().task("inner-task-1").method(method).build(),
        );
    }
    for method in ["logging/setLevel", "tasks/list", "subscriptions/listen"] {
        add(
            format!("{method}, no target"),
            base().method(method).build(),
        );
    }
    all
}

/// Both policies asked directly, for every principal and evaluation: the same decision
/// (after the approval id's normalisation). This reaches what one request cannot: the
/// approval phase of every tool, methods the example server does not serve, skills.
#[tokio::test]
async fn both_policies_decide_alike_for_every_phase_and_method() {
    let mut decisions: Vec<Vec<(String, String)>> = Vec::new();
    for which in SIDES {
        let policy = example_policy(which, &Approvals::default(), ORIGIN);
        let mut decided = Vec::new();
        for scope in ["", "mcp:tools", "mcp:admin", "mcp:tools mcp:admin"] {
            for (what, details) in [
                ("no details", vec![]),
                (
                    "details for 40 EUR",
                    vec![payment_details("40.00")[0].clone()],
                ),
                (
                    "details for 400 EUR",
                    vec![payment_details("400.00")[0].clone()],
                ),
            ] {
                let principal = mcp_gate::Principal::builder()
                    .issuer(ISSUER)
                    .subject("user-1")
                    .client_id("client-1")
                    .scopes(scope.split(' ').filter(|s| !s.is_empty()))
                    .authorization_details(details)
                    .build()
                    .expect("a principal");
                for (label, evaluation) in evaluations(&principal) {
                    let decision = policy.evaluate(evaluation).await.expect("a decision");
                    decided.push((
                        format!("{label} / scope {scope:?}, {what}"),
                        normalize(&format!("{decision:?}")),
                    ));
                }
            }
        }
        decisions.push(decided);
    }
    let (closure, cedar) = (&decisions[0], &decisions[1]);
    assert_eq!(closure.len(), cedar.len());
    let differences: Vec<String> = closure
        .iter()
        .zip(cedar)
        .filter(|(a, b)| a != b)
        .map(|((label, a), (_, b))| format!("- {label}\n    closure: {a}\n    cedar:   {b}"))
        .collect();
    assert!(
        differences.is_empty(),
        "{} of {} decisions differ:\n{}",
        differences.len(),
        closure.len(),
        differences.join("\n")
    );
    assert_eq!(
        closure.len(),
        12 * evaluations(&principal_for_count()).len()
    );
}

fn principal_for_count() -> mcp_gate::Principal {
    mcp_gate::Principal::builder()
        .issuer(ISSUER)
        .subject("user-1")
        .build()
        .expect("a principal")
}

// ---------------------------------------------------------------------------------------------
// Where the two differ, by design
// ---------------------------------------------------------------------------------------------

/// The closure lets the inner server answer a call it cannot judge (a tool the server does
/// not have, arguments of the wrong type); the Cedar set refuses what does not fit its schema
/// before any policy is read. The two answers differ there, deliberately: this test pins both.
#[tokio::test]
async fn calls_that_do_not_fit_the_schema_are_refused_by_cedar_only() {
    let sides = Side::both(no_options).await;
    let token = token("mcp:tools", None);
    let client = Client::Modern("no capabilities", json!({}));
    for (tool, arguments, cedar_says) in [
        ("no_such_tool", json!({}), "You are not allowed to do this."),
        (
            "echo",
            json!({"text": 5}),
            "The request does not match the authorization schema.",
        ),
        (
            "echo",
            json!({}),
            "The request does not match the authorization schema.",
        ),
    ] {
        let request = Rpc::call(&client, 1, tool, arguments.clone());
        let closure = sides[0].send(Some(&token), &request).await;
        let cedar = sides[1].send(Some(&token), &request).await;
        let result = &cedar.body["result"];
        assert_eq!(result["isError"], true, "{tool} {arguments}: {cedar:?}");
        assert_eq!(result["content"][0]["text"], cedar_says, "{cedar:?}");
        assert_eq!(
            result["_meta"]["io.modelcontextprotocol/authorization"]["remediation"],
            "undisclosed"
        );
        // The closure allowed it: the inner server's own answer, no denial envelope.
        assert!(
            closure.body["result"]["_meta"]["io.modelcontextprotocol/authorization"].is_null(),
            "{closure:?}"
        );
        assert_ne!(Answer::from(&closure), Answer::from(&cedar));
    }
}

// ---------------------------------------------------------------------------------------------
// The official SDK clients
// ---------------------------------------------------------------------------------------------

const CLIENT_ID: &str = "mcp-client";
const CLIENT_SECRET: &str = "mcp-client-secret";

/// The example server as `start_demo` builds it (oidc-provider tokens, `mcp:read` required),
/// deciding with `which`; its resource is its own URL.
async fn sdk_server(which: Which, auth: &AuthServer) -> GatedServer {
    let issuer = auth.issuer.clone();
    let approvals = Approvals::default();
    let pages = approvals.clone();
    GatedServer::start_full(
        |resource| {
            let origin = resource.trim_end_matches("/mcp");
            Gate::builder()
                .evaluate(example_policy(which, &approvals, origin))
                .development_mode()
                .issuer(issuer.as_str())
                .required_scopes(["mcp:read"])
        },
        Router::new().nest_service("/mcp", common::tools::mcp_service()),
        move |gate| pages.router(gate.clone()),
    )
    .await
}

/// What a client printed, step by step, with the server's address and the random values
/// normalised.
fn steps(run: &ClientRun, server: &GatedServer) -> Vec<String> {
    let origin = server.url.trim_end_matches("/mcp");
    run.steps
        .iter()
        .map(|step| normalize(&step.to_string().replace(origin, "<server>")))
        .collect()
}

/// The TypeScript SDK (legacy 2025-11-25, `--step-up` for the scope remedy) and the Python
/// SDK (modern 2026-07-28, answering URL approvals, confirmations and tasks) see exactly the
/// same on the Cedar-backed server as on the closure-backed one: scope step-up, the URL
/// approval completed at the page, the confirmation, the held task, and every denial.
#[tokio::test]
async fn sdk_clients_see_the_same_on_both() {
    let auth = AuthServer::start(&[]).await;
    let servers = [
        sdk_server(Which::Closure, &auth).await,
        sdk_server(Which::Cedar, &auth).await,
    ];
    let calls = [
        r#"echo={"text":"allowed"}"#,
        "admin_report",
        r#"share_folder={"folder":"team-docs"}"#,
        r#"delete_file={"path":"notes.txt"}"#,
        "delete_everything",
        "secret_sauce",
        r#"transfer={"amount":"40.00","currency":"EUR","iban":"DE00TEST"}"#,
    ];
    let mut runs = Vec::new();
    for server in &servers {
        let mut ts = vec![
            "--client-id",
            CLIENT_ID,
            "--client-secret",
            CLIENT_SECRET,
            "--scope",
            "mcp:read",
            "--issuer",
            &auth.issuer,
            "--step-up",
            "--no-list",
        ];
        let mut py = vec![
            "--client-id",
            CLIENT_ID,
            "--client-secret",
            CLIENT_SECRET,
            "--issuer",
            &auth.issuer,
            "--no-list",
            "--elicit",
            "--wait-url",
            "--form-action",
            "accept",
            "--tasks",
            "--wait-task",
        ];
        for call in calls {
            ts.extend(["--call", call]);
            py.extend(["--call", call]);
        }
        py.extend(["--call", r#"deploy={"env":"prod"}"#]);
        let own = auth
            .token(
                CLIENT_ID,
                CLIENT_SECRET,
                Some("mcp:read"),
                Some(&server.url),
            )
            .await;
        let visited: Arc<Mutex<Vec<u16>>> = Arc::default();
        let record = visited.clone();
        let gate = server.gate.clone();
        let (typescript, python) = tokio::join!(
            run_client_visiting(Sdk::TypeScript, &server.url, &ts, |_| async {}),
            run_client_visiting(Sdk::Python, &server.url, &py, |what| {
                let (own, record, gate) = (own.clone(), record.clone(), gate.clone());
                async move {
                    if what.starts_with("http") {
                        // The user opens the approval page and approves, as the same subject.
                        let status = reqwest::Client::new()
                            .post(&what)
                            .bearer_auth(&own)
                            .send()
                            .await
                            .expect("approval page")
                            .status()
                            .as_u16();
                        record.lock().unwrap().push(status);
                    } else {
                        // The release manager approves the held deploy.
                        gate.tasks()
                            .approve(&what, "release-manager")
                            .await
                            .expect("approve");
                    }
                }
            }),
        );
        let visits = visited.lock().unwrap().clone();
        runs.push((typescript, python, visits));
    }

    for (sdk, pick) in [("TypeScript", 0usize), ("Python", 1usize)] {
        let of = |i: usize| {
            let (ts, py, _) = &runs[i];
            let run = if pick == 0 { ts } else { py };
            steps(run, &servers[i])
        };
        let (closure, cedar) = (of(0), of(1));
        assert_eq!(
            closure.len(),
            cedar.len(),
            "{sdk}: as many steps\nclosure: {closure:#?}\ncedar: {cedar:#?}"
        );
        for (a, b) in closure.iter().zip(&cedar) {
            assert_eq!(a, b, "{sdk}: the same step");
        }
    }

    // What the Cedar-backed server made them do, so that the comparison is not vacuous.
    let (typescript, python, visits) = &runs[1];
    assert_eq!(
        visits,
        &[200],
        "one approval page visit, approved: {python:#?}"
    );
    let admin = typescript.calls("admin_report");
    assert_eq!(admin[0]["error"]["http_status"], 403, "{typescript:#?}");
    assert_eq!(admin[1]["ok"], true, "after the step-up: {typescript:#?}");
    let share = typescript.call("share_folder");
    let text = text_of(&share["result"]["content"][0]["text"]);
    assert!(text.contains("approval page: http://"), "{share}");
    // Every call went through but transfer (a credential this client cannot obtain).
    for step in python.steps.iter().filter(|s| s["step"] == "call") {
        assert_eq!(step["ok"], step["name"] != "transfer", "{step}");
    }
    assert!(python.asked_for_scopes(&auth.token_endpoint, &["mcp:admin", "mcp:read"]));
    let text = |name: &str| {
        text_of(&python.calls(name).last().expect("a call")["result"]["content"][0]["text"])
    };
    assert_eq!(text("admin_report"), "admin report: all systems nominal");
    assert_eq!(text("share_folder"), "shared folder team-docs");
    assert_eq!(text("delete_file"), "deleted notes.txt");
    assert!(
        text("deploy").starts_with("deployed to prod"),
        "{python:#?}"
    );
}

// ---------------------------------------------------------------------------------------------
// A shadow policy over the demo tour
// ---------------------------------------------------------------------------------------------

/// The example's Cedar set with one rule changed: `admin_report` needs `mcp:reports` instead of
/// `mcp:admin` (rule `admin-report-needs-mcp-admin`). Written to a folder of this test's own.
fn changed_set() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("mcp-gate-shadow-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary folder");
    for entry in std::fs::read_dir(cedar_dir()).expect("the example set") {
        let path = entry.expect("an entry").path();
        let name = path.file_name().expect("a name").to_owned();
        std::fs::copy(&path, dir.join(name)).expect("copied");
    }
    let policies = dir.join("policies.cedar");
    let text = std::fs::read_to_string(&policies).expect("the policies");
    let rule = "@id(\"admin-report-needs-mcp-admin\")\n@remediation(\"scopes\")\n@scopes(\"mcp:admin\")\n\
                forbid (principal, action == Demo::Action::\"admin_report\", resource)\n\
                when { context.gate.phase != \"discovery\" }\n\
                unless { principal.scopes.contains(\"mcp:admin\") };";
    assert!(
        text.contains(rule),
        "the rule to change is in the example set"
    );
    let changed = rule.replace("mcp:admin", "mcp:reports");
    std::fs::write(&policies, text.replace(rule, &changed)).expect("written");
    dir
}

/// An audit sink keeping every decision record as JSON.
fn audit_sink() -> (Arc<Mutex<Vec<Value>>>, impl mcp_gate::audit::AuditSink) {
    let kept: Arc<Mutex<Vec<Value>>> = Arc::default();
    let sink = kept.clone();
    let sink = move |record: &mcp_gate::audit::AuditRecord| {
        let json: Value = serde_json::from_str(&record.to_json()).expect("a record is JSON");
        if json["type"] == "dev.mcp-gate.decision.v1" {
            sink.lock()
                .expect("not poisoned")
                .push(json["data"].clone());
        }
    };
    (kept, sink)
}

#[tokio::test]
async fn a_shadow_set_with_one_rule_changed_counts_exactly_the_decisions_that_differ() {
    let candidate = changed_set();
    // The live example set, with the changed set as its shadow.
    let approvals = Approvals::default();
    let live = example_policy(Which::Cedar, &approvals, ORIGIN);
    let shadow = cedar_policy::cedar_policy(&candidate, approvals.clone(), ORIGIN)
        .expect("the changed set loads");
    let (shadowed_records, sink) = audit_sink();
    let shadowed = Side::start_with(approvals, live, move |builder| {
        demo_options(builder).shadow_policy(shadow).audit(sink)
    })
    .await;
    // The live example set alone; and the changed set live, with the example set as its
    // shadow: the oracle, whose live rulings are the changed set's.
    let plain = Side::start(Which::Cedar, demo_options).await;
    let approvals = Approvals::default();
    let changed = cedar_policy::cedar_policy(&candidate, approvals.clone(), ORIGIN)
        .expect("the changed set loads");
    let example = example_policy(Which::Cedar, &approvals, ORIGIN);
    let (changed_records, sink) = audit_sink();
    let changed_live = Side::start_with(approvals, Box::new(changed), move |builder| {
        demo_options(builder).shadow_policy(example).audit(sink)
    })
    .await;

    let with_shadow = demo_tour(&shadowed).await;
    let without = demo_tour(&plain).await;
    let changed_tour = demo_tour(&changed_live).await;
    // Every answer is the live policy's.
    assert_same(
        "the demo with and without the shadow",
        &with_shadow,
        &without,
    );
    assert_ne!(
        with_shadow.0, changed_tour.0,
        "the changed rule changes an answer when it is live"
    );

    let shadowed_records = shadowed_records.lock().expect("not poisoned").clone();
    let changed_records = changed_records.lock().expect("not poisoned").clone();
    assert_eq!(
        shadowed_records.len(),
        changed_records.len(),
        "both tours made the same decisions"
    );
    let mut differing = Vec::new();
    for (at, (live, oracle)) in shadowed_records.iter().zip(&changed_records).enumerate() {
        assert_eq!(
            (&live["phase"], &live["method"], &live["target"]),
            (&oracle["phase"], &oracle["method"], &oracle["target"]),
            "decision {at}: the same question on both sides"
        );
        let word = |v: &Value| v.as_str().unwrap_or("none").to_owned();
        let rulings = |r: &Value| {
            let s = &r["shadow"];
            (
                (word(&s["live_decision"]), word(&s["live_remediation"])),
                (word(&s["decision"]), word(&s["remediation"])),
            )
        };
        // What the example set ruled, and what the changed set ruled, seen from each side.
        let (example_here, changed_here) = rulings(live);
        let (changed_there, example_there) = rulings(oracle);
        assert_eq!(
            changed_here, changed_there,
            "decision {at}: the shadow rules as the changed set does when it is live: {live} / {oracle}"
        );
        assert_eq!(
            example_here, example_there,
            "decision {at}: {live} / {oracle}"
        );
        let differs = example_here != changed_here;
        assert_eq!(live["shadow"]["differs"], differs, "decision {at}: {live}");
        assert_eq!(
            oracle["shadow"]["differs"], differs,
            "decision {at}: {oracle}"
        );
        if differs {
            differing.push(live.clone());
        }
    }
    // The rule change shows on the tour, and only where the changed rule decides.
    assert!(!differing.is_empty(), "the tour reaches the changed rule");
    for record in &differing {
        assert_eq!(record["target"]["name"], "admin_report", "{record}");
        assert_eq!(
            record["shadow"]["policy"]["determining"],
            json!(["admin-report-needs-mcp-admin"]),
            "{record}"
        );
        assert_eq!(
            record["policy"]["determining"],
            json!(["allow-by-default"]),
            "{record}"
        );
    }
    let counted = shadowed_records
        .iter()
        .filter(|r| r["shadow"]["differs"] == true)
        .count();
    assert_eq!(counted, differing.len());
    // The live set's version names it, and the shadow's is another.
    let first = &shadowed_records[0];
    assert_ne!(
        first["policy"]["version"],
        first["shadow"]["policy"]["version"]
    );
    println!(
        "{} decisions on the demo tour, {} differ under the changed rule",
        shadowed_records.len(),
        differing.len()
    );
    let _ = std::fs::remove_dir_all(&candidate);
}
