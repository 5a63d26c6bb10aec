//! Single use of confirmation states, under pressure.
//!
//! Through the layer in front of the example rmcp server: a confirmed `deploy` runs once per
//! confirmation, whatever fills the replay store; a full store refuses new states (429 for an
//! owner over quota, 503 when full) and never accepts a used one again; another owner's
//! confirmation goes on while one owner is at its quota. Then the Redis store against a real
//! `redis-server`: two stores (two replicas) share used states, exactly one of many
//! concurrent first uses wins, and a stopped Redis refuses (never allows) until it is back.

use crate::common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::Router;
use common::confirm::{confirm_deploys, confirmed};
use common::peers::{GatedServer, Reply};
use common::tokens::{TestKey, claims};
use common::tools::{DeployCount, mcp_service_counting};
use mcp_gate::continuation::MemoryReplayStore;
use mcp_gate::{Issuer, StaticKeys};
use serde_json::{Value, json};

const ISSUER: &str = "https://as.example";

struct Rig {
    server: GatedServer,
    key: TestKey,
    deploys: DeployCount,
}

impl Rig {
    async fn start(capacity: usize, per_owner: usize) -> Self {
        let key = TestKey::es256("k1");
        let keys = StaticKeys::from_jwks_json(&key.jwks_json()).expect("keys");
        let deploys = DeployCount::default();
        let server = GatedServer::start_with(
            move |_| {
                mcp_gate::Gate::builder()
                    .issuer(Issuer::with_keys(ISSUER, keys))
                    .replay_store(MemoryReplayStore::new(capacity, per_owner))
                    .evaluate(confirm_deploys)
            },
            Router::new().nest_service("/mcp", mcp_service_counting(deploys.clone())),
        )
        .await;
        Self {
            server,
            key,
            deploys,
        }
    }

    fn token(&self, subject: &str) -> String {
        let mut claims = claims(ISSUER, &self.server.url, "mcp:read");
        claims["sub"] = json!(subject);
        self.key.mint(&claims)
    }

    /// A modern `deploy` that declared form elicitation, with extra params.
    async fn deploy(&self, token: &str, extra: Value) -> Reply {
        common::confirm::deploy(&self.server, token, extra).await
    }

    /// The state of a fresh confirmation for `token`.
    async fn confirmation(&self, token: &str) -> String {
        let asked = self.deploy(token, json!({})).await;
        asked.body["result"]["requestState"]
            .as_str()
            .unwrap_or_else(|| panic!("no confirmation: {asked:?}"))
            .to_owned()
    }

    /// The confirmed retry with `state`.
    async fn confirm(&self, token: &str, state: &str) -> Reply {
        self.deploy(token, confirmed(state)).await
    }

    fn runs(&self) -> u64 {
        self.deploys.load(Ordering::SeqCst)
    }
}

