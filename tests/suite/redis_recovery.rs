//! Recovery without refusals: a real `redis-server` killed and started again on the same port
//! while two gateway replicas use all three Redis stores (legacy sessions, used states, held
//! tasks). Once Redis answers again, nothing is refused from one second later; and every 503
//! the layer writes (a store down, keys or introspection out of reach) says when to come back
//! (`Retry-After`).
#![cfg(feature = "redis")]

use crate::common;

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use common::confirm::confirmed;
use common::modern::{modern, tasks_capabilities};
use common::redis_server::{RedisServer, free_port};
use common::tokens::{TestKey, claims};
use common::tools::DemoServer;
use mcp_gate::continuation::{Keyring, RedisReplayStore};
use mcp_gate::mcp::RedisSessionStore;
use mcp_gate::policy::{Decision, Evaluation};
use mcp_gate::tasks::RedisTaskStore;
use mcp_gate::{Gate, GateBuilder, Issuer, StaticKeys};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::{Value, json};

const ISSUER: &str = "https://as.example";
const RESOURCE: &str = "http://127.0.0.1:9/mcp";
const KEYS: &str = "k1:MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY";

/// `deploy` to `held` becomes a task an operator approves; any other `deploy` asks the user
/// to confirm; everything else is allowed.
async fn policy(evaluation: Evaluation) -> Result<Decision, Infallible> {
    let env = evaluation
        .arguments()
        .and_then(|arguments| arguments.get("env"))
        .and_then(Value::as_str);
    Ok(match (evaluation.tool(), env) {
        (Some("deploy"), Some("held")) => Decision::task("an operator approves deploys"),
        (Some("deploy"), _) => Decision::ask("Deploy now?"),
        _ => Decision::allow(),
    })
}

/// The example's rmcp server with legacy sessions on, so that `initialize` opens a session
/// the layer binds in the session store.
fn inner_with_sessions() -> Router {
    Router::new().nest_service(
        "/mcp",
        StreamableHttpService::new(
            || Ok(DemoServer::counting(Default::default())),
            Arc::new(LocalSessionManager::default()),
            StreamableHttpServerConfig::default(),
        ),
    )
}

/// A gate on `url`'s Redis, with its own connection for each of the three stores.
async fn gate_on(url: &str, key: &TestKey) -> GateBuilder {
    let tasks = RedisTaskStore::new(url, "recovery").await.unwrap();
    let replay = RedisReplayStore::new(url, "recovery").await.unwrap();
    let sessions =
        RedisSessionStore::new(url, "recovery", 100_000, 100_000, Duration::from_secs(60))
            .await
            .unwrap();
    Gate::builder()
        .issuer(Issuer::with_keys(
            ISSUER,
            StaticKeys::from_jwks_json(&key.jwks_json()).unwrap(),
        ))
        .continuation_keys(Keyring::from_config(KEYS).unwrap())
        .task_store(tasks)
        .tasks_per_owner(100_000)
        .replay_store(replay)
        .session_store(sessions)
        .evaluate(policy)
}

