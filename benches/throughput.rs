//! End-to-end throughput: the example rmcp server bare, behind the gate, and behind the gate
//! with the verified-token cache disabled, all in one process, driven by a closed-loop load
//! generator over keep-alive HTTP/1.1 connections on 127.0.0.1.
//!
//! ```text
//! cargo bench --bench throughput
//! BENCH_SECONDS=1 BENCH_ROUNDS=1 BENCH_CONCURRENCY=8 cargo bench --bench throughput   # short (CI)
//! ```
//!
//! Environment (all optional):
//! - `BENCH_SECONDS`      measured seconds per round and configuration (default 5, fractions allowed)
//! - `BENCH_WARMUP`       warm-up seconds before every measured round (default 1)
//! - `BENCH_CONCURRENCY`  concurrent client tasks, each with its own in-flight request (default 32)
//! - `BENCH_ROUNDS`       rounds per configuration; configurations alternate a/b/c/a/b/c... (default 3)
//! - `BENCH_MAX_REQUESTS` cap on requests per measured round (default 2,000,000)
//! - `BENCH_CONFIGS`      which configurations to run, e.g. `ab` or `b` for profiling (default `abcd`)
//! - `BENCH_METHOD`       `call` (default: `tools/call echo`) or `list`: `tools/list` of the
//!   example server's tools, each judged and the list written again by the layer (no
//!   configuration `d` then: a denial is a call's)
//!
//! The load generator runs in the same process and on the same cores as the servers, so every
//! figure is "server + client" throughput: the layer's share of the server's CPU is diluted by
//! the client's. The exit status is 1 if any request failed.

#[path = "../tests/common/tokens.rs"]
mod tokens;

#[path = "../examples/server/tools.rs"]
#[allow(dead_code)]
mod tools;

mod common;

use common::{TICK_SECS, cpu_snapshot, env_or, load_average};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::serve::ListenerExt;
use http::{HeaderValue, StatusCode, header};
use mcp_gate::{Gate, Issuer, StaticKeys};
use serde_json::{Value, json};

const ISSUER: &str = "https://issuer.bench.example";
const SCOPE: &str = "mcp:read";
const ECHO_TEXT: &str = "mcp-gate-bench-ping";
/// Found in every denial the (d) configuration answers.
const DENIAL_MARK: &str = "io.modelcontextprotocol/authorization";

const BODY: &str = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"mcp-gate-bench-ping"}}}"#;
/// The request of `BENCH_METHOD=list`.
const LIST_BODY: &str = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}"#;
/// Found in every good answer to [`LIST_BODY`]: the echo tool, listed.
const LISTED_ECHO: &str = r#""name":"echo""#;
const ACCEPT: &str = "application/json, text/event-stream";
/// How many failed requests are kept verbatim for the report.
const ERROR_SAMPLES: usize = 5;
/// Slack given to a phase past its duration before it is declared hung.
const PHASE_SLACK: Duration = Duration::from_secs(30);
/// Cores used by other processes in a measured round above which the run is flagged as noisy.
const NOISE_WARNING_CORES: f64 = 0.25;
/// Per-request timeout of the client.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------------------------------------
// Settings
// ---------------------------------------------------------------------------------------------

struct Settings {
    seconds: f64,
    warmup: f64,
    concurrency: usize,
    rounds: usize,
    max_requests: u64,
    configs: String,
    /// `BENCH_METHOD=list`: `tools/list` rather than `tools/call`.
    list: bool,
}

impl Settings {
    fn from_env() -> Self {
        Self {
            seconds: env_or("BENCH_SECONDS", 5.0, 0.1, 600.0),
            warmup: env_or("BENCH_WARMUP", 1.0, 0.0, 60.0),
            concurrency: env_or("BENCH_CONCURRENCY", 32, 1, 1024),
            rounds: env_or("BENCH_ROUNDS", 3, 1, 50),
            max_requests: env_or("BENCH_MAX_REQUESTS", 2_000_000, 1, 50_000_000),
            configs: {
                let configs = std::env::var("BENCH_CONFIGS")
                    .unwrap_or_else(|_| "abcd".into())
                    .to_ascii_lowercase();
                if configs.is_empty()
                    || !configs.chars().all(|c| matches!(c, 'a' | 'b' | 'c' | 'd'))
                {
                    eprintln!("BENCH_CONFIGS={configs:?}: use letters among a, b, c and d");
                    std::process::exit(2);
                }
                configs
            },
            list: match std::env::var("BENCH_METHOD").as_deref() {
                Err(_) | Ok("call") => false,
                Ok("list") => true,
                Ok(other) => {
                    eprintln!("BENCH_METHOD={other:?}: use call or list");
                    std::process::exit(2);
                }
            },
        }
    }

