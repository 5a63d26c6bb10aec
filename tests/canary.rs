//! Nothing a request carries is logged, at any level.
//!
//! One unique value, the canary, goes into every argument, header and token of every kind of
//! request the method table knows (lifecycle, listing, guarded, tasks, notifications, unknown
//! methods), and down every denial path: each remediation kind, conceal mode, authentication
//! failures, Cedar schema misfits, malformed bodies, refused HTTP methods and origins. A tracing
//! subscriber at TRACE captures every line the process writes (every target, fields and span
//! events included, and the `log` crate's records through `tracing-log`). No line from the
//! crate's own targets (`mcp_gate::*`) may contain the canary.
//!
//! The inner rmcp server runs in this process and legitimately receives the canary; lines from
//! other crates that carry it are printed (with their target) and listed in the final report
//! of the test, but only the crate's own targets are asserted on.
//!
//! ```text
//! cargo test --features introspection,redis,cedar --test canary
//! ```

#![cfg(feature = "cedar")]

mod common;

use std::convert::Infallible;
use std::io::Write;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use common::peers::GatedServer;
use common::tokens::{TestKey, claims};
use mcp_gate::policy::cedar::{CedarPolicy, GATE_SCHEMA_STUB};
use mcp_gate::policy::{Decision, Evaluation, Policy};
use mcp_gate::tasks::MemoryTaskStore;
use mcp_gate::{Issuer, StaticKeys};
use serde_json::{Value, json};
use tracing_subscriber::fmt::format::FmtSpan;

const ISSUER: &str = "https://as.example";

/// Every line the process logged, as text.
fn captured() -> &'static Mutex<Vec<u8>> {
    static LINES: OnceLock<Mutex<Vec<u8>>> = OnceLock::new();
    LINES.get_or_init(Mutex::default)
}

/// A writer into [`captured`].
struct Capture;

impl Write for Capture {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        captured()
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Installs the capturing subscriber for the whole process: TRACE, every target, span events,
/// one JSON object a line, each with its event's target and the fields of every span it is in
/// (so that a line of another crate's, inside one of the gate's spans, still shows the gate's
/// span fields apart from its own).
fn capture_everything() {
    tracing_subscriber::fmt()
        .json()
        .with_current_span(true)
        .with_span_list(true)
        .with_max_level(tracing::Level::TRACE)
        .with_span_events(FmtSpan::FULL)
        .with_ansi(false)
        .with_target(true)
        .with_writer(|| Capture)
        .try_init()
        .expect("the only subscriber of this test binary");
}

/// Whether a target or a span name is the crate's own.
fn is_ours(name: &str) -> bool {
    name == "mcp_gate" || name.starts_with("mcp_gate::")
}

/// A value no test writes by accident: the canary.
fn canary() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_nanos();
    format!("cnry{nanos:x}q")
}

/// The remedies policy: the tool's name chooses the decision, so that one sweep walks every
/// remediation kind. `echo` is allowed.
fn remedies(evaluation: &Evaluation) -> Decision {
    match evaluation.tool().unwrap_or("echo") {
        "scopes" => Decision::scopes(["mcp:admin"]),
        "credential" => Decision::credential([json!({"type": "payment", "limit": 1})]),
        "url" => Decision::url("https://approve.example/here", "Approve it first."),
        "task" => Decision::task("Someone approves this."),
        "ask" => Decision::ask("Are you sure?"),
        "unavailable" => Decision::unavailable("Not now."),
        "undisclosed" => Decision::undisclosed("No."),
        _ => Decision::allow(),
    }
}

fn remedies_policy() -> impl Policy {
    |e: Evaluation| async move { Ok::<_, Infallible>(remedies(&e)) }
}

/// The gate's stub schema (every guarded method), plus one tool action, `echo`, that takes a
/// string `text` and a `Long` `count`.
fn cedar_schema() -> String {
    let stub = GATE_SCHEMA_STUB.trim_end();
    let open = stub.strip_suffix('}').expect("the stub ends its namespace");
    format!(
        "{open}\n    action \"echo\" appliesTo {{\n        principal: [User], resource: [McpServer],\n        \
         context: {{ input: {{ text?: String, count?: Long }}, gate: GateContext, app: AppContext }}\n    }};\n}}\n"
    )
}

