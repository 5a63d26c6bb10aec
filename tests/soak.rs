//! A bounded soak of the whole stack: 64 connections for 60 seconds (`SOAK_SECONDS`,
//! `SOAK_CONNECTIONS`) against the example server behind the layer, with `oidc-provider` as the
//! issuer. The load mixes allowed calls, every kind of denial, bad tokens and oversized
//! bodies; meanwhile the authorization server is stopped, then restarted on the same port
//! signing with a new key, and the allowed calls switch to tokens of that new key.
//!
//! Every answer is checked against what its kind must get. The test fails on any unexpected
//! answer, any 5xx, any denied call that reached its tool ("wrong allow"), and resident memory
//! that grows by more than the stated bound between the first quarter and the end.

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use axum::Router;
use common::approvals::Approvals;
use common::peers::{AuthServer, GatedServer};
use common::policy::DemoPolicy;
use common::tokens::{TestKey, claims};
use common::tools::{DeployCount, mcp_service_counting};
use mcp_gate::{Gate, KeyRefresh};
use serde_json::{Value, json};

const CLIENT: &str = "mcp-client";
const SECRET: &str = "mcp-client-secret";
/// Resident memory may grow by at most this much between the end of the first quarter and the
/// end of the run: every cache the layer keeps is bounded.
const RSS_GROWTH_BOUND_KIB: u64 = 64 * 1024;

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kib| kib.parse().ok())
        })
        .unwrap_or(0)
}

/// What one worker sends, in turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Allowed,
    Scope,
    Credential,
    Unavailable,
    Undisclosed,
    UrlApproval,
    Confirmation,
    Task,
    GarbageToken,
    TamperedToken,
    ForeignAudience,
    UnknownKey,
    Oversized,
}

const KINDS: [Kind; 13] = [
    Kind::Allowed,
    Kind::Scope,
    Kind::Credential,
    Kind::Unavailable,
    Kind::Undisclosed,
    Kind::UrlApproval,
    Kind::Confirmation,
    Kind::Task,
    Kind::GarbageToken,
    Kind::TamperedToken,
    Kind::ForeignAudience,
    Kind::UnknownKey,
    Kind::Oversized,
];

/// Texts only a tool that ran can produce. None may ever reach a denied caller.
const TOOL_OUTPUTS: [&str; 6] = [
    "everything deleted",
    "admin report",
    "mayonnaise",
    "shared folder",
    "deleted ",
    "transferred",
];

/// A well-formed call one byte over the layer's 4 MiB limit, built once.
static OVERSIZED: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    let head = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":""#;
    let tail = r#""}}}"#;
    let limit = 4 * 1024 * 1024;
    format!(
        "{head}{}{tail}",
        "x".repeat(limit + 1 - head.len() - tail.len())
    )
});

#[derive(Default)]
struct Tokens {
    valid: String,
    tampered: String,
    foreign_audience: String,
    unknown_key: String,
}

#[derive(Default, Debug, Clone)]
struct Tally {
    sent: u64,
    expected: u64,
    unexpected: u64,
    examples: Vec<String>,
    total_ms: f64,
    max_ms: f64,
}

struct Request {
    body: String,
    headers: Vec<(&'static str, String)>,
}

fn legacy_call(tool: &str, arguments: Value) -> Request {
    Request {
        body: json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": arguments}}).to_string(),
        headers: Vec::new(),
    }
}

fn modern_call(tool: &str, arguments: Value, capabilities: Value) -> Request {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
    "name": tool, "arguments": arguments,
    "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": capabilities,
    }}});
    Request {
        body: body.to_string(),
        headers: vec![
            ("mcp-protocol-version", "2026-07-28".to_owned()),
            ("mcp-method", "tools/call".to_owned()),
            ("mcp-name", tool.to_owned()),
        ],
    }
}

