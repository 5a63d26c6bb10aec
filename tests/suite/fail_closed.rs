//! Fail closed, end to end: each finding of an attacker's probe of the layer, reproduced
//! through the real stack (an rmcp server, or an axum route where the inner answer has to be
//! broken on purpose, behind the layer on 127.0.0.1, over real HTTP), with the answer the
//! layer now gives asserted exactly. Each test names what the layer did before the fix; each
//! would fail on that behaviour.
//!
//! The probe server (`ProbeServer`, below) routes `resources/read` by scheme, completes
//! prompts, and has a tool whose name is not ASCII (`café`). The policy (`judge`) hides
//! `demo://secret`, the prompt `hidden_prompt` and the tool `hidden_tool` from principal A
//! (`alice`) and allows everything else; principal B (`bob`) is allowed everything, which
//! shows that the server does have what A is not shown.

use crate::common;

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::response::Response;
use axum::routing::{any_service, post};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use bytes::Bytes;
use common::modern::{envelope, modern};
use common::peers::{GatedServer, Reply};
use common::surface::{Reached, Surface, no_such_tool, object, text_answer, text_argument};
use common::tokens::{TestKey, claims};
use common::tools::{DeployCount, mcp_service_counting};
use mcp_gate::policy::{Decision, Evaluation, Policy};
use mcp_gate::{Gate, GateBuilder, Issuer, StaticKeys};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CompleteRequestParams, CompleteResult, CompletionInfo,
    ListToolsResult, PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse,
    ReadResourceResult, Reference, ResourceContents, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Value, json};

const ISSUER: &str = "https://as.example";
/// Principal A's subject: the policy hides things from it.
const ALICE: &str = "alice";
/// Principal B's subject: allowed everything.
const BOB: &str = "bob";
/// A resource the policy hides from A.
const SECRET: &str = "demo://secret";
/// A resource that does not exist, on the same route as [`SECRET`] (and as long).
const MISSING: &str = "demo://secrex";
/// A prompt the policy hides from A.
const HIDDEN_PROMPT: &str = "hidden_prompt";
/// A prompt the server completes for anyone.
const PUBLIC_PROMPT: &str = "public_prompt";
/// A prompt that does not exist.
const MISSING_PROMPT: &str = "nope_prompt";
/// A tool the policy hides from A.
const HIDDEN_TOOL: &str = "hidden_tool";
/// A tool whose name is not ASCII.
const CAFE: &str = "caf\u{e9}";
/// `Mcp-Name` for [`CAFE`] as SEP-2243 wraps it: standard base64 of its UTF-8.
const CAFE_WRAPPED: &str = "=?base64?Y2Fmw6k=?=";
/// JSON-RPC internal error: the layer's answer to an inner answer it cannot read.
const INTERNAL_ERROR: i64 = -32603;
/// JSON-RPC invalid params.
const INVALID_PARAMS: i64 = -32602;
/// MCP's header mismatch (SEP-2243).
const HEADER_MISMATCH: i64 = -32020;

/// The tests' policy: A does not get the hidden things, everything else goes.
fn judge(e: &Evaluation) -> Decision {
    let hidden = e.principal().subject() == Some(ALICE)
        && e.target()
            .name()
            .is_some_and(|name| [SECRET, HIDDEN_PROMPT, HIDDEN_TOOL].contains(&name));
    if hidden {
        Decision::undisclosed("This is not available to you.")
    } else {
        Decision::allow()
    }
}

/// `judge` as the layer's policy.
fn policy(judge: fn(&Evaluation) -> Decision) -> impl Policy {
    move |e: Evaluation| async move { Ok::<_, Infallible>(judge(&e)) }
}

/// A gate with static keys in front of `mcp`.
struct Gated {
    server: GatedServer,
    key: TestKey,
}

impl Gated {
    async fn start(mcp: Router, configure: impl FnOnce(GateBuilder) -> GateBuilder) -> Self {
        let key = TestKey::es256("k1");
        let server = GatedServer::start_trusting(ISSUER, &key, configure, mcp).await;
        Self { server, key }
    }

    /// A valid token of `subject`.
    fn token(&self, subject: &str) -> String {
        let mut claims = claims(ISSUER, &self.server.url, "mcp:read");
        claims["sub"] = json!(subject);
        self.key.mint(&claims)
    }

    /// A legacy request without a session: no `_meta` version, no `Mcp-*` headers.
    async fn legacy(&self, token: &str, method: &str, params: Value) -> Reply {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        self.server.post(Some(token), &[], &body.to_string()).await
    }

    /// [`Gated::modern`] from a client that declares no capabilities.
    async fn modern_plain(
        &self,
        token: &str,
        method: &str,
        params: Value,
        name: Option<&str>,
    ) -> Reply {
        self.modern(token, method, params, name, json!({})).await
    }

