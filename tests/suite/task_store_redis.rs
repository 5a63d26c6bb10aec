//! The task store conformance suite, written once and run against both stores: the
//! `MemoryTaskStore`, and (feature `redis`) a `RedisTaskStore` on a real `redis-server` that
//! each test starts on a free loopback port and kills when it ends, on a three-master Redis
//! Cluster, and through three sentinels.
//!
//! Without a `redis-server` binary the Redis tests print why and pass, unless the environment
//! variable `CI` is set: then they fail. `scripts/setup-peers.sh` installs it.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use mcp_gate::tasks::{
    HeldCall, MemoryTaskStore, StoreError, TaskChange, TaskDecision, TaskError, TaskOwner,
    TaskQuery, TaskRecord, TaskStatus, TaskStore, Transition, now_ms,
};
use serde_json::{Value, json};

fn owner(subject: &str) -> TaskOwner {
    TaskOwner::new(
        "https://as.example",
        Some(subject.to_owned()),
        Some("app".into()),
    )
}

fn record_for(owner: TaskOwner, ttl_ms: u64) -> TaskRecord {
    TaskRecord::new(
        owner,
        HeldCall::new(
            "tools/call",
            json!({"name": "deploy", "arguments": {"env": "prod", "replicas": 3}}),
            "2026-07-28",
            "https://mcp.example/mcp",
        ),
        "actx_7e21",
        ttl_ms,
        5_000,
    )
    .unwrap()
}

fn record(ttl_ms: u64) -> TaskRecord {
    record_for(owner("alice"), ttl_ms)
}

fn approve() -> TaskChange {
    TaskChange::new(TaskStatus::Working, TaskStatus::Approved)
        .decision(TaskDecision::Approved { by: "ops".into() })
}

fn tool_result(n: usize) -> Value {
    json!({"content": [{"type": "text", "text": format!("deployed by racer {n}")}], "isError": false})
}

fn status_of(t: &Transition) -> Option<TaskStatus> {
    match t {
        Transition::Applied(r) | Transition::Conflict(Some(r)) => Some(r.status),
        Transition::Conflict(None) => None,
    }
}

/// The suite. Each function gets one or more handles on the *same* store: for Redis, separate
/// instances with their own connections (replicas); for memory, clones of one `Arc`.
mod suite {
    use super::*;

    pub async fn create_and_get(stores: &[Arc<dyn TaskStore>]) {
        let (store, other) = (&*stores[0], &*stores[stores.len() - 1]);
        let r = record(60_000);
        store.create(r.clone()).await.unwrap();
        // Readable at once, by every instance: the CreateTaskResult may be sent now.
        assert_eq!(store.get(&r.id).await.unwrap().as_ref(), Some(&r));
        assert_eq!(other.get(&r.id).await.unwrap().as_ref(), Some(&r));
        let unknown = mcp_gate::tasks::TaskId::generate().unwrap();
        assert_eq!(store.get(&unknown).await.unwrap(), None);
        assert_eq!(
            store.transition(&unknown, approve()).await.unwrap(),
            Transition::Conflict(None)
        );
    }

    pub async fn new_records_are_checked(stores: &[Arc<dyn TaskStore>]) {
        let (store, other) = (&*stores[0], &*stores[stores.len() - 1]);
        let r = record(60_000);
        store.create(r.clone()).await.unwrap();
        let mut again = r.clone();
        again.call.params = json!({"name": "something-else"});
        assert_eq!(
            other.create(again).await.unwrap_err(),
            StoreError::Duplicate(r.id.clone())
        );
        assert_eq!(
            store.get(&r.id).await.unwrap().as_ref(),
            Some(&r),
            "a duplicate does not overwrite"
        );

        let mut approved = record(60_000);
        approved.status = TaskStatus::Approved;
        approved.decision = Some(TaskDecision::Approved { by: "me".into() });
        assert!(matches!(
            store.create(approved).await.unwrap_err(),
            StoreError::InvalidRecord(_)
        ));
        let mut no_ttl = record(60_000);
        no_ttl.ttl_ms = 0;
        assert!(matches!(
            store.create(no_ttl).await.unwrap_err(),
            StoreError::InvalidRecord(_)
        ));
        let mut with_meta = record(60_000);
        with_meta.call.params["_meta"] = json!({"echo": 1});
        assert!(matches!(
            store.create(with_meta).await.unwrap_err(),
            StoreError::InvalidRecord(_)
        ));
        let mut stale = record(1_000);
        stale.created_at -= 5_000;
        stale.last_updated_at = stale.created_at;
        assert_eq!(
            store.create(stale.clone()).await.unwrap_err(),
            StoreError::Expired(stale.id.clone())
        );
        assert_eq!(store.get(&stale.id).await.unwrap(), None);
    }

