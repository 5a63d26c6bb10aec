//! The cost of authentication in-process, without sockets: `Gate::authenticate` (bearer
//! extraction, SHA-256 of the token, verified-token cache, ES256 verification, scope check)
//! with and without the cache, plus the refusal path and a 10,000-token working set against
//! a cache that holds it and one that does not.
//!
//! ```text
//! cargo bench --bench verify
//! BENCH_VERIFY_SECONDS=0.3 BENCH_VERIFY_ITERATIONS=20000 cargo bench --bench verify   # short (CI)
//! ```
//!
//! Environment (all optional):
//! - `BENCH_VERIFY_SECONDS`    time limit per case (default 2, fractions allowed)
//! - `BENCH_VERIFY_ITERATIONS` iteration limit per case (default 200,000); whichever comes first
//! - `BENCH_VERIFY_TOKENS`     distinct tokens of the working-set cases (default 10,000)
//!
//! Every call is timed on its own (for p50/p99); the mean is wall time of the loop divided by
//! the iterations, so it includes the two `Instant::now()` reads per call (printed below).
//! The exit status is 1 if any call had an unexpected outcome.

#[path = "../tests/common/tokens.rs"]
mod tokens;

mod common;

use common::env_or;
use std::hint::black_box;
use std::time::{Duration, Instant};

use http::{HeaderMap, HeaderValue, Uri, header};
use mcp_gate::{Gate, Issuer, StaticKeys};
use serde_json::json;

const ISSUER: &str = "https://issuer.bench.example";
const RESOURCE: &str = "https://mcp.bench.example/mcp";
const SCOPE: &str = "mcp:read";

struct Settings {
    seconds: f64,
    iterations: usize,
    tokens: usize,
}

/// What a case expects of every call.
#[derive(Clone, Copy, PartialEq)]
enum Expect {
    Accepted,
    Refused,
}

struct Case {
    name: String,
    iterations: usize,
    mean_ns: f64,
    samples: Vec<u64>,
    unexpected: usize,
    first_unexpected: Option<String>,
}

impl Case {
    fn percentile(&self, p: f64) -> f64 {
        let mut sorted = self.samples.clone();
        sorted.sort_unstable();
        let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
        sorted[rank.clamp(1, sorted.len()) - 1] as f64
    }

    /// Share of calls faster than `threshold_ns`: with hits around a microsecond and misses
    /// (a full ES256 verification) around a hundred, this estimates the cache hit rate.
    fn share_below(&self, threshold_ns: f64) -> f64 {
        self.samples
            .iter()
            .filter(|&&s| (s as f64) < threshold_ns)
            .count() as f64
            / self.samples.len() as f64
    }
}

/// Calls `authenticate` cycling through `requests`, first for a short warm-up, then measured.
async fn measure(
    name: impl Into<String>,
    gate: &Gate,
    requests: &[HeaderMap],
    uri: &Uri,
    expect: Expect,
    warmup_iterations: usize,
    settings: &Settings,
) -> Case {
    let mut unexpected = 0;
    let mut first_unexpected = None;
    let mut check = |outcome: &Result<mcp_gate::Principal, mcp_gate::AuthRejection>| {
        let ok = matches!(
            (expect, outcome),
            (Expect::Accepted, Ok(_)) | (Expect::Refused, Err(_))
        );
        if !ok {
            unexpected += 1;
            if first_unexpected.is_none() {
                first_unexpected = Some(match outcome {
                    Ok(principal) => format!(
                        "accepted (subject {:?}) but a refusal was expected",
                        principal.subject()
                    ),
                    Err(error) => format!("refused: {error:?}"),
                });
            }
        }
    };

    let mut next = 0;
    for _ in 0..warmup_iterations {
        let outcome = gate.authenticate(&requests[next], uri).await;
        check(&outcome);
        black_box(outcome.ok());
        next = (next + 1) % requests.len();
    }

    let limit = Duration::from_secs_f64(settings.seconds);
    let mut samples = Vec::with_capacity(settings.iterations);
    let start = Instant::now();
    while samples.len() < settings.iterations {
        let before = Instant::now();
        let outcome = gate.authenticate(black_box(&requests[next]), uri).await;
        let after = Instant::now();
        samples.push((after - before).as_nanos() as u64);
        check(&outcome);
        black_box(outcome.ok());
        next = (next + 1) % requests.len();
        // Checking the clock every call is free here: `after` is already read.
        if after - start >= limit {
            break;
        }
    }
    let elapsed = start.elapsed();
    Case {
        name: name.into(),
        iterations: samples.len(),
        mean_ns: elapsed.as_nanos() as f64 / samples.len() as f64,
        samples,
        unexpected,
        first_unexpected,
    }
}

fn gate(keys: &StaticKeys, cache_capacity: Option<u64>) -> Gate {
    let mut builder = Gate::builder()
        .resource(RESOURCE)
        .issuer(Issuer::with_keys(ISSUER, keys.clone()))
        .required_scopes([SCOPE])
        .evaluate(mcp_gate::policy::allow_all());
    if let Some(capacity) = cache_capacity {
        builder = builder.token_cache_capacity(capacity);
    }
    builder.build().expect("gate")
}

fn bearer(token: &str) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(
        header::AUTHORIZATION,
        HeaderValue::from_str(&format!("Bearer {token}")).expect("header value"),
    );
    headers
}

