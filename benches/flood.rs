//! One principal flooding two gateway replicas at ten times its rate limit while another
//! principal calls at its normal rate (issue 27).
//!
//! ```text
//! cargo bench --features redis --bench flood
//! FLOOD_SECONDS=2 FLOOD_ROUNDS=1 FLOOD_PROBE_SECONDS=4 cargo bench --features redis --bench flood   # short
//! ```
//!
//! One process starts a real `redis-server` on a free loopback port (the bench says so and
//! stops when it is not installed), and two gate replicas: two HTTP servers on 127.0.0.1, each
//! a [`Gate`] with its own [`RedisLimitStore`] connection on the same namespace, the same
//! per-principal limit (`FLOOD_RATE`/s, burst `FLOOD_BURST`), and in front of the example
//! rmcp server (`tools/call echo`). Two principals (same issuer and client, two subjects) call
//! over real HTTP, open loop (each call on its own task, at fixed times, whatever the answers
//! take), alternating between the replicas:
//! - the *flooder* at `FLOOD_FACTOR` (10) times its limit;
//! - the *other* principal at `FLOOD_OTHER_RATE` per second, below its limit.
//!
//! Each round runs a *baseline* phase (the other principal alone) and a *flood* phase (both),
//! in turn, every other round in the opposite order. A phase runs `FLOOD_WARMUP` seconds
//! before its measured `FLOOD_SECONDS` (the flooder's burst is spent by then). Then a
//! Retry-After probe: a third principal calls `transfer`, on which a slower limit
//! (12 a minute, burst 2) gives waits of up to 5 s, at a fixed pace, alternating replicas. For
//! each refusal the bench reads that principal's counters straight from Redis (nothing else
//! writes them meanwhile) and computes the wait GCRA implies, against which it checks the
//! answer's `Retry-After`.
//!
//! Printed: the flooder's admitted calls per second over both replicas against its limit
//! (criterion: within 5%); the other principal's throughput and p99 latency under the flood
//! against the baseline (criterion: throughput at least 90%, p99 at most 110%); the largest
//! error of `Retry-After` against the implied wait (criterion: every `Retry-After` is the
//! implied wait rounded up to the second, so the error is in [0, 1) s). Each criterion says
//! PASS or FAIL. Exit status 1 when a request failed or an answer was malformed; a FAIL alone
//! does not change the status (a busy machine moves the latency figures).
//!
//! Only `cargo bench` runs it (cargo passes `--bench`); built by `cargo test --benches` or
//! `--all-targets`, it says so and returns at once.
//!
//! Environment (all optional): `FLOOD_SECONDS` (5), `FLOOD_WARMUP` (1), `FLOOD_ROUNDS` (4),
//! `FLOOD_RATE` (50), `FLOOD_BURST` (10), `FLOOD_FACTOR` (10), `FLOOD_OTHER_RATE` (40),
//! `FLOOD_PROBE_SECONDS` (8; 0 skips the probe), `FLOOD_STORE` (`redis`; `memory` gives each
//! replica its own `MemoryLimitStore`, the control: the flooder then gets about twice its
//! limit, and the bench says FAIL).

#[path = "../tests/common/tokens.rs"]
mod tokens;

#[path = "../examples/server/tools.rs"]
#[allow(dead_code)]
mod tools;

#[path = "../tests/common/ports.rs"]
#[allow(dead_code)]
mod ports;
#[path = "../tests/common/redis_server.rs"]
#[allow(dead_code)]
mod redis_server;

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::serve::ListenerExt;
use common::{cpu_snapshot, env_or, load_average};
use http::{HeaderValue, StatusCode, header};
use mcp_gate::limit::{Limit, RateLimit};
use mcp_gate::store::limits::{LimitStore, MemoryLimitStore, RedisLimitStore};
use mcp_gate::{Gate, Issuer, StaticKeys};
use serde_json::{Value, json};
use tokio::sync::mpsc;

const ISSUER: &str = "https://issuer.bench.example";
/// The replicas' one resource, as behind a load balancer: one token is good on both.
const RESOURCE: &str = "http://127.0.0.1/mcp";
const SCOPE: &str = "mcp:read";
const NAMESPACE: &str = "flood-bench";
const ECHO_TEXT: &str = "mcp-gate-flood";
const ECHO: &str = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"mcp-gate-flood"}}}"#;
const TRANSFER: &str = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"transfer","arguments":{"amount":"1","currency":"EUR","iban":"DE00"}}}"#;
const ACCEPT: &str = "application/json, text/event-stream";
/// The probe's limit on `transfer`: waits of up to 5 s, so `Retry-After` takes several values.
const PROBE_LIMIT: &str = "12/minute burst 2";
/// Time between two calls of the probe: not a divisor of a second, so the waits it sees spread.
const PROBE_PACE: Duration = Duration::from_millis(370);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// How long calls still in flight at the end of a phase are waited for.
const DRAIN: Duration = Duration::from_secs(15);
const ERROR_SAMPLES: usize = 5;