    pub async fn expired_tasks_vanish_and_never_move(stores: &[Arc<dyn TaskStore>]) {
        let (store, other) = (&*stores[0], &*stores[stores.len() - 1]);
        // 1.5 s: long enough that two creates, each waiting for a replica on a topology with
        // replicas, are done on a busy machine before it ends.
        let short = record(1_500);
        let long = record(60_000);
        store.create(short.clone()).await.unwrap();
        store.create(long.clone()).await.unwrap();
        assert!(other.get(&short.id).await.unwrap().is_some());
        assert_eq!(store.list(TaskQuery::new()).await.unwrap().len(), 2);
        // Approved but not run when the deadline passes.
        assert!(
            store
                .transition(&short.id, approve())
                .await
                .unwrap()
                .is_applied()
        );

        let wait = short.expires_at().saturating_sub(now_ms()) + 100;
        assert!(wait <= 1_600, "bounded sleep");
        tokio::time::sleep(Duration::from_millis(wait)).await;

        assert_eq!(store.get(&short.id).await.unwrap(), None);
        assert_eq!(other.get(&short.id).await.unwrap(), None);
        assert_eq!(
            other
                .transition(
                    &short.id,
                    TaskChange::new(TaskStatus::Approved, TaskStatus::Executing)
                )
                .await
                .unwrap(),
            Transition::Conflict(None),
            "an expired task is never executed"
        );
        let listed = store.list(TaskQuery::new()).await.unwrap();
        assert_eq!(listed, vec![long.clone()]);
        assert!(store.get(&long.id).await.unwrap().is_some());
    }

    pub async fn claims_can_demand_time_to_spare(stores: &[Arc<dyn TaskStore>]) {
        let store = &*stores[0];
        let r = record(60_000);
        store.create(r.clone()).await.unwrap();
        let _ = store.transition(&r.id, approve()).await.unwrap();
        let claim = TaskChange::new(TaskStatus::Approved, TaskStatus::Executing);
        let greedy = claim.clone().require_remaining_ms(120_000);
        assert_eq!(
            store.transition(&r.id, greedy).await.unwrap_err(),
            StoreError::Expired(r.id.clone())
        );
        assert_eq!(
            store.get(&r.id).await.unwrap().unwrap().status,
            TaskStatus::Approved,
            "refused claims change nothing"
        );
        let modest = claim.require_remaining_ms(10_000);
        assert!(store.transition(&r.id, modest).await.unwrap().is_applied());
    }

    pub async fn compare_and_set(stores: &[Arc<dyn TaskStore>]) {
        let (store, other) = (&*stores[0], &*stores[stores.len() - 1]);
        let r = record(60_000);
        store.create(r.clone()).await.unwrap();

        // Lifecycle violations are refused before the store is looked at.
        for (from, to) in [
            (TaskStatus::Working, TaskStatus::Executing),
            (TaskStatus::Working, TaskStatus::Working),
            (TaskStatus::Completed, TaskStatus::Working),
            (TaskStatus::Executing, TaskStatus::Cancelled),
        ] {
            assert_eq!(
                store
                    .transition(&r.id, TaskChange::new(from, to))
                    .await
                    .unwrap_err(),
                StoreError::InvalidTransition { from, to }
            );
        }
        // Changes that would leave an invalid record are refused, and change nothing.
        assert!(matches!(
            store
                .transition(
                    &r.id,
                    TaskChange::new(TaskStatus::Working, TaskStatus::Completed)
                )
                .await
                .unwrap_err(),
            StoreError::InvalidRecord(_)
        ));
        assert!(matches!(
            store
                .transition(
                    &r.id,
                    TaskChange::new(TaskStatus::Working, TaskStatus::Approved)
                )
                .await
                .unwrap_err(),
            StoreError::InvalidRecord(_)
        ));
        assert_eq!(store.get(&r.id).await.unwrap().as_ref(), Some(&r));

        // The wrong expected status is a conflict that shows the record as it is.
        let conflict = other
            .transition(
                &r.id,
                TaskChange::new(TaskStatus::Approved, TaskStatus::Executing),
            )
            .await
            .unwrap();
        assert_eq!(conflict, Transition::Conflict(Some(r.clone())));

        let Transition::Applied(approved) = store.transition(&r.id, approve()).await.unwrap()
        else {
            panic!("approval applies")
        };
        assert_eq!(approved.status, TaskStatus::Approved);
        assert_eq!(approved.status.wire_status(), "working");
        assert_eq!(
            approved.decision,
            Some(TaskDecision::Approved { by: "ops".into() })
        );
        assert_eq!(approved.created_at, r.created_at);
        assert!(approved.last_updated_at >= r.last_updated_at);
        assert_eq!(other.get(&r.id).await.unwrap().as_ref(), Some(&approved));

        // The same move again, from another instance: a conflict, nothing applied twice.
        assert_eq!(
            other.transition(&r.id, approve()).await.unwrap(),
            Transition::Conflict(Some(approved.clone()))
        );
        // A second decision is refused even along a valid edge.
        let refuse = TaskChange::new(TaskStatus::Approved, TaskStatus::Completed)
            .decision(TaskDecision::Refused {
                reason: "late".into(),
            })
            .result(json!({"isError": true}));
        assert!(matches!(
            other.transition(&r.id, refuse).await.unwrap_err(),
            StoreError::InvalidRecord(_)
        ));
    }

