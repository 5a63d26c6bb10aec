//! Reloading and stopping, on the real binary in front of the TypeScript SDK's server with
//! tokens from oidc-provider:
//!
//! - under load (four clients calling without pause), a policy edit and a configuration edit
//!   are in force within the watch interval and fail no call; an invalid configuration and an
//!   invalid policy file are refused with their file and line, and the last good
//!   configuration stays in force;
//! - with the watch off, SIGHUP reloads; a reload that changes `listen` or `[redis]` is
//!   refused as needing a restart, and the running configuration stays;
//! - SIGTERM lets a slow call in flight finish with its result, refuses new connections, and
//!   the process exits 0.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::{AuthServer, Gateway, UpstreamServer, free_port};
use serde_json::{Value, json};

/// The tools of tests/peers/ts-server.mjs, as its `tools/list` describes them: what the
/// Cedar schema is generated from.
const TOOLS: &str = r#"{"tools": [
  {"name": "echo", "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}},
  {"name": "seen_headers", "inputSchema": {"type": "object", "properties": {}}},
  {"name": "forbidden", "inputSchema": {"type": "object", "properties": {}}},
  {"name": "slow", "inputSchema": {"type": "object", "properties": {"ms": {"type": "integer"}}, "required": ["ms"]}}
]}"#;

/// Everything allowed.
const PERMIT: &str = "@id(\"allow\")\npermit (principal, action, resource);\n";

/// Everything allowed but `echo`, which is never allowed.
const ECHO_OFF: &str = "@id(\"allow\")\npermit (principal, action, resource);\n\n@id(\"echo-off\")\n@remediation(\"unavailable\")\n@message(\"echo is switched off\")\nforbid (principal, action == Gate::Action::\"echo\", resource);\n";

/// A policy file that does not parse, on its line 3.
const BROKEN_POLICY: &str = "@id(\"allow\")\npermit (principal, action, resource);\nforbid (principal, action ==, resource);\n";

/// The line of [`config`] that sets `[upstream] connect-timeout`.
const TIMEOUT_LINE: usize = 4;

/// The tests share two cores: one at a time, so that the timings they measure are the
/// gateway's, not the machine's.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A gateway configuration over Cedar folder `cedar`, watching every `watch`, with `extra`
/// appended.
fn config(port: u16, upstream: &str, issuer: &str, watch: &str, extra: &str) -> String {
    format!(
        "listen = \"127.0.0.1:{port}\"\n\
         [upstream]\n\
         url = \"{upstream}\"\n\
         connect-timeout = \"5s\"\n\
         [resource]\n\
         uri = \"http://127.0.0.1:{port}/mcp\"\n\
         [[issuer]]\n\
         url = \"{issuer}\"\n\
         [policy]\n\
         cedar = \"cedar\"\n\
         [reload]\n\
         watch-interval = \"{watch}\"\n\
         {extra}"
    )
}

/// The schema for [`TOOLS`].
fn schema() -> String {
    mcp_gate::policy::cedar::generate_schema(mcp_gate::policy::cedar::GATE_SCHEMA_STUB, TOOLS)
        .expect("a schema for the TS server's tools")
}

/// What the test starts: the authorization server, the upstream, the gateway.
struct Setup {
    /// Taken to stop it.
    auth: Option<AuthServer>,
    /// The authorization server's issuer identifier (kept when the server is stopped).
    issuer: String,
    upstream: UpstreamServer,
    gateway: Gateway,
    port: u16,
    resource: String,
}

impl Setup {
    async fn start(watch: &str) -> Self {
        Self::start_with(watch, "").await
    }

    /// As [`Setup::start`], the file ending with `extra`.
    async fn start_with(watch: &str, extra: &str) -> Self {
        let auth = AuthServer::start(&[]).await;
        let upstream = UpstreamServer::ts_plain().await;
        let port = free_port();
        let resource = format!("http://127.0.0.1:{port}/mcp");
        let text = config(port, &upstream.url, &auth.issuer, watch, extra);
        let schema = schema();
        let gateway = Gateway::start(
            &text,
            &[
                ("cedar/schema.cedarschema", schema.as_str()),
                ("cedar/policies.cedar", PERMIT),
            ],
        )
        .await;
        Self {
            issuer: auth.issuer.clone(),
            auth: Some(auth),
            upstream,
            gateway,
            port,
            resource,
        }
    }

    /// The configuration with `watch` and `extra`.
    fn config(&self, watch: &str, extra: &str) -> String {
        config(self.port, &self.upstream.url, &self.issuer, watch, extra)
    }

