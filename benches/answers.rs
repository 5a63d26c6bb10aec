//! What the layer costs on the answers it reads whole, without the network: a `tools/list` of
//! N entries (each judged, the list rewritten) and a 2026-07-28 `resources/read` of 1 MiB (read
//! whole and marked private to caches), each against the same inner server called bare, in
//! one run. The inner server is a route answering canned bytes, framed as rmcp frames them (an
//! event stream with a priming event), so what is measured is the layer's work alone.
//!
//! ```text
//! cargo bench --bench answers
//! ANSWERS_ONLY=list ANSWERS_ENTRIES=1000 ANSWERS_REQUESTS=200 valgrind --tool=callgrind target/release/deps/answers-*
//! ```
//!
//! Environment: `ANSWERS_REQUESTS` (default 2,000 per configuration; a tenth more warm up
//! first), `ANSWERS_ONLY` (`list`, `read`, `bare-list` or `bare-read`: one configuration, for
//! a profiler), `ANSWERS_ENTRIES` (the list's length with `ANSWERS_ONLY`; default 100),
//! `ANSWERS_HIDE` (`1`: the policy hides every other tool, so the list is written edited;
//! default `0`, every tool shown), `ANSWERS_ERA` (`modern`: the lists in the 2026-07-28 era,
//! where the layer marks a filtered list private, so it is always written edited; default
//! `legacy`, 2025-11-25). Prints microseconds and heap allocations per request, bare
//! and gated, the gated/bare throughput, and the gate's cost per listed entry (the slope
//! between 10 and 1,000 entries). `scripts/bench-lists.sh` gives the same in instructions
//! (callgrind).

#[path = "../tests/common/tokens.rs"]
mod tokens;

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use axum::Router;
use axum::body::Body;
use axum::response::Response;
use axum::routing::post;
use bytes::Bytes;
use common::env_or;
use http::{Request, StatusCode};
use mcp_gate::policy::{Decision, Evaluation};
use mcp_gate::{Gate, Issuer, StaticKeys};
use serde_json::json;

const ISSUER: &str = "https://issuer.bench.example";
const RESOURCE: &str = "http://127.0.0.1:9/mcp";

/// The system allocator, counting allocations.
struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call defers to `System` with the caller's own arguments; the counter is a
// plain atomic.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract is passed on unchanged.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// One request the bench sends, and the canned answer of the inner server.
#[derive(Clone)]
struct Case {
    body: Bytes,
    headers: Vec<(&'static str, String)>,
    answer: Bytes,
}

/// An event stream as rmcp writes one: a priming event, then the message.
fn sse(message: &serde_json::Value) -> Bytes {
    Bytes::from(format!(
        "id: 0\nretry: 3000\ndata:\n\ndata: {message}\nid: 1\n\n"
    ))
}

/// `tools/list` (legacy framing of the request) answered with `entries` tools.
/// A `tools/list` of `entries` tools; `modern`: in the 2026-07-28 era (the request's `_meta`
/// and headers, the result's cache fields), whose filtered list the layer marks private.
fn list_case(entries: usize, modern: bool) -> Case {
    let tools: Vec<_> = (0..entries)
        .map(|n| {
            json!({"name": format!("tool_{n}"), "description": "A tool of the bench.",
                   "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}})
        })
        .collect();
    if !modern {
        let result = json!({"jsonrpc": "2.0", "id": 1, "result": {"tools": tools}});
        return Case {
            body: Bytes::from(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}"#),
            headers: vec![("mcp-protocol-version", "2025-11-25".into())],
            answer: sse(&result),
        };
    }
    let result = json!({"jsonrpc": "2.0", "id": 1, "result": {
        "tools": tools, "ttlMs": 60000, "cacheScope": "public"}});
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {
    "_meta": {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
    }}});
    Case {
        body: Bytes::from(body.to_string()),
        headers: vec![
            ("mcp-protocol-version", MODERN.into()),
            ("mcp-method", "tools/list".into()),
        ],
        answer: sse(&result),
    }
}

/// The modern era's protocol version.
const MODERN: &str = "2026-07-28";

/// A 2026-07-28 `resources/read` answered with `size` bytes of text.
fn read_case(size: usize) -> Case {
    let text = "x".repeat(size);
    let result = json!({"jsonrpc": "2.0", "id": 1, "result": {
        "contents": [{"uri": "demo://big", "mimeType": "text/plain", "text": text}],
        "ttlMs": 60000, "cacheScope": "public"}});
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "resources/read", "params": {
    "uri": "demo://big",
    "_meta": {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
    }}});
    Case {
        body: Bytes::from(body.to_string()),
        headers: vec![
            ("mcp-protocol-version", MODERN.into()),
            ("mcp-method", "resources/read".into()),
            ("mcp-name", "demo://big".into()),
        ],
        answer: sse(&result),
    }
}

fn router(case: &Case, gate: Option<&Gate>) -> Router {
    let answer = case.answer.clone();
    let inner = Router::new().route(
        "/mcp",
        post(move || {
            let answer = answer.clone();
            async move {
                Response::builder()
                    .header("content-type", "text/event-stream")
                    .body(Body::from(answer))
                    .expect("response")
            }
        }),
    );
    match gate {
        Some(gate) => inner.layer(gate.layer()),
        None => inner,
    }
}

