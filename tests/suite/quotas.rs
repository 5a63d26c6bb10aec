//! No tenant can fill what others need: held calls (durable approval tasks) are bounded per
//! owner, per call and, in the memory store, in bytes; over a bound the caller gets a clear
//! refusal and every other owner goes on. Through the example policy (which holds `deploy`)
//! and the example rmcp server.

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use common::clients::demo_gate;
use common::modern::{ModernRequest, modern, tasks_capabilities};
use common::peers::{GatedServer, Reply};
use common::tokens::{TestKey, claims};
use common::tools::{DeployCount, mcp_service_counting};
use mcp_gate::tasks::{MemoryTaskStore, TaskQuery, TaskRecord, TaskStatus, TaskStore};
use mcp_gate::{GateBuilder, Issuer, StaticKeys};
use serde_json::json;

const ISSUER: &str = "https://as.example";

struct Rig {
    key: TestKey,
    server: GatedServer,
}

impl Rig {
    async fn start(configure: impl FnOnce(GateBuilder) -> GateBuilder) -> Self {
        let key = TestKey::es256("k1");
        let keys = StaticKeys::from_jwks_json(&key.jwks_json()).unwrap();
        let server = GatedServer::start_with(
            |resource| configure(demo_gate(resource).issuer(Issuer::with_keys(ISSUER, keys))),
            Router::new().nest_service("/mcp", mcp_service_counting(DeployCount::default())),
        )
        .await;
        Self { key, server }
    }

    fn token(&self, subject: &str) -> String {
        let mut claims = claims(ISSUER, &self.server.url, "mcp:read");
        claims["sub"] = json!(subject);
        self.key.mint(&claims)
    }

    /// `subject` asks to deploy to `env`: the example policy holds it for approval.
    async fn deploy(&self, subject: &str, env: &str) -> Reply {
        let request: ModernRequest = modern(
            1,
            "tools/call",
            json!({"name": "deploy", "arguments": {"env": env}}),
            "deploy",
            tasks_capabilities(),
        );
        let headers: Vec<(&str, &str)> = request.1.iter().map(|(k, v)| (*k, v.as_str())).collect();
        self.server
            .post(Some(&self.token(subject)), &headers, &request.0)
            .await
    }
}

fn held(reply: &Reply) -> bool {
    reply.status == 200 && reply.body["result"]["resultType"] == "task"
}

