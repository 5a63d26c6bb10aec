//! A real `redis-server` for the tests that need one: started on a free loopback port, without
//! persistence; the tests skip (outside CI) when it is not installed.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mcp_gate::tasks::{RedisTaskStore, TaskStore};

/// A `redis-server` this test started, without persistence, on a free loopback port;
/// killed when dropped.
pub struct RedisServer {
    child: Child,
    port: u16,
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

fn answers_ping(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
    let mut reply = [0u8; 7];
    stream.write_all(b"PING\r\n").is_ok()
        && stream.read_exact(&mut reply).is_ok()
        && &reply == b"+PONG\r\n"
}

impl RedisServer {
    /// Starts a server, or explains why not: `None` (skip) outside CI when the binary is
    /// missing; a panic inside CI, or when it is there but will not start.
    pub fn start_or_skip() -> Option<Self> {
        for _attempt in 0..3 {
            let port = free_port();
            let spawned = Command::new("redis-server")
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no"])
                .arg("--dir")
                .arg(std::env::temp_dir())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn();
            let child = match spawned {
                Ok(child) => child,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    let reason = "redis-server is not installed (apt-get install redis-server, \
                                  or run scripts/setup-peers.sh)";
                    if std::env::var_os("CI").is_some() {
                        panic!("CI is set and {reason}");
                    }
                    eprintln!("skipping the Redis task store test: {reason}");
                    return None;
                }
                Err(e) => panic!("cannot start redis-server: {e}"),
            };
            let mut server = Self { child, port };
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if answers_ping(port) {
                    return Some(server);
                }
                if let Ok(Some(_)) = server.child.try_wait() {
                    break; // Lost the port to someone else: try another.
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            server.stop();
        }
        panic!("redis-server did not start on a loopback port");
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub async fn store(&self, namespace: &str) -> Arc<dyn TaskStore> {
        Arc::new(self.redis_store(namespace).await)
    }

    pub async fn redis_store(&self, namespace: &str) -> RedisTaskStore {
        RedisTaskStore::new(&self.url(), namespace).await.unwrap()
    }

    pub async fn raw(&self) -> redis::aio::MultiplexedConnection {
        redis::Client::open(self.url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap()
    }

    /// Starts a new server on the same port, without the old one's data (as a Redis without
    /// persistence comes back after a crash).
    pub fn restart(&mut self) {
        self.stop();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(child) = Command::new("redis-server")
                .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no"])
                .arg("--dir")
                .arg(std::env::temp_dir())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
            {
                self.child = child;
                let up = Instant::now() + Duration::from_secs(5);
                while Instant::now() < up {
                    if answers_ping(self.port) {
                        return;
                    }
                    if let Ok(Some(_)) = self.child.try_wait() {
                        break; // The port is not free yet: try again.
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("redis-server did not restart on port {}", self.port);
    }

    /// Kills the server now.
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}
