//! Every bound the docs promise holds on every backend.
//!
//! First: the findings of issue 24, each as a test that failed before the fix.

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use mcp_gate::continuation::{FirstUse, ReplayStore, StateUse};
use mcp_gate::store::{StoreError, StoreKind};
use mcp_gate::tasks::{MemoryTaskStore, TaskQuery, TaskRecord, TaskStore};
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
    assert_eq!(
        over,
        Err(StoreError::OwnerQuota {
            store: StoreKind::Replay,
            quota: 1_000
        })
    );
    let other = replicas[1]
        .first_use(StateUse::new("bob", "bobs", now, until))
        .await;
    assert_eq!(other, Ok(FirstUse::Yes));
}

/// The store's own quota check, without HTTP: 100 held calls of 1 MB, and eight threads at
/// once asking to hold one more. The check the layer made before (listing the owner's waiting
/// records, which copies them) is timed beside it for the figure; `create_within` counts ids.
#[test]
fn the_quota_check_copies_no_record() {
    let store = Arc::new(MemoryTaskStore::default());
    let owner = mcp_gate::auth::Owner::new(ISSUER, Some("alice".into()), Some("cli".into()));
    let call = |env: String| {
        mcp_gate::tasks::HeldCall::new(
            "tools/call",
            json!({"name": "deploy", "arguments": {"env": env}}),
            "2026-07-28",
            "https://mcp.example/mcp",
        )
    };
    let record = |env: String| TaskRecord::new(owner.clone(), call(env), "ctx", 600_000, 1_000);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    for n in 0..100 {
        let held = record(format!("{n}{}", "x".repeat(1_000_000))).unwrap();
        runtime.block_on(store.create(held)).unwrap();
    }
    let eight_at_once = |attempt: &(dyn Fn(&MemoryTaskStore) + Sync)| {
        let started = Instant::now();
        std::thread::scope(|threads| {
            for _ in 0..8 {
                threads.spawn(|| attempt(&store));
            }
        });
        started.elapsed()
    };
    let listed = eight_at_once(&|store| {
        let waiting = TaskQuery::new()
            .owner(&owner)
            .status(mcp_gate::tasks::TaskStatus::Working)
            .limit(100);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        assert_eq!(runtime.block_on(store.list(waiting)).unwrap().len(), 100);
    });
    let counted = eight_at_once(&|store| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let one_more = record("prod".into()).unwrap();
        assert_eq!(
            runtime.block_on(store.create_within(one_more, 100)),
            Err(StoreError::OwnerQuota {
                store: StoreKind::Tasks,
                quota: 100
            })
        );
    });
    eprintln!(
        "8 concurrent quota checks on 100 x 1 MB held: listing {listed:?}, create_within {counted:?}"
    );
    assert!(
        counted * 10 < listed,
        "create_within {counted:?}, listing {listed:?}"
    );
    assert!(counted < Duration::from_millis(50), "{counted:?}");
}

/// The table: every documented bound of every bounded store, driven through one interface on
/// each backend, so the backends cannot drift apart.
mod table {
    use std::future::Future;
    use std::pin::Pin;
    use std::sync::Arc;
    use std::time::{Duration, SystemTime};

    use mcp_gate::auth::Owner;
    use mcp_gate::continuation::{FirstUse, MemoryReplayStore, ReplayStore, StateUse};
    use mcp_gate::mcp::{MemorySessionStore, SessionRecord, SessionStore};
    use mcp_gate::store::{StoreError, StoreKind};
    use mcp_gate::tasks::{HeldCall, MAX_LIST, MemoryTaskStore, TaskQuery, TaskRecord, TaskStore};
    use serde_json::json;

    /// How long what fills a bound lives: a slot is free again once it has passed. Two seconds:
    /// filling a bound (each write waiting for a replica on a topology with replicas) takes
    /// well under that on a busy machine.
    const LIFETIME: Duration = Duration::from_millis(2_000);
    /// The bounds every store of the table is built with.
    const CAPACITY: usize = 6;
    const PER_OWNER: usize = 3;
    /// The held call's params of every task in the table, and the tasks' byte budget: three
    /// such calls and a little.
    const ENV: &str = "production-eu-west";

    type Taken<'a> = Pin<Box<dyn Future<Output = Result<(), String>> + Send + 'a>>;