    /// The request every client sends.
    fn body(&self) -> &'static str {
        if self.list { LIST_BODY } else { BODY }
    }

    /// Upper bound of the whole run, used to give the tokens a lifetime that outlasts it.
    fn worst_case(&self, configurations: usize) -> Duration {
        let per_phase = self.seconds + self.warmup + 2.0 * PHASE_SLACK.as_secs_f64();
        Duration::from_secs_f64(per_phase * (self.rounds * configurations) as f64 + 60.0)
    }
}

// ---------------------------------------------------------------------------------------------
// Servers
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy)]
enum Kind {
    Bare,
    Gated {
        cache: bool,
    },
    /// Gated, and the policy denies the call (`undisclosed`): the layer answers by itself.
    Denied,
}

struct Target {
    label: &'static str,
    /// What a good answer contains: the echo, or for the denial, the envelope.
    expect: &'static str,
    /// The request's body.
    body: &'static str,
    url: String,
    authorization: Option<HeaderValue>,
    client: reqwest::Client,
}

async fn start(
    kind: Kind,
    label: &'static str,
    key: &tokens::TestKey,
    settings: &Settings,
) -> Target {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind 127.0.0.1:0");
    let address = listener.local_addr().expect("local address");
    let url = format!("http://{address}/mcp");
    let mcp = Router::new().nest_service("/mcp", tools::mcp_service());
    let (app, authorization) = match kind {
        Kind::Bare => (mcp, None),
        Kind::Gated { .. } | Kind::Denied => {
            let cache = !matches!(kind, Kind::Gated { cache: false });
            let keys = StaticKeys::from_jwks_json(&key.jwks_json()).expect("static keys");
            let builder = Gate::builder()
                .resource(&url)
                .issuer(Issuer::with_keys(ISSUER, keys))
                .required_scopes([SCOPE]);
            let mut builder = if matches!(kind, Kind::Denied) {
                builder.evaluate(mcp_gate::policy::deny_all("not for the benchmark"))
            } else {
                builder.evaluate(mcp_gate::policy::allow_all())
            };
            if !cache {
                builder = builder.token_cache_capacity(0);
            }
            let gate = builder.build().expect("gate");
            let mut claims = tokens::claims(ISSUER, gate.resource().as_str(), SCOPE);
            claims["exp"] = json!(tokens::now() + settings.worst_case(4).as_secs());
            let token = key.mint(&claims);
            let value = HeaderValue::from_str(&format!("Bearer {token}")).expect("header value");
            (
                mcp.layer(gate.layer()).merge(gate.metadata_router()),
                Some(value),
            )
        }
    };
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    tokio::spawn(async move {
        if let Err(error) = axum::serve(listener, app).await {
            eprintln!("!!! server {label} stopped: {error}");
        }
    });
    let client = reqwest::Client::builder()
        .no_proxy()
        .http1_only()
        .tcp_nodelay(true)
        .pool_max_idle_per_host(settings.concurrency * 2)
        .pool_idle_timeout(Duration::from_secs(600))
        .timeout(REQUEST_TIMEOUT)
        .build()
        .expect("client");
    Target {
        label,
        expect: match kind {
            Kind::Denied => DENIAL_MARK,
            _ if settings.list => LISTED_ECHO,
            _ => ECHO_TEXT,
        },
        body: settings.body(),
        url,
        authorization,
        client,
    }
}

