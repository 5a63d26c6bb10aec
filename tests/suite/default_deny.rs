//! Default deny, end to end: each surface a gateway can leak through, tried against a real
//! rmcp server (tests/common/surface.rs) behind the layer on 127.0.0.1, with a recorder
//! between the two that says what actually reached the inner service.
//!
//! The policy hides `demo://secret`, `demo://payroll`, `skill://secret/SKILL.md` and the tool
//! `delete_everything` from principal A (subject `alice`), in every phase, and allows the rest.
//! Principal B (`bob`, same issuer and client) is allowed everything.

use crate::common;

use std::convert::Infallible;
use std::time::Duration;

use common::modern::modern;
use common::peers::{GatedServer, Reply, Sdk, run_client};
use common::surface::{DIRECTORY, PAYROLL, PUBLIC, PUBLIC_SKILL, SECRET, SECRET_SKILL, Surface};
use common::tokens::{TestKey, claims};
use mcp_gate::GateBuilder;
use mcp_gate::policy::{Decision, Evaluation};
use serde_json::{Value, json};

const ISSUER: &str = "https://as.example";
/// Principal A's subject: the policy hides things from it.
const ALICE: &str = "alice";
/// Principal B's subject: allowed everything.
const BOB: &str = "bob";
const CLIENT: &str = "client-a";
/// What the policy hides from A.
const HIDDEN: [&str; 4] = [SECRET, PAYROLL, SECRET_SKILL, "delete_everything"];
/// What the MCP endpoint takes, as the layer's `Allow` says it.
const ALLOW: &str = "POST, GET, DELETE, OPTIONS";
/// The legacy protocol version the hand-written session requests speak.
const LEGACY: &str = "2025-11-25";

/// The tests' policy, in every phase: A does not get the hidden things, everything else goes.
fn judge(e: &Evaluation) -> Decision {
    let hidden = e.principal().subject() == Some(ALICE)
        && e.target().name().is_some_and(|name| HIDDEN.contains(&name));
    if hidden {
        Decision::undisclosed("This is not available to you.")
    } else {
        Decision::allow()
    }
}

/// The surface server behind a gate with the tests' policy.
struct Setup {
    server: GatedServer,
    surface: Surface,
    key: TestKey,
}

impl Setup {
    async fn start(configure: impl FnOnce(GateBuilder) -> GateBuilder) -> Self {
        let surface = Surface::new();
        let router = surface.router();
        Self::start_with(surface, router, configure).await
    }

    async fn start_with(
        surface: Surface,
        router: axum::Router,
        configure: impl FnOnce(GateBuilder) -> GateBuilder,
    ) -> Self {
        let key = TestKey::es256("k1");
        let server = GatedServer::start_trusting(
            ISSUER,
            &key,
            |builder| {
                configure(
                    builder.evaluate(|e: Evaluation| async move { Ok::<_, Infallible>(judge(&e)) }),
                )
            },
            router,
        )
        .await;
        Self {
            server,
            surface,
            key,
        }
    }

    /// A valid token of `subject` through `client`.
    fn token(&self, subject: &str, client: &str) -> String {
        let mut claims = claims(ISSUER, &self.server.url, "mcp:read");
        claims["sub"] = json!(subject);
        claims["client_id"] = json!(client);
        self.key.mint(&claims)
    }

    fn reached(&self) -> Vec<String> {
        self.surface.reached.log()
    }

    /// A 2026-07-28 request: version and capabilities in `_meta`, the `Mcp-*` headers
    /// mirroring the body (`Mcp-Name` only when the method names something).
    async fn modern(&self, token: &str, method: &str, params: Value, name: Option<&str>) -> Reply {
        let request = modern(7, method, params, name.unwrap_or(""), json!({}));
        self.server
            .post_modern(token, &request, name.is_some())
            .await
    }

