//! The layer's own cost per request, without the network: the example rmcp server called
//! through `tower::ServiceExt::oneshot`, bare and behind the gate (cached ES256 token, allow),
//! and a denial answered by the layer, sequentially on one thread.
//!
//! ```text
//! cargo bench --bench pipeline
//! PIPELINE_REQUESTS=2000 valgrind --tool=callgrind target/release/deps/pipeline-*   # a profile
//! ```
//!
//! Environment: `PIPELINE_REQUESTS` (default 20,000 per configuration), `PIPELINE_ROUNDS`
//! (default 3; the median round is reported), `PIPELINE_ONLY` (`a`, `b` or `d`: one
//! configuration, for a profiler). Prints microseconds per request for each
//! configuration, and the layer's added cost: gated minus bare. It also counts heap
//! allocations per request (a global allocator that counts, then defers to the system's):
//! unlike time, that count is the same on every machine, and on a loaded server each
//! allocation costs more than its instructions suggest.
//!
//! With the feature `metrics`, the gate counts every decision; `PIPELINE_METRICS=prometheus`
//! installs the Prometheus recorder first (without it the counts go to no recorder):
//! `cargo bench --features metrics --bench pipeline`. `PIPELINE_LIMIT=<rate>` adds a
//! per-principal rate limit in memory (`1000000/s burst 1000000` never refuses here).
//!
//! `PIPELINE_DPOP=1` adds configuration (e): a DPoP-bound token (`cnf.jkt`, cached as in (b))
//! presented with the DPoP scheme and a fresh proof per request, checked and its `jti`
//! recorded in an in-memory replay store (bounds wide enough for the run). The proofs are
//! signed before anything is measured (a fixed pool of 4,000 when `PIPELINE_ONLY` is set, so
//! that a profiler's runs of different lengths sign the same number), so (e) minus (b) is the
//! gate's cost of a DPoP call, plus the request's one more header.
//! `PIPELINE_REVOCATION=memory:<n>` checks every call against a memory revocation set holding
//! `n` revocations of other subjects, clients and tokens (none matches the bench's token, so
//! every lookup is made and misses); `memory` alone, an empty set.
//!
//! `PIPELINE_ARG_BYTES=<n>` makes the `echo` call's `text` argument `n` bytes long (ASCII `x`;
//! default: the 19 bytes of `mcp-gate-bench-ping`), for the cost per argument byte
//! (`scripts/cost-check.sh`); the answer echoes it, so both (a) and (b) carry it both ways.

#[path = "../tests/common/tokens.rs"]
mod tokens;

#[path = "../examples/server/tools.rs"]
#[allow(dead_code)]
mod tools;

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::Body;
use bytes::Bytes;
use common::env_or;
use http::{Request, StatusCode};
use mcp_gate::policy::{Decision, Evaluation};
use mcp_gate::{Gate, Issuer, StaticKeys};

const ISSUER: &str = "https://issuer.bench.example";
const RESOURCE: &str = "http://127.0.0.1:9/mcp";
const BODY: &str = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"mcp-gate-bench-ping"}}}"#;

/// The `echo` call every configuration answers: its body, and the length of its argument.
struct Payload {
    body: Bytes,
    argument: usize,
}

impl Payload {
    /// [`BODY`], or with `PIPELINE_ARG_BYTES` an argument of that many bytes.
    fn from_env() -> Self {
        if std::env::var_os("PIPELINE_ARG_BYTES").is_none() {
            return Self {
                body: Bytes::from_static(BODY.as_bytes()),
                argument: "mcp-gate-bench-ping".len(),
            };
        }
        let argument = env_or("PIPELINE_ARG_BYTES", 0usize, 1, 64 << 20);
        let body = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": "x".repeat(argument)}}});
        Self {
            body: Bytes::from(body.to_string()),
            argument,
        }
    }
}

/// The system allocator, counting allocations and the bytes asked for.
struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
static ALLOCATED_BYTES: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call defers to `System` with the caller's own arguments; the counters are
// plain atomics.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        ALLOCATED_BYTES.fetch_add(layout.size() as u64, Ordering::Relaxed);
        // SAFETY: the caller's contract is passed on unchanged.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        ALLOCATED_BYTES.fetch_add(new_size as u64, Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Allocations (with reallocations) and bytes asked for, per request, over `requests`
