//! The one way this crate connects to Redis: one client per store, through a
//! [`ConnectionManager`] that reconnects after a failure, with bounded connection and response
//! times so that a call made while Redis is unreachable fails within seconds. `rediss://`
//! connects over TLS (rustls, trusting the host's root certificates, `SSL_CERT_FILE` included);
//! `redis+sentinel://` URLs are refused as invalid, and a Redis Cluster node is refused at
//! connection.

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

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
pub(crate) async fn connect(url: &str) -> Result<ConnectionManager, ConnectError> {
    let client = redis::Client::open(url).map_err(|_| ConnectError::BadUrl)?;
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(2)))
        .set_response_timeout(Some(Duration::from_secs(5)))
        .set_number_of_retries(3)
        .set_max_delay(Duration::from_secs(1));
    let mut connection = ConnectionManager::new_with_config(client, config)
        .await
        .map_err(ConnectError::Unreachable)?;
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
