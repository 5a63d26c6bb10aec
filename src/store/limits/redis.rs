//! [`RedisLimitStore`]: rate-limit counters shared by every replica, one script per group of
//! counters; calls in flight, one sorted set of leases per holder.

use std::sync::Arc;
use std::time::Duration;

use redis::Script;

use super::{AcquireFuture, Lease, LimitFuture, LimitStore, ReleaseFuture, Taken, Tally};
use crate::store::redis::keys::{check_namespace, key_digest};
use crate::store::{RedisConnection, StoreError, StoreKind};

/// KEYS: the counters of one group. ARGV: for each counter, its interval and how early a call
/// may come (its burst less one, in intervals), both in microseconds.
/// Returns `{-1, 0}` when every counter admitted the call (each moved on and set to expire when
/// it is due), or `{index, wait}`: the first counter (from 0) that was out and the longest
/// wait in microseconds, nothing written.
///
/// The clock is Redis's (`TIME`), the one every replica shares; microseconds since the epoch
/// fit a Lua number exactly.
const TAKE: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local next = {}
local first, wait = -1, 0
for i = 1, #KEYS do
  local interval = tonumber(ARGV[2 * i - 1])
  local early = tonumber(ARGV[2 * i])
  local due = tonumber(redis.call('GET', KEYS[i]))
  if not due or due < now then due = now end
  local from = due - early
  if now >= from then
    next[i] = due + interval
  else
    if first < 0 then first = i - 1 end
    if from - now > wait then wait = from - now end
  end
end
if first >= 0 then return {first, wait} end
for i = 1, #KEYS do
  redis.call('SET', KEYS[i], string.format('%.0f', next[i]), 'PXAT',
    string.format('%.0f', math.ceil(next[i] / 1000)))
end
return {-1, 0}
";

/// KEYS[1]: a holder's leases, a sorted set scored by each lease's expiry (milliseconds since
/// the epoch, Redis's clock). ARGV: the most calls in flight, the lease's lifetime in
/// milliseconds, the new lease's member. Expired leases are removed first; then, if fewer than
/// the most are left, the lease is added and the set set to expire with its last lease.
/// Returns 1 when the lease was taken, 0 when the holder has as many calls in flight as it may.
const ACQUIRE: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then return 0 end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[3])
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', KEYS[1], string.format('%.0f', math.ceil(tonumber(last[2]))))
return 1
";

/// Rate-limit counters in Redis, for every replica that shares the namespace: one key per
/// counter, `<namespace>:limit:{<group digest>}:<counter digest>`, holding the time the next
/// call is due and expiring then (an expired counter and no counter say the same).
///
/// One round trip per group of a call's counters: a call counted only on its caller's
/// counters is one script; a limit over every caller for a tool is a group of its own, so a
/// call under both is two. Within a group the call is counted on all or none; across groups,
/// a call admitted by the first and refused by the second stays counted by the first (it
/// counts against the caller, never for it). The group is the key's hash tag, so on a Cluster
/// a group's counters share a slot and no script spans two.
///
/// Calls in flight (a concurrency limit): one sorted set per holder,
/// `<namespace>:inflight:{<holder digest>}`, of its leases scored by their expiry. Taking a
/// place is one script (expired leases removed, the rest counted, the new one added if there is
/// room), giving it back one `ZREM` (Redis removes the set with its last lease): two round trips per counted call, each touching the
/// one key, so the holder's digest is its hash tag. A lease expires after the lifetime the
/// limit gives it: a replica that stops while its calls run cannot hold their places for
/// longer, and a call that runs longer than its lease stops being counted then. Every replica
/// reads Redis's clock (`TIME`), not its own.
///
/// Redis must not evict these keys (`maxmemory-policy noeviction`, or a `volatile-*` policy and
/// enough memory): an evicted counter forgets the calls it counted. A Redis that cannot answer
/// fails the call ([`StoreError::Unavailable`]), and the call is refused.
#[derive(Clone)]
pub struct RedisLimitStore {
    connection: RedisConnection,
    namespace: Arc<str>,
    script: Arc<Script>,
    acquire: Arc<Script>,
}

impl std::fmt::Debug for RedisLimitStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisLimitStore")
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

impl RedisLimitStore {
    /// Connects to the Redis server at `url` and keeps counters under `namespace` (1 to 64
    /// characters of `A-Z a-z 0-9 - _ .`; every replica uses the same one). Fails if the URL
    /// is unusable or the server does not answer.
    pub async fn new(url: &str, namespace: &str) -> Result<Self, StoreError> {
        check_namespace(namespace, StoreKind::Limits)?;
        let connection = RedisConnection::open(url)
            .await
            .map_err(|e| StoreError::unavailable(StoreKind::Limits, e))?;
        Self::with_connection(connection, namespace)
    }

