//! Two gateway replicas sharing one real `redis-server`: what one replica puts in force holds
//! on the other (a revocation, a rate limit's tally, a held call's approval told to a task
//! listen), so any replica serves any request.

mod common;
#[path = "../../tests/common/redis_server.rs"]
#[allow(dead_code)]
mod redis_server;

use std::time::{Duration, Instant};

use common::{AuthServer, Gateway, UpstreamServer, free_port};
use redis_server::RedisServer;
use serde_json::{Value, json};

/// 32 bytes of key, base64url: the continuation keys both replicas share.
const KEYS: &str = "k1:MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY";

fn config(
    listen: u16,
    ops: u16,
    resource: &str,
    upstream: &str,
    issuer: &str,
    redis: &str,
) -> String {
    format!(
        "listen = \"127.0.0.1:{listen}\"\n\
         [upstream]\nurl = \"{upstream}\"\n\
         [resource]\nuri = \"{resource}\"\n\
         [[issuer]]\nurl = \"{issuer}\"\n\
         [policy]\nallow-all = true\nallow-destructive = true\n\
         [continuation]\nrequire-keys = true\n\
         [redis]\nurl = \"{redis}\"\nnamespace = \"gateway-replicas\"\n\
         [[limits.rate]]\nscope = \"principal\"\nrequests = 4\nperiod = \"1h\"\nburst = 4\n\
         [revocation]\n\
         [operations]\nlisten = \"127.0.0.1:{ops}\"\n"
    )
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
    let (port_a, port_b, ops_a, ops_b) = (free_port(), free_port(), free_port(), free_port());
    // Replicas behind one address share one resource.
    let resource = format!("http://127.0.0.1:{port_a}/mcp");
    let env = [("MCP_GATE_CONTINUATION_KEYS", KEYS)];
    let replica = |port, ops| {
        let file = config(
            port,
            ops,
            &resource,
            &upstream.url,
            &auth.issuer,
            &redis.url(),
        );
        async move { Gateway::start_with_env(&file, &[], &env).await }
    };
    let a = replica(port_a, ops_a).await;
    let b = replica(port_b, ops_b).await;
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
    format!(
        "listen = \"127.0.0.1:{listen}\"\n\
         [upstream]\nurl = \"{upstream}\"\n\
         [resource]\nuri = \"{resource}\"\n\
         [[issuer]]\nurl = \"{issuer}\"\n\
         [policy]\ncedar = \"{cedar}\"\n\
         [continuation]\nrequire-keys = true\n\
         [redis]\nurl = \"{redis}\"\nnamespace = \"gateway-notify\"\n\
         [tasks]\npoll-interval = \"200ms\"\n\
         [tasks.notifications]\nlistens-per-owner = 2\n\
         [operations]\nlisten = \"127.0.0.1:{ops}\"\nmetrics = false\n",
        cedar = cedar.display(),
    )
}

/// A modern request `method` with `params`, declaring the Tasks extension; its JSON body.
async fn modern(url: &str, token: &str, id: u64, method: &str, name: &str, params: Value) -> Value {
    let mut params = params;
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {
            "extensions": {"io.modelcontextprotocol/tasks": {}},
        },
    });
    let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    let answer = reqwest::Client::new()
        .post(url)
        .bearer_auth(token)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method)
        .header("mcp-name", name)
        .json(&body)
        .send()
        .await
        .expect("post");
    let text = answer.text().await.expect("body");
    // JSON, or an event stream whose last data line is the response.
    let json = text
        .lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .map(str::trim)
        .rfind(|data| !data.is_empty())
        .unwrap_or(&text);
    serde_json::from_str(json).unwrap_or_else(|_| panic!("a JSON-RPC answer: {text}"))
}

/// The Python SDK client's task listen (`tests/peers/py_listen.py`) on `url` for `task`.
struct Listen {
    _child: tokio::process::Child,
    lines: tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
}