    pub async fn lifecycles(stores: &[Arc<dyn TaskStore>]) {
        let (store, other) = (&*stores[0], &*stores[stores.len() - 1]);
        // Approved, run, completed with a result that JSON round trips exactly.
        let result = json!({
            "content": [{"type": "text", "text": "deployed \u{2713}"}],
            "structuredContent": {"big": 12_345_678_901_234_567_890u64, "tiny": 1e-300,
                                  "empty_list": [], "empty_map": {}, "nested": [[[]]]},
            "isError": false
        });
        let r = record(60_000);
        store.create(r.clone()).await.unwrap();
        let steps = [
            approve(),
            TaskChange::new(TaskStatus::Approved, TaskStatus::Executing),
            TaskChange::new(TaskStatus::Executing, TaskStatus::Completed).result(result.clone()),
        ];
        let mut last = r.last_updated_at;
        for (i, change) in steps.into_iter().enumerate() {
            let handle = if i % 2 == 0 { store } else { other };
            let Transition::Applied(now) = handle.transition(&r.id, change.clone()).await.unwrap()
            else {
                panic!("{change:?} applies")
            };
            assert!(now.last_updated_at >= last);
            last = now.last_updated_at;
        }
        let done = other.get(&r.id).await.unwrap().unwrap();
        assert_eq!(done.status, TaskStatus::Completed);
        assert_eq!(done.status.wire_status(), "completed");
        assert_eq!(done.result.as_ref(), Some(&result));
        assert_eq!(done.context_id, "actx_7e21");
        assert_eq!(done.call, r.call);
        for to in [
            TaskStatus::Failed,
            TaskStatus::Cancelled,
            TaskStatus::Working,
        ] {
            assert!(matches!(
                store
                    .transition(&r.id, TaskChange::new(TaskStatus::Completed, to))
                    .await
                    .unwrap_err(),
                StoreError::InvalidTransition { .. }
            ));
        }

        // Refused: completed, with the refusal's result.
        let r = record(60_000);
        store.create(r.clone()).await.unwrap();
        let refusal = json!({"isError": true, "content": [{"type": "text", "text": "refused"}]});
        let Transition::Applied(refused) = other
            .transition(
                &r.id,
                TaskChange::new(TaskStatus::Working, TaskStatus::Completed)
                    .decision(TaskDecision::Refused {
                        reason: "not today".into(),
                    })
                    .result(refusal.clone()),
            )
            .await
            .unwrap()
        else {
            panic!("refusal applies")
        };
        assert_eq!(refused.result, Some(refusal));
        assert_eq!(
            refused.decision,
            Some(TaskDecision::Refused {
                reason: "not today".into()
            })
        );

        // Cancelled by the owner, after approval but before the run.
        let r = record(60_000);
        store.create(r.clone()).await.unwrap();
        let _ = store.transition(&r.id, approve()).await.unwrap();
        let cancelled = other
            .transition(
                &r.id,
                TaskChange::new(TaskStatus::Approved, TaskStatus::Cancelled),
            )
            .await
            .unwrap();
        assert_eq!(status_of(&cancelled), Some(TaskStatus::Cancelled));
        assert_eq!(
            store
                .transition(
                    &r.id,
                    TaskChange::new(TaskStatus::Approved, TaskStatus::Executing)
                )
                .await
                .unwrap(),
            Transition::Conflict(store.get(&r.id).await.unwrap()),
            "a cancelled task is not run"
        );

        // Failed: the inner server answered with a JSON-RPC error.
        let r = record(60_000);
        store.create(r.clone()).await.unwrap();
        let _ = store.transition(&r.id, approve()).await.unwrap();
        let _ = store
            .transition(
                &r.id,
                TaskChange::new(TaskStatus::Approved, TaskStatus::Executing),
            )
            .await
            .unwrap();
        let error = TaskError::new(-32603, "inner server failed");
        assert!(matches!(
            other
                .transition(
                    &r.id,
                    TaskChange::new(TaskStatus::Executing, TaskStatus::Failed)
                )
                .await
                .unwrap_err(),
            StoreError::InvalidRecord(_)
        ));
        let failed = other
            .transition(
                &r.id,
                TaskChange::new(TaskStatus::Executing, TaskStatus::Failed).error(error.clone()),
            )
            .await
            .unwrap();
        let Transition::Applied(failed) = failed else {
            panic!("failure applies")
        };
        assert_eq!(failed.error, Some(error));
        assert_eq!(failed.status.wire_status(), "failed");
    }