    /// [`new`](Self::new) on a connection the application made, perhaps shared with the
    /// other Redis stores. Fails for an unusable namespace.
    pub fn with_connection(
        connection: RedisConnection,
        namespace: &str,
    ) -> Result<Self, StoreError> {
        check_namespace(namespace, StoreKind::Limits)?;
        Ok(Self {
            connection,
            namespace: namespace.into(),
            script: Arc::new(Script::new(TAKE)),
            acquire: Arc::new(Script::new(ACQUIRE)),
        })
    }

    /// The key of `holder`'s leases.
    fn in_flight_key(&self, holder: &str) -> String {
        format!("{}:inflight:{{{}}}", self.namespace, key_digest(holder))
    }

    /// The key of `tally`'s counter.
    fn key(&self, tally: &Tally) -> String {
        format!(
            "{}:limit:{{{}}}:{}",
            self.namespace,
            key_digest(&tally.group),
            key_digest(&tally.name)
        )
    }

    /// One group's script: `Ok(None)` when admitted, else the index within the group and the
    /// wait.
    async fn take_group(&self, group: &[&Tally]) -> Result<Option<(usize, u64)>, StoreError> {
        let mut invocation = self.script.prepare_invoke();
        for tally in group {
            let interval = tally.rate.interval_micros();
            let early = interval.saturating_mul(u64::from(tally.rate.burst().saturating_sub(1)));
            invocation.key(self.key(tally)).arg(interval).arg(early);
        }
        let mut connection = self.connection.clone();
        let (index, wait): (i64, i64) = invocation
            .invoke_async(&mut connection)
            .await
            .map_err(unavailable)?;
        match (usize::try_from(index), u64::try_from(wait)) {
            _ if index == -1 => Ok(None),
            (Ok(index), Ok(wait)) if index < group.len() => Ok(Some((index, wait.max(1)))),
            _ => Err(StoreError::unavailable(
                StoreKind::Limits,
                format_args!("redis: unexpected answer ({index}, {wait}) from the limit script"),
            )),
        }
    }
}

fn unavailable(e: redis::RedisError) -> StoreError {
    StoreError::unavailable(StoreKind::Limits, format_args!("redis: {e}"))
}

impl LimitStore for RedisLimitStore {
    fn backend(&self) -> &'static str {
        "redis"
    }

    fn reachable(&self) -> crate::store::StoreFuture<'_, ()> {
        Box::pin(self.connection.ping(StoreKind::Limits))
    }

    fn counts_in_flight(&self) -> bool {
        true
    }

    fn acquire<'a>(&'a self, holder: &'a str, max: u32, lease: Duration) -> AcquireFuture<'a> {
        Box::pin(async move {
            let mut id = [0u8; 8];
            crate::random::fill(&mut id)
                .map_err(|e| StoreError::unavailable(StoreKind::Limits, e))?;
            let id = u64::from_be_bytes(id);
            let millis = u64::try_from(lease.as_millis()).unwrap_or(u64::MAX).max(1);
            let mut connection = self.connection.clone();
            let taken: i64 = self
                .acquire
                .key(self.in_flight_key(holder))
                .arg(max)
                .arg(millis)
                .arg(id)
                .invoke_async(&mut connection)
                .await
                .map_err(unavailable)?;
            Ok((taken == 1).then(|| Lease::new(holder, id)))
        })
    }

    fn release(&self, lease: Lease) -> ReleaseFuture {
        let key = self.in_flight_key(lease.holder());
        let mut connection = self.connection.clone();
        Some(Box::pin(async move {
            let _removed: i64 = redis::cmd("ZREM")
                .arg(key)
                .arg(lease.id())
                .query_async(&mut connection)
                .await
                .map_err(unavailable)?;
            Ok(())
        }))
    }

    fn take<'a>(&'a self, tallies: &'a [Tally]) -> LimitFuture<'a> {
        Box::pin(async move {
            // The groups in the order their first tally comes.
            let mut groups: Vec<(&str, Vec<(usize, &Tally)>)> = Vec::new();
            for (index, tally) in tallies.iter().enumerate() {
                match groups.iter_mut().find(|(group, _)| *group == tally.group) {
                    Some((_, members)) => members.push((index, tally)),
                    None => groups.push((&tally.group, vec![(index, tally)])),
                }
            }
            for (_, members) in &groups {
                let group: Vec<&Tally> = members.iter().map(|(_, tally)| *tally).collect();
                if let Some((at, wait)) = self.take_group(&group).await? {
                    return Ok(Taken::Limited {
                        tally: members[at].0,
                        retry_after: Duration::from_micros(wait),
                    });
                }
            }
            Ok(Taken::Admitted)
        })
    }
}
