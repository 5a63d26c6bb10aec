//! The state that outlives a reload: the stores every gate built from the file shares.
//!
//! A reload builds a new gate from the file, but a call held for approval, a used
//! continuation state, a legacy session's binding, a rate limit's tally and a revocation must
//! survive it, or a reload would forget them. They are made once, at start, from `[redis]`
//! (shared with other replicas) or in this process's memory, and handed to every gate. A
//! reload that changes `[redis]` is refused: moving stores needs a restart.

use std::sync::Arc;

use mcp_gate::store::limits::{LimitStore, MemoryLimitStore};
use mcp_gate::store::replay::{MemoryReplayStore, ReplayStore};
use mcp_gate::store::revocations::{MemoryRevocations, RevocationStore};
use mcp_gate::store::sessions::{MemorySessionStore, SessionStore};
use mcp_gate::store::tasks::{LocalFeed, MemoryTaskStore, TaskStore};
use mcp_gate::tasks::TaskNotifications;

use crate::config::{Redis, Sessions};
use crate::task_feed::Relay;

/// Legacy sessions kept at most, and per owner, and how long an idle one lives, when
/// `[sessions]` does not say: the library's defaults.
const SESSIONS: usize = 10_000;
const SESSIONS_PER_OWNER: usize = 100;
const SESSION_IDLE: std::time::Duration = std::time::Duration::from_secs(3600);
/// Held calls kept at most in memory.
const TASKS: usize = 10_000;
/// Revocations kept at most.
const REVOCATIONS: usize = 100_000;

/// Why the stores could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum StoreOpenError {
    /// Redis could not be reached or refused the connection.
    #[error("cannot connect to Redis: {0}")]
    Connect(String),
    /// A store refused its namespace or its first command.
    #[error("cannot open the {store} store in Redis: {message}")]
    Store {
        /// Which store.
        store: &'static str,
        /// Why.
        message: String,
    },
}

/// Where the stores live, for the banner and the logs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// This process's memory: nothing is shared with other replicas.
    Memory,
    /// Redis, shared by every replica with the same namespace.
    Redis,
}

/// The stores, made once and shared by every gate built from the file.
#[derive(Clone)]
pub struct Stores {
    /// Where they live.
    pub backend: Backend,
    /// Held calls.
    pub tasks: Arc<dyn TaskStore>,
    /// Used continuation states and DPoP proofs.
    pub replay: Arc<dyn ReplayStore>,
    /// Legacy session bindings.
    pub sessions: Arc<dyn SessionStore>,
    /// Rate-limit tallies and calls in flight.
    pub limits: Arc<dyn LimitStore>,
    /// Revocations (used when `[revocation]` is set).
    pub revocations: Arc<dyn RevocationStore>,
    /// How held tasks' transitions reach the listens that wait for them, with
    /// `[tasks.notifications]` (see [`Stores::with_task_feed`]): made once, over a [`Relay`]
    /// that tells every gate built with it, so that listens opened before a reload and after
    /// it all hear of transitions.
    pub task_notifications: Option<TaskNotifications>,
}

impl Stores {
    /// Every store in this process's memory, with the library's default bounds.
    pub fn memory() -> Self {
        Self::memory_with(&Sessions::default())
    }

    /// Every store in this process's memory, legacy sessions bounded as `sessions` says.
    pub fn memory_with(sessions: &Sessions) -> Self {
        Self {
            backend: Backend::Memory,
            tasks: Arc::new(MemoryTaskStore::new(TASKS)),
            replay: Arc::new(MemoryReplayStore::new(
                MemoryReplayStore::DEFAULT_CAPACITY,
                MemoryReplayStore::DEFAULT_PER_OWNER,
            )),
            sessions: Arc::new(MemorySessionStore::new(
                sessions.capacity.unwrap_or(SESSIONS),
                sessions.per_owner.unwrap_or(SESSIONS_PER_OWNER),
                sessions.idle.map_or(SESSION_IDLE, |span| span.0),
            )),
            limits: Arc::new(MemoryLimitStore::default()),
            revocations: Arc::new(MemoryRevocations::new(REVOCATIONS)),
            task_notifications: None,
        }
    }