    /// One bounded store as the table uses it: take one slot (a used state, a held task, a
    /// session binding) for `owner`, named `slot`, for [`LIFETIME`]. A refusal is the error's
    /// text, as the store's docs name it.
    trait Slots: Send + Sync {
        fn take<'a>(&'a self, owner: &'a str, slot: &'a str) -> Taken<'a>;
    }

    struct Replay(Arc<dyn ReplayStore>);

    impl Slots for Replay {
        fn take<'a>(&'a self, owner: &'a str, slot: &'a str) -> Taken<'a> {
            Box::pin(async move {
                let now = SystemTime::now();
                let state = StateUse::new(owner, slot, now, now + LIFETIME);
                match self.0.first_use(state).await {
                    Ok(FirstUse::Yes) => Ok(()),
                    Ok(other) => panic!("a new state answered {other:?}"),
                    Err(refused @ (StoreError::Full { .. } | StoreError::OwnerQuota { .. })) => {
                        Err(format!("{refused:?}"))
                    }
                    Err(failure) => panic!("{failure}"),
                }
            })
        }
    }

    struct Tasks(Arc<dyn TaskStore>);

    fn task(owner: &str) -> TaskRecord {
        task_living(owner, LIFETIME)
    }

    fn task_living(owner: &str, lifetime: Duration) -> TaskRecord {
        let owner = Owner::new("https://as.example", Some(owner.into()), Some("cli".into()));
        let call = HeldCall::new(
            "tools/call",
            json!({"name": "deploy", "arguments": {"env": ENV}}),
            "2026-07-28",
            "https://mcp.example/mcp",
        );
        let ttl = u64::try_from(lifetime.as_millis()).unwrap();
        TaskRecord::new(owner, call, "ctx", ttl, 100).unwrap()
    }

    fn task_bytes() -> usize {
        task("x").call.params_len()
    }

    impl Slots for Tasks {
        fn take<'a>(&'a self, owner: &'a str, _slot: &'a str) -> Taken<'a> {
            Box::pin(async move {
                match self.0.create_within(task(owner), PER_OWNER).await {
                    Ok(()) => Ok(()),
                    Err(
                        refused @ (StoreError::Full { .. }
                        | StoreError::OverBudget { .. }
                        | StoreError::OwnerQuota { .. }),
                    ) => Err(format!("{refused:?}")),
                    Err(failure) => panic!("{failure}"),
                }
            })
        }
    }

    struct Sessions(Arc<dyn SessionStore>);

    impl Slots for Sessions {
        fn take<'a>(&'a self, owner: &'a str, slot: &'a str) -> Taken<'a> {
            Box::pin(async move {
                let owner =
                    Owner::new("https://as.example", Some(owner.into()), Some("cli".into()));
                match self.0.bind(slot, SessionRecord::new(owner)).await {
                    Ok(()) => Ok(()),
                    Err(refused @ (StoreError::Full { .. } | StoreError::OwnerQuota { .. })) => {
                        Err(format!("{refused:?}"))
                    }
                    Err(failure) => panic!("{failure}"),
                }
            })
        }
    }

    #[derive(Clone, Copy, Debug)]
    enum Store {
        Replay,
        Tasks,
        Sessions,
    }

    #[derive(Clone, Copy, Debug)]
    enum Bound {
        /// Live entries in all.
        Capacity,
        /// Live entries of one owner.
        PerOwner,
        /// Bytes of held calls (the task store).
        Bytes,
    }

    /// Each row: the store, the bound, how many slots fill it, the refusal the docs name.
    fn rows() -> Vec<(Store, Bound, usize, String)> {
        use Bound::*;
        use Store::*;
        let budget = 3 * task_bytes() + 10;
        vec![
            (
                Replay,
                Capacity,
                CAPACITY,
                format!("Full {{ store: Replay, capacity: {CAPACITY} }}"),
            ),
            (
                Replay,
                PerOwner,
                PER_OWNER,
                format!("OwnerQuota {{ store: Replay, quota: {PER_OWNER} }}"),
            ),
            (
                Tasks,
                Capacity,
                CAPACITY,
                format!("Full {{ store: Tasks, capacity: {CAPACITY} }}"),
            ),
            (
                Tasks,
                PerOwner,
                PER_OWNER,
                format!("OwnerQuota {{ store: Tasks, quota: {PER_OWNER} }}"),
            ),
            (
                Tasks,
                Bytes,
                3,
                format!("OverBudget {{ budget: {budget} }}"),
            ),
            (
                Sessions,
                Capacity,
                CAPACITY,
                format!("Full {{ store: Sessions, capacity: {CAPACITY} }}"),
            ),
            (
                Sessions,
                PerOwner,
                PER_OWNER,
                format!("OwnerQuota {{ store: Sessions, quota: {PER_OWNER} }}"),
            ),
        ]
    }

    /// Where the stores of a row live.
    #[derive(Clone, Debug)]
    enum Backend {
        Memory,
        /// A Redis server's URL and the row's namespace.
        #[cfg_attr(not(feature = "redis"), allow(dead_code))]
        Redis(String, String),
    }

    /// Two replicas of `store` on `backend`, built with the row's bounds: two instances on one
    /// Redis namespace, or one memory store shared (a memory store is one process's).
    async fn replicas(store: Store, bound: Bound, backend: &Backend) -> [Arc<dyn Slots>; 2] {
        // The byte row alone bounds bytes: there the capacity is out of the way.
        let (capacity, budget) = match bound {
            Bound::Bytes => (1_000, 3 * task_bytes() + 10),
            _ => (CAPACITY, MemoryTaskStore::DEFAULT_BYTE_BUDGET),
        };
        match backend {
            Backend::Memory => {
                let one: Arc<dyn Slots> = match store {
                    Store::Replay => Arc::new(Replay(Arc::new(MemoryReplayStore::new(
                        capacity, PER_OWNER,
                    )))),
                    Store::Tasks => Arc::new(Tasks(Arc::new(
                        MemoryTaskStore::new(capacity).byte_budget(budget),
                    ))),
                    Store::Sessions => Arc::new(Sessions(Arc::new(MemorySessionStore::new(
                        capacity, PER_OWNER, LIFETIME,
                    )))),
                };
                [one.clone(), one]
            }
            #[cfg(feature = "redis")]
            Backend::Redis(url, namespace) => {
                let mut two = Vec::new();
                for _ in 0..2 {
                    let replica: Arc<dyn Slots> = match store {
                        Store::Replay => Arc::new(Replay(Arc::new(
                            mcp_gate::continuation::RedisReplayStore::new(url, namespace)
                                .await
                                .unwrap()
                                .bounds(capacity, PER_OWNER),
                        ))),
                        Store::Tasks => Arc::new(Tasks(Arc::new(
                            mcp_gate::tasks::RedisTaskStore::new(url, namespace)
                                .await
                                .unwrap()
                                .capacity(capacity)
                                .byte_budget(budget),
                        ))),
                        Store::Sessions => Arc::new(Sessions(Arc::new(
                            mcp_gate::mcp::RedisSessionStore::new(
                                url, namespace, capacity, PER_OWNER, LIFETIME,
                            )
                            .await
                            .unwrap(),
                        ))),
                    };
                    two.push(replica);
                }
                [two[0].clone(), two[1].clone()]
            }
            #[cfg(not(feature = "redis"))]
            Backend::Redis(..) => unreachable!("no Redis backend without the feature"),
        }
    }

    /// One row on one backend: fill the bound through both replicas in turn, see the next one
    /// refused with the documented error, another owner still served (for a per-owner bound),
    /// and a slot usable again once what filled it has expired.
    async fn check_row(row: &(Store, Bound, usize, String), backend: &Backend) {
        let (store, bound, fill, refusal) = row;
        let [a, b] = replicas(*store, *bound, backend).await;
        let owner = |n: usize| match bound {
            Bound::PerOwner => "alice".to_owned(),
            _ => format!("owner-{n}"),
        };
        for n in 0..*fill {
            let replica = if n % 2 == 0 { &a } else { &b };
            let taken = replica.take(&owner(n), &format!("slot-{n}")).await;
            assert_eq!(taken, Ok(()), "{row:?} on {backend:?}: slot {n}");
        }
        for replica in [&a, &b] {
            let over = replica.take(&owner(*fill), &format!("slot-{fill}")).await;
            assert_eq!(over, Err(refusal.clone()), "{row:?} on {backend:?}");
        }
        if matches!(bound, Bound::PerOwner) {
            let other = b.take("bob", "bobs-slot").await;
            assert_eq!(other, Ok(()), "{row:?} on {backend:?}: another owner");
        }
        tokio::time::sleep(LIFETIME + Duration::from_millis(200)).await;
        let again = a.take(&owner(*fill), "after-expiry").await;
        assert_eq!(again, Ok(()), "{row:?} on {backend:?}: after expiry");
    }

    /// Every row, on every backend at once (rows wait out their lifetime together).
    async fn check_all(backends: &[Backend]) {
        let rows = rows();
        let mut checks = Vec::new();
        for backend in backends {
            for (n, row) in rows.iter().enumerate() {
                let backend = match backend {
                    Backend::Redis(url, _) => Backend::Redis(url.clone(), format!("row-{n}")),
                    memory => memory.clone(),
                };
                let row = row.clone();
                checks.push(tokio::spawn(async move { check_row(&row, &backend).await }));
            }
        }
        for check in checks {
            check.await.unwrap();
        }
    }

    #[tokio::test]
    async fn every_bound_holds_in_memory() {
        check_all(&[Backend::Memory]).await;
    }

    #[cfg(feature = "redis")]
    #[tokio::test]
    async fn every_bound_holds_in_redis_across_two_replicas() {
        let Some(redis) = crate::common::redis_server::RedisServer::start_or_skip() else {
            return;
        };
        check_all(&[Backend::Redis(redis.url(), String::new())]).await;
        // Nothing outlives what it counts: once every entry has expired, only the replay
        // store's memory (when it began) remains.
        tokio::time::sleep(LIFETIME + Duration::from_millis(200)).await;
        let mut raw = redis.raw().await;
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg("*")
            .query_async(&mut raw)
            .await
            .unwrap();
        let left: Vec<&String> = keys
            .iter()
            .filter(|key| !key.ends_with(":replay-memory"))
            .collect();
        assert_eq!(left, Vec::<&String>::new());
    }

    /// The same table on a Redis Cluster of three masters (each store's keys in one slot, its
    /// scripts on one shard) and through Sentinel: the bounds do not depend on the topology.
    #[cfg(feature = "redis")]
    #[tokio::test]
    async fn every_bound_holds_on_a_redis_cluster() {
        let Some(cluster) = crate::common::redis_topology::RedisCluster::start_or_skip() else {
            return;
        };
        check_all(&[Backend::Redis(cluster.url(), String::new())]).await;
    }

    #[cfg(feature = "redis")]
    #[tokio::test]
    async fn every_bound_holds_through_sentinel() {
        let Some(sentinels) = crate::common::redis_topology::RedisSentinels::start_or_skip() else {
            return;
        };
        check_all(&[Backend::Redis(sentinels.url(), String::new())]).await;
    }

    /// A decided task no longer counts against its owner's waiting quota, on both backends
    /// (two replicas on Redis): the slot is free at once, not only at expiry.
    async fn a_decision_frees_the_owners_slot(replicas: [Arc<dyn TaskStore>; 2], backend: &str) {
        use mcp_gate::tasks::{TaskChange, TaskDecision, TaskStatus};
        let mut held = Vec::new();
        for n in 0..PER_OWNER {
            let record = task("alice");
            held.push(record.id.clone());
            replicas[n % 2]
                .create_within(record, PER_OWNER)
                .await
                .unwrap();
        }
        let refused = replicas[1].create_within(task("alice"), PER_OWNER).await;
        assert_eq!(
            refused,
            Err(StoreError::OwnerQuota {
                store: StoreKind::Tasks,
                quota: PER_OWNER
            }),
            "{backend}"
        );
        let approve = TaskChange::new(TaskStatus::Working, TaskStatus::Approved)
            .decision(TaskDecision::Approved { by: "ops".into() });
        let decided = replicas[1].transition(&held[0], approve).await.unwrap();
        assert!(decided.is_applied(), "{backend}");
        replicas[0]
            .create_within(task("alice"), PER_OWNER)
            .await
            .unwrap_or_else(|e| panic!("{backend}: {e}"));
    }

    #[tokio::test]
    async fn a_decision_frees_the_owners_slot_on_both_backends() {
        let memory: Arc<dyn TaskStore> = Arc::new(MemoryTaskStore::default());
        a_decision_frees_the_owners_slot([memory.clone(), memory], "memory").await;
        #[cfg(feature = "redis")]
        if let Some(redis) = crate::common::redis_server::RedisServer::start_or_skip() {
            let replicas = [redis.store("decided").await, redis.store("decided").await];
            a_decision_frees_the_owners_slot(replicas, "redis").await;
        }
    }

    /// The task store's list limit, on both backends: at most [`MAX_LIST`] records, and at
    /// most the query's limit.
    async fn list_limit(store: Arc<dyn TaskStore>, backend: &str) {
        for n in 0..=MAX_LIST {
            store
                .create(task(&format!("owner-{}", n % 7)))
                .await
                .unwrap();
        }
        let all = store
            .list(TaskQuery::new().limit(MAX_LIST * 2))
            .await
            .unwrap();
        assert_eq!(all.len(), MAX_LIST, "{backend}");
        let some = store.list(TaskQuery::new().limit(5)).await.unwrap();
        assert_eq!(some.len(), 5, "{backend}");
    }

    #[tokio::test]
    async fn the_task_list_limit_holds_on_both_backends() {
        list_limit(Arc::new(MemoryTaskStore::default()), "memory").await;
        #[cfg(feature = "redis")]
        if let Some(redis) = crate::common::redis_server::RedisServer::start_or_skip() {
            list_limit(redis.store("list").await, "redis").await;
        }
    }
}
