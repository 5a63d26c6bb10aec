//! The one way this crate connects to Redis: one client per store, through a
//! [`ConnectionManager`] that reconnects after a failure, with bounded connection and response
//! times so that a call made while Redis is unreachable fails within seconds. `rediss://`
//! connects over TLS (rustls, trusting the host's root certificates, `SSL_CERT_FILE` included);
//! `redis+sentinel://` URLs are refused as invalid, and a Redis Cluster node is refused at
//! connection.
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

use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::{Cmd, Pipeline, RedisError, RedisFuture, Value};

/// A store's connection to Redis: a [`ConnectionManager`] that sends a command once more when
/// the connection it went out on was gone (see the module docs for which errors, and why a
/// second run is safe). Cloning it shares the connection.
#[derive(Clone)]
pub(crate) struct RedisConnection {
    manager: ConnectionManager,
}

/// Whether `error` says the connection is gone, so that the command may be sent again on a
/// fresh one: the socket was reset, closed, refused or cut, or the manager's reconnection
/// failed the same way. Timeouts and Redis's own answers are not.
fn connection_gone(error: &RedisError) -> bool {
    error.is_connection_dropped() && !error.is_timeout()
}

impl ConnectionLike for RedisConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            match self.manager.send_packed_command(cmd).await {
                Err(error) if connection_gone(&error) => {
                    // The manager opens a fresh connection on this error; the command waits
                    // for it. The command itself is never logged.
                    tracing::debug!(target: "mcp_gate::redis", %error, "the Redis connection was gone; sending the command again on a fresh one");
                    self.manager.send_packed_command(cmd).await
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
        Box::pin(self.manager.send_packed_commands(pipeline, offset, count))
    }

    fn get_db(&self) -> i64 {
        self.manager.get_db()
    }
}

/// Why a Redis store could not be opened.
pub(crate) enum ConnectError {
    /// The URL could not be parsed (its text, which may hold a password, is not repeated).
    BadUrl,
    /// The server did not answer.
    Unreachable(redis::RedisError),
    /// The server is a Redis Cluster node: this crate's scripts and keys assume one server,
    /// so it refuses to start rather than half work.
    Cluster,
}

/// Connects to the Redis server at `url`.
pub(crate) async fn connect(url: &str) -> Result<RedisConnection, ConnectError> {
    let client = redis::Client::open(url).map_err(|_| ConnectError::BadUrl)?;
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(2)))
        .set_response_timeout(Some(Duration::from_secs(5)))
        .set_number_of_retries(3)
        .set_max_delay(Duration::from_secs(1));
    let mut connection = RedisConnection {
        manager: ConnectionManager::new_with_config(client, config)
            .await
            .map_err(ConnectError::Unreachable)?,
    };
    let info: String = redis::cmd("INFO")
        .arg("cluster")
        .query_async(&mut connection)
        .await
        .map_err(ConnectError::Unreachable)?;
    if info.lines().any(|line| line.trim() == "cluster_enabled:1") {
        return Err(ConnectError::Cluster);
    }
    Ok(connection)
}

/// Whether `namespace` may prefix this crate's keys: 1 to 64 characters of
/// `A-Z a-z 0-9 - _ .`.
pub(crate) fn namespace_ok(namespace: &str) -> bool {
    !namespace.is_empty()
        && namespace.len() <= 64
        && namespace
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
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
