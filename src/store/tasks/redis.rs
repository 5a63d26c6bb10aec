//! [`RedisTaskStore`]: tasks in Redis, shared by every replica and surviving restarts of the
//! gateway.

use std::sync::Arc;

use redis::{RedisError, Script, Value};

use super::{
    MemoryTaskStore, Plan, TaskChange, TaskFuture, TaskId, TaskOwner, TaskQuery, TaskRecord,
    TaskStatus, TaskStore, Transition, check_new, plan,
};
use crate::clock::now_ms;
use crate::store::redis::keys::{check_namespace, key_digest, slot_prefix};
use crate::store::{RedisConnectError, RedisConnection, StoreError, StoreKind};

/// Index entries read per round trip by `list`.
const LIST_PAGE: usize = 100;
/// Index entries one `list` looks at, at most.
const LIST_SCAN: usize = 10_000;
/// Rounds of an optimistic transition before giving up. The lifecycle only moves forward, so a
/// retry happens only if the record changed without its status changing, which this crate
/// never does; the bound is there for a record changed behind the store's back.
const TRANSITION_ROUNDS: usize = 8;

/// Shared Lua prelude: `now` is the later of the server's clock and the caller's (ARGV[1]),
/// so neither a slow server nor a slow replica can keep a task alive past its deadline.
macro_rules! lua_now {
    () => {
        r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local caller_now = tonumber(ARGV[1])
if caller_now > now then now = caller_now end
"
    };
}

/// Expired index entries one create prunes, at most: a create's work stays bounded however
/// many tasks expired since the last one, and the rest are pruned by the creates after it
/// (until then they count against the capacity: a refusal, never an excess).
const PRUNE_BATCH: usize = 1000;

/// Shared Lua: `forget(index, sizes, bytes, ids)` takes `ids` out of the index and their
/// sizes out of the byte count; `prune(index, sizes, bytes, now, batch)` forgets at most
/// `batch` ids whose deadline has passed.
macro_rules! lua_forget {
    () => {
        r"
local function forget(index, sizes, bytes, ids)
  if #ids == 0 then return end
  local freed = 0
  for _, size in ipairs(redis.call('HMGET', sizes, unpack(ids))) do
    if size then freed = freed + tonumber(size) end
  end
  redis.call('HDEL', sizes, unpack(ids))
  redis.call('ZREM', index, unpack(ids))
  redis.call('DECRBY', bytes, freed)
end
local function prune(index, sizes, bytes, now, batch)
  local past = string.format('%d', now)
  forget(index, sizes, bytes, redis.call('ZRANGEBYSCORE', index, '-inf', past, 'LIMIT', 0, batch))
end
"
    };
}

/// KEYS: record, index, the owner's waiting set, sizes, bytes. ARGV: now, record JSON,
/// deadline (ms), id, the held call's size, capacity, byte budget, the owner's quota (-1:
/// none), prune batch.
/// Returns -1 if already expired, 0 if the id exists, -4 when the owner has `quota` tasks
/// waiting, -2 when the store holds `capacity` tasks, -3 when the call would take it past its
/// byte budget, and 1 once stored and counted.
///
/// The index (every live task) and the owner's waiting set are sorted sets of ids scored by
/// deadline, pruned of expired ids before they are counted; `sizes` maps each indexed id to
/// its held call's size and `bytes` is their sum, both kept in step with the index. The
/// owner's set expires with the owner's last task; the index, `sizes` and `bytes` together
/// with the store's last task.
const CREATE: &str = concat!(
    lua_now!(),
    lua_forget!(),
    r"
local deadline = tonumber(ARGV[3])
if deadline <= now then return -1 end
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', string.format('%d', now))
local quota = tonumber(ARGV[8])
if quota >= 0 and redis.call('ZCARD', KEYS[3]) >= quota then return -4 end
prune(KEYS[2], KEYS[4], KEYS[5], now, tonumber(ARGV[9]))
forget(KEYS[2], KEYS[4], KEYS[5], {ARGV[4]})
if redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[6]) then return -2 end
local bytes = tonumber(redis.call('GET', KEYS[5]) or '0')
if bytes + tonumber(ARGV[5]) > tonumber(ARGV[7]) then return -3 end
redis.call('SET', KEYS[1], ARGV[2], 'PXAT', ARGV[3])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[4])
redis.call('HSET', KEYS[4], ARGV[4], ARGV[5])
redis.call('INCRBY', KEYS[5], ARGV[5])
redis.call('ZADD', KEYS[3], ARGV[3], ARGV[4])
local last = redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', KEYS[3], last[2])
last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
for i = 2, 5 do
  if i ~= 3 then redis.call('PEXPIREAT', KEYS[i], last[2]) end