/// Permits everything but a count over 3; the annotated forbid asks for a scope.
const CEDAR_POLICIES: &str = r#"
    permit(principal, action, resource);
    @remediation("scopes") @scopes("mcp:admin")
    forbid(principal, action == Gate::Action::"echo", resource)
    when { context.input has count && context.input.count > 3 };
"#;

/// The three gates of the sweep, in front of the example rmcp server.
async fn gates(key: &TestKey) -> Vec<(&'static str, GatedServer)> {
    let keys = || StaticKeys::from_jwks_json(&key.jwks_json()).unwrap();
    let inner = || Router::new().nest_service("/mcp", common::tools::mcp_service());
    let base = |keys: StaticKeys| {
        mcp_gate::Gate::builder()
            .issuer(Issuer::with_keys(ISSUER, keys))
            .task_store(MemoryTaskStore::new(64))
    };
    let remedies_gate = {
        let keys = keys();
        GatedServer::start_with(move |_| base(keys).evaluate(remedies_policy()), inner()).await
    };
    let concealing = {
        let keys = keys();
        GatedServer::start_with(
            move |_| {
                base(keys)
                    .evaluate(remedies_policy())
                    .conceal_refusals()
                    .evaluate_unknown_methods()
            },
            inner(),
        )
        .await
    };
    let cedar = {
        let keys = keys();
        let policy = CedarPolicy::builder()
            .schema_text("canary.cedarschema", cedar_schema())
            .policies_text("canary.cedar", CEDAR_POLICIES)
            .build()
            .expect("the canary's Cedar set");
        GatedServer::start_with(move |_| base(keys).evaluate(policy), inner()).await
    };
    vec![
        ("remedies", remedies_gate),
        ("conceal", concealing),
        ("cedar", cedar),
    ]
}

