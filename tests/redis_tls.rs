//! `rediss://`: the Redis stores over TLS, against a real `redis-server` listening with TLS on
//! loopback and a certificate made for this test. The client trusts it through
//! `SSL_CERT_FILE`, as an operator points a host at a private CA; without that trust the
//! connection is refused, never made in the clear.
#![cfg(feature = "redis")]

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use mcp_gate::continuation::{FirstUse, RedisReplayStore, ReplayError, ReplayStore, StateUse};

struct TlsRedis {
    child: Child,
    port: u16,
}

impl Drop for TlsRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// A TLS-only `redis-server` with `cert` and `key`, or `None` (skip outside CI) when the
/// binary is missing or was built without TLS.
fn start(dir: &std::path::Path) -> Option<TlsRedis> {
    let port = free_port();
    let spawned = Command::new("redis-server")
        .args([
            "--port",
            "0",
            "--tls-port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
        ])
        .arg("--tls-cert-file")
        .arg(dir.join("cert.pem"))
        .arg("--tls-key-file")
        .arg(dir.join("key.pem"))
        .arg("--tls-ca-cert-file")
        .arg(dir.join("cert.pem"))
        .args([
            "--tls-auth-clients",
            "no",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .arg("--dir")
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
    let child = match spawned {
        Ok(child) => child,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI is set and redis-server is missing"
            );
            eprintln!("skipping: redis-server is not installed");
            return None;
        }
        Err(e) => panic!("cannot start redis-server: {e}"),
    };
    let mut server = TlsRedis { child, port };
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Some(server);
        }
        if let Ok(Some(_)) = server.child.try_wait() {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI is set and redis-server did not start with TLS"
            );
            eprintln!("skipping: this redis-server was built without TLS");
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("redis-server with TLS did not start");
}

#[tokio::test]
async fn replay_store_over_tls() {
    let dir = std::env::temp_dir().join(format!("mcp-gate-redis-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let certified =
        rcgen::generate_simple_self_signed(vec!["127.0.0.1".into(), "localhost".into()])
            .expect("a certificate");
    std::fs::write(dir.join("cert.pem"), certified.cert.pem()).unwrap();
    std::fs::write(dir.join("key.pem"), certified.signing_key.serialize_pem()).unwrap();
    let Some(redis) = start(&dir) else {
        return;
    };
    let url = format!("rediss://127.0.0.1:{}/", redis.port);

    // Not trusted: refused, never a connection in the clear.
    // SAFETY (of the test): this binary has this one test, so no other thread reads the
    // environment while it changes.
    unsafe { std::env::set_var("SSL_CERT_FILE", dir.join("missing.pem")) };
    assert!(matches!(
        RedisReplayStore::new(&url, "tls-test").await,
        Err(ReplayError::Unavailable(_))
    ));

    // Trusted (the host's CA file names this certificate): the store works over TLS.
    unsafe { std::env::set_var("SSL_CERT_FILE", dir.join("cert.pem")) };
    let store = RedisReplayStore::new(&url, "tls-test")
        .await
        .expect("rediss connects");
    let (now, until) = (
        SystemTime::now(),
        SystemTime::now() + Duration::from_secs(60),
    );
    assert_eq!(
        store
            .first_use(StateUse::new("alice", "n1", now, until))
            .await,
        Ok(FirstUse::Yes)
    );
    assert_eq!(
        store
            .first_use(StateUse::new("alice", "n1", now, until))
            .await,
        Ok(FirstUse::AlreadyUsed)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
