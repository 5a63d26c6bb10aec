//! Wire fidelity through the real stack: the rmcp surface server (tests/common/surface.rs)
//! behind the layer on 127.0.0.1, with the recorder between them that says what reached rmcp,
//! and the official SDK clients where one applies.
//!
//! - `server/discover` through the layer advertises the layer's extensions beside rmcp's own
//!   capabilities (MCP 2026-07-28 `server/discover`; the extension ids of SEP-2643 and of the
//!   Tasks extension); legacy `initialize` is untouched; `-32022` lists both versions.
//! - Results the layer writes itself for a 2026-07-28 request name the inner server (MCP
//!   2026-07-28 schema: a result SHOULD carry `_meta["io.modelcontextprotocol/serverInfo"]`).
//! - A failed task says why (Tasks extension: a failed task's status SHOULD carry a
//!   `statusMessage`).
//! - `WWW-Authenticate` challenges put `error_description` last, cut to RFC 6750 §3's
//!   characters.

use crate::common;

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use common::modern::{envelope, modern, tasks_capabilities};
use common::peers::{AuthServer, GatedServer, Reply, Sdk, run_client, run_client_visiting};
use common::surface::{PUBLIC, SECRET, Surface};
use common::tokens::{TestKey, claims};
use mcp_gate::denial::EXTENSION_ID as DENIALS_EXTENSION;
use mcp_gate::mcp::SERVER_INFO_META;
use mcp_gate::policy::{Decision, Evaluation, Remediation};
use mcp_gate::{Gate, GateBuilder};
use serde_json::{Value, json};

const ISSUER: &str = "https://as.example";
const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";
/// The error-based SEP-2643 revision: the layer never answers with a `CreateTaskResult`.
const ERROR_BASED: &str = "1c5b0cec97691cb9db3d880474a71d604d6addee";
/// The older result-based revision (no envelope beside a challenge).
const OLDER_RESULT_BASED: &str = "6bff817cb884f7065fd5b3d37c4973d1f8b3fa87";
const MODERN: &str = "2026-07-28";
const LEGACY: &str = "2025-11-25";
/// A policy text that tries to smuggle parameters into a challenge.
const EVIL: &str = "say \"hi\" \\ scope=mcp:admin resource_metadata=https://evil café";

/// The tests' policy:
/// - `delete_everything`, and reading `demo://secret`: undisclosed;
/// - `echo`: held as a task until approved, then allowed;
/// - `transfer`: a credential remedy whose message is [`EVIL`];
/// - `admin_report`: a scope step-up to `mcp:admin`;
/// - everything else allowed.
fn judge(e: &Evaluation) -> Decision {
    if e.method() == "resources/read" && e.target().name() == Some(SECRET) {
        return Decision::undisclosed("This is not available to you.");
    }
    match (e.tool(), e.approval()) {
        (Some("delete_everything"), _) => Decision::undisclosed("Not for you."),
        (Some("echo"), None) => Decision::task("Echoes need an operator."),
        (Some("transfer"), _) => Remediation::credential([payment()]).message(EVIL).into(),
        (Some("admin_report"), _) => Decision::scopes(["mcp:admin"]),
        _ => Decision::allow(),
    }
}

fn payment() -> Value {
    json!({"type": "payment_initiation", "instructedAmount": {"amount": "40.00", "currency": "EUR"}})
}

/// An MCP service behind a gate with the tests' policy and locally minted tokens.
struct Stack {
    server: GatedServer,
    key: TestKey,
}

impl Stack {
    /// `mcp` (a router serving `/mcp`) behind the gate; `configure` adds options.
    async fn start(mcp: Router, configure: impl FnOnce(GateBuilder) -> GateBuilder) -> Self {
        let key = TestKey::es256("k1");
        let policy = |e: Evaluation| async move { Ok::<_, Infallible>(judge(&e)) };
        let configure = |builder: GateBuilder| {
            let poll = Duration::from_millis(50);
            let builder = builder
                .required_scopes(["mcp:read"])
                .task_poll_interval(poll);
            configure(builder.evaluate(policy))
        };
        let server = GatedServer::start_trusting(ISSUER, &key, configure, mcp).await;
        Self { server, key }
    }

    /// The rmcp surface server behind the gate.
    async fn surface(configure: impl FnOnce(GateBuilder) -> GateBuilder) -> (Self, Surface) {
        let surface = Surface::new();
        let stack = Self::start(surface.router(), configure).await;
        (stack, surface)
    }

    fn token(&self) -> String {
        self.key.mint(&claims(ISSUER, &self.server.url, "mcp:read"))
    }

    /// A 2026-07-28 request declaring `capabilities`; `name` is what `Mcp-Name` mirrors.
    async fn modern(&self, method: &str, params: Value, name: &str, capabilities: Value) -> Reply {
        send_modern(
            &self.server.url,
            Some(&self.token()),
            method,
            params,
            name,
            capabilities,
        )
        .await
    }

