//! [`RedisReplayStore`]: used states shared by every replica.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use redis::aio::ConnectionManager;

use super::{FirstUse, ReplayError, ReplayFuture, ReplayStore};
use crate::redis_client::{ConnectError, connect, namespace_ok};

/// Used states in Redis: one key per state, `{namespace}:used:{nonce}`, written with
/// `SET … NX PXAT <state expiry>` so that exactly one replica's first use succeeds and the key
/// lives exactly as long as the state could be presented. One round trip per first use of a
/// state; none for requests that carry no state.
///
/// Redis must not evict these keys before they expire: run it with
/// `maxmemory-policy noeviction` (or a `volatile-*` policy and enough memory). An evicting
/// Redis could forget a used state, and the state would then be accepted again. A call made
/// while Redis is unreachable fails with [`ReplayError::Unavailable`] within seconds, and the
/// state is refused.
#[derive(Clone)]
pub struct RedisReplayStore {
    connection: ConnectionManager,
    namespace: Arc<str>,
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
        Ok(Self {
            connection,
            namespace: namespace.into(),
        })
    }
}

impl ReplayStore for RedisReplayStore {
    fn first_use<'a>(
        &'a self,
        owner: &'a str,
        nonce: &'a str,
        expires_at: SystemTime,
    ) -> ReplayFuture<'a> {
        Box::pin(async move {
            let Ok(until) = expires_at.duration_since(UNIX_EPOCH) else {
                return Ok(FirstUse::AlreadyUsed);
            };
            // A state past its expiry is refused before it gets here; one at the edge is
            // treated as used rather than written with an expiry in the past.
            if expires_at <= SystemTime::now() {
                return Ok(FirstUse::AlreadyUsed);
            }
            let key = format!("{}:used:{nonce}", self.namespace);
            let mut connection = self.connection.clone();
            let written: Option<String> = redis::cmd("SET")
                .arg(&key)
                .arg(owner)
                .arg("NX")
                .arg("PXAT")
                .arg(u64::try_from(until.as_millis()).unwrap_or(u64::MAX))
                .query_async(&mut connection)
                .await
                .map_err(|e| ReplayError::Unavailable(format!("redis: {e}")))?;
            Ok(match written {
                Some(_) => FirstUse::Yes,
                None => FirstUse::AlreadyUsed,
            })
        })
    }
}
