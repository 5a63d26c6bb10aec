//! Two gateway replicas sharing one real `redis-server`: what one replica puts in force holds
//! on the other (a revocation, a rate limit's tally, a held call's approval told to a task
//! listen), so any replica serves any request.

mod common;
#[path = "../../tests/common/modern.rs"]
#[allow(dead_code)]
mod modern;
#[path = "../../tests/common/py_listen.rs"]
#[allow(dead_code)]
mod py_listen;
#[path = "../../tests/common/redis_server.rs"]
#[allow(dead_code)]
mod redis_server;

use std::time::{Duration, Instant};

use common::{AuthServer, Gateway, UpstreamServer, free_port, ports};
use modern::{ModernRequest, modern, tasks_capabilities};
use py_listen::{Listener, task};
use redis_server::RedisServer;
use serde_json::{Value, json};

/// 32 bytes of key, base64url: the continuation keys both replicas share.
const KEYS: &str = "k1:MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY";

/// What every replica's file says: its listen port, the upstream, the shared resource, the
/// issuer, shared continuation keys required, and Redis under `namespace`; then `rest`.
fn replica_file(
    listen: u16,
    resource: &str,
    upstream: &str,
    issuer: &str,
    redis: &str,
    namespace: &str,
    rest: &str,
) -> String {
    format!(
        "listen = \"127.0.0.1:{listen}\"\n\
         [upstream]\nurl = \"{upstream}\"\n\
         [resource]\nuri = \"{resource}\"\n\
         [[issuer]]\nurl = \"{issuer}\"\n\
         [continuation]\nrequire-keys = true\n\
         [redis]\nurl = \"{redis}\"\nnamespace = \"{namespace}\"\n\
         {rest}"
    )
}

/// A replica allowing every call, with a per-principal rate limit and revocation, its console
/// on `ops`.
fn config(
    listen: u16,
    ops: u16,
    resource: &str,
    upstream: &str,
    issuer: &str,
    redis: &str,
) -> String {
    let rest = format!(
        "[policy]\nallow-all = true\nallow-destructive = true\n\
         [[limits.rate]]\nscope = \"principal\"\nrequests = 4\nperiod = \"1h\"\nburst = 4\n\
         [revocation]\n\
         [operations]\nlisten = \"127.0.0.1:{ops}\"\n"
    );
    let namespace = "gateway-replicas";
    replica_file(listen, resource, upstream, issuer, redis, namespace, &rest)
}

/// A replica's file: its listen and operations ports, the shared resource, the upstream, the
/// issuer and Redis.
type ReplicaConfig = fn(u16, u16, &str, &str, &str, &str) -> String;

/// Two replicas from `config` with the same continuation keys, behind one resource (A's
/// address: replicas behind one address share one resource); that resource.
async fn replicas(
    config: ReplicaConfig,
    upstream: &str,
    issuer: &str,
    redis: &str,
) -> (Gateway, Gateway, String) {
    let (port_a, port_b, ops_a, ops_b) = (free_port(), free_port(), free_port(), free_port());
    let resource = format!("http://127.0.0.1:{port_a}/mcp");
    let env = [("MCP_GATE_CONTINUATION_KEYS", KEYS)];
    let a = config(port_a, ops_a, &resource, upstream, issuer, redis);
    let b = config(port_b, ops_b, &resource, upstream, issuer, redis);
    let a = Gateway::start_with_env(&a, &[], &env).await;
    let b = Gateway::start_with_env(&b, &[], &env).await;
    (a, b, resource)
}

