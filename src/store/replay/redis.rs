//! [`RedisReplayStore`]: used states shared by every replica, in Redis, with the memory
//! store's bounds counted in its one script.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use redis::Script;

use super::{FirstUse, MemoryReplayStore, ReplayFuture, ReplayStore, StateUse};
use crate::store::redis::keys::{check_namespace, key_digest, slot_prefix};
use crate::store::{RedisConnection, StoreError, StoreKind};

/// KEYS: the state's key, the store's memory key, the index of live states, the owner's index
/// of live states. ARGV: owner, issued at (ms), expires at (ms), capacity, per-owner quota,
/// nonce.
/// Returns 1 for a first use (recorded), 0 for a state used before, -1 for a state issued
/// before the store's memory began or already expired, -2 when the store holds `capacity`
/// live states, -3 when the owner holds `per_owner`.
///
/// Both indexes are sorted sets of nonces scored by their state's expiry, pruned of expired
/// members here, so their sizes are the live counts: no scan, and each member is removed once.
/// Each index expires with its last state, so nothing outlives the states it counts.
const FIRST_USE: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local since = tonumber(redis.call('GET', KEYS[2]))
if not since then
  since = now
  redis.call('SET', KEYS[2], since)
end
if tonumber(ARGV[2]) < since then return -1 end
if tonumber(ARGV[3]) <= now then return -1 end
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
if redis.call('ZCARD', KEYS[3]) >= tonumber(ARGV[4]) then return -2 end
if redis.call('ZCARD', KEYS[4]) >= tonumber(ARGV[5]) then return -3 end
redis.call('SET', KEYS[1], ARGV[1], 'PXAT', ARGV[3])
for i = 3, 4 do
  redis.call('ZADD', KEYS[i], ARGV[3], ARGV[6])
  local last = redis.call('ZRANGE', KEYS[i], -1, -1, 'WITHSCORES')
  redis.call('PEXPIREAT', KEYS[i], last[2])
end
return 1
";

/// Used states in Redis: one key per state, `{namespace}:used:<nonce>` (the braces are part
/// of the key: the namespace is its Redis Cluster hash tag), written with `PXAT <state expiry>` by the one script that checks it is absent, so that exactly one
/// replica's first use succeeds and the key lives exactly as long as the state could be
/// presented. One round trip per first use of a state (one Lua script), and one more when
/// replicas acknowledge it (see [`RedisConnection`]); none for requests that carry no state.
///
/// Bounded as [`MemoryReplayStore`](super::MemoryReplayStore) is, and across every replica
/// that shares the namespace: at most `capacity` live used states in all
/// ([`StoreError::Full`]), at most `per_owner` of one owner ([`StoreError::OwnerQuota`]);
/// at either bound a new state is refused, never a live one forgotten. The same script keeps
/// the counts: a sorted set of the store's live nonces (`{namespace}:used-index`) and one per
/// owner (`{namespace}:used-by:<digest of the owner>`), each scored by expiry, pruned of
/// expired members before it is counted and expiring with its last state.
///
/// A Redis that restarts without persistence forgets every used state. So the store keeps a
/// `{namespace}:replay-memory` key, the time its memory began, set when the store is first
/// made and again by the first use after a loss; a state issued before that time is refused
/// as [`FirstUse::Unknowable`]: after a data loss, calls in the middle of a confirmation start
/// again, and none runs twice. The issue time comes from the replica's clock and the memory
/// time from Redis's: keep them in step (NTP); a replica running ahead by *s* leaves states
/// issued in the last *s* before a loss open to one more use. Persistence (`appendonly yes`)
/// avoids the loss altogether.
///
/// Redis must not evict these keys before they expire: run it with
/// `maxmemory-policy noeviction` (or a `volatile-*` policy and enough memory). An evicting
/// Redis could forget a used state, and the state would then be accepted again. A call made
/// while Redis is unreachable fails with [`StoreError::Unavailable`] within seconds, and the
/// state is refused.
#[derive(Clone)]
pub struct RedisReplayStore {
    connection: RedisConnection,
    /// `{namespace}`: every key starts with it, so all share one Redis Cluster hash slot.
    prefix: Arc<str>,
    script: Arc<Script>,
    capacity: usize,
    per_owner: usize,
}

impl std::fmt::Debug for RedisReplayStore {
    // The URL may hold a password: it is not kept, and not shown.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisReplayStore")
            .field("prefix", &self.prefix)
            .field("capacity", &self.capacity)
            .field("per_owner", &self.per_owner)
            .finish_non_exhaustive()
    }
}