impl Target {
    fn request(&self) -> reqwest::RequestBuilder {
        let mut request = self
            .client
            .post(&self.url)
            .header(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )
            .header(header::ACCEPT, HeaderValue::from_static(ACCEPT));
        if let Some(value) = &self.authorization {
            request = request.header(header::AUTHORIZATION, value.clone());
        }
        request.body(self.body)
    }

    /// One full check before any load: the echo comes back, and the gate really is in front.
    async fn sanity_check(&self) -> Result<(), String> {
        let response = self
            .request()
            .send()
            .await
            .map_err(|e| format!("{}: {e}", self.label))?;
        let status = response.status();
        let body = response
            .text()
            .await
            .map_err(|e| format!("{}: {e}", self.label))?;
        if status != StatusCode::OK {
            return Err(format!(
                "{}: status {status}, body {}",
                self.label,
                snippet(body.as_bytes())
            ));
        }
        let parsed: Value = serde_json::from_str(&body).map_err(|e| {
            format!(
                "{}: not JSON ({e}): {}",
                self.label,
                snippet(body.as_bytes())
            )
        })?;
        let text = parsed
            .pointer("/result/content/0/text")
            .and_then(Value::as_str);
        let denied = self.expect == DENIAL_MARK;
        let as_expected = if self.expect == LISTED_ECHO {
            let tools = parsed.pointer("/result/tools").and_then(Value::as_array);
            tools.is_some_and(|tools| tools.iter().any(|tool| tool["name"] == "echo"))
        } else if denied {
            parsed.pointer("/result/_meta/io.modelcontextprotocol~1authorization/remediation")
                == Some(&Value::String("unavailable".into()))
        } else {
            text == Some(ECHO_TEXT) && parsed.pointer("/result/isError") != Some(&Value::Bool(true))
        };
        if !as_expected {
            return Err(format!(
                "{}: unexpected tool result {}",
                self.label,
                snippet(body.as_bytes())
            ));
        }
        if self.authorization.is_some() {
            let anonymous = self
                .client
                .post(&self.url)
                .header(header::CONTENT_TYPE, "application/json")
                .header(header::ACCEPT, ACCEPT)
                .body(self.body)
                .send()
                .await
                .map_err(|e| format!("{}: {e}", self.label))?;
            if anonymous.status() != StatusCode::UNAUTHORIZED {
                return Err(format!(
                    "{}: a request without a token got {}, not 401",
                    self.label,
                    anonymous.status()
                ));
            }
        }
        Ok(())
    }
}