    pub async fn listing(stores: &[Arc<dyn TaskStore>]) {
        let (store, other) = (&*stores[0], &*stores[stores.len() - 1]);
        let a1 = record_for(owner("alice"), 30_000);
        let a2 = record_for(owner("alice"), 20_000);
        let a3 = record_for(owner("alice"), 10_000);
        let b1 = record_for(owner("bob"), 15_000);
        let mut carol = owner("carol");
        carol.client_id = None;
        let c1 = record_for(carol.clone(), 25_000);
        for r in [&a1, &a2, &a3, &b1, &c1] {
            store.create(r.clone()).await.unwrap();
        }
        let ids = |records: Vec<TaskRecord>| records.into_iter().map(|r| r.id).collect::<Vec<_>>();

        // Soonest expiry first.
        assert_eq!(
            ids(other.list(TaskQuery::new()).await.unwrap()),
            [&a3, &b1, &a2, &c1, &a1].map(|r| r.id.clone())
        );
        assert_eq!(
            ids(other
                .list(TaskQuery::new().owner(&owner("alice")))
                .await
                .unwrap()),
            [&a3, &a2, &a1].map(|r| r.id.clone())
        );
        // The owner key is compared whole: same subject, another client is someone else.
        let mut carol_elsewhere = carol.clone();
        carol_elsewhere.client_id = Some("app".into());
        assert!(
            other
                .list(TaskQuery::new().owner(&carol_elsewhere))
                .await
                .unwrap()
                .is_empty()
        );
        assert_eq!(
            ids(other.list(TaskQuery::new().owner(&carol)).await.unwrap()),
            vec![c1.id.clone()]
        );
        assert_eq!(
            ids(other.list(TaskQuery::new().limit(2)).await.unwrap()),
            [&a3, &b1].map(|r| r.id.clone())
        );
        assert!(
            other
                .list(TaskQuery::new().limit(0))
                .await
                .unwrap()
                .is_empty()
        );

        let _ = store.transition(&a2.id, approve()).await.unwrap();
        assert_eq!(
            ids(other
                .list(
                    TaskQuery::new()
                        .owner(&owner("alice"))
                        .status(TaskStatus::Working)
                        .limit(100)
                )
                .await
                .unwrap()),
            [&a3, &a1].map(|r| r.id.clone())
        );
        let approved = other
            .list(TaskQuery::new().status(TaskStatus::Approved))
            .await
            .unwrap();
        assert_eq!(ids(approved.clone()), vec![a2.id.clone()]);
        assert_eq!(approved[0].status, TaskStatus::Approved);
    }

    /// Many callers race the same moves on one record: exactly one wins each race.
    pub async fn exactly_once(stores: &[Arc<dyn TaskStore>]) {
        const RACERS: usize = 50;
        const ROUNDS: usize = 4;
        for round in 0..ROUNDS {
            let r = record(60_000);
            let id = r.id.clone();
            stores[0].create(r).await.unwrap();

            // Approve and cancel race on a pending task: one outcome.
            let outcomes = race(stores, RACERS, |store, n| {
                let id = id.clone();
                async move {
                    let change = if n % 2 == 0 {
                        approve()
                    } else {
                        TaskChange::new(TaskStatus::Working, TaskStatus::Cancelled)
                    };
                    store.transition(&id, change).await.unwrap()
                }
            })
            .await;
            let winners: Vec<_> = outcomes.iter().filter(|t| t.is_applied()).collect();
            assert_eq!(winners.len(), 1, "round {round}: {outcomes:?}");
            let decided = status_of(winners[0]).unwrap();
            assert!(outcomes.iter().all(|t| status_of(t) == Some(decided)));
            let approved = if decided == TaskStatus::Approved {
                id
            } else {
                // Cancelled won: race the execution on another, approved task.
                let r = record(60_000);
                stores[0].create(r.clone()).await.unwrap();
                let _ = stores[0].transition(&r.id, approve()).await.unwrap();
                r.id
            };
            race_execution(stores, approved, round).await;
        }
    }