    /// A 2026-07-28 `tools/call` of `tool` with `arguments`.
    async fn call_tool(&self, tool: &str, arguments: Value, capabilities: Value) -> Reply {
        let params = json!({"name": tool, "arguments": arguments});
        self.modern("tools/call", params, tool, capabilities).await
    }

    /// A legacy request (no `_meta`, the 2025-11-25 header, no session).
    async fn legacy(&self, method: &str, params: Value) -> Reply {
        let body = json!({"jsonrpc": "2.0", "id": 5, "method": method, "params": params});
        self.server
            .post(
                Some(&self.token()),
                &[("mcp-protocol-version", LEGACY)],
                &body.to_string(),
            )
            .await
    }
}

/// POSTs a 2026-07-28 request to `url` (`Mcp-Name` only when `name` is not empty).
async fn send_modern(
    url: &str,
    token: Option<&str>,
    method: &str,
    params: Value,
    name: &str,
    capabilities: Value,
) -> Reply {
    let (body, headers) = modern(9, method, params, name, capabilities);
    let mut request = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(body);
    for (header, value) in headers.iter().filter(|(_, v)| !v.is_empty()) {
        request = request.header(*header, value);
    }
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    Reply::from(request.send().await.expect("post")).await
}

/// POSTs a legacy `initialize` to `url`.
async fn initialize(url: &str, token: Option<&str>) -> Reply {
    let body = json!({
        "jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": LEGACY, "capabilities": {},
                   "clientInfo": {"name": "wire-fidelity", "version": "0"}}
    });
    let mut request = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(body.to_string());
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    Reply::from(request.send().await.expect("post")).await
}

/// The rmcp surface server alone, without the layer, on its own port: what rmcp says itself.
async fn bare_rmcp() -> (String, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let app = Surface::new().router();
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (url, task)
}

/// The JSON-RPC answer (result or error) in a reply, JSON or event stream.
fn answer(reply: &Reply) -> Value {
    if let Ok(message) = serde_json::from_str::<Value>(&reply.text) {
        return message;
    }
    reply.streamed_answer()
}

/// The `result` of a reply that must be a success.
fn result(reply: &Reply) -> Value {
    let message = answer(reply);
    assert!(message.get("result").is_some(), "not a result: {reply:?}");
    message["result"].clone()
}

/// `capabilities` without `extensions`.
fn without_extensions(capabilities: &Value) -> Value {
    let mut capabilities = capabilities.clone();
    if let Some(object) = capabilities.as_object_mut() {
        object.remove("extensions");
    }
    capabilities
}

/// The extension ids a `capabilities` object declares.
fn extension_ids(capabilities: &Value) -> Vec<String> {
    let mut ids: Vec<String> = capabilities["extensions"]
        .as_object()
        .map(|e| e.keys().cloned().collect())
        .unwrap_or_default();
    ids.sort();
    ids
}

// ---------------------------------------------------------------------------------------------
// 3. `server/discover` advertises the layer's extensions
// ---------------------------------------------------------------------------------------------

/// MCP 2026-07-28: `server/discover` answers the server's capabilities, extensions under
/// `capabilities.extensions`. The layer answers SEP-2643 denials (always) and the Tasks
/// extension's `CreateTaskResult` / `tasks/*` (result-based revisions only), so a client must
/// learn both from the discover answer, beside everything rmcp declares itself.
#[tokio::test]
async fn discover_through_the_layer_keeps_rmcps_capabilities_and_adds_the_layers_extensions() {
    let (bare, _bare_task) = bare_rmcp().await;
    let own = send_modern(&bare, None, "server/discover", json!({}), "", json!({})).await;
    assert_eq!(own.status, 200, "{own:?}");
    let own = result(&own);
    assert!(
        own["capabilities"]["tools"].is_object(),
        "rmcp declares tools itself: {own}"
    );
    let own_extensions = extension_ids(&own["capabilities"]);
    assert!(
        !own_extensions.contains(&DENIALS_EXTENSION.to_owned())
            && !own_extensions.contains(&TASKS_EXTENSION.to_owned()),
        "rmcp alone declares neither of the layer's extensions, so seeing them proves the \
         layer added them: {own}"
    );

    for (revision, with_tasks) in [
        ("current", true),
        (OLDER_RESULT_BASED, true),
        (ERROR_BASED, false),
    ] {
        let (stack, surface) = Stack::surface(|b| b.revision(revision)).await;
        let reply = stack
            .modern("server/discover", json!({}), "", json!({}))
            .await;
        assert_eq!(reply.status, 200, "{revision}: {reply:?}");
        let merged = result(&reply);
        // rmcp's own answer is passed on: every capability but `extensions` as rmcp wrote it,
        // the rest of the result too.
        assert_eq!(
            without_extensions(&merged["capabilities"]),
            without_extensions(&own["capabilities"]),
            "{revision}: {merged}"
        );
        for member in ["supportedVersions", "resultType", "_meta"] {
            assert_eq!(merged[member], own[member], "{revision}: {member}");
        }
        for id in &own_extensions {
            assert_eq!(
                merged["capabilities"]["extensions"][id], own["capabilities"]["extensions"][id],
                "{revision}: rmcp's own extension {id} kept as is"
            );
        }
        // Plus the layer's.
        let mut expected = own_extensions.clone();
        expected.push(DENIALS_EXTENSION.to_owned());
        if with_tasks {
            expected.push(TASKS_EXTENSION.to_owned());
        }
        expected.sort();
        assert_eq!(
            extension_ids(&merged["capabilities"]),
            expected,
            "{revision}: {merged}"
        );
        assert_eq!(
            merged["capabilities"]["extensions"][DENIALS_EXTENSION],
            json!({})
        );
        // The discover reached rmcp exactly once (passed through, not answered by the layer).
        assert_eq!(
            surface.reached.count("POST server/discover"),
            1,
            "{revision}: {:?}",
            surface.reached.log()
        );
    }
}