fn snippet(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(&body[..body.len().min(300)]);
    text.replace(['\n', '\r'], " ")
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

// ---------------------------------------------------------------------------------------------
// Load generation
// ---------------------------------------------------------------------------------------------

#[derive(Default)]
struct Phase {
    /// Requests that completed successfully before the deadline.
    completed: u64,
    errors: u64,
    error_samples: Vec<String>,
    /// Latency of every successful request completed before the deadline, in nanoseconds.
    latencies: Vec<u64>,
    seconds: f64,
    /// CPU seconds of this process (servers + client) during the phase.
    process_cpu: f64,
    /// CPU seconds of everything else on the machine during the phase.
    other_cpu: f64,
    hung: bool,
}

/// Runs `concurrency` closed-loop tasks against `target` for `seconds`.
async fn run_phase(target: &Arc<Target>, seconds: f64, settings: &Settings) -> Phase {
    let duration = Duration::from_secs_f64(seconds);
    let issued = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let samples = Arc::new(Mutex::new(Vec::<String>::new()));
    let cpu_before = cpu_snapshot();
    let start = Instant::now();
    let deadline = start + duration;
    let per_task_capacity = (settings.max_requests as usize / settings.concurrency).min(1 << 20);
    let mut tasks = Vec::with_capacity(settings.concurrency);
    for _ in 0..settings.concurrency {
        let target = Arc::clone(target);
        let issued = Arc::clone(&issued);
        let errors = Arc::clone(&errors);
        let samples = Arc::clone(&samples);
        let max_requests = settings.max_requests;
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::with_capacity(per_task_capacity.min(64 * 1024));
            while Instant::now() < deadline && issued.fetch_add(1, Ordering::Relaxed) < max_requests
            {
                let sent = Instant::now();
                let outcome = match target.request().send().await {
                    Ok(response) => {
                        let status = response.status();
                        match response.bytes().await {
                            Ok(body)
                                if status == StatusCode::OK
                                    && contains(&body, target.expect.as_bytes()) =>
                            {
                                Ok(())
                            }
                            Ok(body) => Err(format!("status {status}: {}", snippet(&body))),
                            Err(error) => Err(format!("status {status}, body unreadable: {error}")),
                        }
                    }
                    Err(error) => Err(format!("request failed: {error}")),
                };
                let done = Instant::now();
                match outcome {
                    Ok(()) if done <= deadline => latencies.push((done - sent).as_nanos() as u64),
                    Ok(()) => {}
                    Err(message) => {
                        errors.fetch_add(1, Ordering::Relaxed);
                        let mut samples = samples.lock().unwrap();
                        if samples.len() < ERROR_SAMPLES {
                            samples.push(message);
                        }
                    }
                }
            }
            latencies
        }));
    }
    let mut phase = Phase::default();
    let joined = tokio::time::timeout(duration + PHASE_SLACK, async {
        let mut all = Vec::new();
        for task in &mut tasks {
            if let Ok(latencies) = task.await {
                all.push(latencies);
            }
        }
        all
    })
    .await;
    match joined {
        Ok(per_task) => {
            for latencies in per_task {
                phase.latencies.extend(latencies);
            }
        }
        Err(_) => {
            phase.hung = true;
            for task in &tasks {
                task.abort();
            }
        }
    }
    let cpu_after = cpu_snapshot();
    phase.seconds = seconds;
    phase.completed = phase.latencies.len() as u64;
    phase.errors = errors.load(Ordering::Relaxed);
    phase.error_samples = std::mem::take(&mut *samples.lock().unwrap());
    let process_ticks = cpu_after.process.saturating_sub(cpu_before.process);
    let machine_ticks = cpu_after
        .machine_busy
        .saturating_sub(cpu_before.machine_busy);
    phase.process_cpu = process_ticks as f64 * TICK_SECS;
    phase.other_cpu = machine_ticks.saturating_sub(process_ticks) as f64 * TICK_SECS;
    phase
}

// ---------------------------------------------------------------------------------------------
// Report
// ---------------------------------------------------------------------------------------------

struct Tally {
    label: &'static str,
    round_rps: Vec<f64>,
    latencies: Vec<u64>,
    completed: u64,
    errors: u64,
    error_samples: Vec<String>,
    process_cpu: f64,
    other_cpu: f64,
    seconds: f64,
    hung: bool,
    /// The most CPU other processes used during one measured round, in cores.
    max_other_cores: f64,
}

impl Tally {
    fn new(label: &'static str) -> Self {
        Self {
            label,
            round_rps: Vec::new(),
            latencies: Vec::new(),
            completed: 0,
            errors: 0,
            error_samples: Vec::new(),
            process_cpu: 0.0,
            other_cpu: 0.0,
            seconds: 0.0,
            hung: false,
            max_other_cores: 0.0,
        }
    }

    fn add_errors(&mut self, phase: &Phase) {
        self.errors += phase.errors;
        self.hung |= phase.hung;
        for sample in &phase.error_samples {
            if self.error_samples.len() < ERROR_SAMPLES {
                self.error_samples.push(sample.clone());
            }
        }
    }

    fn add_measured(&mut self, phase: Phase) {
        self.add_errors(&phase);
        self.round_rps.push(phase.completed as f64 / phase.seconds);
        self.completed += phase.completed;
        self.process_cpu += phase.process_cpu;
        self.other_cpu += phase.other_cpu;
        self.seconds += phase.seconds;
        self.max_other_cores = self.max_other_cores.max(phase.other_cpu / phase.seconds);
        self.latencies.extend(phase.latencies);
    }

    fn median_rps(&self) -> f64 {
        median(&self.round_rps)
    }