    /// A client session through the gateway.
    async fn client(&self) -> Client {
        let auth = self.auth.as_ref().expect("the authorization server runs");
        let token = auth.token("mcp:read", &self.resource).await;
        Client::open(&self.resource, &token)
            .await
            .unwrap_or_else(|error| panic!("{error}\n{}", self.gateway.log()))
    }
}

/// One answer to a `tools/call`: the JSON-RPC message, and whether it carried `Retry-After`
/// (a rate limit's refusal).
struct Answer {
    message: Value,
    retry_after: bool,
}

impl Answer {
    /// The tool's text, when it ran.
    fn text(&self) -> Option<&str> {
        let result = self.message.get("result")?;
        if result.get("isError") == Some(&Value::Bool(true)) {
            return None;
        }
        result["content"][0]["text"].as_str()
    }

    /// Whether it is the gate's `unavailable` refusal.
    fn unavailable(&self) -> bool {
        self.message.to_string().contains("\"unavailable\"")
    }
}

/// A session with the TS server, through the gateway.
struct Client {
    http: reqwest::Client,
    url: String,
    token: String,
    session: String,
}

impl Client {
    /// `initialize`, then `notifications/initialized`.
    async fn open(url: &str, token: &str) -> Result<Self, String> {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .map_err(|e| e.to_string())?;
        let mut client = Self {
            http,
            url: url.to_owned(),
            token: token.to_owned(),
            session: String::new(),
        };
        let initialize = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "reload-test", "version": "1"}}});
        let answer = client.post(&initialize).await?;
        client.session = answer
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .ok_or("initialize: no session id")?
            .to_owned();
        answer.text().await.map_err(|e| e.to_string())?;
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let answer = client.post(&initialized).await?;
        if answer.status() != 202 {
            return Err(format!("notifications/initialized: {}", answer.status()));
        }
        Ok(client)
    }

    async fn post(&self, body: &Value) -> Result<reqwest::Response, String> {
        let mut request = self
            .http
            .post(&self.url)
            .bearer_auth(&self.token)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .json(body);
        if !self.session.is_empty() {
            request = request
                .header("mcp-session-id", &self.session)
                .header("mcp-protocol-version", "2025-11-25");
        }
        let answer = request
            .send()
            .await
            .map_err(|e| format!("transport: {e}"))?;
        if !answer.status().is_success() {
            let status = answer.status();
            let text = answer.text().await.unwrap_or_default();
            return Err(format!("HTTP {status}: {text}"));
        }
        Ok(answer)
    }

    /// Calls `tool` with `arguments`; an error is a failed request (transport, non-2xx, an
    /// answer that is no JSON-RPC response).
    async fn call(&self, id: u64, tool: &str, arguments: Value) -> Result<Answer, String> {
        let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": tool, "arguments": arguments}});
        let answer = self.post(&call).await?;
        let retry_after = answer.headers().contains_key("retry-after");
        let text = answer.text().await.map_err(|e| format!("body: {e}"))?;
        // A JSON body, or the `data:` lines of an event stream, one of which answers `id`.
        let message = std::iter::once(text.as_str())
            .chain(text.lines().filter_map(|line| line.strip_prefix("data:")))
            .filter_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
            .find(|message| message["id"] == json!(id))
            .ok_or_else(|| format!("no answer to call {id} in: {text}"))?;
        Ok(Answer {
            message,
            retry_after,
        })
    }
}