    /// A 2026-07-28 request: version and capabilities in `_meta`, the `Mcp-*` headers
    /// mirroring the body (`Mcp-Name` only when `name` is given, as given).
    async fn modern(
        &self,
        token: &str,
        method: &str,
        params: Value,
        name: Option<&str>,
        capabilities: Value,
    ) -> Reply {
        let (body, headers) = modern(1, method, params, name.unwrap_or(""), capabilities);
        let headers: Vec<(&str, &str)> = headers
            .iter()
            .filter(|(header, _)| name.is_some() || *header != "mcp-name")
            .map(|(header, value)| (*header, value.as_str()))
            .collect();
        self.server.post(Some(token), &headers, &body).await
    }
}

/// The JSON-RPC answer (result or error) in a reply: one JSON document, or the `data:` lines
/// of an event stream.
fn answer(reply: &Reply) -> Value {
    if reply.body.is_object() {
        return reply.body.clone();
    }
    reply.streamed_answer()
}

/// Two answers are the same answer, but for the name each was about: same status, same
/// headers (but `date`, and `content-length` when the names differ in length), and the same
/// body once each name is replaced by one placeholder.
fn assert_same_answer(a: &Reply, a_name: &str, b: &Reply, b_name: &str) {
    assert_eq!(a.status, b.status, "status\n{a:?}\n{b:?}");
    let headers = |reply: &Reply| -> Vec<(String, String)> {
        let mut headers: Vec<(String, String)> = reply
            .headers
            .iter()
            .filter(|(name, _)| *name != "date")
            .filter(|(name, _)| a_name.len() == b_name.len() || *name != "content-length")
            .map(|(name, value)| {
                let value = String::from_utf8_lossy(value.as_bytes());
                (name.to_string(), value.into_owned())
            })
            .collect();
        headers.sort();
        headers
    };
    assert_eq!(headers(a), headers(b), "headers\n{a:?}\n{b:?}");
    assert_eq!(
        a.headers.contains_key("content-length"),
        b.headers.contains_key("content-length")
    );
    let placeholder = "\u{1}NAME\u{1}";
    assert_eq!(
        a.text.replace(a_name, placeholder),
        b.text.replace(b_name, placeholder),
        "bodies"
    );
}

/// The probe server: resources routed by scheme, prompt completions, tools `echo` and `café`
/// (whose runs are counted).
#[derive(Clone, Default)]
struct ProbeServer {
    cafe_runs: Arc<AtomicU64>,
}

/// `(last segment of a demo:// URI, text)` of each resource.
const RESOURCES: [(&str, &str); 2] = [
    ("public", "Opening hours: 9 to 5."),
    ("secret", "The launch code is 0000."),
];

/// `(prompt, completions of its argument)` of each prompt.
const PROMPTS: [(&str, &[&str]); 2] = [
    (PUBLIC_PROMPT, &["apples", "apricots", "bananas"]),
    (HIDDEN_PROMPT, &["abort sequence", "arming codes"]),
];

impl ServerHandler for ProbeServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .enable_prompts()
                .enable_completions()
                .build(),
        )
    }

    async fn list_tools(
        &self,
        _page: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let schema = object(json!({"type": "object", "properties": {"text": {"type": "string"}}}));
        Ok(ListToolsResult::with_all_items(vec![
            Tool::new("echo", "Send the text back", schema.clone()),
            Tool::new(CAFE, "Order a coffee", schema),
        ]))
    }

    async fn call_tool(
        &self,
        call: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let text = match &*call.name {
            "echo" => text_argument(&call).unwrap_or_default().to_owned(),
            CAFE => {
                let run = self.cafe_runs.fetch_add(1, Ordering::SeqCst) + 1;
                format!("{CAFE} served (run {run})")
            }
            other => return Err(no_such_tool(other)),
        };
        Ok(text_answer(text))
    }

    /// Routed by scheme: `demo://<x>` is looked up (`-32002` when there is no such `x`); any
    /// other scheme is `-32602`.
    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let uri = request.uri.as_str();
        let Some(path) = uri.strip_prefix("demo://") else {
            return Err(ErrorData::invalid_params(
                "unsupported URI scheme",
                Some(json!({"uri": uri})),
            ));
        };
        match RESOURCES.iter().find(|(name, _)| *name == path) {
            Some((_, text)) => {
                Ok(ReadResourceResult::new(vec![ResourceContents::text(*text, uri)]).into())
            }
            None => Err(ErrorData::resource_not_found(
                format!("no such resource: {uri}"),
                Some(json!({"uri": uri})),
            )),
        }
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        let name = match &request.r#ref {
            Reference::Prompt(prompt) => prompt.name.as_str(),
            _ => return Err(ErrorData::invalid_params("no resource templates", None)),
        };
        let Some((_, values)) = PROMPTS.iter().find(|(prompt, _)| *prompt == name) else {
            return Err(ErrorData::invalid_params(
                format!("unknown prompt {name}"),
                None,
            ));
        };
        let values = values
            .iter()
            .filter(|value| value.starts_with(&request.argument.value))
            .map(|value| (*value).to_owned())
            .collect();
        let info = CompletionInfo::new(values).map_err(|e| ErrorData::internal_error(e, None))?;
        Ok(CompleteResult::new(info))
    }
}

