//! Every bound the docs promise holds on every backend.
//!
//! First: the findings of issue 24, each as a test that failed before the fix.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use axum::Router;
use common::modern::{ModernRequest, modern, tasks_capabilities};
use common::peers::{GatedServer, Reply};
use common::tokens::{TestKey, claims};
use common::tools::{DeployCount, mcp_service_counting};
use mcp_gate::continuation::{FirstUse, ReplayError, ReplayStore, StateUse};
use mcp_gate::{GateBuilder, Issuer, StaticKeys};
use serde_json::json;

const ISSUER: &str = "https://as.example";

/// Two replicas on one namespace share one per-owner bound: the replay store's default quota
/// (1,000 live states per owner, as the in-memory default) holds across both.
#[cfg(feature = "redis")]
#[tokio::test]
async fn redis_replay_replicas_share_one_per_owner_bound() {
    use mcp_gate::continuation::RedisReplayStore;
    let Some(redis) = common::redis_server::RedisServer::start_or_skip() else {
        return;
    };
    let url = redis.url();
    let replicas = [
        RedisReplayStore::new(&url, "quota").await.unwrap(),
        RedisReplayStore::new(&url, "quota").await.unwrap(),
    ];
    let (now, until) = (
        SystemTime::now(),
        SystemTime::now() + Duration::from_secs(600),
    );
    for n in 0..1_000 {
        let nonce = format!("n{n}");
        let first = replicas[n % 2]
            .first_use(StateUse::new("alice", &nonce, now, until))
            .await;
        assert_eq!(first, Ok(FirstUse::Yes), "state {n}");
    }
    let over = replicas[0]
        .first_use(StateUse::new("alice", "one-too-many", now, until))
        .await;
    assert_eq!(over, Err(ReplayError::OwnerQuota { quota: 1_000 }));
    let other = replicas[1]
        .first_use(StateUse::new("bob", "bobs", now, until))
        .await;
    assert_eq!(other, Ok(FirstUse::Yes));
}

struct Rig {
    key: TestKey,
    server: GatedServer,
}

impl Rig {
    async fn start(configure: impl FnOnce(GateBuilder) -> GateBuilder) -> Self {
        let key = TestKey::es256("k1");
        let keys = StaticKeys::from_jwks_json(&key.jwks_json()).unwrap();
        let server = GatedServer::start_with(
            |resource| {
                let origin = resource.trim_end_matches("/mcp").to_owned();
                configure(
                    mcp_gate::Gate::builder()
                        .evaluate(common::policy::DemoPolicy::new(
                            common::approvals::Approvals::default(),
                            origin,
                        ))
                        .issuer(Issuer::with_keys(ISSUER, keys)),
                )
            },
            Router::new().nest_service("/mcp", mcp_service_counting(DeployCount::default())),
        )
        .await;
        Self { key, server }
    }

    /// `subject` asks to deploy to `env`: the example policy holds it for approval.
    async fn deploy(&self, token: &str, env: &str) -> Reply {
        let request: ModernRequest = modern(
            1,
            "tools/call",
            json!({"name": "deploy", "arguments": {"env": env}}),
            "deploy",
            tasks_capabilities(),
        );
        let headers: Vec<(&str, &str)> = request.1.iter().map(|(k, v)| (*k, v.as_str())).collect();
        self.server.post(Some(token), &headers, &request.0).await
    }
}

/// A principal at its held-task quota, holding 100 calls of almost 1 MiB each: eight
/// concurrent refused attempts cost little, whatever the owner holds (before the fix, each
/// refusal copied every held record under the store's lock).
#[tokio::test]
async fn a_refusal_at_the_task_quota_costs_less_than_the_request() {
    let rig = Arc::new(Rig::start(|b| b.tasks_per_owner(100)).await);
    let mut claims = claims(ISSUER, &rig.server.url, "mcp:read");
    claims["sub"] = json!("alice");
    let token = rig.key.mint(&claims);
    let large = "x".repeat(1_000_000);
    for n in 0..100 {
        let reply = rig.deploy(&token, &format!("{n}{large}")).await;
        assert_eq!(reply.body["result"]["resultType"], "task", "held call {n}");
    }
    let started = Instant::now();
    let attempts: Vec<_> = (0..8)
        .map(|_| {
            let (rig, token) = (rig.clone(), token.clone());
            tokio::spawn(async move { rig.deploy(&token, "prod").await })
        })
        .collect();
    for attempt in attempts {
        let reply = attempt.await.unwrap();
        assert_eq!(reply.status, 429, "{reply:?}");
    }
    let elapsed = started.elapsed();
    eprintln!("8 concurrent refusals at the quota took {elapsed:?}");
    assert!(
        elapsed < Duration::from_millis(150),
        "8 refusals took {elapsed:?}"
    );
}