/// An inner server's own settings for an extension the layer also serves are its to state:
/// the layer adds only keys the inner server did not declare.
#[tokio::test]
async fn discover_keeps_the_inner_servers_own_values_for_the_layers_extensions() {
    let inner = Inner::new(json!({
        "tools": {},
        "extensions": {DENIALS_EXTENSION: {"mine": true}, "com.example/other": {"x": 1}}
    }));
    let stack = Stack::start(inner.router(), |b| b).await;
    let reply = stack
        .modern("server/discover", json!({}), "", json!({}))
        .await;
    let merged = result(&reply);
    assert_eq!(
        merged["capabilities"],
        json!({"tools": {}, "extensions": {
            DENIALS_EXTENSION: {"mine": true},
            "com.example/other": {"x": 1},
            TASKS_EXTENSION: {},
        }}),
        "{reply:?}"
    );
}

/// MCP 2025-11-25 `initialize` is the server's own answer: the layer serves no 2025-11-25
/// task-augmented calls and adds nothing to it.
#[tokio::test]
async fn a_legacy_initialize_answer_is_rmcps_own() {
    let (bare, _bare_task) = bare_rmcp().await;
    let own = initialize(&bare, None).await;
    assert_eq!(own.status, 200, "{own:?}");
    let own = result(&own);
    let (stack, surface) = Stack::surface(|b| b).await;
    let through = initialize(&stack.server.url, Some(&stack.token())).await;
    assert_eq!(through.status, 200, "{through:?}");
    let through = result(&through);
    assert_eq!(surface.reached.count("POST initialize"), 1);
    assert_eq!(through["capabilities"], own["capabilities"], "{through}");
    assert_eq!(through["serverInfo"], own["serverInfo"]);
    assert_eq!(through["protocolVersion"], LEGACY);
    let declared = extension_ids(&through["capabilities"]);
    assert!(
        !declared.contains(&DENIALS_EXTENSION.to_owned())
            && !declared.contains(&TASKS_EXTENSION.to_owned()),
        "{through}"
    );
    assert!(
        through
            .get("_meta")
            .is_none_or(|m| m.get(SERVER_INFO_META).is_none()),
        "a legacy answer is not stamped: {through}"
    );
}

/// MCP 2026-07-28: an unsupported protocol version is refused with `-32022` (HTTP 400) and
/// `data.supported` lists every version the server speaks, legacy `initialize` included.
#[tokio::test]
async fn an_unsupported_version_lists_both_supported_versions() {
    let (stack, surface) = Stack::surface(|b| b).await;
    for (method, params, name) in [
        ("server/discover", json!({}), ""),
        (
            "tools/call",
            json!({"name": "whatever", "arguments": {}}),
            "whatever",
        ),
    ] {
        let (body, headers) = modern(3, method, params, name, json!({}));
        let body = body.replace(MODERN, "2099-01-01");
        let headers: Vec<(&str, &str)> = headers
            .iter()
            .filter(|(_, v)| !v.is_empty())
            .map(|(h, v)| {
                (
                    *h,
                    if v == MODERN {
                        "2099-01-01"
                    } else {
                        v.as_str()
                    },
                )
            })
            .collect();
        let reply = stack
            .server
            .post(Some(&stack.token()), &headers, &body)
            .await;
        assert_eq!(reply.status, 400, "{method}: {reply:?}");
        let error = &reply.body["error"];
        assert_eq!(error["code"], -32022, "{method}: {reply:?}");
        assert_eq!(error["data"]["supported"], json!([MODERN, LEGACY]));
        assert_eq!(error["data"]["requested"], "2099-01-01");
        assert_eq!(reply.body["id"], 3);
    }
    assert!(
        surface.reached.log().is_empty(),
        "{:?}",
        surface.reached.log()
    );
}

