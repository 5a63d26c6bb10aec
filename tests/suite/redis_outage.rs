//! Redis stops and comes back, empty, in the middle of a run, while two gateway replicas
//! share it and take confirmations under load: every confirmed call runs at most once, no
//! used state is ever accepted again, every refusal is one the docs name, and the replicas
//! recover without a restart.
#![cfg(feature = "redis")]

use crate::common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use common::confirm::{confirm_deploys, confirmed, deploy};
use common::peers::{GatedServer, Reply};
use common::redis_server::RedisServer;
use common::tokens::{TestKey, claims};
use common::tools::{DeployCount, mcp_service_counting};
use mcp_gate::continuation::{Keyring, RedisReplayStore};
use mcp_gate::mcp::RedisSessionStore;
use mcp_gate::tasks::RedisTaskStore;
use mcp_gate::{Issuer, StaticKeys};
use serde_json::json;
use tokio::sync::Mutex;

const ISSUER: &str = "https://as.example";
const RESOURCE: &str = "http://127.0.0.1:9/mcp";
const KEYS: &str = "k1:MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY";

async fn replica(url: &str, key: &TestKey, deploys: DeployCount) -> GatedServer {
    let tasks = RedisTaskStore::new(url, "outage").await.unwrap();
    let replay = RedisReplayStore::new(url, "outage").await.unwrap();
    let sessions = RedisSessionStore::new(url, "outage", 1000, 100, Duration::from_secs(60))
        .await
        .unwrap();
    let issuer_keys = StaticKeys::from_jwks_json(&key.jwks_json()).unwrap();
    GatedServer::start_replica(
        RESOURCE,
        move |_| {
            mcp_gate::Gate::builder()
                .issuer(Issuer::with_keys(ISSUER, issuer_keys))
                .continuation_keys(Keyring::from_config(KEYS).unwrap())
                .task_store(tasks)
                .replay_store(replay)
                .session_store(sessions)
                .evaluate(confirm_deploys)
        },
        Router::new().nest_service("/mcp", mcp_service_counting(deploys)),
    )
    .await
}

/// What one confirmed retry got.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Outcome {
    Ran,
    /// A refusal the troubleshooting page names, by its message.
    Refused(String),
    /// Anything else: a failure of the test.
    Unexpected(String),
}

fn outcome(reply: &Reply) -> Outcome {
    if reply.status == 200
        && reply.body["result"]["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.starts_with("deployed to prod"))
    {
        return Outcome::Ran;
    }
    let message = reply.body["error"]["message"].as_str().unwrap_or_default();
    let documented = [
        (400, "the request state was already used"),
        (
            400,
            "the request state predates the replay store's memory (a restart); start the call again",
        ),
        (
            503,
            "the request state cannot be accepted now: the replay store is unavailable",
        ),
    ];
    if documented
        .iter()
        .any(|(status, text)| reply.status == *status && message.starts_with(text))
    {
        // Keep the message without what follows a colon in Redis's own words.
        let kind = message.split(": redis").next().unwrap_or(message);
        return Outcome::Refused(kind.to_owned());
    }
    Outcome::Unexpected(format!("{} {}", reply.status, reply.text))
}

#[tokio::test]
async fn an_outage_and_a_data_loss_under_load_never_run_a_call_twice() {
    let Some(redis) = RedisServer::start_or_skip() else {
        return;
    };
    let redis = Arc::new(Mutex::new(redis));
    let url = redis.lock().await.url();
    let key = TestKey::es256("k1");
    let deploys = DeployCount::default();
    let replicas = Arc::new([
        replica(&url, &key, deploys.clone()).await,
        replica(&url, &key, deploys.clone()).await,
    ]);
    let token = Arc::new(key.mint(&claims(ISSUER, RESOURCE, "mcp:read")));
    let running = Arc::new(AtomicBool::new(true));

    // Workers: each asks on one replica and confirms on the other, again and again, and keeps
    // every state it presented.
    let mut workers = Vec::new();
    for worker in 0..4 {
        let (replicas, token, running) = (replicas.clone(), token.clone(), running.clone());
        workers.push(tokio::spawn(async move {
            let mut seen = Vec::new();
            let mut round = worker;
            while running.load(Ordering::SeqCst) {
                let (ask, confirm) = (&replicas[round % 2], &replicas[(round + 1) % 2]);
                round += 1;
                let asked = deploy(ask, &token, json!({})).await;
                let Some(state) = asked.body["result"]["requestState"].as_str() else {
                    seen.push((String::new(), outcome(&asked)));
                    continue;
                };
                let reply = deploy(confirm, &token, confirmed(state)).await;
                seen.push((state.to_owned(), outcome(&reply)));
            }
            seen
        }));
    }
    tokio::time::sleep(Duration::from_millis(700)).await;
    redis.lock().await.stop();
    tokio::time::sleep(Duration::from_millis(700)).await;
    // Back, empty: every used state is forgotten by Redis itself.
    let restart = redis.clone();
    tokio::task::spawn_blocking(move || restart.blocking_lock().restart())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    running.store(false, Ordering::SeqCst);

    let mut outcomes: BTreeMap<Outcome, usize> = BTreeMap::new();
    let mut used = Vec::new();
    for worker in workers {
        for (state, result) in worker.await.unwrap() {
            *outcomes.entry(result.clone()).or_default() += 1;
            if !state.is_empty() {
                used.push(state);
            }
        }
    }
    let ran = outcomes.get(&Outcome::Ran).copied().unwrap_or(0);
    eprintln!(
        "{} confirmations, {ran} ran, deploys counted {}: {outcomes:#?}",
        used.len(),
        deploys.load(Ordering::SeqCst)
    );
    assert!(
        !outcomes.keys().any(|o| matches!(o, Outcome::Unexpected(_))),
        "{outcomes:#?}"
    );
    assert_eq!(
        deploys.load(Ordering::SeqCst),
        ran as u64,
        "no call ran twice"
    );
    assert!(ran > 0, "calls ran before the outage");
    // Seen as a refusal while Redis was away, or (a store sends a command once more on a
    // fresh connection, so a short outage may refuse nothing) as the data loss after it.
    assert!(
        outcomes.keys().any(|o| matches!(o, Outcome::Refused(m)
            if m.contains("unavailable") || m.contains("predates the replay store's memory"))),
        "the outage was seen: {outcomes:#?}"
    );

    // Every state presented during the run, presented again on either replica: never runs.
    for (n, state) in used.iter().enumerate() {
        let reply = deploy(&replicas[n % 2], &token, confirmed(state)).await;
        match outcome(&reply) {
            Outcome::Refused(_) => {}
            other => panic!("a used state got {other:?}"),
        }
    }
    assert_eq!(deploys.load(Ordering::SeqCst), ran as u64);

    // Recovered without restarting a replica: a new confirmation runs.
    let asked = deploy(&replicas[0], &token, json!({})).await;
    let state = asked.body["result"]["requestState"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        outcome(&deploy(&replicas[1], &token, confirmed(&state)).await),
        Outcome::Ran
    );
}
