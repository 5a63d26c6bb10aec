//! The one way the Redis stores talk to Redis: a [`RedisConnection`] to one server, to a
//! Redis Cluster, or to the master a set of sentinels names, built from a URL or from the
//! application's own client ([`redis::Client`], [`ConnectionManager`], [`ClusterClient`],
//! [`SentinelClient`]). Every command has a bounded wait, so that a call made while Redis is
//! unreachable fails within seconds. `rediss://` connects over TLS (rustls, trusting the
//! host's root certificates, `SSL_CERT_FILE` included).
//!
//! One connection may serve several stores: clones share it.
//!
//! # Topologies
//!
//! - **One server** (`redis://`, `rediss://`, `redis+unix://`): a [`ConnectionManager`] that
//!   reconnects after a failure.
//! - **Redis Cluster**: a URL naming any node of a cluster connects to the whole cluster (the
//!   node says it is one), or the application hands over its [`ClusterClient`]. Commands go to
//!   the shard that owns their keys, follow the cluster when slots move, and find the new
//!   master after a failover. Every key a store's script touches carries one hash tag
//!   ([`keys`]), so no script spans two slots.
//! - **Sentinel** (`redis+sentinel://`, see [`sentinel`]): the master the sentinels name,
//!   asked again when it is gone or has become a replica.
//!
//! # Bounded waits
//!
//! A connection this crate builds gets 2 s to connect and 5 s for an answer; one server's
//! manager makes three reconnection attempts at most 1 s apart, a cluster four retries at
//! most 1 s apart, and finding the master through the sentinels takes at most 3 s. A manager or cluster client the application built keeps its own settings,
//! and each command sent on it is also bounded here by 5 s (its reconnection included), so
//! that a client without a response timeout cannot hold a request forever. A command past its
//! bound fails as a timeout, and is not sent again.
//!
//! # Recovery
//!
//! A connection that broke while Redis was away is only found broken by the next command sent
//! on it, possibly long after Redis came back. [`RedisConnection`] sends such a command once
//! more, on the fresh connection, before its store refuses anything: after a restart or a
//! failover no request is refused for a connection that was already dead, once the server (or
//! the new master) answers.
//!
//! Only errors that say the connection is gone are retried (reset, refused, closed, broken
//! pipe), and `READONLY` (the server became a replica: it refused the command without running
//! it), never a timeout (Redis may be slow, not gone, and may still run the command) nor
//! another error Redis answered (a script's own error, a wrong type, `NOSCRIPT`, which the
//! script runner handles itself). One command is sent at most twice here; pipelines are not
//! retried. A cluster client also retries by itself when the cluster moves a slot or loses a
//! node, under the same rule below.
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
//!
//! # Writes that must survive a failover
//!
//! Redis replicates asynchronously: a master that fails right after a write may take it with
//! it, and the replica promoted in its place never saw it. For a used state or a claimed task
//! that would mean a second use, a second run. So when replicas are there, a store waits for
//! such a write to reach them (`WAIT`, at most 1 s) before it reports success, and refuses
//! the call when no replica acknowledged it: [`replica_acks`](RedisConnection::replica_acks).
//! By default a connection waits for one replica when, as the connection is made, the master
//! has replicas connected (one server, or the master the sentinels name), or on a cluster,
//! when every master that serves slots has a replica. Rate-limit
//! counters, session bindings and task records that are not yet claimable do not wait: a
//! counter lost in a failover gives its caller its burst again once, a lost binding or record
//! is an unknown session or task, refused.

mod cluster;
pub(crate) mod keys;
pub(crate) mod sentinel;

use std::io;
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::sentinel::SentinelClient;
use redis::{
    AsyncConnectionConfig, Cmd, ErrorKind, Pipeline, RedisError, RedisFuture, ServerErrorKind,
    Value,
};

use self::sentinel::{SentinelLink, SentinelUrl};