struct Settings {
    seconds: f64,
    warmup: f64,
    rounds: usize,
    rate: u32,
    burst: u32,
    factor: u32,
    other_rate: f64,
    probe_seconds: f64,
    /// `FLOOD_STORE=memory`: each replica counts in its own memory (the control).
    memory: bool,
}

impl Settings {
    fn from_env() -> Self {
        let settings = Self {
            seconds: env_or("FLOOD_SECONDS", 5.0, 0.5, 600.0),
            warmup: env_or("FLOOD_WARMUP", 1.0, 0.0, 60.0),
            rounds: env_or("FLOOD_ROUNDS", 4, 1, 50),
            rate: env_or("FLOOD_RATE", 50, 1, 10_000),
            burst: env_or("FLOOD_BURST", 10, 1, 10_000),
            factor: env_or("FLOOD_FACTOR", 10, 1, 100),
            other_rate: env_or("FLOOD_OTHER_RATE", 40.0, 0.5, 10_000.0),
            probe_seconds: env_or("FLOOD_PROBE_SECONDS", 8.0, 0.0, 600.0),
            memory: match std::env::var("FLOOD_STORE").as_deref() {
                Err(_) | Ok("redis") => false,
                Ok("memory") => true,
                Ok(other) => {
                    eprintln!("FLOOD_STORE={other:?}: `redis` (the default) or `memory`");
                    std::process::exit(2);
                }
            },
        };
        if settings.burst > settings.rate {
            eprintln!("FLOOD_BURST must not exceed FLOOD_RATE (a burst above a second's calls)");
            std::process::exit(2);
        }
        settings
    }

    /// The whole run at worst, for the tokens' lifetime.
    fn worst_case(&self) -> Duration {
        let phase = self.warmup + self.seconds + DRAIN.as_secs_f64();
        Duration::from_secs_f64(2.0 * phase * self.rounds as f64 + self.probe_seconds + 120.0)
    }
}

// ---------------------------------------------------------------------------------------------
// Replicas and callers
// ---------------------------------------------------------------------------------------------

/// Starts one replica on a free loopback port: its URL. `memory`: its counters in its own
/// memory instead of Redis (the control).
async fn replica(keys: StaticKeys, rate: RateLimit, redis_url: &str, memory: bool) -> String {
    let store: Arc<dyn LimitStore> = if memory {
        Arc::new(MemoryLimitStore::default())
    } else {
        let redis = RedisLimitStore::new(redis_url, NAMESPACE).await;
        Arc::new(redis.expect("the replica's limit store connects"))
    };
    let gate = Gate::builder()
        .resource(RESOURCE)
        .issuer(Issuer::with_keys(ISSUER, keys))
        .required_scopes([SCOPE])
        .evaluate(mcp_gate::policy::allow_all())
        .rate_limit(Limit::per_principal(rate))
        .rate_limit(
            Limit::per_principal(PROBE_LIMIT.parse().expect("probe rate")).for_tool("transfer"),
        )
        .limit_store(store)
        .build()
        .expect("gate");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind 127.0.0.1:0");
    let url = format!("http://{}/mcp", listener.local_addr().expect("address"));
    let app = Router::new()
        .nest_service("/mcp", tools::mcp_service())
        .layer(gate.layer());
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    tokio::spawn(async move {
        if let Err(error) = axum::serve(listener, app).await {
            eprintln!("!!! a replica stopped: {error}");
        }
    });
    url
}

/// One principal's way to the replicas.
struct Caller {
    client: reqwest::Client,
    replicas: [String; 2],
    authorization: HeaderValue,
}

/// What one call got.
enum Answer {
    /// The tool ran.
    Admitted,
    /// Refused by a limit: the `Retry-After` header, in seconds.
    Limited { retry_after: u64 },
    /// Anything else.
    Failed(String),
}

/// One call: when it left and came back (monotonic, and wall clock in µs for the probe).
struct Call {
    /// The replica it went to (0 or 1).
    replica: usize,
    sent: Instant,
    done: Instant,
    sent_wall: u64,
    done_wall: u64,
    answer: Answer,
}