/// One replica of the deployment, on its own loopback port.
struct Replica {
    url: String,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn replica(builder: GateBuilder) -> Replica {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let gate = builder.resource(RESOURCE).build().expect("gate builds");
    let app = inner_with_sessions().layer(gate.layer());
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Replica { url, task }
}

/// One answer: status, the headers the test reads, the body as JSON (or text).
#[derive(Debug)]
struct Answer {
    /// When the request was sent, and when its answer was read.
    sent: Instant,
    answered: Instant,
    status: u16,
    session: Option<String>,
    retry_after: Option<String>,
    body: Value,
}

async fn send(
    http: &reqwest::Client,
    url: &str,
    method: reqwest::Method,
    token: &str,
    headers: &[(&str, String)],
    body: Option<String>,
) -> Answer {
    let mut request = http
        .request(method, url)
        .bearer_auth(token)
        .header("accept", "application/json, text/event-stream")
        .timeout(Duration::from_secs(20));
    for (name, value) in headers {
        request = request.header(*name, value);
    }
    if let Some(body) = body {
        request = request
            .header("content-type", "application/json")
            .body(body);
    }
    let sent = Instant::now();
    let response = request.send().await.expect("the gate answers");
    let status = response.status().as_u16();
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let (session, retry_after) = (header("mcp-session-id"), header("retry-after"));
    let text = response.text().await.unwrap_or_default();
    // An event-stream answer (rmcp's legacy sessions): the JSON of its data line.
    let json = text
        .lines()
        .find_map(|line| line.strip_prefix("data:"))
        .unwrap_or(&text)
        .trim();
    let body = serde_json::from_str(json).unwrap_or(Value::String(text.clone()));
    Answer {
        sent,
        answered: Instant::now(),
        status,
        session,
        retry_after,
        body,
    }
}

/// A modern request (`modern()`'s body and headers) posted to `url`.
async fn post_modern(
    http: &reqwest::Client,
    url: &str,
    token: &str,
    request: (String, Vec<(&'static str, String)>),
) -> Answer {
    let (body, headers) = request;
    send(
        http,
        url,
        reqwest::Method::POST,
        token,
        &headers,
        Some(body),
    )
    .await
}

/// Which store a step of the load uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Store {
    Sessions,
    Replay,
    Tasks,
}

/// What one request got, and when it was sent and answered: the answer it expects, or a
/// refusal (status and message).
type Outcome = (Instant, Instant, Result<(), String>);

/// `answer` as the outcome of its request: expected when `expected`, a refusal otherwise.
fn judged(answer: &Answer, expected: bool) -> Outcome {
    if expected {
        return (answer.sent, answer.answered, Ok(()));
    }
    let message = answer.body["error"]["message"]
        .as_str()
        .map(str::to_owned)
        .unwrap_or_else(|| answer.body.to_string());
    let refusal = format!("{} {message}", answer.status);
    (answer.sent, answer.answered, Err(refusal))
}

/// A legacy session, opened, used and ended: `initialize` (the layer binds the session),
/// `notifications/initialized` bearing it (the layer looks it up), `DELETE` (it unbinds).
async fn session_round(http: &reqwest::Client, url: &str, token: &str) -> Vec<Outcome> {
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "recovery", "version": "1"}}});
    let opened = send(
        http,
        url,
        reqwest::Method::POST,
        token,
        &[],
        Some(initialize.to_string()),
    )
    .await;
    let Some(session) = opened.session.clone().filter(|_| opened.status == 200) else {
        return vec![judged(&opened, false)];
    };
    let headers = [
        ("mcp-session-id", session),
        ("mcp-protocol-version", "2025-11-25".to_owned()),
    ];
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let used = send(
        http,
        url,
        reqwest::Method::POST,
        token,
        &headers,
        Some(initialized.to_string()),
    )
    .await;
    let ended = send(http, url, reqwest::Method::DELETE, token, &headers, None).await;
    vec![
        judged(&opened, true),
        judged(&used, used.status == 202),
        judged(&ended, ended.status < 300),
    ]
}

/// A confirmed `deploy`: asked (no store), then confirmed (the state's first use).
async fn replay_round(http: &reqwest::Client, url: &str, token: &str) -> Vec<Outcome> {
    let caps = json!({"elicitation": {"form": {}}});
    let params = json!({"name": "deploy", "arguments": {"env": "prod"}});
    let asked = post_modern(
        http,
        url,
        token,
        modern(1, "tools/call", params.clone(), "deploy", caps.clone()),
    )
    .await;
    let Some(state) = asked.body["result"]["requestState"].as_str() else {
        return vec![judged(&asked, false)];
    };
    let mut retry = params;
    if let (Some(retry), Value::Object(extra)) = (retry.as_object_mut(), confirmed(state)) {
        retry.extend(extra);
    }
    let ran = post_modern(
        http,
        url,
        token,
        modern(2, "tools/call", retry, "deploy", caps),
    )
    .await;
    let text = ran.body["result"]["content"][0]["text"].as_str();
    vec![
        judged(&asked, true),
        judged(
            &ran,
            text.is_some_and(|t| t.starts_with("deployed to prod")),
        ),
    ]
}