/// Waits (at most `limit`) until the gateway's log, past its first `from` bytes, contains
/// every one of `needles` on one line; that line.
async fn logged(gateway: &Gateway, from: usize, needles: &[&str], limit: Duration) -> String {
    let start = Instant::now();
    loop {
        let log = gateway.log();
        if let Some(line) = log
            .get(from..)
            .unwrap_or("")
            .lines()
            .find(|line| needles.iter().all(|needle| line.contains(needle)))
        {
            return line.to_owned();
        }
        assert!(
            start.elapsed() < limit,
            "no log line with {needles:?} within {limit:?}:\n{}",
            log.get(from..).unwrap_or("")
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Calls until `done` says the answer shows the change (at most `limit`); how long it took.
async fn until<F>(
    client: &Client,
    tool: &str,
    arguments: Value,
    limit: Duration,
    done: F,
) -> Duration
where
    F: Fn(&Answer) -> bool,
{
    let start = Instant::now();
    let mut id = 1_000_000;
    loop {
        id += 1;
        let answer = client
            .call(id, tool, arguments.clone())
            .await
            .unwrap_or_else(|error| panic!("probe {tool}: {error}"));
        if done(&answer) {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < limit,
            "{tool} did not change within {limit:?}: {}",
            answer.message
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// What clients calling `echo` and `slow` in turn, without pause, saw.
#[derive(Default)]
struct Tally {
    allowed: usize,
    refused: usize,
    failed: Vec<String>,
}

/// Starts `workers` clients calling `echo` and `slow` (20 ms at the upstream: no rule touches
/// it, so calls keep reaching the upstream across every reload) in turn until `stop` (at most
/// `calls` each, at most 120 s).
async fn load(
    setup: &Setup,
    workers: usize,
    calls: u64,
    stop: Arc<AtomicBool>,
) -> Vec<tokio::task::JoinHandle<Tally>> {
    let mut handles = Vec::new();
    for worker in 0..workers {
        let client = setup.client().await;
        let stop = stop.clone();
        handles.push(tokio::spawn(async move {
            let mut tally = Tally::default();
            let start = Instant::now();
            for id in 1..=calls {
                if stop.load(Ordering::Relaxed) || start.elapsed() > Duration::from_secs(120) {
                    break;
                }
                let (tool, arguments, text) = if id % 2 == 0 {
                    ("slow", json!({"ms": 20}), "slept 20 ms".to_owned())
                } else {
                    let text = format!("worker {worker} call {id}");
                    ("echo", json!({"text": text}), text)
                };
                match client.call(id, tool, arguments).await {
                    Ok(answer) if answer.text() == Some(text.as_str()) => tally.allowed += 1,
                    Ok(answer) if tool == "echo" && answer.unavailable() => tally.refused += 1,
                    Ok(answer) => tally.failed.push(answer.message.to_string()),
                    Err(error) => tally.failed.push(error),
                }
            }
            tally
        }));
    }
    handles
}

#[tokio::test]
async fn edits_under_load_take_effect_within_the_watch_and_fail_no_call() {
    let _one = ONE_AT_A_TIME.lock().await;
    let watch = Duration::from_secs(1);
    let margin = Duration::from_millis(1500);
    let setup = Setup::start("1s").await;
    let gateway = &setup.gateway;
    let probe = setup.client().await;
    let echo = json!({"text": "probe"});
    assert_eq!(
        probe.call(1, "echo", echo.clone()).await.unwrap().text(),
        Some("probe")
    );

    let stop = Arc::new(AtomicBool::new(false));
    let workers = load(&setup, 4, 5_000, stop.clone()).await;
    tokio::time::sleep(Duration::from_millis(500)).await;

    // (a) The policy: echo becomes unavailable.
    std::fs::write(gateway.path("cedar/policies.cedar"), ECHO_OFF).unwrap();
    let took = until(
        &probe,
        "echo",
        echo.clone(),
        watch + margin,
        Answer::unavailable,
    )
    .await;
    println!("policy edit in force after {took:?} (watch interval {watch:?})");

    // (b) The file: a rate limit on seen_headers, one call an hour.
    let limited = setup.config(
        "1s",
        "[[limits.rate]]\nscope = \"tool\"\ntool = \"seen_headers\"\nrequests = 1\nperiod = \"1h\"\n",
    );
    std::fs::write(gateway.config_path(), &limited).unwrap();
    let took = until(
        &probe,
        "seen_headers",
        json!({}),
        watch + margin,
        |answer| answer.retry_after,
    )
    .await;
    println!("configuration edit in force after {took:?} (watch interval {watch:?})");

    // Neither good edit was refused (a file caught half-written, say).
    assert!(
        !gateway.log().contains("reload refused"),
        "{}",
        gateway.log()
    );

    // (c) An invalid file: refused with its line; the last good configuration stays.
    let from = gateway.log().len();
    let bad = limited.replace("connect-timeout = \"5s\"", "connect-timeout = \"soon\"");
    std::fs::write(gateway.config_path(), &bad).unwrap();
    let path = gateway.config_path().display().to_string();
    let line = logged(
        gateway,
        from,
        &[
            "reload refused",
            &format!("{path}:{TIMEOUT_LINE}: [upstream] connect-timeout"),
        ],
        watch + margin,
    )
    .await;
    println!("refused: {line}");
    tokio::time::sleep(watch).await;
    let answer = probe.call(2, "echo", echo.clone()).await.unwrap();
    assert!(
        answer.unavailable(),
        "the last good policy: {}",
        answer.message
    );
    let answer = probe.call(3, "seen_headers", json!({})).await.unwrap();
    assert!(
        answer.retry_after,
        "the last good limits: {}",
        answer.message
    );

    // (d) An invalid policy file: refused with its file and line; the last good set stays.
    let from = gateway.log().len();
    std::fs::write(gateway.config_path(), &limited).unwrap();
    logged(gateway, from, &["reloaded"], watch + margin).await;
    // The good file again: a reload that keeps the limit keeps its tally.
    let answer = probe.call(5, "seen_headers", json!({})).await.unwrap();
    assert!(answer.retry_after, "the tally survives: {}", answer.message);
    let from = gateway.log().len();
    std::fs::write(gateway.path("cedar/policies.cedar"), BROKEN_POLICY).unwrap();
    let refused = logged(
        gateway,
        from,
        &["reload refused", "[policy] cedar", "policies.cedar:3"],
        watch + margin,
    )
    .await;
    println!("refused: {refused}");
    tokio::time::sleep(watch).await;
    let answer = probe.call(4, "echo", echo.clone()).await.unwrap();
    assert!(
        answer.unavailable(),
        "the last good policy: {}",
        answer.message
    );

    stop.store(true, Ordering::Relaxed);
    let mut total = Tally::default();
    for worker in workers {
        let tally = worker.await.unwrap();
        total.allowed += tally.allowed;
        total.refused += tally.refused;
        total.failed.extend(tally.failed);
    }
    println!(
        "under load: {} calls allowed, {} refused by the new rule, {} failed",
        total.allowed,
        total.refused,
        total.failed.len()
    );
    assert!(
        total.failed.is_empty(),
        "failed calls: {:?}",
        &total.failed[..total.failed.len().min(5)]
    );
    assert!(
        total.allowed > 0 && total.refused > 0,
        "both rules were seen under load"
    );
}

/// Writes `text` as the configuration, sends SIGHUP, and waits for the refusal that says
/// `changed` takes a restart.
async fn hup_refused(gateway: &Gateway, text: &str, changed: &str) {
    std::fs::write(gateway.config_path(), text).unwrap();
    let from = gateway.log().len();
    gateway.signal("HUP");
    let line = logged(
        gateway,
        from,
        &["reload refused", changed, "takes a restart"],
        Duration::from_secs(5),
    )
    .await;
    println!("refused: {line}");
}

#[tokio::test]
async fn sighup_reloads_with_the_watch_off_and_a_restart_key_is_refused() {
    let _one = ONE_AT_A_TIME.lock().await;
    let setup = Setup::start("0s").await;
    let gateway = &setup.gateway;
    let probe = setup.client().await;
    let echo = json!({"text": "probe"});

    // With the watch off, an edit waits for SIGHUP.
    std::fs::write(gateway.path("cedar/policies.cedar"), ECHO_OFF).unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let answer = probe.call(1, "echo", echo.clone()).await.unwrap();
    assert_eq!(answer.text(), Some("probe"), "no watch: {}", answer.message);
    let from = gateway.log().len();
    gateway.signal("HUP");
    let took = until(
        &probe,
        "echo",
        echo.clone(),
        Duration::from_secs(5),
        Answer::unavailable,
    )
    .await;
    println!("SIGHUP reload in force after {took:?}");
    logged(gateway, from, &["reloaded"], Duration::from_secs(5)).await;

    // `listen` changed: refused, the old listener and policy stay.
    let other = free_port();
    let moved = setup.config("0s", "").replace(
        &format!("listen = \"127.0.0.1:{}\"", setup.port),
        &format!("listen = \"127.0.0.1:{other}\""),
    );
    hup_refused(gateway, &moved, "listen changed").await;
    assert!(
        tokio::net::TcpStream::connect(("127.0.0.1", other))
            .await
            .is_err(),
        "nothing listens on the new address"
    );
    assert!(
        probe
            .call(2, "echo", echo.clone())
            .await
            .unwrap()
            .unavailable()
    );

    // `[redis]` added: refused, the stores stay where they are.
    let redis = setup.config("0s", "[redis]\nurl = \"redis://127.0.0.1:1/\"\n");
    hup_refused(gateway, &redis, "[redis] changed").await;
    assert!(
        probe
            .call(3, "echo", echo.clone())
            .await
            .unwrap()
            .unavailable()
    );

    // A good edit after the refusals is taken.
    std::fs::write(gateway.config_path(), setup.config("0s", "")).unwrap();
    std::fs::write(gateway.path("cedar/policies.cedar"), PERMIT).unwrap();
    gateway.signal("HUP");
    until(&probe, "echo", echo, Duration::from_secs(5), |answer| {
        answer.text() == Some("probe")
    })
    .await;
}

#[tokio::test]
async fn a_reload_that_cannot_fetch_keys_keeps_the_gate_that_has_them() {
    let _one = ONE_AT_A_TIME.lock().await;
    let mut setup = Setup::start("0s").await;
    let probe = setup.client().await;
    let echo = json!({"text": "probe"});
    assert_eq!(
        probe.call(1, "echo", echo.clone()).await.unwrap().text(),
        Some("probe")
    );
    // The authorization server goes away (killed when dropped); the running gate holds its
    // keys.
    drop(setup.auth.take());
    let address = setup.issuer.trim_start_matches("http://").to_owned();
    let gone = Instant::now();
    while tokio::net::TcpStream::connect(address.as_str())
        .await
        .is_ok()
    {
        assert!(
            gone.elapsed() < Duration::from_secs(5),
            "as.mjs still answers"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let gateway = &setup.gateway;
    std::fs::write(gateway.path("cedar/policies.cedar"), ECHO_OFF).unwrap();
    let from = gateway.log().len();
    gateway.signal("HUP");
    let line = logged(
        gateway,
        from,
        &["reload refused", "not put in force", "keys_unavailable"],
        Duration::from_secs(15),
    )
    .await;
    println!("refused: {line}");
    // The running gate still answers with its keys and its policy.
    let answer = probe.call(2, "echo", echo).await.unwrap();
    assert_eq!(answer.text(), Some("probe"), "{}", answer.message);
}

#[tokio::test]
async fn sigterm_drains_a_call_in_flight_refuses_new_connections_and_exits_0() {
    let _one = ONE_AT_A_TIME.lock().await;
    let operations = "[operations]\nlisten = \"127.0.0.1:0\"\nmetrics = false\n";
    let mut setup = Setup::start_with("1s", operations).await;
    let readyz = format!(
        "{}/readyz",
        setup.gateway.operations.as_deref().expect("operations")
    );
    let ready = reqwest::get(&readyz).await.expect("GET /readyz");
    assert_eq!(ready.status(), 200, "ready before the signal");
    let client = setup.client().await;
    let log_url = setup.upstream.info["log_url"].as_str().unwrap().to_owned();

    let slow = tokio::spawn(async move {
        let start = Instant::now();
        let answer = client.call(7, "slow", json!({"ms": 3000})).await;
        (answer, start.elapsed())
    });
    // The call has reached the upstream before the signal.
    let reached = Instant::now();
    loop {
        let seen: Value = reqwest::get(&log_url).await.unwrap().json().await.unwrap();
        if seen
            .as_array()
            .is_some_and(|entries| entries.iter().any(|e| e["tool"] == "slow"))
        {
            break;
        }
        assert!(
            reached.elapsed() < Duration::from_secs(5),
            "the slow call never arrived"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    setup.gateway.signal("TERM");

    // New connections are refused while the call drains.
    let refused_after = Instant::now();
    loop {
        if tokio::net::TcpStream::connect(("127.0.0.1", setup.port))
            .await
            .is_err()
        {
            break;
        }
        assert!(
            refused_after.elapsed() < Duration::from_secs(2),
            "the listener still accepts after SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!slow.is_finished(), "the slow call was still in flight");
    // While it drains, readiness says so: a load balancer sends new clients elsewhere.
    let draining = reqwest::get(&readyz)
        .await
        .expect("GET /readyz while draining");
    assert_eq!(draining.status(), 503);
    let said: Value = draining.json().await.expect("JSON");
    assert_eq!(said["draining"], true, "{said}");
    assert!(!slow.is_finished(), "the slow call was still in flight");

    let (answer, took) = slow.await.unwrap();
    let answer = answer.unwrap_or_else(|error| panic!("the call in flight failed: {error}"));
    assert_eq!(answer.text(), Some("slept 3000 ms"), "{}", answer.message);
    println!("the call in flight finished after {took:?}");
    let status = setup.gateway.wait(Duration::from_secs(10)).await;
    assert!(
        status.success(),
        "exit status {status}\n{}",
        setup.gateway.log()
    );
    assert!(setup.gateway.log().contains("stopped"));
}