#[tokio::test]
async fn one_owner_at_its_quota_does_not_stop_another() {
    let rig = Rig::start(|b| b.tasks_per_owner(3)).await;
    for n in 0..3 {
        let reply = rig.deploy("alice", &format!("env-{n}")).await;
        assert!(held(&reply), "{reply:?}");
    }
    let over = rig.deploy("alice", "env-3").await;
    assert_eq!(over.status, 429, "{over:?}");
    assert_eq!(over.body["error"]["code"], -32603);
    assert!(
        over.body["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("this principal has 3 calls waiting for approval"),
        "{over:?}"
    );
    assert!(over.headers.contains_key("retry-after"));
    // Bob's call is held as usual.
    assert!(held(&rig.deploy("bob", "prod").await));
    let waiting = rig
        .server
        .gate
        .tasks()
        .pending(100)
        .await
        .expect("the store answers");
    assert_eq!(waiting.len(), 4, "three of alice's, one of bob's");
}

#[tokio::test]
async fn a_call_too_large_to_hold_is_refused_and_not_held() {
    let rig = Rig::start(|b| b.max_held_call_bytes(2_000)).await;
    let large = rig.deploy("alice", &"x".repeat(3_000)).await;
    assert_eq!(large.status, 413, "{large:?}");
    assert!(
        large.body["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("the call is too large to hold for approval"),
        "{large:?}"
    );
    assert!(held(&rig.deploy("alice", "prod").await));
}

/// The memory store's byte budget, with calls at the per-call cap: the store refuses the call
/// that would pass the budget, and the process grows by about the budget, not by what the
/// callers send. The figure is printed (run with `--nocapture`).
#[tokio::test]
async fn the_byte_budget_holds_with_calls_at_the_size_cap() {
    const CAP: usize = 256 * 1024;
    const BUDGET: usize = 4 * 1024 * 1024;
    let store = Arc::new(MemoryTaskStore::new(10_000).byte_budget(BUDGET));
    let shared: Arc<dyn TaskStore> = store.clone();
    let rig = Rig::start(move |b| b.max_held_call_bytes(CAP).task_store(shared)).await;
    let rss_before = resident_bytes();
    let env = "y".repeat(CAP - 200);
    let mut held_calls = 0;
    let mut refusal = None;
    for n in 0..40 {
        let reply = rig.deploy(&format!("user-{n}"), &env).await;
        if held(&reply) {
            held_calls += 1;
        } else {
            refusal = Some(reply);
            break;
        }
    }
    let refusal = refusal.expect("the budget refuses before 40 calls of 256 KiB");
    assert_eq!(refusal.status, 503, "{refusal:?}");
    assert!(
        refusal.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("as many bytes of held calls as it may"),
        "{refusal:?}"
    );
    assert_eq!(held_calls, BUDGET / CAP, "{held_calls} calls held");
    assert_eq!(
        store
            .list(TaskQuery::new().status(TaskStatus::Working))
            .await
            .unwrap()
            .len(),
        held_calls
    );
    tokio::time::sleep(Duration::from_millis(10)).await;
    if let (Some(before), Some(after)) = (rss_before, resident_bytes()) {
        eprintln!(
            "byte budget {} KiB, {} calls of {} KiB held: resident memory grew by {} KiB",
            BUDGET / 1024,
            held_calls,
            CAP / 1024,
            after.saturating_sub(before) / 1024
        );
    }
}

/// Resident memory of this process, from `/proc` (Linux).
fn resident_bytes() -> Option<usize> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: usize = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// How long eight concurrent refused attempts of an owner at its held-task quota take.
async fn eight_refusals(rig: &Arc<Rig>, subject: &str) -> Duration {
    {
        let started = Instant::now();
        let attempts: Vec<_> = (0..8)
            .map(|_| {
                let (rig, subject) = (rig.clone(), subject.to_owned());
                tokio::spawn(async move { rig.deploy(&subject, "prod").await })
            })
            .collect();
        for attempt in attempts {
            let reply = attempt.await.unwrap();
            assert_eq!(reply.status, 429, "{reply:?}");
        }
        started.elapsed()
    }
}

/// Two principals at their held-task quota (100): Alice's held calls are almost 1 MiB each,
/// Bob's a few bytes. A refusal costs what a request costs, whatever the owner holds: before
/// the fix, each of Alice's refusals copied her 100 MiB of held records under the store's
/// lock.
#[tokio::test]
async fn a_refusal_at_the_task_quota_costs_less_than_the_request() {
    let store = Arc::new(MemoryTaskStore::default());
    let shared: Arc<dyn TaskStore> = store.clone();
    let rig = Arc::new(Rig::start(|b| b.tasks_per_owner(100).task_store(shared)).await);
    let (alice, bob) = ("alice", "bob");
    // One call each through the gate; the other 99 are stored as the gate stores them (the
    // same owner and call), without sending 100 MB through the test's client.
    for (subject, env) in [(alice, "x".repeat(1_000_000)), (bob, "x".to_owned())] {
        let reply = rig.deploy(subject, &env).await;
        assert_eq!(reply.body["result"]["resultType"], "task", "{reply:?}");
        let held = store.list(TaskQuery::new()).await.unwrap();
        let first = held
            .iter()
            .find(|r| r.call.params["arguments"]["env"] == env.as_str());
        let first = first.expect("the held call is stored").clone();
        for _ in 1..100 {
            let again = TaskRecord::new(
                first.owner.clone(),
                first.call.clone(),
                "ctx",
                600_000,
                1_000,
            );
            store.create(again.unwrap()).await.unwrap();
        }
    }
    let (mut small, mut heavy) = (Duration::MAX, Duration::MAX);
    // Interleaved rounds, the best of each: the machine's load moves both alike.
    for _round in 0..3 {
        small = small.min(eight_refusals(&rig, bob).await);
        heavy = heavy.min(eight_refusals(&rig, alice).await);
    }
    eprintln!(
        "8 concurrent refusals at the quota: {heavy:?} holding 100 x 1 MB, {small:?} holding 100 x a few bytes"
    );
    assert!(
        heavy < small + small / 2 + Duration::from_millis(50),
        "refusals cost more with larger held calls: {heavy:?} against {small:?}"
    );
}
