//! Redis behind Sentinel: which server is the master is asked of the sentinels, again after a
//! failover.
//!
//! **Threat.** After a failover the old master is gone or has become a replica. A connection
//! that kept talking to it would fail every command, or have its writes refused (`READONLY`),
//! until the process restarts. So a [`SentinelLink`] keeps one connection to the master the
//! sentinels named, and when a command finds that connection gone or the server no longer a
//! master, it asks the sentinels again (once for all the commands that found it so) and
//! connects to the master they name now. The command that found it is sent once more by
//! [`RedisConnection`](super::RedisConnection), under the rules its docs give.
//!
//! A `redis+sentinel://` URL names the sentinels and the master's service name:
//! `redis+sentinel://[[user]:password@]host[:port][,host[:port]...]/service[/db]`, with port
//! 26379 when none is given and a service name of letters, digits, `-`, `_` and `.`; `rediss+sentinel://` speaks TLS to the sentinels and the master.
//! The user and password are the master's; sentinels that need a password of their own are
//! reached through a [`SentinelClient`] the application builds
//! ([`RedisConnection::from_sentinel_client`](super::RedisConnection::from_sentinel_client)).

use std::sync::{Arc, RwLock};
use std::time::Duration;

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::sentinel::{SentinelClient, SentinelNodeConnectionInfo, SentinelServerType};
use redis::{
    AsyncConnectionConfig, Cmd, IntoConnectionInfo, RedisConnectionInfo, RedisError, TlsMode, Value,
};
use url::Url;

/// The sentinels' port when a URL gives none.
const SENTINEL_PORT: u16 = 26379;

/// What a `redis+sentinel://` URL says: where the sentinels are, which master, and how to
/// speak to it.
#[derive(Debug)]
pub(crate) struct SentinelUrl {
    /// `redis://host:port` (or `rediss://`) of each sentinel.
    sentinels: Vec<String>,
    /// The master's service name, as the sentinels know it.
    service: String,
    /// Whether TLS is spoken to the sentinels and the master.
    tls: bool,
    /// The master's user, password and database.
    master: RedisConnectionInfo,
}

impl SentinelUrl {
    /// Whether `url` is a Sentinel URL at all (by its scheme).
    pub(crate) fn names_sentinels(url: &str) -> bool {
        let scheme = url.split_once("://").map_or("", |(scheme, _)| scheme);
        scheme.eq_ignore_ascii_case("redis+sentinel")
            || scheme.eq_ignore_ascii_case("rediss+sentinel")
    }

    /// Reads `url`, or `None` if it is not a usable Sentinel URL. The user, password and
    /// database are read by the redis crate, and each host of the list by the `url` crate.
    pub(super) fn parse(url: &str) -> Option<Self> {
        let (scheme, rest) = url.split_once("://")?;
        let tls = if scheme.eq_ignore_ascii_case("rediss+sentinel") {
            true
        } else if scheme.eq_ignore_ascii_case("redis+sentinel") {
            false
        } else {
            return None;
        };
        let (authority, path) = rest.split_at(rest.find(['/', '?', '#']).unwrap_or(rest.len()));
        let (userinfo, hosts) = match authority.rsplit_once('@') {
            Some((userinfo, hosts)) => (Some(userinfo), hosts),
            None => (None, authority),
        };
        // The service name is the path's first part; the rest, with a stand-in host, is a
        // Redis URL whose user, password and database the redis crate reads as it reads any.
        let path = path.strip_prefix('/')?;
        let (service, db) = match path.split_once('/') {
            Some((service, db)) => (service, db),
            None => (path, ""),
        };
        if service.is_empty()
            || !db.bytes().all(|b| b.is_ascii_digit())
            || path.contains(['?', '#'])
        {
            return None;
        }
        // Sentinel's own names: letters, digits, `-`, `_` and `.`.
        let named = service
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
        if !named {
            return None;
        }
        let service = service.to_owned();
        let scheme = if tls { "rediss" } else { "redis" };
        let stand_in = match userinfo {
            Some(userinfo) => format!("{scheme}://{userinfo}@sentinels/{db}"),
            None => format!("{scheme}://sentinels/{db}"),
        };
        let master = stand_in.as_str().into_connection_info().ok()?;
        let master = master.redis_settings().clone();
        let sentinels = hosts
            .split(',')
            .map(|host| sentinel_address(host, tls))
            .collect::<Option<Vec<_>>>()?;
        Some(Self {
            sentinels,
            service,
            tls,
            master,
        })
    }

    /// The client that asks these sentinels for the master.
    pub(super) fn client(&self) -> Result<SentinelClient, RedisError> {
        let mut master =
            SentinelNodeConnectionInfo::default().set_redis_connection_info(self.master.clone());
        if self.tls {
            master = master.set_tls_mode(TlsMode::Secure);
        }
        SentinelClient::build(
            self.sentinels.clone(),
            self.service.clone(),
            Some(master),
            SentinelServerType::Master,
        )
    }
}

/// `redis://host:port` for one sentinel of a URL's list, read by the `url` crate, with the
/// default port when none is given; `None` for an empty or unreadable host.
fn sentinel_address(host: &str, tls: bool) -> Option<String> {
    if host.is_empty() {
        return None;
    }
    let scheme = if tls { "rediss" } else { "redis" };
    let parsed = Url::parse(&format!("{scheme}://{host}")).ok()?;
    let name = parsed.host_str()?;
    if parsed.path() != "/" && !parsed.path().is_empty() {
        return None;
    }
    let port = parsed.port().unwrap_or(SENTINEL_PORT);
    Some(format!("{scheme}://{name}:{port}/"))
}

