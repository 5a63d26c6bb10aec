//! Stream resumption through the layer: a caller must not get back, by resuming an event
//! stream, what the layer rewrote on its way out.
//!
//! rmcp in legacy session mode (tests/common/surface.rs, `LocalSessionManager`) keeps the
//! events of each POST's stream for a while after it ends, and a GET with `Last-Event-ID:
//! <index>/<http request id>` replays them. Those ids are small counters, so a caller can
//! guess them. The layer filters a `tools/list`, but the replay of that list's stream is
//! rmcp's own, unfiltered one: the layer has to keep `Last-Event-ID` from reaching rmcp.
//!
//! The policy hides the tool `delete_everything` from principal A (subject `alice`) and
//! allows everything else.

mod common;

use std::convert::Infallible;
use std::ops::Range;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::Request;
use axum::middleware::Next;
use common::peers::{GatedServer, Reply};
use common::surface::Surface;
use common::tokens::{TestKey, claims};
use mcp_gate::policy::{Decision, Evaluation};
use mcp_gate::{Gate, Issuer, StaticKeys};
use serde_json::{Value, json};

const ISSUER: &str = "https://as.example";
/// The principal the policy hides a tool from.
const ALICE: &str = "alice";
const CLIENT: &str = "client-a";
/// The tool hidden from A: rmcp lists it, the layer must not let A read its name.
const HIDDEN_TOOL: &str = "delete_everything";
/// The legacy protocol version, the one rmcp gives sessions to.
const LEGACY: &str = "2025-11-25";
/// The event indices tried on each stream (rmcp counts a stream's events from 0, the priming
/// event first).
const INDICES: Range<usize> = 0..4;
/// The HTTP request ids tried (rmcp counts a session's request streams from 0).
const REQUEST_IDS: Range<u64> = 0..8;
/// How long each GET's answer is read: a replay of an ended stream comes at once and ends.
const READ_FOR: Duration = Duration::from_secs(1);

/// The policy: A does not get the hidden tool; everything else goes.
fn judge(e: &Evaluation) -> Decision {
    let hidden = e.principal().subject() == Some(ALICE) && e.target().name() == Some(HIDDEN_TOOL);
    if hidden {
        Decision::undisclosed("This is not available to you.")
    } else {
        Decision::allow()
    }
}

/// The `Last-Event-ID` of each GET that reached the inner service (`None` when it had none),
/// recorded between the layer and the surface's own recorder.
#[derive(Clone, Default)]
struct Resumes(Arc<Mutex<Vec<Option<String>>>>);

impl Resumes {
    fn around(&self, router: Router) -> Router {
        let seen = self.0.clone();
        router.layer(axum::middleware::from_fn(
            move |request: Request, next: Next| {
                if request.method() == http::Method::GET {
                    let id = request
                        .headers()
                        .get("last-event-id")
                        .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned());
                    seen.lock().unwrap().push(id);
                }
                next.run(request)
            },
        ))
    }

    fn seen(&self) -> Vec<Option<String>> {
        self.0.lock().unwrap().clone()
    }
}

/// The JSON-RPC messages of an event stream's `data:` lines, or of one JSON document.
fn messages(text: &str) -> Vec<Value> {
    if let Ok(message) = serde_json::from_str::<Value>(text) {
        return vec![message];
    }
    text.lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .filter_map(|data| serde_json::from_str(data.trim()).ok())
        .collect()
}

/// What one resuming GET got back.
struct Resumed {
    last_event_id: String,
    status: u16,
    text: String,
}

/// GETs the session's stream with `last_event_id`; reads the answer for [`READ_FOR`].
async fn resume(url: &str, token: &str, session: &str, last_event_id: String) -> Resumed {
    let request = reqwest::Client::new()
        .get(url)
        .header("accept", "text/event-stream")
        .header("mcp-session-id", session)
        .header("mcp-protocol-version", LEGACY)
        .header("last-event-id", &last_event_id)
        .bearer_auth(token);
    let mut response = tokio::time::timeout(Duration::from_secs(10), request.send())
        .await
        .unwrap_or_else(|_| panic!("{last_event_id}: no answer head within 10 s"))
        .expect("get");
    let status = response.status().as_u16();
    let deadline = tokio::time::Instant::now() + READ_FOR;
    let mut bytes = Vec::new();
    while let Ok(Ok(Some(chunk))) = tokio::time::timeout_at(deadline, response.chunk()).await {
        bytes.extend_from_slice(&chunk);
    }
    Resumed {
        last_event_id,
        status,
        text: String::from_utf8_lossy(&bytes).into_owned(),
    }
}

