//! Default deny, proved over every method the MCP sources define and over generated ones.
//!
//! The methods are read by programs, not typed here: rmcp 3.11's server-side request type
//! (`rmcp::model::ClientRequest`, through its JSON Schema: each variant's `method` is a
//! constant) and the request maps of the official Python SDK's types (`mcp_types.methods`,
//! mcp 2.3.0 in `tests/peers/.venv`, every protocol version up to 2026-07-28). Each method is
//! sent through the layer in front of the example rmcp server, in both eras, with a recorder
//! between the layer and the server. What the recorder may see is written in terms of the
//! layer's own table (`mcp_gate::mcp::method_class`): lifecycle and listings reach the server;
//! nothing else does unless `evaluate` was asked about it first.

use crate::common::tokens;

use crate::common::tools;

use std::collections::BTreeSet;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Body;
use http::{Request, StatusCode};
use http_body_util::BodyExt;
use mcp_gate::mcp::{MethodClass, method_class};
use mcp_gate::policy::{Decision, Evaluation, Phase, allowlist};
use mcp_gate::{Gate, GateBuilder, Issuer, StaticKeys};
use proptest::prelude::*;
use serde_json::{Value, json};
use tokens::{TestKey, claims};
use tower::ServiceExt;

const ISSUER: &str = "https://as.example";
const RESOURCE: &str = "http://127.0.0.1:8080/mcp";

/// What happened, in order: `evaluate <method> <phase>` and `inner <method>`.
type Log = Arc<Mutex<Vec<String>>>;

/// The example rmcp server, with every POSTed JSON-RPC method written to `log` before the
/// server sees it.
fn recorded_server(log: Log) -> Router {
    let server = tools::mcp_service();
    Router::new().nest_service(
        "/mcp",
        tower::service_fn(move |request: Request<Body>| {
            let log = log.clone();
            let server = server.clone();
            async move {
                let (parts, body) = request.into_parts();
                let bytes = body
                    .collect()
                    .await
                    .map(|b| b.to_bytes())
                    .unwrap_or_default();
                let method = serde_json::from_slice::<Value>(&bytes)
                    .ok()
                    .and_then(|m| m["method"].as_str().map(str::to_owned))
                    .unwrap_or_else(|| format!("<{} without a method>", parts.method));
                log.lock().unwrap().push(format!("inner {method}"));
                let response = server
                    .oneshot(Request::from_parts(parts, Body::from(bytes)))
                    .await?;
                Ok::<_, Infallible>(response.map(Body::new))
            }
        }),
    )
}

/// A gate for `RESOURCE` trusting `key`, configured further by `configure`.
fn gate(key: &TestKey, configure: impl FnOnce(GateBuilder) -> GateBuilder) -> Gate {
    let keys = StaticKeys::from_jwks_json(&key.jwks_json()).expect("keys");
    configure(
        Gate::builder()
            .resource(RESOURCE)
            .issuer(Issuer::with_keys(ISSUER, keys)),
    )
    .build()
    .expect("gate builds")
}

/// A policy that writes each evaluation to `log`, then answers `decision`.
fn recording(
    log: Log,
    decision: fn() -> Decision,
) -> impl Fn(Evaluation) -> std::future::Ready<Result<Decision, Infallible>> + Send + Sync + 'static
{
    move |evaluation: Evaluation| {
        let phase = match evaluation.phase() {
            Phase::Discovery => "discovery",
            _ => "invocation",
        };
        log.lock()
            .unwrap()
            .push(format!("evaluate {} {phase}", evaluation.method()));
        std::future::ready(Ok(decision()))
    }
}

struct Gated {
    app: Router,
    log: Log,
    token: String,
}

impl Gated {
    fn new(configure: impl FnOnce(GateBuilder, Log) -> GateBuilder) -> Self {
        let key = TestKey::es256("k1");
        let log: Log = Arc::default();
        let gate = gate(&key, |builder| configure(builder, log.clone()));
        let app = recorded_server(log.clone()).layer(gate.layer());
        let token = key.mint(&claims(ISSUER, RESOURCE, "mcp:read"));
        Self { app, log, token }
    }

