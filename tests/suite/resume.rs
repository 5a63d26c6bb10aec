//! Stream resumption through the layer: a caller must not get, by resuming an event stream,
//! an answer the layer would have rewritten on its way out.
//!
//! rmcp in legacy session mode (`LocalSessionManager`, its default config) keeps each POST's
//! stream and its events while the request is pending. A GET with `Last-Event-ID: <index>/<http
//! request id>` replays those events and takes the stream over: the answer then goes out on
//! that GET, not on the POST the layer reads and filters. The ids are small counters (the
//! priming event of a session's first request stream is `0/0`), so a caller can guess them.
//! Once an answer is sent rmcp drops its stream (resuming it gets an empty 200), so a list
//! already answered cannot be replayed; the first test still checks that no resumption
//! reaches rmcp at all. The second has a server whose `tools/list` waits, and resumes that
//! list's stream while it does. The layer must keep `Last-Event-ID` from reaching rmcp.
//!
//! The policy hides the tool `delete_everything` from principal A (subject `alice`) and
//! allows everything else.

use crate::common;

use std::convert::Infallible;
use std::ops::Range;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::Request;
use axum::middleware::Next;
use axum::routing::any_service;
use common::peers::{GatedServer, Reply};
use common::surface::{Reached, Surface};
use common::tokens::{TestKey, claims};
use mcp_gate::policy::{Decision, Evaluation};
use mcp_gate::{Gate, Issuer, StaticKeys};
use rmcp::model::{
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Value, json};
use tokio::sync::Notify;

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
/// How long each GET's answer is read once it may carry something.
const READ_FOR: Duration = Duration::from_secs(1);
/// The longest wait for anything the test needs to happen (an answer's head, the list).
const AT_MOST: Duration = Duration::from_secs(10);
/// A's `tools/list`.
const LIST: &str = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;

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
/// recorded between the layer and the inner service.
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

/// A gate with the tests' policy in front of `router`, which records resumptions first.
struct Setup {
    server: GatedServer,
    key: TestKey,
    resumes: Resumes,
}

impl Setup {
    async fn start(router: Router) -> Self {
        let key = TestKey::es256("k1");
        let keys = StaticKeys::from_jwks_json(&key.jwks_json()).unwrap();
        let resumes = Resumes::default();
        let server = GatedServer::start_with(
            move |_| {
                Gate::builder()
                    .issuer(Issuer::with_keys(ISSUER, keys))
                    .evaluate(|e: Evaluation| async move { Ok::<_, Infallible>(judge(&e)) })
            },
            resumes.around(router),
        )
        .await;
        Self {
            server,
            key,
            resumes,
        }
    }

    /// A valid token of A.
    fn alice(&self) -> String {
        let mut claims = claims(ISSUER, &self.server.url, "mcp:read");
        claims["sub"] = json!(ALICE);
        claims["client_id"] = json!(CLIENT);
        self.key.mint(&claims)
    }

    /// A legacy session, opened by hand: `initialize`, then `notifications/initialized`.
    async fn open_session(&self, token: &str) -> String {
        let initialize = json!({
            "jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": LEGACY, "capabilities": {},
                       "clientInfo": {"name": "resume", "version": "0"}}
        });
        let opened = self
            .server
            .post(Some(token), &[], &initialize.to_string())
            .await;
        let session = match opened.headers.get("mcp-session-id") {
            Some(id) if opened.status == 200 => id.to_str().unwrap().to_owned(),
            _ => panic!("no session opened: {opened:?}"),
        };
        let initialized = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
        let acknowledged = self
            .server
            .post(Some(token), &in_session(&session), initialized)
            .await;
        assert_eq!(acknowledged.status, 202, "{acknowledged:?}");
        session
    }

    /// One GET of the session's stream per plausible event id, one after another, each
    /// answer's head within [`AT_MOST`]. The indices go down, so the last try on each stream
    /// is the one that replays it from its first event: rmcp hands a request's stream to the
    /// latest resumption, and one at an index past its events leaves it to nobody.
    async fn resume_everywhere(&self, token: &str, session: &str) -> Vec<Resuming> {
        let mut gets = Vec::new();
        for index in INDICES.rev() {
            for request in REQUEST_IDS {
                let last_event_id = format!("{index}/{request}");
                let request = reqwest::Client::new()
                    .get(&self.server.url)
                    .header("accept", "text/event-stream")
                    .header("mcp-session-id", session)
                    .header("mcp-protocol-version", LEGACY)
                    .header("last-event-id", &last_event_id)
                    .bearer_auth(token);
                let response = tokio::time::timeout(AT_MOST, request.send())
                    .await
                    .unwrap_or_else(|_| panic!("{last_event_id}: no answer head in time"))
                    .expect("get");
                gets.push(Resuming {
                    last_event_id,
                    response,
                });
            }
        }
        gets
    }

    /// Every GET reached the inner service (a refused one would pass the leak check for
    /// nothing), none of them with its `Last-Event-ID`.
    fn assert_no_resumption_reached(&self, gets: usize) {
        let seen = self.resumes.seen();
        assert_eq!(seen.len(), gets, "GETs that reached rmcp: {seen:?}");
        let resumed_at: Vec<&String> = seen.iter().flatten().collect();
        assert!(
            resumed_at.is_empty(),
            "Last-Event-ID reached rmcp: {resumed_at:?}"
        );
    }
}

