//! `[upstream] legacy-only` against a legacy upstream that answers the way real servers do and
//! some do not: an `initialize` answered in JSON or as an event stream, results as event
//! streams with a priming event and CRLF line ends, a notification before the result, a
//! request of its own slipped into an answer, a refused `initialize`. The modern client's side
//! is plain HTTP, so that every byte it gets is seen. (The SDK clients in front of the
//! TypeScript SDK's server are in `sdk.rs`.)

mod common;

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use common::{Gateway, free_port};
use serde_json::{Value, json};

/// One request the upstream saw: its method (`DELETE` for a close), session and version.
type Request = (String, Option<String>, Option<String>);

/// What the upstream saw, in order.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<Request>>>);

impl Seen {
    fn record(&self, what: &str, headers: &HeaderMap) {
        let header = |name: &str| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        self.0.lock().expect("lock").push((
            what.to_owned(),
            header("mcp-session-id"),
            header("mcp-protocol-version"),
        ));
    }

    fn all(&self) -> Vec<Request> {
        self.0.lock().expect("lock").clone()
    }
}

fn sse(body: String) -> Response {
    ([("content-type", "text/event-stream")], body).into_response()
}

/// A legacy upstream: `initialize` opens session `s-1` (answered in JSON, or as an event stream
/// when the client's name asks for it, or refused when it is `refuse`), and the tools answer
/// in event streams written as real servers write them.
async fn upstream(State(seen): State<Seen>, headers: HeaderMap, body: Bytes) -> Response {
    let message: Value = serde_json::from_slice(&body).expect("JSON from the gateway");
    let method = message["method"].as_str().unwrap_or_default().to_owned();
    seen.record(&method, &headers);
    let id = message["id"].clone();
    match method.as_str() {
        "initialize" => {
            assert_eq!(message["params"]["capabilities"], json!({}), "{message}");
            assert!(message.get("_meta").is_none());
            let result = json!({"jsonrpc": "2.0", "id": id, "result": {
                "protocolVersion": "2025-11-25",
                "capabilities": {"tools": {"listChanged": true}, "logging": {}},
                "serverInfo": {"name": "legacy-upstream", "version": "1.0.0"},
                "instructions": "legacy only",
            }});
            match message["params"]["clientInfo"]["name"].as_str() {
                Some("refuse") => (
                    StatusCode::OK,
                    [("content-type", "application/json")],
                    json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32602, "message": "unsupported version"}}).to_string(),
                )
                    .into_response(),
                Some("stream") => sse(format!("data: {result}\n\n")),
                _ => (
                    [("content-type", "application/json"), ("mcp-session-id", "s-1")],
                    result.to_string(),
                )
                    .into_response(),
            }
        }
        "notifications/initialized" => StatusCode::ACCEPTED.into_response(),
        "tools/list" => {
            let tool = |name: &str| json!({"name": name, "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": true}});
            let tools = ["echo", "ask", "json"].map(tool);
            let result = json!({"jsonrpc": "2.0", "id": id, "result": {"tools": tools}});
            sse(format!("data: {result}\n\n"))
        }
        "tools/call" => {
            // The era's keys never reach a legacy server.
            assert!(
                message["params"]
                    .get("_meta")
                    .is_none_or(|m| m.get("io.modelcontextprotocol/protocolVersion").is_none()),
                "{message}"
            );
            let tool = message["params"]["name"].as_str().unwrap_or_default();
            let text = message["params"]["arguments"]["text"].clone();
            let result = json!({"jsonrpc": "2.0", "id": id, "result": {"content": [{"type": "text", "text": text}]}});
            let progress = json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": 1, "progress": 1}});
            let asking = json!({"jsonrpc": "2.0", "id": 99, "method": "elicitation/create", "params": {"message": "sure?", "requestedSchema": {"type": "object", "properties": {}}}});
            match tool {
                // A priming event, CRLF line ends, a notification before the result.
                "echo" => sse(format!(
                    "id: 0\r\ndata:\r\n\r\nevent: message\r\ndata: {progress}\r\n\r\ndata: {result}\r\n\r\n"
                )),
                "ask" => sse(format!("data: {asking}\n\ndata: {result}\n\n")),
                "json" => {
                    ([("content-type", "application/json")], result.to_string()).into_response()
                }
                _ => (StatusCode::BAD_REQUEST, "no such tool").into_response(),
            }
        }
        _ => (StatusCode::BAD_REQUEST, "unexpected").into_response(),
    }
}