fn wall_micros() -> u64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970");
    u64::try_from(since.as_micros()).expect("µs fit 64 bits")
}

impl Caller {
    fn new(key: &tokens::TestKey, subject: &str, replicas: &[String; 2], lifetime: u64) -> Self {
        let mut claims = tokens::claims(ISSUER, RESOURCE, SCOPE);
        claims["sub"] = json!(subject);
        claims["exp"] = json!(tokens::now() + lifetime);
        let token = key.mint(&claims);
        let client = reqwest::Client::builder()
            .no_proxy()
            .http1_only()
            .tcp_nodelay(true)
            .pool_idle_timeout(Duration::from_secs(600))
            .timeout(REQUEST_TIMEOUT)
            .build()
            .expect("client");
        Self {
            client,
            replicas: replicas.clone(),
            authorization: HeaderValue::from_str(&format!("Bearer {token}")).expect("header"),
        }
    }

    /// Sends `body` to replica `which` (0 or 1) and reads the answer.
    async fn call(&self, which: usize, body: &'static str, expect: &str) -> Call {
        let sent = Instant::now();
        let sent_wall = wall_micros();
        let answer = match self
            .client
            .post(&self.replicas[which])
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::ACCEPT, ACCEPT)
            .header(header::AUTHORIZATION, self.authorization.clone())
            .body(body)
            .send()
            .await
        {
            Ok(response) => {
                let status = response.status();
                let retry_after = response.headers().get(header::RETRY_AFTER).cloned();
                match response.bytes().await {
                    Ok(bytes) => read_answer(status, retry_after.as_ref(), &bytes, expect),
                    Err(error) => Answer::Failed(format!("status {status}, body: {error}")),
                }
            }
            Err(error) => Answer::Failed(format!("request failed: {error}")),
        };
        Call {
            replica: which,
            sent,
            done: Instant::now(),
            sent_wall,
            done_wall: wall_micros(),
            answer,
        }
    }
}

/// Classifies an answer: the tool's result, a well-formed limit answer (HTTP 200,
/// `Retry-After`, a `CallToolResult` with `isError` and the same whole seconds in
/// `_meta["mcp-gate/rateLimit"].retryAfterSeconds`), or anything else.
fn read_answer(
    status: StatusCode,
    retry_after: Option<&HeaderValue>,
    body: &[u8],
    expect: &str,
) -> Answer {
    let text = String::from_utf8_lossy(body);
    let failed = |why: &str| Answer::Failed(format!("{why}: status {status}, body {:.300}", text));
    if status != StatusCode::OK {
        return failed("not 200");
    }
    let Ok(parsed) = serde_json::from_slice::<Value>(body) else {
        return failed("not JSON");
    };
    let Some(retry_after) = retry_after else {
        let ran = parsed.pointer("/result/isError") != Some(&Value::Bool(true))
            && parsed
                .pointer("/result/content/0/text")
                .and_then(Value::as_str)
                .is_some_and(|text| text.contains(expect));
        return if ran {
            Answer::Admitted
        } else {
            failed("neither the tool's result nor a limit answer")
        };
    };
    let Some(header) = retry_after
        .to_str()
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    else {
        return failed("Retry-After is not whole seconds");
    };
    let in_body = parsed
        .pointer("/result/_meta/mcp-gate~1rateLimit/retryAfterSeconds")
        .and_then(Value::as_u64);
    if parsed.pointer("/result/isError") != Some(&Value::Bool(true)) || in_body != Some(header) {
        return failed("a limit answer whose result disagrees with its Retry-After");
    }
    Answer::Limited {
        retry_after: header,
    }
}

/// Calls at `rate` per second from now until `until`, open loop, alternating the replicas:
/// every call, in the order sent.
async fn drive(caller: Arc<Caller>, rate: f64, until: Instant, body: &'static str) -> Vec<Call> {
    let (sender, mut receiver) = mpsc::unbounded_channel();
    let mut ticks = tokio::time::interval(Duration::from_secs_f64(1.0 / rate));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut next = 0usize;
    loop {
        ticks.tick().await;
        if Instant::now() >= until {
            break;
        }
        let (caller, sender, which) = (Arc::clone(&caller), sender.clone(), next % 2);
        next += 1;
        tokio::spawn(async move {
            let _ = sender.send(caller.call(which, body, ECHO_TEXT).await);
        });
    }
    drop(sender);
    let mut calls = Vec::with_capacity(next);
    let deadline = tokio::time::Instant::now() + DRAIN;
    while let Ok(Some(call)) = tokio::time::timeout_at(deadline, receiver.recv()).await {
        calls.push(call);
    }
    if calls.len() < next {
        let missing = next - calls.len();
        calls.extend((0..missing).map(|_| Call {
            replica: 0,
            sent: until,
            done: until,
            sent_wall: 0,
            done_wall: 0,
            answer: Answer::Failed(format!("no answer within {DRAIN:?} of the phase's end")),
        }));
    }
    calls.sort_by_key(|call| call.sent);
    calls
}

