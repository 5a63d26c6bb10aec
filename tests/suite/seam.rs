//! The evaluate seam through the layer, with the real rmcp server behind it on loopback:
//! what `evaluate` sees, when it runs, how failures and unreadable requests are refused, and
//! that allowed traffic (JSON, SSE, GET, DELETE) passes untouched.

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use common::peers::GatedServer;
use common::tokens::{TestKey, claims};
use mcp_gate::mcp::Era;
use mcp_gate::policy::{Decision, Evaluation};
use mcp_gate::{Gate, GateBuilder, Issuer, StaticKeys};
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::{Value, json};

const ISSUER: &str = "https://as.example";
const MODERN: &str = "2026-07-28";

type Seen = Arc<Mutex<Vec<Evaluation>>>;

/// A gate trusting `key`, with a policy that records every evaluation and answers `decide`.
fn recording_gate(
    key: &TestKey,
    decide: fn(&Evaluation) -> Decision,
) -> (impl FnOnce(&str) -> GateBuilder, Seen) {
    let seen: Seen = Arc::default();
    let record = seen.clone();
    let keys = StaticKeys::from_jwks_json(&key.jwks_json()).unwrap();
    let configure = move |_: &str| {
        Gate::builder()
            .issuer(Issuer::with_keys(ISSUER, keys))
            .evaluate(move |evaluation: Evaluation| {
                let decision = decide(&evaluation);
                record.lock().unwrap().push(evaluation);
                async move { Ok::<_, std::convert::Infallible>(decision) }
            })
    };
    (configure, seen)
}

fn tool_call(id: u64, name: &str, arguments: Value, meta: Option<Value>) -> String {
    let mut params = json!({"name": name, "arguments": arguments});
    if let Some(meta) = meta {
        params["_meta"] = meta;
    }
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params}).to_string()
}

fn modern_meta(capabilities: Value) -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": capabilities,
    })
}

fn modern_headers(name: &str) -> Vec<(&'static str, String)> {
    vec![
        ("mcp-protocol-version", MODERN.to_owned()),
        ("mcp-method", "tools/call".to_owned()),
        ("mcp-name", name.to_owned()),
    ]
}

fn as_refs<'a>(headers: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    headers.iter().map(|(k, v)| (*k, v.as_str())).collect()
}

#[tokio::test]
async fn evaluate_sees_exactly_what_the_inner_server_acts_on() {
    let key = TestKey::es256("k1");
    let (configure, seen) = recording_gate(&key, |_| Decision::allow());
    let server = GatedServer::start(configure).await;
    let token = key.mint(&claims(ISSUER, &server.url, "mcp:read"));
    let mut meta = modern_meta(json!({"elicitation": {"url": {}}}));
    meta["io.modelcontextprotocol/authorization-context-id"] = json!("actx_forged");
    let body = tool_call(1, "echo", json!({"text": "exactly this"}), Some(meta));
    let reply = server
        .post(Some(&token), &as_refs(&modern_headers("echo")), &body)
        .await;
    assert_eq!(reply.status, 200, "{reply:?}");
    assert_eq!(reply.tool_text(), "exactly this");

    let seen = seen.lock().unwrap();
    let evaluation = &seen[0];
    assert_eq!(evaluation.method(), "tools/call");
    assert_eq!(evaluation.tool(), Some("echo"));
    assert_eq!(
        evaluation.arguments().unwrap(),
        json!({"text": "exactly this"}).as_object().unwrap()
    );
    assert_eq!(evaluation.era(), Era::Modern);
    assert_eq!(evaluation.protocol_version(), Some(MODERN));
    assert!(evaluation.capabilities().url_elicitation());
    assert_eq!(evaluation.principal().subject(), Some("user-1"));
    // Nothing from _meta beyond the capabilities reaches the policy: the echo is not there.
    assert!(!format!("{evaluation:?}").contains("actx_forged"));
}