/// sequential requests after a warm-up.
async fn allocations(
    app: &Router,
    token: &Auth,
    payload: &Payload,
    deny: bool,
    requests: u64,
) -> (f64, f64) {
    for _ in 0..requests / 10 {
        one(app, token, payload, deny).await;
    }
    let (count, bytes) = (
        ALLOCATIONS.load(Ordering::Relaxed),
        ALLOCATED_BYTES.load(Ordering::Relaxed),
    );
    for _ in 0..requests {
        one(app, token, payload, deny).await;
    }
    let per = |now: u64, before: u64| (now - before) as f64 / requests as f64;
    (
        per(ALLOCATIONS.load(Ordering::Relaxed), count),
        per(ALLOCATED_BYTES.load(Ordering::Relaxed), bytes),
    )
}

fn router(gate: Option<&Gate>) -> Router {
    let app = Router::new().nest_service("/mcp", tools::mcp_service());
    match gate {
        Some(gate) => app.layer(gate.layer()),
        None => app,
    }
}

/// How a request presents its token: the `Authorization` value, and for DPoP the proofs to
/// send, one per request, signed in advance.
struct Auth {
    authorization: String,
    proofs: Option<std::cell::RefCell<std::vec::IntoIter<String>>>,
}

impl Auth {
    fn bearer(authorization: String) -> Self {
        Self {
            authorization,
            proofs: None,
        }
    }
}

/// `count` proofs for `token`, each with its own `jti`, signed with `key`.
fn dpop_proofs(key: &tokens::TestKey, token: &str, count: usize) -> Vec<String> {
    use base64::Engine as _;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use sha2::Digest as _;
    let mut jwk = serde_json::to_value(&key.jwk).expect("jwk");
    if let serde_json::Value::Object(members) = &mut jwk {
        members.retain(|name, _| matches!(name.as_str(), "kty" | "crv" | "x" | "y"));
    }
    let header = serde_json::json!({"typ": "dpop+jwt", "alg": "ES256", "jwk": jwk});
    let header = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&header).expect("header"));
    let ath = URL_SAFE_NO_PAD.encode(sha2::Sha256::digest(token.as_bytes()));
    let iat = tokens::now();
    (0..count)
        .map(|i| {
            let claims = serde_json::json!({
                "jti": format!("bench-{i}"), "htm": "POST", "htu": RESOURCE, "iat": iat, "ath": ath,
            });
            let claims = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&claims).expect("claims"));
            key.sign_segments(&header, &claims)
        })
        .collect()
}

fn gate(keys: StaticKeys, deny: bool) -> Gate {
    gate_with(keys, deny, false)
}

fn gate_with(keys: StaticKeys, deny: bool, dpop: bool) -> Gate {
    let builder = Gate::builder()
        .resource(RESOURCE)
        .issuer(Issuer::with_keys(ISSUER, keys))
        .required_scopes(["mcp:read"]);
    let builder = if deny {
        builder.evaluate(|_: Evaluation| async {
            Ok::<_, std::convert::Infallible>(Decision::unavailable("not here"))
        })
    } else {
        builder.evaluate(mcp_gate::policy::allow_all())
    };
    // `PIPELINE_LIMIT=<rate>` (for instance `1000000/s burst 1000000`): every allowed call is
    // also counted on a per-principal limit in memory, one that never refuses here.
    let builder = match std::env::var("PIPELINE_LIMIT") {
        Ok(rate) => builder.rate_limit(mcp_gate::limit::Limit::per_principal(
            rate.parse()
                .expect("PIPELINE_LIMIT is a rate, like `1000000/s`"),
        )),
        Err(_) => builder,
    };
    let builder = if dpop {
        builder.dpop(mcp_gate::auth::Dpop::new()).replay_store(
            mcp_gate::store::replay::MemoryReplayStore::new(10_000_000, 10_000_000),
        )
    } else {
        builder
    };
    let builder = match std::env::var("PIPELINE_REVOCATION") {
        Ok(spec) => builder.revocations(revocations(&spec)),
        Err(_) => builder,
    };
    builder.build().expect("gate builds")
}