    async fn send(&self, body: &Value, headers: &[(&str, String)]) -> (StatusCode, Value) {
        let mut request = Request::post("/mcp")
            .header("authorization", format!("Bearer {}", self.token))
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream");
        for (name, value) in headers {
            // A generated method that cannot travel as header text is sent without the header
            // (and refused for it).
            if let Ok(value) = http::HeaderValue::from_str(value) {
                request = request.header(*name, value);
            }
        }
        let request = request.body(Body::from(body.to_string())).unwrap();
        let response = self.app.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    }

    fn take_log(&self) -> Vec<String> {
        std::mem::take(&mut *self.log.lock().unwrap())
    }
}

// ---------------------------------------------------------------------------------------------
// The methods, as the sources define them
// ---------------------------------------------------------------------------------------------

/// Every request method of rmcp 3.11's `ClientRequest`, read from its JSON Schema.
fn rmcp_methods() -> BTreeSet<String> {
    let schema = serde_json::to_value(schemars::schema_for!(rmcp::model::ClientRequest))
        .expect("schema as JSON");
    let resolve = |value: &Value| -> Value {
        match value.get("$ref").and_then(Value::as_str) {
            Some(reference) => {
                let name = reference.rsplit('/').next().unwrap_or_default();
                schema["$defs"][name].clone()
            }
            None => value.clone(),
        }
    };
    let variants = schema
        .get("anyOf")
        .or_else(|| schema.get("oneOf"))
        .and_then(Value::as_array)
        .expect("ClientRequest is a union");
    let mut methods = BTreeSet::new();
    for variant in variants {
        let variant = resolve(variant);
        let method = resolve(&variant["properties"]["method"]);
        // `CustomRequest` has a free-form method: it is what "unknown" means.
        if let Some(name) = method.get("const").and_then(Value::as_str) {
            methods.insert(name.to_owned());
        }
    }
    assert!(
        methods.len() >= 20,
        "rmcp's ClientRequest schema gave too few methods: {methods:?}"
    );
    methods
}

/// Every client request method of the Python SDK's types, with the protocol versions that
/// define it.
fn python_methods() -> Vec<(String, String)> {
    let python = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/peers/.venv/bin/python");
    let output = std::process::Command::new(python)
        .args([
            "-c",
            "import json, importlib.metadata as m\n\
             from mcp_types.methods import CLIENT_REQUESTS\n\
             assert m.version('mcp') == '2.3.0', m.version('mcp')\n\
             print(json.dumps(sorted(CLIENT_REQUESTS.keys())))",
        ])
        .output()
        .unwrap_or_else(|e| panic!("{python}: {e}; run scripts/setup-peers.sh first"));
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let pairs: Vec<(String, String)> = serde_json::from_slice(&output.stdout).expect("JSON");
    assert!(
        pairs.iter().any(|(_, version)| version == "2026-07-28"),
        "the Python SDK has no 2026-07-28 methods: {pairs:?}"
    );
    pairs
}

/// Params that classify for `method`, and the value `Mcp-Name` mirrors (when it has one).
fn params_for(method: &str) -> (Value, Option<&'static str>) {
    match method {
        "tools/call" => (
            json!({"name": "echo", "arguments": {"text": "hi"}}),
            Some("echo"),
        ),
        "prompts/get" => (json!({"name": "greet"}), Some("greet")),
        "resources/read" | "resources/subscribe" | "resources/unsubscribe" => {
            (json!({"uri": "demo://secret"}), Some("demo://secret"))
        }
        "resources/directory/read" | "skills/get" => (json!({"uri": "demo://secret"}), None),
        "completion/complete" => (
            json!({"ref": {"type": "ref/prompt", "name": "greet"}, "argument": {"name": "a", "value": "v"}}),
            None,
        ),
        "tasks/get" | "tasks/update" | "tasks/cancel" | "tasks/result" => {
            (json!({"taskId": "t-1"}), Some("t-1"))
        }
        "subscriptions/listen" => (
            json!({"notifications": {"resourceSubscriptions": ["demo://secret"]}}),
            None,
        ),
        "logging/setLevel" => (json!({"level": "debug"}), None),
        "initialize" => (
            json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}),
            None,
        ),
        _ => (json!({}), None),
    }
}