/// The Python SDK (modern: `server/discover`, then per-request `_meta`) accepts the merged
/// answer: it negotiates 2026-07-28, sees rmcp's capabilities and the layer's extensions, and
/// names the server as rmcp names itself.
#[tokio::test]
async fn the_python_sdk_reads_the_merged_discover_answer() {
    common::peers::ensure_peers();
    let (stack, surface) = Stack::surface(|b| b).await;
    let script = r#"
import json, sys
import anyio, httpx2
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

async def main(url, token):
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(30))
    async with http:
        async with Client(streamable_http_client(url, http_client=http), mode="auto", cache=None) as client:
            info = client.server_info
            print(json.dumps({
                "protocol_version": client.protocol_version,
                "capabilities": client.server_capabilities.model_dump(by_alias=True, exclude_none=True, mode="json"),
                "server_info": info.model_dump(by_alias=True, exclude_none=True, mode="json") if info else None,
            }))

anyio.run(main, sys.argv[1], sys.argv[2])
"#;
    let python = common::peers::peers_dir()
        .join(".venv")
        .join("bin")
        .join("python");
    let output = tokio::time::timeout(
        Duration::from_secs(60),
        tokio::process::Command::new(python)
            .arg("-c")
            .arg(script)
            .arg(&stack.server.url)
            .arg(stack.token())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the Python SDK finished within 60 s")
    .expect("python runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let seen: Value = serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .unwrap_or_else(|_| panic!("{stdout}"));
    assert_eq!(seen["protocol_version"], MODERN, "{seen}");
    assert!(seen["capabilities"]["tools"].is_object(), "{seen}");
    let extensions = extension_ids(&seen["capabilities"]);
    assert!(
        extensions.contains(&DENIALS_EXTENSION.to_owned())
            && extensions.contains(&TASKS_EXTENSION.to_owned()),
        "{seen}"
    );
    assert_eq!(seen["server_info"]["name"], "rmcp", "{seen}");
    assert!(
        surface.reached.count("POST server/discover") >= 1,
        "{:?}",
        surface.reached.log()
    );
}

// ---------------------------------------------------------------------------------------------
// 4. The layer's own results name the inner server
// ---------------------------------------------------------------------------------------------

/// MCP 2026-07-28 schema: a result SHOULD carry `_meta["io.modelcontextprotocol/serverInfo"]`.
/// A denial the layer writes as a result names rmcp exactly as rmcp names itself in its own
/// `server/discover`, asked once by the layer when it first needs it.
#[tokio::test]
async fn a_denial_result_names_rmcp_as_rmcp_names_itself() {
    let (bare, _bare_task) = bare_rmcp().await;
    let own = send_modern(&bare, None, "server/discover", json!({}), "", json!({})).await;
    let rmcp = result(&own)["_meta"][SERVER_INFO_META].clone();
    assert_eq!(rmcp["name"], "rmcp", "{own:?}");

    let (stack, surface) = Stack::surface(|b| b).await;
    for round in 0..3 {
        let reply = stack
            .call_tool("delete_everything", json!({}), json!({}))
            .await;
        assert_eq!(reply.status, 200, "{reply:?}");
        let denied = result(&reply);
        assert_eq!(denied["isError"], true, "{denied}");
        assert_eq!(envelope(&denied)["remediation"], "undisclosed");
        assert_eq!(
            denied["_meta"][SERVER_INFO_META], rmcp,
            "round {round}: {denied}"
        );
    }
    // The layer asked rmcp once, then remembered; the call itself never reached rmcp.
    assert_eq!(
        surface.reached.log(),
        ["POST server/discover"],
        "one discover of the layer's own, nothing else"
    );
    // A client's discover through the layer says the same name.
    let discovered = stack
        .modern("server/discover", json!({}), "", json!({}))
        .await;
    assert_eq!(result(&discovered)["_meta"][SERVER_INFO_META], rmcp);

    // Learned from a client's discover passing through: the layer then asks nothing itself.
    let (stack, surface) = Stack::surface(|b| b).await;
    let discovered = stack
        .modern("server/discover", json!({}), "", json!({}))
        .await;
    assert_eq!(result(&discovered)["_meta"][SERVER_INFO_META], rmcp);
    let reply = stack
        .call_tool("delete_everything", json!({}), json!({}))
        .await;
    assert_eq!(result(&reply)["_meta"][SERVER_INFO_META], rmcp, "{reply:?}");
    assert_eq!(
        surface.reached.log(),
        ["POST server/discover"],
        "only the client's own discover reached rmcp"
    );
}

/// With `server_info` configured, that is the name, and rmcp is never asked for its own.
#[tokio::test]
async fn a_configured_identity_wins_and_the_inner_server_is_not_asked() {
    let (stack, surface) = Stack::surface(|b| b.server_info("files", "1.4.0")).await;
    let files = json!({"name": "files", "version": "1.4.0"});
    // Undisclosed, as a CallToolResult.
    let reply = stack
        .call_tool("delete_everything", json!({}), json!({}))
        .await;
    let denied = result(&reply);
    assert_eq!(envelope(&denied)["remediation"], "undisclosed", "{denied}");
    assert_eq!(denied["_meta"][SERVER_INFO_META], files, "{denied}");
    // A CreateTaskResult.
    let reply = stack
        .call_tool("echo", json!({"text": "x"}), tasks_capabilities())
        .await;
    let task = result(&reply);
    assert_eq!(task["resultType"], "task", "{task}");
    assert_eq!(task["_meta"][SERVER_INFO_META], files, "{task}");
    assert_eq!(
        surface.reached.count("POST server/discover"),
        0,
        "{:?}",
        surface.reached.log()
    );
    assert!(
        surface.reached.log().is_empty(),
        "{:?}",
        surface.reached.log()
    );
}

/// The serverInfo stamp is a 2026-07-28 result member: a 2025-11-25 result never carries it
/// (that version names the server once, in `initialize`), and a JSON-RPC error is no result.
#[tokio::test]
async fn legacy_results_and_error_denials_carry_no_server_info() {
    let (stack, surface) = Stack::surface(|b| b.server_info("files", "1.4.0")).await;
    let files = json!({"name": "files", "version": "1.4.0"});
    // The identity is known: a modern denial result carries it ...
    let modern_call = stack
        .call_tool("delete_everything", json!({}), json!({}))
        .await;
    assert_eq!(
        result(&modern_call)["_meta"][SERVER_INFO_META],
        files,
        "{modern_call:?}"
    );
    // ... the same denial on a legacy request does not.
    let legacy_call = stack
        .legacy(
            "tools/call",
            json!({"name": "delete_everything", "arguments": {}}),
        )
        .await;
    let denied = result(&legacy_call);
    assert_eq!(denied["isError"], true, "{legacy_call:?}");
    assert_eq!(envelope(&denied)["remediation"], "undisclosed");
    assert!(
        denied["_meta"].get(SERVER_INFO_META).is_none(),
        "{legacy_call:?}"
    );
    assert!(
        !legacy_call.text.contains(SERVER_INFO_META),
        "{legacy_call:?}"
    );
    // A denied resources/read is a JSON-RPC error under the current revision: nothing to stamp.
    let read = stack
        .modern("resources/read", json!({"uri": SECRET}), SECRET, json!({}))
        .await;
    let message = answer(&read);
    assert!(message.get("result").is_none(), "{read:?}");
    assert_eq!(
        message["error"]["code"],
        mcp_gate::denial::DEFAULT_DENIAL_CODE,
        "{read:?}"
    );
    assert!(!read.text.contains(SERVER_INFO_META), "{read:?}");
    // The public resource is read through, as rmcp answers it.
    let public = stack
        .modern("resources/read", json!({"uri": PUBLIC}), PUBLIC, json!({}))
        .await;
    assert!(answer(&public).get("result").is_some(), "{public:?}");
    assert_eq!(surface.reached.log(), ["POST resources/read"]);
}

/// An inner MCP server written by hand: answers `server/discover` with `capabilities`, naming
/// itself only once `named` is set; counts the discovers it receives; answers anything else
/// with an empty tool result.
#[derive(Clone)]
struct Inner {
    capabilities: Value,
    discovers: Arc<AtomicUsize>,
    named: Arc<AtomicBool>,
}

impl Inner {
    fn new(capabilities: Value) -> Self {
        Self {
            capabilities,
            discovers: Arc::default(),
            named: Arc::default(),
        }
    }

    fn router(&self) -> Router {
        let inner = self.clone();
        Router::new().route(
            "/mcp",
            axum::routing::post(move |axum::Json(message): axum::Json<Value>| {
                let inner = inner.clone();
                async move {
                    let result = if message["method"] == "server/discover" {
                        inner.discovers.fetch_add(1, Ordering::SeqCst);
                        let mut result = json!({
                            "resultType": "complete", "supportedVersions": [MODERN],
                            "capabilities": inner.capabilities, "ttlMs": 0, "cacheScope": "private",
                        });
                        if inner.named.load(Ordering::SeqCst) {
                            result["_meta"] = json!({SERVER_INFO_META: {"name": "late-inner", "version": "0.9.0"}});
                        }
                        result
                    } else {
                        json!({"resultType": "complete", "content": []})
                    };
                    axum::Json(json!({"jsonrpc": "2.0", "id": message["id"], "result": result}))
                }
            }),
        )
    }
}

/// The identity is asked for at most once per 10 s per process while the inner server names
/// none (so that an anonymous server costs one extra request per 10 s, not one per denial), and
/// results carry no made-up name meanwhile. After 10 s it is asked again, and a name given then
/// is used.
#[tokio::test]
async fn an_anonymous_inner_server_is_asked_at_most_once_per_ten_seconds() {
    let inner = Inner::new(json!({"tools": {}}));
    let stack = Stack::start(inner.router(), |b| b).await;
    let deny = || {
        stack.modern(
            "tools/call",
            json!({"name": "delete_everything", "arguments": {}}),
            "delete_everything",
            json!({}),
        )
    };
    let started = Instant::now();
    // Several denials, one after another and then at once.
    for _ in 0..3 {
        let denied = result(&deny().await);
        assert_eq!(envelope(&denied)["remediation"], "undisclosed", "{denied}");
        assert!(
            denied["_meta"].get(SERVER_INFO_META).is_none(),
            "no name known: {denied}"
        );
    }
    let together = futures_util::future::join_all((0..5).map(|_| deny())).await;
    for reply in &together {
        assert!(result(reply)["_meta"].get(SERVER_INFO_META).is_none());
    }
    assert!(
        started.elapsed() < Duration::from_secs(9),
        "the denials must all fall inside one 10 s window for this count to mean anything"
    );
    assert_eq!(inner.discovers.load(Ordering::SeqCst), 1, "asked once");

    // The inner server names itself from now on; within the window nobody asks.
    inner.named.store(true, Ordering::SeqCst);
    let denied = result(&deny().await);
    assert!(denied["_meta"].get(SERVER_INFO_META).is_none(), "{denied}");
    assert_eq!(inner.discovers.load(Ordering::SeqCst), 1);
    // Once 10 s have passed since the first ask, the next denial asks again and uses the name.
    tokio::time::sleep(Duration::from_millis(10_300).saturating_sub(started.elapsed())).await;
    let denied = result(&deny().await);
    assert_eq!(inner.discovers.load(Ordering::SeqCst), 2);
    assert_eq!(
        denied["_meta"][SERVER_INFO_META],
        json!({"name": "late-inner", "version": "0.9.0"}),
        "{denied}"
    );
    // Known now: later denials ask nothing more.
    for _ in 0..3 {
        let denied = result(&deny().await);
        assert_eq!(denied["_meta"][SERVER_INFO_META]["name"], "late-inner");
    }
    assert_eq!(inner.discovers.load(Ordering::SeqCst), 2);
}

// ---------------------------------------------------------------------------------------------
// 5. A failed task says why
// ---------------------------------------------------------------------------------------------

/// Tasks extension: when a task fails, `tasks/get` SHOULD carry a `statusMessage` saying why.
/// The held `echo` call, approved, fails at rmcp itself (no `text`: rmcp's handler answers
/// `-32602`); the task is `failed` with that error, and its message is the status message.
#[tokio::test]
async fn a_task_that_fails_at_rmcp_says_why() {
    let (stack, surface) = Stack::surface(|b| b).await;
    let created = stack
        .call_tool("echo", json!({}), tasks_capabilities())
        .await;
    let task = result(&created);
    assert_eq!(task["resultType"], "task", "{created:?}");
    let id = task["taskId"].as_str().unwrap().to_owned();
    assert_eq!(surface.reached.count("POST tools/call"), 0, "held, not run");
    stack.server.gate.tasks().approve(&id, "ops").await.unwrap();

    let poll = || {
        stack.modern(
            "tasks/get",
            json!({"taskId": id}),
            &id,
            tasks_capabilities(),
        )
    };
    let first = poll().await;
    assert_eq!(first.status, 200, "{first:?}");
    let failed = result(&first);
    assert_eq!(failed["status"], "failed", "{failed}");
    assert_eq!(
        failed["error"]["code"], -32602,
        "rmcp's own error: {failed}"
    );
    assert_eq!(failed["error"]["message"], "echo needs a string `text`");
    assert_eq!(
        failed["statusMessage"], failed["error"]["message"],
        "{failed}"
    );
    assert!(failed.get("result").is_none(), "{failed}");
    assert_eq!(
        failed["_meta"][SERVER_INFO_META]["name"], "rmcp",
        "{failed}"
    );
    assert_eq!(
        surface.reached.count("POST tools/call"),
        1,
        "it ran, at rmcp"
    );
    // Polled again: the same answer, and the call is not run again.
    let again = poll().await;
    assert_eq!(result(&again), failed);
    assert_eq!(surface.reached.count("POST tools/call"), 1);
}

/// The same through the Python SDK client: it follows the task, the operator approves it, and
/// the SDK's last poll is the failed status with its `statusMessage`.
#[tokio::test]
async fn the_python_sdk_sees_why_its_task_failed() {
    let (stack, surface) = Stack::surface(|b| b).await;
    let token = stack.token();
    let gate = stack.server.gate.clone();
    let run = run_client_visiting(
        Sdk::Python,
        &stack.server.url,
        &[
            "--token",
            &token,
            "--no-list",
            "--tasks",
            "--wait-task",
            "--call",
            "echo={}",
        ],
        |id| {
            let gate = gate.clone();
            async move {
                gate.tasks().approve(&id, "ops").await.unwrap();
            }
        },
    )
    .await;
    let step = run
        .steps
        .iter()
        .find(|s| s["step"] == "call")
        .unwrap_or_else(|| panic!("no call step: {run:#?}"));
    assert_eq!(step["task_status"], "failed", "{run:#?}");
    assert_eq!(step["error"]["message"], "echo needs a string `text`");
    let last_poll = run
        .steps
        .iter()
        .filter_map(|s| s.get("poll"))
        .next_back()
        .unwrap_or_else(|| panic!("no poll: {run:#?}"));
    assert_eq!(last_poll["status"], "failed", "{last_poll}");
    assert_eq!(
        last_poll["statusMessage"], "echo needs a string `text`",
        "{last_poll}"
    );
    assert_eq!(surface.reached.count("POST tools/call"), 1);
}

// ---------------------------------------------------------------------------------------------
// 6. Challenges: structured parameters first, `error_description` last and plain
// ---------------------------------------------------------------------------------------------

/// The auth-params of a `Bearer` challenge, in order, quoted strings unescaped.
fn challenge_params(header: &str) -> Vec<(String, String)> {
    let rest = header
        .strip_prefix("Bearer ")
        .unwrap_or_else(|| panic!("not a Bearer challenge: {header}"));
    let mut chars = rest.chars().peekable();
    let mut params = Vec::new();
    loop {
        while chars.peek().is_some_and(|c| *c == ',' || *c == ' ') {
            chars.next();
        }
        if chars.peek().is_none() {
            return params;
        }
        let name: String = chars.by_ref().take_while(|c| *c != '=').collect();
        let mut value = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            loop {
                match chars.next() {
                    Some('\\') => value.push(chars.next().expect("an escaped character")),
                    Some('"') => break,
                    Some(c) => value.push(c),
                    None => panic!("unterminated quoted string in {header}"),
                }
            }
        } else {
            while let Some(c) = chars.next_if(|c| *c != ',') {
                value.push(c);
            }
        }
        params.push((name.trim().to_owned(), value));
    }
}