/// `PIPELINE_REVOCATION`: `memory` or `memory:<n>`, a memory set with `n` revocations that
/// match nothing the bench sends.
fn revocations(spec: &str) -> mcp_gate::store::revocations::MemoryRevocations {
    use mcp_gate::auth::Revocation;
    use mcp_gate::store::revocations::{MemoryRevocations, RevocationEntry, RevocationStore};
    let held: usize = match spec.strip_prefix("memory") {
        Some("") => 0,
        Some(count) => count
            .strip_prefix(':')
            .and_then(|n| n.parse().ok())
            .expect("PIPELINE_REVOCATION is memory or memory:<n>"),
        None => panic!("PIPELINE_REVOCATION is memory or memory:<n>"),
    };
    let set = MemoryRevocations::new(held.max(1) * 3);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    for i in 0..held {
        for revocation in [
            Revocation::subject(ISSUER, format!("other-{i}")),
            Revocation::client(ISSUER, format!("other-client-{i}")),
            Revocation::token(&format!("other-token-{i}"), None),
        ] {
            let entry = RevocationEntry::new(revocation, now, now + 3_600_000);
            set.list().insert(&entry, now).expect("room");
        }
    }
    set
}

async fn one(app: &Router, token: &Auth, payload: &Payload, expect_denial: bool) {
    let mut request = Request::post("/mcp")
        .header("host", "127.0.0.1:9")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("authorization", token.authorization.as_str());
    if let Some(proofs) = &token.proofs {
        let proof = proofs
            .borrow_mut()
            .next()
            .expect("enough DPoP proofs signed");
        request = request.header("dpop", proof);
    }
    let request = request
        .body(Body::from(payload.body.clone()))
        .expect("request");
    let (status, bytes) = common::send(app, request).await;
    let head = || String::from_utf8_lossy(&bytes[..bytes.len().min(400)]).into_owned();
    assert_eq!(status, StatusCode::OK, "{}", head());
    // A denial is a small answer; an echo carries the argument back (not scanned whole when
    // large, which would add the bench's own work per argument byte).
    let denied = bytes.len() <= 4096 && bytes.windows(13).any(|w| w == b"authorization");
    assert_eq!(denied, expect_denial, "{}", head());
    assert!(
        expect_denial || bytes.len() > payload.argument,
        "{}",
        head()
    );
}