#[tokio::test]
async fn evaluate_runs_on_every_request_and_a_context_id_grants_nothing() {
    let key = TestKey::es256("k1");
    let (configure, seen) = recording_gate(&key, |e| match e.tool() {
        Some("secret_sauce") => Decision::undisclosed("no"),
        _ => Decision::allow(),
    });
    let server = GatedServer::start(configure).await;
    let token = key.mint(&claims(ISSUER, &server.url, "mcp:read"));

    let first = server
        .post(
            Some(&token),
            &[],
            &tool_call(1, "secret_sauce", json!({}), None),
        )
        .await;
    let handle = first.body["result"]["_meta"]["io.modelcontextprotocol/authorization"]["authorizationContextId"]
        .as_str()
        .expect("a context id")
        .to_owned();
    // Retrying with the handle the server issued: evaluated again, denied again, new handle.
    let echo = json!({"io.modelcontextprotocol/authorization-context-id": handle});
    let retry = server
        .post(
            Some(&token),
            &[],
            &tool_call(2, "secret_sauce", json!({}), Some(echo)),
        )
        .await;
    assert_eq!(retry.body["result"]["isError"], true);
    let second = retry.body["result"]["_meta"]["io.modelcontextprotocol/authorization"]["authorizationContextId"]
        .as_str()
        .unwrap();
    assert_ne!(second, handle);
    // An unknown handle on an allowed call: evaluated normally, allowed.
    let unknown =
        json!({"io.modelcontextprotocol/authorization-context-id": "actx_nobody_issued_this"});
    let allowed = server
        .post(
            Some(&token),
            &[],
            &tool_call(3, "echo", json!({"text": "ok"}), Some(unknown)),
        )
        .await;
    assert_eq!(allowed.tool_text(), "ok");
    assert_eq!(
        seen.lock().unwrap().len(),
        3,
        "one evaluation per request, retries included"
    );
}

#[tokio::test]
async fn a_failing_policy_is_an_internal_error_never_an_allow() {
    let key = TestKey::es256("k1");
    let keys = StaticKeys::from_jwks_json(&key.jwks_json()).unwrap();
    let server = GatedServer::start(move |_| {
        Gate::builder()
            .issuer(Issuer::with_keys(ISSUER, keys))
            .evaluate_timeout(Duration::from_millis(200))
            .evaluate(|evaluation: Evaluation| async move {
                match evaluation.tool() {
                    Some("panics") => panic!("policy bug"),
                    Some("errors") => Err("database down".into()),
                    Some("hangs") => {
                        tokio::time::sleep(Duration::from_secs(60)).await;
                        Ok(Decision::allow())
                    }
                    _ => Ok::<_, Box<dyn std::error::Error + Send + Sync>>(Decision::allow()),
                }
            })
    })
    .await;
    let token = key.mint(&claims(ISSUER, &server.url, "mcp:read"));
    for (id, tool) in [(1, "panics"), (2, "errors"), (3, "hangs")] {
        let reply = server
            .post(Some(&token), &[], &tool_call(id, tool, json!({}), None))
            .await;
        assert_eq!(reply.status, 200, "{tool}");
        assert_eq!(reply.body["error"]["code"], -32603, "{tool}: {reply:?}");
        assert_eq!(reply.body["id"], id);
        assert!(reply.body.get("result").is_none());
    }
    // The server keeps serving.
    let reply = server
        .post(
            Some(&token),
            &[],
            &tool_call(4, "echo", json!({"text": "alive"}), None),
        )
        .await;
    assert_eq!(reply.tool_text(), "alive");
}

/// An inner service that counts the requests that reach it.
fn counting_router() -> (Router, Arc<AtomicUsize>) {
    let reached = Arc::new(AtomicUsize::new(0));
    let counter = reached.clone();
    let router = Router::new().route(
        "/mcp",
        axum::routing::any(move || {
            counter.fetch_add(1, Ordering::SeqCst);
            async { axum::Json(json!({"jsonrpc": "2.0", "id": 0, "result": {}})) }
        }),
    );
    (router, reached)
}