/// How long this crate's connections wait to connect.
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a command waits for its answer: the response timeout of this crate's
/// connections, and the bound on each command sent on a client the application built.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long asking the sentinels for the master and connecting to it may take.
const SENTINEL_TIMEOUT: Duration = Duration::from_secs(3);
/// How long a write waits for its replicas (`WAIT`), in milliseconds.
const REPLICA_WAIT_MS: u64 = 1000;

/// A connection to Redis as the Redis stores use it: to one server, a Cluster or the master
/// sentinels name, with bounded waits, that sends a command once more when the connection it
/// went out on was gone (see the module docs for which errors, and why a second run is safe).
/// Cloning it shares the connection: one may serve the session, replay, task and limit stores.
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
///
/// // A Cluster: any node's URL (or `from_cluster_client`); Sentinel: the sentinels and the
/// // master's name.
/// let cluster = RedisConnection::open("redis://10.0.0.5:7000/").await?;
/// let sentinel = RedisConnection::open("redis+sentinel://10.0.0.9:26379/main").await?;
/// # let _ = (tasks, replay, cluster, sentinel);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct RedisConnection {
    link: Link,
    /// The bound on each command for a client the application built, whose own settings may
    /// have none, and for every cluster; `None` for this crate's one-server and Sentinel
    /// connections, whose response timeout bounds them.
    bound: Option<Duration>,
    /// How many replicas a write that must survive a failover waits for.
    replica_acks: u8,
}

/// Where the commands go.
#[derive(Clone)]
enum Link {
    /// One server.
    Server(ConnectionManager),
    /// A Redis Cluster.
    Cluster(ClusterConnection),
    /// The master sentinels name.
    Sentinel(SentinelLink),
}

impl Link {
    fn topology(&self) -> &'static str {
        match self {
            Self::Server(_) => "server",
            Self::Cluster(_) => "cluster",
            Self::Sentinel(_) => "sentinel",
        }
    }
}

impl std::fmt::Debug for RedisConnection {
    // The URL may hold a password: it is not kept, and not shown.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisConnection")
            .field("topology", &self.link.topology())
            .field("bound", &self.bound)
            .field("replica_acks", &self.replica_acks)
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
    /// The server did not answer.
    #[error("{0}")]
    Unreachable(String),
}

fn unreachable(error: RedisError) -> RedisConnectError {
    RedisConnectError::Unreachable(format!("redis: {error}"))
}

/// Whether `error` says the connection is gone, so that the command may be sent again on a
/// fresh one: the socket was reset, closed, refused or cut, or the reconnection failed the
/// same way. Timeouts and Redis's own answers are not.
fn connection_gone(error: &RedisError) -> bool {
    error.is_connection_dropped() && !error.is_timeout()
}

/// Whether `error` says the server is no longer the master (`READONLY`): it refused the
/// command without running it.
fn demoted(error: &RedisError) -> bool {
    error.kind() == ErrorKind::Server(ServerErrorKind::ReadOnly)
}

/// Whether `error` means the command may be sent once more (see the module docs).
fn worth_resending(error: &RedisError) -> bool {
    connection_gone(error) || demoted(error)
}

/// Whether `error` says the master a link talks to is gone or no longer a master.
pub(crate) fn master_lost(error: &RedisError) -> bool {
    worth_resending(error) || error.is_unrecoverable_error()
}

/// The settings of one server's connection this crate builds.
fn manager_config() -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(CONNECTION_TIMEOUT))
        .set_response_timeout(Some(RESPONSE_TIMEOUT))
        .set_number_of_retries(3)
        .set_max_delay(Duration::from_secs(1))
}

