//! Real Redis topologies for the store suites: a Redis Cluster of three masters and three
//! replicas made with `redis-cli --cluster create`, and a master with two replicas watched by
//! three `redis-sentinel`s. Every process binds 127.0.0.1, keeps nothing on disk but the
//! cluster's and sentinels' own configuration (in a directory of its own), and is killed when
//! the topology is dropped. Outside CI, a missing binary skips the test; inside CI it fails.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::redis_server::free_port;

/// One `redis-server` (or `redis-sentinel`) process of a topology.
struct Node {
    port: u16,
    args: Vec<String>,
    program: &'static str,
    child: Option<Child>,
}

impl Node {
    fn start(program: &'static str, port: u16, args: Vec<String>) -> Option<Self> {
        let mut node = Self {
            port,
            args,
            program,
            child: None,
        };
        node.spawn()?;
        Some(node)
    }

    fn spawn(&mut self) -> Option<()> {
        let child = Command::new(self.program)
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        match child {
            Ok(child) => {
                self.child = Some(child);
                Some(())
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let reason = format!(
                    "{} is not installed (run scripts/setup-peers.sh)",
                    self.program
                );
                assert!(std::env::var_os("CI").is_none(), "CI is set and {reason}");
                eprintln!("skipping: {reason}");
                None
            }
            Err(e) => panic!("cannot start {}: {e}", self.program),
        }
    }

    /// Stops (SIGSTOP) or resumes (SIGCONT) the process: a server that stops answering
    /// without closing its connections.
    fn freeze(&self, frozen: bool) {
        if let Some(child) = &self.child {
            let signal = if frozen { "-STOP" } else { "-CONT" };
            let _ = Command::new("kill")
                .args([signal, &child.id().to_string()])
                .status();
        }
    }

    /// Kills the process at once (SIGKILL): no shutdown, no last write.
    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Runs `redis-cli` with `args` against `port`, and returns what it printed.
pub fn cli(port: u16, args: &[&str]) -> String {
    let output = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .output()
        .expect("redis-cli runs");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// A `redis-server` on loopback `port`, without persistence, its files in `dir`, syncing
/// replicas at once (no diskless-sync delay).
fn server_args(dir: &Path, port: u16) -> Vec<String> {
    let dir = dir.display().to_string();
    [
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
        "--repl-diskless-sync-delay",
        "0",
        "--dir",
        &dir,
        "--port",
    ]
    .iter()
    .map(|arg| (*arg).to_owned())
    .chain([port.to_string()])
    .collect()
}

/// How many replicas of the server at `port` have finished their first sync (a replica that
/// is still syncing is connected, but acknowledges nothing yet).
pub fn online_replicas(port: u16) -> usize {
    cli(port, &["INFO", "replication"])
        .lines()
        .filter(|line| line.starts_with("slave") && line.contains("state=online"))
        .count()
}

fn wait_for(what: &str, within: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if done() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("timed out waiting for {what}");
}

fn scratch_dir(kind: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "mcp-gate-{kind}-{}-{}",
        std::process::id(),
        free_port()
    ));
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    dir
}

/// Two free ports `p` such that `p + 10000` (the cluster bus) is free too.
fn cluster_port() -> u16 {
    loop {
        let port = free_port();
        if port < 55_000 && std::net::TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok() {
            return port;
        }
    }
}

/// A Redis Cluster: three masters, one replica each, on loopback.
pub struct RedisCluster {
    nodes: Vec<Node>,
    dir: PathBuf,
}

impl RedisCluster {
    /// Starts six nodes and joins them with `redis-cli --cluster create`; `None` (skip)
    /// outside CI when `redis-server` is missing.
    pub fn start_or_skip() -> Option<Self> {
        let dir = scratch_dir("cluster");
        let mut nodes = Vec::new();
        for _ in 0..6 {
            let port = cluster_port();
            let args = Self::node_args(&dir, port);
            nodes.push(Node::start("redis-server", port, args)?);
        }
        for node in &nodes {
            wait_for("a cluster node", Duration::from_secs(10), || {
                cli(node.port, &["PING"]).trim() == "PONG"
            });
        }
        let addresses: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let mut create = Command::new("redis-cli");
        create
            .arg("--cluster")
            .arg("create")
            .args(&addresses)
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        assert!(
            create.status().expect("redis-cli runs").success(),
            "redis-cli --cluster create failed"
        );
        let cluster = Self { nodes, dir };
        cluster.wait_until_whole();
        Some(cluster)
    }

