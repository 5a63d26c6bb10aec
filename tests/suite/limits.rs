//! Rate-limit counters on every backend: shared between replicas through Redis, one round trip
//! per group of a call's counters, counted on all of a group or on none.

use std::time::Duration;

use mcp_gate::limit::RateLimit;
use mcp_gate::store::limits::{LimitStore, MemoryLimitStore, Taken, Tally};

fn tally(group: &str, name: &str, rate: &str) -> Tally {
    Tally::new(group, name, rate.parse::<RateLimit>().expect("a rate"))
}

/// What every backend must do with one caller at 1 a minute and another beside it.
async fn one_a_minute(stores: [&dyn LimitStore; 2]) {
    let alice = [tally("alice", "all", "1/minute")];
    let bob = [tally("bob", "all", "1/minute")];
    assert_eq!(stores[0].take(&alice).await, Ok(Taken::Admitted));
    // The second call, on the other replica: refused, to come back in about a minute.
    match stores[1].take(&alice).await {
        Ok(Taken::Limited { tally, retry_after }) => {
            assert_eq!(tally, 0);
            assert!(
                retry_after > Duration::from_secs(59) && retry_after <= Duration::from_secs(60),
                "{retry_after:?}"
            );
        }
        other => panic!("the second call in a minute is limited, not {other:?}"),
    }
    // Bob is not touched by Alice's counter.
    assert_eq!(stores[1].take(&bob).await, Ok(Taken::Admitted));
}

#[tokio::test]
async fn memory_counters_hold_one_caller_to_its_rate() {
    let store = MemoryLimitStore::default();
    one_a_minute([&store, &store]).await;
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn redis_counters_are_shared_by_replicas_in_one_round_trip() {
    use mcp_gate::store::limits::RedisLimitStore;
    let Some(redis) = crate::common::redis_server::RedisServer::start_or_skip() else {
        return;
    };
    let url = redis.url();
    let replicas = [
        RedisLimitStore::new(&url, "limits").await.expect("a store"),
        RedisLimitStore::new(&url, "limits").await.expect("a store"),
    ];
    let mut raw = redis.raw().await;
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(&mut raw)
        .await
        .expect("reset");
    one_a_minute([&replicas[0], &replicas[1]]).await;
    // Three calls, one group each: three scripts run. The first replica's first call finds
    // the script not loaded (`NOSCRIPT`, a failed call) and loads it once; after that, each
    // call is one round trip.
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut raw)
        .await
        .expect("stats");
    let field = |command: &str, name: &str| {
        stats
            .lines()
            .find_map(|line| line.strip_prefix(&format!("cmdstat_{command}:")))
            .and_then(|rest| {
                rest.split(',')
                    .find_map(|pair| pair.strip_prefix(&format!("{name}=")))
            })
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let ran = field("evalsha", "calls") - field("evalsha", "failed_calls");
    assert_eq!(ran, 3, "{stats}");
    assert_eq!(field("evalsha", "failed_calls"), 1, "{stats}");
    assert_eq!(field("eval", "calls"), 0, "{stats}");

    // A call on two counters of one group: counted on both or neither.
    let both = [
        tally("carol", "all", "5/s burst 5"),
        tally("carol", "echo", "1/minute"),
    ];
    assert_eq!(replicas[0].take(&both).await, Ok(Taken::Admitted));
    assert!(matches!(
        replicas[1].take(&both).await,
        Ok(Taken::Limited { tally: 1, .. })
    ));
    let all = [tally("carol", "all", "5/s burst 5")];
    for _ in 0..4 {
        assert_eq!(replicas[0].take(&all).await, Ok(Taken::Admitted));
    }
    assert!(matches!(
        replicas[1].take(&all).await,
        Ok(Taken::Limited { .. })
    ));
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn a_redis_that_is_gone_refuses_the_call() {
    use mcp_gate::store::limits::RedisLimitStore;
    use mcp_gate::store::{StoreError, StoreKind};
    let Some(mut redis) = crate::common::redis_server::RedisServer::start_or_skip() else {
        return;
    };
    let store = RedisLimitStore::new(&redis.url(), "gone")
        .await
        .expect("a store");
    redis.stop();
    let taken = store.take(&[tally("dave", "all", "10/s")]).await;
    assert!(
        matches!(
            taken,
            Err(StoreError::Unavailable {
                store: StoreKind::Limits,
                ..
            })
        ),
        "{taken:?}"
    );
}