impl ProbeServer {
    /// `/mcp`: the server, stateless (legacy requests need no session) and answering in JSON,
    /// behind `reached`.
    fn router(&self, reached: &Reached) -> Router {
        let server = self.clone();
        let service: StreamableHttpService<_, LocalSessionManager> = StreamableHttpService::new(
            move || Ok(server.clone()),
            Default::default(),
            StreamableHttpServerConfig::default()
                .with_legacy_session_mode(false)
                .with_json_response(true),
        );
        reached.around(Router::new().route("/mcp", any_service(service)))
    }
}

/// The probe server behind a gate with the tests' policy and `configure`.
async fn probe_gate(
    configure: impl FnOnce(GateBuilder) -> GateBuilder,
) -> (Gated, ProbeServer, Reached) {
    let server = ProbeServer::default();
    let reached = Reached::default();
    let gated = Gated::start(server.router(&reached), |b| {
        configure(b.evaluate(policy(judge)))
    })
    .await;
    (gated, server, reached)
}

/// 1. Conceal mode keeps a resource's route: `demo://secret` (hidden) and `demo://secrex`
/// (missing) get byte-identical answers, but for the URI, in both eras. Before, the probe used
/// a made-up scheme, so a server that routes by scheme answered the hidden one `-32602`
/// ("unsupported URI scheme") and the missing one `-32002`: a tell.
#[tokio::test]
async fn concealed_resource_is_answered_exactly_as_a_missing_one_on_its_route() {
    let (gated, _, reached) = probe_gate(GateBuilder::conceal_refusals).await;
    let (alice, bob) = (gated.token(ALICE), gated.token(BOB));
    let read = |uri: &str| json!({"uri": uri});

    // The server routes by scheme, and does hold the secret (B reads it).
    let secret = gated.legacy(&bob, "resources/read", read(SECRET)).await;
    assert_eq!(
        answer(&secret)["result"]["contents"][0]["text"],
        "The launch code is 0000.",
        "{secret:?}"
    );
    let foreign = gated
        .legacy(&alice, "resources/read", read("other://secret"))
        .await;
    assert_eq!(
        answer(&foreign)["error"]["code"],
        INVALID_PARAMS,
        "{foreign:?}"
    );
    assert_eq!(
        answer(&foreign)["error"]["message"],
        "unsupported URI scheme"
    );
    let before = reached.bodies.lock().unwrap().len();

    let hidden = gated.legacy(&alice, "resources/read", read(SECRET)).await;
    let missing = gated.legacy(&alice, "resources/read", read(MISSING)).await;
    assert_eq!(answer(&missing)["error"]["code"], -32002, "{missing:?}");
    assert_eq!(
        answer(&missing)["error"]["message"],
        format!("no such resource: {MISSING}")
    );
    assert_same_answer(&hidden, SECRET, &missing, MISSING);

    let hidden = gated
        .modern_plain(&alice, "resources/read", read(SECRET), Some(SECRET))
        .await;
    let missing = gated
        .modern_plain(&alice, "resources/read", read(MISSING), Some(MISSING))
        .await;
    // rmcp answers a 2026-07-28 peer's missing resource -32602, with its own message.
    assert_eq!(
        answer(&missing)["error"]["code"],
        INVALID_PARAMS,
        "{missing:?}"
    );
    assert_eq!(
        answer(&missing)["error"]["message"],
        format!("no such resource: {MISSING}")
    );
    assert_same_answer(&hidden, SECRET, &missing, MISSING);

    // A's hidden reads never named the secret to the server.
    let bodies = reached.bodies.lock().unwrap()[before..].to_vec();
    assert!(!bodies.iter().any(|b| b.contains(SECRET)), "{bodies:?}");
}

/// `missing` is the server's own answer to a completion of [`MISSING_PROMPT`].
fn assert_unknown_prompt(missing: &Reply) {
    assert_eq!(
        answer(missing)["error"]["message"],
        format!("unknown prompt {MISSING_PROMPT}"),
        "{missing:?}"
    );
}

/// 2. Conceal mode covers `completion/complete`: a hidden prompt's completion is answered as
/// the server answers a prompt it does not have, in both eras. Before, the hidden one got the
/// layer's `-32003` envelope, and the missing one the server's error.
#[tokio::test]
async fn concealed_prompt_completion_is_answered_exactly_as_a_missing_one() {
    let (gated, _, reached) = probe_gate(GateBuilder::conceal_refusals).await;
    let (alice, bob) = (gated.token(ALICE), gated.token(BOB));
    let complete = |prompt: &str| {
        json!({"ref": {"type": "ref/prompt", "name": prompt},
               "argument": {"name": "topic", "value": "a"}})
    };

    let public = gated
        .legacy(&alice, "completion/complete", complete(PUBLIC_PROMPT))
        .await;
    assert_eq!(
        answer(&public)["result"]["completion"]["values"],
        json!(["apples", "apricots"]),
        "{public:?}"
    );
    // The server completes the hidden prompt for B.
    let real = gated
        .legacy(&bob, "completion/complete", complete(HIDDEN_PROMPT))
        .await;
    assert_eq!(
        answer(&real)["result"]["completion"]["values"],
        json!(["abort sequence", "arming codes"]),
        "{real:?}"
    );
    let before = reached.bodies.lock().unwrap().len();

    let hidden = gated
        .legacy(&alice, "completion/complete", complete(HIDDEN_PROMPT))
        .await;
    let missing = gated
        .legacy(&alice, "completion/complete", complete(MISSING_PROMPT))
        .await;
    assert_unknown_prompt(&missing);
    assert_same_answer(&hidden, HIDDEN_PROMPT, &missing, MISSING_PROMPT);

    let hidden = gated
        .modern_plain(&alice, "completion/complete", complete(HIDDEN_PROMPT), None)
        .await;
    let missing = gated
        .modern_plain(
            &alice,
            "completion/complete",
            complete(MISSING_PROMPT),
            None,
        )
        .await;
    assert_unknown_prompt(&missing);
    assert_same_answer(&hidden, HIDDEN_PROMPT, &missing, MISSING_PROMPT);

    let bodies = reached.bodies.lock().unwrap()[before..].to_vec();
    assert!(
        !bodies.iter().any(|b| b.contains(HIDDEN_PROMPT)),
        "{bodies:?}"
    );
    for reply in [&hidden, &missing] {
        assert!(
            !reply.text.contains(mcp_gate::denial::ENVELOPE_KEY),
            "{reply:?}"
        );
    }
}

