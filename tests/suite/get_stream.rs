//! The GET stream is watched: a server that answers a POST with `202` and sends the answer down
//! its GET stream (the 2024-11-05 HTTP+SSE habit, or a server that lost the request's own
//! stream) must not hand the client what the layer never read. Before, the layer passed the GET
//! stream untouched, so an unfiltered `tools/list` answer sent there reached the caller.
//!
//! The inner server is an axum route on 127.0.0.1 behind the gate, over real HTTP: `POST`
//! answers `202 Accepted`; `GET` answers an event stream holding a notification, the
//! unfiltered list (a hidden tool in it), and another notification.

use crate::common;

use axum::Router;
use axum::body::Body;
use axum::response::Response;
use axum::routing::get;
use common::peers::GatedServer;
use common::tokens::{TestKey, claims};
use mcp_gate::policy::{Decision, Evaluation};
use mcp_gate::{Gate, Issuer, StaticKeys};
use serde_json::{Value, json};

const ISSUER: &str = "https://as.example";
const HIDDEN: &str = "hidden_tool_7f3a";

fn list_answer() -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "result": {"tools": [
        {"name": "echo", "inputSchema": {"type": "object"}},
        {"name": HIDDEN, "inputSchema": {"type": "object"}},
    ]}})
}

fn note(text: &str) -> Value {
    json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": text}})
}

/// POST: `202`, nothing; GET: the stream the test names in the `x-stream` header.
fn inner() -> Router {
    Router::new().route(
        "/mcp",
        get(|headers: http::HeaderMap| async move {
            let resumed = headers
                .get("last-event-id")
                .map(|v| v.to_str().unwrap_or("?").to_owned());
            let stream = match headers.get("x-stream").and_then(|v| v.to_str().ok()) {
                Some("say-resumed") => format!("data: {}\n\n", note(&format!("{resumed:?}"))),
                Some("only-notes") => format!(
                    ": ping\n\nid: 1\ndata: {}\n\nid: 2\ndata: {}\n\n",
                    note("one"),
                    note("two")
                ),
                _ => format!(
                    "id: 1\ndata: {}\n\nid: 2\ndata: {}\n\nid: 3\ndata: {}\n\n",
                    note("before"),
                    list_answer(),
                    note("after")
                ),
            };
            Response::builder()
                .header("content-type", "text/event-stream")
                .body(Body::from(stream))
                .expect("response")
        })
        .post(|| async {
            Response::builder()
                .status(202)
                .body(Body::empty())
                .expect("response")
        }),
    )
}

async fn gate() -> (GatedServer, String) {
    let key = TestKey::es256("k1");
    let keys = StaticKeys::from_jwks_json(&key.jwks_json()).expect("keys");
    let server = GatedServer::start_with(
        move |_| {
            Gate::builder()
                .issuer(Issuer::with_keys(ISSUER, keys))
                .evaluate(|e: Evaluation| async move {
                    let hidden = e.tool() == Some(HIDDEN);
                    Ok::<_, std::convert::Infallible>(if hidden {
                        Decision::undisclosed("no such tool")
                    } else {
                        Decision::allow()
                    })
                })
        },
        inner(),
    )
    .await;
    let token = key.mint(&claims(ISSUER, &server.url, "mcp:read"));
    (server, token)
}

async fn get_stream(server: &GatedServer, token: &str, which: &str) -> (u16, String) {
    let response = reqwest::Client::new()
        .get(&server.url)
        .bearer_auth(token)
        .header("accept", "text/event-stream")
        .header("x-stream", which)
        .header("last-event-id", "0/0")
        .send()
        .await
        .expect("GET");
    let status = response.status().as_u16();
    let text = tokio::time::timeout(std::time::Duration::from_secs(10), response.text())
        .await
        .expect("the stream ends")
        .expect("body");
    (status, text)
}

#[tokio::test]
async fn a_response_sent_down_the_get_stream_never_reaches_the_client() {
    let (server, token) = gate().await;
    // The list itself is refused: a 202 holds no response for its id.
    let list = server
        .post(
            Some(&token),
            &[],
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}"#,
        )
        .await;
    assert_eq!(list.body["error"]["code"], -32603, "{list:?}");
    assert!(!list.text.contains(HIDDEN));

    // The server sends the unfiltered list down the GET stream.
    let (status, text) = get_stream(&server, &token, "with-answer").await;
    assert_eq!(status, 200);
    assert!(
        !text.contains(HIDDEN),
        "the hidden tool reached the client: {text}"
    );
    // What came before the response passes, written by the layer; the stream ends there.
    assert_eq!(
        text,
        format!("event: message\ndata: {}\n\n", note("before"))
    );
}

#[tokio::test]
async fn notifications_and_keep_alives_pass_written_by_the_layer() {
    let (server, token) = gate().await;
    let (status, text) = get_stream(&server, &token, "only-notes").await;
    assert_eq!(status, 200);
    assert_eq!(
        text,
        format!(
            ":\n\nevent: message\ndata: {}\n\nevent: message\ndata: {}\n\n",
            note("one"),
            note("two")
        )
    );
}

/// A GET whose token is already in the cache, and that names no session, took a fast path that
/// forwarded it as it came: watched by nothing, and with its `Last-Event-ID`.
#[tokio::test]
async fn a_get_with_a_cached_token_is_watched_and_resumes_nothing() {
    let (server, token) = gate().await;
    // Warm the token cache, then ask twice: the first GET verifies the token, the second not.
    for _ in 0..2 {
        let (status, text) = get_stream(&server, &token, "say-resumed").await;
        assert_eq!(status, 200);
        assert_eq!(text, format!("event: message\ndata: {}\n\n", note("None")));
        let (_, text) = get_stream(&server, &token, "with-answer").await;
        assert!(!text.contains(HIDDEN), "{text}");
    }
}