/// Cost of the two clock reads around every timed call.
fn timer_overhead_ns() -> f64 {
    let rounds = 200_000;
    let start = Instant::now();
    for _ in 0..rounds {
        black_box(Instant::now());
    }
    start.elapsed().as_nanos() as f64 / rounds as f64
}

fn main() {
    let settings = Settings {
        seconds: env_or("BENCH_VERIFY_SECONDS", 2.0, 0.01, 120.0),
        iterations: env_or("BENCH_VERIFY_ITERATIONS", 200_000, 100, 10_000_000),
        tokens: env_or("BENCH_VERIFY_TOKENS", 10_000, 10, 200_000),
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let failed = runtime.block_on(bench(&settings));
    if failed {
        std::process::exit(1);
    }
}

async fn bench(settings: &Settings) -> bool {
    println!("mcp-gate verify: Gate::authenticate in-process (no sockets), one thread");
    println!(
        "  per case: at most {:.2} s or {} iterations after a warm-up; ES256 static key, policy allow_all",
        settings.seconds, settings.iterations
    );
    println!(
        "  clock read: {:.1} ns (two per timed call, included in every figure)",
        timer_overhead_ns()
    );

    let key = tokens::TestKey::es256("bench-key");
    let keys = StaticKeys::from_jwks_json(&key.jwks_json()).expect("static keys");
    let uri: Uri = "/mcp".parse().unwrap();
    let exp = tokens::now() + 3600;
    let mint = |jti: Option<usize>| {
        let mut claims = tokens::claims(ISSUER, RESOURCE, SCOPE);
        claims["exp"] = json!(exp);
        if let Some(jti) = jti {
            claims["jti"] = json!(format!("bench-{jti}"));
        }
        key.mint(&claims)
    };
    let token = mint(None);
    println!("  token: {} bytes", token.len());
    let one = vec![bearer(&token)];
    let anonymous = vec![HeaderMap::new()];

    let cached = gate(&keys, None);
    let uncached = gate(&keys, Some(0));
    let mut cases = Vec::new();
    cases.push(
        measure(
            "cached hit (1 token, cache on)",
            &cached,
            &one,
            &uri,
            Expect::Accepted,
            10_000,
            settings,
        )
        .await,
    );
    cases.push(
        measure(
            "uncached ES256 verify (cache off)",
            &uncached,
            &one,
            &uri,
            Expect::Accepted,
            200,
            settings,
        )
        .await,
    );
    cases.push(
        measure(
            "refusal: no Authorization header",
            &cached,
            &anonymous,
            &uri,
            Expect::Refused,
            10_000,
            settings,
        )
        .await,
    );

    let minting = Instant::now();
    let many: Vec<HeaderMap> = (0..settings.tokens)
        .map(|i| bearer(&mint(Some(i))))
        .collect();
    println!(
        "  minted {} distinct tokens in {:.2} s",
        many.len(),
        minting.elapsed().as_secs_f64()
    );
    println!();
    // One full pass first, so the cache is as full as it will get before measuring.
    let n = settings.tokens;
    let default_capacity = gate(&keys, None);
    cases.push(
        measure(
            format!("{n} tokens, cache 10,000 (default)"),
            &default_capacity,
            &many,
            &uri,
            Expect::Accepted,
            n,
            settings,
        )
        .await,
    );
    let small = gate(&keys, Some(1_000));
    cases.push(
        measure(
            format!("{n} tokens, cache 1,000"),
            &small,
            &many,
            &uri,
            Expect::Accepted,
            n,
            settings,
        )
        .await,
    );

    let hit = cases[0].percentile(50.0);
    let miss = cases[1].percentile(50.0);
    // Geometric mean of a hit and a miss: calls below it are counted as cache hits.
    let threshold = (hit * miss).sqrt();

    let header = format!(
        "{:<36} {:>8} {:>11} {:>11} {:>11} {:>9}",
        "case", "iters", "mean ns/op", "p50 ns", "p99 ns", "est. hits"
    );
    println!("{header}");
    println!("{}", "-".repeat(header.len()));
    for (i, case) in cases.iter().enumerate() {
        let hits = if i >= 3 {
            format!("{:.1}%", 100.0 * case.share_below(threshold))
        } else {
            "-".to_owned()
        };
        println!(
            "{:<36} {:>8} {:>11.0} {:>11.0} {:>11.0} {:>9}",
            case.name,
            case.iterations,
            case.mean_ns,
            case.percentile(50.0),
            case.percentile(99.0),
            hits
        );
    }
    println!("{}", "-".repeat(header.len()));
    println!(
        "uncached/cached: {:.0}x (mean), {:.0}x (p50)",
        cases[1].mean_ns / cases[0].mean_ns,
        miss / hit
    );
    println!(
        "est. hits: share of calls under {:.0} ns (geometric mean of the cached and uncached p50), i.e. served from the cache",
        threshold
    );

    let unexpected: usize = cases.iter().map(|c| c.unexpected).sum();
    if unexpected > 0 {
        println!();
        println!("!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!");
        println!(
            "!!! {unexpected} CALL(S) WITH AN UNEXPECTED OUTCOME — THE FIGURES ABOVE ARE NOT VALID"
        );
        for case in cases.iter().filter(|c| c.unexpected > 0) {
            println!(
                "!!! {}: {} unexpected, first: {}",
                case.name,
                case.unexpected,
                case.first_unexpected.as_deref().unwrap_or("?")
            );
        }
        println!("!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!");
        return true;
    }
    false
}