impl RedisConnection {
    /// Connects to the Redis the URL names, through this crate's connection:
    /// `redis://[user:password@]host:port/db` (one server, or any node of a Redis Cluster),
    /// `rediss://…` for TLS, `redis+unix:///path`, or
    /// `redis+sentinel://[[user]:password@]host[:port][,host[:port]...]/service[/db]`
    /// (`rediss+sentinel://` for TLS) for the master the sentinels name.
    pub async fn open(url: &str) -> Result<Self, RedisConnectError> {
        if SentinelUrl::names_sentinels(url) {
            let sentinels = SentinelUrl::parse(url)
                .ok_or(RedisConnectError::BadUrl)?
                .client()
                .map_err(|_| RedisConnectError::BadUrl)?;
            return Self::from_sentinel_client(sentinels).await;
        }
        let client = redis::Client::open(url).map_err(|_| RedisConnectError::BadUrl)?;
        Self::from_client(client).await
    }

    /// Connects through `client`, the application's own (its URL, its TLS settings), with
    /// this crate's bounded waits. When the server is a Redis Cluster node, the connection is
    /// to the whole cluster, found from that node.
    pub async fn from_client(client: redis::Client) -> Result<Self, RedisConnectError> {
        let seed = client.get_connection_info().clone();
        let manager = ConnectionManager::new_with_config(client, manager_config())
            .await
            .map_err(unreachable)?;
        let mut connection = Self {
            link: Link::Server(manager),
            bound: None,
            replica_acks: 0,
        };
        if connection.is_cluster_node().await? {
            let client = cluster::builder(vec![seed])
                .build()
                .map_err(|_| RedisConnectError::BadUrl)?;
            return Self::cluster(client).await;
        }
        connection.replica_acks = connection.connected_replicas().await?;
        Ok(connection)
    }

    /// Sends the stores' commands on `manager`, the application's own, which keeps its
    /// settings; each command is bounded here as well (see the module docs). A manager must
    /// talk to one server: for a cluster, use [`from_cluster_client`](Self::from_cluster_client).
    pub async fn from_connection_manager(
        manager: ConnectionManager,
    ) -> Result<Self, RedisConnectError> {
        let mut connection = Self {
            link: Link::Server(manager),
            bound: Some(RESPONSE_TIMEOUT),
            replica_acks: 0,
        };
        if connection.is_cluster_node().await? {
            return Err(RedisConnectError::Unreachable(
                "redis: the server is a Cluster node; connect with a cluster client".into(),
            ));
        }
        connection.replica_acks = connection.connected_replicas().await?;
        Ok(connection)
    }

    /// Connects to the cluster `client` names, the application's own (its nodes, its TLS and
    /// retry settings); each command is bounded here as well.
    pub async fn from_cluster_client(client: ClusterClient) -> Result<Self, RedisConnectError> {
        Self::cluster(client).await
    }