fn names(params: &[(String, String)]) -> Vec<&str> {
    params.iter().map(|(name, _)| name.as_str()).collect()
}

fn param<'a>(params: &'a [(String, String)], name: &str) -> &'a str {
    params
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
        .unwrap_or_else(|| panic!("no {name} in {params:?}"))
}

/// RFC 6750 §3: `error_description = *( %x20-21 / %x23-5B / %x5D-7E )`.
fn rfc6750_description_bytes(text: &str) -> bool {
    text.bytes()
        .all(|b| matches!(b, 0x20..=0x21 | 0x23..=0x5B | 0x5D..=0x7E))
}

/// RFC 6750 §3 (`error_description` holds only `%x20-21 / %x23-5B / %x5D-7E`), and the
/// structured parameters before any free text so that an unanchored reader (the TypeScript
/// SDK's `scope=` / `resource_metadata=` patterns) meets the real values first: a credential
/// denial whose message tries to smuggle `scope=` and `resource_metadata=` in.
#[tokio::test]
async fn a_credential_challenge_puts_a_plain_description_last() {
    let (stack, surface) = Stack::surface(|b| b).await;
    let modern_call = stack.call_tool("transfer", json!({}), json!({})).await;
    let legacy_call = stack
        .legacy("tools/call", json!({"name": "transfer", "arguments": {}}))
        .await;
    for reply in [&modern_call, &legacy_call] {
        assert_eq!(reply.status, 401, "{reply:?}");
        let header = reply.www_authenticate.as_deref().expect("a challenge");
        let params = challenge_params(header);
        assert_eq!(
            names(&params),
            [
                "error",
                "resource_metadata",
                "authorization_remediation",
                "error_description"
            ],
            "{header}"
        );
        assert_eq!(param(&params, "error"), "insufficient_authorization");
        assert_eq!(
            param(&params, "resource_metadata"),
            stack.server.gate.metadata_url()
        );
        let remedy: Value = serde_json::from_slice(
            &URL_SAFE_NO_PAD
                .decode(param(&params, "authorization_remediation"))
                .unwrap(),
        )
        .unwrap();
        assert_eq!(remedy["authorization_details"], json!([payment()]));

        let description = param(&params, "error_description");
        assert!(rfc6750_description_bytes(description), "{description:?}");
        assert!(
            !description.contains("scope=") && !description.contains("resource_metadata="),
            "{description:?}"
        );
        assert_eq!(
            description,
            "say 'hi' / scope:mcp:admin resource_metadata:https://evil caf?"
        );
        // Nothing in the quoted string needed escaping: the header bytes are the text itself.
        assert!(
            header.ends_with(&format!("error_description=\"{description}\"")),
            "{header}"
        );
        // What an unanchored reader finds: the real metadata URL, and no scope at all.
        assert_eq!(
            header
                .split("resource_metadata=\"")
                .nth(1)
                .and_then(|rest| rest.split('"').next()),
            Some(stack.server.gate.metadata_url())
        );
        assert!(!header.contains("scope="), "{header}");

        // The JSON body keeps the policy's message as written.
        assert_eq!(reply.body["error_description"], EVIL, "{reply:?}");
        assert_eq!(reply.body["error"], "insufficient_authorization");
    }
    assert!(
        surface.reached.log().is_empty(),
        "{:?}",
        surface.reached.log()
    );
}