#[tokio::test]
async fn resuming_a_filtered_list_stream_replays_nothing_the_layer_hid() {
    let key = TestKey::es256("k1");
    let keys = StaticKeys::from_jwks_json(&key.jwks_json()).unwrap();
    let surface = Surface::new();
    let resumes = Resumes::default();
    let server = GatedServer::start_with(
        move |_| {
            Gate::builder()
                .issuer(Issuer::with_keys(ISSUER, keys))
                .evaluate(|e: Evaluation| async move { Ok::<_, Infallible>(judge(&e)) })
        },
        resumes.around(surface.router()),
    )
    .await;
    let mut claims = claims(ISSUER, &server.url, "mcp:read");
    claims["sub"] = json!(ALICE);
    claims["client_id"] = json!(CLIENT);
    let alice = key.mint(&claims);

    // A legacy session, opened by hand.
    let initialize = json!({
        "jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": LEGACY, "capabilities": {},
                   "clientInfo": {"name": "resume", "version": "0"}}
    });
    let reply = server
        .post(Some(&alice), &[], &initialize.to_string())
        .await;
    assert_eq!(reply.status, 200, "{reply:?}");
    let session = reply.headers["mcp-session-id"].to_str().unwrap().to_owned();
    let in_session = [
        ("mcp-session-id", session.as_str()),
        ("mcp-protocol-version", LEGACY),
    ];
    let reply = server
        .post(
            Some(&alice),
            &in_session,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        )
        .await;
    assert_eq!(reply.status, 202, "{reply:?}");

    // The list A gets is filtered; rmcp answered it with the hidden tool in it.
    let list = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
    let reply: Reply = server.post(Some(&alice), &in_session, list).await;
    assert_eq!(reply.status, 200, "{reply:?}");
    let answer = messages(&reply.text)
        .into_iter()
        .find(|m| m.get("result").is_some())
        .unwrap_or_else(|| panic!("no list in {reply:?}"));
    let names: Vec<&str> = answer["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("no tools in {answer}"))
        .iter()
        .filter_map(|tool| tool["name"].as_str())
        .collect();
    assert_eq!(names, ["echo"], "{answer}");
    assert!(!reply.text.contains(HIDDEN_TOOL), "{}", reply.text);
    assert_eq!(surface.reached.count("POST tools/list"), 1);

    // Every plausible id of that list's stream, each GET on its own.
    let ids: Vec<String> = INDICES
        .flat_map(|index| REQUEST_IDS.map(move |request| format!("{index}/{request}")))
        .collect();
    let resumed = futures_util::future::join_all(
        ids.iter()
            .map(|id| resume(&server.url, &alice, &session, id.clone())),
    )
    .await;

    let replayed: Vec<String> = resumed
        .iter()
        .filter(|r| r.text.contains(HIDDEN_TOOL))
        .map(|r| {
            format!(
                "Last-Event-ID {} -> {}: {}",
                r.last_event_id, r.status, r.text
            )
        })
        .collect();
    assert!(
        replayed.is_empty(),
        "a resumed stream replayed the hidden tool {HIDDEN_TOOL}:\n{}",
        replayed.join("\n")
    );

    // Every GET reached rmcp (none was refused, which would pass the check above for nothing),
    // and none of them with its Last-Event-ID.
    let seen = resumes.seen();
    assert_eq!(seen.len(), ids.len(), "GETs that reached rmcp: {seen:?}");
    assert_eq!(surface.reached.count("GET"), ids.len());
    let resumed_at: Vec<&String> = seen.iter().flatten().collect();
    assert!(
        resumed_at.is_empty(),
        "Last-Event-ID reached rmcp: {resumed_at:?}"
    );
}