/// An inner `tools/list` answer as broken as the `x-case` header asks (an axum route, not
/// rmcp: rmcp never answers this way).
async fn broken_lists(headers: http::HeaderMap, body: Bytes) -> Response {
    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let id = request["id"].clone();
    let tool = |name: &str| json!({"name": name, "inputSchema": {"type": "object"}});
    let list = json!({"jsonrpc": "2.0", "id": id,
                      "result": {"tools": [tool(HIDDEN_TOOL), tool("public_tool")]}})
    .to_string();
    let cut = list[..list.find(HIDDEN_TOOL).unwrap() + HIDDEN_TOOL.len() + 1].to_owned();
    let answer = |content_type: &str, body: Body| {
        Response::builder()
            .status(200)
            .header("content-type", content_type)
            .body(body)
            .unwrap()
    };
    let case = headers
        .get("x-case")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    match case {
        "good" => answer("application/json", Body::from(list)),
        "text/plain" => answer("text/plain", Body::from(list)),
        "not json" => answer("application/json", Body::from(cut)),
        "tools object" => answer(
            "application/json",
            Body::from(
                json!({"jsonrpc": "2.0", "id": id,
                       "result": {"tools": {HIDDEN_TOOL: tool(HIDDEN_TOOL)}}})
                .to_string(),
            ),
        ),
        "another id" => answer(
            "application/json",
            Body::from(list.replacen(&format!("\"id\":{id}"), "\"id\":4242", 1)),
        ),
        "event not json" => answer(
            "text/event-stream",
            Body::from(format!("event: message\ndata: {cut}\n\n")),
        ),
        "never ends" => {
            let first = futures_util::stream::once(async move { Ok::<_, Infallible>(cut) });
            let stream = futures_util::StreamExt::chain(first, futures_util::stream::pending());
            answer("application/json", Body::from_stream(stream))
        }
        "no head" => std::future::pending().await,
        other => panic!("no case {other}"),
    }
}