/// The scope step-up challenge in the same order: `error`, `scope`, `resource_metadata`, then
/// `error_description` (RFC 6750 §3 parameters; RFC 9728 `resource_metadata`).
#[tokio::test]
async fn a_scope_challenge_puts_the_description_last() {
    let (stack, surface) = Stack::surface(|b| b).await;
    let modern_call = stack.call_tool("admin_report", json!({}), json!({})).await;
    let legacy_call = stack
        .legacy(
            "tools/call",
            json!({"name": "admin_report", "arguments": {}}),
        )
        .await;
    for reply in [&modern_call, &legacy_call] {
        assert_eq!(reply.status, 403, "{reply:?}");
        let header = reply.www_authenticate.as_deref().expect("a challenge");
        let params = challenge_params(header);
        assert_eq!(
            names(&params),
            ["error", "scope", "resource_metadata", "error_description"],
            "{header}"
        );
        assert_eq!(param(&params, "error"), "insufficient_scope");
        let mut scopes: Vec<&str> = param(&params, "scope").split(' ').collect();
        scopes.sort_unstable();
        assert_eq!(scopes, ["mcp:admin", "mcp:read"], "{header}");
        assert_eq!(
            param(&params, "resource_metadata"),
            stack.server.gate.metadata_url()
        );
        assert!(rfc6750_description_bytes(param(
            &params,
            "error_description"
        )));
    }
    assert!(
        surface.reached.log().is_empty(),
        "{:?}",
        surface.reached.log()
    );
}

