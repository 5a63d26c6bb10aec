//! [`RedisRevocations`]: the revocation set shared by every replica, in Redis, with a copy in
//! each replica that a feed keeps current.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use redis::Script;

use super::{RevocationEntry, RevocationList, RevocationStore};
use crate::store::redis::keys::{check_namespace, slot_prefix};
use crate::store::redis::sentinel::SentinelUrl;
use crate::store::{RedisConnection, StoreError, StoreFuture, StoreKind};

/// KEYS: the set (a sorted set of entries scored by expiry), the version counter.
/// ARGV: the entry (JSON), its expiry (ms), the capacity, the feed's channel.
/// Returns the set's new version (> 0), or -2 when the set holds `capacity` live entries.
/// The entry is published on the channel as `<version> <entry>` by the same script, so that a
/// replica that reads the version and then misses the message knows it missed one.
const REVOKE: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if not redis.call('ZSCORE', KEYS[1], ARGV[1])
  and redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[3]) then
  return -2
end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', KEYS[1], last[2])
local version = redis.call('INCR', KEYS[2])
redis.call('PUBLISH', ARGV[4], version .. ' ' .. ARGV[1])
return version
";

/// KEYS: the set, the version counter. Returns the version, then every live entry.
const LOAD: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local entries = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf')
table.insert(entries, 1, redis.call('GET', KEYS[2]) or '0')
return entries
";

/// How often the feed confirms that its copy is current (the version read, the subscription
/// pinged): the staleness a healthy feed shows is below it.
const TICK: Duration = Duration::from_millis(500);
/// The longest one step of the feed (connect, subscribe, reload, confirm) may take.
const STEP: Duration = Duration::from_secs(2);
/// The pause before a lost feed connects again.
const RECONNECT: Duration = Duration::from_millis(250);

/// Revocations in Redis, for every replica on one namespace, and their copy in this process.
///
/// - **Durable set.** A sorted set `{namespace}:revocations` of entries scored by their
///   expiry, pruned of expired entries at each revocation and expiring with its last one; a
///   counter `{namespace}:revocations-version` counts the revocations.
/// - **Feed.** The script that stores an entry publishes it on the channel
///   `{namespace}:revocations-feed`, with the set's version; each replica's feed task applies
///   it to the replica's [`RevocationList`], which requests are checked against with no round
///   trip.
/// - **Catch-up.** Each time the feed connects (at start, and after its subscription dropped)
///   it subscribes first and then reloads the whole set, so nothing revoked meanwhile is
///   missed. Every 500 ms it reads the version: one it has not seen (a message lost, or a
///   Redis that lost its data) reloads the set too; the read and a ping of the subscription
///   confirm the copy is current ([`RevocationList::mark_synced`]).
/// - **Bounded** at `capacity` live entries, counted in the script for every replica at once:
///   a new revocation is then refused ([`StoreError::Full`]). Each revocation counts, even a
///   second one of the same thing (the memory set counts that once).
///
/// The feed's subscription is on one server: a URL naming Sentinels is refused. Run Redis
/// with `maxmemory-policy noeviction`: an evicted entry is a revocation lost.
pub struct RedisRevocations {
    shared: Arc<Shared>,
    /// The feed task, stopped when the set is dropped.
    feed: tokio::task::JoinHandle<()>,
}

struct Shared {
    connection: RedisConnection,
    client: redis::Client,
    set_key: String,
    version_key: String,
    channel: String,
    revoke: Script,
    load: Script,
    capacity: usize,
    list: RevocationList,
}

impl std::fmt::Debug for RedisRevocations {
    // The URL may hold a password: it is not kept, and not shown.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisRevocations")
            .field("set", &self.shared.set_key)
            .field("capacity", &self.shared.capacity)
            .finish_non_exhaustive()
    }
}

impl Drop for RedisRevocations {
    fn drop(&mut self) {
        self.feed.abort();
    }
}

