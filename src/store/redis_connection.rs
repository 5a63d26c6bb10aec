//! The one way the Redis stores talk to Redis: a [`RedisConnection`], built from a URL, from
//! the application's own [`redis::Client`], or from its own [`ConnectionManager`]. The manager
//! reconnects after a failure, and every command has a bounded wait, so that a call made while
//! Redis is unreachable fails within seconds. `rediss://` connects over TLS (rustls, trusting
//! the host's root certificates, `SSL_CERT_FILE` included); `redis+sentinel://` URLs are
//! refused as invalid, and a Redis Cluster node is refused when the connection is made.
//!
//! One connection may serve several stores: clones share it.
//!
//! # Bounded waits
//!
//! A connection built from a URL or a client gets this crate's manager: 2 s to connect, 5 s
//! for an answer, three reconnection attempts at most 1 s apart. A manager the application
//! built keeps its own settings, and each command sent on it is also bounded here by 5 s
//! (its reconnection included), so that a manager without a response timeout cannot hold a
//! request forever. A command past its bound fails as a timeout, and is not sent again.
//!
//! # Recovery
//!
//! A connection that broke while Redis was away is only found broken by the next command sent
//! on it, possibly long after Redis came back. [`RedisConnection`] sends such a command once
//! more, on the fresh connection the manager opens, before its store refuses anything: after
//! a restart no request is refused for a connection that was already dead.
//!
//! Only errors that say the connection is gone are retried (reset, refused, closed, broken
//! pipe), never a timeout (Redis may be slow, not gone, and may still run the command) nor
//! an error Redis answered (a script's own error, a wrong type, `NOSCRIPT`, which the script
//! runner handles itself). One command is sent at most twice; pipelines are not retried.
//!
//! A command whose reply was lost may have run before the connection broke, so every command
//! the stores send is one that a second run cannot apply twice: plain reads, and Lua scripts
//! that are atomic and guarded. A state's first use is `SET NX` (run again, it answers "used
//! before": the state is refused, never accepted twice); creating a task checks that the id
//! is free (run again, a duplicate: the call is refused, and the task it stored expires
//! unused); a task transition is a compare-and-set on the whole record (run again, the record
//! is no longer the one read: no second transition, so an approved call claimed twice still
//! runs at most once); binding a session to the owner that holds it again only renews it.
//! So a lost reply can turn a success into a refusal, never into a second effect. A script
//! added to a store must keep that property.

use std::io;
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::{Cmd, Pipeline, RedisError, RedisFuture, Value};

/// How long this crate's manager waits to connect.
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a command waits for its answer: the response timeout of this crate's manager, and
/// the bound on each command sent on a manager the application built.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);

/// A connection to one Redis server, as the Redis stores use it: a [`ConnectionManager`] that
/// reconnects, with bounded waits, and that sends a command once more when the connection it
/// went out on was gone (see the module docs for which errors, and why a second run is safe).
/// Cloning it shares the connection: one may serve the session, replay and task stores.
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// use mcp_gate::store::RedisConnection;
/// use mcp_gate::store::replay::RedisReplayStore;
/// use mcp_gate::store::tasks::RedisTaskStore;
///
/// // The application's own client: its URL, its TLS settings.
/// let client = redis::Client::open("redis://127.0.0.1:6379/")?;
/// let redis = RedisConnection::from_client(client).await?;
/// let tasks = RedisTaskStore::with_connection(redis.clone(), "mcp-gate").await?;
/// let replay = RedisReplayStore::with_connection(redis, "mcp-gate").await?;
/// # let _ = (tasks, replay);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct RedisConnection {
    manager: ConnectionManager,
    /// The bound on each command for a manager the application built, whose own settings may
    /// have none; `None` for this crate's manager, whose response timeout bounds it.
    bound: Option<Duration>,
}

impl std::fmt::Debug for RedisConnection {
    // The URL may hold a password: it is not kept, and not shown.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisConnection")
            .field("bound", &self.bound)
            .finish_non_exhaustive()
    }
}

/// Why a [`RedisConnection`] could not be made. Its text never repeats the URL, which may hold
/// a password.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RedisConnectError {
    /// The URL could not be parsed.
    #[error("the Redis URL is not valid")]
    BadUrl,
    /// The server is a Redis Cluster node: the stores' scripts and keys assume one server, so
    /// the connection is refused rather than half work.
    #[error("Redis Cluster is not supported: use one server")]
    Cluster,
    /// The server did not answer.
    #[error("{0}")]
    Unreachable(String),
}

fn unreachable(error: RedisError) -> RedisConnectError {
    RedisConnectError::Unreachable(format!("redis: {error}"))
}

/// Whether `error` says the connection is gone, so that the command may be sent again on a
/// fresh one: the socket was reset, closed, refused or cut, or the manager's reconnection
/// failed the same way. Timeouts and Redis's own answers are not.
fn connection_gone(error: &RedisError) -> bool {
    error.is_connection_dropped() && !error.is_timeout()
}

