//! How long a revocation takes to reach another replica: the time from `Gate::revoke`
//! returning on replica A to replica B refusing the revoked token (issue 28: p99 under 1 s).
//!
//! ```text
//! cargo bench --features redis --bench revocation
//! REVOCATION_TRIALS=300 cargo bench --features redis --bench revocation
//! ```
//!
//! One process starts a real `redis-server` on a free loopback port, and two gates, A and B,
//! each with its own `RedisRevocations` (its own connections and feed) on one namespace,
//! trusting one test key. Each trial mints a token for a new subject, has B accept it (so B
//! holds it in its token cache), revokes the subject on A, and from the moment `revoke`
//! returns asks B again (`Gate::authenticate`, the layer's own authentication path, every
//! 0.5 ms) until B refuses it as revoked; a trial that takes over 10 s counts as 10 s.
//! Printed: p50, p95, p99 and max of those times over `REVOCATION_TRIALS` (100) trials, how
//! many trials B refused at its first ask (the published entry often reaches B's feed before
//! A's `revoke` has returned: the script publishes it before it answers), and `PASS` or
//! `FAIL` for p99 under 1 s. Exit status 1 when a trial failed outright.
//!
//! Only `cargo bench` runs it (cargo passes `--bench`); built by `cargo test --benches` or
//! `--all-targets`, it says so and returns at once.

#[path = "../tests/common/tokens.rs"]
mod tokens;

#[path = "../tests/common/ports.rs"]
#[allow(dead_code)]
mod ports;
#[path = "../tests/common/redis_server.rs"]
#[allow(dead_code)]
mod redis_server;

mod common;

use std::time::{Duration, Instant};

use http::{HeaderMap, HeaderValue, Uri, header};
use mcp_gate::auth::{AuthError, InvalidToken, Revocation};
use mcp_gate::store::revocations::RedisRevocations;
use mcp_gate::{Gate, Issuer, StaticKeys};
use serde_json::json;
use tokens::{TestKey, claims, now};

const ISSUER: &str = "https://issuer.bench.example";
const RESOURCE: &str = "https://mcp.bench.example/mcp";
const NAMESPACE: &str = "revocation-bench";
/// The longest one trial is waited for.
const TRIAL_LIMIT: Duration = Duration::from_secs(10);
/// The criterion.
const TARGET: Duration = Duration::from_secs(1);

async fn replica(url: &str, key: &TestKey) -> Gate {
    let set = RedisRevocations::new(url, NAMESPACE, 100_000)
        .await
        .expect("the revocation set connects");
    let gate = Gate::builder()
        .resource(RESOURCE)
        .issuer(Issuer::with_keys(
            ISSUER,
            StaticKeys::from_jwks_json(&key.jwks_json()).expect("keys"),
        ))
        .evaluate(mcp_gate::policy::allow_all())
        .revocations(set)
        .build()
        .expect("gate builds");
    // The feed's first sync.
    let started = Instant::now();
    while !gate.readiness().await.is_ready() {
        assert!(started.elapsed() < TRIAL_LIMIT, "the feed never synced");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    gate
}

fn headers(token: &str) -> HeaderMap {
    let mut headers = HeaderMap::new();
    let value = HeaderValue::from_str(&format!("Bearer {token}")).expect("header");
    headers.insert(header::AUTHORIZATION, value);
    headers
}

/// One trial: the time from `revoke` returning on A to B refusing, and whether B refused at
/// its first ask; `None` when B never accepted the token or refused it for another reason.
async fn trial(a: &Gate, b: &Gate, key: &TestKey, n: usize) -> Option<(Duration, bool)> {
    let subject = format!("bench-user-{n}-{}", now());
    let mut claims = claims(ISSUER, RESOURCE, "mcp:read");
    claims["sub"] = json!(subject);
    claims["iat"] = json!(now() - 5);
    let request = headers(&key.mint(&claims));
    let uri = Uri::from_static("/mcp");
    b.authenticate(&request, &uri).await.ok()?;
    a.revoke(Revocation::subject(ISSUER, subject))
        .await
        .expect("revoked on A");
    let revoked_at = Instant::now();
    let mut first = true;
    loop {
        match b.authenticate(&request, &uri).await {
            Ok(_) if revoked_at.elapsed() < TRIAL_LIMIT => {
                first = false;
                tokio::time::sleep(Duration::from_micros(500)).await;
            }
            Ok(_) => return Some((TRIAL_LIMIT, false)),
            Err(refused) if *refused.error() == AuthError::InvalidToken(InvalidToken::Revoked) => {
                return Some((revoked_at.elapsed(), first));
            }
            Err(refused) => {
                eprintln!("revocation: trial {n}: B refused for another reason: {refused:?}");
                return None;
            }
        }
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

async fn bench(trials: usize) -> bool {
    let Some(redis) = redis_server::RedisServer::start_or_skip() else {
        println!("revocation: skipped, redis-server cannot be run");
        return false;
    };
    let key = TestKey::es256("k1");
    let a = replica(&redis.url(), &key).await;
    let b = replica(&redis.url(), &key).await;
    let mut times = Vec::with_capacity(trials);
    let mut at_once = 0;
    let mut failed = false;
    for n in 0..trials {
        match trial(&a, &b, &key, n).await {
            Some((took, first)) => {
                times.push(took);
                at_once += usize::from(first);
            }
            None => failed = true,
        }
    }
    if times.is_empty() {
        println!("revocation: no trial finished");
        return true;
    }
    times.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let p99 = percentile(&times, 99.0);
    println!(
        "revocation: revoke on A -> refused on B, {} trials ({at_once} refused at B's first ask after revoke returned): p50 {:.3} ms, p95 {:.3} ms, p99 {:.3} ms, max {:.3} ms",
        times.len(),
        ms(percentile(&times, 50.0)),
        ms(percentile(&times, 95.0)),
        ms(p99),
        ms(*times.last().unwrap_or(&Duration::ZERO)),
    );
    let verdict = if p99 < TARGET { "PASS" } else { "FAIL" };
    println!("revocation: p99 under {} ms: {verdict}", TARGET.as_millis());
    failed
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` (or `--all-targets`) does not.
    if !std::env::args().any(|arg| arg == "--bench") {
        println!("revocation: run it with `cargo bench --features redis --bench revocation`");
        return;
    }
    let trials = common::env_or("REVOCATION_TRIALS", 100usize, 1, 100_000);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let failed = runtime.block_on(bench(trials));
    runtime.shutdown_timeout(Duration::from_secs(2));
    if failed {
        std::process::exit(1);
    }
}