/// A held `deploy`: created (the task store writes and reads back), polled, cancelled.
async fn task_round(http: &reqwest::Client, url: &str, token: &str) -> Vec<Outcome> {
    let params = json!({"name": "deploy", "arguments": {"env": "held"}});
    let held = post_modern(
        http,
        url,
        token,
        modern(1, "tools/call", params, "deploy", tasks_capabilities()),
    )
    .await;
    let Some(id) = held.body["result"]["taskId"].as_str().map(str::to_owned) else {
        return vec![judged(&held, false)];
    };
    let mut outcomes = vec![judged(&held, true)];
    for (n, method) in [(2, "tasks/get"), (3, "tasks/cancel")] {
        let answer = post_modern(
            http,
            url,
            token,
            modern(n, method, json!({"taskId": id}), &id, tasks_capabilities()),
        )
        .await;
        let expected = answer.status == 200 && answer.body.get("result").is_some();
        outcomes.push(judged(&answer, expected));
    }
    outcomes
}

/// One request of the load: which replica, which store, when it was sent and answered, what
/// it got.
struct Step {
    replica: &'static str,
    store: Store,
    sent: Instant,
    answered: Instant,
    outcome: Result<(), String>,
}

/// One round on every store.
async fn round(http: &reqwest::Client, url: &str, token: &str, replica: &'static str) -> Vec<Step> {
    let mut steps = Vec::new();
    for store in [Store::Sessions, Store::Replay, Store::Tasks] {
        let outcomes = match store {
            Store::Sessions => session_round(http, url, token).await,
            Store::Replay => replay_round(http, url, token).await,
            Store::Tasks => task_round(http, url, token).await,
        };
        steps.extend(outcomes.into_iter().map(|(sent, answered, outcome)| Step {
            replica,
            store,
            sent,
            answered,
            outcome,
        }));
    }
    steps
}

/// When Redis went away and when it answered again.
#[derive(Clone, Copy)]
struct Outage {
    killed: Instant,
    answering: Instant,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Phase {
    /// Answered before the kill.
    Before,
    /// Under way at the kill, or sent before Redis answers again.
    Down,
    /// The first second after Redis answers again.
    Recovering,
    /// From one second after Redis answers again.
    Recovered,
}

impl Outage {
    fn phase(&self, step: &Step) -> Phase {
        let at = step.sent;
        if step.answered < self.killed {
            Phase::Before
        } else if at < self.answering {
            Phase::Down
        } else if at < self.answering + Duration::from_secs(1) {
            Phase::Recovering
        } else {
            Phase::Recovered
        }
    }
}

/// Two replicas on one Redis: `busy` under a load loop of four workers, `quiet` serving one
/// polite client that does a round every 2.5 s (as a client polls a task at its interval).
/// Redis is killed once the quiet client's first round is done, and started again, empty, on
/// the same port 0.5 s later: the quiet client's next round comes more than a second after
/// Redis answers again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_restart_under_load_refuses_nothing_from_one_second_after_it_answers() {
    let Some(redis) = RedisServer::start_or_skip() else {
        return;
    };
    let redis = Arc::new(std::sync::Mutex::new(redis));
    let url = redis.lock().unwrap().url();
    let key = TestKey::es256("k1");
    let busy = replica(gate_on(&url, &key).await).await;
    let quiet = replica(gate_on(&url, &key).await).await;
    let token = Arc::new(key.mint(&claims(ISSUER, RESOURCE, "mcp:read")));
    let http = reqwest::Client::new();
    let running = Arc::new(AtomicBool::new(true));
    let steps = Arc::new(Mutex::new(Vec::new()));
    let started = Instant::now();
    let deadline = started + Duration::from_secs(20);