/// 3. An inner list answer the layer cannot read whole (a content type it does not read, JSON
/// that does not parse, entries that are not an array, a response to another id, an event
/// that is not JSON, a body that never ends) is refused with the layer's `-32603`, never
/// passed on. Before, the text/plain answer, the object of tools, the other id's response and
/// the event were passed on unfiltered (the hidden tool shown), and the endless body hung the
/// call forever.
#[tokio::test]
async fn unreadable_inner_list_answers_are_refused_never_passed_on() {
    let gated = Gated::start(Router::new().route("/mcp", post(broken_lists)), |b| {
        b.evaluate(policy(judge))
            .inner_read_timeout(Duration::from_millis(300))
    })
    .await;
    let alice = gated.token(ALICE);
    let list = |case: &'static str| {
        let server = &gated.server;
        let alice = alice.clone();
        async move {
            let body = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}"#;
            let started = Instant::now();
            let reply = tokio::time::timeout(
                Duration::from_secs(10),
                server.post(Some(&alice), &[("x-case", case)], body),
            )
            .await
            .unwrap_or_else(|_| panic!("{case}: no answer within 10 s"));
            (reply, started.elapsed())
        }
    };

    // A list the layer can read is filtered: the route and the policy work.
    let (good, _) = list("good").await;
    assert_eq!(good.status, 200, "{good:?}");
    let names: Vec<&str> = good.body["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("{good:?}"))
        .iter()
        .map(|tool| tool["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["public_tool"]);

    for case in [
        "text/plain",
        "not json",
        "tools object",
        "another id",
        "event not json",
        "never ends",
    ] {
        let (reply, took) = list(case).await;
        assert_eq!(reply.status, 200, "{case}: {reply:?}");
        assert_eq!(
            reply.headers["content-type"], "application/json",
            "{case}: {reply:?}"
        );
        assert_eq!(
            reply.body["error"]["code"], INTERNAL_ERROR,
            "{case}: {reply:?}"
        );
        assert_eq!(reply.body["id"], 1, "{case}: {reply:?}");
        assert!(reply.body.get("result").is_none(), "{case}: {reply:?}");
        assert!(!reply.text.contains(HIDDEN_TOOL), "{case}: {reply:?}");
        if case == "never ends" {
            // Refused at the configured limit, not after some other wait.
            assert!(
                took >= Duration::from_millis(300) && took < Duration::from_secs(5),
                "{case}: {took:?}"
            );
        }
    }
}

/// An inner server that never even starts its answer to a list is waited for no longer than
/// the configured limit either: `inner_read_timeout` is documented as the longest the layer
/// waits for an inner answer it must read whole.
#[tokio::test]
async fn inner_list_answer_whose_head_never_comes_is_refused_in_time() {
    let gated = Gated::start(Router::new().route("/mcp", post(broken_lists)), |b| {
        b.evaluate(policy(judge))
            .inner_read_timeout(Duration::from_millis(300))
    })
    .await;
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}"#;
    let reply = tokio::time::timeout(
        Duration::from_secs(5),
        gated
            .server
            .post(Some(&gated.token(ALICE)), &[("x-case", "no head")], body),
    )
    .await
    .expect("an answer within 5 s, with a 300 ms limit");
    assert_eq!(reply.status, 200, "{reply:?}");
    assert_eq!(reply.body["error"]["code"], INTERNAL_ERROR, "{reply:?}");
}

/// 4. `Bearer` glued to its token by a tab is a malformed bearer credential: 400
/// `invalid_request`. Before: 401 as an unsupported scheme, with no error code.
#[tokio::test]
async fn bearer_followed_by_a_tab_is_an_invalid_request() {
    let gated = Gated::start(
        Router::new().nest_service("/mcp", common::tools::mcp_service()),
        |b| b.evaluate(policy(judge)),
    )
    .await;
    let token = gated.token(BOB);
    let call = |authorization: String| {
        let url = gated.server.url.clone();
        async move {
            let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                              "params": {"name": "echo", "arguments": {"text": "hi"}}});
            let response = reqwest::Client::new()
                .post(url)
                .header("content-type", "application/json")
                .header("accept", "application/json, text/event-stream")
                .header("authorization", authorization)
                .json(&body)
                .send()
                .await
                .unwrap();
            Reply::from(response).await
        }
    };
    let spaced = call(format!("Bearer {token}")).await;
    assert_eq!(spaced.status, 200, "{spaced:?}");

    let tabbed = call(format!("Bearer\t{token}")).await;
    assert_eq!(tabbed.status, 400, "{tabbed:?}");
    let challenge = tabbed.www_authenticate.as_deref().unwrap_or_default();
    assert!(challenge.starts_with("Bearer "), "{challenge}");
    assert!(
        challenge.contains(r#"error="invalid_request""#),
        "{challenge}"
    );
}

/// 5. `typ: application/jwt` is the media type `JWT` names (RFC 7515 §4.1.9): accepted like
/// it. Before: 401, unsupported token type.
#[tokio::test]
async fn typ_application_jwt_is_accepted_like_jwt() {
    let gated = Gated::start(
        Router::new().nest_service("/mcp", common::tools::mcp_service()),
        |b| b.evaluate(policy(judge)),
    )
    .await;
    let claims = claims(ISSUER, &gated.server.url, "mcp:read");
    let with_typ = |typ: &str| {
        let mut header = gated.key.header();
        header.typ = Some(typ.to_owned());
        gated.key.mint_with(&header, &claims)
    };
    for typ in ["JWT", "application/jwt"] {
        let reply = gated
            .server
            .call_tool(Some(&with_typ(typ)), "whoami", json!({}))
            .await;
        assert_eq!(reply.status, 200, "{typ}: {reply:?}");
        let me: Value = serde_json::from_str(reply.tool_text()).unwrap();
        assert_eq!(me["subject"], "user-1", "{typ}: {me}");
    }
    // Still a checked header: another media type is refused.
    let reply = gated
        .server
        .call_tool(Some(&with_typ("text/jwt")), "whoami", json!({}))
        .await;
    assert_eq!(reply.status, 401, "{reply:?}");
}