end
return 1
"
);

/// The index's trim, for `list`. KEYS: index, sizes, bytes, then the record key of each id in
/// ARGV after the first two. ARGV: now, prune batch, ids found missing. Forgets the expired
/// ids (a batch) and each missing id whose record is still absent. Returns 1.
const TRIM: &str = concat!(
    lua_now!(),
    lua_forget!(),
    r"
prune(KEYS[1], KEYS[2], KEYS[3], now, tonumber(ARGV[2]))
local missing = {}
for i = 3, #ARGV do
  if redis.call('EXISTS', KEYS[i + 1]) == 0 then table.insert(missing, ARGV[i]) end
end
forget(KEYS[1], KEYS[2], KEYS[3], missing)
return 1
"
);

/// The compare-and-set. KEYS: record, the owner's waiting set. ARGV: now, the record as read
/// (its status is the expected one), the record to write, deadline (ms), time required to
/// remain (ms), id, `1` if the task stops waiting (leaves `working`).
/// Returns {0} if missing or expired, {1, current} if the record is no longer the one read,
/// {3} if too little time remains, {2} once written (keeping the key's expiry) and, if it
/// stopped waiting, taken out of its owner's waiting set.
const TRANSITION: &str = concat!(
    lua_now!(),
    r"
local current = redis.call('GET', KEYS[1])
if not current then return {0} end
local deadline = tonumber(ARGV[4])
if deadline <= now then return {0} end
if current ~= ARGV[2] then return {1, current} end
if deadline - now < tonumber(ARGV[5]) then return {3} end
redis.call('SET', KEYS[1], ARGV[3], 'KEEPTTL')
if ARGV[7] == '1' then redis.call('ZREM', KEYS[2], ARGV[6]) end
return {2}
"
);

/// Tasks in Redis: one string key per task, `{namespace}:task:<id>` (the braces are part of
/// the key: the namespace is its Redis Cluster hash tag, so that every key of the store
/// shares one slot), holding the JSON record and expiring (`PXAT`) when the task does; a sorted set `{namespace}:tasks` of ids scored
/// by their deadline, for [`list`](TaskStore::list) and the bounds. Never `KEYS` or `SCAN`
/// over the keyspace.
///
/// Bounded as [`MemoryTaskStore`] is, across every replica on the
/// namespace, in the create script: at most [`capacity`](Self::capacity) live tasks
/// ([`StoreError::Full`]), at most [`byte_budget`](Self::byte_budget) bytes of held calls
/// ([`StoreError::OverBudget`]), and through [`create_within`](TaskStore::create_within) at
/// most `quota` tasks of one owner waiting ([`StoreError::OwnerQuota`]). The counts live beside
/// the records: the index, `{namespace}:task-sizes` (each indexed task's call size) with
/// `{namespace}:task-bytes` (their sum), and one sorted set per owner of its waiting ids,
/// `{namespace}:task-owner:<digest of the owner>`, scored by deadline. Each expires with the
/// last task it counts, so nothing outlives the tasks. The create script prunes expired ids
/// (at most 1,000 at a time) before it counts.
///
/// Creating and transitioning are Lua scripts (`EVALSHA`, loaded on first use), so each is one
/// atomic step on the server. A transition reads the record, computes the new one here (the
/// record's JSON is never rewritten by Lua, so large numbers and empty arrays in tool results
/// survive exactly), and the script writes it only if the stored record is still byte for
/// byte the one read and has not expired; that compare-and-set on the whole value includes
/// the status.
///
/// Connections go through a [`ConnectionManager`](redis::aio::ConnectionManager), which
/// reconnects after a failure and sends a command once more when its connection was gone; a
/// call made while Redis is unreachable fails with [`StoreError::Unavailable`] within a few
/// seconds. `rediss://` URLs connect over TLS with the host's root certificates; give the store
/// an ACL user limited to the namespace's keys..
#[derive(Clone)]
pub struct RedisTaskStore {
    connection: RedisConnection,
    namespace: Arc<str>,
    /// `{namespace}`: every key starts with it, so all share one Redis Cluster hash slot.
    prefix: Arc<str>,
    capacity: usize,
    byte_budget: usize,
    create: Arc<Script>,
    transition: Arc<Script>,
    trim: Arc<Script>,
    /// The record of each task as this process last read or wrote it, so that a transition
    /// of a record it knows is one round trip (the compare-and-set script), not a read and
    /// then the script. A stale entry costs one more round trip, never a wrong transition:
    /// the script compares the whole stored record.
    seen: Arc<quick_cache::sync::Cache<TaskId, Arc<[u8]>>>,
}