impl RedisReplayStore {
    /// Connects to the Redis server at `url` and keeps used states under `namespace` (1 to 64
    /// characters of `A-Z a-z 0-9 - _ .`; every replica uses the same one), with the default
    /// bounds of the in-memory store ([`MemoryReplayStore::DEFAULT_CAPACITY`] live states,
    /// [`MemoryReplayStore::DEFAULT_PER_OWNER`] per owner; change them with
    /// [`bounds`](Self::bounds)). Fails if the URL is unusable or the server does not answer.
    ///
    /// [`MemoryReplayStore::DEFAULT_CAPACITY`]: super::MemoryReplayStore::DEFAULT_CAPACITY
    /// [`MemoryReplayStore::DEFAULT_PER_OWNER`]: super::MemoryReplayStore::DEFAULT_PER_OWNER
    pub async fn new(url: &str, namespace: &str) -> Result<Self, StoreError> {
        check_namespace(namespace, StoreKind::Replay)?;
        let connection = RedisConnection::open(url)
            .await
            .map_err(|e| StoreError::unavailable(StoreKind::Replay, e))?;
        Self::with_connection(connection, namespace).await
    }

    /// [`new`](Self::new) on a connection the application made
    /// ([`RedisConnection::from_client`], [`RedisConnection::from_connection_manager`]),
    /// perhaps shared with the other Redis stores. Fails for an unusable namespace, or if the
    /// server does not answer (the store notes when its memory began).
    pub async fn with_connection(
        connection: RedisConnection,
        namespace: &str,
    ) -> Result<Self, StoreError> {
        check_namespace(namespace, StoreKind::Replay)?;
        let store = Self {
            connection,
            prefix: slot_prefix(namespace),
            script: Arc::new(Script::new(FIRST_USE)),
            capacity: MemoryReplayStore::DEFAULT_CAPACITY,
            per_owner: MemoryReplayStore::DEFAULT_PER_OWNER,
        };
        // The memory begins now if it has not begun before (a fresh Redis, a first replica).
        let mut connection = store.connection.clone();
        let _: () = redis::cmd("SET")
            .arg(store.memory_key())
            .arg(crate::clock::now_ms())
            .arg("NX")
            .query_async(&mut connection)
            .await
            .map_err(unavailable)?;
        Ok(store)
    }

    /// At most `capacity` live used states in all, `per_owner` of one owner, counted across
    /// every replica on the namespace. Give every replica the same bounds.
    #[must_use]
    pub fn bounds(mut self, capacity: usize, per_owner: usize) -> Self {
        self.capacity = capacity;
        self.per_owner = per_owner;
        self
    }

    fn memory_key(&self) -> String {
        format!("{}:replay-memory", self.prefix)
    }
}

fn unavailable(e: redis::RedisError) -> StoreError {
    StoreError::unavailable(StoreKind::Replay, format_args!("redis: {e}"))
}

impl ReplayStore for RedisReplayStore {
    fn backend(&self) -> &'static str {
        "redis"
    }

    fn reachable(&self) -> crate::store::StoreFuture<'_, ()> {
        Box::pin(self.connection.ping(StoreKind::Replay))
    }

    fn first_use<'a>(&'a self, state: StateUse<'a>) -> ReplayFuture<'a> {
        Box::pin(async move {
            let millis = |at: SystemTime| {
                at.duration_since(UNIX_EPOCH)
                    .ok()
                    .and_then(|d| u64::try_from(d.as_millis()).ok())
            };
            let (Some(issued), Some(until)) = (millis(state.issued_at), millis(state.expires_at))
            else {
                return Ok(FirstUse::Unknowable);
            };
            let mut connection = self.connection.clone();
            let used = format!("{}:used:{}", self.prefix, state.nonce);
            let answer: i64 = self
                .script
                .key(&used)
                .key(self.memory_key())
                .key(format!("{}:used-index", self.prefix))
                .key(format!(
                    "{}:used-by:{}",
                    self.prefix,
                    key_digest(state.owner)
                ))
                .arg(state.owner)
                .arg(issued)
                .arg(until)
                .arg(self.capacity)
                .arg(self.per_owner)
                .arg(state.nonce)
                .invoke_async(&mut connection)
                .await
                .map_err(unavailable)?;
            Ok(match answer {
                1 => {
                    // A use a failover forgot would let the state be used again.
                    self.connection
                        .replicated(&used, None, StoreKind::Replay)
                        .await?;
                    FirstUse::Yes
                }
                0 => FirstUse::AlreadyUsed,
                -1 => FirstUse::Unknowable,
                -2 => {
                    return Err(StoreError::Full {
                        store: StoreKind::Replay,
                        capacity: self.capacity,
                    });
                }
                -3 => {
                    return Err(StoreError::OwnerQuota {
                        store: StoreKind::Replay,
                        quota: self.per_owner,
                    });
                }
                other => {
                    return Err(StoreError::unavailable(
                        StoreKind::Replay,
                        format_args!("redis: unexpected answer {other} from the replay script"),
                    ));
                }
            })
        })
    }
}