fn gate(keys: StaticKeys, hide: bool) -> Gate {
    let builder = Gate::builder()
        .resource(RESOURCE)
        .issuer(Issuer::with_keys(ISSUER, keys))
        .required_scopes(["mcp:read"]);
    let builder = if hide {
        // Every tool whose number is odd is hidden.
        builder.evaluate(|evaluation: Evaluation| async move {
            let odd = evaluation
                .tool()
                .is_some_and(|name| name.ends_with(['1', '3', '5', '7', '9']));
            Ok::<_, std::convert::Infallible>(if odd {
                Decision::undisclosed("hidden by the bench")
            } else {
                Decision::allow()
            })
        })
    } else {
        builder.evaluate(mcp_gate::policy::allow_all())
    };
    builder.build().expect("gate builds")
}

async fn one(app: &Router, case: &Case, token: &str) -> usize {
    let mut request = Request::post("/mcp")
        .header("host", "127.0.0.1:9")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("authorization", token);
    for (name, value) in &case.headers {
        request = request.header(*name, value);
    }
    let request = request
        .body(Body::from(case.body.clone()))
        .expect("request");
    let (status, bytes) = common::send(app, request).await;
    assert_eq!(
        status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&bytes[..bytes.len().min(300)])
    );
    assert!(
        !bytes.windows(6).any(|w| w == b"-32603"),
        "{}",
        String::from_utf8_lossy(&bytes[..bytes.len().min(300)])
    );
    bytes.len()
}

/// Microseconds and allocations per request over `requests` sequential requests.
async fn measure(app: &Router, case: &Case, token: &str, requests: u64) -> (f64, f64) {
    for _ in 0..requests / 10 {
        one(app, case, token).await;
    }
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    let start = Instant::now();
    for _ in 0..requests {
        one(app, case, token).await;
    }
    let micros = start.elapsed().as_secs_f64() * 1e6 / requests as f64;
    let allocations = (ALLOCATIONS.load(Ordering::Relaxed) - before) as f64 / requests as f64;
    (micros, allocations)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let requests = env_or("ANSWERS_REQUESTS", 2_000u64, 10, 10_000_000);
    let key = tokens::TestKey::es256("bench");
    let keys = StaticKeys::from_jwks_json(&key.jwks_json()).expect("keys");
    let token = format!(
        "Bearer {}",
        key.mint(&tokens::claims(ISSUER, RESOURCE, "mcp:read"))
    );
    let hide = env_or("ANSWERS_HIDE", 0u8, 0, 1) == 1;
    let modern = match std::env::var("ANSWERS_ERA").as_deref() {
        Err(_) | Ok("legacy") => false,
        Ok("modern") => true,
        Ok(other) => {
            eprintln!("ANSWERS_ERA is legacy or modern, not {other}");
            std::process::exit(2);
        }
    };
    let gate = gate(keys, hide);
    if let Ok(only) = std::env::var("ANSWERS_ONLY") {
        let entries = env_or("ANSWERS_ENTRIES", 100usize, 1, 100_000);
        let (case, gated) = match only.as_str() {
            "list" => (list_case(entries, modern), true),
            "bare-list" => (list_case(entries, modern), false),
            "read" => (read_case(1 << 20), true),
            "bare-read" => (read_case(1 << 20), false),
            _ => {
                eprintln!("ANSWERS_ONLY is list, read, bare-list or bare-read");
                std::process::exit(2);
            }
        };
        let app = router(&case, gated.then_some(&gate));
        for _ in 0..requests {
            one(&app, &case, &token).await;
        }
        return;
    }
    let shown = if hide {
        "every other tool hidden"
    } else {
        "every tool shown"
    };
    let era = if modern { MODERN } else { "2025-11-25" };
    println!("answers: {requests} sequential requests per configuration; lists: {shown}, {era}");
    println!(
        "  {:<28} {:>12} {:>12} {:>12} {:>12} {:>11}",
        "", "bare µs", "gated µs", "bare alloc", "gated alloc", "gated/bare"
    );
    let mut per_entry = Vec::new();
    for entries in [10usize, 100, 1000] {
        let case = list_case(entries, modern);
        let requests = (requests * 10 / entries as u64).max(10);
        let bare = measure(&router(&case, None), &case, &token, requests).await;
        let gated = measure(&router(&case, Some(&gate)), &case, &token, requests).await;
        println!(
            "  {:<28} {:>12.2} {:>12.2} {:>12.1} {:>12.1} {:>11.2}",
            format!("tools/list, {entries} entries"),
            bare.0,
            gated.0,
            bare.1,
            gated.1,
            bare.0 / gated.0
        );
        per_entry.push((entries, gated.0 - bare.0, gated.1 - bare.1));
    }
    let (first, last) = (per_entry[0], per_entry[per_entry.len() - 1]);
    let span = (last.0 - first.0) as f64;
    println!(
        "  the gate per listed entry: {:.3} µs, {:.2} allocations (slope, 10 to 1000 entries)",
        (last.1 - first.1) / span,
        (last.2 - first.2) / span
    );
    let case = read_case(1 << 20);
    let requests = (requests / 20).max(10);
    let bare = measure(&router(&case, None), &case, &token, requests).await;
    let gated = measure(&router(&case, Some(&gate)), &case, &token, requests).await;
    println!(
        "  {:<28} {:>12.2} {:>12.2} {:>12.1} {:>12.1}",
        "resources/read, 1 MiB", bare.0, gated.0, bare.1, gated.1
    );
    println!("  1 MiB read: gated/bare time {:.2}", gated.0 / bare.0);
}