/// Task records remembered for one-round-trip transitions.
const SEEN_CAPACITY: usize = 1024;

impl std::fmt::Debug for RedisTaskStore {
    // The URL may hold a password: it is not kept, and not shown.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisTaskStore")
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

fn unavailable(e: RedisError) -> StoreError {
    StoreError::unavailable(StoreKind::Tasks, format_args!("redis: {e}"))
}

impl RedisTaskStore {
    /// Connects to the Redis server at `url` (`redis://[user:password@]host:port/db`, or
    /// `redis+unix:///path`) and keeps this gateway's tasks under `namespace` (1 to 64
    /// characters of `A-Z a-z 0-9 - _ .`). Every replica sharing tasks uses the same server
    /// and namespace. The store holds the default bounds of the memory store
    /// ([`MemoryTaskStore::DEFAULT_CAPACITY`] tasks,
    /// [`MemoryTaskStore::DEFAULT_BYTE_BUDGET`]
    /// bytes of held calls) until [`capacity`](Self::capacity) or
    /// [`byte_budget`](Self::byte_budget) changes them. Fails if the URL is unusable or the
    /// server does not answer.
    pub async fn new(url: &str, namespace: &str) -> Result<Self, StoreError> {
        check_namespace(namespace, StoreKind::Tasks)?;
        let connection = RedisConnection::open(url).await.map_err(|e| match e {
            // The parser's message could quote the URL, and with it a password: not repeated.
            RedisConnectError::BadUrl => StoreError::unusable(StoreKind::Tasks, e.to_string()),
            RedisConnectError::Unreachable(_) => StoreError::unavailable(StoreKind::Tasks, e),
        })?;
        Self::with_connection(connection, namespace).await
    }

    /// [`new`](Self::new) on a connection the application made
    /// ([`RedisConnection::from_client`], [`RedisConnection::from_connection_manager`]),
    /// perhaps shared with the other Redis stores. Fails only for an unusable namespace.
    pub async fn with_connection(
        connection: RedisConnection,
        namespace: &str,
    ) -> Result<Self, StoreError> {
        check_namespace(namespace, StoreKind::Tasks)?;
        Ok(Self {
            connection,
            namespace: namespace.into(),
            prefix: slot_prefix(namespace),
            capacity: MemoryTaskStore::DEFAULT_CAPACITY,
            byte_budget: MemoryTaskStore::DEFAULT_BYTE_BUDGET,
            create: Arc::new(Script::new(CREATE)),
            transition: Arc::new(Script::new(TRANSITION)),
            trim: Arc::new(Script::new(TRIM)),
            seen: Arc::new(quick_cache::sync::Cache::new(SEEN_CAPACITY)),
        })
    }