    fn percentile_ms(&mut self, p: f64) -> f64 {
        if self.latencies.is_empty() {
            return f64::NAN;
        }
        self.latencies.sort_unstable();
        let rank = ((p / 100.0) * self.latencies.len() as f64).ceil() as usize;
        self.latencies[rank.clamp(1, self.latencies.len()) - 1] as f64 / 1e6
    }

    fn cpu_us_per_request(&self) -> f64 {
        if self.completed == 0 {
            return f64::NAN;
        }
        self.process_cpu * 1e6 / self.completed as f64
    }
}

fn median(values: &[f64]) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let mid = sorted.len() / 2;
    if sorted.len() % 2 == 1 {
        sorted[mid]
    } else {
        (sorted[mid - 1] + sorted[mid]) / 2.0
    }
}

fn main() {
    let settings = Settings::from_env();
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(cores)
        .enable_all()
        .build()
        .expect("runtime");
    let failed = runtime.block_on(bench(&settings, cores));
    // Servers and idle connections are torn down with the runtime.
    runtime.shutdown_timeout(Duration::from_secs(2));
    if failed {
        std::process::exit(1);
    }
}

async fn bench(settings: &Settings, cores: usize) -> bool {
    let method = if settings.list {
        "tools/list (every tool judged, the list written by the layer)"
    } else {
        "tools/call `echo`"
    };
    println!("mcp-gate throughput: {method} over HTTP/1.1 keep-alive on 127.0.0.1");
    println!(
        "  {} concurrent closed-loop clients, {} round(s) x {:.1} s per configuration (+{:.1} s warm-up each), order a/b/c/a/b/c...",
        settings.concurrency, settings.rounds, settings.seconds, settings.warmup
    );
    println!(
        "  one process, one tokio runtime with {cores} worker threads on {cores} cores: the load generator (reqwest) shares the CPU \
         with the servers, so figures are client+server throughput, not the server's alone"
    );
    println!("  load average at start: {}", load_average());

    let key = tokens::TestKey::es256("bench-key");
    let kinds = [
        ('a', Kind::Bare, "(a) bare rmcp server"),
        (
            'b',
            Kind::Gated { cache: true },
            "(b) gated, token cache on",
        ),
        (
            'c',
            Kind::Gated { cache: false },
            "(c) gated, token cache off",
        ),
        ('d', Kind::Denied, "(d) gated, call denied"),
    ];
    let mut targets = Vec::new();
    for (letter, kind, label) in kinds {
        let denial_of_a_list = settings.list && matches!(kind, Kind::Denied);
        if settings.configs.contains(letter) && !denial_of_a_list {
            targets.push(Arc::new(start(kind, label, &key, settings).await));
        }
    }
    for target in &targets {
        if let Err(problem) = target.sanity_check().await {
            println!();
            println!("!!!!!!!! SANITY CHECK FAILED, NOTHING MEASURED !!!!!!!!");
            println!("!!! {problem}");
            return true;
        }
    }
    println!(
        "  sanity check passed: every configuration echoes; the gated ones refuse a request without a token (401)"
    );
    println!();

    let mut tallies: Vec<Tally> = targets.iter().map(|t| Tally::new(t.label)).collect();
    for round in 1..=settings.rounds {
        for (target, tally) in targets.iter().zip(tallies.iter_mut()) {
            if settings.warmup > 0.0 {
                let warmup = run_phase(target, settings.warmup, settings).await;
                tally.add_errors(&warmup);
            }
            let phase = run_phase(target, settings.seconds, settings).await;
            println!(
                "  round {round}/{}  {:<28} {:>9.0} req/s  errors {}  other processes {:.2} cores",
                settings.rounds,
                target.label,
                phase.completed as f64 / phase.seconds,
                phase.errors,
                phase.other_cpu / phase.seconds
            );
            tally.add_measured(phase);
        }
    }
    println!();
    println!("  load average at end: {}", load_average());
    println!();

    let header = format!(
        "{:<28} {:>10} {:>9} {:>9} {:>12} {:>8} {:>8}",
        "configuration", "req/s", "p50 ms", "p99 ms", "CPU us/req", "errors", "others"
    );
    println!("{header}");
    println!("{}", "-".repeat(header.len()));
    for tally in tallies.iter_mut() {
        let p50 = tally.percentile_ms(50.0);
        let p99 = tally.percentile_ms(99.0);
        println!(
            "{:<28} {:>10.0} {:>9.3} {:>9.3} {:>12.1} {:>8} {:>8.2}",
            tally.label,
            tally.median_rps(),
            p50,
            p99,
            tally.cpu_us_per_request(),
            tally.errors,
            tally.other_cpu / tally.seconds
        );
    }
    println!("{}", "-".repeat(header.len()));
    println!(
        "req/s: median of rounds. p50/p99: all measured requests of all rounds. CPU us/req: this process \
         (servers AND load generator) per request. others: cores used by other processes meanwhile."
    );
    println!();
    let rps = |prefix: &str| {
        tallies
            .iter()
            .find(|t| t.label.starts_with(prefix))
            .map(Tally::median_rps)
    };
    let rounds = |prefix: &str| {
        tallies
            .iter()
            .find(|t| t.label.starts_with(prefix))
            .map(|t| t.round_rps.clone())
    };
    let cpu = |prefix: &str| {
        tallies
            .iter()
            .find(|t| t.label.starts_with(prefix))
            .map(Tally::cpu_us_per_request)
    };
    if let (Some(bare), Some(gated)) = (rps("(a)"), rps("(b)")) {
        let ratio = gated / bare;
        println!(
            "gated/bare (b/a) = {ratio:.3}   goal >= 0.85   {}",
            if ratio >= 0.85 { "MET" } else { "BELOW GOAL" }
        );
        if let (Some(bare_cpu), Some(gated_cpu)) = (cpu("(a)"), cpu("(b)")) {
            println!(
                "CPU per request, bare/gated = {:.3}   (the layer costs {:.1} us/req of process CPU; less sensitive to how much CPU the process got)",
                bare_cpu / gated_cpu,
                gated_cpu - bare_cpu
            );
        }
        let per_round: Vec<String> = rounds("(a)")
            .unwrap_or_default()
            .iter()
            .zip(&rounds("(b)").unwrap_or_default())
            .map(|(a, b)| format!("{:.3}", b / a))
            .collect();
        println!("b/a per round: {}", per_round.join(" "));
    }
    if let (Some(bare), Some(uncached)) = (rps("(a)"), rps("(c)")) {
        println!("uncached/bare (c/a) = {:.3}", uncached / bare);
    }
    if let (Some(allowed), Some(denied)) = (rps("(b)"), rps("(d)")) {
        println!(
            "denied/allowed (d/b) = {:.3}   a denial answered by the layer against an allowed call through it (goal >= 2 in a later issue)",
            denied / allowed
        );
    }
    if let (Some(gated), Some(uncached)) = (rps("(b)"), rps("(c)")) {
        println!(
            "what the token cache buys end-to-end: b/c = {:.2}x the throughput",
            gated / uncached
        );
    }

    let noisiest = tallies
        .iter()
        .map(|t| t.max_other_cores)
        .fold(0.0, f64::max);
    if noisiest > NOISE_WARNING_CORES {
        println!();
        println!(
            "WARNING: other processes used up to {noisiest:.2} cores during a measured round: the machine was busy and \
             the ratios above are unreliable; compare rounds with `other processes` near 0, or run again"
        );
    }

    let total_errors: u64 = tallies.iter().map(|t| t.errors).sum();
    let hung = tallies.iter().any(|t| t.hung);
    if total_errors > 0 || hung {
        println!();
        println!("!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!");
        println!(
            "!!! {total_errors} FAILED REQUEST(S){} — THE FIGURES ABOVE ARE NOT VALID",
            if hung { " AND A HUNG PHASE" } else { "" }
        );
        for tally in &tallies {
            if tally.errors > 0 || tally.hung {
                println!(
                    "!!! {}: {} error(s){}",
                    tally.label,
                    tally.errors,
                    if tally.hung { ", phase hung" } else { "" }
                );
                for sample in &tally.error_samples {
                    println!("!!!     {sample}");
                }
            }
        }
        println!("!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!");
        return true;
    }
    false
}