    /// A legacy `initialize` (no session yet).
    async fn initialize(&self, token: &str) -> Reply {
        let body = json!({
            "jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": LEGACY, "capabilities": {},
                       "clientInfo": {"name": "default-deny", "version": "0"}}
        });
        self.server.post(Some(token), &[], &body.to_string()).await
    }

    /// Opens a legacy session by hand: `initialize`, then `notifications/initialized`.
    async fn open_session(&self, token: &str) -> String {
        let reply = self.initialize(token).await;
        assert_eq!(reply.status, 200, "{reply:?}");
        let session = reply.headers["mcp-session-id"].to_str().unwrap().to_owned();
        let reply = self
            .server
            .post(
                Some(token),
                &session_headers(&session),
                r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            )
            .await;
        assert_eq!(reply.status, 202, "{reply:?}");
        session
    }

    /// A legacy `tools/call` inside `session`.
    async fn call_in_session(&self, token: &str, session: &str, tool: &str) -> Reply {
        let arguments = if tool == "echo" {
            json!({"text": "still mine"})
        } else {
            json!({})
        };
        let body = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                          "params": {"name": tool, "arguments": arguments}});
        self.server
            .post(Some(token), &session_headers(session), &body.to_string())
            .await
    }

    /// Any HTTP method, with an optional token, headers and body.
    async fn send(
        &self,
        method: &str,
        token: Option<&str>,
        headers: &[(&str, &str)],
        body: Option<&str>,
    ) -> Reply {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let mut request = reqwest::Client::new().request(method, &self.server.url);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request
                .header("content-type", "application/json")
                .body(body.to_owned());
        }
        Reply::from(request.send().await.expect("send")).await
    }
}

fn session_headers(session: &str) -> Vec<(&'static str, &str)> {
    vec![
        ("mcp-session-id", session),
        ("mcp-protocol-version", LEGACY),
    ]
}

/// The JSON-RPC messages of a body: one JSON document, or the `data:` lines of an event
/// stream (incomplete lines are skipped).
fn messages(text: &str) -> Vec<Value> {
    if let Ok(message) = serde_json::from_str::<Value>(text) {
        return vec![message];
    }
    text.lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .filter_map(|data| serde_json::from_str(data.trim()).ok())
        .collect()
}

/// The answer (result or error) in a reply, JSON or event stream.
fn answer(reply: &Reply) -> Value {
    messages(&reply.text)
        .into_iter()
        .find(|m| m.get("result").is_some() || m.get("error").is_some())
        .unwrap_or_else(|| panic!("no JSON-RPC answer in {reply:?}"))
}

/// The `member` of every entry of a list answer.
fn listed(reply: &Reply, entries: &str, member: &str) -> Vec<String> {
    let answer = answer(reply);
    answer["result"][entries]
        .as_array()
        .unwrap_or_else(|| panic!("no {entries} in {answer}"))
        .iter()
        .map(|entry| entry[member].as_str().unwrap().to_owned())
        .collect()
}

/// A refusal by the policy: a JSON-RPC error with the layer's default denial code, no result.
fn assert_refused(reply: &Reply) {
    assert_eq!(reply.status, 200, "{reply:?}");
    let answer = answer(reply);
    assert!(answer.get("result").is_none(), "{answer}");
    assert_eq!(
        answer["error"]["code"],
        mcp_gate::denial::DEFAULT_DENIAL_CODE,
        "{answer}"
    );
}

/// The layer's one answer to a session id that is not the caller's.
fn assert_session_not_found(reply: &Reply, what: &str) {
    assert_eq!(reply.status, 404, "{what}: {reply:?}");
    assert_eq!(
        reply.body,
        json!({"jsonrpc": "2.0", "id": null,
               "error": {"code": -32001, "message": "Session not found"}}),
        "{what}: {}",
        reply.text
    );
}