impl Listen {
    fn start(url: &str, token: &str, task: &str) -> Self {
        use tokio::io::AsyncBufReadExt;
        common::ensure_peers();
        let peers = common::peers_dir();
        let mut child =
            tokio::process::Command::new(peers.join(".venv").join("bin").join("python"))
                .arg(peers.join("py_listen.py"))
                .arg(url)
                .args(["--token", token, "--task-id", task, "--timeout-ms", "60000"])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::inherit())
                .kill_on_drop(true)
                .spawn()
                .expect("the Python client starts");
        let stdout = child.stdout.take().expect("stdout");
        Self {
            _child: child,
            lines: tokio::io::BufReader::new(stdout).lines(),
        }
    }

    /// The next line the client printed.
    async fn next(&mut self) -> Value {
        let line = tokio::time::timeout(Duration::from_secs(60), self.lines.next_line())
            .await
            .expect("the client printed within 60 s")
            .expect("stdout readable")
            .expect("the client is still running");
        serde_json::from_str(&line).expect("one JSON line")
    }

    /// The next task notification's params, skipping nothing.
    async fn task(&mut self) -> Value {
        let line = self.next().await;
        line.get("task")
            .cloned()
            .unwrap_or_else(|| panic!("a task notification: {line}"))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_call_approved_on_one_replica_is_heard_on_a_listen_on_the_other() {
    let Some(redis) = RedisServer::start_or_skip() else {
        return;
    };
    let auth = AuthServer::start(&[]).await;
    let upstream = UpstreamServer::python_demo().await;
    let (port_a, port_b, ops_a, ops_b) = (free_port(), free_port(), free_port(), free_port());
    let resource = format!("http://127.0.0.1:{port_a}/mcp");
    let env = [("MCP_GATE_CONTINUATION_KEYS", KEYS)];
    let replica = |port, ops| {
        let file = notifying_config(
            port,
            ops,
            &resource,
            &upstream.url,
            &auth.issuer,
            &redis.url(),
        );
        async move { Gateway::start_with_env(&file, &[], &env).await }
    };
    let a = replica(port_a, ops_a).await;
    let b = replica(port_b, ops_b).await;
    let (url_a, url_b) = (format!("{}/mcp", a.origin), format!("{}/mcp", b.origin));
    let token = auth.token("mcp:read", &resource).await;

    // The example set holds a deploy for approval: held on A.
    let params = json!({"name": "deploy", "arguments": {"service": "web"}});
    let held = modern(&url_a, &token, 1, "tools/call", "deploy", params).await;
    assert_eq!(held["result"]["resultType"], "task", "{held}\n{}", a.log());
    let task = held["result"]["taskId"]
        .as_str()
        .expect("a task id")
        .to_owned();

    // Its owner listens on B, and hears the task as it stands.
    let mut listen = Listen::start(&url_b, &token, &task);
    assert_eq!(
        listen.next().await["ack"],
        json!({"taskIds": [task]}),
        "{}",
        b.log()
    );
    let first = listen.task().await;
    assert_eq!(first["taskId"], task.as_str());
    assert_eq!(first["status"], "working");

    // Approved on A's console: heard on B.
    let console = common::sdk::Console::new(a.operations.as_deref().expect("operations"));
    let (status, said) = console.approve(&task, "release-manager").await;
    assert_eq!(status, 200, "{said}");
    assert_eq!(listen.task().await["status"], "working");

    // The owner's poll on A runs the call once: running, then done, heard on B with the result.
    let poll = modern(
        &url_a,
        &token,
        2,
        "tasks/get",
        &task,
        json!({"taskId": task}),
    )
    .await;
    assert_eq!(poll["result"]["status"], "completed", "{poll}");
    let mut completed = listen.task().await;
    if completed["status"] == "working" {
        completed = listen.task().await;
    }
    assert_eq!(completed["status"], "completed", "{completed}");
    assert_eq!(completed["result"]["content"][0]["text"], "deployed web");
    assert_eq!(upstream.runs().await["deploy"], 1, "the held call ran once");

    // A reload of B builds a new gate: a listen opened before it and one opened after it both
    // hear the next decision.
    let params = json!({"name": "deploy", "arguments": {"service": "api"}});
    let held = modern(&url_a, &token, 3, "tools/call", "deploy", params).await;
    let second = held["result"]["taskId"]
        .as_str()
        .expect("a task id")
        .to_owned();
    let mut before = Listen::start(&url_b, &token, &second);
    assert_eq!(before.next().await["ack"], json!({"taskIds": [second]}));
    assert_eq!(before.task().await["status"], "working");
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
    let mut after = Listen::start(&url_b, &token, &second);
    assert_eq!(after.next().await["ack"], json!({"taskIds": [second]}));
    assert_eq!(after.task().await["status"], "working");
    let (status, said) = console.approve(&second, "release-manager").await;
    assert_eq!(status, 200, "{said}");
    for listen in [&mut before, &mut after] {
        let heard = listen.task().await;
        assert_eq!(heard["taskId"], second.as_str());
        assert!(heard["lastUpdatedAt"].as_str() > Some(""), "{heard}");
    }
}