    async fn race_execution(
        stores: &[Arc<dyn TaskStore>],
        id: mcp_gate::tasks::TaskId,
        round: usize,
    ) {
        const RACERS: usize = 50;
        // Every replica polls, sees it approved, and tries to claim it.
        let claims = race(stores, RACERS, |store, _| {
            let id = id.clone();
            async move {
                store
                    .transition(
                        &id,
                        TaskChange::new(TaskStatus::Approved, TaskStatus::Executing)
                            .require_remaining_ms(1_000),
                    )
                    .await
                    .unwrap()
            }
        })
        .await;
        let claimed = claims.iter().filter(|t| t.is_applied()).count();
        assert_eq!(claimed, 1, "round {round}: exactly one executor");
        assert!(
            claims
                .iter()
                .all(|t| status_of(t) == Some(TaskStatus::Executing))
        );

        // And to record a result: one result is kept.
        let results = race(stores, RACERS, |store, n| {
            let id = id.clone();
            async move {
                store
                    .transition(
                        &id,
                        TaskChange::new(TaskStatus::Executing, TaskStatus::Completed)
                            .result(tool_result(n)),
                    )
                    .await
                    .unwrap()
            }
        })
        .await;
        let winners: Vec<_> = results
            .iter()
            .filter_map(|t| match t {
                Transition::Applied(r) => Some(r.clone()),
                Transition::Conflict(_) => None,
            })
            .collect();
        assert_eq!(winners.len(), 1, "round {round}: one result");
        let stored = stores[stores.len() - 1].get(&id).await.unwrap().unwrap();
        assert_eq!(stored, winners[0]);
    }

    /// Runs `n` copies of `attempt` on separate tokio tasks, spread over the handles, released
    /// together by a barrier.
    async fn race<F, Fut>(stores: &[Arc<dyn TaskStore>], n: usize, attempt: F) -> Vec<Transition>
    where
        F: Fn(Arc<dyn TaskStore>, usize) -> Fut,
        Fut: std::future::Future<Output = Transition> + Send + 'static,
    {
        let barrier = Arc::new(tokio::sync::Barrier::new(n));
        let mut handles = Vec::with_capacity(n);
        for i in 0..n {
            let barrier = barrier.clone();
            let attempt = attempt(stores[i % stores.len()].clone(), i);
            handles.push(tokio::spawn(async move {
                barrier.wait().await;
                attempt.await
            }));
        }
        let mut outcomes = Vec::with_capacity(n);
        for handle in handles {
            outcomes.push(handle.await.unwrap());
        }
        outcomes
    }
}

/// One test per suite function and store.
macro_rules! conformance {
    ($($name:ident),* $(,)?) => {
        mod memory {
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() {
                    let store: Arc<dyn TaskStore> = Arc::new(MemoryTaskStore::new(1_000));
                    suite::$name(&[store.clone(), store]).await;
                }
            )*
        }

        #[cfg(feature = "redis")]
        mod redis_store {
            use super::*;
            use super::harness::RedisServer;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() {
                    let Some(server) = RedisServer::start_or_skip() else { return };
                    // Two instances, two connections: two replicas of the gateway.
                    let stores = [server.store("gate").await, server.store("gate").await];
                    suite::$name(&stores).await;
                }
            )*
        }

        // The same suite on a Redis Cluster of three masters, and through Sentinel.
        #[cfg(feature = "redis")]
        mod redis_cluster {
            use super::*;
            use crate::common::redis_topology::RedisCluster;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() {
                    let Some(cluster) = RedisCluster::start_or_skip() else { return };
                    let stores = [topology_store(&cluster.url()).await, topology_store(&cluster.url()).await];
                    suite::$name(&stores).await;
                }
            )*
        }

        #[cfg(feature = "redis")]
        mod redis_sentinel {
            use super::*;
            use crate::common::redis_topology::RedisSentinels;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() {
                    let Some(sentinels) = RedisSentinels::start_or_skip() else { return };
                    let stores = [topology_store(&sentinels.url()).await, topology_store(&sentinels.url()).await];
                    suite::$name(&stores).await;
                }
            )*
        }
    };
}