/// Every kind of message body, each carrying `c` wherever it can.
fn bodies(c: &str) -> Vec<String> {
    let arguments =
        json!({"text": c, "password": c, "nested": {"deep": [c, {"k": c}]}, "count": c});
    let meta = json!({"note": c, "io.modelcontextprotocol/protocolVersion": "2026-07-28"});
    let request = |method: &str, params: Value| {
        json!({"jsonrpc": "2.0", "id": c, "method": method, "params": params}).to_string()
    };
    let mut bodies = vec![
        // Lifecycle.
        request(
            "initialize",
            json!({"protocolVersion": c, "capabilities": {"x": c}, "clientInfo": {"name": c, "version": c}}),
        ),
        request("ping", json!({"_meta": {"note": c}})),
        request("server/discover", json!({"_meta": meta})),
        // Listings.
        request("tools/list", json!({"cursor": c})),
        request("prompts/list", json!({"cursor": c})),
        request("resources/list", json!({"cursor": c})),
        request("resources/templates/list", json!({"cursor": c})),
        // Guarded.
        request("resources/read", json!({"uri": format!("demo://{c}")})),
        request("resources/subscribe", json!({"uri": format!("demo://{c}")})),
        request("prompts/get", json!({"name": c, "arguments": {"a": c}})),
        request(
            "completion/complete",
            json!({"ref": {"type": "ref/prompt", "name": c}, "argument": {"name": c, "value": c}}),
        ),
        request("tools/call", json!({"name": c, "arguments": arguments})),
        // Cedar misfits: an integer that is not one, nulls, values of the wrong type.
        request(
            "tools/call",
            json!({"name": "echo", "arguments": {"text": c, "count": 1.5}}),
        ),
        request(
            "tools/call",
            json!({"name": "echo", "arguments": {"text": null, "password": c}}),
        ),
        request(
            "tools/call",
            json!({"name": "echo", "arguments": {"text": {"inner": c}}}),
        ),
        request(
            "tools/call",
            json!({"name": "echo", "arguments": {"text": c, "count": 4}}),
        ),
        // Tasks.
        request("tasks/get", json!({"taskId": c})),
        request("tasks/result", json!({"taskId": c})),
        request("tasks/cancel", json!({"taskId": c})),
        request("tasks/list", json!({"cursor": c})),
        // Unknown methods and notifications.
        request(c, json!({"x": c})),
        request(&format!("tools/{c}"), json!({"x": c})),
        json!({"jsonrpc": "2.0", "method": format!("notifications/{c}"), "params": {"x": c}})
            .to_string(),
        json!({"jsonrpc": "2.0", "method": c}).to_string(),
        // Responses the client sends.
        json!({"jsonrpc": "2.0", "id": c, "result": {"x": c}}).to_string(),
        // Malformed bodies.
        format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"{c}""#),
        format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{c}","method":"x"}}"#),
        format!(r#"[{{"jsonrpc":"2.0","id":1,"method":"{c}"}}]"#),
        format!(r#""{c}""#),
        format!(r#"{{"jsonrpc":"{c}","id":1,"method":"ping"}}"#),
        format!(r#"{{"jsonrpc":"2.0","id":{{"{c}":1}},"method":"ping"}}"#),
        format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":"{c}"}}"#),
        format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"echo","arguments":["{c}"]}}}}"#
        ),
        format!(r#"{{"jsonrpc":"2.0","id":1,"method":"ping","params":{{"_meta":"{c}"}}}}"#),
        format!(r#"{{"jsonrpc":"2.0","id":1,"method":"ping"}} {c}"#),
        format!(r#"{{"jsonrpc":"2.0","id":1,"method":"ping","params":{{"{c}":1e400}}}}"#),
    ];
    // Each remediation kind, and an allowed call.
    for tool in [
        "echo",
        "scopes",
        "credential",
        "url",
        "task",
        "ask",
        "unavailable",
        "undisclosed",
    ] {
        bodies.push(request(
            "tools/call",
            json!({"name": tool, "arguments": arguments, "_meta": {"note": c}}),
        ));
        // The same, on the 2026-07-28 era (its `_meta` and headers).
        bodies.push(request(
            "tools/call",
            json!({"name": tool, "arguments": arguments, "_meta": meta}),
        ));
    }
    bodies
}

/// A raw request to `url`; the answer is read and dropped.
async fn send(
    client: &reqwest::Client,
    method: reqwest::Method,
    url: &str,
    headers: &[(String, String)],
    body: Option<String>,
) {
    let mut request = client
        .request(method, url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream");
    for (name, value) in headers {
        request = request.header(name.as_str(), value.as_str());
    }
    if let Some(body) = body {
        request = request.body(body);
    }
    if let Ok(response) = request.send().await {
        let _ = response.bytes().await;
    }
}

/// Header sets, each carrying `c`: custom headers only, and every `Mcp-*` header, a session
/// id and an `Origin` besides.
fn header_sets(c: &str, authorization: &str) -> Vec<Vec<(String, String)>> {
    let pair = |name: &str, value: String| (name.to_owned(), value);
    let auth = pair("authorization", authorization.to_owned());
    vec![
        vec![
            auth.clone(),
            pair("x-custom", c.to_owned()),
            pair("user-agent", c.to_owned()),
        ],
        vec![
            auth.clone(),
            pair("x-custom", c.to_owned()),
            pair("mcp-session-id", c.to_owned()),
            pair("mcp-protocol-version", c.to_owned()),
        ],
        vec![
            auth.clone(),
            pair("mcp-protocol-version", "2026-07-28".to_owned()),
            pair("mcp-method", c.to_owned()),
            pair("mcp-name", c.to_owned()),
            pair("last-event-id", c.to_owned()),
        ],
        vec![auth, pair("origin", format!("https://{c}.example"))],
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_log_line_carries_what_a_request_carried() {
    capture_everything();
    let c = canary();
    let key = TestKey::es256("k1");
    let gates = gates(&key).await;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .expect("client");
    for (_, gate) in &gates {
        let mut token_claims = claims(ISSUER, &gate.url, "mcp:read");
        token_claims["jti"] = json!(c);
        token_claims["note"] = json!(c);
        let valid = format!("Bearer {}", key.mint(&token_claims));
        let forged = {
            let mint = key.mint(&token_claims);
            let (signed, _) = mint.rsplit_once('.').expect("a JWT");
            format!("Bearer {signed}.{c}")
        };
        // Authentication failures: a malformed bearer, a forged signature, a token of another
        // scheme, a token for another audience, an expired token.
        let mut other_audience = token_claims.clone();
        other_audience["aud"] = json!(format!("https://{c}.example"));
        let mut expired = token_claims.clone();
        expired["exp"] = json!(1);
        let refused_tokens = [
            format!("Bearer {c}"),
            format!("Bearer {c} {c}"),
            forged,
            format!("Basic {c}"),
            format!("Bearer {}", key.mint(&other_audience)),
            format!("Bearer {}", key.mint(&expired)),
        ];
        let ping = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
        for token in &refused_tokens {
            for headers in header_sets(&c, token) {
                let body = Some(ping.to_owned());
                send(&client, reqwest::Method::POST, &gate.url, &headers, body).await;
            }
        }
        // Every body, with every header set and a valid token.
        for headers in header_sets(&c, &valid) {
            for body in bodies(&c) {
                send(
                    &client,
                    reqwest::Method::POST,
                    &gate.url,
                    &headers,
                    Some(body),
                )
                .await;
            }
            for method in [reqwest::Method::GET, reqwest::Method::DELETE] {
                send(&client, method, &gate.url, &headers, None).await;
            }
            let odd = reqwest::Method::from_bytes(c.to_uppercase().as_bytes()).expect("a token");
            send(&client, odd, &gate.url, &headers, Some(c.clone())).await;
            send(
                &client,
                reqwest::Method::PUT,
                &gate.url,
                &headers,
                Some(c.clone()),
            )
            .await;
        }
    }
    // Let background work (task records, the last answers) finish logging.
    tokio::time::sleep(Duration::from_millis(200)).await;

    let text = String::from_utf8_lossy(&captured().lock().unwrap()).into_owned();
    let lines: Vec<(&str, Value)> = text
        .lines()
        .map(|line| (line, serde_json::from_str(line).expect("a JSON log line")))
        .collect();
    let ours_target = |line: &Value| line["target"].as_str().is_some_and(is_ours);
    let ours: Vec<&str> = lines
        .iter()
        .filter(|(_, line)| ours_target(line))
        .map(|(text, _)| *text)
        .collect();
    // The capture works, and the sweep went down the paths it names.
    for expected in [
        "mcp_gate::decision",
        "mcp_gate::auth",
        "mcp_gate::request",
        "mcp_gate::cedar",
    ] {
        assert!(
            lines.iter().any(|(_, line)| line["target"] == expected),
            "no {expected} line was captured: the sweep did not reach it"
        );
    }
    // A line leaks when it is the crate's own and carries the canary anywhere, or when any
    // line (another crate's too) is inside a span of the crate's whose fields carry it.
    let carries = |value: &Value| value.to_string().to_lowercase().contains(&c);
    let leaked: Vec<&str> = lines
        .iter()
        .filter(|(_, line)| {
            (ours_target(line) && carries(line))
                || line["spans"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .chain(std::iter::once(&line["span"]))
                    .filter(|span| span["name"].as_str().is_some_and(is_ours))
                    .any(carries)
        })
        .map(|(text, _)| *text)
        .collect();
    let others: std::collections::BTreeSet<&str> = lines
        .iter()
        .filter(|(_, line)| !ours_target(line) && carries(&line["fields"]))
        .filter_map(|(_, line)| line["target"].as_str())
        .collect();
    eprintln!(
        "{} lines captured, {} from mcp_gate; other targets that logged the canary: {others:?}",
        text.lines().count(),
        ours.len()
    );
    assert!(
        leaked.is_empty(),
        "{} mcp_gate lines carry the canary:\n{}",
        leaked.len(),
        leaked.join("\n")
    );
}