/// Posts `body` to `url` with `token` in `session`; the status, `Retry-After`, and the body.
async fn post(url: &str, token: &str, session: &str, body: &str) -> (u16, Option<String>, String) {
    let answer = reqwest::Client::new()
        .post(url)
        .bearer_auth(token)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-11-25")
        .header("mcp-session-id", session)
        .body(body.to_owned())
        .send()
        .await
        .expect("post");
    let status = answer.status().as_u16();
    let retry = answer
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    (status, retry, answer.text().await.expect("body"))
}

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"replicas","version":"1"}}}"#;
const INITIALIZED: &str = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
const PING: &str = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
const ECHO: &str = r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"replica"}}}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limit_and_a_revocation_hold_on_both_replicas() {
    let Some(redis) = RedisServer::start_or_skip() else {
        return;
    };
    let auth = AuthServer::start(&[]).await;
    let upstream = UpstreamServer::ts_plain().await;
    let (a, b, resource) = replicas(config, &upstream.url, &auth.issuer, &redis.url()).await;
    let (url_a, url_b) = (format!("{}/mcp", a.origin), format!("{}/mcp", b.origin));
    let token = auth.token("mcp:read", &resource).await;

    // A legacy session opened on A (the upstream's own), used on both replicas: the gate's
    // binding of the session to its owner is in Redis.
    let opened = reqwest::Client::new()
        .post(&url_a)
        .bearer_auth(&token)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(INITIALIZE)
        .send()
        .await
        .expect("initialize");
    assert_eq!(opened.status(), 200, "{}", a.log());
    let session = opened.headers()["mcp-session-id"]
        .to_str()
        .expect("session")
        .to_owned();
    let (status, _, body) = post(&url_b, &token, &session, INITIALIZED).await;
    assert_eq!(
        status / 100,
        2,
        "the session opened on A is not known on B: {body}"
    );

    // Four calls allowed between the two replicas, the fifth refused wherever it lands.
    for (n, url) in [&url_a, &url_b, &url_a, &url_b].into_iter().enumerate() {
        let (status, _, body) = post(url, &token, &session, ECHO).await;
        assert_eq!(status, 200, "call {n}: {body}\n{}", a.log());
        assert!(
            body.contains("replica"),
            "call {n} was not answered by the upstream: {body}"
        );
    }
    let (status, retry, body) = post(&url_b, &token, &session, ECHO).await;
    assert!(
        retry.is_some() && !body.contains("\"text\":\"replica\""),
        "the fifth call (on the other replica) was not limited: {status} {body}"
    );

    // A revocation put in force on A's operations listener refuses the client on B.
    let (status, _, _) = post(&url_b, &token, &session, PING).await;
    assert_eq!(status, 200, "ping is not counted by the rate limit");
    let revoked = reqwest::Client::new()
        .post(format!("{}/revoke", a.operations.as_deref().expect("operations")))
        .json(&serde_json::json!({"by": "client", "issuer": auth.issuer, "client_id": common::CLIENT}))
        .send()
        .await
        .expect("revoke");
    assert_eq!(
        revoked.status(),
        200,
        "{}",
        revoked.text().await.unwrap_or_default()
    );
    let started = Instant::now();
    loop {
        let (status, _, body) = post(&url_b, &token, &session, PING).await;
        if status == 401 {
            println!(
                "the revocation made on A was in force on B after {:?}",
                started.elapsed()
            );
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "B still serves a revoked client after 5 s: {status} {body}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A replica deciding with the example Cedar set, held tasks' owners told of each transition
/// (`[tasks.notifications]`, through Redis), its console on `ops`.
fn notifying_config(
    listen: u16,
    ops: u16,
    resource: &str,
    upstream: &str,
    issuer: &str,
    redis: &str,
) -> String {
    let cedar = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("cedar");
    let rest = format!(
        "[policy]\ncedar = \"{cedar}\"\n\
         [tasks]\npoll-interval = \"200ms\"\n\
         [tasks.notifications]\nlistens-per-owner = 2\n\
         [operations]\nlisten = \"127.0.0.1:{ops}\"\nmetrics = false\n",
        cedar = cedar.display(),
    );
    let namespace = "gateway-notify";
    replica_file(listen, resource, upstream, issuer, redis, namespace, &rest)
}

/// Posts a modern request to `url` with `token`; the JSON-RPC answer (JSON, or the last data
/// line of an event stream).
async fn post_modern(url: &str, token: &str, (body, headers): ModernRequest) -> Value {
    let mut request = reqwest::Client::new()
        .post(url)
        .bearer_auth(token)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(body);
    for (name, value) in headers {
        request = request.header(name, value);
    }
    let text = request
        .send()
        .await
        .expect("post")
        .text()
        .await
        .expect("body");
    let json = text
        .lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .map(str::trim)
        .rfind(|data| !data.is_empty())
        .unwrap_or(&text);
    serde_json::from_str(json).unwrap_or_else(|_| panic!("a JSON-RPC answer: {text}"))
}

/// `tools/call deploy` for `service`, declaring the Tasks extension.
fn deploy(id: u64, service: &str) -> ModernRequest {
    let params = json!({"name": "deploy", "arguments": {"service": service}});
    modern(id, "tools/call", params, "deploy", tasks_capabilities())
}

/// The Python SDK client's task listen at `url` for `task`.
fn listen(url: &str, token: &str, task: &str) -> Listener {
    common::ensure_peers();
    Listener::start(&common::peers_dir(), url, token, &[task])
}

/// The params of the task notification the listen prints next.
async fn heard(listening: &mut Listener) -> Value {
    task(&listening.next().await).clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_call_approved_on_one_replica_is_heard_on_a_listen_on_the_other() {
    let Some(redis) = RedisServer::start_or_skip() else {
        return;
    };
    let auth = AuthServer::start(&[]).await;
    let upstream = UpstreamServer::python_demo().await;
    let (a, b, resource) =
        replicas(notifying_config, &upstream.url, &auth.issuer, &redis.url()).await;
    let (url_a, url_b) = (format!("{}/mcp", a.origin), format!("{}/mcp", b.origin));
    let token = auth.token("mcp:read", &resource).await;

    // The example set holds a deploy for approval: held on A.
    let held = post_modern(&url_a, &token, deploy(1, "web")).await;
    assert_eq!(held["result"]["resultType"], "task", "{held}\n{}", a.log());
    let task = held["result"]["taskId"]
        .as_str()
        .expect("a task id")
        .to_owned();

    // Its owner listens on B, and hears the task as it stands.
    let mut listening = listen(&url_b, &token, &task);
    assert_eq!(
        listening.next().await["ack"],
        json!({"taskIds": [task]}),
        "{}",
        b.log()
    );
    let first = heard(&mut listening).await;
    assert_eq!(first["taskId"], task.as_str());
    assert_eq!(first["status"], "working");

    // Approved on A's console: heard on B.
    let console = common::sdk::Console::new(a.operations.as_deref().expect("operations"));
    let (status, said) = console.approve(&task, "release-manager").await;
    assert_eq!(status, 200, "{said}");
    assert_eq!(heard(&mut listening).await["status"], "working");

    // The owner's poll on A runs the call once: running, then done, heard on B with the result.
    let poll = modern(
        2,
        "tasks/get",
        json!({"taskId": task}),
        &task,
        tasks_capabilities(),
    );
    let poll = post_modern(&url_a, &token, poll).await;
    assert_eq!(poll["result"]["status"], "completed", "{poll}");
    let mut completed = heard(&mut listening).await;
    if completed["status"] == "working" {
        completed = heard(&mut listening).await;
    }
    assert_eq!(completed["status"], "completed", "{completed}");
    assert_eq!(completed["result"]["content"][0]["text"], "deployed web");
    assert_eq!(upstream.runs().await["deploy"], 1, "the held call ran once");

    // A reload of B builds a new gate: a listen opened before it and one opened after it both
    // hear the next decision.
    let held = post_modern(&url_a, &token, deploy(3, "api")).await;
    let second = held["result"]["taskId"]
        .as_str()
        .expect("a task id")
        .to_owned();
    let mut before = listen(&url_b, &token, &second);
    assert_eq!(before.next().await["ack"], json!({"taskIds": [second]}));
    assert_eq!(heard(&mut before).await["status"], "working");
    let edited = std::fs::read_to_string(b.config_path())
        .expect("B's file")
        .replace("poll-interval = \"200ms\"", "poll-interval = \"300ms\"");
    std::fs::write(b.config_path(), edited).expect("B's file written");
    let logged = b.log().matches("reloaded").count();
    b.signal("HUP");
    let started = Instant::now();
    while b.log().matches("reloaded").count() == logged {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "B did not reload: {}",
            b.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut after = listen(&url_b, &token, &second);
    assert_eq!(after.next().await["ack"], json!({"taskIds": [second]}));
    assert_eq!(heard(&mut after).await["status"], "working");
    let (status, said) = console.approve(&second, "release-manager").await;
    assert_eq!(status, 200, "{said}");
    for listening in [&mut before, &mut after] {
        let heard = heard(listening).await;
        assert_eq!(heard["taskId"], second.as_str());
        assert!(heard["lastUpdatedAt"].as_str() > Some(""), "{heard}");
    }
}