/// A task store on the topology `url` names (a cluster node, or `redis+sentinel://`).
#[cfg(feature = "redis")]
async fn topology_store(url: &str) -> Arc<dyn TaskStore> {
    Arc::new(
        mcp_gate::tasks::RedisTaskStore::new(url, "gate")
            .await
            .expect("a task store on the topology"),
    )
}

conformance!(
    create_and_get,
    new_records_are_checked,
    expired_tasks_vanish_and_never_move,
    claims_can_demand_time_to_spare,
    compare_and_set,
    lifecycles,
    listing,
    exactly_once,
);

#[cfg(feature = "redis")]
use common::redis_server as harness;

/// What only the Redis store has: keys, expiry on the server, other instances, failures.
#[cfg(feature = "redis")]
mod redis_only {
    use std::time::Instant;

    use super::harness::{RedisServer, free_port};
    use super::*;
    use mcp_gate::tasks::RedisTaskStore;

    async fn cmd<T: redis::FromRedisValue>(
        conn: &mut redis::aio::MultiplexedConnection,
        args: &[&str],
    ) -> T {
        let mut c = redis::cmd(args[0]);
        for a in &args[1..] {
            c.arg(*a);
        }
        c.query_async(conn).await.unwrap()
    }

    /// The gateway restarts, or another replica takes the poll: a new instance on the same
    /// server and namespace sees the task and decides it, and the first instance's view
    /// agrees.
    #[tokio::test]
    async fn another_instance_sees_and_decides_the_same_records() {
        let Some(server) = RedisServer::start_or_skip() else {
            return;
        };
        let first = server.redis_store("gate").await;
        let r = record(60_000);
        first.create(r.clone()).await.unwrap();
        drop(first); // the gateway that created it is gone

        let restarted = server.redis_store("gate").await;
        assert_eq!(restarted.get(&r.id).await.unwrap().as_ref(), Some(&r));
        let Transition::Applied(approved) = restarted.transition(&r.id, approve()).await.unwrap()
        else {
            panic!("the new instance can decide the task")
        };
        let replica = server.redis_store("gate").await;
        assert_eq!(
            replica.transition(&r.id, approve()).await.unwrap(),
            Transition::Conflict(Some(approved.clone()))
        );
        assert_eq!(
            replica.list(TaskQuery::new()).await.unwrap(),
            vec![approved]
        );
    }