/// Microseconds per request over `requests` sequential requests.
async fn measure(app: &Router, token: &Auth, payload: &Payload, deny: bool, requests: u64) -> f64 {
    for _ in 0..requests / 10 {
        one(app, token, payload, deny).await;
    }
    let start = Instant::now();
    for _ in 0..requests {
        one(app, token, payload, deny).await;
    }
    start.elapsed().as_secs_f64() * 1e6 / requests as f64
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    #[cfg(feature = "metrics")]
    if std::env::var("PIPELINE_METRICS").as_deref() == Ok("prometheus") {
        let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
        metrics::set_global_recorder(recorder).expect("the only recorder");
    }
    let requests = env_or("PIPELINE_REQUESTS", 20_000u64, 10, 10_000_000);
    let rounds = env_or("PIPELINE_ROUNDS", 3usize, 1, 100);
    let key = tokens::TestKey::es256("bench");
    let keys = StaticKeys::from_jwks_json(&key.jwks_json()).expect("keys");
    let token = Auth::bearer(format!(
        "Bearer {}",
        key.mint(&tokens::claims(ISSUER, RESOURCE, "mcp:read"))
    ));
    let payload = Payload::from_env();
    let bare = router(None);
    let allow = router(Some(&gate(keys.clone(), false)));
    let deny = router(Some(&gate(keys.clone(), true)));
    // `PIPELINE_ONLY=b` runs one configuration, for a profiler.
    let only = std::env::var("PIPELINE_ONLY").unwrap_or_default();
    let runs = |name: &str| only.is_empty() || only == name;
    let with_dpop = std::env::var("PIPELINE_DPOP").as_deref() == Ok("1");
    let dpop = with_dpop.then(|| {
        let proof_key = tokens::TestKey::es256("dpop");
        let jkt = proof_key
            .jwk
            .thumbprint(jsonwebtoken::jwk::ThumbprintHash::SHA256)
            .expect("thumbprint");
        let mut claims = tokens::claims(ISSUER, RESOURCE, "mcp:read");
        claims["cnf"] = serde_json::json!({ "jkt": jkt });
        let bound = key.mint(&claims);
        // Warm-ups and rounds of the timing, then the counted allocations; a fixed pool when
        // one configuration runs alone (see the module documentation).
        let needed = if only.is_empty() {
            (requests as usize + requests as usize / 10) * rounds + 2_200
        } else {
            4_000
        };
        // The gate (and its replay store's memory) first: a proof issued before the store
        // began would be refused as unknowable.
        let app = router(Some(&gate_with(keys, false, true)));
        let proofs = dpop_proofs(&proof_key, &bound, needed);
        let auth = Auth {
            authorization: format!("DPoP {bound}"),
            proofs: Some(std::cell::RefCell::new(proofs.into_iter())),
        };
        (app, auth)
    });
    let runs_dpop = |name: &str| runs(name) && dpop.is_some();
    let (mut a, mut b, mut d, mut e) = (vec![0.0], vec![0.0], vec![0.0], vec![0.0]);
    for _ in 0..rounds {
        if runs("a") {
            a.push(measure(&bare, &token, &payload, false, requests).await);
        }
        if runs("b") {
            b.push(measure(&allow, &token, &payload, false, requests).await);
        }
        if runs("d") {
            d.push(measure(&deny, &token, &payload, true, requests).await);
        }
        if let Some((app, auth)) = dpop.as_ref().filter(|_| runs_dpop("e")) {
            e.push(measure(app, auth, &payload, false, requests).await);
        }
    }
    for values in [&mut a, &mut b, &mut d, &mut e] {
        if values.len() > 1 {
            values.remove(0);
        }
    }
    let (a, b, d, e) = (median(a), median(b), median(d), median(e));
    println!("pipeline: {requests} sequential requests per round, median of {rounds} rounds");
    println!("  (a) bare rmcp            {a:8.2} µs/request");
    println!("  (b) gated, allow         {b:8.2} µs/request");
    println!("  (d) gated, denied        {d:8.2} µs/request");
    if dpop.is_some() {
        println!("  (e) gated, allow, DPoP   {e:8.2} µs/request");
    }
    println!("  layer cost on an allowed call: {:.2} µs (b - a)", b - a);
    println!("  a/b (throughput ratio, one core): {:.3}", a / b);
    println!("  b/d (denial vs allowed call):     {:.2}", b / d);
    if only.is_empty() {
        let counted = requests.min(2_000);
        let (a_count, a_bytes) = allocations(&bare, &token, &payload, false, counted).await;
        let (b_count, b_bytes) = allocations(&allow, &token, &payload, false, counted).await;
        let (d_count, d_bytes) = allocations(&deny, &token, &payload, true, counted).await;
        println!("heap allocations per request ({counted} requests each):");
        println!("  (a) bare rmcp            {a_count:8.1} ({a_bytes:.0} bytes)");
        println!("  (b) gated, allow         {b_count:8.1} ({b_bytes:.0} bytes)");
        println!("  (d) gated, denied        {d_count:8.1} ({d_bytes:.0} bytes)");
        println!(
            "  the layer's own on an allowed call: {:.1} ({:.0} bytes)",
            b_count - a_count,
            b_bytes - a_bytes
        );
        token_hash_speed(&token.authorization);
        if let Some((app, auth)) = &dpop {
            let (e_count, e_bytes) = allocations(app, auth, &payload, false, counted).await;
            println!("  (e) gated, allow, DPoP   {e_count:8.1} ({e_bytes:.0} bytes)");
            println!(
                "  a DPoP call over a Bearer one: {:.1} ({:.0} bytes)",
                e_count - b_count,
                e_bytes - b_bytes
            );
        }
    }
}

/// The one SHA-256 an allowed call makes (of its token, the verified-token cache's key), timed
/// natively: valgrind always runs `sha2`'s portable code, while on a CPU with the SHA
/// extensions `sha2` picks them at run time. Printed beside whether this CPU has them, so that
/// callgrind's figure for the hash can be set against what it costs here.
fn token_hash_speed(authorization: &str) {
    use sha2::Digest;
    let token = authorization
        .split_once(' ')
        .map_or(authorization, |(_, token)| token)
        .as_bytes();
    const HASHES: u32 = 100_000;
    let mut sink = 0u8;
    let started = Instant::now();
    for _ in 0..HASHES {
        sink ^= sha2::Sha256::digest(std::hint::black_box(token))[0];
    }
    let per_hash = started.elapsed().as_nanos() as f64 / f64::from(HASHES);
    std::hint::black_box(sink);
    #[cfg(target_arch = "x86_64")]
    let extensions = if std::arch::is_x86_feature_detected!("sha") {
        "yes"
    } else {
        "no"
    };
    #[cfg(not(target_arch = "x86_64"))]
    let extensions = "not x86_64";
    println!(
        "the token's SHA-256 natively: {per_hash:.0} ns for {} bytes ({:.2} ns/byte; CPU SHA extensions: {extensions})",
        token.len(),
        per_hash / token.len() as f64
    );
}