// ---------------------------------------------------------------------------------------------
// Phases
// ---------------------------------------------------------------------------------------------

/// One principal's calls in one phase's measured window.
#[derive(Default)]
struct Window {
    sent: u64,
    admitted: u64,
    /// Admitted by each replica.
    by_replica: [u64; 2],
    limited: u64,
    /// Latency of each admitted call, in µs.
    latencies: Vec<u64>,
    seconds: f64,
}

#[derive(Default)]
struct Failures {
    count: u64,
    samples: Vec<String>,
}

impl Failures {
    fn add(&mut self, why: &str) {
        self.count += 1;
        if self.samples.len() < ERROR_SAMPLES {
            self.samples.push(why.to_owned());
        }
    }
}

/// The flood refusals' `Retry-After` against what a steady flood implies.
#[derive(Default)]
struct FloodRefusals {
    count: u64,
    /// Refusals whose `Retry-After` was not 1 s.
    not_one: u64,
    /// The shortest and longest time from a refusal to the flooder's next admitted call, in
    /// seconds (a measure of the wait GCRA implied, to a few ms).
    shortest_wait: f64,
    longest_wait: f64,
}

/// Counts `calls` sent within `[from, to)`; every failure, warm-up included, goes to
/// `failures`.
fn window(calls: &[Call], from: Instant, to: Instant, failures: &mut Failures) -> Window {
    let mut window = Window {
        seconds: (to - from).as_secs_f64(),
        ..Window::default()
    };
    for call in calls {
        if let Answer::Failed(why) = &call.answer {
            failures.add(why);
        }
        if call.sent < from || call.sent >= to {
            continue;
        }
        window.sent += 1;
        match call.answer {
            Answer::Admitted => {
                window.admitted += 1;
                window.by_replica[call.replica] += 1;
                let micros = (call.done - call.sent).as_micros();
                window
                    .latencies
                    .push(u64::try_from(micros).unwrap_or(u64::MAX));
            }
            Answer::Limited { .. } => window.limited += 1,
            Answer::Failed(_) => {}
        }
    }
    window
}

/// Checks the flood's refusals: with the burst spent, the wait a refusal implies is at most
/// one interval (the last admission was at most one interval before the next is due), so
/// with an interval under a second every `Retry-After` must be 1. Also measures how long each
/// refusal actually waited for the flooder's next admitted call.
fn flood_refusals(calls: &[Call], from: Instant, to: Instant, tally: &mut FloodRefusals) {
    let mut next_admitted: Option<Instant> = None;
    for call in calls.iter().rev() {
        match call.answer {
            Answer::Admitted => next_admitted = Some(call.sent),
            Answer::Limited { retry_after } if call.sent >= from && call.sent < to => {
                tally.count += 1;
                if retry_after != 1 {
                    tally.not_one += 1;
                }
                if let Some(next) = next_admitted {
                    let waited = (next - call.sent).as_secs_f64();
                    tally.longest_wait = tally.longest_wait.max(waited);
                    tally.shortest_wait = tally.shortest_wait.min(waited);
                }
            }
            _ => {}
        }
    }
}

struct Phase {
    other: Window,
    flooder: Option<Window>,
    /// Cores other processes used during the measured window.
    others: f64,
}

async fn phase(
    settings: &Settings,
    other: &Arc<Caller>,
    flooder: Option<&Arc<Caller>>,
    failures: &mut Failures,
    refusals: &mut FloodRefusals,
) -> Phase {
    let start = Instant::now();
    let from = start + Duration::from_secs_f64(settings.warmup);
    let to = from + Duration::from_secs_f64(settings.seconds);
    let steady = tokio::spawn(drive(Arc::clone(other), settings.other_rate, to, ECHO));
    let flood = flooder.map(|flooder| {
        let rate = f64::from(settings.rate * settings.factor);
        tokio::spawn(drive(Arc::clone(flooder), rate, to, ECHO))
    });
    tokio::time::sleep_until(from.into()).await;
    let before = cpu_snapshot();
    tokio::time::sleep_until(to.into()).await;
    let others = cpu_snapshot().others_since(&before, settings.seconds);
    let other_calls = steady.await.expect("the steady caller");
    let other = window(&other_calls, from, to, failures);
    let flooder = match flood {
        Some(task) => {
            let calls = task.await.expect("the flooder");
            flood_refusals(&calls, from, to, refusals);
            Some(window(&calls, from, to, failures))
        }
        None => None,
    };
    Phase {
        other,
        flooder,
        others,
    }
}