    /// The application's own cluster and sentinel clients serve the stores, shared by two.
    #[tokio::test]
    async fn stores_take_the_applications_cluster_and_sentinel_clients() {
        use crate::common::redis_topology::{RedisCluster, RedisSentinels};
        use mcp_gate::continuation::{FirstUse, RedisReplayStore, ReplayStore, StateUse};
        use mcp_gate::store::RedisConnection;
        use redis::sentinel::{SentinelClient, SentinelServerType};
        let (Some(cluster), Some(sentinels)) = (
            RedisCluster::start_or_skip(),
            RedisSentinels::start_or_skip(),
        ) else {
            return;
        };
        let on_cluster = redis::cluster::ClusterClient::new(vec![cluster.url()]).unwrap();
        // The service name is a `String` without the redis crate's rustls feature, any
        // `AsRef<str>` with it: a `String` suits both.
        #[allow(clippy::unnecessary_to_owned)]
        let on_sentinels = SentinelClient::build(
            sentinels.sentinel_urls(),
            RedisSentinels::SERVICE.to_owned(),
            None,
            SentinelServerType::Master,
        )
        .unwrap();
        for connection in [
            RedisConnection::from_cluster_client(on_cluster)
                .await
                .unwrap(),
            RedisConnection::from_sentinel_client(on_sentinels)
                .await
                .unwrap(),
        ] {
            let tasks = RedisTaskStore::with_connection(connection.clone(), "app")
                .await
                .unwrap();
            let replay = RedisReplayStore::with_connection(connection, "app")
                .await
                .unwrap();
            let r = record(60_000);
            tasks.create(r.clone()).await.unwrap();
            assert_eq!(tasks.get(&r.id).await.unwrap(), Some(r));
            let now = std::time::SystemTime::now();
            let state = StateUse::new("alice", "n1", now, now + Duration::from_secs(60));
            assert_eq!(replay.first_use(state).await, Ok(FirstUse::Yes));
            assert_eq!(replay.first_use(state).await, Ok(FirstUse::AlreadyUsed));
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn exactly_once_across_ten_replicas() {
        let Some(server) = RedisServer::start_or_skip() else {
            return;
        };
        let mut stores = Vec::new();
        for _ in 0..10 {
            stores.push(server.store("gate").await);
        }
        suite::exactly_once(&stores).await;
    }

    #[tokio::test]
    async fn keys_are_namespaced_and_expire_with_the_task() {
        let Some(server) = RedisServer::start_or_skip() else {
            return;
        };
        let store = server.redis_store("gate-a").await;
        let elsewhere = server.redis_store("gate-b").await;
        let r = record(60_000);
        store.create(r.clone()).await.unwrap();

        let mut raw = server.raw().await;
        let key = format!("{{gate-a}}:task:{}", r.id);
        let pttl: i64 = cmd(&mut raw, &["PTTL", &key]).await;
        assert!(pttl > 0 && pttl <= 60_000, "{pttl}");
        let expire_at: i64 = cmd(&mut raw, &["PEXPIRETIME", &key]).await;
        assert_eq!(expire_at as u64, r.expires_at(), "PXAT is created_at + ttl");
        let json: String = cmd(&mut raw, &["GET", &key]).await;
        let stored: Value = serde_json::from_str(&json).unwrap();
        assert_eq!(stored["schema_version"], 1);
        assert_eq!(stored["status"], "working");
        let score: f64 = cmd(&mut raw, &["ZSCORE", "{gate-a}:tasks", r.id.as_str()]).await;
        assert_eq!(score as u64, r.expires_at());

        // A transition keeps the key's expiry.
        let _ = store.transition(&r.id, approve()).await.unwrap();
        let after: i64 = cmd(&mut raw, &["PEXPIRETIME", &key]).await;
        assert_eq!(after, expire_at);

        // Another namespace is another store.
        assert_eq!(elsewhere.get(&r.id).await.unwrap(), None);
        assert!(elsewhere.list(TaskQuery::new()).await.unwrap().is_empty());
        elsewhere.create(r.clone()).await.unwrap();
        assert_eq!(
            elsewhere.get(&r.id).await.unwrap().unwrap().status,
            TaskStatus::Working
        );
        assert_eq!(
            store.get(&r.id).await.unwrap().unwrap().status,
            TaskStatus::Approved
        );

        // The counts beside the records: the bytes and sizes of live tasks, and one set of
        // waiting ids per owner (gone in gate-a, whose only task is no longer waiting).
        let owner_keys: Vec<String> = cmd(&mut raw, &["KEYS", "{gate-b}:task-owner:*"]).await;
        let owner = owner_keys[0]
            .trim_start_matches("{gate-b}:task-owner:")
            .to_owned();
        assert_eq!(owner.len(), 32, "a digest names the owner: {owner_keys:?}");
        let owner_expiry: i64 = cmd(&mut raw, &["PEXPIRETIME", &owner_keys[0]]).await;
        assert_eq!(
            owner_expiry, expire_at,
            "the owner's set expires with its last task"
        );
        let keys: Vec<String> = cmd(&mut raw, &["KEYS", "*"]).await; // the test may; the store never does
        let mut keys = keys;
        keys.sort();
        assert_eq!(
            keys,
            [
                "{gate-a}:task-bytes".into(),
                "{gate-a}:task-sizes".into(),
                format!("{{gate-a}}:task:{}", r.id),
                "{gate-a}:tasks".into(),
                "{gate-b}:task-bytes".into(),
                format!("{{gate-b}}:task-owner:{owner}"),
                "{gate-b}:task-sizes".into(),
                format!("{{gate-b}}:task:{}", r.id),
                "{gate-b}:tasks".into(),
            ]
        );
    }

    #[tokio::test]
    async fn the_index_is_trimmed_of_expired_and_missing_tasks() {
        let Some(server) = RedisServer::start_or_skip() else {
            return;
        };
        let store = server.redis_store("gate").await;
        let mut raw = server.raw().await;
        let keep = record(60_000);
        store.create(keep.clone()).await.unwrap();
        let mut short = Vec::new();
        for _ in 0..3 {
            let r = record(300);
            store.create(r.clone()).await.unwrap();
            short.push(r);
        }
        // An id whose record was deleted behind the store's back.
        let ghost = mcp_gate::tasks::TaskId::generate().unwrap();
        let far = (now_ms() + 3_600_000).to_string();
        let _: i64 = cmd(&mut raw, &["ZADD", "{gate}:tasks", &far, ghost.as_str()]).await;
        let card: i64 = cmd(&mut raw, &["ZCARD", "{gate}:tasks"]).await;
        assert_eq!(card, 5);

        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(store.list(TaskQuery::new()).await.unwrap(), vec![keep]);
        let card: i64 = cmd(&mut raw, &["ZCARD", "{gate}:tasks"]).await;
        assert_eq!(card, 1, "expired and missing ids are gone from the index");
        for r in &short {
            let exists: i64 = cmd(&mut raw, &["EXISTS", &format!("{{gate}}:task:{}", r.id)]).await;
            assert_eq!(exists, 0, "Redis expired the record itself");
        }
    }

    #[tokio::test]
    async fn bad_records_are_refused_clearly_and_do_not_hide_good_ones() {
        let Some(server) = RedisServer::start_or_skip() else {
            return;
        };
        let store = server.redis_store("gate").await;
        let mut raw = server.raw().await;
        let good = record(60_000);
        store.create(good.clone()).await.unwrap();

        let old = record(60_000);
        store.create(old.clone()).await.unwrap();
        let mut v2 = serde_json::to_value(&old).unwrap();
        v2["schema_version"] = json!(2);
        let old_key = format!("{{gate}}:task:{}", old.id);
        let _: () = cmd(&mut raw, &["SET", &old_key, &v2.to_string(), "KEEPTTL"]).await;

        let junk = record(60_000);
        store.create(junk.clone()).await.unwrap();
        let junk_key = format!("{{gate}}:task:{}", junk.id);
        let _: () = cmd(
            &mut raw,
            &["SET", &junk_key, "{\"schema_version\":1,\"id\":", "KEEPTTL"],
        )
        .await;

        let err = store.get(&old.id).await.unwrap_err();
        assert!(
            matches!(
                err,
                StoreError::UnsupportedSchema {
                    found: 2,
                    supported: 1,
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains("schema version 2"), "{err}");
        let err = store.get(&junk.id).await.unwrap_err();
        assert!(matches!(err, StoreError::Corrupt { .. }), "{err}");
        let err = store.transition(&junk.id, approve()).await.unwrap_err();
        assert!(matches!(err, StoreError::Corrupt { .. }), "{err}");
        // Unchanged by the refused transition.
        let still: String = cmd(&mut raw, &["GET", &junk_key]).await;
        assert_eq!(still, "{\"schema_version\":1,\"id\":");

        // A record copied under another id is not that task.
        let moved = format!("{{gate}}:task:{}", junk.id);
        let good_json: String =
            cmd(&mut raw, &["GET", &format!("{{gate}}:task:{}", good.id)]).await;
        let _: () = cmd(&mut raw, &["SET", &moved, &good_json, "KEEPTTL"]).await;
        assert!(matches!(
            store.get(&junk.id).await.unwrap_err(),
            StoreError::Corrupt { .. }
        ));

        assert_eq!(store.list(TaskQuery::new()).await.unwrap(), vec![good]);
    }

    #[tokio::test]
    async fn an_unreachable_server_is_reported_promptly() {
        let started = Instant::now();
        let err = RedisTaskStore::new(&format!("redis://127.0.0.1:{}/", free_port()), "gate")
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::Unavailable { .. }), "{err}");
        assert!(started.elapsed() < Duration::from_secs(15));

        let Some(mut server) = RedisServer::start_or_skip() else {
            return;
        };
        let store = server.redis_store("gate").await;
        let r = record(60_000);
        store.create(r.clone()).await.unwrap();
        server.stop();
        let started = Instant::now();
        let err = tokio::time::timeout(Duration::from_secs(20), store.get(&r.id))
            .await
            .expect("bounded")
            .unwrap_err();
        assert!(matches!(err, StoreError::Unavailable { .. }), "{err}");
        let err = tokio::time::timeout(Duration::from_secs(20), store.transition(&r.id, approve()))
            .await
            .expect("bounded")
            .unwrap_err();
        assert!(matches!(err, StoreError::Unavailable { .. }), "{err}");
        assert!(started.elapsed() < Duration::from_secs(20));
    }

    #[tokio::test]
    async fn bad_configuration_is_refused_without_echoing_secrets() {
        let err = RedisTaskStore::new("redis://127.0.0.1:1/", "has space")
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::Config { .. }), "{err}");
        let err = RedisTaskStore::new("not a url :pa55word", "gate")
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::Config { .. }), "{err}");
        assert!(!err.to_string().contains("pa55word"));
    }
}