#[tokio::test]
async fn unreadable_requests_get_their_documented_error_and_never_reach_anything() {
    let key = TestKey::es256("k1");
    let (configure, seen) = recording_gate(&key, |_| Decision::allow());
    let (router, reached) = counting_router();
    let server = GatedServer::start_with(|r| configure(r).max_body_bytes(4096), router).await;
    let token = key.mint(&claims(ISSUER, &server.url, "mcp:read"));
    let modern = tool_call(1, "echo", json!({}), Some(modern_meta(json!({}))));
    /// (case, body, headers, HTTP status, JSON-RPC code)
    type Case<'a> = (&'a str, String, Vec<(&'a str, &'a str)>, u16, i64);
    let cases: Vec<Case> = vec![
        ("not JSON", "hello".into(), vec![], 400, -32700),
        ("a lone surrogate", r#"{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":"\udc00"}}"#.into(), vec![], 400, -32700),
        ("duplicate keys", r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","name":"secret_sauce"}}"#.into(), vec![], 400, -32700),
        ("a batch", format!("[{}]", tool_call(1, "echo", json!({}), None)), vec![], 400, -32600),
        ("no method", r#"{"jsonrpc":"2.0","id":1,"params":{}}"#.into(), vec![], 400, -32600),
        ("number too large", r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"n":1e999}}}"#.into(), vec![], 400, -32700),
        ("name of the wrong type", r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":["echo"]}}"#.into(), vec![], 400, -32602),
        ("arguments of the wrong type", r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":"x"}}"#.into(), vec![], 400, -32602),
        ("unknown modern version", tool_call(1, "echo", json!({}), Some(json!({"io.modelcontextprotocol/protocolVersion": "2099-01-01", "io.modelcontextprotocol/clientCapabilities": {}}))), vec![], 400, -32022),
        ("modern without capabilities", tool_call(1, "echo", json!({}), Some(json!({"io.modelcontextprotocol/protocolVersion": MODERN}))), vec![], 400, -32602),
        ("modern without mirrored headers", modern.clone(), vec![], 400, -32020),
        ("modern with a lying Mcp-Name", modern.clone(), vec![("mcp-protocol-version", MODERN), ("mcp-method", "tools/call"), ("mcp-name", "other")], 400, -32020),
        ("too large", tool_call(1, "echo", json!({"text": "x".repeat(5000)}), None), vec![], 413, -32600),
    ];
    for (case, body, headers, status, code) in cases {
        let reply = server.post(Some(&token), &headers, &body).await;
        assert_eq!(reply.status, status, "{case}: {reply:?}");
        assert_eq!(reply.body["error"]["code"], code, "{case}: {reply:?}");
        assert_eq!(reply.headers["content-type"], "application/json", "{case}");
    }
    assert_eq!(
        reached.load(Ordering::SeqCst),
        0,
        "nothing reached the inner service"
    );
    assert!(seen.lock().unwrap().is_empty(), "nothing reached evaluate");

    // A legacy request is judged by its body, whatever its headers say.
    let reply = server
        .post(
            Some(&token),
            &[("mcp-name", "secret_sauce")],
            &tool_call(9, "echo", json!({}), None),
        )
        .await;
    assert_eq!(reply.status, 200);
    assert_eq!(seen.lock().unwrap()[0].tool(), Some("echo"));
}

#[tokio::test]
async fn notifications_responses_get_and_delete_pass_without_evaluation() {
    let key = TestKey::es256("k1");
    let (configure, seen) = recording_gate(&key, |_| Decision::unavailable("everything is denied"));
    let (router, reached) = counting_router();
    let server = GatedServer::start_with(configure, router).await;
    let token = key.mint(&claims(ISSUER, &server.url, "mcp:read"));
    server
        .post(
            Some(&token),
            &[],
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        )
        .await;
    server
        .post(
            Some(&token),
            &[],
            r#"{"jsonrpc":"2.0","id":5,"result":{"action":"accept"}}"#,
        )
        .await;
    let client = reqwest::Client::new();
    for method in [reqwest::Method::GET, reqwest::Method::DELETE] {
        let response = client
            .request(method.clone(), &server.url)
            .bearer_auth(&token)
            .send()
            .await
            .unwrap();
        // The counting router answers everything with a JSON-RPC result. A DELETE's answer is
        // passed; a GET's is not: a GET answers no request, so a result in it is one the layer
        // never read (`502`, no body).
        let expected = if method == reqwest::Method::GET {
            502
        } else {
            200
        };
        assert_eq!(response.status(), expected, "{method}");
        let response = client
            .request(method.clone(), &server.url)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 401, "{method} is authenticated");
    }
    assert_eq!(reached.load(Ordering::SeqCst), 4);
    assert!(seen.lock().unwrap().is_empty());
}

#[tokio::test]
async fn sse_responses_stream_through_and_legacy_sessions_keep_their_capabilities() {
    let key = TestKey::es256("k1");
    let (configure, seen) = recording_gate(&key, |_| Decision::allow());
    // rmcp in its default mode: sessions, and answers as Server-Sent Events.
    let service = StreamableHttpService::new(
        || Ok(common::tools::DemoServer::default()),
        Arc::new(
            rmcp::transport::streamable_http_server::session::local::LocalSessionManager::default(),
        ),
        StreamableHttpServerConfig::default(),
    );
    let server =
        GatedServer::start_with(configure, Router::new().nest_service("/mcp", service)).await;
    let token = key.mint(&claims(ISSUER, &server.url, "mcp:read"));
    let initialize = json!({
        "jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {"elicitation": {}}, "clientInfo": {"name": "t", "version": "0"}}
    });
    let reply = server
        .post(Some(&token), &[], &initialize.to_string())
        .await;
    assert_eq!(reply.status, 200, "{reply:?}");
    assert!(
        reply.headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    assert!(
        reply.text.contains("\"protocolVersion\""),
        "the SSE body arrived whole: {}",
        reply.text
    );
    let session = reply.headers["mcp-session-id"].to_str().unwrap().to_owned();
    server
        .post(
            Some(&token),
            &[("mcp-session-id", &session)],
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        )
        .await;
    let reply = server
        .post(
            Some(&token),
            &[
                ("mcp-session-id", &session),
                ("mcp-protocol-version", "2025-11-25"),
            ],
            &tool_call(1, "echo", json!({"text": "over sse"}), None),
        )
        .await;
    assert_eq!(reply.status, 200);
    assert!(
        reply.text.starts_with("data:")
            || reply.text.contains("\ndata:")
            || reply.text.contains("data: "),
        "{}",
        reply.text
    );
    assert!(reply.text.contains("over sse"));
    let seen = seen.lock().unwrap();
    let call = seen
        .iter()
        .find(|e| e.tool() == Some("echo"))
        .expect("the call was evaluated");
    assert_eq!(call.era(), Era::Legacy);
    assert_eq!(call.protocol_version(), Some("2025-11-25"));
    assert!(
        call.capabilities().form_elicitation(),
        "capabilities remembered from initialize"
    );
    assert!(!call.capabilities().url_elicitation());
}

#[tokio::test]
async fn allowed_results_pass_byte_for_byte_even_when_they_are_errors() {
    let key = TestKey::es256("k1");
    let (configure, _) = recording_gate(&key, |_| Decision::allow());
    let gated = GatedServer::start(configure).await;
    let token = key.mint(&claims(ISSUER, &gated.url, "mcp:read"));
    // The same rmcp server with no layer at all.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let bare_url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let bare = Router::new().nest_service("/mcp", common::tools::mcp_service());
    tokio::spawn(async move { axum::serve(listener, bare).await });
    let body = tool_call(7, "no_such_tool", json!({}), None);
    let through = gated.post(Some(&token), &[], &body).await;
    let direct = reqwest::Client::new()
        .post(&bare_url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(through.status, direct.status().as_u16());
    assert_eq!(
        through.text,
        direct.text().await.unwrap(),
        "no envelope is added to a started operation"
    );
    assert!(
        !through
            .text
            .contains("io.modelcontextprotocol/authorization")
    );
}

#[tokio::test]
async fn a_token_for_40_eur_does_not_cover_a_transfer_of_400() {
    let key = TestKey::es256("k1");
    let keys = StaticKeys::from_jwks_json(&key.jwks_json()).unwrap();
    let server = GatedServer::start(move |_| {
        Gate::builder()
            .issuer(Issuer::with_keys(ISSUER, keys))
            .evaluate(common::policy::DemoPolicy::new(
                Default::default(),
                "http://127.0.0.1",
            ))
    })
    .await;
    let mut token_claims = claims(ISSUER, &server.url, "mcp:read");
    token_claims["authorization_details"] = json!([{
        "type": "payment_initiation", "actions": ["initiate"],
        "instructedAmount": {"amount": "40.00", "currency": "EUR"},
        "creditorAccount": {"iban": "DE00TEST"},
    }]);
    let token = key.mint(&token_claims);
    let transfer = |amount: &str| {
        tool_call(
            1,
            "transfer",
            json!({"amount": amount, "currency": "EUR", "iban": "DE00TEST"}),
            None,
        )
    };
    let reply = server.post(Some(&token), &[], &transfer("40.00")).await;
    assert_eq!(reply.status, 200, "{reply:?}");
    assert_eq!(reply.tool_text(), "transferred 40.00 EUR to DE00TEST");
    let reply = server.post(Some(&token), &[], &transfer("400.00")).await;
    assert_eq!(reply.status, 401);
    assert!(
        reply
            .www_authenticate
            .unwrap()
            .contains("error=\"insufficient_authorization\"")
    );
    let remedy = reply.body["authorization_remediation"].as_str().unwrap();
    use base64::Engine;
    let decoded: Value = serde_json::from_slice(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(remedy)
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        decoded["authorization_details"][0]["instructedAmount"]["amount"],
        "400.00"
    );
}
