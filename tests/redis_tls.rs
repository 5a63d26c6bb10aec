//! `rediss://`: the Redis stores over TLS, against a real `redis-server` listening with TLS on
//! loopback and a certificate made for this test. The client trusts it through
//! `SSL_CERT_FILE`, as an operator points a host at a private CA; without that trust the
//! connection is refused, never made in the clear.
#![cfg(feature = "redis")]

mod common;

use std::time::{Duration, SystemTime};

use common::redis_server::RedisServer;
use mcp_gate::continuation::{FirstUse, RedisReplayStore, ReplayStore, StateUse};
use mcp_gate::store::StoreError;

#[tokio::test]
async fn replay_store_over_tls() {
    let dir = std::env::temp_dir().join(format!("mcp-gate-redis-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let certified =
        rcgen::generate_simple_self_signed(vec!["127.0.0.1".into(), "localhost".into()])
            .expect("a certificate");
    std::fs::write(dir.join("cert.pem"), certified.cert.pem()).unwrap();
    std::fs::write(dir.join("key.pem"), certified.signing_key.serialize_pem()).unwrap();
    let Some(redis) = RedisServer::start_tls_or_skip(&dir) else {
        return;
    };
    let url = format!("rediss://127.0.0.1:{}/", redis.port());

    // Not trusted: refused, never a connection in the clear.
    // SAFETY (of the test): this binary has this one test, so no other thread reads the
    // environment while it changes.
    unsafe { std::env::set_var("SSL_CERT_FILE", dir.join("missing.pem")) };
    assert!(matches!(
        RedisReplayStore::new(&url, "tls-test").await,
        Err(StoreError::Unavailable { .. })
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