fn unavailable(e: impl std::fmt::Display) -> StoreError {
    StoreError::unavailable(StoreKind::Revocations, format_args!("redis: {e}"))
}

impl RedisRevocations {
    /// Connects to the Redis server at `url` (one server or a Cluster node; not Sentinels)
    /// and keeps at most `capacity` live revocations under `namespace` (1 to 64 characters
    /// of `A-Z a-z 0-9 - _ .`; every replica uses the same one and the same capacity). The
    /// feed starts now, in the current Tokio runtime; until its first sync the set counts as
    /// unreachable. Fails if the URL is unusable or the server does not answer.
    pub async fn new(url: &str, namespace: &str, capacity: usize) -> Result<Self, StoreError> {
        check_namespace(namespace, StoreKind::Revocations)?;
        if SentinelUrl::names_sentinels(url) {
            return Err(StoreError::unusable(
                StoreKind::Revocations,
                "the revocation feed subscribes on one server: give its URL, not the Sentinels'",
            ));
        }
        let client = redis::Client::open(url)
            .map_err(|_| StoreError::unusable(StoreKind::Revocations, "the URL is not valid"))?;
        let connection = RedisConnection::from_client(client.clone())
            .await
            .map_err(unavailable)?;
        let prefix = slot_prefix(namespace);
        let shared = Arc::new(Shared {
            connection,
            client,
            set_key: format!("{prefix}:revocations"),
            version_key: format!("{prefix}:revocations-version"),
            channel: format!("{prefix}:revocations-feed"),
            revoke: Script::new(REVOKE),
            load: Script::new(LOAD),
            capacity,
            list: RevocationList::fed(capacity),
        });
        let feed = tokio::spawn(follow(shared.clone()));
        Ok(Self { shared, feed })
    }
}

impl RevocationStore for RedisRevocations {
    fn revoke<'a>(&'a self, entry: &'a RevocationEntry) -> StoreFuture<'a, ()> {
        Box::pin(self.shared.revoke(entry))
    }

    fn list(&self) -> &RevocationList {
        &self.shared.list
    }

    fn backend(&self) -> &'static str {
        "redis"
    }

    fn reachable(&self) -> StoreFuture<'_, ()> {
        Box::pin(self.shared.connection.ping(StoreKind::Revocations))
    }
}

impl Shared {
    async fn revoke(&self, entry: &RevocationEntry) -> Result<(), StoreError> {
        let member = serde_json::to_string(entry).map_err(unavailable)?;
        let mut connection = self.connection.clone();
        let answer: i64 = self
            .revoke
            .key(&self.set_key)
            .key(&self.version_key)
            .arg(&member)
            .arg(entry.until_ms)
            .arg(self.capacity)
            .arg(&self.channel)
            .invoke_async(&mut connection)
            .await
            .map_err(unavailable)?;
        match answer {
            -2 => Err(StoreError::Full {
                store: StoreKind::Revocations,
                capacity: self.capacity,
            }),
            version if version > 0 => {
                // A revocation a failover forgot would let the tokens in again.
                self.connection
                    .replicated(&self.set_key, None, StoreKind::Revocations)
                    .await?;
                self.list.apply(entry, crate::clock::now_ms());
                Ok(())
            }
            other => Err(unavailable(format_args!(
                "unexpected answer {other} from the revocation script"
            ))),
        }
    }

    /// Reloads the whole set into the list; the set's version.
    async fn reload(&self) -> Result<u64, StoreError> {
        let mut connection = self.connection.clone();
        let mut invocation = self.load.key(&self.set_key);
        invocation.key(&self.version_key);
        let answer = bounded(invocation.invoke_async::<Vec<String>>(&mut connection)).await?;
        let (version, members) = answer
            .split_first()
            .ok_or_else(|| unavailable("an empty answer to the load script"))?;
        let version = version.parse::<u64>().map_err(unavailable)?;
        let mut entries = Vec::with_capacity(members.len());
        for member in members {
            // An entry this build cannot read is not skipped: the copy would be incomplete.
            entries.push(serde_json::from_str::<RevocationEntry>(member).map_err(unavailable)?);
        }
        let now = crate::clock::now_ms();
        self.list.replace(&entries, now);
        self.list.mark_synced(now);
        Ok(version)
    }