/// The TypeScript SDK reads challenges with unanchored patterns (the first `scope=` and
/// `resource_metadata=` anywhere in the header). After the smuggling credential challenge it
/// fetches the real protected resource metadata, nothing at `evil`, and asks the authorization
/// server for no `mcp:admin` scope.
#[tokio::test]
async fn the_typescript_sdk_follows_the_real_metadata_after_the_smuggling_challenge() {
    let auth = AuthServer::start(&[]).await;
    let issuer = auth.issuer.clone();
    let surface = Surface::new();
    let server = GatedServer::start_with(
        move |_| {
            Gate::builder()
                .issuer(issuer.as_str())
                .required_scopes(["mcp:read"])
                .evaluate(|e: Evaluation| async move { Ok::<_, Infallible>(judge(&e)) })
        },
        surface.router(),
    )
    .await;
    let args = ["--no-list", "--call", "transfer={}"];
    let args = common::clients::read_scope_args(&auth, &args);
    let run = run_client(Sdk::TypeScript, &server.url, &args).await;
    let transfer = run.call("transfer");
    assert_eq!(transfer["ok"], false, "{run:#?}");
    assert_eq!(transfer["error"]["http_status"], 401, "{run:#?}");
    let challenged = run
        .http
        .iter()
        .position(|h| {
            h["www_authenticate"]
                .as_str()
                .is_some_and(|c| c.contains("insufficient_authorization"))
        })
        .unwrap_or_else(|| panic!("no credential challenge: {run:#?}"));
    let after = &run.http[challenged + 1..];
    assert!(
        run.http
            .iter()
            .all(|h| !h["url"].as_str().unwrap_or_default().contains("evil")),
        "the SDK read the URL smuggled into the description: {run:#?}"
    );
    let metadata: Vec<&str> = after
        .iter()
        .filter_map(|h| h["url"].as_str())
        .filter(|url| url.contains("oauth-protected-resource"))
        .collect();
    assert!(
        !metadata.is_empty(),
        "the SDK fetched the metadata again after the challenge: {run:#?}"
    );
    assert!(
        metadata
            .iter()
            .all(|url| *url == server.gate.metadata_url()),
        "{metadata:?}"
    );
    let token_requests: Vec<&Value> = after
        .iter()
        .filter(|h| h["url"] == auth.token_endpoint.as_str())
        .collect();
    assert!(
        !token_requests.is_empty(),
        "the SDK asked for a new token after the challenge: {run:#?}"
    );
    for token_request in token_requests {
        assert!(
            !token_request["form"]["scope"]
                .as_str()
                .unwrap_or_default()
                .contains("mcp:admin"),
            "{token_request}"
        );
    }
    assert_eq!(surface.reached.count("POST tools/call"), 0);
}
