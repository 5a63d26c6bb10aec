//! Revocation (`docs/revocation.md`): two real gateway replicas sharing one real
//! `redis-server` through `RedisRevocations`, each with its own inner rmcp server, and tokens
//! minted by the test key the replicas trust.
//!
//! - revoked on A, refused on B (cached there beforehand), within a bounded poll; a grant
//!   given again (a token issued after the revocation) is accepted;
//! - a replica cut off from Redis (a TCP relay the test closes) while a revocation is made
//!   catches up when the relay opens again;
//! - a feed outage, in each mode: `Refuse` answers 503 until the feed is back, `AcceptStale`
//!   serves within its bound and then answers 503;
//! - a held task whose owner was revoked does not run, and one made under the grant given
//!   again does; a confirmation state issued before the owner's revocation is refused, one
//!   issued after it confirms (memory set, one gate);
//! - the shared set's bound, counted for every replica: refused when full, room again once an
//!   entry expired;
//! - the axum route: a revocation by JSON body; a body it cannot read is refused.
//!
//! The figure (p99 of the time from `revoke` on A to a refusal on B) is measured by
//! `benches/revocation.rs`, not here: these tests check behaviour, with generous bounds.
//!
//! Without a `redis-server` binary the Redis tests print why and pass, unless `CI` is set.

use crate::common;

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use common::clients::demo_gate;
use common::modern::{ModernRequest, modern, tasks_capabilities};
use common::peers::{GatedServer, Reply};
use common::tokens::{TestKey, claims, now};
use common::tools::{DeployCount, mcp_service_counting};
use mcp_gate::audit::{AuditRecord, AuditSink};
use mcp_gate::auth::Revocation;
use mcp_gate::revocation::{FeedOutage, RevokeError};
use mcp_gate::store::revocations::MemoryRevocations;
use mcp_gate::{GateBuilder, Issuer, StaticKeys};
use serde_json::{Value, json};
use tokio::sync::Mutex;

const ISSUER: &str = "https://as.example";
const RESOURCE: &str = "http://127.0.0.1:9/mcp";
/// The longest any one test may take.
const TEST_LIMIT: Duration = Duration::from_secs(120);
/// The longest a poll for an expected change may take (a busy 2-core machine included).
const POLL_LIMIT: Duration = Duration::from_secs(30);

async fn bounded<F: Future>(what: &str, body: F) -> F::Output {
    tokio::time::timeout(TEST_LIMIT, body)
        .await
        .unwrap_or_else(|_| panic!("{what} did not finish within {TEST_LIMIT:?}"))
}

/// A token of `subject` (issued now, unless `iat` says otherwise), with a `jti`.
fn token(key: &TestKey, subject: &str, jti: &str, iat: Option<u64>) -> String {
    let mut claims = claims(ISSUER, RESOURCE, "mcp:read");
    claims["sub"] = json!(subject);
    claims["jti"] = json!(jti);
    if let Some(iat) = iat {
        claims["iat"] = json!(iat);
    }
    key.mint(&claims)
}

const PING: &str = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;

async fn ping(server: &GatedServer, token: &str) -> Reply {
    server.post(Some(token), &[], PING).await
}