/// `method` as a legacy request, or as a 2026-07-28 one with its `_meta` and mirrored headers.
fn request(method: &str, modern: bool) -> (Value, Vec<(&'static str, String)>) {
    let (mut params, name) = params_for(method);
    let mut headers = Vec::new();
    if modern {
        params["_meta"] = json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
        });
        headers.push(("mcp-protocol-version", "2026-07-28".to_owned()));
        headers.push(("mcp-method", method.to_owned()));
        if let Some(name) = name {
            headers.push(("mcp-name", name.to_owned()));
        }
    }
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params});
    (body, headers)
}

/// Whether the server may see `method` without `evaluate` having been asked about it first.
fn passes_without_policy(method: &str) -> bool {
    matches!(
        method_class(method),
        MethodClass::Lifecycle | MethodClass::Listing(_)
    )
}

#[tokio::test]
async fn no_method_of_rmcp_or_the_schema_reaches_the_server_unseen() {
    let rmcp = rmcp_methods();
    let python = python_methods();
    let mut methods: BTreeSet<String> = rmcp.clone();
    methods.extend(python.iter().map(|(method, _)| method.clone()));
    let modern: BTreeSet<&str> = python
        .iter()
        .filter(|(_, version)| version == "2026-07-28")
        .map(|(method, _)| method.as_str())
        .collect();

    // A policy that refuses everything: only lifecycle and listings may reach the server.
    let denying =
        Gated::new(|builder, log| builder.evaluate(recording(log, || Decision::undisclosed("no"))));
    // A policy that allows everything: whatever reaches the server was evaluated first.
    let allowing = Gated::new(|builder, log| builder.evaluate(recording(log, Decision::allow)));
    let mut counts = std::collections::BTreeMap::<&str, usize>::new();
    for method in &methods {
        let class = match method_class(method) {
            MethodClass::Lifecycle => "lifecycle",
            MethodClass::Listing(_) => "listing",
            MethodClass::Tasks => "tasks",
            MethodClass::Guarded => "guarded",
            _ => "unknown",
        };
        *counts.entry(class).or_default() += 1;
        for era_is_modern in [false, true] {
            let (body, headers) = request(method, era_is_modern);
            let era = if era_is_modern { "modern" } else { "legacy" };

            let (status, answer) = denying.send(&body, &headers).await;
            let log = denying.take_log();
            let reached = log.iter().any(|line| line == &format!("inner {method}"));
            if passes_without_policy(method) {
                // Listings reach the server; their entries are shown to `evaluate` after.
                if reached && matches!(method_class(method), MethodClass::Listing(_)) {
                    let entries = answer["result"]
                        .as_object()
                        .and_then(|r| r.values().find_map(Value::as_array));
                    assert!(
                        entries.is_none_or(Vec::is_empty),
                        "{era} {method}: a refusing policy must leave no entry: {answer}"
                    );
                }
            } else {
                assert!(
                    !reached,
                    "{era} {method} reached the server under a refusing policy ({status}): {log:?}"
                );
            }

            let (status, _) = allowing.send(&body, &headers).await;
            let log = allowing.take_log();
            if passes_without_policy(method) {
                continue;
            }
            if let Some(at) = log
                .iter()
                .position(|line| line == &format!("inner {method}"))
            {
                let asked = log[..at]
                    .iter()
                    .any(|line| line == &format!("evaluate {method} invocation"));
                assert!(
                    asked,
                    "{era} {method} reached the server ({status}) without evaluate first: {log:?}"
                );
            }
        }
    }
    // Every 2026-07-28 method is in the table: none of them is left to the unknown path.
    for method in &modern {
        assert_ne!(
            method_class(method),
            MethodClass::Unknown,
            "{method} (2026-07-28) is not in the method table"
        );
    }
    for method in &rmcp {
        assert_ne!(
            method_class(method),
            MethodClass::Unknown,
            "{method} (rmcp 3.11) is not in the method table"
        );
    }
    eprintln!(
        "methods: {} (rmcp {}, Python SDK {}), by class: {counts:?}",
        methods.len(),
        rmcp.len(),
        python
            .iter()
            .map(|(m, _)| m.as_str())
            .collect::<BTreeSet<_>>()
            .len()
    );
}

// ---------------------------------------------------------------------------------------------
// Generated method names
// ---------------------------------------------------------------------------------------------