    fn node_args(dir: &Path, port: u16) -> Vec<String> {
        let mut args = server_args(dir, port);
        for (flag, value) in [
            ("--cluster-enabled", "yes".to_owned()),
            ("--cluster-config-file", format!("nodes-{port}.conf")),
            // Short enough for a quick failover, long enough that a busy test machine does
            // not fail a node over by itself.
            ("--cluster-node-timeout", "2000".to_owned()),
        ] {
            args.extend([flag.to_owned(), value]);
        }
        args
    }

    /// Waits until every live node says the cluster is whole and every master has a replica.
    /// A minute: six nodes agreeing and three replicas syncing took over 30 s once on a
    /// two-core machine running the rest of the suite beside them.
    pub fn wait_until_whole(&self) {
        wait_for("the cluster to be whole", Duration::from_secs(60), || {
            self.nodes
                .iter()
                .filter(|n| n.child.is_some())
                .all(|n| cli(n.port, &["CLUSTER", "INFO"]).contains("cluster_state:ok"))
                && self.masters().len() == 3
                && self.masters().iter().all(|m| self.has_replica(m))
        });
    }

    /// `redis://127.0.0.1:<port>/` of the first node: enough to find the whole cluster.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.nodes[0].port)
    }

    /// Each live master that serves slots, as a live node sees the cluster: its port and
    /// slot ranges.
    fn slot_owners(&self) -> Vec<(u16, Vec<(u16, u16)>)> {
        let Some(live) = self.nodes.iter().find(|n| n.child.is_some()) else {
            return Vec::new();
        };
        cli(live.port, &["CLUSTER", "NODES"])
            .lines()
            .filter_map(|line| {
                let fields: Vec<&str> = line.split_whitespace().collect();
                let flags = fields.get(2)?;
                // `fail?` (one node's suspicion) is not `fail` (the cluster's verdict).
                if !flags.split(',').any(|f| f == "master") || flags.split(',').any(|f| f == "fail")
                {
                    return None;
                }
                let port = fields.get(1)?.split(['@', ':']).nth(1)?.parse().ok()?;
                let ranges: Vec<(u16, u16)> = fields
                    .iter()
                    .skip(8)
                    .filter_map(|range| {
                        let (low, high) = range.split_once('-').unwrap_or((range, range));
                        Some((low.parse().ok()?, high.parse().ok()?))
                    })
                    .collect();
                (!ranges.is_empty()).then_some((port, ranges))
            })
            .collect()
    }

    /// The ports of the live masters that serve slots.
    pub fn masters(&self) -> Vec<u16> {
        self.slot_owners()
            .into_iter()
            .map(|(port, _)| port)
            .collect()
    }

    fn has_replica(&self, master: &u16) -> bool {
        online_replicas(*master) >= 1
    }

    /// The port of the live master that serves `key`, as the cluster sees it now.
    pub fn master_of(&self, key: &str) -> Option<u16> {
        let live = self.nodes.iter().find(|n| n.child.is_some())?;
        let slot: u16 = cli(live.port, &["CLUSTER", "KEYSLOT", key])
            .trim()
            .parse()
            .ok()?;
        self.slot_owners()
            .into_iter()
            .find(|(_, ranges)| {
                ranges
                    .iter()
                    .any(|(low, high)| (*low..=*high).contains(&slot))
            })
            .map(|(port, _)| port)
    }

    /// Kills the master at `port` (SIGKILL), as a crash would.
    pub fn kill(&mut self, port: u16) {
        let node = self
            .nodes
            .iter_mut()
            .find(|n| n.port == port)
            .expect("a node of the cluster");
        node.kill();
    }

    /// Starts the killed node at `port` again, with its cluster configuration: it rejoins as
    /// a replica of the master that took its place.
    pub fn restart(&mut self, port: u16) {
        let node = self
            .nodes
            .iter_mut()
            .find(|n| n.port == port)
            .expect("a node of the cluster");
        node.spawn().expect("the node starts again");
    }

    /// Waits until a master other than `port` serves `key` and the cluster is whole again
    /// (but for the node that is down).
    pub fn wait_for_failover(&self, port: u16, key: &str) {
        wait_for("a replica to take over", Duration::from_secs(30), || {
            let live = self
                .nodes
                .iter()
                .find(|n| n.child.is_some() && n.port != port);
            live.is_some_and(|n| cli(n.port, &["CLUSTER", "INFO"]).contains("cluster_state:ok"))
                && self.master_of(key).is_some_and(|now| now != port)
        });
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        self.nodes.clear();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A master with two replicas, watched by three sentinels (quorum 2) under the name `main`.
pub struct RedisSentinels {
    servers: Vec<Node>,
    sentinels: Vec<Node>,
    dir: PathBuf,
}

impl RedisSentinels {
    /// The master's name as the sentinels know it.
    pub const SERVICE: &'static str = "main";

    /// Starts the master, its replicas and the sentinels, and waits until the sentinels
    /// agree; `None` (skip) outside CI when a binary is missing.
    pub fn start_or_skip() -> Option<Self> {
        let dir = scratch_dir("sentinel");
        let master = free_port();
        let mut servers = vec![Node::start(
            "redis-server",
            master,
            Self::server_args(&dir, master, None),
        )?];
        for _ in 0..2 {
            let port = free_port();
            servers.push(Node::start(
                "redis-server",
                port,
                Self::server_args(&dir, port, Some(master)),
            )?);
        }
        wait_for("the replicas to sync", Duration::from_secs(15), || {
            online_replicas(master) == 2
        });
        let mut sentinels = Vec::new();
        for _ in 0..3 {
            let port = free_port();
            let conf = dir.join(format!("sentinel-{port}.conf"));
            std::fs::write(
                &conf,
                format!(
                    "port {port}\nbind 127.0.0.1\ndir {dir}\n\
                     sentinel monitor {name} 127.0.0.1 {master} 2\n\
                     sentinel down-after-milliseconds {name} 2000\n\
                     sentinel failover-timeout {name} 5000\n\
                     sentinel parallel-syncs {name} 2\n",
                    dir = dir.display(),
                    name = Self::SERVICE,
                ),
            )
            .expect("a sentinel configuration");
            sentinels.push(Node::start(
                "redis-sentinel",
                port,
                vec![conf.display().to_string()],
            )?);
        }
        let topology = Self {
            servers,
            sentinels,
            dir,
        };
        wait_for("the sentinels to agree", Duration::from_secs(30), || {
            topology.sentinels.iter().all(|s| {
                cli(s.port, &["SENTINEL", "CKQUORUM", Self::SERVICE]).starts_with("OK")
                    && cli(s.port, &["SENTINEL", "REPLICAS", Self::SERVICE])
                        .matches("127.0.0.1")
                        .count()
                        >= 2
            })
        });
        Some(topology)
    }

    fn server_args(dir: &Path, port: u16, replica_of: Option<u16>) -> Vec<String> {
        let mut args = server_args(dir, port);
        if let Some(master) = replica_of {
            args.extend(["--replicaof".into(), "127.0.0.1".into(), master.to_string()]);
        }
        args
    }

    /// `redis://127.0.0.1:<port>/` of each sentinel.
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels
            .iter()
            .map(|s| format!("redis://127.0.0.1:{}/", s.port))
            .collect()
    }

    /// `redis+sentinel://` naming the three sentinels and the master.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .sentinels
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.port))
            .collect();
        format!("redis+sentinel://{}/{}", hosts.join(","), Self::SERVICE)
    }

    /// The port of the master the sentinels name now.
    pub fn master(&self) -> u16 {
        let answer = cli(
            self.sentinels[0].port,
            &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", Self::SERVICE],
        );
        answer
            .lines()
            .nth(1)
            .and_then(|port| port.trim().parse().ok())
            .expect("the sentinels name a master")
    }

    /// Kills the master (SIGKILL), as a crash would; returns its port.
    pub fn kill_master(&mut self) -> u16 {
        let port = self.master();
        let node = self
            .servers
            .iter_mut()
            .find(|n| n.port == port)
            .expect("the master is one of ours");
        node.kill();
        port
    }

    /// Stops (or resumes) every server but the master: replicas that acknowledge nothing.
    pub fn freeze_replicas(&self, frozen: bool) {
        let master = self.master();
        for server in self.servers.iter().filter(|s| s.port != master) {
            server.freeze(frozen);
        }
    }

    /// Waits until the sentinels name a master other than `old` and it has a replica.
    pub fn wait_for_failover(&self, old: u16) {
        wait_for(
            "the sentinels to promote a replica",
            Duration::from_secs(30),
            || {
                let now = self.master();
                now != old
                    && cli(now, &["INFO", "replication"]).contains("role:master")
                    && online_replicas(now) >= 1
            },
        );
    }

    /// Starts the killed server at `port` again (empty): the sentinels make it a replica of
    /// the new master.
    pub fn restart(&mut self, port: u16) {
        let node = self
            .servers
            .iter_mut()
            .find(|n| n.port == port)
            .expect("a server of ours");
        node.spawn().expect("the server starts again");
    }
}

impl Drop for RedisSentinels {
    fn drop(&mut self) {
        self.sentinels.clear();
        self.servers.clear();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