/// Opaque tokens checked by introspection, against a local stand-in.
#[cfg(feature = "introspection")]
mod introspected {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};

    use axum::extract::{Form, State};
    use mcp_gate::Introspection;
    use mcp_gate::policy::allow_all;

    use super::*;

    /// The introspection endpoint of the authorization server, stood in for by a small axum
    /// server on 127.0.0.1: the answers under test (a fractional `exp`) are ones a real
    /// authorization server gives but the test's `oidc-provider` cannot be made to. It records
    /// every token it is asked about.
    struct Endpoint {
        url: String,
        asked: Arc<Mutex<Vec<String>>>,
        /// The gate's resource, for `aud` (known once the gate has bound its port).
        audience: Arc<OnceLock<String>>,
        task: tokio::task::JoinHandle<()>,
    }

    impl Drop for Endpoint {
        fn drop(&mut self) {
            self.task.abort();
        }
    }

    type Shared = (Arc<Mutex<Vec<String>>>, Arc<OnceLock<String>>);

    fn now() -> f64 {
        common::tokens::now() as f64
    }

    async fn introspect(
        State((asked, audience)): State<Shared>,
        Form(form): Form<HashMap<String, String>>,
    ) -> axum::Json<Value> {
        let token = form.get("token").cloned().unwrap_or_default();
        asked.lock().unwrap().push(token.clone());
        let active = |exp: Value| {
            json!({"active": true, "exp": exp, "iat": now() - 10.0,
                   "iss": ISSUER, "aud": audience.get().unwrap(),
                   "sub": "opaque-user", "client_id": "opaque-client", "scope": "mcp:read"})
        };
        axum::Json(match token.as_str() {
            "fractional-exp" => active(json!(now() + 300.5)),
            "fractional-expired" => active(json!(now() - 1000.5)),
            "v2.local.abc" => active(json!(common::tokens::now() + 300)),
            _ => json!({"active": false}),
        })
    }

    impl Endpoint {
        async fn start() -> Self {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let url = format!("http://{}/introspect", listener.local_addr().unwrap());
            let asked = Arc::new(Mutex::new(Vec::new()));
            let audience = Arc::new(OnceLock::new());
            let app = Router::new()
                .route("/introspect", post(introspect))
                .with_state((asked.clone(), audience.clone()));
            let task = tokio::spawn(async move {
                let _ = axum::serve(listener, app).await;
            });
            Self {
                url,
                asked,
                audience,
                task,
            }
        }

        fn times_asked(&self, token: &str) -> usize {
            self.asked
                .lock()
                .unwrap()
                .iter()
                .filter(|t| *t == token)
                .count()
        }

        /// The example server behind a gate that takes JWTs of `key` and introspects the rest
        /// here.
        async fn gate(&self, key: &TestKey) -> GatedServer {
            let keys = StaticKeys::from_jwks_json(&key.jwks_json()).unwrap();
            let (url, audience) = (self.url.clone(), self.audience.clone());
            GatedServer::start(move |resource| {
                audience.set(resource.to_owned()).unwrap();
                Gate::builder()
                    .issuer(Issuer::with_keys(ISSUER, keys))
                    .evaluate(allow_all())
                    .introspection(Introspection::new(url, "gateway", "gateway-secret"))
            })
            .await
        }
    }

    fn whoami(reply: &Reply) -> Value {
        assert_eq!(reply.status, 200, "{reply:?}");
        serde_json::from_str(reply.tool_text()).unwrap()
    }

    /// 6. An introspection answer whose `exp` has a fraction (a NumericDate may) is read in
    /// whole seconds: the call is admitted, and an `exp` in the past is still expired.
    /// Before: 503, the answer unreadable.
    #[tokio::test]
    async fn introspection_answer_with_a_fractional_exp_is_admitted() {
        let endpoint = Endpoint::start().await;
        let server = endpoint.gate(&TestKey::es256("k1")).await;
        let reply = server
            .call_tool(Some("fractional-exp"), "whoami", json!({}))
            .await;
        let me = whoami(&reply);
        assert_eq!(me["subject"], "opaque-user", "{me}");
        assert_eq!(me["client_id"], "opaque-client", "{me}");
        assert_eq!(endpoint.times_asked("fractional-exp"), 1);

        let expired = server
            .call_tool(Some("fractional-expired"), "whoami", json!({}))
            .await;
        assert_eq!(expired.status, 401, "{expired:?}");
        let challenge = expired.www_authenticate.unwrap_or_default();
        assert!(
            challenge.contains(r#"error="invalid_token""#),
            "{challenge}"
        );
        assert_eq!(endpoint.times_asked("fractional-expired"), 1);
    }

    /// 7. With introspection configured, an opaque token that holds two dots but no JWT
    /// header (`v2.local.abc`) is introspected, and admitted when active; a real JWT is still
    /// verified locally. Before: refused as a malformed JWT, never introspected.
    #[tokio::test]
    async fn dotted_opaque_token_is_introspected() {
        let endpoint = Endpoint::start().await;
        let key = TestKey::es256("k1");
        let server = endpoint.gate(&key).await;
        let reply = server
            .call_tool(Some("v2.local.abc"), "whoami", json!({}))
            .await;
        let me = whoami(&reply);
        assert_eq!(me["subject"], "opaque-user", "{me}");
        assert_eq!(endpoint.times_asked("v2.local.abc"), 1);

        let jwt = key.mint(&claims(ISSUER, &server.url, "mcp:read"));
        let me = whoami(&server.call_tool(Some(&jwt), "whoami", json!({})).await);
        assert_eq!(me["subject"], "user-1", "{me}");
        assert_eq!(endpoint.times_asked(&jwt), 0, "a JWT is not introspected");
    }
}

/// The confirmation asked for on `deploy`; everything else is allowed.
fn ask_before_deploy(e: &Evaluation) -> Decision {
    if e.tool() == Some("deploy") {
        Decision::ask("Deploy to production?")
    } else {
        Decision::allow()
    }
}

