//! [`RedisLimitStore`]: rate-limit counters shared by every replica, one script per group of
//! counters.

use std::sync::Arc;
use std::time::Duration;

use redis::Script;

use super::{LimitFuture, LimitStore, Taken, Tally};
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

/// Rate-limit counters in Redis, for every replica that shares the namespace: one key per
/// counter, `{namespace}:limit:{<group digest>}:<counter digest>`, holding the time the next
/// call is due and expiring then (an expired counter and no counter say the same).
///
/// One round trip per group of a call's counters: a call counted only on its caller's
/// counters is one script; a limit over every caller for a tool is a group of its own, so a
/// call under both is two. Within a group the call is counted on all or none; across groups,
/// a call admitted by the first and refused by the second stays counted by the first (it
/// counts against the caller, never for it). The group is the key's hash tag, so on a Cluster
/// a group's counters share a slot and no script spans two.
///
/// Redis must not evict these keys (`maxmemory-policy noeviction`, or a `volatile-*` policy and
/// enough memory): an evicted counter forgets the calls it counted. A Redis that cannot answer
/// fails the call ([`StoreError::Unavailable`]), and the call is refused.
#[derive(Clone)]
pub struct RedisLimitStore {
    connection: RedisConnection,
    namespace: Arc<str>,
    script: Arc<Script>,
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
        })
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
