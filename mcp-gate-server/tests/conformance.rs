//! The official MCP conformance suite through the gateway binary: every scenario that passes
//! against the suite's fixture server directly passes through the gateway.
//!
//! ```text
//!   without:  suite ─▶ token proxy ──────────────────────────▶ fixture server
//!   with:     suite ─▶ token proxy ─▶ mcp-gate-server (binary) ─▶ fixture server
//! ```
//!
//! The fixture server (`tests/conformance/fixture-server.mjs`, on the TypeScript SDK) serves
//! exactly what the suite's server scenarios call, and binds 127.0.0.1, so no network
//! namespace is needed (the library's own conformance test also runs server-everything, which
//! binds every interface). The suite sends no token: a loopback proxy in front of each side
//! adds one from oidc-provider, audience that proxy's URL, which is the gateway's resource (as
//! behind a real proxy). The gateway's policy is `allow-all` with destructive tools.

mod common;
#[path = "../../tests/common/proxy.rs"]
#[allow(dead_code)]
mod proxy;
#[path = "../../tests/conformance/suite.rs"]
mod suite;

use std::time::Instant;

use common::{AuthServer, Gateway, ports};
use suite::{Forward, Outcome, Process, free_ports, run_suite, serve, skip_or_fail, suite_node};

/// The fixture server passes all 30 active scenarios of the pinned suite directly.
const MIN_PASSING: usize = 30;

/// Starts the fixture server on `port`, its output in `log`, and waits until it listens.
async fn fixture_server(port: u16, log: std::path::PathBuf) -> Process {
    let mut command = tokio::process::Command::new("node");
    command
        .arg(suite::conformance_dir().join("fixture-server.mjs"))
        .arg(port.to_string());
    suite::listening(command, port, log, "the fixture server").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_scenario_that_passes_directly_passes_through_the_gateway() {
    common::ensure_peers();
    let Some(node) = suite_node() else {
        return skip_or_fail(
            "no Node 22 for the conformance suite (scripts/setup-peers.sh installs one on linux-x64)",
        );
    };
    let started = Instant::now();
    let work = tempfile::tempdir().expect("work directory");
    let auth = AuthServer::start(&[]).await;
    let [plain_port, gated_port, gateway_port] = free_ports();
    let (plain, gated) = tokio::join!(
        fixture_server(plain_port, work.path().join("fixture-without.log")),
        fixture_server(gated_port, work.path().join("fixture-with.log")),
    );

    let (without_listener, without_url) = suite::token_proxy_listener().await;
    let (with_listener, with_url) = suite::token_proxy_listener().await;

    let config = format!(
        "listen = \"127.0.0.1:{gateway_port}\"\n\
         [upstream]\nurl = \"http://127.0.0.1:{}/mcp\"\n\
         [resource]\nuri = \"{with_url}\"\n\
         [[issuer]]\nurl = \"{}\"\n\
         [policy]\nallow-all = true\nallow-destructive = true\n",
        gated.port, auth.issuer
    );
    let gateway = Gateway::start(&config, &[]).await;

    // The gateway is in the path: without a token it answers 401.
    let bare = reqwest::Client::new()
        .post(format!("{}/mcp", gateway.origin))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#)
        .send()
        .await
        .expect("the gateway answers");
    assert_eq!(bare.status(), 401);

    let (without_token, with_token) = tokio::join!(
        auth.token("mcp:read", &without_url),
        auth.token("mcp:read", &with_url),
    );
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
        Forward::new(gateway.origin.clone(), Some(with_token)).router(),
    );

    let suite_started = Instant::now();
    let ((without, without_log), (with, with_log)) = tokio::join!(
        run_suite(&node, &without_url, work.path().join("without")),
        run_suite(&node, &with_url, work.path().join("with")),
    );
    let outcome = Outcome {
        name: "fixture-server",
        what: "the gateway",
        min_passing: MIN_PASSING,
        without,
        with,
        without_log,
        with_log,
    };
    outcome.print();
    println!(
        "the two suites took {:.1} s, the whole run {:.1} s",
        suite_started.elapsed().as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
    let problems = outcome.problems(work.path());
    assert!(
        problems.is_empty(),
        "{}\ngateway log:\n{}",
        problems.join("\n\n"),
        gateway.log()
    );
}