    /// At most `capacity` live tasks, counted across every replica on the namespace. Give
    /// every replica the same bounds.
    #[must_use]
    pub fn capacity(mut self, capacity: usize) -> Self {
        self.capacity = capacity;
        self
    }

    /// At most `bytes` of held calls (their params as JSON) in live tasks, across every
    /// replica on the namespace.
    #[must_use]
    pub fn byte_budget(mut self, bytes: usize) -> Self {
        self.byte_budget = bytes;
        self
    }

    /// The namespace this store's keys live under.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    fn key(&self, id: &str) -> String {
        format!("{}:task:{id}", self.prefix)
    }

    fn index_key(&self) -> String {
        format!("{}:tasks", self.prefix)
    }

    fn sizes_key(&self) -> String {
        format!("{}:task-sizes", self.prefix)
    }

    fn bytes_key(&self) -> String {
        format!("{}:task-bytes", self.prefix)
    }

    /// The owner's waiting set, named by a digest of the owner.
    fn owner_key(&self, owner: &TaskOwner) -> Result<String, StoreError> {
        let owner = serde_json::to_string(owner).map_err(|e| {
            StoreError::unavailable(
                StoreKind::Tasks,
                format_args!("an owner that cannot be named: {e}"),
            )
        })?;
        Ok(format!("{}:task-owner:{}", self.prefix, key_digest(&owner)))
    }

    async fn read(&self, id: &TaskId) -> Result<Option<Vec<u8>>, StoreError> {
        let read: Option<Vec<u8>> = redis::cmd("GET")
            .arg(self.key(id.as_str()))
            .query_async(&mut self.connection.clone())
            .await
            .map_err(unavailable)?;
        self.remember(id, read.as_deref());
        Ok(read)
    }

    /// Notes what the store holds for `id` now (`None`: nothing).
    fn remember(&self, id: &TaskId, stored: Option<&[u8]>) {
        match stored {
            Some(bytes) => self.seen.insert(id.clone(), Arc::from(bytes)),
            None => {
                self.seen.remove(id);
            }
        }
    }

    /// Stores `record` if its owner has fewer than `quota` tasks waiting (any number when
    /// `None`) and the store's bounds allow it.
    async fn create_record(
        &self,
        record: TaskRecord,
        quota: Option<usize>,
    ) -> Result<(), StoreError> {
        let now = now_ms();
        check_new(&record, now)?;
        let json = record.to_json()?;
        let quota = quota.map_or(-1, |quota| i64::try_from(quota).unwrap_or(i64::MAX));
        let stored: i64 = self
            .create
            .key(self.key(record.id.as_str()))
            .key(self.index_key())
            .key(self.owner_key(&record.owner)?)
            .key(self.sizes_key())
            .key(self.bytes_key())
            .arg(now)
            .arg(&json)
            .arg(record.expires_at())
            .arg(record.id.as_str())
            .arg(record.call.params_len())
            .arg(self.capacity)
            .arg(self.byte_budget)
            .arg(quota)
            .arg(PRUNE_BATCH)
            .invoke_async(&mut self.connection.clone())
            .await
            .map_err(unavailable)?;
        match stored {
            1 => {
                self.remember(&record.id, Some(&json));
                // A task a failover forgot would be a held call lost, or approved again.
                self.connection
                    .replicated(
                        &self.key(record.id.as_str()),
                        Some(json.as_slice()),
                        StoreKind::Tasks,
                    )
                    .await
            }
            0 => Err(StoreError::Duplicate(record.id)),
            -1 => Err(StoreError::Expired(record.id)),
            -2 => Err(StoreError::Full {
                store: StoreKind::Tasks,
                capacity: self.capacity,
            }),
            -3 => Err(StoreError::OverBudget {
                budget: self.byte_budget,
            }),
            -4 => Err(StoreError::OwnerQuota {
                store: StoreKind::Tasks,
                quota: usize::try_from(quota).unwrap_or(usize::MAX),
            }),
            other => Err(StoreError::unavailable(
                StoreKind::Tasks,
                format_args!("redis: unexpected answer {other} from the create script"),
            )),
        }
    }