/// The request of `kind` (number `n`), and the token it carries.
fn request(kind: Kind, n: u64, tokens: &Tokens) -> (Request, String) {
    let valid = tokens.valid.clone();
    let echo = || legacy_call("echo", json!({"text": format!("soak-{n}")}));
    match kind {
        Kind::Allowed => (echo(), valid),
        Kind::Scope => (legacy_call("admin_report", json!({})), valid),
        Kind::Credential => (
            legacy_call(
                "transfer",
                json!({"amount": "400.00", "currency": "EUR", "iban": "DE00"}),
            ),
            valid,
        ),
        Kind::Unavailable => (legacy_call("delete_everything", json!({})), valid),
        Kind::Undisclosed => (legacy_call("secret_sauce", json!({})), valid),
        Kind::UrlApproval => (
            modern_call(
                "share_folder",
                json!({"folder": format!("f{n}")}),
                json!({"elicitation": {"url": {}}}),
            ),
            valid,
        ),
        Kind::Confirmation => (
            modern_call(
                "delete_file",
                json!({"path": format!("p{n}")}),
                json!({"elicitation": {"form": {}}}),
            ),
            valid,
        ),
        Kind::Task => (
            modern_call(
                "deploy",
                json!({"env": format!("e{n}")}),
                json!({"extensions": {"io.modelcontextprotocol/tasks": {}}}),
            ),
            valid,
        ),
        Kind::GarbageToken => (echo(), "not-a-token".to_owned()),
        Kind::TamperedToken => (echo(), tokens.tampered.clone()),
        Kind::ForeignAudience => (echo(), tokens.foreign_audience.clone()),
        Kind::UnknownKey => (echo(), tokens.unknown_key.clone()),
        Kind::Oversized => {
            let mut call = echo();
            call.body = OVERSIZED.clone();
            (call, valid)
        }
    }
}

/// How long after the switch to the new key's tokens a valid token may still be refused as
/// signed by an unknown key: unknown-key tokens keep the refresh cooldown (500 ms here) busy,
/// so the gate may learn the new key up to one cooldown late. Refused, never allowed.
const ROTATION_GRACE: Duration = Duration::from_millis(2500);

/// Whether the answer is the one `kind` must get. `rotation_grace`: the request carried a
/// token of the new key within [`ROTATION_GRACE`] of the switch.
fn check(
    kind: Kind,
    n: u64,
    status: u16,
    www: Option<&str>,
    text: &str,
    rotation_grace: bool,
) -> Result<(), String> {
    let body: Value = serde_json::from_str(text).unwrap_or(Value::Null);
    let result = &body["result"];
    let envelope = &result["_meta"]["io.modelcontextprotocol/authorization"];
    let www = www.unwrap_or("");
    if kind != Kind::Allowed && TOOL_OUTPUTS.iter().any(|out| text.contains(out)) {
        return Err(format!("WRONG ALLOW: {status} {text:.200}"));
    }
    if kind != Kind::Allowed && text.contains("soak-") && result["isError"] == false {
        return Err(format!("WRONG ALLOW: {status} {text:.200}"));
    }
    let carries_valid_token = !matches!(
        kind,
        Kind::GarbageToken | Kind::TamperedToken | Kind::ForeignAudience | Kind::UnknownKey
    );
    if rotation_grace
        && carries_valid_token
        && status == 401
        && www.contains("signed with an unknown key")
    {
        return Ok(());
    }
    let ok = match kind {
        Kind::Allowed => {
            status == 200 && result["content"][0]["text"] == json!(format!("soak-{n}"))
        }
        Kind::Scope => status == 403 && www.contains("insufficient_scope"),
        Kind::Credential => status == 401 && www.contains("insufficient_authorization"),
        Kind::Unavailable => {
            status == 200 && result["isError"] == true && envelope["remediation"] == "unavailable"
        }
        Kind::Undisclosed => {
            status == 200 && result["isError"] == true && envelope["remediation"] == "undisclosed"
        }
        Kind::UrlApproval | Kind::Confirmation => {
            status == 200 && result["resultType"] == "input_required"
        }
        Kind::Task => status == 200 && result["resultType"] == "task",
        Kind::GarbageToken | Kind::TamperedToken | Kind::ForeignAudience | Kind::UnknownKey => {
            status == 401 && www.contains("invalid_token")
        }
        Kind::Oversized => status == 413,
    };
    if ok {
        Ok(())
    } else {
        Err(format!("{status} www={www:?} {text:.200}"))
    }
}

