//! Golden fixtures of the rate-limit answer (`spec/limits.md`): for every pinned revision, a
//! legacy and a modern request, a tool call and a resource read, each the second call of one
//! principal under a limit of one a day. One file per case in `spec/<revision>/limits/`, the
//! answer compared byte for byte; `MCP_GATE_BLESS=1` writes them.

use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::response::IntoResponse;
use axum::routing::post;
use mcp_gate::limit::{Limit, RateLimit};
use mcp_gate::policy::{Decision, Evaluation};
use mcp_gate::{Gate, Issuer, StaticKeys};
use serde_json::{Value, json};

use crate::common::fixtures::through;
use crate::common::tokens::{TestKey, claims};

const ISSUER: &str = "https://as.example";
const RESOURCE: &str = "https://mcp.example.com/mcp";
const REVISIONS: [&str; 3] = [
    "c74b0c9321e89a904780d1024d895232fbb03820",
    "6bff817cb884f7065fd5b3d37c4973d1f8b3fa87",
    "1c5b0cec97691cb9db3d880474a71d604d6addee",
];
/// The headers a fixture pins.
const PINNED: [&str; 3] = ["content-type", "retry-after", "cache-control"];

/// A request's headers, as names and values.
type Headers = Vec<(&'static str, &'static str)>;

/// One case: its name, and the request's body and headers (the token is `<token>`).
fn cases() -> Vec<(String, Value, Headers)> {
    let modern_meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    });
    let mut cases = Vec::new();
    for (era, modern) in [("legacy", false), ("modern", true)] {
        for (method, params, name) in [
            (
                "tools/call",
                json!({"name": "echo", "arguments": {"text": "hi"}}),
                "echo",
            ),
            (
                "resources/read",
                json!({"uri": "demo://public"}),
                "demo://public",
            ),
        ] {
            let mut params = params;
            let mut headers = vec![
                ("accept", "application/json, text/event-stream"),
                ("content-type", "application/json"),
            ];
            if modern {
                params["_meta"] = modern_meta.clone();
                headers.push(("mcp-protocol-version", "2026-07-28"));
                headers.push(("mcp-method", method));
                headers.push(("mcp-name", name));
            } else {
                headers.push(("mcp-protocol-version", "2025-11-25"));
            }
            let body = json!({"jsonrpc": "2.0", "id": 5, "method": method, "params": params});
            let case = format!("limited--{era}--{}", method.replace('/', "-"));
            cases.push((case, body, headers));
        }
    }
    cases
}

/// The inner handler: a result for every request, and a count of what reached it.
async fn inner(State(hits): State<Arc<AtomicUsize>>, body: String) -> axum::response::Response {
    hits.fetch_add(1, Ordering::SeqCst);
    let request: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    let result = json!({"content": [{"type": "text", "text": "ok"}], "contents": []});
    axum::response::Json(json!({"jsonrpc": "2.0", "id": request["id"], "result": result}))
        .into_response()
}

