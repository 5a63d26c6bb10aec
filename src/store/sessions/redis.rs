//! [`RedisSessionStore`]: legacy session bindings shared by every replica, in Redis, with the
//! memory store's bounds counted in its scripts.

use std::sync::Arc;
use std::time::Duration;

use redis::Script;

use super::{SessionFuture, SessionRecord, SessionStore};
use crate::auth::Owner;
use crate::store::redis::keys::{check_namespace, key_digest, slot_prefix};
use crate::store::{RedisConnection, StoreError, StoreKind};

/// KEYS: session hash, owner's index, global index. ARGV: owner JSON, record JSON, idle (ms),
/// sessions per owner, capacity, session id, owner index key. Returns 1 once bound, -1 when
/// the store is full, -2 when the owner is at its quota, -3 when another owner holds the id.
const BIND: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expiry = now + tonumber(ARGV[3])
local held = redis.call('HGET', KEYS[1], 'owner')
if held and held ~= ARGV[1] then return -3 end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
if not held then
  if redis.call('ZCARD', KEYS[3]) >= tonumber(ARGV[5]) then return -1 end
  if redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[4]) then return -2 end
end
redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'record', ARGV[2], 'index', ARGV[7])
redis.call('PEXPIREAT', KEYS[1], expiry)
redis.call('ZADD', KEYS[2], expiry, ARGV[6])
redis.call('PEXPIREAT', KEYS[2], expiry)
redis.call('ZADD', KEYS[3], expiry, ARGV[6])
redis.call('PEXPIREAT', KEYS[3], expiry)
return 1
";

/// KEYS: session hash, global index. ARGV: idle (ms), session id. Returns the record JSON
/// and keeps the binding alive, or nil.
const GET: &str = r"
local found = redis.call('HMGET', KEYS[1], 'record', 'index')
if not found[1] then return false end
local t = redis.call('TIME')
local expiry = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[1])
redis.call('PEXPIREAT', KEYS[1], expiry)
redis.call('ZADD', found[2], 'XX', expiry, ARGV[2])
redis.call('PEXPIREAT', found[2], expiry)
redis.call('ZADD', KEYS[2], 'XX', expiry, ARGV[2])
redis.call('PEXPIREAT', KEYS[2], expiry)
return found[1]
";

/// KEYS: session hash, global index. ARGV: owner JSON, session id. Removes the binding if the
/// owner holds it.
const UNBIND: &str = r"
local found = redis.call('HMGET', KEYS[1], 'owner', 'index')
if found[1] ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
redis.call('ZREM', found[2], ARGV[2])
redis.call('ZREM', KEYS[2], ARGV[2])
return 1
";

/// Legacy session bindings in Redis, so that any replica knows who owns a session: one hash
/// per session, `{namespace}:session:<id>` (owner and record; the braces are part of the
/// key: the namespace is its Redis Cluster hash tag), expiring after `idle` without a request, and two sorted sets of live sessions (one per owner, one for the store) that
/// bound it, across every replica on the namespace: at most `capacity` sessions, `per_owner`
/// of one owner. Each set is scored by expiry, pruned before it is counted, and expires with
/// its last session, so nothing outlives the bindings. Binding, looking up (which
/// keeps the binding alive) and unbinding are each one Lua script, one round trip. Full or
/// over quota, a new session is refused; nothing is evicted.
///
/// rmcp keeps a legacy session's state in the process that opened it, so a load balancer must
/// still route a session's requests to that replica; the shared binding makes sure no replica
/// lets another principal in. Redis must not evict keys (`maxmemory-policy noeviction`).
#[derive(Clone)]
pub struct RedisSessionStore {
    connection: RedisConnection,
    /// `{namespace}`: every key starts with it, so all share one Redis Cluster hash slot.
    prefix: Arc<str>,
    capacity: usize,
    per_owner: usize,
    idle: Duration,
    bind: Arc<Script>,
    get: Arc<Script>,
    unbind: Arc<Script>,
}

impl std::fmt::Debug for RedisSessionStore {
    // The URL may hold a password: it is not kept, and not shown.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisSessionStore")
            .field("prefix", &self.prefix)
            .field("capacity", &self.capacity)
            .field("per_owner", &self.per_owner)
            .finish_non_exhaustive()
    }
}

fn unavailable(e: impl std::fmt::Display) -> StoreError {
    StoreError::unavailable(StoreKind::Sessions, format_args!("redis: {e}"))
}