// ---------------------------------------------------------------------------------------------
// The Retry-After probe
// ---------------------------------------------------------------------------------------------

/// Refusals of the probe, each against the wait its counters implied.
#[derive(Default)]
struct Probe {
    admitted: u64,
    refusals: u64,
    /// Refusals whose `Retry-After` is not the implied wait rounded up to the second.
    wrong: u64,
    /// `Retry-After` minus the implied wait, in seconds: the smallest and largest.
    min_error: f64,
    max_error: f64,
    /// The distinct `Retry-After` values seen.
    values: Vec<u64>,
    /// The widest uncertainty of one implied wait (the call's round trip), in seconds.
    widest_bracket: f64,
}

/// Redis's clock against this machine's wall clock: `redis - wall` in µs (one host, so near 0).
async fn clock_offset(redis: &mut redis::aio::MultiplexedConnection) -> i64 {
    let before = wall_micros();
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query_async(redis).await.expect("TIME");
    let after = wall_micros();
    let at = i128::from(secs * 1_000_000 + micros);
    let mid = i128::from((before + after) / 2);
    i64::try_from(at - mid).unwrap_or(0)
}

async fn limit_keys(redis: &mut redis::aio::MultiplexedConnection) -> Vec<String> {
    redis::cmd("KEYS")
        .arg(format!("{NAMESPACE}:limit:*"))
        .query_async(redis)
        .await
        .expect("KEYS")
}