/// The answer to the second of two equal requests under a limit of one a day, and whether
/// the inner handler and the policy saw only the first.
async fn second_call(revision: &str, body: &Value, headers: &[(&str, &str)]) -> Value {
    let key = TestKey::es256("limits");
    let keys = StaticKeys::from_jwks_json(&key.jwks_json()).expect("a key set");
    let asked = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&asked);
    let gate = Gate::builder()
        .resource(RESOURCE)
        .issuer(Issuer::with_keys(ISSUER, keys))
        .revision(revision)
        .server_info("files", "1.4.0")
        .evaluate(move |_: Evaluation| {
            counted.fetch_add(1, Ordering::SeqCst);
            async { Ok::<_, Infallible>(Decision::allow()) }
        })
        .rate_limit(Limit::per_principal(
            RateLimit::new(1, std::time::Duration::from_secs(86_400)).expect("a rate"),
        ))
        .build()
        .expect("a gate");
    let hits = Arc::new(AtomicUsize::new(0));
    let app = Router::new()
        .route("/mcp", post(inner))
        .with_state(Arc::clone(&hits))
        .layer(gate.layer());
    let token = key.mint(&claims(ISSUER, RESOURCE, ""));
    let mut answers = Vec::new();
    for _ in 0..2 {
        let mut request = http::Request::post("/mcp");
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let request = request
            .header("authorization", format!("Bearer {token}"))
            .body(Body::from(body.to_string()))
            .expect("a request");
        answers.push(through(&app, request).await);
    }
    assert_eq!(
        hits.load(Ordering::SeqCst),
        1,
        "only the first call reached the server"
    );
    assert_eq!(
        asked.load(Ordering::SeqCst),
        1,
        "only the first call reached the policy"
    );
    let limited = answers.pop().expect("two answers");
    let status = limited.status().as_u16();
    let mut pinned = serde_json::Map::new();
    for name in PINNED {
        if let Some(value) = limited.headers().get(name) {
            pinned.insert(name.into(), value.to_str().expect("ASCII").into());
        }
    }
    let bytes = axum::body::to_bytes(limited.into_body(), usize::MAX)
        .await
        .expect("a body");
    let text = String::from_utf8(bytes.to_vec()).expect("UTF-8");
    let body_json: Value = serde_json::from_str(&text).expect("JSON");
    json!({"status": status, "headers": pinned, "body": text, "body_json": body_json})
}

fn file(revision: &str, case: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("spec")
        .join(revision)
        .join("limits")
        .join(format!("{case}.json"))
}

#[tokio::test]
async fn the_limit_answer_matches_its_fixture_in_every_revision_and_era() {
    let bless = std::env::var_os("MCP_GATE_BLESS").is_some_and(|v| !v.is_empty() && v != "0");
    let mut problems = Vec::new();
    for revision in REVISIONS {
        for (case, body, headers) in cases() {
            // The wait is a day less the time between the two calls, rounded up: 86,400 s
            // unless a call took a second (a machine that busy gets two more tries).
            let mut response = second_call(revision, &body, &headers).await;
            for _ in 0..2 {
                if response["headers"]["retry-after"] == "86400" {
                    break;
                }
                response = second_call(revision, &body, &headers).await;
            }
            // The delay is said twice, and alike: the header and the body.
            let seconds = response["headers"]["retry-after"]
                .as_str()
                .map(str::to_owned);
            let body_json = &response["body_json"];
            let info = body_json
                .pointer("/result/_meta/mcp-gate~1rateLimit")
                .or_else(|| body_json.pointer("/error/data/rateLimit"))
                .expect("the limit's object");
            assert_eq!(
                seconds,
                Some(info["retryAfterSeconds"].to_string()),
                "{revision} {case}"
            );
            let request: Vec<Value> = headers
                .iter()
                .map(|(name, value)| json!([name, value]))
                .collect();
            let fixture = json!({
                "case": case,
                "description": "The second call of one principal under a limit of one a day (`Limit::per_principal(1/day)`): the rate-limit answer of spec/limits.md.",
                "request": {"body": body, "headers": request, "authorization": "Bearer <token>"},
                "response": response,
            });
            let path = file(revision, &case);
            if bless {
                std::fs::create_dir_all(path.parent().expect("a folder")).expect("the folder");
                let text = serde_json::to_string_pretty(&fixture).expect("JSON") + "\n";
                std::fs::write(&path, text).expect("the fixture");
                continue;
            }
            match std::fs::read_to_string(&path) {
                Ok(stored) => {
                    let stored: Value = serde_json::from_str(&stored).expect("a JSON fixture");
                    if stored != fixture {
                        problems.push(format!(
                            "{}: differs from what the layer answers",
                            path.display()
                        ));
                    }
                }
                Err(error) => problems.push(format!("{}: {error}", path.display())),
            }
        }
    }
    assert!(
        problems.is_empty(),
        "{problems:#?}\n(MCP_GATE_BLESS=1 writes them)"
    );
}