/// Polls `server` with `token` until its status is `want`, at most [`POLL_LIMIT`]; the last
/// reply.
async fn poll_until(server: &GatedServer, token: &str, want: u16) -> Reply {
    let started = Instant::now();
    loop {
        let reply = ping(server, token).await;
        if reply.status == want || started.elapsed() > POLL_LIMIT {
            return reply;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn www_authenticate(reply: &Reply) -> String {
    reply
        .headers
        .get("www-authenticate")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}

fn gate_with(key: &TestKey) -> GateBuilder {
    let keys = StaticKeys::from_jwks_json(&key.jwks_json()).unwrap();
    demo_gate(RESOURCE).issuer(Issuer::with_keys(ISSUER, keys))
}

// ---------------------------------------------------------------------------------------------
// One gate, a memory set
// ---------------------------------------------------------------------------------------------

async fn memory_gate(key: &TestKey, deploys: DeployCount) -> GatedServer {
    audited_memory_gate(key, deploys, |_: &AuditRecord| {}).await
}

/// [`memory_gate`], its audit records given to `sink`.
async fn audited_memory_gate(
    key: &TestKey,
    deploys: DeployCount,
    sink: impl AuditSink,
) -> GatedServer {
    let builder = gate_with(key)
        .audit(sink)
        .revocations(MemoryRevocations::new(100))
        .task_poll_interval(Duration::from_millis(50));
    GatedServer::start_replica(
        RESOURCE,
        move |_| builder,
        Router::new().nest_service("/mcp", mcp_service_counting(deploys)),
    )
    .await
}

#[tokio::test]
async fn each_kind_of_revocation_refuses_a_cached_token_and_a_later_grant_is_accepted() {
    bounded("memory revocations", async {
        let key = TestKey::es256("k1");
        let server = memory_gate(&key, DeployCount::default()).await;
        let kinds = [
            (
                "a",
                Revocation::token(&token(&key, "a", "ja", Some(now() - 5)), None),
            ),
            ("b", Revocation::jti(ISSUER, "jb", Some(now() + 300))),
            ("c", Revocation::subject(ISSUER, "c")),
        ];
        for (subject, revocation) in kinds {
            let old = token(&key, subject, &format!("j{subject}"), Some(now() - 5));
            // Accepted, and so cached.
            assert_eq!(ping(&server, &old).await.status, 200);
            server.gate.revoke(revocation).await.unwrap();
            let refused = ping(&server, &old).await;
            assert_eq!(refused.status, 401, "{subject}: {refused:?}");
            assert!(
                www_authenticate(&refused).contains(r#"error="invalid_token""#),
                "{refused:?}"
            );
            // Another token of another user is not touched.
            let other = token(&key, "someone-else", "jx", None);
            assert_eq!(ping(&server, &other).await.status, 200);
        }
        // A client revocation: every token of client-1 issued until now.
        let before = token(&key, "d", "jd", Some(now() - 5));
        server
            .gate
            .revoke(Revocation::client(ISSUER, "client-1"))
            .await
            .unwrap();
        assert_eq!(ping(&server, &before).await.status, 401);
        // A grant given again: issued in a later second than the revocation.
        let again = token(&key, "d", "jd2", Some(now() + 2));
        assert_eq!(ping(&server, &again).await.status, 200);
        // Nothing empty is revoked.
        assert_eq!(
            server.gate.revoke(Revocation::subject(ISSUER, "")).await,
            Err(RevokeError::Invalid)
        );
    })
    .await;
}

#[tokio::test]
async fn a_gate_without_revocation_says_so() {
    let key = TestKey::es256("k1");
    let server = GatedServer::start_replica(
        RESOURCE,
        |_| gate_with(&key),
        Router::new().nest_service("/mcp", mcp_service_counting(DeployCount::default())),
    )
    .await;
    assert_eq!(
        server.gate.revoke(Revocation::subject(ISSUER, "x")).await,
        Err(RevokeError::NotConfigured)
    );
}

fn deploy(id: u64, env: &str) -> ModernRequest {
    modern(
        id,
        "tools/call",
        json!({"name": "deploy", "arguments": {"env": env}}),
        "deploy",
        tasks_capabilities(),
    )
}

async fn send(server: &GatedServer, token: &str, request: &ModernRequest) -> Reply {
    let headers: Vec<(&str, &str)> = request.1.iter().map(|(k, v)| (*k, v.as_str())).collect();
    server.post(Some(token), &headers, &request.0).await
}

#[tokio::test]
async fn a_held_task_whose_owner_was_revoked_does_not_run() {
    bounded("held task", async {
        let key = TestKey::es256("k1");
        let deploys = DeployCount::default();
        let approvals = Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = Arc::clone(&approvals);
        let sink = move |record: &AuditRecord| {
            let data = record.data();
            if data.phase == "approval" {
                let row = (data.decision, data.refusal, data.task_id.clone());
                seen.lock().expect("records").push(row);
            }
        };
        let server = audited_memory_gate(&key, deploys.clone(), sink).await;
        let old = token(&key, "alice", "j1", Some(now() - 5));
        let held = send(&server, &old, &deploy(1, "prod")).await;
        assert_eq!(held.body["result"]["resultType"], "task", "{held:?}");
        let id = held.body["result"]["taskId"].as_str().unwrap().to_owned();

        server
            .gate
            .revoke(Revocation::subject(ISSUER, "alice"))
            .await
            .unwrap();
        server.gate.tasks().approve(&id, "ops").await.unwrap();
        // The old token is refused outright.
        let poll = modern(
            7,
            "tasks/get",
            json!({"taskId": id}),
            &id,
            tasks_capabilities(),
        );
        assert_eq!(send(&server, &old, &poll).await.status, 401);
        // Alice, granted again later, polls: the task made under the revoked grant does not run.
        let again = token(&key, "alice", "j2", Some(now() + 2));
        let answer = send(&server, &again, &poll).await;
        assert_eq!(answer.status, 200, "{answer:?}");
        let result = &answer.body["result"];
        assert_eq!(result["status"], "completed", "{answer:?}");
        assert!(
            result.to_string().contains("its owner's grant was revoked"),
            "{answer:?}"
        );
        assert_eq!(deploys.load(Ordering::SeqCst), 0, "the held call ran");
        // Refused by the one decision point: one approval-phase decision, refused unasked.
        assert_eq!(
            *approvals.lock().expect("records"),
            [("refused", Some("owner_revoked"), Some(id.clone()))],
        );

        // A task made by the grant given again runs once approved.
        let fresh = send(&server, &again, &deploy(2, "qa")).await;
        let fresh_id = fresh.body["result"]["taskId"].as_str().unwrap().to_owned();
        server.gate.tasks().approve(&fresh_id, "ops").await.unwrap();
        let poll = modern(
            8,
            "tasks/get",
            json!({"taskId": fresh_id}),
            &fresh_id,
            tasks_capabilities(),
        );
        let ran = send(&server, &again, &poll).await;
        assert_eq!(ran.body["result"]["status"], "completed", "{ran:?}");
        assert_eq!(deploys.load(Ordering::SeqCst), 1);
    })
    .await;
}

#[tokio::test]
async fn a_continuation_state_issued_before_its_owners_revocation_is_refused() {
    use common::confirm::{confirm_deploys, confirmed, deploy};
    bounded("continuation state", async {
        let key = TestKey::es256("k1");
        let deploys = DeployCount::default();
        let keys = StaticKeys::from_jwks_json(&key.jwks_json()).unwrap();
        let builder = mcp_gate::Gate::builder()
            .issuer(Issuer::with_keys(ISSUER, keys))
            .evaluate(confirm_deploys)
            .revocations(MemoryRevocations::new(10));
        let server = GatedServer::start_replica(
            RESOURCE,
            move |_| builder,
            Router::new().nest_service("/mcp", mcp_service_counting(deploys.clone())),
        )
        .await;
        let state_of = |reply: &Reply| {
            reply.body["result"]["requestState"]
                .as_str()
                .unwrap_or_else(|| panic!("no state: {reply:?}"))
                .to_owned()
        };
        let old = token(&key, "dave", "j1", Some(now() - 5));
        let asked = deploy(&server, &old, json!({})).await;
        let before = state_of(&asked);
        server
            .gate
            .revoke(Revocation::subject(ISSUER, "dave"))
            .await
            .unwrap();
        // Dave, granted again, presents the state issued before the revocation: refused.
        let again = token(&key, "dave", "j2", Some(now() + 2));
        let refused = deploy(&server, &again, confirmed(&before)).await;
        assert_eq!(refused.body["error"]["code"], -32602, "{refused:?}");
        assert!(
            refused
                .text
                .contains("before its owner's grant was revoked"),
            "{refused:?}"
        );
        assert_eq!(deploys.load(Ordering::SeqCst), 0);
        // A state issued to the new grant confirms.
        let after = state_of(&deploy(&server, &again, json!({})).await);
        let ran = deploy(&server, &again, confirmed(&after)).await;
        assert_eq!(ran.status, 200, "{ran:?}");
        assert_eq!(deploys.load(Ordering::SeqCst), 1, "{ran:?}");
    })
    .await;
}

#[cfg(feature = "axum")]
#[tokio::test]
async fn the_route_revokes_by_json_body_and_refuses_what_it_cannot_read() {
    bounded("route", async {
        let key = TestKey::es256("k1");
        let server = memory_gate(&key, DeployCount::default()).await;
        let internal = Router::new().route(
            "/revoke",
            mcp_gate::revocation::handler::route(server.gate.clone()),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/revoke", listener.local_addr().unwrap());
        tokio::spawn(async move {
            let _ = axum::serve(listener, internal).await;
        });
        let old = token(&key, "route-user", "jr", Some(now() - 5));
        assert_eq!(ping(&server, &old).await.status, 200);
        let client = reqwest::Client::new();
        let post = |body: String| {
            client
                .post(&url)
                .header("content-type", "application/json")
                .body(body)
                .send()
        };
        let answer =
            post(json!({"by": "subject", "issuer": ISSUER, "subject": "route-user"}).to_string())
                .await
                .unwrap();
        assert_eq!(answer.status(), 200);
        assert_eq!(answer.headers()["cache-control"], "no-store");
        let body: Value = answer.json().await.unwrap();
        assert_eq!(body["revoked"], true, "{body}");
        assert_eq!(ping(&server, &old).await.status, 401);
        for bad in [
            r#"{"by":"everyone"}"#.to_owned(),
            r#"{"by":"subject","issuer":"x"}"#.to_owned(),
            "not json".to_owned(),
        ] {
            let answer = post(bad.clone()).await.unwrap();
            assert_eq!(answer.status(), 400, "{bad}");
            let body: Value = answer.json().await.unwrap();
            assert_eq!(body["error"], "invalid_body", "{bad}");
        }
        let empty = post(json!({"by": "client", "issuer": ISSUER, "client_id": ""}).to_string())
            .await
            .unwrap();
        assert_eq!(empty.status(), 400);
    })
    .await;
}

// ---------------------------------------------------------------------------------------------
// Two replicas, one Redis
// ---------------------------------------------------------------------------------------------

#[cfg(feature = "redis")]
mod replicas {
    use super::*;
    use common::redis_server::RedisServer;
    use mcp_gate::store::revocations::{RedisRevocations, RevocationEntry, RevocationStore};
    use mcp_gate::store::{StoreError, StoreKind};

    /// A TCP relay to Redis that the test can close (every connection through it dropped,
    /// new ones refused) and open again.
    struct Relay {
        port: u16,
        open: Arc<AtomicBool>,
        links: Arc<Mutex<Vec<tokio::task::JoinHandle<()>>>>,
    }

    impl Relay {
        async fn start(upstream: u16) -> Self {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let port = listener.local_addr().unwrap().port();
            let open = Arc::new(AtomicBool::new(true));
            let links = Arc::new(Mutex::new(Vec::new()));
            let (is_open, held) = (open.clone(), links.clone());
            tokio::spawn(async move {
                while let Ok((mut client, _)) = listener.accept().await {
                    if !is_open.load(Ordering::SeqCst) {
                        drop(client);
                        continue;
                    }
                    let link = tokio::spawn(async move {
                        if let Ok(mut server) =
                            tokio::net::TcpStream::connect(("127.0.0.1", upstream)).await
                        {
                            let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                        }
                    });
                    held.lock().await.push(link);
                }
            });
            Self { port, open, links }
        }

        fn url(&self) -> String {
            format!("redis://127.0.0.1:{}/", self.port)
        }

        async fn close(&self) {
            self.open.store(false, Ordering::SeqCst);
            for link in self.links.lock().await.drain(..) {
                link.abort();
            }
        }

        fn reopen(&self) {
            self.open.store(true, Ordering::SeqCst);
        }
    }

    async fn replica(key: &TestKey, url: &str, namespace: &str, outage: FeedOutage) -> GatedServer {
        let set = RedisRevocations::new(url, namespace, 1000).await.unwrap();
        let builder = gate_with(key)
            .revocations(set)
            .revocation_feed_outage(outage);
        let server = GatedServer::start_replica(
            RESOURCE,
            move |_| builder,
            Router::new().nest_service("/mcp", mcp_service_counting(DeployCount::default())),
        )
        .await;
        // The feed's first sync: until then the set counts as unreachable.
        let started = Instant::now();
        while !server.gate.readiness().await.is_ready() && started.elapsed() < POLL_LIMIT {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        server
    }

    #[tokio::test]
    async fn revoked_on_one_replica_refused_on_the_other() {
        let Some(redis) = RedisServer::start_or_skip() else {
            return;
        };
        bounded("two replicas", async {
            let key = TestKey::es256("k1");
            let a = replica(&key, &redis.url(), "rev", FeedOutage::Refuse).await;
            let b = replica(&key, &redis.url(), "rev", FeedOutage::Refuse).await;
            for (n, kind) in ["subject", "jti", "token_hash"].into_iter().enumerate() {
                let subject = format!("user-{n}");
                let jti = format!("jti-{n}");
                let old = token(&key, &subject, &jti, Some(now() - 5));
                // Cached on B before the revocation.
                assert_eq!(ping(&b, &old).await.status, 200);
                let revocation = match kind {
                    "subject" => Revocation::subject(ISSUER, &subject),
                    "jti" => Revocation::jti(ISSUER, &jti, Some(now() + 300)),
                    _ => Revocation::token(&old, Some(now() + 300)),
                };
                a.gate.revoke(revocation).await.unwrap();
                // A refuses at once (the revocation is in its copy before revoke returns).
                assert_eq!(ping(&a, &old).await.status, 401);
                let refused = poll_until(&b, &old, 401).await;
                assert_eq!(refused.status, 401, "{kind}: B never refused: {refused:?}");
                assert!(www_authenticate(&refused).contains("invalid_token"));
            }
            // A grant given again is accepted on both.
            let again = token(&key, "user-0", "jti-again", Some(now() + 2));
            assert_eq!(ping(&a, &again).await.status, 200);
            assert_eq!(ping(&b, &again).await.status, 200);
        })
        .await;
    }

    #[tokio::test]
    async fn the_shared_set_refuses_when_full_for_every_replica_and_makes_room_as_entries_expire() {
        let Some(redis) = RedisServer::start_or_skip() else {
            return;
        };
        bounded("full", async {
            let a = RedisRevocations::new(&redis.url(), "full", 2)
                .await
                .unwrap();
            let b = RedisRevocations::new(&redis.url(), "full", 2)
                .await
                .unwrap();
            let entry = |subject: &str, until_ms: u64| {
                let now_ms = now() * 1000;
                RevocationEntry::new(Revocation::subject(ISSUER, subject), now_ms, until_ms)
            };
            let later = now() * 1000 + 600_000;
            a.revoke(&entry("one", later)).await.unwrap();
            // Expires in about two seconds: room again after it.
            let soon = entry("two", now() * 1000 + 2_000);
            b.revoke(&soon).await.unwrap();
            let full = a.revoke(&entry("three", later)).await;
            assert_eq!(
                full,
                Err(StoreError::Full {
                    store: StoreKind::Revocations,
                    capacity: 2
                })
            );
            assert!(
                full.unwrap_err()
                    .to_string()
                    .contains("revocation set is full")
            );
            assert!(matches!(
                b.revoke(&entry("three", later)).await,
                Err(StoreError::Full { .. })
            ));
            let started = Instant::now();
            let mut stored = Err(StoreError::Taken);
            while started.elapsed() < POLL_LIMIT {
                stored = b.revoke(&entry("three", later)).await;
                if stored.is_ok() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            assert_eq!(stored, Ok(()), "no room after an entry expired");
        })
        .await;
    }

    #[tokio::test]
    async fn a_replica_cut_off_during_a_revocation_catches_up_when_it_reconnects() {
        let Some(redis) = RedisServer::start_or_skip() else {
            return;
        };
        bounded("catch-up", async {
            let key = TestKey::es256("k1");
            let relay = Relay::start(redis.port()).await;
            let a = replica(&key, &redis.url(), "catch", FeedOutage::Refuse).await;
            // B tolerates a long outage, so that it keeps serving while cut off.
            let stale = FeedOutage::AcceptStale(Duration::from_secs(600));
            let b = replica(&key, &relay.url(), "catch", stale).await;
            let old = token(&key, "mallory", "jm", Some(now() - 5));
            assert_eq!(ping(&b, &old).await.status, 200);

            relay.close().await;
            // B notices the loss (its feed is down), then the revocation is made on A.
            let started = Instant::now();
            while b.gate.readiness().await.is_ready() && started.elapsed() < POLL_LIMIT {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            assert!(
                !b.gate.readiness().await.is_ready(),
                "B never lost its feed"
            );
            a.gate
                .revoke(Revocation::subject(ISSUER, "mallory"))
                .await
                .unwrap();
            assert_eq!(ping(&a, &old).await.status, 401);
            // B missed it (cut off, serving within its staleness bound).
            tokio::time::sleep(Duration::from_millis(500)).await;
            assert_eq!(ping(&b, &old).await.status, 200, "B could not have known");

            relay.reopen();
            let refused = poll_until(&b, &old, 401).await;
            assert_eq!(refused.status, 401, "B did not catch up: {refused:?}");
            assert!(b.gate.readiness().await.is_ready());
        })
        .await;
    }

    #[tokio::test]
    async fn a_feed_outage_is_refused_when_configured_so() {
        let Some(redis) = RedisServer::start_or_skip() else {
            return;
        };
        bounded("refuse", async {
            let key = TestKey::es256("k1");
            let relay = Relay::start(redis.port()).await;
            let b = replica(&key, &relay.url(), "refuse", FeedOutage::Refuse).await;
            let user = token(&key, "bob", "jb", None);
            assert_eq!(ping(&b, &user).await.status, 200);
            relay.close().await;
            let refused = poll_until(&b, &user, 503).await;
            assert_eq!(refused.status, 503, "{refused:?}");
            assert_eq!(refused.headers["retry-after"], "1");
            let readiness = b.gate.readiness().await;
            assert!(
                readiness.to_string().contains("revocation_feed"),
                "{readiness}"
            );
            relay.reopen();
            assert_eq!(poll_until(&b, &user, 200).await.status, 200);
        })
        .await;
    }

    #[tokio::test]
    async fn a_feed_outage_is_served_within_its_staleness_bound_then_refused() {
        let Some(redis) = RedisServer::start_or_skip() else {
            return;
        };
        bounded("accept stale", async {
            let key = TestKey::es256("k1");
            let relay = Relay::start(redis.port()).await;
            let bound = FeedOutage::AcceptStale(Duration::from_secs(8));
            let b = replica(&key, &relay.url(), "stale", bound).await;
            let user = token(&key, "carol", "jc", None);
            assert_eq!(ping(&b, &user).await.status, 200);
            relay.close().await;
            // Within the bound: served from the copy as it was.
            assert_eq!(ping(&b, &user).await.status, 200);
            // Past it: refused, until the feed is back.
            let refused = poll_until(&b, &user, 503).await;
            assert_eq!(refused.status, 503, "{refused:?}");
            relay.reopen();
            assert_eq!(poll_until(&b, &user, 200).await.status, 200);
        })
        .await;
    }
}