    async fn get_record(&self, id: &TaskId) -> Result<Option<TaskRecord>, StoreError> {
        let Some(bytes) = self.read(id).await? else {
            return Ok(None);
        };
        let record = TaskRecord::from_json(&bytes, id.as_str())?;
        Ok((!record.is_expired_at(now_ms())).then_some(record))
    }

    async fn transition_record(
        &self,
        id: &TaskId,
        change: TaskChange,
    ) -> Result<Transition, StoreError> {
        change.check_move()?;
        // What this process last saw of the record, if anything: a guess the script checks.
        let (mut read, mut fresh) = match self.seen.get(id) {
            Some(seen) => (Some(seen.to_vec()), false),
            None => (self.read(id).await?, true),
        };
        for _ in 0..TRANSITION_ROUNDS {
            let Some(bytes) = read.take() else {
                return Ok(Transition::Conflict(None));
            };
            let current = TaskRecord::from_json(&bytes, id.as_str())?;
            let now = now_ms();
            let deadline = current.expires_at();
            let next = match plan(Some(current), &change, now)? {
                // A remembered record may be out of date: decide again on the stored one.
                Plan::Conflict(_) if !fresh => {
                    (read, fresh) = (self.read(id).await?, true);
                    continue;
                }
                Plan::Conflict(current) => return Ok(Transition::Conflict(current)),
                Plan::Write(next) => next,
            };
            let next_json = next.to_json()?;
            let stops_waiting = next.status != TaskStatus::Working;
            let answer: Value = self
                .transition
                .key(self.key(id.as_str()))
                .key(self.owner_key(&next.owner)?)
                .arg(now)
                .arg(&bytes)
                .arg(&next_json)
                .arg(deadline)
                .arg(change.required_remaining_ms())
                .arg(id.as_str())
                .arg(if stops_waiting { "1" } else { "0" })
                .invoke_async(&mut self.connection.clone())
                .await
                .map_err(unavailable)?;
            match script_answer(answer) {
                Some((2, _)) => {
                    self.remember(id, Some(&next_json));
                    // A claim a failover forgot would let the call run a second time.
                    self.connection
                        .replicated(
                            &self.key(id.as_str()),
                            Some(next_json.as_slice()),
                            StoreKind::Tasks,
                        )
                        .await?;
                    return Ok(Transition::Applied(next));
                }
                Some((0, _)) => {
                    self.remember(id, None);
                    return Ok(Transition::Conflict(None));
                }
                Some((3, _)) => return Err(StoreError::Expired(id.clone())),
                // Changed since it was read: decide again on what is stored now.
                Some((1, Some(stored))) => {
                    self.remember(id, Some(&stored));
                    (read, fresh) = (Some(stored), true);
                }
                _ => {
                    return Err(StoreError::unavailable(
                        StoreKind::Tasks,
                        "redis: unexpected answer from the transition script",
                    ));
                }
            }
        }
        Err(StoreError::unavailable(
            StoreKind::Tasks,
            format_args!("redis: task {id} kept changing during a transition"),
        ))
    }