#[tokio::test]
async fn subscriptions_listen_to_a_hidden_resource_is_refused_before_the_server() {
    let setup = Setup::start(|b| b).await;
    let alice = setup.token(ALICE, CLIENT);
    let listen = |uris: Value| json!({"notifications": {"resourceSubscriptions": uris}});

    // Both URIs hidden, then one hidden among allowed ones: the whole listen is refused.
    for uris in [json!([SECRET, PAYROLL]), json!([PUBLIC, SECRET])] {
        // A forwarded listen would be an event stream that stays open: bound the wait.
        let reply = tokio::time::timeout(
            Duration::from_secs(10),
            setup.modern(&alice, "subscriptions/listen", listen(uris.clone()), None),
        )
        .await
        .unwrap_or_else(|_| panic!("{uris}: no complete answer within 10 s (forwarded?)"));
        assert_refused(&reply);
        assert!(
            !reply
                .text
                .contains("notifications/subscriptions/acknowledged"),
            "{uris}: {}",
            reply.text
        );
    }
    assert_eq!(setup.surface.reached.count("POST subscriptions/listen"), 0);
    assert!(
        setup.reached().is_empty(),
        "nothing reached the server: {:?}",
        setup.reached()
    );

    // Only the public resource: forwarded, and rmcp acknowledges it on the open stream.
    let (body, headers) = modern(
        8,
        "subscriptions/listen",
        listen(json!([PUBLIC])),
        "",
        json!({}),
    );
    let mut request = reqwest::Client::new()
        .post(&setup.server.url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .bearer_auth(&alice)
        .body(body);
    for (name, value) in headers.iter().filter(|(name, _)| *name != "mcp-name") {
        request = request.header(*name, value);
    }
    let mut response = request.send().await.unwrap();
    assert_eq!(response.status(), 200);
    let acknowledged = tokio::time::timeout(Duration::from_secs(10), async {
        let mut text = String::new();
        loop {
            let chunk =
                response.chunk().await.unwrap().unwrap_or_else(|| {
                    panic!("the stream ended before an acknowledgement: {text}")
                });
            text.push_str(&String::from_utf8_lossy(&chunk));
            if let Some(ack) = messages(&text)
                .into_iter()
                .find(|m| m["method"] == "notifications/subscriptions/acknowledged")
            {
                return ack;
            }
        }
    })
    .await
    .expect("acknowledged within 10 s");
    assert_eq!(
        acknowledged["params"]["notifications"]["resourceSubscriptions"],
        json!([PUBLIC]),
        "{acknowledged}"
    );
    assert_eq!(setup.reached(), ["POST subscriptions/listen"]);
}

#[tokio::test]
async fn legacy_subscribe_to_a_hidden_resource_is_refused_before_the_server() {
    let setup = Setup::start(|b| b).await;
    let alice = setup.token(ALICE, CLIENT);
    let session = setup.open_session(&alice).await;
    let subscribe = |method: &str, uri: &str| {
        json!({"jsonrpc": "2.0", "id": 4, "method": method, "params": {"uri": uri}}).to_string()
    };
    for uri in [SECRET, PAYROLL] {
        let reply = setup
            .server
            .post(
                Some(&alice),
                &session_headers(&session),
                &subscribe("resources/subscribe", uri),
            )
            .await;
        assert_refused(&reply);
    }
    assert_eq!(setup.surface.reached.count("POST resources/subscribe"), 0);
    assert!(!setup.surface.reached.any_body_contains(SECRET));
    // The public resource: rmcp accepts the subscription, and the unsubscription.
    for method in ["resources/subscribe", "resources/unsubscribe"] {
        let reply = setup
            .server
            .post(
                Some(&alice),
                &session_headers(&session),
                &subscribe(method, PUBLIC),
            )
            .await;
        assert_eq!(reply.status, 200, "{reply:?}");
        assert_eq!(
            answer(&reply)["result"],
            json!({}),
            "{method}: {}",
            reply.text
        );
        assert_eq!(setup.surface.reached.count(&format!("POST {method}")), 1);
    }
}

#[tokio::test]
async fn directory_read_lists_only_what_the_caller_may_see() {
    let setup = Setup::start(|b| b).await;
    let read = json!({"uri": DIRECTORY});
    let seen = setup
        .modern(
            &setup.token(ALICE, CLIENT),
            "resources/directory/read",
            read.clone(),
            None,
        )
        .await;
    assert_eq!(seen.status, 200, "{seen:?}");
    assert_eq!(listed(&seen, "resources", "uri"), [PUBLIC]);
    assert!(!seen.text.contains(SECRET) && !seen.text.contains(PAYROLL));
    // The server does list all three: B, whom the policy hides nothing from, sees them.
    let all = setup
        .modern(
            &setup.token(BOB, CLIENT),
            "resources/directory/read",
            read,
            None,
        )
        .await;
    assert_eq!(listed(&all, "resources", "uri"), [PUBLIC, SECRET, PAYROLL]);
    assert_eq!(
        setup.surface.reached.count("POST resources/directory/read"),
        2
    );
}

#[tokio::test]
async fn a_hidden_skill_is_neither_listed_nor_fetched() {
    let setup = Setup::start(|b| b).await;
    let alice = setup.token(ALICE, CLIENT);
    let list = setup.modern(&alice, "skills/list", json!({}), None).await;
    assert_eq!(list.status, 200, "{list:?}");
    assert_eq!(listed(&list, "skills", "uri"), [PUBLIC_SKILL]);
    assert!(!list.text.contains(SECRET_SKILL), "{}", list.text);
    let all = setup
        .modern(&setup.token(BOB, CLIENT), "skills/list", json!({}), None)
        .await;
    assert_eq!(listed(&all, "skills", "uri"), [PUBLIC_SKILL, SECRET_SKILL]);

    let secret = setup
        .modern(&alice, "skills/get", json!({"uri": SECRET_SKILL}), None)
        .await;
    assert_refused(&secret);
    assert_eq!(setup.surface.reached.count("POST skills/get"), 0);
    assert!(!setup.surface.reached.any_body_contains(SECRET_SKILL));

    let public = setup
        .modern(&alice, "skills/get", json!({"uri": PUBLIC_SKILL}), None)
        .await;
    assert_eq!(public.status, 200, "{public:?}");
    let answer = answer(&public);
    assert_eq!(answer["result"]["skill"]["uri"], PUBLIC_SKILL, "{answer}");
    assert_eq!(answer["result"]["skill"]["frontmatter"]["name"], "public");
    assert_eq!(setup.surface.reached.count("POST skills/get"), 1);
}

#[tokio::test]
async fn another_principal_cannot_use_end_or_attach_to_a_session() {
    let setup = Setup::start(|b| b).await;
    let alice = setup.token(ALICE, CLIENT);
    // A opens its session with the official TypeScript SDK client, and uses it.
    let run = run_client(
        Sdk::TypeScript,
        &setup.server.url,
        &[
            "--token",
            &alice,
            "--call",
            r#"echo={"text":"from the sdk"}"#,
        ],
    )
    .await;
    assert!(run.success, "{run:#?}");
    assert_eq!(
        run.call("echo")["result"]["content"][0]["text"],
        "from the sdk"
    );
    // rmcp handed out exactly one session, and the SDK used it; the recorder read its id
    // off rmcp's answer (the id is what an attacker is assumed to have learnt).
    let sessions = setup.surface.reached.sessions();
    assert_eq!(sessions.len(), 1, "{sessions:?}");
    let session = sessions[0].as_str();
    let before = setup.reached();
    assert!(before.contains(&"POST tools/call".to_owned()), "{before:?}");

    // B: same issuer and client, another subject, a valid token, A's session id.
    let bob = setup.token(BOB, CLIENT);
    let stolen = setup
        .call_in_session(&bob, session, "delete_everything")
        .await;
    assert_session_not_found(&stolen, "B's POST in A's session");
    let stream = setup
        .send(
            "GET",
            Some(&bob),
            &[
                ("mcp-session-id", session),
                ("accept", "text/event-stream"),
                ("mcp-protocol-version", LEGACY),
            ],
            None,
        )
        .await;
    assert_session_not_found(&stream, "B's GET of A's event stream");
    let end = setup
        .send(
            "DELETE",
            Some(&bob),
            &[
                ("mcp-session-id", session),
                ("mcp-protocol-version", LEGACY),
            ],
            None,
        )
        .await;
    assert_session_not_found(&end, "B's DELETE of A's session");

    // The same subject through another client is another owner.
    let other_client = setup.token(ALICE, "client-b");
    let reply = setup.call_in_session(&other_client, session, "echo").await;
    assert_session_not_found(&reply, "A's subject through another client");

    // An id nobody was given: the very same answer, so B learns nothing from the 404.
    let made_up = setup
        .call_in_session(
            &bob,
            "0123456789abcdef0123456789abcdef",
            "delete_everything",
        )
        .await;
    assert_eq!(made_up.status, stolen.status);
    assert_eq!(made_up.text, stolen.text, "byte-identical bodies");
    assert_eq!(
        made_up.headers.get("content-type"),
        stolen.headers.get("content-type")
    );

    assert_eq!(setup.reached(), before, "none of that reached the server");
    assert_eq!(setup.surface.deletions(), 0);

    // A's session is untouched: it still works, and A (only A) can end it.
    let mine = setup.call_in_session(&alice, session, "echo").await;
    assert_eq!(mine.status, 200, "{mine:?}");
    assert_eq!(
        answer(&mine)["result"]["content"][0]["text"],
        "still mine",
        "{}",
        mine.text
    );
    let ended = setup
        .send(
            "DELETE",
            Some(&alice),
            &[
                ("mcp-session-id", session),
                ("mcp-protocol-version", LEGACY),
            ],
            None,
        )
        .await;
    assert!(ended.status < 300, "{ended:?}");
    assert_eq!(setup.reached().last().map(String::as_str), Some("DELETE"));
    let after = setup.call_in_session(&alice, session, "echo").await;
    assert_session_not_found(&after, "A's session after A ended it");
}

#[tokio::test]
async fn put_and_patch_never_reach_the_server() {
    let setup = Setup::start(|b| b).await;
    // B may run delete_everything over POST; still, no other verb carries it.
    let bob = setup.token(BOB, CLIENT);
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                      "params": {"name": "delete_everything", "arguments": {}}})
    .to_string();
    for method in ["PUT", "PATCH"] {
        let reply = setup
            .send(
                method,
                Some(&bob),
                &[("accept", "application/json, text/event-stream")],
                Some(&body),
            )
            .await;
        assert_eq!(reply.status, 405, "{method}: {reply:?}");
        assert_eq!(
            reply.headers.get("allow").and_then(|v| v.to_str().ok()),
            Some(ALLOW),
            "{method}: the layer's Allow, not the inner server's"
        );
    }
    assert!(setup.reached().is_empty(), "{:?}", setup.reached());
    assert_eq!(setup.surface.deletions(), 0);

    // The route and the counter work: the same call POSTed runs once.
    let reply = setup
        .modern(
            &bob,
            "tools/call",
            json!({"name": "delete_everything", "arguments": {}}),
            Some("delete_everything"),
        )
        .await;
    assert_eq!(reply.status, 200, "{reply:?}");
    assert!(reply.text.contains("everything deleted"), "{}", reply.text);
    assert_eq!(setup.surface.deletions(), 1);
    assert_eq!(setup.reached(), ["POST tools/call"]);
}