fn in_session(session: &str) -> [(&'static str, &str); 2] {
    [
        ("mcp-session-id", session),
        ("mcp-protocol-version", LEGACY),
    ]
}

/// A GET that resumes at `last_event_id`, its head read.
struct Resuming {
    last_event_id: String,
    response: reqwest::Response,
}

impl Resuming {
    /// What the stream carries within [`READ_FOR`] (all of it, if it ends sooner).
    async fn read(mut self) -> Resumed {
        let status = self.response.status().as_u16();
        let deadline = tokio::time::Instant::now() + READ_FOR;
        let mut bytes = Vec::new();
        while let Ok(Ok(Some(chunk))) =
            tokio::time::timeout_at(deadline, self.response.chunk()).await
        {
            bytes.extend_from_slice(&chunk);
        }
        Resumed {
            last_event_id: self.last_event_id,
            status,
            text: String::from_utf8_lossy(&bytes).into_owned(),
        }
    }
}

/// What one resuming GET got back.
struct Resumed {
    last_event_id: String,
    status: u16,
    text: String,
}

/// Reads every GET at once, then checks that none carried the hidden tool's name.
async fn assert_nothing_hidden_replayed(gets: Vec<Resuming>) {
    let resumed = futures_util::future::join_all(gets.into_iter().map(Resuming::read)).await;
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
        "a resumed stream carried the hidden tool {HIDDEN_TOOL}:\n{}",
        replayed.join("\n")
    );
}

/// The names of the tools in a `tools/list` answer: a JSON body, or an event stream's
/// `data:` lines.
fn tool_names(reply: &Reply) -> Vec<String> {
    let tools = std::iter::once(reply.text.as_str())
        .chain(
            reply
                .text
                .lines()
                .filter_map(|line| line.strip_prefix("data:")),
        )
        .filter_map(|text| serde_json::from_str::<Value>(text.trim()).ok())
        .find_map(|message| message.get("result")?.get("tools")?.as_array().cloned())
        .unwrap_or_else(|| panic!("no tools/list answer in {reply:?}"));
    tools
        .iter()
        .filter_map(|tool| tool["name"].as_str().map(str::to_owned))
        .collect()
}

#[tokio::test]
async fn resuming_an_answered_list_stream_replays_nothing_the_layer_hid() {
    let surface = Surface::new();
    let setup = Setup::start(surface.router()).await;
    let alice = setup.alice();
    let session = setup.open_session(&alice).await;

    // The list A gets is filtered; rmcp answered it with the hidden tool in it.
    let reply = setup
        .server
        .post(Some(&alice), &in_session(&session), LIST)
        .await;
    assert_eq!(reply.status, 200, "{reply:?}");
    assert_eq!(tool_names(&reply), ["echo"], "{}", reply.text);
    assert!(!reply.text.contains(HIDDEN_TOOL), "{}", reply.text);
    assert_eq!(surface.reached.count("POST tools/list"), 1);

    let gets = setup.resume_everywhere(&alice, &session).await;
    let count = gets.len();
    assert_nothing_hidden_replayed(gets).await;
    assert_eq!(surface.reached.count("GET"), count);
    setup.assert_no_resumption_reached(count);
}

/// An MCP server whose `tools/list` (the hidden tool in it) is answered only once the test
/// lets it, so its stream is still open while the test resumes it.
#[derive(Clone, Default)]
struct HeldList {
    /// Told when a `tools/list` has reached the handler.
    entered: Arc<Notify>,
    /// Told by the test to let the list be answered (or [`AT_MOST`] passes).
    release: Arc<Notify>,
}

impl ServerHandler for HeldList {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        self.entered.notify_one();
        let _ = tokio::time::timeout(AT_MOST, self.release.notified()).await;
        let schema = Arc::new(
            json!({"type": "object", "properties": {}})
                .as_object()
                .cloned()
                .unwrap_or_default(),
        );
        Ok(ListToolsResult::with_all_items(vec![
            Tool::new("echo", "Send the text back", schema.clone()),
            Tool::new(HIDDEN_TOOL, "Delete every record", schema),
        ]))
    }
}

#[tokio::test]
async fn resuming_a_pending_list_stream_takes_nothing_the_layer_hid() {
    let held = HeldList::default();
    let reached = Reached::default();
    let inner = held.clone();
    let service = StreamableHttpService::new(
        move || Ok(inner.clone()),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default(),
    );
    let setup =
        Setup::start(reached.around(Router::new().route("/mcp", any_service(service)))).await;
    let alice = setup.alice();
    let session = setup.open_session(&alice).await;

    // The list is asked for; while rmcp holds it, every plausible id of its stream is resumed.
    let list = {
        let url = setup.server.url.clone();
        let (alice, session) = (alice.clone(), session.clone());
        tokio::spawn(async move {
            let request = reqwest::Client::new()
                .post(&url)
                .header("content-type", "application/json")
                .header("accept", "application/json, text/event-stream")
                .header("mcp-session-id", &session)
                .header("mcp-protocol-version", LEGACY)
                .bearer_auth(&alice)
                .body(LIST);
            Reply::from(request.send().await.expect("post")).await
        })
    };
    tokio::time::timeout(AT_MOST, held.entered.notified())
        .await
        .expect("the list reached rmcp");
    let gets = setup.resume_everywhere(&alice, &session).await;
    let count = gets.len();
    held.release.notify_one();
    assert_nothing_hidden_replayed(gets).await;

    // The list went to the POST, filtered.
    let reply = tokio::time::timeout(AT_MOST, list)
        .await
        .expect("the list answered in time")
        .expect("the list task");
    assert_eq!(reply.status, 200, "{reply:?}");
    assert_eq!(tool_names(&reply), ["echo"], "{}", reply.text);
    assert_eq!(reached.count("POST tools/list"), 1);
    assert_eq!(reached.count("GET"), count);
    setup.assert_no_resumption_reached(count);
}