    /// Every store in the Redis `redis` names, the password read from its variable, legacy
    /// sessions bounded as `sessions` says.
    pub async fn redis(redis: &Redis, sessions: &Sessions) -> Result<Self, StoreOpenError> {
        use mcp_gate::store::RedisConnection;
        use mcp_gate::store::limits::RedisLimitStore;
        use mcp_gate::store::replay::RedisReplayStore;
        use mcp_gate::store::revocations::RedisRevocations;
        use mcp_gate::store::sessions::RedisSessionStore;
        use mcp_gate::store::tasks::RedisTaskStore;

        let url = with_password(
            &redis.url,
            redis.password_env.as_ref().and_then(|v| v.read()),
        );
        let namespace = redis.namespace.as_str();
        let connection = RedisConnection::open(&url)
            .await
            .map_err(|error| StoreOpenError::Connect(error.to_string()))?;
        let store = |store: &'static str| {
            move |error: mcp_gate::store::StoreError| StoreOpenError::Store {
                store,
                message: error.to_string(),
            }
        };
        let tasks = RedisTaskStore::with_connection(connection.clone(), namespace)
            .await
            .map_err(store("tasks"))?;
        let replay = RedisReplayStore::with_connection(connection.clone(), namespace)
            .await
            .map_err(store("replay"))?;
        let sessions = RedisSessionStore::with_connection(
            connection.clone(),
            namespace,
            sessions.capacity.unwrap_or(SESSIONS),
            sessions.per_owner.unwrap_or(SESSIONS_PER_OWNER),
            sessions.idle.map_or(SESSION_IDLE, |span| span.0),
        )
        .await
        .map_err(store("sessions"))?;
        let limits =
            RedisLimitStore::with_connection(connection, namespace).map_err(store("limits"))?;
        let revocations = RedisRevocations::new(&url, namespace, REVOCATIONS)
            .await
            .map_err(store("revocations"))?;
        Ok(Self {
            backend: Backend::Redis,
            tasks: Arc::new(tasks),
            replay: Arc::new(replay),
            sessions: Arc::new(sessions),
            limits: Arc::new(limits),
            revocations: Arc::new(revocations),
            task_notifications: None,
        })
    }

    /// These stores with the task feed `[tasks.notifications]` asks for: within this process
    /// over memory stores, through `redis` (pub/sub on the namespace's task channel) over
    /// Redis ones, so that every replica's listens hear of every transition. Without the
    /// table, none.
    pub async fn with_task_feed(
        mut self,
        file: &crate::config::File,
    ) -> Result<Self, StoreOpenError> {
        if file.tasks.notifications.is_none() {
            return Ok(self);
        }
        let notifications = match (&file.redis, self.backend) {
            (Some(redis), Backend::Redis) => {
                let redis = redis.get_ref();
                let url = with_password(
                    &redis.url,
                    redis.password_env.as_ref().and_then(|v| v.read()),
                );
                let feed = mcp_gate::store::tasks::RedisTaskFeed::connect(&url, &redis.namespace)
                    .await
                    .map_err(|error| StoreOpenError::Store {
                        store: "task feed",
                        message: error.to_string(),
                    })?;
                TaskNotifications::through(Arc::new(Relay::over(Arc::new(feed))))
            }
            _ => TaskNotifications::through(Arc::new(Relay::over(Arc::new(LocalFeed::new())))),
        };
        self.task_notifications = Some(notifications);
        Ok(self)
    }
}

/// `url` with `password` put in its userinfo (the URL in the file carries none).
fn with_password(url: &str, password: Option<String>) -> String {
    let Some(password) = password else {
        return url.to_owned();
    };
    if let Ok(mut parsed) = url::Url::parse(url)
        && parsed.set_password(Some(&password)).is_ok()
    {
        return parsed.into();
    }
    // `redis+sentinel://a,b/name` is not one host: its password goes in as written.
    match url.split_once("://") {
        Some((scheme, rest)) => format!("{scheme}://:{}@{rest}", encode(&password)),
        None => url.to_owned(),
    }
}

/// `text` percent-encoded for a URL's userinfo.
fn encode(text: &str) -> String {
    url::form_urlencoded::byte_serialize(text.as_bytes()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_password_goes_into_the_url_and_only_there() {
        assert_eq!(
            with_password("redis://127.0.0.1:6379/0", None),
            "redis://127.0.0.1:6379/0"
        );
        assert_eq!(
            with_password("redis://127.0.0.1:6379/0", Some("p@ss".into())),
            "redis://:p%40ss@127.0.0.1:6379/0"
        );
    }
}