    /// Connects to the master the sentinels of `sentinels` name, the application's own client
    /// (its sentinels, its credentials for each), with this crate's bounded waits; after a
    /// failover, the sentinels are asked again.
    pub async fn from_sentinel_client(
        sentinels: SentinelClient,
    ) -> Result<Self, RedisConnectError> {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(CONNECTION_TIMEOUT))
            .set_response_timeout(Some(RESPONSE_TIMEOUT));
        let link = SentinelLink::connect(sentinels, config, SENTINEL_TIMEOUT)
            .await
            .map_err(unreachable)?;
        let mut connection = Self {
            link: Link::Sentinel(link),
            bound: None,
            replica_acks: 0,
        };
        // The master answers (the redis crate checked that it is one), with its replicas.
        connection.replica_acks = connection.connected_replicas().await?;
        Ok(connection)
    }

    /// A cluster connection: every command bounded here, whoever built the client (one the
    /// application built may have no overall bound, and retries may add up).
    async fn cluster(client: ClusterClient) -> Result<Self, RedisConnectError> {
        let cluster = client.get_async_connection().await.map_err(unreachable)?;
        let mut connection = Self {
            link: Link::Cluster(cluster),
            bound: Some(RESPONSE_TIMEOUT),
            replica_acks: 0,
        };
        connection.replica_acks = cluster::replicated_everywhere(&mut connection)
            .await
            .map_err(unreachable)?
            .into();
        Ok(connection)
    }

    /// Waits for `replicas` replicas to acknowledge each write that must survive a failover
    /// (a state's first use, a task's creation and transitions) before reporting it done, or
    /// refuses the call; 0 waits for none. See the module docs for the defaults. Give it a
    /// number of replicas every master has, or every such write is refused.
    #[must_use]
    pub fn replica_acks(mut self, replicas: u8) -> Self {
        self.replica_acks = replicas;
        self
    }

    /// Whether the server says it is a Cluster node.
    async fn is_cluster_node(&mut self) -> Result<bool, RedisConnectError> {
        let info: String = redis::cmd("INFO")
            .arg("cluster")
            .query_async(self)
            .await
            .map_err(unreachable)?;
        Ok(info.lines().any(|line| line.trim() == "cluster_enabled:1"))
    }

    /// How many replicas the server has connected (at most 1 is asked for: one copy elsewhere
    /// is what a failover needs).
    async fn connected_replicas(&mut self) -> Result<u8, RedisConnectError> {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query_async(self)
            .await
            .map_err(unreachable)?;
        let connected = info
            .lines()
            .find_map(|line| line.trim().strip_prefix("connected_slaves:"))
            .and_then(|count| count.parse::<u32>().ok())
            .unwrap_or(0);
        Ok(u8::from(connected > 0))
    }

    async fn ping_once(&mut self) -> Result<(), RedisError> {
        let _: String = redis::cmd("PING").query_async(self).await?;
        Ok(())
    }

    /// One `PING`, for a readiness report: [`StoreError::Unavailable`] naming `store` when
    /// the server does not answer it within the bounds.
    pub(crate) async fn ping(&self, store: super::StoreKind) -> Result<(), super::StoreError> {
        let mut connection = self.clone();
        connection
            .ping_once()
            .await
            .map_err(|e| super::StoreError::unavailable(store, format_args!("redis: {e}")))
    }

    /// After a write to `key` that must survive a failover: waits for the replicas
    /// [`replica_acks`](Self::replica_acks) asks for, on the server that holds `key`, then
    /// reads the key back there: present, or holding exactly `written` when given (a string
    /// key). An error (naming `store`) when fewer acknowledged it in time or the write is not
    /// there: the caller refuses the call.
    pub(crate) async fn replicated(
        &self,
        key: &str,
        written: Option<&[u8]>,
        store: super::StoreKind,
    ) -> Result<(), super::StoreError> {
        if self.replica_acks == 0 {
            return Ok(());
        }
        let mut wait = redis::cmd("WAIT");
        wait.arg(u32::from(self.replica_acks)).arg(REPLICA_WAIT_MS);
        let sent = self.on_master_of(key, wait).await;
        let acknowledged = match sent {
            Ok(Value::Int(count)) => count,
            Ok(other) => {
                return Err(super::StoreError::unavailable(
                    store,
                    format_args!("redis: WAIT answered {other:?}"),
                ));
            }
            Err(e) => {
                return Err(super::StoreError::unavailable(
                    store,
                    format_args!("redis: the replicas' acknowledgement failed: {e}"),
                ));
            }
        };
        if acknowledged < i64::from(self.replica_acks) {
            return Err(super::StoreError::unavailable(
                store,
                "redis: no replica acknowledged the write in time",
            ));
        }
        self.still_there(key, written, store).await
    }

    /// Whether `key`, just written and acknowledged, is on the server that holds it now (and
    /// holds `written`, when given). A `WAIT` only counts what its own connection wrote: when
    /// a failover comes between the write and the `WAIT` (retried on the new master, over a
    /// new connection), the `WAIT` counts the new master's replicas while the write died with
    /// the old one. The key is then missing, or holds what it held before, and the write is
    /// refused rather than reported kept.
    async fn still_there(
        &self,
        key: &str,
        written: Option<&[u8]>,
        store: super::StoreKind,
    ) -> Result<(), super::StoreError> {
        let read = match written {
            Some(_) => redis::cmd("GET").arg(key).clone(),
            None => redis::cmd("EXISTS").arg(key).clone(),
        };
        let kept = |answer: &Value| match (written, answer) {
            (Some(bytes), Value::BulkString(stored)) => stored.as_slice() == bytes,
            (None, Value::Int(1)) => true,
            _ => false,
        };
        match self.on_master_of(key, read).await {
            Ok(answer) if kept(&answer) => Ok(()),
            Ok(_) => Err(super::StoreError::unavailable(
                store,
                "redis: the write was lost in a failover before its replicas acknowledged it",
            )),
            Err(e) => Err(super::StoreError::unavailable(
                store,
                format_args!("redis: the write could not be confirmed: {e}"),
            )),
        }
    }

    /// `command` (keyless, or naming `key`) sent once to the server that holds `key`: on a
    /// Cluster, the master of its slot.
    async fn on_master_of(&self, key: &str, command: Cmd) -> Result<Value, RedisError> {
        match &self.link {
            Link::Cluster(cluster) => {
                let route = Route::with_key(key, SlotAddr::Master);
                let mut cluster = cluster.clone();
                let routed = cluster.route_command(
                    command,
                    RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route)),
                );
                self.bounded(routed).await
            }
            _ => {
                let mut connection = self.clone();
                connection.send_once(&command).await
            }
        }
    }

    /// `sent`, within the bound if there is one.
    async fn bounded<T, F>(&self, sent: F) -> Result<T, RedisError>
    where
        F: std::future::Future<Output = Result<T, RedisError>>,
    {
        match self.bound {
            None => sent.await,
            Some(bound) => tokio::time::timeout(bound, sent)
                .await
                .unwrap_or_else(|_| Err(past_bound())),
        }
    }

    /// Sends `cmd` once, within the bound if there is one.
    async fn send_once(&mut self, cmd: &Cmd) -> Result<Value, RedisError> {
        match &mut self.link {
            Link::Server(manager) => {
                let mut manager = manager.clone();
                self.bounded(async move { manager.send_packed_command(cmd).await })
                    .await
            }
            Link::Cluster(cluster) => {
                let mut cluster = cluster.clone();
                self.bounded(async move { cluster.req_packed_command(cmd).await })
                    .await
            }
            Link::Sentinel(link) => {
                let link = link.clone();
                self.bounded(async move { link.send(cmd).await }).await
            }
        }
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
                Err(error) if worth_resending(&error) => {
                    // The link opens a fresh connection (or finds the new master) on this
                    // error; the command waits for it. The command itself is never logged.
                    tracing::debug!(target: "mcp_gate::redis", %error, "the Redis connection was gone or demoted; sending the command again");
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
        // A pipeline is not one atomic step: it is sent once. The stores send none; this is
        // for a caller that does, on one server.
        Box::pin(async move {
            let sent = async {
                match &self.link {
                    Link::Server(manager) => {
                        manager
                            .clone()
                            .send_packed_commands(pipeline, offset, count)
                            .await
                    }
                    Link::Cluster(cluster) => {
                        cluster
                            .clone()
                            .req_packed_commands(pipeline, offset, count)
                            .await
                    }
                    Link::Sentinel(_) => Err(RedisError::from((
                        ErrorKind::Client,
                        "pipelines are not sent through Sentinel by mcp-gate",
                    ))),
                }
            };
            self.bounded(sent).await
        })
    }

    fn get_db(&self) -> i64 {
        match &self.link {
            Link::Server(manager) => manager.get_db(),
            Link::Cluster(_) | Link::Sentinel(_) => 0,
        }
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