    let mut workers = Vec::new();
    for _ in 0..4 {
        let (http, url, token) = (http.clone(), busy.url.clone(), token.clone());
        let (running, steps) = (running.clone(), steps.clone());
        workers.push(tokio::spawn(async move {
            // Bounded in count and time.
            for _ in 0..2000 {
                if !running.load(Ordering::SeqCst) || Instant::now() > deadline {
                    break;
                }
                let done = round(&http, &url, &token, "busy").await;
                steps.lock().unwrap().extend(done);
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }));
    }
    let (first_round, first_round_done) = tokio::sync::oneshot::channel();
    {
        let (http, url, token) = (http.clone(), quiet.url.clone(), token.clone());
        let (running, steps) = (running.clone(), steps.clone());
        let mut first_round = Some(first_round);
        workers.push(tokio::spawn(async move {
            for tick in 0..4u32 {
                tokio::time::sleep_until((started + Duration::from_millis(2500) * tick).into())
                    .await;
                if !running.load(Ordering::SeqCst) {
                    break;
                }
                let done = round(&http, &url, &token, "quiet").await;
                steps.lock().unwrap().extend(done);
                if let Some(first) = first_round.take() {
                    let _ = first.send(());
                }
            }
        }));
    }

    first_round_done.await.unwrap();
    assert!(
        started.elapsed() < Duration::from_millis(900),
        "the quiet client's first round ends well before its second"
    );
    let killed = Instant::now();
    redis.lock().unwrap().stop();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let restart = redis.clone();
    tokio::task::spawn_blocking(move || restart.lock().unwrap().restart())
        .await
        .unwrap();
    // `restart` returns once the new server answers PING.
    let outage = Outage {
        killed,
        answering: Instant::now(),
    };
    tokio::time::sleep_until((started + Duration::from_millis(8000)).into()).await;
    running.store(false, Ordering::SeqCst);
    for worker in workers {
        worker.await.unwrap();
    }

    let steps = std::mem::take(&mut *steps.lock().unwrap());
    let mut counts: BTreeMap<(Phase, &str), (usize, usize)> = BTreeMap::new();
    let mut refusals: BTreeMap<(Phase, &str, Store, String), usize> = BTreeMap::new();
    for step in &steps {
        let phase = outage.phase(step);
        let count = counts.entry((phase, step.replica)).or_default();
        count.0 += 1;
        if let Err(refusal) = &step.outcome {
            count.1 += 1;
            *refusals
                .entry((phase, step.replica, step.store, refusal.clone()))
                .or_default() += 1;
        }
    }
    let recovered_refusals: Vec<_> = refusals
        .iter()
        .filter(|((phase, ..), _)| *phase == Phase::Recovered)
        .collect();
    eprintln!(
        "Redis answered again {:?} after the kill",
        outage.answering - outage.killed
    );
    for ((phase, replica), (total, refused)) in &counts {
        eprintln!("{phase:?} {replica}: {total} steps, {refused} refused");
    }
    eprintln!("refusals by phase, replica and store: {refusals:#?}");
    let quiet_after = steps
        .iter()
        .filter(|s| s.replica == "quiet" && outage.phase(s) == Phase::Recovered)
        .count();
    assert!(
        quiet_after >= 3,
        "the quiet client used every store after the recovery"
    );
    let refused_in = |phase: Phase| {
        counts
            .iter()
            .filter(|((p, _), _)| *p == phase)
            .map(|(_, (_, refused))| refused)
            .sum::<usize>()
    };
    assert_eq!(
        refused_in(Phase::Before),
        0,
        "nothing refused before the kill"
    );
    // The load met the outage: a request refused, or one that waited for Redis to come back.
    let met = steps.iter().any(|s| {
        outage.phase(s) == Phase::Down && (s.outcome.is_err() || s.answered >= outage.answering)
    });
    assert!(met, "the outage was seen by the load");
    assert!(
        recovered_refusals.is_empty(),
        "refused from one second after Redis answered again: {recovered_refusals:#?}"
    );
}

/// The `Retry-After` of a 503, checked to be whole seconds.
fn retry_after(answer: &Answer, what: &str) -> u64 {
    assert_eq!(answer.status, 503, "{what}: {answer:?}");
    let value = answer
        .retry_after
        .as_deref()
        .unwrap_or_else(|| panic!("{what}: a 503 without Retry-After: {answer:?}"));
    value
        .parse()
        .unwrap_or_else(|_| panic!("{what}: Retry-After {value:?} is not whole seconds"))
}

/// Each store down in turn (Redis stopped), and keys or introspection out of reach: every
/// 503 carries `Retry-After`, with the value the troubleshooting page names for its cause.
#[tokio::test]
async fn every_503_says_when_to_come_back() {
    let Some(mut redis) = RedisServer::start_or_skip() else {
        return;
    };
    let key = TestKey::es256("k1");
    let gate = replica(gate_on(&redis.url(), &key).await).await;
    let token = key.mint(&claims(ISSUER, RESOURCE, "mcp:read"));
    let http = reqwest::Client::new();
    // Asked while Redis is up: the confirmation's first use needs the replay store.
    let caps = json!({"elicitation": {"form": {}}});
    let params = json!({"name": "deploy", "arguments": {"env": "prod"}});
    let asked = post_modern(
        &http,
        &gate.url,
        &token,
        modern(1, "tools/call", params.clone(), "deploy", caps.clone()),
    )
    .await;
    let state = asked.body["result"]["requestState"]
        .as_str()
        .expect("a confirmation is asked")
        .to_owned();
    redis.stop();

    let mut seen = BTreeMap::new();
    let session = send(
        &http,
        &gate.url,
        reqwest::Method::POST,
        &token,
        &[
            ("mcp-session-id", "some-session".to_owned()),
            ("mcp-protocol-version", "2025-11-25".to_owned()),
        ],
        Some(json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}).to_string()),
    )
    .await;
    seen.insert("session store down", retry_after(&session, "sessions"));

    let mut retry = params;
    if let (Some(retry), Value::Object(extra)) = (retry.as_object_mut(), confirmed(&state)) {
        retry.extend(extra);
    }
    let replay = post_modern(
        &http,
        &gate.url,
        &token,
        modern(2, "tools/call", retry, "deploy", caps),
    )
    .await;
    seen.insert("replay store down", retry_after(&replay, "replay"));

    let held = post_modern(
        &http,
        &gate.url,
        &token,
        modern(
            3,
            "tools/call",
            json!({"name": "deploy", "arguments": {"env": "held"}}),
            "deploy",
            tasks_capabilities(),
        ),
    )
    .await;
    seen.insert("task store down", retry_after(&held, "tasks"));

    // Keys at a loopback port nothing listens on: none was ever fetched.
    let closed = format!("http://127.0.0.1:{}/jwks", free_port());
    let keyless = replica(
        Gate::builder()
            .issuer(Issuer::with_jwks_uri(ISSUER, closed))
            .evaluate(policy),
    )
    .await;
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": "hi"}}})
    .to_string();
    let keys = send(
        &http,
        &keyless.url,
        reqwest::Method::POST,
        &token,
        &[],
        Some(call.clone()),
    )
    .await;
    seen.insert("keys out of reach", retry_after(&keys, "keys"));

    #[cfg(feature = "introspection")]
    {
        let endpoint = format!("http://127.0.0.1:{}/introspect", free_port());
        let introspecting = replica(
            Gate::builder()
                .issuer(ISSUER)
                .introspection(mcp_gate::Introspection::new(endpoint, "gateway", "secret"))
                .evaluate(policy),
        )
        .await;
        let answer = send(
            &http,
            &introspecting.url,
            reqwest::Method::POST,
            "an-opaque-token",
            &[],
            Some(call),
        )
        .await;
        seen.insert(
            "introspection out of reach",
            retry_after(&answer, "introspection"),
        );
    }
    eprintln!("Retry-After per cause: {seen:#?}");
    // The values docs/troubleshooting.md names.
    let mut documented = BTreeMap::from([
        ("session store down", 2),
        ("replay store down", 2),
        ("task store down", 2),
        ("keys out of reach", 10),
    ]);
    #[cfg(feature = "introspection")]
    documented.insert("introspection out of reach", 5);
    assert_eq!(seen, documented);
}