async fn probe(
    settings: &Settings,
    prober: &Caller,
    redis: &mut redis::aio::MultiplexedConnection,
    failures: &mut Failures,
) -> Probe {
    // Until the others' counters have expired (a counter lives until its call is due), so
    // that the prober's are the only keys.
    let quiet_by = Instant::now() + Duration::from_secs(5);
    while !limit_keys(redis).await.is_empty() && Instant::now() < quiet_by {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let per_principal = RateLimit::per_second(settings.rate)
        .and_then(|rate| rate.with_burst(settings.burst))
        .expect("rate");
    let transfer: RateLimit = PROBE_LIMIT.parse().expect("probe rate");
    let early = |rate: RateLimit| {
        let interval = u64::try_from(rate.interval().as_micros()).expect("µs");
        interval * u64::from(rate.burst() - 1)
    };
    let mut result = Probe {
        min_error: f64::INFINITY,
        max_error: f64::NEG_INFINITY,
        ..Probe::default()
    };
    // Each counter key with how early a call may come on it: known after the first call.
    let mut counters: Vec<(String, u64)> = Vec::new();
    let offset = clock_offset(redis).await;
    let end = Instant::now() + Duration::from_secs_f64(settings.probe_seconds);
    let mut which = 0;
    while Instant::now() < end {
        let call = prober.call(which, TRANSFER, "transferred").await;
        which = 1 - which;
        match call.answer {
            Answer::Admitted => {
                result.admitted += 1;
                if counters.is_empty() {
                    counters = name_counters(redis, early(per_principal), early(transfer)).await;
                }
            }
            Answer::Limited { retry_after } => {
                result.refusals += 1;
                if !result.values.contains(&retry_after) {
                    result.values.push(retry_after);
                }
                // Nothing wrote the prober's counters since the gate read them (a refusal
                // writes nothing): the call was due at the latest `tat - early`.
                let mut due: Option<i128> = None;
                for (key, early) in &counters {
                    let tat: Option<u64> = redis::cmd("GET")
                        .arg(key)
                        .query_async(redis)
                        .await
                        .expect("GET");
                    if let Some(tat) = tat {
                        let at = i128::from(tat) - i128::from(*early) - i128::from(offset);
                        due = Some(due.map_or(at, |due| due.max(at)));
                    }
                }
                let Some(due) = due else {
                    failures.add("a probe refusal with no counter left in Redis");
                    continue;
                };
                // The gate counted the call between its sending and its answer.
                let longest = (due - i128::from(call.sent_wall)) as f64 / 1e6;
                let shortest = (due - i128::from(call.done_wall)) as f64 / 1e6;
                let seconds = retry_after as f64;
                // Right to the second: `Retry-After` is ceil(wait) for a wait in the bracket.
                let right =
                    seconds >= shortest.ceil().max(1.0) && seconds <= longest.ceil().max(1.0);
                if !right {
                    result.wrong += 1;
                }
                result.min_error = result.min_error.min(seconds - longest);
                result.max_error = result.max_error.max(seconds - shortest);
                result.widest_bracket = result.widest_bracket.max(longest - shortest);
            }
            Answer::Failed(ref why) => failures.add(why),
        }
        tokio::time::sleep(PROBE_PACE).await;
    }
    result.values.sort_unstable();
    result
}

/// The prober's counters right after its first admitted call, each with how early a call may
/// come on it: the per-principal counter is due within one interval, `transfer`'s seconds
/// later, so the later one is `transfer`'s.
async fn name_counters(
    redis: &mut redis::aio::MultiplexedConnection,
    principal_early: u64,
    transfer_early: u64,
) -> Vec<(String, u64)> {
    let mut keys = Vec::new();
    for key in limit_keys(redis).await {
        let tat: u64 = redis::cmd("GET")
            .arg(&key)
            .query_async(redis)
            .await
            .expect("GET");
        keys.push((key, tat));
    }
    keys.sort_by_key(|(_, tat)| *tat);
    let last = keys.len().saturating_sub(1);
    keys.into_iter()
        .enumerate()
        .map(|(at, (key, _))| {
            let early = if at == last {
                transfer_early
            } else {
                principal_early
            };
            (key, early)
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Report
// ---------------------------------------------------------------------------------------------

fn percentile_ms(latencies: &mut [u64], p: f64) -> f64 {
    if latencies.is_empty() {
        return f64::NAN;
    }
    latencies.sort_unstable();
    let rank = ((p / 100.0) * latencies.len() as f64).ceil() as usize;
    latencies[rank.clamp(1, latencies.len()) - 1] as f64 / 1e3
}

/// Windows of one principal over the rounds, merged.
fn merged(windows: impl Iterator<Item = Window>) -> Window {
    windows.fold(Window::default(), |mut all, window| {
        all.sent += window.sent;
        all.admitted += window.admitted;
        all.by_replica[0] += window.by_replica[0];
        all.by_replica[1] += window.by_replica[1];
        all.limited += window.limited;
        all.latencies.extend(window.latencies);
        all.seconds += window.seconds;
        all
    })
}

fn verdict(pass: bool) -> &'static str {
    if pass { "PASS" } else { "FAIL" }
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` (or `--all-targets`) does not.
    if !std::env::args().any(|arg| arg == "--bench") {
        println!(
            "flood: a benchmark of about a minute; run it with `cargo bench --features redis --bench flood`"
        );
        return;
    }
    if let Err(error) = std::process::Command::new("redis-server")
        .arg("--version")
        .output()
    {
        println!(
            "flood: skipped, redis-server cannot be run ({error}); install it (apt-get install redis-server)"
        );
        return;
    }
    let settings = Settings::from_env();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let failed = runtime.block_on(bench(&settings));
    runtime.shutdown_timeout(Duration::from_secs(2));
    if failed {
        std::process::exit(1);
    }
}

async fn bench(settings: &Settings) -> bool {
    let Some(server) = redis_server::RedisServer::start_or_skip() else {
        println!("flood: skipped, no redis-server");
        return false;
    };
    let rate = RateLimit::per_second(settings.rate)
        .and_then(|rate| rate.with_burst(settings.burst))
        .expect("FLOOD_RATE and FLOOD_BURST make a rate");
    let key = tokens::TestKey::es256("flood-key");
    let keys = StaticKeys::from_jwks_json(&key.jwks_json()).expect("keys");
    let replicas = [
        replica(keys.clone(), rate, &server.url(), settings.memory).await,
        replica(keys, rate, &server.url(), settings.memory).await,
    ];
    let lifetime = settings.worst_case().as_secs();
    let other = Arc::new(Caller::new(&key, "steady-user", &replicas, lifetime));
    let flooder = Arc::new(Caller::new(&key, "flooder", &replicas, lifetime));
    let prober = Caller::new(&key, "prober", &replicas, lifetime);
    let flood_rate = settings.rate * settings.factor;
    println!(
        "mcp-gate flood: one principal flooding two replicas, another calling at its normal rate"
    );
    println!(
        "  two gate replicas on 127.0.0.1 ({} and {}), {}",
        replicas[0],
        replicas[1],
        if settings.memory {
            "FLOOD_STORE=memory: each counting in its own memory (the control: the limit is not global)".to_owned()
        } else {
            format!(
                "one RedisLimitStore namespace on a redis-server at {}",
                server.url()
            )
        }
    );
    println!(
        "  limit per principal: {rate}; flooder: {flood_rate} calls/s ({}x), other: {} calls/s; both open loop, alternating replicas",
        settings.factor, settings.other_rate
    );
    println!(
        "  {} round(s) of baseline and flood, {:.1} s measured per phase after {:.1} s of warm-up; then a {:.1} s Retry-After probe ({PROBE_LIMIT} on `transfer`)",
        settings.rounds, settings.seconds, settings.warmup, settings.probe_seconds
    );
    println!(
        "  servers, clients and redis-server share this machine's cores; load average at start: {}",
        load_average()
    );
    println!();

    // Both answers check out before anything is measured.
    let mut failures = Failures::default();
    for which in 0..2 {
        if let Answer::Failed(why) = other.call(which, ECHO, ECHO_TEXT).await.answer {
            println!("!!! SANITY CHECK FAILED on replica {which}, nothing measured: {why}");
            return true;
        }
    }

    let mut refusals = FloodRefusals {
        shortest_wait: f64::INFINITY,
        ..FloodRefusals::default()
    };
    let (mut baselines, mut floods) = (Vec::new(), Vec::new());
    for round in 1..=settings.rounds {
        let order = if round % 2 == 1 {
            [false, true]
        } else {
            [true, false]
        };
        for with_flood in order {
            let flooder = with_flood.then_some(&flooder);
            let result = phase(settings, &other, flooder, &mut failures, &mut refusals).await;
            let other_rate = result.other.admitted as f64 / result.other.seconds;
            match &result.flooder {
                Some(flood) => println!(
                    "  round {round}  flood     other {other_rate:7.1} admitted/s, p99 {:7.3} ms   flooder {:7.1} sent/s, {:6.2} admitted/s   other processes {:.2} cores",
                    percentile_ms(&mut result.other.latencies.clone(), 99.0),
                    flood.sent as f64 / flood.seconds,
                    flood.admitted as f64 / flood.seconds,
                    result.others
                ),
                None => println!(
                    "  round {round}  baseline  other {other_rate:7.1} admitted/s, p99 {:7.3} ms   {:46}other processes {:.2} cores",
                    percentile_ms(&mut result.other.latencies.clone(), 99.0),
                    "",
                    result.others
                ),
            }
            if with_flood {
                floods.push(result);
            } else {
                baselines.push(result);
            }
        }
    }
    // The probe reads the counters in Redis: there are none with `FLOOD_STORE=memory`.
    let probe = if settings.probe_seconds > 0.0 && !settings.memory {
        let mut redis = server.raw().await;
        Some(probe(settings, &prober, &mut redis, &mut failures).await)
    } else {
        None
    };
    println!("  load average at end: {}", load_average());
    println!();

    let mean_others = |phases: &[Phase]| {
        phases.iter().map(|phase| phase.others).sum::<f64>() / phases.len() as f64
    };
    let (base_others, flood_others) = (mean_others(&baselines), mean_others(&floods));
    let mut base = merged(baselines.into_iter().map(|phase| phase.other));
    let (others, flooders): (Vec<Window>, Vec<Option<Window>>) = floods
        .into_iter()
        .map(|phase| (phase.other, phase.flooder))
        .unzip();
    let mut other_flood = merged(others.into_iter());
    let flooder = merged(flooders.into_iter().flatten());

    let limit = f64::from(settings.rate);
    let admitted = flooder.admitted as f64 / flooder.seconds;
    let held = admitted / limit;
    let held_ok = (held - 1.0).abs() <= 0.05;
    let base_rate = base.admitted as f64 / base.seconds;
    let flood_rate_other = other_flood.admitted as f64 / other_flood.seconds;
    let throughput = flood_rate_other / base_rate;
    let throughput_ok = throughput >= 0.90;
    let (base_p50, base_p99) = (
        percentile_ms(&mut base.latencies, 50.0),
        percentile_ms(&mut base.latencies, 99.0),
    );
    let (flood_p50, flood_p99) = (
        percentile_ms(&mut other_flood.latencies, 50.0),
        percentile_ms(&mut other_flood.latencies, 99.0),
    );
    let p99 = flood_p99 / base_p99;
    let p99_ok = p99 <= 1.10;

    println!(
        "{:<58} {:>12} {:>12} {:>9}",
        "", "baseline", "flood", "ratio"
    );
    println!("{}", "-".repeat(94));
    println!(
        "{:<58} {:>12} {:>12.2} {:>9.4}  {:+.2}%",
        format!("flooder admitted/s, both replicas (limit {limit})"),
        "",
        admitted,
        held,
        (held - 1.0) * 100.0
    );
    println!(
        "{:<58} {:>12} {:>12} {:>9}",
        "  of which by replica 0 + replica 1",
        "",
        format!(
            "{:.2} + {:.2}",
            flooder.by_replica[0] as f64 / flooder.seconds,
            flooder.by_replica[1] as f64 / flooder.seconds
        ),
        ""
    );
    println!(
        "{:<58} {:>12} {:>12.1} {:>9}",
        "flooder sent/s",
        "",
        flooder.sent as f64 / flooder.seconds,
        ""
    );
    println!(
        "{:<58} {:>12.2} {:>12.2} {:>9.4}",
        format!(
            "other principal admitted/s (offered {})",
            settings.other_rate
        ),
        base_rate,
        flood_rate_other,
        throughput
    );
    println!(
        "{:<58} {:>12.3} {:>12.3} {:>9.3}",
        "other principal p50 ms",
        base_p50,
        flood_p50,
        flood_p50 / base_p50
    );
    println!(
        "{:<58} {:>12.3} {:>12.3} {:>9.3}",
        format!(
            "other principal p99 ms ({} and {} calls)",
            base.latencies.len(),
            other_flood.latencies.len()
        ),
        base_p99,
        flood_p99,
        p99
    );
    println!(
        "{:<58} {:>12} {:>12} {:>9}",
        "other principal refused", base.limited, other_flood.limited, ""
    );
    println!(
        "{:<58} {:>12.2} {:>12.2} {:>9}",
        "other processes on the machine, cores (mean)", base_others, flood_others, ""
    );
    println!("{}", "-".repeat(94));
    println!(
        "flood refusals: {} in the measured windows, {} with a Retry-After other than 1 s; each waited {:.1} to {:.1} ms for the flooder's next admitted call (at most one interval, {:.0} ms, give or take the flood's spacing): an error of {:.3} to {:.3} s",
        refusals.count,
        refusals.not_one,
        refusals.shortest_wait * 1e3,
        refusals.longest_wait * 1e3,
        rate.interval().as_secs_f64() * 1e3,
        1.0 - refusals.longest_wait,
        1.0 - refusals.shortest_wait
    );
    let retry_ok = refusals.not_one == 0
        && refusals.longest_wait <= 1.0
        && probe
            .as_ref()
            .is_none_or(|probe| probe.wrong == 0 && probe.refusals > 0);
    if let Some(probe) = &probe {
        println!(
            "Retry-After probe: {} admitted, {} refused, Retry-After values {:?} s; Retry-After minus the wait GCRA implied (read from Redis): {:.3} to {:.3} s (each wait known to {:.1} ms); {} not the wait rounded up to the second",
            probe.admitted,
            probe.refusals,
            probe.values,
            probe.min_error,
            probe.max_error,
            probe.widest_bracket * 1e3,
            probe.wrong
        );
    }
    println!();
    println!(
        "{}  the flooder is held to its limit within 5%, globally: {admitted:.2}/s against {limit}/s ({:+.2}%)",
        verdict(held_ok),
        (held - 1.0) * 100.0
    );
    println!(
        "{}  the other principal's throughput under the flood is at least 90% of the baseline's: {:.1}%",
        verdict(throughput_ok),
        throughput * 100.0
    );
    println!(
        "{}  the other principal's p99 under the flood is at most 110% of the baseline's: {:.1}% ({flood_p99:.3} ms against {base_p99:.3} ms)",
        verdict(p99_ok),
        p99 * 100.0
    );
    match &probe {
        Some(probe) => println!(
            "{}  Retry-After is right to the second (the implied wait rounded up, an error in [0, 1) s): max error {:.3} s in the probe; in the flood 1 s for waits of {:.1} to {:.1} ms",
            verdict(retry_ok),
            probe.max_error,
            refusals.shortest_wait * 1e3,
            refusals.longest_wait * 1e3
        ),
        None => println!(
            "{}  Retry-After: the flood's all 1 s (no multi-second probe: FLOOD_PROBE_SECONDS=0 or FLOOD_STORE=memory)",
            verdict(retry_ok)
        ),
    }
    if failures.count > 0 {
        println!();
        println!(
            "!!! {} FAILED CALL(S): THE FIGURES ABOVE ARE NOT VALID",
            failures.count
        );
        for sample in &failures.samples {
            println!("!!!     {sample}");
        }
        return true;
    }
    false
}