/// 8. A state issued to a modern request is never accepted on a legacy one, whatever version
/// the legacy request names in its params: refused `-32602`, and the tool does not run. The
/// same state then still serves the modern retry it was issued for. Before: a legacy request
/// without a session took its version from `params.protocolVersion`, so it matched the modern
/// binding, and the confirmation (which the legacy client never saw) let the call run.
#[tokio::test]
async fn a_legacy_request_cannot_borrow_a_modern_confirmation_state() {
    let deploys = DeployCount::default();
    let gated = Gated::start(
        Router::new().nest_service("/mcp", mcp_service_counting(deploys.clone())),
        |b| b.evaluate(policy(ask_before_deploy)),
    )
    .await;
    let token = gated.token(ALICE);
    let params = json!({"name": "deploy", "arguments": {"env": "prod"},
                        "protocolVersion": "2026-07-28"});
    let form = json!({"elicitation": {"form": {}}});
    let first = gated
        .modern(
            &token,
            "tools/call",
            params.clone(),
            Some("deploy"),
            form.clone(),
        )
        .await;
    assert_eq!(first.status, 200, "{first:?}");
    let result = &first.body["result"];
    assert_eq!(result["resultType"], "input_required", "{first:?}");
    assert!(
        result["inputRequests"]["mcp-gate/confirm"].is_object(),
        "{result}"
    );
    let state = result["requestState"].as_str().unwrap().to_owned();

    let mut retry = params.clone();
    retry["requestState"] = json!(state);
    retry["inputResponses"] =
        json!({"mcp-gate/confirm": {"action": "accept", "content": {"approve": true}}});
    let legacy = gated.legacy(&token, "tools/call", retry.clone()).await;
    assert_eq!(legacy.status, 400, "{legacy:?}");
    assert_eq!(legacy.body["error"]["code"], INVALID_PARAMS, "{legacy:?}");
    assert_eq!(
        legacy.body["error"]["message"], "the request state was issued for another request",
        "{legacy:?}"
    );
    assert_eq!(deploys.load(Ordering::SeqCst), 0, "the tool did not run");

    // The state was good, and is still unused: the modern retry it was issued for runs.
    let modern = gated
        .modern(&token, "tools/call", retry, Some("deploy"), form)
        .await;
    assert_eq!(modern.status, 200, "{modern:?}");
    assert!(
        modern.tool_text().starts_with("deployed to prod"),
        "{modern:?}"
    );
    assert_eq!(deploys.load(Ordering::SeqCst), 1);
}

/// The `params` of the last POST that reached the inner server.
fn last_forwarded(reached: &Reached) -> Value {
    let bodies = reached.bodies.lock().unwrap();
    let body: Value = serde_json::from_str(bodies.last().expect("a forwarded POST")).unwrap();
    body["params"].clone()
}

/// 9. The layer's own input responses (`mcp-gate/*`) never reach the inner service: a
/// first-round allowed call that carries one beside the application's reaches the server
/// with the application's alone, in both eras. Before: forwarded whole.
#[tokio::test]
async fn the_layers_input_keys_never_reach_the_inner_service() {
    let responses = json!({
        "mcp-gate/confirm": {"action": "accept", "content": {"approve": true}},
        "app/key": {"action": "accept", "content": {"colour": "blue"}},
    });
    let params = json!({"name": "echo", "arguments": {"text": "still here"},
                        "inputResponses": responses});

    // Modern, to the surface server (rmcp) through its recorder.
    let surface = Surface::new();
    let gated = Gated::start(surface.router(), |b| b.evaluate(policy(judge))).await;
    let token = gated.token(ALICE);
    let reply = gated
        .modern_plain(&token, "tools/call", params.clone(), Some("echo"))
        .await;
    assert_eq!(reply.status, 200, "{reply:?}");
    assert_eq!(
        answer(&reply)["result"]["content"][0]["text"],
        "still here",
        "{reply:?}"
    );
    assert_eq!(surface.reached.count("POST tools/call"), 1);
    let forwarded = last_forwarded(&surface.reached);
    assert_eq!(
        forwarded["inputResponses"],
        json!({"app/key": responses["app/key"]}),
        "{forwarded}"
    );
    assert_eq!(forwarded["arguments"], params["arguments"]);
    assert!(!surface.reached.any_body_contains("mcp-gate/"));

    // Legacy, to the probe server (stateless: no session needed).
    let (gated, _, reached) = probe_gate(|b| b).await;
    let reply = gated
        .legacy(&gated.token(ALICE), "tools/call", params.clone())
        .await;
    assert_eq!(reply.status, 200, "{reply:?}");
    assert_eq!(answer(&reply)["result"]["content"][0]["text"], "still here");
    let forwarded = last_forwarded(&reached);
    assert_eq!(
        forwarded["inputResponses"],
        json!({"app/key": responses["app/key"]}),
        "{forwarded}"
    );
    assert!(!reached.any_body_contains("mcp-gate/"));
}

/// A payment credential that carries the call's `blob` argument; everything else is allowed.
fn credential_for_blob(e: &Evaluation) -> Decision {
    match e.arguments().and_then(|arguments| arguments.get("blob")) {
        Some(blob) => Decision::credential([json!({"type": "payment", "blob": blob})]),
        None => Decision::allow(),
    }
}