    async fn list_records(&self, query: TaskQuery<'_>) -> Result<Vec<TaskRecord>, StoreError> {
        let limit = query.most();
        let mut found = Vec::new();
        if limit == 0 {
            return Ok(found);
        }
        let mut connection = self.connection.clone();
        let index = self.index_key();
        let now = now_ms();
        // Expired ids are skipped here, and trimmed after by a script that keeps the byte
        // count in step with the index.
        let mut gone: Vec<String> = Vec::new();
        let mut start = 0;
        'pages: while start < LIST_SCAN {
            let ids: Vec<String> = redis::cmd("ZRANGE")
                .arg(&index)
                .arg(format!("({now}"))
                .arg("+inf")
                .arg("BYSCORE")
                .arg("LIMIT")
                .arg(start)
                .arg(LIST_PAGE)
                .query_async(&mut connection)
                .await
                .map_err(unavailable)?;
            if ids.is_empty() {
                break;
            }
            start += ids.len();
            let keys: Vec<String> = ids.iter().map(|id| self.key(id)).collect();
            let values: Vec<Option<Vec<u8>>> = redis::cmd("MGET")
                .arg(&keys)
                .query_async(&mut connection)
                .await
                .map_err(unavailable)?;
            for (id, value) in ids.iter().zip(values) {
                let Some(bytes) = value else {
                    gone.push(id.clone());
                    continue;
                };
                let record = match TaskRecord::from_json(&bytes, id) {
                    Ok(record) => record,
                    Err(error) => {
                        // One bad record must not hide every other task from approvers.
                        tracing::warn!(target: "mcp_gate::tasks", %error, "skipping a task record");
                        continue;
                    }
                };
                if record.is_expired_at(now) || !query.matches(&record) {
                    continue;
                }
                found.push(record);
                if found.len() == limit {
                    break 'pages;
                }
            }
            if ids.len() < LIST_PAGE {
                break;
            }
        }
        let mut trim = self.trim.prepare_invoke();
        trim.key(&index)
            .key(self.sizes_key())
            .key(self.bytes_key())
            .arg(now)
            .arg(PRUNE_BATCH);
        for id in &gone {
            trim.key(self.key(id)).arg(id);
        }
        let _: i64 = trim
            .invoke_async(&mut connection)
            .await
            .map_err(unavailable)?;
        Ok(found)
    }
}

/// The transition script's `{code, record?}`.
fn script_answer(answer: Value) -> Option<(i64, Option<Vec<u8>>)> {
    let Value::Array(items) = answer else {
        return None;
    };
    let mut items = items.into_iter();
    let Some(Value::Int(code)) = items.next() else {
        return None;
    };
    match items.next() {
        None => Some((code, None)),
        Some(Value::BulkString(bytes)) => Some((code, Some(bytes))),
        Some(_) => None,
    }
}

impl TaskStore for RedisTaskStore {
    fn backend(&self) -> &'static str {
        "redis"
    }

    fn reachable(&self) -> crate::store::StoreFuture<'_, ()> {
        Box::pin(self.connection.ping(StoreKind::Tasks))
    }

    fn create(&self, record: TaskRecord) -> TaskFuture<'_, ()> {
        Box::pin(self.create_record(record, None))
    }

    fn create_within(&self, record: TaskRecord, quota: usize) -> TaskFuture<'_, ()> {
        Box::pin(self.create_record(record, Some(quota)))
    }

    fn get<'a>(&'a self, id: &'a TaskId) -> TaskFuture<'a, Option<TaskRecord>> {
        Box::pin(self.get_record(id))
    }

    fn transition<'a>(&'a self, id: &'a TaskId, change: TaskChange) -> TaskFuture<'a, Transition> {
        Box::pin(self.transition_record(id, change))
    }

    fn list<'a>(&'a self, query: TaskQuery<'a>) -> TaskFuture<'a, Vec<TaskRecord>> {
        Box::pin(self.list_records(query))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn script_answers_are_read_strictly() {
        assert_eq!(
            script_answer(Value::Array(vec![Value::Int(2)])),
            Some((2, None))
        );
        assert_eq!(
            script_answer(Value::Array(vec![
                Value::Int(1),
                Value::BulkString(b"{}".to_vec())
            ])),
            Some((1, Some(b"{}".to_vec())))
        );
        assert_eq!(script_answer(Value::Int(2)), None);
        assert_eq!(script_answer(Value::Array(vec![])), None);
    }

    #[tokio::test]
    async fn a_bad_url_is_a_configuration_error_that_does_not_repeat_it() {
        let err = RedisTaskStore::new("http://user:hunter2@example", "ns")
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::Config { .. }), "{err}");
        assert!(!err.to_string().contains("hunter2"));
    }
}
