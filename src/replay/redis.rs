//! [`RedisReplayStore`]: used states shared by every replica.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use redis::Script;

use super::{FirstUse, ReplayError, ReplayFuture, ReplayStore, StateUse};
use crate::redis_client::{ConnectError, RedisConnection, connect, namespace_ok};

/// KEYS: the state's key, the store's memory key. ARGV: owner, issued at (ms), expires at
/// (ms). Returns 1 for a first use (recorded), 0 for a state used before,
/// -1 for a state issued before the store's memory began, or already expired.
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
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PXAT', ARGV[3]) then return 1 end
return 0
";

/// Used states in Redis: one key per state, `{namespace}:used:{nonce}`, written with
/// `SET … NX PXAT <state expiry>` so that exactly one replica's first use succeeds and the key
/// lives exactly as long as the state could be presented. One round trip per first use of a
/// state (one Lua script); none for requests that carry no state.
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
/// while Redis is unreachable fails with [`ReplayError::Unavailable`] within seconds, and the
/// state is refused.
#[derive(Clone)]
pub struct RedisReplayStore {
    connection: RedisConnection,
    namespace: Arc<str>,
    script: Arc<Script>,
}

impl std::fmt::Debug for RedisReplayStore {
    // The URL may hold a password: it is not kept, and not shown.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisReplayStore")
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

impl RedisReplayStore {
    /// Connects to the Redis server at `url` and keeps used states under `namespace` (1 to 64
    /// characters of `A-Z a-z 0-9 - _ .`; every replica uses the same one). Fails if the URL is
    /// unusable or the server does not answer.
    pub async fn new(url: &str, namespace: &str) -> Result<Self, ReplayError> {
        if !namespace_ok(namespace) {
            return Err(ReplayError::Unavailable(
                "the namespace must be 1 to 64 characters of A-Z, a-z, 0-9, '-', '_' or '.'".into(),
            ));
        }
        let connection = connect(url).await.map_err(|e| match e {
            ConnectError::BadUrl => ReplayError::Unavailable("the Redis URL is not valid".into()),
            ConnectError::Cluster => {
                ReplayError::Unavailable("Redis Cluster is not supported: use one server".into())
            }
            ConnectError::Unreachable(e) => ReplayError::Unavailable(format!("redis: {e}")),
        })?;
        let store = Self {
            connection,
            namespace: namespace.into(),
            script: Arc::new(Script::new(FIRST_USE)),
        };
        // The memory begins now if it has not begun before (a fresh Redis, a first replica).
        let mut connection = store.connection.clone();
        let _: () = redis::cmd("SET")
            .arg(store.memory_key())
            .arg(crate::tasks::now_ms())
            .arg("NX")
            .query_async(&mut connection)
            .await
            .map_err(|e| ReplayError::Unavailable(format!("redis: {e}")))?;
        Ok(store)
    }

    fn memory_key(&self) -> String {
        format!("{}:replay-memory", self.namespace)
    }
}

impl ReplayStore for RedisReplayStore {
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
            let answer: i64 = self
                .script
                .key(format!("{}:used:{}", self.namespace, state.nonce))
                .key(self.memory_key())
                .arg(state.owner)
                .arg(issued)
                .arg(until)
                .invoke_async(&mut connection)
                .await
                .map_err(|e| ReplayError::Unavailable(format!("redis: {e}")))?;
            Ok(match answer {
                1 => FirstUse::Yes,
                0 => FirstUse::AlreadyUsed,
                _ => FirstUse::Unknowable,
            })
        })
    }
}
