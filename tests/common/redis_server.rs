//! A real `redis-server` for the tests that need one: started on a free loopback port, without
//! persistence; the tests skip (outside CI) when it is not installed.

use std::io::{Read, Write};
use std::net::TcpStream;
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

pub use super::ports::free_port;

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

/// Starts `redis-server` with `args`, without persistence, bound to loopback.
fn spawn(args: &[std::ffi::OsString]) -> std::io::Result<Child> {
    Command::new("redis-server")
        .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
        .arg("--dir")
        .arg(std::env::temp_dir())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
}

/// Waits until `port` takes connections (`ping`: and answers `PING`), or the server exits.
fn wait_until_up(child: &mut Child, port: u16, ping: bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        let up = if ping {
            answers_ping(port)
        } else {
            TcpStream::connect(("127.0.0.1", port)).is_ok()
        };
        if up {
            return true;
        }
        if let Ok(Some(_)) = child.try_wait() {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// Says why a test skips when `redis-server` is missing, outside CI; panics inside CI, and
/// on any other failure to start it.
fn skip_because(e: &std::io::Error) {
    if e.kind() != std::io::ErrorKind::NotFound {
        panic!("cannot start redis-server: {e}");
    }
    let reason = "redis-server is not installed (apt-get install redis-server, or run scripts/setup-peers.sh)";
    if std::env::var_os("CI").is_some() {
        panic!("CI is set and {reason}");
    }
    eprintln!("skipping the Redis test: {reason}");
}

fn plain_port(port: u16) -> Vec<std::ffi::OsString> {
    vec!["--port".into(), port.to_string().into()]
}

impl RedisServer {
    /// Starts a server, or explains why not: `None` (skip) outside CI when the binary is
    /// missing; a panic inside CI, or when it is there but will not start.
    pub fn start_or_skip() -> Option<Self> {
        for _attempt in 0..3 {
            let port = free_port();
            let child = match spawn(&plain_port(port)) {
                Ok(child) => child,
                Err(e) => {
                    skip_because(&e);
                    return None;
                }
            };
            let mut server = Self { child, port };
            if wait_until_up(&mut server.child, port, true) {
                return Some(server);
            }
            // Lost the port to someone else: try another.
            server.stop();
        }
        panic!("redis-server did not start on a loopback port");
    }

    /// A server that listens only with TLS, with the certificate and key in `dir`
    /// (`cert.pem`, `key.pem`); `None` (skip) outside CI when the binary is missing or was
    /// built without TLS.
    pub fn start_tls_or_skip(dir: &std::path::Path) -> Option<Self> {
        let port = free_port();
        let mut args = vec![
            "--port".into(),
            "0".into(),
            "--tls-port".into(),
            port.to_string().into(),
        ];
        for (flag, file) in [
            ("--tls-cert-file", "cert.pem"),
            ("--tls-key-file", "key.pem"),
            ("--tls-ca-cert-file", "cert.pem"),
        ] {
            args.push(flag.into());
            args.push(dir.join(file).into());
        }
        args.extend(["--tls-auth-clients".into(), "no".into()]);
        let child = match spawn(&args) {
            Ok(child) => child,
            Err(e) => {
                skip_because(&e);
                return None;
            }
        };
        let mut server = Self { child, port };
        if wait_until_up(&mut server.child, port, false) {
            return Some(server);
        }
        assert!(
            std::env::var_os("CI").is_none(),
            "CI is set and redis-server did not start with TLS"
        );
        eprintln!("skipping: this redis-server was built without TLS");
        None
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
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
            if let Ok(mut child) = spawn(&plain_port(self.port)) {
                if wait_until_up(&mut child, self.port, true) {
                    self.child = child;
                    return;
                }
                // The port is not free yet: try again.
                let _ = child.kill();
                let _ = child.wait();
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