async fn closed(State(seen): State<Seen>, headers: HeaderMap) -> StatusCode {
    seen.record("DELETE", &headers);
    StatusCode::OK
}

/// The gateway in front of the legacy upstream, with the development issuer; its MCP URL and a
/// token for it.
async fn start(seen: Seen) -> (Gateway, String, String) {
    let app = Router::new()
        .route("/mcp", post(upstream).delete(closed))
        .with_state(seen);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let upstream_url = format!("http://{}/mcp", listener.local_addr().expect("address"));
    tokio::spawn(async move { axum::serve(listener, app).await });
    let port = free_port();
    let resource = format!("http://127.0.0.1:{port}/mcp");
    let config = format!(
        "listen = \"127.0.0.1:{port}\"\n[upstream]\nurl = \"{upstream_url}\"\nlegacy-only = true\n\
         [resource]\nuri = \"{resource}\"\n[development-issuer]\n[policy]\nallow-all = true\n"
    );
    let gateway = Gateway::start(&config, &[]).await;
    let token = gateway.development_token(&resource).await;
    (gateway, resource, token)
}

/// A modern request from a client named `client`; the status, the content type and the body.
async fn modern(
    url: &str,
    token: &str,
    method: &str,
    params: Value,
    client: &str,
) -> (u16, String, String) {
    let mut params = params;
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": client, "version": "1"},
    });
    let mut request = reqwest::Client::new()
        .post(url)
        .bearer_auth(token)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method);
    if let Some(name) = params.get("name").and_then(Value::as_str) {
        request = request.header("mcp-name", name);
    }
    let answer = request
        .json(&json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params}))
        .send()
        .await
        .expect("post");
    let status = answer.status().as_u16();
    assert!(
        answer.headers().get("mcp-session-id").is_none(),
        "a bridged answer names no session"
    );
    let content_type = answer
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    (status, content_type, answer.text().await.expect("body"))
}

/// Lists the upstream's tools (the gate allows only tools it has seen listed).
async fn list(url: &str, token: &str) {
    let (status, _, body) = modern(url, token, "tools/list", json!({}), "client").await;
    assert_eq!(status, 200, "{body}");
    let listed = events(&body);
    let result = &listed[0]["result"];
    assert_eq!(result["tools"].as_array().map(Vec::len), Some(3), "{body}");
    // A cacheable result, given what a modern client requires of one.
    assert_eq!(result["resultType"], "complete");
    assert_eq!(result["ttlMs"], 0);
    assert_eq!(result["cacheScope"], "private");
}

/// The data of each event of a canonical event stream, as JSON.
fn events(body: &str) -> Vec<Value> {
    body.split("\n\n")
        .filter_map(|event| event.lines().find_map(|line| line.strip_prefix("data: ")))
        .map(|data| serde_json::from_str(data).expect("JSON data"))
        .collect()
}