impl RedisSessionStore {
    /// Connects to the Redis server at `url` and keeps bindings under `namespace` (1 to 64
    /// characters of `A-Z a-z 0-9 - _ .`; every replica uses the same one): at most
    /// `capacity` sessions, `per_owner` per owner, each forgotten after `idle` without a
    /// request.
    pub async fn new(
        url: &str,
        namespace: &str,
        capacity: usize,
        per_owner: usize,
        idle: Duration,
    ) -> Result<Self, StoreError> {
        check_namespace(namespace, StoreKind::Sessions)?;
        let connection = RedisConnection::open(url)
            .await
            .map_err(|e| StoreError::unavailable(StoreKind::Sessions, e))?;
        Self::with_connection(connection, namespace, capacity, per_owner, idle).await
    }

    /// [`new`](Self::new) on a connection the application made
    /// ([`RedisConnection::from_client`], [`RedisConnection::from_connection_manager`]),
    /// perhaps shared with the other Redis stores. Fails only for an unusable namespace.
    pub async fn with_connection(
        connection: RedisConnection,
        namespace: &str,
        capacity: usize,
        per_owner: usize,
        idle: Duration,
    ) -> Result<Self, StoreError> {
        check_namespace(namespace, StoreKind::Sessions)?;
        Ok(Self {
            connection,
            prefix: slot_prefix(namespace),
            capacity,
            per_owner,
            idle,
            bind: Arc::new(Script::new(BIND)),
            get: Arc::new(Script::new(GET)),
            unbind: Arc::new(Script::new(UNBIND)),
        })
    }

    fn session_key(&self, id: &str) -> String {
        format!("{}:session:{id}", self.prefix)
    }

    fn index_key(&self) -> String {
        format!("{}:sessions", self.prefix)
    }

    /// The owner's index: named by a digest of the owner, so no identity is spelled in a key.
    fn owner_key(&self, owner_json: &str) -> String {
        format!("{}:owner-sessions:{}", self.prefix, key_digest(owner_json))
    }

    fn idle_ms(&self) -> u64 {
        u64::try_from(self.idle.as_millis()).unwrap_or(u64::MAX)
    }
}

fn owner_json(owner: &Owner) -> Result<String, StoreError> {
    serde_json::to_string(owner).map_err(|e| StoreError::unavailable(StoreKind::Sessions, e))
}

impl SessionStore for RedisSessionStore {
    fn backend(&self) -> &'static str {
        "redis"
    }

    fn reachable(&self) -> crate::store::StoreFuture<'_, ()> {
        Box::pin(self.connection.ping(StoreKind::Sessions))
    }

    fn bind<'a>(&'a self, session_id: &'a str, record: SessionRecord) -> SessionFuture<'a, ()> {
        Box::pin(async move {
            let owner = owner_json(&record.owner)?;
            let record = serde_json::to_string(&record).map_err(|e| unavailable(e.to_string()))?;
            let owner_key = self.owner_key(&owner);
            let mut connection = self.connection.clone();
            let answer: i64 = self
                .bind
                .key(self.session_key(session_id))
                .key(&owner_key)
                .key(self.index_key())
                .arg(&owner)
                .arg(record)
                .arg(self.idle_ms())
                .arg(self.per_owner)
                .arg(self.capacity)
                .arg(session_id)
                .arg(&owner_key)
                .invoke_async(&mut connection)
                .await
                .map_err(unavailable)?;
            match answer {
                1 => Ok(()),
                -1 => Err(StoreError::Full {
                    store: StoreKind::Sessions,
                    capacity: self.capacity,
                }),
                -2 => Err(StoreError::OwnerQuota {
                    store: StoreKind::Sessions,
                    quota: self.per_owner,
                }),
                -3 => Err(StoreError::Taken),
                other => Err(unavailable(format!("unexpected answer {other}"))),
            }
        })
    }

    fn get<'a>(&'a self, session_id: &'a str) -> SessionFuture<'a, Option<SessionRecord>> {
        Box::pin(async move {
            let mut connection = self.connection.clone();
            let found: Option<String> = self
                .get
                .key(self.session_key(session_id))
                .key(self.index_key())
                .arg(self.idle_ms())
                .arg(session_id)
                .invoke_async(&mut connection)
                .await
                .map_err(unavailable)?;
            found
                .map(|json| {
                    // A record this build cannot read is a failure, never "no session".
                    serde_json::from_str(&json)
                        .map_err(|e| unavailable(format!("unreadable session record: {e}")))
                })
                .transpose()
        })
    }

    fn unbind<'a>(&'a self, session_id: &'a str, owner: &'a Owner) -> SessionFuture<'a, ()> {
        Box::pin(async move {
            let owner = owner_json(owner)?;
            let mut connection = self.connection.clone();
            let _: i64 = self
                .unbind
                .key(self.session_key(session_id))
                .key(self.index_key())
                .arg(owner)
                .arg(session_id)
                .invoke_async(&mut connection)
                .await
                .map_err(unavailable)?;
            Ok(())
        })
    }
}