impl RedisConnection {
    /// Connects to the Redis server at `url` (`redis://[user:password@]host:port/db`,
    /// `rediss://…` for TLS, or `redis+unix:///path`), through this crate's manager.
    pub async fn open(url: &str) -> Result<Self, RedisConnectError> {
        let client = redis::Client::open(url).map_err(|_| RedisConnectError::BadUrl)?;
        Self::from_client(client).await
    }

    /// Connects through `client`, the application's own (its URL, its TLS settings), with
    /// this crate's manager and bounded waits.
    pub async fn from_client(client: redis::Client) -> Result<Self, RedisConnectError> {
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(CONNECTION_TIMEOUT))
            .set_response_timeout(Some(RESPONSE_TIMEOUT))
            .set_number_of_retries(3)
            .set_max_delay(Duration::from_secs(1));
        let manager = ConnectionManager::new_with_config(client, config)
            .await
            .map_err(unreachable)?;
        Self::checked(Self {
            manager,
            bound: None,
        })
        .await
    }

    /// Sends the stores' commands on `manager`, the application's own, which keeps its
    /// settings; each command is bounded here as well (see the module docs).
    pub async fn from_connection_manager(
        manager: ConnectionManager,
    ) -> Result<Self, RedisConnectError> {
        Self::checked(Self {
            manager,
            bound: Some(RESPONSE_TIMEOUT),
        })
        .await
    }

    /// `connection`, once its server is known to answer and not to be a Cluster node.
    async fn checked(mut connection: Self) -> Result<Self, RedisConnectError> {
        let info: String = redis::cmd("INFO")
            .arg("cluster")
            .query_async(&mut connection)
            .await
            .map_err(unreachable)?;
        if info.lines().any(|line| line.trim() == "cluster_enabled:1") {
            return Err(RedisConnectError::Cluster);
        }
        Ok(connection)
    }

    /// One `PING`, for a readiness report: [`StoreError::Unavailable`] naming `store` when
    /// the server does not answer it within the bounds.
    pub(crate) async fn ping(&self, store: super::StoreKind) -> Result<(), super::StoreError> {
        let mut connection = self.clone();
        let _: String = redis::cmd("PING")
            .query_async(&mut connection)
            .await
            .map_err(|e| super::StoreError::unavailable(store, format_args!("redis: {e}")))?;
        Ok(())
    }

    /// Sends `cmd` once, within the bound if there is one.
    async fn send_once(&mut self, cmd: &Cmd) -> Result<Value, RedisError> {
        let Some(bound) = self.bound else {
            return self.manager.send_packed_command(cmd).await;
        };
        tokio::time::timeout(bound, self.manager.send_packed_command(cmd))
            .await
            .unwrap_or_else(|_| Err(past_bound()))
    }
}

/// The error of a command that got no answer within its bound: a timeout, never sent again.
fn past_bound() -> RedisError {
    RedisError::from(io::Error::new(
        io::ErrorKind::TimedOut,
        "Redis did not answer in time",
    ))
}

impl ConnectionLike for RedisConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            match self.send_once(cmd).await {
                Err(error) if connection_gone(&error) => {
                    // The manager opens a fresh connection on this error; the command waits
                    // for it. The command itself is never logged.
                    tracing::debug!(target: "mcp_gate::redis", %error, "the Redis connection was gone; sending the command again on a fresh one");
                    self.send_once(cmd).await
                }
                answer => answer,
            }
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        // A pipeline is not one atomic step: it is sent once.
        Box::pin(async move {
            let sent = self.manager.send_packed_commands(pipeline, offset, count);
            match self.bound {
                None => sent.await,
                Some(bound) => tokio::time::timeout(bound, sent)
                    .await
                    .unwrap_or_else(|_| Err(past_bound())),
            }
        })
    }

    fn get_db(&self) -> i64 {
        self.manager.get_db()
    }
}

#[cfg(test)]
mod tests {
    use std::io;

    use redis::{ErrorKind, ServerErrorKind};

    use super::*;

    #[test]
    fn only_a_connection_that_is_gone_is_retried() {
        let io = |kind| RedisError::from(io::Error::from(kind));
        for gone in [
            io::ErrorKind::BrokenPipe,
            io::ErrorKind::ConnectionReset,
            io::ErrorKind::ConnectionRefused,
            io::ErrorKind::ConnectionAborted,
            io::ErrorKind::UnexpectedEof,
            io::ErrorKind::NotConnected,
        ] {
            assert!(connection_gone(&io(gone)), "{gone:?}");
        }
        // Redis may be slow, not gone, and may still run the command.
        assert!(!connection_gone(&io(io::ErrorKind::TimedOut)));
        assert!(!connection_gone(&past_bound()), "a command past its bound");
        // Answers of Redis itself: a script's error, a missing script, a wrong type.
        for answered in [
            ErrorKind::Server(ServerErrorKind::ResponseError),
            ErrorKind::Server(ServerErrorKind::NoScript),
            ErrorKind::Server(ServerErrorKind::BusyLoading),
            ErrorKind::UnexpectedReturnType,
        ] {
            let error = RedisError::from((answered, "answered"));
            assert!(!connection_gone(&error), "{answered:?}");
        }
    }
}