/// Waits until the upstream has seen `n` closes.
async fn closes(seen: &Seen, n: usize) -> usize {
    for _ in 0..50 {
        let count = seen
            .all()
            .iter()
            .filter(|(what, ..)| what == "DELETE")
            .count();
        if count >= n {
            return count;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    seen.all()
        .iter()
        .filter(|(what, ..)| what == "DELETE")
        .count()
}

#[tokio::test]
async fn modern_requests_cross_a_legacy_session_each_and_come_back_modern() {
    let seen = Seen::default();
    let (gateway, url, token) = start(seen.clone()).await;

    // Discovery, from the upstream's initialize (answered as an event stream here).
    let (status, _, body) = modern(&url, &token, "server/discover", json!({}), "stream").await;
    assert_eq!(status, 200, "{body}\n{}", gateway.log());
    let discovered: Value = serde_json::from_str(&body).expect("JSON");
    let result = &discovered["result"];
    assert_eq!(result["supportedVersions"], json!(["2026-07-28"]));
    assert_eq!(result["capabilities"]["tools"], json!({}), "{result}");
    assert_eq!(result["instructions"], "legacy only");
    assert_eq!(
        result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "legacy-upstream"
    );

    list(&url, &token).await;

    // A call whose answer is an event stream with a priming event and CRLF: written again
    // canonically, the notification kept, the result given `resultType`.
    let (status, content_type, body) = modern(
        &url,
        &token,
        "tools/call",
        json!({"name": "echo", "arguments": {"text": "hi"}}),
        "client",
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(content_type, "text/event-stream");
    let messages = events(&body);
    assert_eq!(messages.len(), 2, "{body}");
    assert_eq!(messages[0]["method"], "notifications/progress");
    assert_eq!(messages[1]["result"]["content"][0]["text"], "hi");
    assert_eq!(messages[1]["result"]["resultType"], "complete");
    assert!(!body.contains('\r'), "written by the gateway: {body:?}");

    // A JSON answer stays JSON.
    let (status, content_type, body) = modern(
        &url,
        &token,
        "tools/call",
        json!({"name": "json", "arguments": {"text": "plain"}}),
        "client",
    )
    .await;
    assert_eq!((status, content_type.as_str()), (200, "application/json"));
    let answer: Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(answer["result"]["resultType"], "complete");

    // Each request went in a session of its own, with the version the upstream agreed to,
    // and every session was closed.
    // Discovery's upstream answered statelessly (no session id): nothing to close there.
    assert_eq!(closes(&seen, 3).await, 3, "{:?}", seen.all());
    let calls: Vec<_> = seen
        .all()
        .into_iter()
        .filter(|(what, ..)| what == "tools/call")
        .collect();
    assert_eq!(calls.len(), 2);
    for (_, session, version) in calls {
        assert_eq!(session.as_deref(), Some("s-1"));
        assert_eq!(version.as_deref(), Some("2025-11-25"));
    }
    for (what, session, version) in seen.all() {
        if what == "DELETE" {
            assert_eq!(session.as_deref(), Some("s-1"));
            assert_eq!(version.as_deref(), Some("2025-11-25"));
        }
    }
}

#[tokio::test]
async fn what_the_bridge_cannot_carry_is_refused() {
    let seen = Seen::default();
    let (gateway, url, token) = start(seen.clone()).await;
    list(&url, &token).await;

    // The upstream asks the client something in the middle of its answer: refused, -32603.
    let (status, _, body) = modern(
        &url,
        &token,
        "tools/call",
        json!({"name": "ask", "arguments": {"text": "x"}}),
        "client",
    )
    .await;
    let answer: Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(status, 502, "{body}");
    assert_eq!(answer["error"]["code"], -32603, "{body}");
    assert!(!body.contains("elicitation"), "{body}");

    // An upstream that refuses the gateway's initialize: the client gets a 502, nothing else
    // is sent.
    // The two sessions so far (the listing's, the refused answer's) close in the background:
    // both closes are in before the count is taken.
    assert_eq!(closes(&seen, 2).await, 2, "{:?}", seen.all());
    let before = seen.all().len();
    let (status, _, body) = modern(
        &url,
        &token,
        "tools/call",
        json!({"name": "echo", "arguments": {"text": "x"}}),
        "refuse",
    )
    .await;
    assert_eq!(status, 502, "{body}\n{}", gateway.log());
    let after: Vec<String> = seen.all()[before..].iter().map(|s| s.0.clone()).collect();
    assert_eq!(after, ["initialize"], "nothing after a refused initialize");
}