fn ran(reply: &Reply) -> bool {
    reply.status == 200
        && reply.body["result"]["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.starts_with("deployed to prod"))
}

fn error(reply: &Reply) -> (u16, i64, String) {
    (
        reply.status,
        reply.body["error"]["code"].as_i64().unwrap_or_default(),
        reply.body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
    )
}

#[tokio::test]
async fn a_full_replay_store_refuses_new_states_and_never_reaccepts_a_used_one() {
    // Room for 6 live used states, 3 per owner.
    let rig = Rig::start(6, 3).await;
    let alice = rig.token("alice");
    let mut used = Vec::new();
    for _ in 0..3 {
        let state = rig.confirmation(&alice).await;
        let reply = rig.confirm(&alice, &state).await;
        assert!(ran(&reply), "{reply:?}");
        used.push(state);
    }
    assert_eq!(rig.runs(), 3);
    // Alice is at her quota: a fourth confirmation cannot be recorded, so it does not run.
    let state = rig.confirmation(&alice).await;
    let reply = rig.confirm(&alice, &state).await;
    let (status, code, message) = error(&reply);
    assert_eq!((status, code), (429, -32603), "{message}");
    assert!(
        message.contains("this principal has used 3 states"),
        "{message}"
    );
    assert_eq!(rig.runs(), 3);

    // Bob is not affected; then Carol fills the store to its capacity.
    let bob = rig.token("bob");
    let state = rig.confirmation(&bob).await;
    assert!(ran(&rig.confirm(&bob, &state).await));
    used.push(state);
    let carol = rig.token("carol");
    for _ in 0..2 {
        let state = rig.confirmation(&carol).await;
        assert!(ran(&rig.confirm(&carol, &state).await));
        used.push(state);
    }
    assert_eq!(rig.runs(), 6);
    let dave = rig.token("dave");
    let state = rig.confirmation(&dave).await;
    let (status, code, message) = error(&rig.confirm(&dave, &state).await);
    assert_eq!((status, code), (503, -32603), "{message}");
    assert!(message.contains("the replay store is full"), "{message}");

    // However full the store, every used state is still refused as used, by its owner.
    let owners = [&alice, &alice, &alice, &bob, &carol, &carol];
    for (state, owner) in used.iter().zip(owners) {
        let (status, code, message) = error(&rig.confirm(owner, state).await);
        assert_eq!((status, code), (400, -32602), "{message}");
        assert_eq!(message, "the request state was already used");
    }
    assert_eq!(rig.runs(), 6, "no confirmed call ran twice");
}

/// A restart with keys from configuration: the new process's memory store never saw the
/// states the old one accepted, so it refuses every state issued before it started (the
/// confirmation starts again) and none runs twice.
#[tokio::test]
async fn a_restarted_process_refuses_states_it_cannot_judge() {
    let keys = "k1:MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY";
    let start = |deploys: DeployCount, key: &TestKey| {
        let issuer_keys = StaticKeys::from_jwks_json(&key.jwks_json()).expect("keys");
        GatedServer::start_replica(
            "http://127.0.0.1:9/mcp",
            move |_| {
                mcp_gate::Gate::builder()
                    .issuer(Issuer::with_keys(ISSUER, issuer_keys))
                    .continuation_keys(mcp_gate::continuation::Keyring::from_config(keys).unwrap())
                    .evaluate(confirm_deploys)
            },
            Router::new().nest_service("/mcp", mcp_service_counting(deploys)),
        )
    };
    let key = TestKey::es256("k1");
    let deploys = DeployCount::default();
    let before = Rig {
        server: start(deploys.clone(), &key).await,
        key,
        deploys: deploys.clone(),
    };
    let mut claims = claims(ISSUER, "http://127.0.0.1:9/mcp", "mcp:read");
    claims["sub"] = json!("alice");
    let alice = before.key.mint(&claims);
    let state = before.confirmation(&alice).await;
    assert!(ran(&before.confirm(&alice, &state).await));
    let pending = before.confirmation(&alice).await;
    drop(before.server);
    tokio::time::sleep(Duration::from_millis(5)).await;
    let after = Rig {
        server: start(deploys.clone(), &before.key).await,
        key: before.key,
        deploys,
    };
    for old in [&state, &pending] {
        let (status, code, message) = error(&after.confirm(&alice, old).await);
        assert_eq!((status, code), (400, -32602), "{message}");
        assert!(
            message.contains("predates the replay store's memory"),
            "{message}"
        );
    }
    assert_eq!(after.runs(), 1, "the confirmed deploy did not run again");
    let fresh = after.confirmation(&alice).await;
    assert!(ran(&after.confirm(&alice, &fresh).await));
    assert_eq!(after.runs(), 2);
}

#[cfg(feature = "redis")]
mod redis {
    use std::time::SystemTime;

    use mcp_gate::continuation::{FirstUse, RedisReplayStore, ReplayStore, StateUse};
    use mcp_gate::store::{StoreError, StoreKind};

    use super::common::redis_server::RedisServer;
    use super::*;

    fn later() -> SystemTime {
        SystemTime::now() + Duration::from_secs(600)
    }

    /// A state of `owner` issued now.
    fn used<'a>(owner: &'a str, nonce: &'a str) -> StateUse<'a> {
        StateUse::new(owner, nonce, SystemTime::now(), later())
    }

    /// Unusable URLs (a Sentinel URL without the master's name among them) are refused when
    /// the store is made, with a message that does not repeat the URL (it may hold a
    /// password); an ACL user limited to the namespace's keys works.
    #[tokio::test]
    async fn urls_tls_refused_and_acl_users_work() {
        // A TLS URL is taken (tests/redis_tls.rs); nothing listens here, and the refusal does
        // not repeat the password.
        let unreachable = RedisReplayStore::new("rediss://user:secret@127.0.0.1:1/", "ns")
            .await
            .unwrap_err();
        assert!(
            matches!(&unreachable, StoreError::Unavailable { reason, .. } if !reason.contains("secret")),
            "{unreachable:?}"
        );
        // A Sentinel URL is taken; nothing listens here.
        let no_sentinel = RedisReplayStore::new("redis+sentinel://:secret@127.0.0.1:1/main", "ns")
            .await
            .unwrap_err();
        assert!(
            matches!(&no_sentinel, StoreError::Unavailable { reason, .. } if !reason.contains("secret") && reason != "the Redis URL is not valid"),
            "{no_sentinel:?}"
        );
        for url in ["redis+sentinel://127.0.0.1:26379/", "not a url"] {
            let refused = RedisReplayStore::new(url, "ns").await.unwrap_err();
            assert_eq!(
                refused,
                StoreError::Unavailable {
                    store: StoreKind::Replay,
                    reason: "the Redis URL is not valid".into()
                },
                "{url}"
            );
            let refused = mcp_gate::tasks::RedisTaskStore::new(url, "ns")
                .await
                .unwrap_err();
            assert!(!refused.to_string().contains("secret"), "{refused}");
        }
        let Some(redis) = RedisServer::start_or_skip() else {
            return;
        };
        let mut raw = redis.raw().await;
        let _: () = ::redis::cmd("ACL")
            .arg(&["SETUSER", "gate", "on", ">s3cret", "~{acl-test}:*", "+@all"][..])
            .query_async(&mut raw)
            .await
            .unwrap();
        let url = redis.url().replace("redis://", "redis://gate:s3cret@");
        let store = RedisReplayStore::new(&url, "acl-test").await.unwrap();
        assert_eq!(store.first_use(used("alice", "n")).await, Ok(FirstUse::Yes));
        // Outside its key pattern the user is refused by Redis, when the store is made.
        assert!(matches!(
            RedisReplayStore::new(&url, "other-ns").await,
            Err(StoreError::Unavailable { .. })
        ));
    }

    #[tokio::test]
    async fn replicas_share_used_states_and_a_stopped_redis_refuses() {
        let Some(mut redis) = RedisServer::start_or_skip() else {
            return;
        };
        let url = redis.url();
        let (a, b) = (
            RedisReplayStore::new(&url, "replay-test").await.unwrap(),
            RedisReplayStore::new(&url, "replay-test").await.unwrap(),
        );
        assert_eq!(a.first_use(used("alice", "n1")).await, Ok(FirstUse::Yes));
        assert_eq!(
            b.first_use(used("alice", "n1")).await,
            Ok(FirstUse::AlreadyUsed)
        );

        // Many concurrent first uses of one state, on both replicas: exactly one wins.
        let attempts = (0..40).map(|i| {
            let store = if i % 2 == 0 { a.clone() } else { b.clone() };
            tokio::spawn(async move { store.first_use(used("alice", "race")).await })
        });
        let mut firsts = 0;
        for attempt in attempts {
            if attempt.await.unwrap() == Ok(FirstUse::Yes) {
                firsts += 1;
            }
        }
        assert_eq!(firsts, 1);

        // The key lives as long as the state: expired states leave nothing behind.
        let mut raw = redis.raw().await;
        let ttl: i64 = ::redis::cmd("PTTL")
            .arg("{replay-test}:used:n1")
            .query_async(&mut raw)
            .await
            .unwrap();
        assert!((590_000..=600_000).contains(&ttl), "{ttl}");

        // Redis loses its data (a restart without persistence): a state issued before the loss
        // cannot be judged and is refused, one issued after is judged as usual.
        let issued_before = SystemTime::now() - Duration::from_millis(50);
        let _: () = ::redis::cmd("FLUSHALL")
            .query_async(&mut raw)
            .await
            .unwrap();
        assert_eq!(
            a.first_use(StateUse::new("alice", "n1", issued_before, later()))
                .await,
            Ok(FirstUse::Unknowable),
            "a state used before the loss is never accepted again"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(b.first_use(used("alice", "fresh")).await, Ok(FirstUse::Yes));

        // Redis down: refused, never a first use.
        redis.stop();
        let down = tokio::time::timeout(Duration::from_secs(30), a.first_use(used("alice", "n2")))
            .await
            .expect("an answer within 30 s");
        assert!(
            matches!(down, Err(StoreError::Unavailable { .. })),
            "{down:?}"
        );
    }
}

/// Redis round trips per request, counted by Redis itself (`INFO commandstats`).
#[cfg(feature = "redis")]
mod round_trips {
    use mcp_gate::continuation::RedisReplayStore;
    use mcp_gate::mcp::RedisSessionStore;
    use mcp_gate::tasks::RedisTaskStore;

    use super::common::redis_server::RedisServer;
    use super::*;

    /// Every command Redis has run, but `INFO` (the counting itself), by name.
    async fn commands(
        raw: &mut ::redis::aio::MultiplexedConnection,
    ) -> std::collections::BTreeMap<String, u64> {
        let info: String = ::redis::cmd("INFO")
            .arg("commandstats")
            .query_async(raw)
            .await
            .unwrap();
        info.lines()
            .filter_map(|line| {
                let (name, rest) = line.strip_prefix("cmdstat_")?.split_once(':')?;
                let calls = rest
                    .strip_prefix("calls=")?
                    .split(',')
                    .next()?
                    .parse()
                    .ok()?;
                (name != "info").then(|| (name.to_owned(), calls))
            })
            .collect()
    }

    fn delta(
        before: &std::collections::BTreeMap<String, u64>,
        after: &std::collections::BTreeMap<String, u64>,
    ) -> u64 {
        after
            .iter()
            .map(|(name, calls)| calls - before.get(name).copied().unwrap_or(0))
            .sum()
    }

    /// The commands the replay script runs inside Redis: counted by Redis, not round trips.
    const INSIDE_THE_SCRIPT: [&str; 9] = [
        "time",
        "get",
        "set",
        "exists",
        "zremrangebyscore",
        "zcard",
        "zadd",
        "zrange",
        "pexpireat",
    ];

    #[tokio::test]
    async fn no_round_trip_for_an_allowed_call_and_one_per_first_use_of_a_state() {
        let Some(redis) = RedisServer::start_or_skip() else {
            return;
        };
        let url = redis.url();
        let tasks = RedisTaskStore::new(&url, "rt").await.unwrap();
        let replay = RedisReplayStore::new(&url, "rt").await.unwrap();
        let sessions = RedisSessionStore::new(&url, "rt", 100, 10, Duration::from_secs(60))
            .await
            .unwrap();
        let key = TestKey::es256("k1");
        let keys = StaticKeys::from_jwks_json(&key.jwks_json()).unwrap();
        let deploys = DeployCount::default();
        let server = GatedServer::start_with(
            move |_| {
                mcp_gate::Gate::builder()
                    .issuer(Issuer::with_keys(ISSUER, keys))
                    .task_store(tasks)
                    .replay_store(replay)
                    .session_store(sessions)
                    .evaluate(confirm_deploys)
            },
            Router::new().nest_service("/mcp", mcp_service_counting(deploys.clone())),
        )
        .await;
        let rig = Rig {
            server,
            key,
            deploys,
        };
        let alice = rig.token("alice");
        let mut raw = redis.raw().await;
        let echo = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": "hi"},
                       "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                                 "io.modelcontextprotocol/clientCapabilities": {}}}})
        .to_string();
        let headers = [
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/call"),
            ("mcp-name", "echo"),
        ];
        // Warm the token cache.
        rig.server.post(Some(&alice), &headers, &echo).await;
        let before = commands(&mut raw).await;
        for _ in 0..20 {
            let reply = rig.server.post(Some(&alice), &headers, &echo).await;
            assert_eq!(reply.status, 200, "{reply:?}");
        }
        let after = commands(&mut raw).await;
        let allowed = delta(&before, &after);
        // A confirmation: the first round needs no state; the confirmed retry is one script
        // call (EVALSHA), whose own commands (TIME, GET, SET and the bounds' sorted-set
        // commands) run inside Redis. A first
        // confirmation loads the script.
        let warm = rig.confirmation(&alice).await;
        assert!(ran(&rig.confirm(&alice, &warm).await));
        let warmed = commands(&mut raw).await;
        let state = rig.confirmation(&alice).await;
        let asked = commands(&mut raw).await;
        let first_round = delta(&warmed, &asked);
        assert!(ran(&rig.confirm(&alice, &state).await));
        let confirmed = commands(&mut raw).await;
        let retry: std::collections::BTreeMap<&String, u64> = confirmed
            .iter()
            .map(|(name, calls)| (name, calls - asked.get(name).copied().unwrap_or(0)))
            .filter(|(_, calls)| *calls > 0)
            .collect();
        eprintln!(
            "Redis commands: {allowed} for 20 allowed calls, {first_round} for a confirmation's first round, {retry:?} for its confirmed retry"
        );
        assert_eq!(allowed, 0);
        assert_eq!(first_round, 0);
        let round_trips: u64 = retry
            .iter()
            .filter(|(name, _)| !INSIDE_THE_SCRIPT.contains(&name.as_str()))
            .map(|(_, calls)| calls)
            .sum();
        assert_eq!(retry.get(&"evalsha".to_owned()), Some(&1), "{retry:?}");
        assert_eq!(round_trips, 1, "one round trip: {retry:?}");
    }
}

/// Task transitions in Redis: one round trip each on the replica that last saw the record,
/// and correct (one more round trip) on a replica whose memory of it is out of date.
#[cfg(feature = "redis")]
mod task_round_trips {
    use mcp_gate::tasks::{
        HeldCall, RedisTaskStore, TaskChange, TaskDecision, TaskOwner, TaskRecord, TaskStatus,
        TaskStore, Transition,
    };

    use super::common::redis_server::RedisServer;
    use super::*;

    fn record() -> TaskRecord {
        TaskRecord::new(
            TaskOwner::new(ISSUER, Some("alice".into()), None),
            HeldCall::new(
                "tools/call",
                json!({"name": "deploy", "arguments": {"env": "prod"}}),
                "2026-07-28",
                "https://mcp.example/mcp",
            ),
            "ctx",
            60_000,
            1_000,
        )
        .unwrap()
    }

    /// Commands sent by clients since `before`: script calls and plain commands, without the
    /// commands scripts run inside Redis (`TIME`, and the script's own `GET`/`SET`).
    async fn sent(raw: &mut ::redis::aio::MultiplexedConnection, before: &mut u64) -> u64 {
        let info: String = ::redis::cmd("INFO")
            .arg("commandstats")
            .query_async(raw)
            .await
            .unwrap();
        let calls = |name: &str| -> u64 {
            info.lines()
                .find_map(|l| l.strip_prefix(&format!("cmdstat_{name}:calls=")))
                .and_then(|rest| rest.split(',').next()?.parse().ok())
                .unwrap_or(0)
        };
        let total = calls("evalsha") + calls("eval") + calls("script|load");
        let delta = total - *before;
        *before = total;
        delta
    }

    #[tokio::test]
    async fn a_transition_is_one_round_trip_and_a_stale_replica_still_gets_it_right() {
        let Some(redis) = RedisServer::start_or_skip() else {
            return;
        };
        let (a, b) = (
            RedisTaskStore::new(&redis.url(), "trt").await.unwrap(),
            RedisTaskStore::new(&redis.url(), "trt").await.unwrap(),
        );
        let mut raw = redis.raw().await;
        let task = record();
        let id = task.id.clone();
        a.create(task).await.unwrap();
        // Warm both scripts on the server (the first call loads each).
        let mut scripts = 0;
        sent(&mut raw, &mut scripts).await;
        let gets = |info: &str| -> u64 {
            info.lines()
                .find_map(|l| l.strip_prefix("cmdstat_get:calls="))
                .and_then(|rest| rest.split(',').next()?.parse().ok())
                .unwrap_or(0)
        };
        let info = |raw: &mut ::redis::aio::MultiplexedConnection| {
            let mut raw = raw.clone();
            async move {
                ::redis::cmd("INFO")
                    .arg("commandstats")
                    .query_async::<String>(&mut raw)
                    .await
                    .unwrap()
            }
        };
        // B approves: B never saw the task, so it reads it first (GET + the script).
        let gets_before = gets(&info(&mut raw).await);
        let approved = b
            .transition(
                &id,
                TaskChange::new(TaskStatus::Working, TaskStatus::Approved)
                    .decision(TaskDecision::Approved { by: "ops".into() }),
            )
            .await
            .unwrap();
        assert!(approved.is_applied());
        // A still remembers the task as working: its claim is decided again on what Redis
        // holds (one more GET), and succeeds.
        let claimed = a
            .transition(
                &id,
                TaskChange::new(TaskStatus::Approved, TaskStatus::Executing),
            )
            .await
            .unwrap();
        assert!(matches!(&claimed, Transition::Applied(r) if r.status == TaskStatus::Executing));
        let plain_gets = gets(&info(&mut raw).await) - gets_before;
        sent(&mut raw, &mut scripts).await;
        // A now knows the record exactly: finishing it is one script call and no read.
        let gets_before = gets(&info(&mut raw).await);
        let done = a
            .transition(
                &id,
                TaskChange::new(TaskStatus::Executing, TaskStatus::Completed)
                    .result(json!({"content": [], "isError": false})),
            )
            .await
            .unwrap();
        assert!(done.is_applied());
        let finish_scripts = sent(&mut raw, &mut scripts).await;
        // The script's own GET counts in commandstats too: one per script call.
        let finish_gets = gets(&info(&mut raw).await) - gets_before;
        eprintln!(
            "task transitions: {plain_gets} GETs for a first-seen and a stale transition (scripts included); finishing: {finish_scripts} script call, {finish_gets} GET (inside the script)"
        );
        assert_eq!(finish_scripts, 1, "one round trip");
        assert_eq!(finish_gets, 1, "no read before the script");
    }
}

/// Legacy session bindings in Redis: any replica knows who owns a session.
#[cfg(feature = "redis")]
mod sessions {
    use mcp_gate::auth::Owner;
    use mcp_gate::mcp::{RedisSessionStore, SessionRecord, SessionStore};
    use mcp_gate::store::{StoreError, StoreKind};

    use super::common::redis_server::RedisServer;
    use super::*;

    fn owner(subject: &str) -> Owner {
        Owner::new(ISSUER, Some(subject.into()), Some("client".into()))
    }

    #[tokio::test]
    async fn bindings_are_shared_bounded_per_owner_and_never_taken_over() {
        let Some(mut redis) = RedisServer::start_or_skip() else {
            return;
        };
        let url = redis.url();
        let store = |capacity, quota| {
            let url = url.clone();
            async move {
                RedisSessionStore::new(
                    &url,
                    "sessions-test",
                    capacity,
                    quota,
                    Duration::from_secs(60),
                )
                .await
                .unwrap()
            }
        };
        let (a, b) = (store(3, 2).await, store(3, 2).await);
        let mut capabilities = serde_json::Map::new();
        capabilities.insert("elicitation".into(), json!({}));
        let record = SessionRecord::new(owner("alice"))
            .protocol_version("2025-11-25")
            .capabilities(capabilities);
        a.bind("s1", record.clone()).await.unwrap();
        // Replica B reads what A bound, capabilities included.
        assert_eq!(b.get("s1").await.unwrap(), Some(record));
        assert_eq!(
            b.bind("s1", SessionRecord::new(owner("mallory"))).await,
            Err(StoreError::Taken)
        );
        a.bind("s2", SessionRecord::new(owner("alice")))
            .await
            .unwrap();
        assert_eq!(
            b.bind("s3", SessionRecord::new(owner("alice"))).await,
            Err(StoreError::OwnerQuota {
                store: StoreKind::Sessions,
                quota: 2
            })
        );
        b.bind("s4", SessionRecord::new(owner("bob")))
            .await
            .unwrap();
        assert_eq!(
            a.bind("s5", SessionRecord::new(owner("carol"))).await,
            Err(StoreError::Full {
                store: StoreKind::Sessions,
                capacity: 3
            })
        );
        // Only the owner can end a binding; ending one frees its slot.
        b.unbind("s1", &owner("mallory")).await.unwrap();
        assert!(a.get("s1").await.unwrap().is_some());
        b.unbind("s1", &owner("alice")).await.unwrap();
        assert_eq!(a.get("s1").await.unwrap(), None);
        a.bind("s5", SessionRecord::new(owner("carol")))
            .await
            .unwrap();

        // Redis down: a lookup fails (the layer answers 503), it never says "no session"
        // or "someone's session".
        redis.stop();
        let down = tokio::time::timeout(Duration::from_secs(30), a.get("s2"))
            .await
            .expect("an answer within 30 s");
        assert!(
            matches!(down, Err(StoreError::Unavailable { .. })),
            "{down:?}"
        );
    }

    /// Two gateway replicas sharing one Redis: a session opened through A is refused to
    /// another principal on B with the fixed 404, and its owner's DELETE through B unbinds it
    /// for A as well.
    #[tokio::test]
    async fn two_replicas_share_session_bindings() {
        let Some(redis) = RedisServer::start_or_skip() else {
            return;
        };
        let key = TestKey::es256("k1");
        let service = rmcp::transport::streamable_http_server::StreamableHttpService::new(
            || Ok(common::tools::DemoServer::default()),
            std::sync::Arc::new(
                rmcp::transport::streamable_http_server::session::local::LocalSessionManager::default(),
            ),
            rmcp::transport::streamable_http_server::StreamableHttpServerConfig::default(),
        );
        let resource = "http://127.0.0.1:9/mcp";
        let mut replicas = Vec::new();
        for _ in 0..2 {
            let keys = StaticKeys::from_jwks_json(&key.jwks_json()).expect("keys");
            let store =
                RedisSessionStore::new(&redis.url(), "replicas", 100, 10, Duration::from_secs(60))
                    .await
                    .unwrap();
            replicas.push(
                GatedServer::start_replica(
                    resource,
                    move |_| {
                        mcp_gate::Gate::builder()
                            .issuer(Issuer::with_keys(ISSUER, keys))
                            .session_store(store)
                            .evaluate(mcp_gate::policy::allow_all())
                    },
                    // One inner rmcp shared by both replicas stands in for sticky routing.
                    Router::new().nest_service("/mcp", service.clone()),
                )
                .await,
            );
        }
        let token = |subject: &str| {
            let mut claims = claims(ISSUER, resource, "mcp:read");
            claims["sub"] = json!(subject);
            key.mint(&claims)
        };
        let (alice, bob) = (token("alice"), token("bob"));
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}});
        let opened = replicas[0].post(Some(&alice), &[], &init.to_string()).await;
        let session = opened.headers["mcp-session-id"]
            .to_str()
            .unwrap()
            .to_owned();
        let headers = [
            ("mcp-session-id", session.as_str()),
            ("mcp-protocol-version", "2025-11-25"),
        ];
        let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}).to_string();
        let stolen = replicas[1].post(Some(&bob), &headers, &ping).await;
        assert_eq!(stolen.status, 404, "{stolen:?}");
        assert_eq!(stolen.body["error"]["code"], -32001);
        let own = replicas[1].post(Some(&alice), &headers, &ping).await;
        assert_eq!(own.status, 200, "{own:?}");
        let ended = reqwest::Client::new()
            .delete(&replicas[1].url)
            .bearer_auth(&alice)
            .header("mcp-session-id", &session)
            .header("mcp-protocol-version", "2025-11-25")
            .send()
            .await
            .unwrap();
        assert!(ended.status().is_success(), "{}", ended.status());
        let after = replicas[0].post(Some(&alice), &headers, &ping).await;
        assert_eq!(after.status, 404, "unbound on every replica: {after:?}");
    }
}

/// The key-making command of `docs/replicas.md`, run as written, makes a key the gate takes.
#[test]
fn the_guides_key_command_makes_a_usable_key() {
    let guide = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/replicas.md"))
        .expect("docs/replicas.md");
    let command = guide
        .split('`')
        .find(|part| part.starts_with("printf 'k1:"))
        .expect("the guide shows a key-making command");
    let output = std::process::Command::new("sh")
        .args(["-c", command])
        .output()
        .expect("sh runs");
    assert!(output.status.success(), "{command}");
    let text = String::from_utf8(output.stdout).expect("text");
    let keys = mcp_gate::continuation::Keyring::from_config(&text)
        .unwrap_or_else(|e| panic!("{command} gave {text:?}: {e}"));
    assert_eq!(keys.signing_key_id(), "k1");
}