#[tokio::test]
async fn one_owner_cannot_take_every_session() {
    let setup = Setup::start(|b| b.legacy_sessions_per_owner(2)).await;
    let alice = setup.token(ALICE, CLIENT);
    let first = setup.open_session(&alice).await;
    let second = setup.open_session(&alice).await;
    let third = setup.initialize(&alice).await;
    assert_eq!(third.status, 429, "{third:?}");
    assert!(third.headers.get("mcp-session-id").is_none(), "{third:?}");
    // rmcp opened a third session; the layer ended it rather than leave it behind.
    assert_eq!(setup.surface.reached.sessions().len(), 3);
    assert_eq!(setup.reached().last().map(String::as_str), Some("DELETE"));

    // Another owner is not affected.
    let bob = setup.token(BOB, CLIENT);
    let theirs = setup.open_session(&bob).await;
    assert_eq!(
        answer(&setup.call_in_session(&bob, &theirs, "echo").await)["result"]["content"][0]["text"],
        "still mine"
    );
    // And A's two sessions are still A's.
    for session in [&first, &second] {
        let reply = setup.call_in_session(&alice, session, "echo").await;
        assert_eq!(reply.status, 200, "{reply:?}");
    }
}

#[tokio::test]
async fn a_cors_preflight_goes_without_a_token_and_nothing_else_does() {
    let surface = Surface::new();
    let router = surface.router_with_cors();
    let setup = Setup::start_with(surface, router, |b| {
        b.allowed_origins(["https://app.example"])
    })
    .await;
    let preflight = setup
        .send(
            "OPTIONS",
            None,
            &[
                ("origin", "https://app.example"),
                ("access-control-request-method", "POST"),
                (
                    "access-control-request-headers",
                    "authorization, content-type",
                ),
            ],
            None,
        )
        .await;
    assert_ne!(preflight.status, 401, "{preflight:?}");
    assert!(preflight.status < 300, "{preflight:?}");
    assert!(
        preflight
            .headers
            .contains_key("access-control-allow-origin"),
        "the application's CORS handling answered: {preflight:?}"
    );
    assert_eq!(setup.reached(), ["OPTIONS"]);

    // A plain OPTIONS is no preflight: without a token it is refused, and not forwarded.
    let plain = setup.send("OPTIONS", None, &[], None).await;
    assert_eq!(plain.status, 401, "{plain:?}");
    assert!(plain.www_authenticate.is_some(), "{plain:?}");
    // Nor is a "preflight" of another verb than OPTIONS.
    let get = setup
        .send(
            "GET",
            None,
            &[
                ("origin", "https://app.example"),
                ("access-control-request-method", "POST"),
                ("accept", "text/event-stream"),
            ],
            None,
        )
        .await;
    assert_eq!(get.status, 401, "{get:?}");
    assert_eq!(setup.reached(), ["OPTIONS"]);
}