/// The master connection of a Sentinel-watched Redis, found again after a failover. Clones
/// share it.
#[derive(Clone)]
pub(super) struct SentinelLink {
    shared: Arc<Shared>,
}

struct Shared {
    /// Asks the sentinels; one question at a time.
    sentinels: tokio::sync::Mutex<SentinelClient>,
    /// The connection to the master last named, and how many times it was replaced.
    current: RwLock<Current>,
    /// Timeouts of each master connection.
    config: AsyncConnectionConfig,
    /// How long asking the sentinels and connecting to the master may take.
    connect_bound: Duration,
}

#[derive(Clone)]
struct Current {
    generation: u64,
    connection: MultiplexedConnection,
}

impl SentinelLink {
    /// Asks `sentinels` for the master and connects to it.
    pub(super) async fn connect(
        mut sentinels: SentinelClient,
        config: AsyncConnectionConfig,
        connect_bound: Duration,
    ) -> Result<Self, RedisError> {
        let connection = master_connection(&mut sentinels, &config, connect_bound).await?;
        Ok(Self {
            shared: Arc::new(Shared {
                sentinels: tokio::sync::Mutex::new(sentinels),
                current: RwLock::new(Current {
                    generation: 0,
                    connection,
                }),
                config,
                connect_bound,
            }),
        })
    }

    fn current(&self) -> Current {
        match self.shared.current.read() {
            Ok(current) => current.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Sends `cmd` to the master last named. When the answer says that master is gone or no
    /// longer a master, the sentinels are asked again before the error is returned, so that
    /// the command, sent again, goes to the master they name now.
    pub(super) async fn send(&self, cmd: &Cmd) -> Result<Value, RedisError> {
        let Current {
            generation,
            mut connection,
        } = self.current();
        let answer = connection.req_packed_command(cmd).await;
        if let Err(error) = &answer
            && super::master_lost(error)
            && let Err(asked) = self.find_master(generation).await
        {
            tracing::warn!(target: "mcp_gate::redis", error = %asked, "the sentinels named no reachable master");
        }
        answer
    }

    /// Replaces the connection of `generation` with one to the master the sentinels name now,
    /// unless another command did so already.
    async fn find_master(&self, generation: u64) -> Result<(), RedisError> {
        let mut sentinels = self.shared.sentinels.lock().await;
        if self.current().generation != generation {
            return Ok(());
        }
        let connection = master_connection(
            &mut sentinels,
            &self.shared.config,
            self.shared.connect_bound,
        )
        .await?;
        let replacement = Current {
            generation: generation + 1,
            connection,
        };
        match self.shared.current.write() {
            Ok(mut current) => *current = replacement,
            Err(poisoned) => *poisoned.into_inner() = replacement,
        }
        tracing::info!(target: "mcp_gate::redis", "connected to the master the sentinels name now");
        Ok(())
    }
}

/// A connection to the master `sentinels` name (which the redis crate checks is a master),
/// within `bound`.
async fn master_connection(
    sentinels: &mut SentinelClient,
    config: &AsyncConnectionConfig,
    bound: Duration,
) -> Result<MultiplexedConnection, RedisError> {
    let connect = async {
        let client = sentinels.async_get_client().await?;
        client
            .get_multiplexed_async_connection_with_config(config)
            .await
    };
    tokio::time::timeout(bound, connect)
        .await
        .unwrap_or_else(|_| Err(super::past_bound()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sentinel_urls_are_read_whole() {
        let url = SentinelUrl::parse("redis+sentinel://:s%40cret@10.0.0.1,10.0.0.2:26380/main/2")
            .expect("a usable URL");
        assert_eq!(
            url.sentinels,
            ["redis://10.0.0.1:26379/", "redis://10.0.0.2:26380/"]
        );
        assert_eq!(url.service, "main");
        assert!(!url.tls);
        assert_eq!(url.master.username(), None);
        assert_eq!(url.master.password(), Some("s@cret"));
        assert_eq!(url.master.db(), 2);
        let tls = SentinelUrl::parse("rediss+sentinel://app:pw@[::1]:5000/cache").expect("TLS");
        assert!(tls.tls);
        assert_eq!(tls.sentinels, ["rediss://[::1]:5000/"]);
        assert_eq!(tls.master.username(), Some("app"));
        assert_eq!(tls.master.db(), 0);
    }

    #[test]
    fn unusable_sentinel_urls_are_refused() {
        for bad in [
            "redis://127.0.0.1/",
            "redis+sentinel://127.0.0.1:26379",
            "redis+sentinel://127.0.0.1:26379/",
            "redis+sentinel://127.0.0.1:26379/main/x",
            "redis+sentinel://127.0.0.1:26379/main/-1",
            "redis+sentinel://127.0.0.1:26379/main/0/extra",
            "redis+sentinel://127.0.0.1:26379/main?db=1",
            "redis+sentinel://127.0.0.1:99999/main",
            "redis+sentinel://,127.0.0.1/main",
            "redis+sentinel://127.0.0.1/path/main/0",
        ] {
            assert!(SentinelUrl::parse(bad).is_none(), "{bad}");
        }
        assert!(SentinelUrl::names_sentinels("REDIS+SENTINEL://h/m"));
        assert!(!SentinelUrl::names_sentinels("redis://h/"));
    }
}