fn tamper(token: &str) -> String {
    let mut bytes = token.as_bytes().to_vec();
    let last = bytes.len() - 2;
    bytes[last] = if bytes[last] == b'A' { b'B' } else { b'A' };
    String::from_utf8(bytes).expect("ascii")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn soak_mixed_load_through_an_issuer_outage_and_key_rotation() {
    let seconds = env_or("SOAK_SECONDS", 60);
    let connections = env_or("SOAK_CONNECTIONS", 64) as usize;
    let keys_file = std::env::temp_dir().join(format!("mcp-gate-soak-keys-{}", std::process::id()));
    let keys_file = keys_file.to_string_lossy().into_owned();
    let auth = AuthServer::start(&[("AS_KEYS_FILE", &keys_file)]).await;
    let (issuer, port) = (auth.issuer.clone(), auth.port.to_string());
    let deploys = DeployCount::default();
    let server = {
        let issuer = issuer.clone();
        GatedServer::start_full(
            move |resource| {
                let origin = resource.trim_end_matches("/mcp").to_owned();
                Gate::builder()
                    .evaluate(DemoPolicy::new(Approvals::default(), origin))
                    .development_mode()
                    .issuer(issuer.as_str())
                    .required_scopes(["mcp:read"])
                    .key_refresh(KeyRefresh::default().cooldown(Duration::from_millis(500)))
                    .task_ttl(Duration::from_secs(2))
                    .task_poll_interval(Duration::from_millis(100))
                    // One client holds thousands of calls here: the load, not the per-owner
                    // quota (tests/suite/quotas.rs), is what this run measures.
                    .tasks_per_owner(100_000)
            },
            Router::new().nest_service("/mcp", mcp_service_counting(deploys.clone())),
            |_| Router::new(),
        )
        .await
    };
    let url = server.url.clone();
    let valid = auth
        .token(CLIENT, SECRET, Some("mcp:read"), Some(&url))
        .await;
    let tokens = Arc::new(RwLock::new(Tokens {
        tampered: tamper(&valid),
        foreign_audience: auth
            .token(
                CLIENT,
                SECRET,
                Some("mcp:read"),
                Some("http://127.0.0.1:1/other"),
            )
            .await,
        unknown_key: TestKey::es256("not-the-issuers").mint(&claims(&issuer, &url, "mcp:read")),
        valid,
    }));

    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(connections)
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    // Oversized bodies go on connections of their own: the server answers 413 and closes the
    // connection without reading the rest, and a pooled connection closing under a later
    // request would be the client's race, not the server's answer.
    let unpooled = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let tallies: Arc<Mutex<BTreeMap<Kind, Tally>>> = Arc::default();
    let switched_at: Arc<Mutex<Option<Instant>>> = Arc::default();
    let counter = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let deadline = started + Duration::from_secs(seconds);
    let workers: Vec<_> = (0..connections)
        .map(|worker| {
            let switched_at = switched_at.clone();
            let (http, unpooled, url, tokens, tallies, counter) = (
                http.clone(),
                unpooled.clone(),
                url.clone(),
                tokens.clone(),
                tallies.clone(),
                counter.clone(),
            );
            tokio::spawn(async move {
                let mut turn = worker;
                while Instant::now() < deadline {
                    let n = counter.fetch_add(1, Ordering::Relaxed);
                    // Oversized bodies are heavy: one turn in four of theirs is skipped.
                    let kind = KINDS[turn % KINDS.len()];
                    turn += 1;
                    if kind == Kind::Oversized && n % 4 != 0 {
                        continue;
                    }
                    let (call, token) = {
                        let tokens = tokens.read().unwrap();
                        request(kind, n, &tokens)
                    };
                    let client = if kind == Kind::Oversized {
                        &unpooled
                    } else {
                        &http
                    };
                    let mut builder = client
                        .post(&url)
                        .header("content-type", "application/json")
                        .header("accept", "application/json, text/event-stream")
                        .bearer_auth(token)
                        .body(call.body);
                    for (name, value) in &call.headers {
                        builder = builder.header(*name, value);
                    }
                    let sent_at = Instant::now();
                    let rotation_grace = switched_at
                        .lock()
                        .unwrap()
                        .is_some_and(|at| sent_at < at + ROTATION_GRACE);
                    let outcome = match builder.send().await {
                        Ok(response) => {
                            let status = response.status().as_u16();
                            let www = response
                                .headers()
                                .get("www-authenticate")
                                .and_then(|v| v.to_str().ok())
                                .map(str::to_owned);
                            let text = response.text().await.unwrap_or_default();
                            check(kind, n, status, www.as_deref(), &text, rotation_grace)
                        }
                        // The server may close a connection on an oversized body before
                        // reading it all; that is a refusal, not an allow.
                        Err(error) if kind == Kind::Oversized => {
                            if error.is_timeout() {
                                Err(format!("timeout: {error}"))
                            } else {
                                Ok(())
                            }
                        }
                        Err(error) => Err(format!("transport error: {error}")),
                    };
                    let ms = sent_at.elapsed().as_secs_f64() * 1e3;
                    let mut tallies = tallies.lock().unwrap();
                    let tally = tallies.entry(kind).or_default();
                    tally.sent += 1;
                    tally.total_ms += ms;
                    tally.max_ms = tally.max_ms.max(ms);
                    match outcome {
                        Ok(()) => tally.expected += 1,
                        Err(example) => {
                            tally.unexpected += 1;
                            if tally.examples.len() < 3 {
                                tally.examples.push(example);
                            }
                        }
                    }
                }
            })
        })
        .collect();

    // The issuer's outage and rotation, on a timeline relative to the run.
    let at = |fraction: f64| started + Duration::from_secs_f64(seconds as f64 * fraction);
    tokio::time::sleep_until(at(0.25).into()).await;
    let rss_early = rss_kib();
    auth.stop().await;
    tokio::time::sleep_until(at(0.45).into()).await;
    let rotated = AuthServer::start(&[
        ("AS_KEYS_FILE", &keys_file),
        ("AS_PORT", &port),
        ("AS_ROTATE", "1"),
    ])
    .await;
    let fresh = rotated
        .token(CLIENT, SECRET, Some("mcp:read"), Some(&url))
        .await;
    {
        let mut tokens = tokens.write().unwrap();
        tokens.tampered = tamper(&fresh);
        tokens.valid = fresh;
        *switched_at.lock().unwrap() = Some(Instant::now());
    }
    for worker in workers {
        worker.await.unwrap();
    }
    let rss_end = rss_kib();
    let elapsed = started.elapsed().as_secs_f64();
    let _ = std::fs::remove_file(&keys_file);

    let tallies = tallies.lock().unwrap().clone();
    let total: u64 = tallies.values().map(|t| t.sent).sum();
    let unexpected: u64 = tallies.values().map(|t| t.unexpected).sum();
    println!(
        "soak: {total} requests in {elapsed:.1} s ({:.0}/s) over {connections} connections",
        total as f64 / elapsed
    );
    for (kind, tally) in &tallies {
        println!(
            "  {kind:?}: {} sent, {} as expected, {} unexpected {:?}; mean {:.1} ms, max {:.1} ms",
            tally.sent,
            tally.expected,
            tally.unexpected,
            tally.examples,
            tally.total_ms / tally.sent.max(1) as f64,
            tally.max_ms
        );
    }
    println!(
        "  resident memory: {rss_early} KiB after the first quarter, {rss_end} KiB at the end (bound: +{RSS_GROWTH_BOUND_KIB} KiB)"
    );
    println!(
        "  JWKS fetches by the gate: {}",
        server.gate.jwks_fetch_count()
    );
    assert_eq!(unexpected, 0, "unexpected answers: {tallies:#?}");
    assert!(
        tallies.keys().count() == KINDS.len(),
        "every kind was sent: {tallies:#?}"
    );
    assert!(
        tallies.values().all(|t| t.sent > 0),
        "every kind was sent: {tallies:#?}"
    );
    assert_eq!(deploys.load(Ordering::SeqCst), 0, "no held call ran");
    assert!(
        rss_end <= rss_early + RSS_GROWTH_BOUND_KIB,
        "resident memory grew from {rss_early} KiB to {rss_end} KiB"
    );
}