/// DNS rebinding: a browser request whose `Origin` is not allowed is refused with 403 before
/// anything else, with or without a valid token, preflight or not; the resource's own origin,
/// a listed one and requests without `Origin` go on.
#[tokio::test]
async fn an_origin_that_is_not_allowed_is_refused_before_anything_else() {
    let surface = Surface::new();
    let router = surface.router_with_cors();
    let setup = Setup::start_with(surface, router, |b| {
        b.allowed_origins(["https://app.example"])
    })
    .await;
    let alice = setup.token(ALICE, CLIENT);
    let own_origin = setup.server.url.trim_end_matches("/mcp").to_owned();
    for (origin, token) in [
        ("http://evil.example.com", Some(alice.as_str())),
        ("http://evil.example.com", None),
        ("null", Some(alice.as_str())),
    ] {
        let reply = setup
            .send(
                "POST",
                token,
                &[("origin", origin), ("content-type", "application/json")],
                Some(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#),
            )
            .await;
        assert_eq!(reply.status, 403, "{origin}: {reply:?}");
        assert_eq!(
            reply.body["error"]["message"],
            "the Origin of this request is not allowed"
        );
    }
    let preflight = setup
        .send(
            "OPTIONS",
            None,
            &[
                ("origin", "http://evil.example.com"),
                ("access-control-request-method", "POST"),
            ],
            None,
        )
        .await;
    assert_eq!(preflight.status, 403, "{preflight:?}");
    assert!(setup.reached().is_empty(), "{:?}", setup.reached());
    for origin in [Some(own_origin.as_str()), Some("https://app.example"), None] {
        let headers: Vec<(&str, &str)> = origin
            .map(|o| vec![("origin", o), ("content-type", "application/json")])
            .unwrap_or_else(|| vec![("content-type", "application/json")]);
        let reply = setup
            .send(
                "POST",
                Some(&alice),
                &headers,
                Some(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#),
            )
            .await;
        assert_ne!(reply.status, 403, "{origin:?}: {reply:?}");
    }
}

/// The step the Python SDK client reports for one `Client.listen` of `uris`.
async fn python_listen(setup: &Setup, token: &str, uris: &[&str]) -> Value {
    let mut args = vec!["--token", token, "--no-list"];
    for uri in uris {
        args.extend(["--listen", uri]);
    }
    let run = run_client(Sdk::Python, &setup.server.url, &args).await;
    run.steps
        .iter()
        .find(|s| s["step"] == "listen")
        .cloned()
        .unwrap_or_else(|| panic!("no listen step: {:?} {}", run.steps, run.stderr))
}

/// The official Python SDK (2026-07-28) through the layer: its `Client.listen` for a hidden
/// resource surfaces the refusal and nothing reaches the server; for the public one the
/// server's acknowledgement comes back.
#[tokio::test]
async fn python_sdk_listen_is_judged_per_resource() {
    let setup = Setup::start(|b| b).await;
    let alice = setup.token(ALICE, CLIENT);
    let listened = |setup: &Setup| {
        setup
            .reached()
            .iter()
            .any(|r| r == "POST subscriptions/listen")
    };

    let refused = python_listen(&setup, &alice, &[PUBLIC, SECRET]).await;
    assert_eq!(refused["ok"], false, "{refused}");
    assert!(!listened(&setup), "{:?}", setup.reached());

    let acknowledged = python_listen(&setup, &alice, &[PUBLIC]).await;
    assert_eq!(acknowledged["ok"], true, "{acknowledged}");
    assert_eq!(
        acknowledged["honored"]["resourceSubscriptions"],
        json!([PUBLIC]),
        "{acknowledged}"
    );
    assert!(listened(&setup), "{:?}", setup.reached());
}