    async fn version(&self) -> Result<u64, StoreError> {
        let mut connection = self.connection.clone();
        let mut get = redis::cmd("GET");
        get.arg(&self.version_key);
        let read = get.query_async::<Option<u64>>(&mut connection);
        Ok(bounded(read).await?.unwrap_or(0))
    }

    /// One connection of the feed: subscribe, catch up, then apply messages and confirm the
    /// copy every [`TICK`], until something fails.
    async fn session(&self) -> Result<(), StoreError> {
        let pubsub = bounded(self.client.get_async_pubsub()).await?;
        let (mut sink, mut stream) = pubsub.split();
        bounded(sink.subscribe(&self.channel)).await?;
        let mut version = self.reload().await?;
        report(&self.list);
        let mut next_tick = Instant::now() + TICK;
        loop {
            let wait = next_tick.saturating_duration_since(Instant::now());
            match tokio::time::timeout(wait, stream.next()).await {
                Ok(Some(message)) => match parse(message.get_payload_bytes()) {
                    Some((seen, entry)) => {
                        self.list.apply(&entry, crate::clock::now_ms());
                        version = version.max(seen);
                    }
                    None => version = self.reload().await?,
                },
                Ok(None) => return Err(unavailable("the subscription was dropped")),
                Err(_) => {
                    next_tick = Instant::now() + TICK;
                    if self.version().await? != version {
                        version = self.reload().await?;
                    }
                    bounded(sink.ping::<redis::Value>()).await?;
                    let now = crate::clock::now_ms();
                    self.list.purge(now);
                    self.list.mark_synced(now);
                    report(&self.list);
                }
            }
        }
    }
}

/// A step of the feed, bounded by [`STEP`].
async fn bounded<T>(
    step: impl std::future::Future<Output = redis::RedisResult<T>>,
) -> Result<T, StoreError> {
    match tokio::time::timeout(STEP, step).await {
        Ok(answer) => answer.map_err(unavailable),
        Err(_) => Err(unavailable("the feed's step timed out")),
    }
}

/// A message: `<version> <entry JSON>`.
fn parse(payload: &[u8]) -> Option<(u64, RevocationEntry)> {
    let text = std::str::from_utf8(payload).ok()?;
    let (version, entry) = text.split_once(' ')?;
    Some((version.parse().ok()?, serde_json::from_str(entry).ok()?))
}

/// The feed's state and staleness, to the metrics.
fn report(list: &RevocationList) {
    let state = list.state();
    crate::measure::revocation::feed_state(state.as_str());
    let staleness = state.staleness_ms(crate::clock::now_ms());
    crate::measure::revocation::feed_staleness(staleness as f64 / 1000.0);
}

/// The feed task: a session, and after each loss a pause and another, for as long as the set
/// lives (it aborts the task when dropped).
async fn follow(shared: Arc<Shared>) {
    loop {
        let lost = shared.session().await;
        shared.list.mark_down();
        report(&shared.list);
        if let Err(error) = lost {
            tracing::warn!(target: "mcp_gate::revocation", %error, "revocation feed lost; reconnecting");
        }
        tokio::time::sleep(RECONNECT).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::Revocation;

    #[test]
    fn a_message_reads_back_and_nothing_else_does() {
        let entry = RevocationEntry::new(Revocation::subject("i", "s"), 1, 2);
        let text = format!("7 {}", serde_json::to_string(&entry).unwrap());
        assert_eq!(parse(text.as_bytes()), Some((7, entry)));
        for bad in ["", "7", "x {}", "7 {\"revocation\":1}"] {
            assert_eq!(parse(bad.as_bytes()), None, "{bad}");
        }
    }
}