/// The value of `name="..."` in a challenge.
fn challenge_param<'a>(challenge: &'a str, name: &str) -> Option<&'a str> {
    let start = challenge.find(&format!("{name}=\""))? + name.len() + 2;
    let end = challenge[start..].find('"')? + start;
    Some(&challenge[start..end])
}

/// The `authorization_details` an `authorization_remediation` value carries.
fn remediation_details(encoded: &str) -> Value {
    let json = URL_SAFE_NO_PAD
        .decode(encoded)
        .unwrap_or_else(|e| panic!("not base64url without padding ({e}): {encoded:.80}"));
    let remedy: Value = serde_json::from_slice(&json).unwrap();
    remedy["authorization_details"].clone()
}

/// 10. A credential remedy too large for a header leaves `WWW-Authenticate`: a legacy call
/// gets a 401 whose header is small and whose JSON body carries the whole remedy; a modern
/// call gets it in the result's envelope. A small remedy still rides in the header. Before: a
/// 133 kB `WWW-Authenticate`.
#[tokio::test]
async fn a_large_credential_remedy_never_goes_in_the_header() {
    let gated = Gated::start(
        Router::new().nest_service("/mcp", common::tools::mcp_service()),
        |b| b.evaluate(policy(credential_for_blob)),
    )
    .await;
    let token = gated.token(ALICE);
    let call = |blob: &str| json!({"name": "echo", "arguments": {"text": "pay", "blob": blob}});
    let details = |blob: &str| json!([{"type": "payment", "blob": blob}]);
    let large: String = (0..100_000)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();

    let legacy = gated.legacy(&token, "tools/call", call(&large)).await;
    assert_eq!(legacy.status, 401, "{:.300}", legacy.text);
    let challenge = legacy.www_authenticate.clone().unwrap();
    assert!(challenge.len() < 5_000, "{} bytes", challenge.len());
    assert!(
        challenge.contains(r#"error="insufficient_authorization""#),
        "{challenge}"
    );
    assert!(
        !challenge.contains("authorization_remediation"),
        "{challenge}"
    );
    let encoded = legacy.body["authorization_remediation"]
        .as_str()
        .unwrap_or_else(|| panic!("{:.300}", legacy.text));
    assert_eq!(remediation_details(encoded), details(&large));

    let modern = gated
        .modern_plain(&token, "tools/call", call(&large), Some("echo"))
        .await;
    assert_eq!(modern.status, 200, "{:.300}", modern.text);
    assert!(modern.www_authenticate.is_none());
    let result = &modern.body["result"];
    assert_eq!(result["isError"], true, "{:.300}", modern.text);
    let hint = &envelope(result)["remediationHints"][0];
    assert_eq!(hint["type"], "authorization_remediation");
    assert_eq!(hint["authorization_details"], details(&large));

    // A small remedy: in the header, for either era.
    let small = "small blob";
    let legacy = gated.legacy(&token, "tools/call", call(small)).await;
    let modern = gated
        .modern_plain(&token, "tools/call", call(small), Some("echo"))
        .await;
    for reply in [legacy, modern] {
        assert_eq!(reply.status, 401, "{reply:?}");
        let challenge = reply.www_authenticate.unwrap();
        let encoded = challenge_param(&challenge, "authorization_remediation")
            .unwrap_or_else(|| panic!("{challenge}"));
        assert_eq!(remediation_details(encoded), details(small));
    }
}

/// 11. SEP-2243: `Mcp-Name` is compared as the server reads it. A tool named `café` called
/// with its name base64-wrapped is let through, and rmcp (which decodes the same way) runs
/// it; a body name that literally is a wrapper, sent with that same literal header, is
/// refused `-32020` by the layer, before the server. Before: the first got 400 `-32020`.
#[tokio::test]
async fn mcp_name_is_compared_as_the_server_reads_it() {
    let (gated, server, reached) = probe_gate(|b| b).await;
    let token = gated.token(ALICE);
    let call = |name: &str| json!({"name": name, "arguments": {"text": "x"}});

    let reply = gated
        .modern_plain(&token, "tools/call", call(CAFE), Some(CAFE_WRAPPED))
        .await;
    assert_eq!(reply.status, 200, "{reply:?}");
    assert_eq!(
        answer(&reply)["result"]["content"][0]["text"],
        format!("{CAFE} served (run 1)")
    );
    assert_eq!(server.cafe_runs.load(Ordering::SeqCst), 1);
    assert_eq!(reached.count("POST tools/call"), 1);

    let literal = "=?base64?ZWNobw==?=";
    let reply = gated
        .modern_plain(&token, "tools/call", call(literal), Some(literal))
        .await;
    assert_eq!(reply.status, 400, "{reply:?}");
    assert_eq!(reply.body["error"]["code"], HEADER_MISMATCH, "{reply:?}");
    assert_eq!(
        reply.body["error"]["message"],
        "the mcp-name header does not match the body"
    );
    assert_eq!(
        reached.count("POST tools/call"),
        1,
        "refused before the server"
    );
}