/// Method names in no row of the table: random text, and near misses of real methods.
fn unknown_method() -> impl Strategy<Value = String> {
    prop_oneof![
        "[ -~]{0,40}",
        "[a-z]{1,12}/[a-zA-Z/_]{1,20}",
        prop::sample::select(
            mcp_gate::mcp::METHODS
                .iter()
                .map(|r| r.method)
                .collect::<Vec<_>>()
        )
        .prop_flat_map(|known| {
            prop_oneof![
                Just(format!("{known}/")),
                Just(format!("{known} ")),
                Just(format!(" {known}")),
                Just(known.to_uppercase()),
                Just(format!("{known}\u{0}")),
                "[a-z]{1,6}".prop_map(move |tail| format!("{known}/{tail}")),
                Just(format!("notifications/{known}")),
            ]
        }),
    ]
    .prop_filter("a name the table has", |name| {
        method_class(name) == MethodClass::Unknown
    })
}

fn runtime() -> tokio::runtime::Runtime {
    crate::common::fixtures::runtime()
}

const GENERATED: u32 = 10_000;

proptest! {
    #![proptest_config(ProptestConfig { cases: GENERATED, failure_persistence: None, ..ProptestConfig::default() })]

    /// By default, no unknown method reaches the server or the policy, and each is answered
    /// with the same `-32601`.
    #[test]
    fn unknown_methods_are_refused_by_default(method in unknown_method(), modern in any::<bool>()) {
        thread_local! {
            static RIG: (tokio::runtime::Runtime, Gated) = (runtime(), Gated::new(|builder, log| {
                // Allow everything it is asked about: the refusal must come from the layer.
                builder.evaluate(recording(log, Decision::allow))
            }));
        }
        RIG.with(|(runtime, gated)| {
            let (body, headers) = request(&method, modern);
            let (status, answer) = runtime.block_on(gated.send(&body, &headers));
            let log = gated.take_log();
            prop_assert!(log.is_empty(), "{method:?}: {log:?}");
            // A modern request whose Mcp-Method header cannot carry the name is refused as a
            // header mismatch first; every other one gets the fixed -32601.
            if answer["error"]["code"] != json!(-32020) {
                prop_assert_eq!(&answer["error"]["code"], &json!(-32601), "{:?}: {}", method, answer);
                prop_assert_eq!(&answer["error"]["message"], &json!("Method not found"));
                prop_assert_eq!(&answer["id"], &json!(7));
                let expected = if modern { StatusCode::NOT_FOUND } else { StatusCode::OK };
                prop_assert_eq!(status, expected);
            }
            Ok(())
        })?;
    }

    /// With the opt-in, every unknown method goes to `evaluate` before the server sees it,
    /// with its method and params in `Target::Other`.
    #[test]
    fn opted_in_unknown_methods_are_evaluated_first(method in unknown_method()) {
        thread_local! {
            static RIG: (tokio::runtime::Runtime, Gated) = (runtime(), Gated::new(|builder, log| {
                builder.evaluate_unknown_methods().evaluate(move |evaluation: Evaluation| {
                    let other = matches!(
                        evaluation.target(),
                        mcp_gate::mcp::Target::Other { method, params }
                            if method == evaluation.method() && params.is_empty()
                    );
                    log.lock().unwrap().push(format!("evaluate {} other={other}", evaluation.method()));
                    std::future::ready(Ok::<_, Infallible>(Decision::allow()))
                })
            }));
        }
        RIG.with(|(runtime, gated)| {
            let (body, headers) = request(&method, false);
            runtime.block_on(gated.send(&body, &headers));
            let log = gated.take_log();
            prop_assert_eq!(log.first(), Some(&format!("evaluate {method} other=true")), "{:?}", log);
            prop_assert_eq!(log.get(1), Some(&format!("inner {method}")), "{:?}", log);
            Ok(())
        })?;
    }

    /// With the opt-in and the `allowlist` preset (which names tools only), no unknown method
    /// reaches the server.
    #[test]
    fn the_allowlist_preset_names_what_it_allows(method in unknown_method()) {
        thread_local! {
            static RIG: (tokio::runtime::Runtime, Gated) = (runtime(), Gated::new(|builder, _| {
                builder.evaluate_unknown_methods().evaluate(allowlist(["echo", "whoami"]))
            }));
        }
        RIG.with(|(runtime, gated)| {
            let (body, headers) = request(&method, false);
            runtime.block_on(gated.send(&body, &headers));
            let log = gated.take_log();
            prop_assert!(log.is_empty(), "{method:?} reached the server: {log:?}");
            Ok(())
        })?;
    }
}
