//! Rate-limit counters on every backend: shared between replicas through Redis, one round trip
//! per group of a call's counters, counted on all of a group or on none.

use std::time::Duration;

use mcp_gate::limit::RateLimit;
use mcp_gate::store::limits::{LimitStore, MemoryLimitStore, Taken, Tally};

fn tally(group: &str, name: &str, rate: &str) -> Tally {
    Tally::new(group, name, rate.parse::<RateLimit>().expect("a rate"))
}

/// Calls in flight shared by two replicas: one place, taken on one, refused on the other,
/// free again once given back.
#[cfg(feature = "redis")]
async fn one_in_flight(stores: [&dyn LimitStore; 2]) {
    let lease = Duration::from_secs(60);
    let held = stores[0]
        .acquire("dora", 1, lease)
        .await
        .expect("the store answers")
        .expect("a first place");
    assert_eq!(stores[1].acquire("dora", 1, lease).await, Ok(None));
    if let Some(release) = stores[0].release(held) {
        release.await.expect("given back");
    }
    let again = stores[1].acquire("dora", 1, lease).await;
    assert!(matches!(again, Ok(Some(_))), "{again:?}");
}

/// What every backend must do with one caller at 1 a minute and another beside it.
async fn one_a_minute(stores: [&dyn LimitStore; 2]) {
    let alice = [tally("alice", "all", "1/minute")];
    let bob = [tally("bob", "all", "1/minute")];
    assert_eq!(stores[0].take(&alice).await, Ok(Taken::Admitted));
    // The second call, on the other replica: refused, to come back in about a minute.
    match stores[1].take(&alice).await {
        Ok(Taken::Limited { tally, retry_after }) => {
            assert_eq!(tally, 0);
            assert!(
                retry_after > Duration::from_secs(50) && retry_after <= Duration::from_secs(60),
                "{retry_after:?}"
            );
        }
        other => panic!("the second call in a minute is limited, not {other:?}"),
    }
    // Bob is not touched by Alice's counter.
    assert_eq!(stores[1].take(&bob).await, Ok(Taken::Admitted));
}

#[tokio::test]
async fn memory_counters_hold_one_caller_to_its_rate() {
    let store = MemoryLimitStore::default();
    one_a_minute([&store, &store]).await;
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn redis_counters_are_shared_by_replicas_in_one_round_trip() {
    use mcp_gate::store::limits::RedisLimitStore;
    let Some(redis) = crate::common::redis_server::RedisServer::start_or_skip() else {
        return;
    };
    let url = redis.url();
    let replicas = [
        RedisLimitStore::new(&url, "limits").await.expect("a store"),
        RedisLimitStore::new(&url, "limits").await.expect("a store"),
    ];
    let mut raw = redis.raw().await;
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(&mut raw)
        .await
        .expect("reset");
    one_a_minute([&replicas[0], &replicas[1]]).await;
    // Three calls, one group each: three scripts run. The first replica's first call finds
    // the script not loaded (`NOSCRIPT`, a failed call) and loads it once; after that, each
    // call is one round trip.
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut raw)
        .await
        .expect("stats");
    let field = |command: &str, name: &str| {
        stats
            .lines()
            .find_map(|line| line.strip_prefix(&format!("cmdstat_{command}:")))
            .and_then(|rest| {
                rest.split(',')
                    .find_map(|pair| pair.strip_prefix(&format!("{name}=")))
            })
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let ran = field("evalsha", "calls") - field("evalsha", "failed_calls");
    assert_eq!(ran, 3, "{stats}");
    assert_eq!(field("evalsha", "failed_calls"), 1, "{stats}");
    assert_eq!(field("eval", "calls"), 0, "{stats}");

    // A call on two counters of one group: counted on both or neither.
    let both = [
        tally("carol", "all", "5/s burst 5"),
        tally("carol", "echo", "1/minute"),
    ];
    assert_eq!(replicas[0].take(&both).await, Ok(Taken::Admitted));
    assert!(matches!(
        replicas[1].take(&both).await,
        Ok(Taken::Limited { tally: 1, .. })
    ));
    let all = [tally("carol", "all", "5/s burst 5")];
    for _ in 0..4 {
        assert_eq!(replicas[0].take(&all).await, Ok(Taken::Admitted));
    }
    assert!(matches!(
        replicas[1].take(&all).await,
        Ok(Taken::Limited { .. })
    ));
}

/// On a Redis Cluster of three masters: the same sharing, and each caller's counters carry
/// their own hash tag, so that callers spread over the shards (adding shards adds room).
#[cfg(feature = "redis")]
#[tokio::test]
async fn redis_cluster_counters_are_shared_and_spread_over_the_shards() {
    use crate::common::redis_topology::{RedisCluster, cli};
    use mcp_gate::store::limits::RedisLimitStore;
    let Some(cluster) = RedisCluster::start_or_skip() else {
        return;
    };
    let replicas = [
        RedisLimitStore::new(&cluster.url(), "limits")
            .await
            .expect("a store"),
        RedisLimitStore::new(&cluster.url(), "limits")
            .await
            .expect("a store"),
    ];
    one_a_minute([&replicas[0], &replicas[1]]).await;
    one_in_flight([&replicas[0], &replicas[1]]).await;
    for n in 0..60 {
        let caller = [tally(&format!("caller-{n}"), "all", "10/s")];
        assert_eq!(replicas[n % 2].take(&caller).await, Ok(Taken::Admitted));
    }
    let holding: Vec<usize> = cluster
        .masters()
        .into_iter()
        .map(|master| {
            cli(master, &["DBSIZE"])
                .trim()
                .parse::<usize>()
                .expect("a key count")
        })
        .collect();
    assert_eq!(holding.len(), 3, "{holding:?}");
    assert!(
        holding.iter().all(|keys| *keys >= 5),
        "62 callers' counters and a lease set on every shard: {holding:?}"
    );
}

/// Through Sentinel: the counters are shared by replicas the same way.
#[cfg(feature = "redis")]
#[tokio::test]
async fn redis_counters_through_sentinel_are_shared() {
    use crate::common::redis_topology::RedisSentinels;
    use mcp_gate::store::limits::RedisLimitStore;
    let Some(sentinels) = RedisSentinels::start_or_skip() else {
        return;
    };
    let replicas = [
        RedisLimitStore::new(&sentinels.url(), "limits")
            .await
            .expect("a store"),
        RedisLimitStore::new(&sentinels.url(), "limits")
            .await
            .expect("a store"),
    ];
    one_a_minute([&replicas[0], &replicas[1]]).await;
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn a_redis_that_is_gone_refuses_the_call() {
    use mcp_gate::store::limits::RedisLimitStore;
    use mcp_gate::store::{StoreError, StoreKind};
    let Some(mut redis) = crate::common::redis_server::RedisServer::start_or_skip() else {
        return;
    };
    let store = RedisLimitStore::new(&redis.url(), "gone")
        .await
        .expect("a store");
    redis.stop();
    let taken = store.take(&[tally("dave", "all", "10/s")]).await;
    assert!(
        matches!(
            taken,
            Err(StoreError::Unavailable {
                store: StoreKind::Limits,
                ..
            })
        ),
        "{taken:?}"
    );
}

mod through_the_layer {
    //! The limits as the layer applies them, against the example's rmcp server on 127.0.0.1.

    use std::convert::Infallible;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use axum::Router;
    use mcp_gate::limit::{Limit, RateLimit};
    use mcp_gate::policy::{Decision, Evaluation};
    use serde_json::{Value, json};

    use crate::common::peers::GatedServer;
    use crate::common::tokens::{TestKey, claims};
    use crate::common::tools;

    const ISSUER: &str = "https://as.example";

    /// A gate over the example server: `deny` denies every call (else allows), `limits` are
    /// its rate limits, and the count is how many times the policy was asked.
    async fn gate(deny: bool, limits: Vec<Limit>) -> (GatedServer, TestKey, Arc<AtomicUsize>) {
        let key = TestKey::es256("k1");
        let asked = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&asked);
        let server = GatedServer::start_trusting(
            ISSUER,
            &key,
            move |builder| {
                let mut builder = builder.evaluate(move |_: Evaluation| {
                    counted.fetch_add(1, Ordering::SeqCst);
                    async move {
                        Ok::<_, Infallible>(if deny {
                            Decision::unavailable("Not for you.")
                        } else {
                            Decision::allow()
                        })
                    }
                });
                for limit in limits {
                    builder = builder.rate_limit(limit);
                }
                builder
            },
            Router::new().nest_service("/mcp", tools::mcp_service()),
        )
        .await;
        (server, key, asked)
    }

    fn token(key: &TestKey, server: &GatedServer, subject: &str) -> String {
        let mut claims = claims(ISSUER, &server.url, "");
        claims["sub"] = json!(subject);
        key.mint(&claims)
    }

    fn one_a_minute() -> Limit {
        Limit::per_principal(RateLimit::per_minute(1).expect("a rate"))
    }

    #[tokio::test]
    async fn a_caller_past_its_rate_gets_the_limit_answer_and_others_do_not() {
        let (server, key, asked) = gate(false, vec![one_a_minute()]).await;
        let alice = token(&key, &server, "alice");
        let echo = json!({"text": "hi"});
        let first = server.call_tool(Some(&alice), "echo", echo.clone()).await;
        assert_eq!(first.status, 200, "{}", first.text);
        assert_eq!(first.body["result"]["content"][0]["text"], "hi");
        let second = server.call_tool(Some(&alice), "echo", echo.clone()).await;
        assert_eq!(second.status, 200, "{}", second.text);
        // A legacy request under the current (result-based) revision: a tool result.
        let result = &second.body["result"];
        assert_eq!(result["isError"], true, "{}", second.text);
        let info = &result["_meta"]["mcp-gate/rateLimit"];
        assert_eq!(info["scope"], "principal");
        let seconds = info["retryAfterSeconds"].as_u64().expect("seconds");
        assert!((50..=60).contains(&seconds), "{seconds}");
        let header = second.headers.get("retry-after").expect("Retry-After");
        assert_eq!(header.to_str().ok(), Some(seconds.to_string().as_str()));
        // The policy was asked once: the limited call never reached it.
        assert_eq!(asked.load(Ordering::SeqCst), 1);
        // Bob has his own allowance.
        let bob = token(&key, &server, "bob");
        let his = server.call_tool(Some(&bob), "echo", echo).await;
        assert_eq!(
            his.body["result"]["content"][0]["text"], "hi",
            "{}",
            his.text
        );
    }

    #[tokio::test]
    async fn denied_calls_count_against_the_caller() {
        let (server, key, asked) = gate(true, vec![one_a_minute()]).await;
        let alice = token(&key, &server, "alice");
        let first = server
            .call_tool(Some(&alice), "echo", json!({"text": "x"}))
            .await;
        assert_eq!(first.body["result"]["isError"], true);
        assert!(first.body["result"]["_meta"]["mcp-gate/rateLimit"].is_null());
        let second = server
            .call_tool(Some(&alice), "echo", json!({"text": "x"}))
            .await;
        assert!(
            second.body["result"]["_meta"]["mcp-gate/rateLimit"].is_object(),
            "{}",
            second.text
        );
        assert_eq!(
            asked.load(Ordering::SeqCst),
            1,
            "the flood is not the policy's"
        );
    }

    #[tokio::test]
    async fn a_limit_the_policy_names_counts_the_calls_it_allows() {
        let key = TestKey::es256("k1");
        let server = GatedServer::start_trusting(
            ISSUER,
            &key,
            |builder| {
                builder.evaluate(|evaluation: Evaluation| async move {
                    // `echo`: one a minute per principal, named by the policy for this call.
                    let rate = RateLimit::per_minute(1).expect("a rate");
                    evaluation.limit(Limit::per_principal(rate).for_tool("echo"));
                    Ok::<_, Infallible>(Decision::allow())
                })
            },
            Router::new().nest_service("/mcp", tools::mcp_service()),
        )
        .await;
        let alice = token(&key, &server, "alice");
        let echo = json!({"text": "hi"});
        let first = server.call_tool(Some(&alice), "echo", echo.clone()).await;
        assert_eq!(
            first.body["result"]["content"][0]["text"], "hi",
            "{}",
            first.text
        );
        let second = server.call_tool(Some(&alice), "echo", echo).await;
        let info = &second.body["result"]["_meta"]["mcp-gate/rateLimit"];
        assert_eq!(info["scope"], "principal", "{}", second.text);
        // Another tool is not counted by the limit named for `echo`.
        for _ in 0..3 {
            let other = server
                .call_tool(Some(&alice), "uppercase", json!({"text": "hi"}))
                .await;
            assert_eq!(
                other.body["result"]["content"][0]["text"], "HI",
                "{}",
                other.text
            );
        }
    }

    #[tokio::test]
    async fn listings_are_not_counted_and_other_operations_get_an_error() {
        let (server, key, _) = gate(false, vec![one_a_minute()]).await;
        let alice = token(&key, &server, "alice");
        let list = r#"{"jsonrpc":"2.0","id":7,"method":"tools/list","params":{}}"#;
        let read = r#"{"jsonrpc":"2.0","id":8,"method":"resources/read","params":{"uri":"demo://public"}}"#;
        for _ in 0..3 {
            let listed = server.post(Some(&alice), &[], list).await;
            assert!(listed.body["result"]["tools"].is_array(), "{}", listed.text);
        }
        let first = server.post(Some(&alice), &[], read).await;
        assert!(first.body.get("error").is_none() || first.body["error"]["code"] != -32029);
        let second = server.post(Some(&alice), &[], read).await;
        let error: &Value = &second.body["error"];
        assert_eq!(error["code"], -32029, "{}", second.text);
        assert_eq!(error["data"]["rateLimit"]["scope"], "principal");
        assert_eq!(second.body["id"], 8);
        assert!(second.headers.get("retry-after").is_some());
    }
}

mod read_by_the_sdks {
    //! The limit answer as the official SDK clients hand it to the code that made the call:
    //! the TypeScript SDK (legacy) and the Python SDK (2026-07-28), under the current
    //! (result-based) revision and the error-based one.

    use std::convert::Infallible;

    use axum::Router;
    use mcp_gate::limit::{Limit, RateLimit};
    use mcp_gate::policy::{Decision, Evaluation};
    use serde_json::Value;

    use crate::common::peers::{GatedServer, Sdk, run_client};
    use crate::common::tokens::{TestKey, claims};
    use crate::common::tools;

    const ISSUER: &str = "https://as.example";
    const ERROR_BASED: &str = "1c5b0cec97691cb9db3d880474a71d604d6addee";

    /// The two `echo` calls of `sdk` through a gate of `revision` with a limit of one a day
    /// per principal.
    async fn two_calls(sdk: Sdk, revision: &str) -> Vec<Value> {
        let key = TestKey::es256("k1");
        let server = GatedServer::start_trusting(
            ISSUER,
            &key,
            |builder| {
                builder
                    .revision(revision)
                    .evaluate(|_: Evaluation| async { Ok::<_, Infallible>(Decision::allow()) })
                    .rate_limit(Limit::per_principal(
                        RateLimit::new(1, std::time::Duration::from_secs(86_400)).expect("rate"),
                    ))
            },
            Router::new().nest_service("/mcp", tools::mcp_service()),
        )
        .await;
        let token = key.mint(&claims(ISSUER, &server.url, ""));
        let call = r#"echo={"text":"hi"}"#;
        let args = [
            "--token",
            token.as_str(),
            "--no-list",
            "--call",
            call,
            "--call",
            call,
        ];
        let run = run_client(sdk, &server.url, &args).await;
        run.calls("echo").into_iter().cloned().collect()
    }

    /// The second call came back as a tool result with the limit's `_meta`.
    fn assert_limited_result(calls: &[Value]) {
        assert_eq!(calls.len(), 2, "{calls:#?}");
        assert_eq!(calls[0]["result"]["content"][0]["text"], "hi", "{calls:#?}");
        let second = &calls[1];
        assert_eq!(second["ok"], true, "{second}");
        assert_eq!(second["result"]["isError"], true, "{second}");
        let info = &second["result"]["_meta"]["mcp-gate/rateLimit"];
        assert_eq!(info["scope"], "principal", "{second}");
        assert!(
            info["retryAfterSeconds"]
                .as_u64()
                .is_some_and(|s| s > 86_000),
            "{second}"
        );
    }

    /// The second call came back as the JSON-RPC error `-32029` with `data.rateLimit`.
    fn assert_limited_error(calls: &[Value]) {
        assert_eq!(calls.len(), 2, "{calls:#?}");
        let second = &calls[1];
        assert_eq!(second["ok"], false, "{second}");
        let error = &second["error"];
        assert_eq!(error["code"], -32029, "{second}");
        assert_eq!(error["data"]["rateLimit"]["scope"], "principal", "{second}");
        assert!(
            error["data"]["rateLimit"]["retryAfterSeconds"]
                .as_u64()
                .is_some_and(|s| s > 86_000),
            "{second}"
        );
    }

    #[tokio::test]
    async fn the_typescript_sdk_reads_the_limit_answer() {
        let current = two_calls(Sdk::TypeScript, "current").await;
        assert_limited_result(&current);
        let error_based = two_calls(Sdk::TypeScript, ERROR_BASED).await;
        assert_limited_error(&error_based);
    }

    #[tokio::test]
    async fn the_python_sdk_reads_the_limit_answer() {
        let current = two_calls(Sdk::Python, "current").await;
        assert_limited_result(&current);
        let error_based = two_calls(Sdk::Python, ERROR_BASED).await;
        assert_limited_error(&error_based);
    }
}

/// Redis round trips per allowed call, from Redis itself (`INFO commandstats`): none for a
/// call that carries no state when no limit is configured, though every store is in Redis;
/// one with a Redis limit.
#[cfg(feature = "redis")]
#[tokio::test]
async fn redis_round_trips_per_allowed_call_are_zero_without_limits_and_one_with() {
    use std::convert::Infallible;
    use std::time::Duration;

    use axum::Router;
    use axum::body::Body;
    use axum::routing::post;
    use mcp_gate::continuation::RedisReplayStore;
    use mcp_gate::limit::Limit;
    use mcp_gate::policy::{Decision, Evaluation};
    use mcp_gate::store::limits::RedisLimitStore;
    use mcp_gate::store::sessions::RedisSessionStore;
    use mcp_gate::tasks::RedisTaskStore;
    use mcp_gate::{Gate, Issuer, StaticKeys};
    use serde_json::json;

    use crate::common::tokens::{TestKey, claims};

    let Some(redis) = crate::common::redis_server::RedisServer::start_or_skip() else {
        return;
    };
    let url = redis.url();
    let key = TestKey::es256("trips");
    let resource = "https://mcp.example.com/mcp";
    let token = key.mint(&claims("https://as.example", resource, ""));
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "echo", "arguments": {"text": "hi"},
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                  "io.modelcontextprotocol/clientCapabilities": {}}}});
    let mut raw = redis.raw().await;
    for limited in [false, true] {
        let keys = StaticKeys::from_jwks_json(&key.jwks_json()).expect("a key set");
        let sessions = RedisSessionStore::new(&url, "trips", 100, 10, Duration::from_secs(60))
            .await
            .expect("sessions");
        let mut builder = Gate::builder()
            .resource(resource)
            .issuer(Issuer::with_keys("https://as.example", keys))
            .evaluate(|_: Evaluation| async { Ok::<_, Infallible>(Decision::allow()) })
            .session_store(sessions)
            .replay_store(RedisReplayStore::new(&url, "trips").await.expect("replay"))
            .task_store(RedisTaskStore::new(&url, "trips").await.expect("tasks"))
            .limit_store(RedisLimitStore::new(&url, "trips").await.expect("limits"));
        if limited {
            builder = builder.rate_limit(Limit::per_principal(
                "1000/s burst 100".parse().expect("a rate"),
            ));
        }
        let gate = builder.build().expect("a gate");
        let app = Router::new()
            .route(
                "/mcp",
                post(|| async {
                    axum::Json(json!({"jsonrpc": "2.0", "id": 1, "result": {"content": []}}))
                }),
            )
            .layer(gate.layer());
        let call = || {
            http::Request::post("/mcp")
                .header("content-type", "application/json")
                .header("accept", "application/json, text/event-stream")
                .header("mcp-protocol-version", "2026-07-28")
                .header("mcp-method", "tools/call")
                .header("mcp-name", "echo")
                .header("authorization", format!("Bearer {token}"))
                .body(Body::from(body.to_string()))
                .expect("a request")
        };
        // One call first: the token cached, the script loaded.
        let warm = crate::common::fixtures::through(&app, call()).await;
        assert_eq!(warm.status(), 200);
        let _: () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query_async(&mut raw)
            .await
            .expect("reset");
        for _ in 0..10 {
            let answer = crate::common::fixtures::through(&app, call()).await;
            assert_eq!(answer.status(), 200);
        }
        let stats: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut raw)
            .await
            .expect("stats");
        let calls = |command: &str| {
            stats
                .lines()
                .find_map(|line| line.strip_prefix(&format!("cmdstat_{command}:calls=")))
                .and_then(|rest| rest.split(',').next()?.parse::<u64>().ok())
                .unwrap_or(0)
        };
        if limited {
            // One script a call, and nothing else sent: the script's own commands (`TIME`,
            // `GET`, `SET`) are counted by Redis too, one `TIME` per script.
            assert_eq!(calls("evalsha"), 10, "{stats}");
            assert_eq!(calls("time"), 10, "{stats}");
            assert_eq!(calls("eval") + calls("script|load"), 0, "{stats}");
        } else {
            // Every command since the reset, but the reset itself: none.
            let commands: u64 = stats
                .lines()
                .filter(|line| line.starts_with("cmdstat_") && !line.starts_with("cmdstat_config"))
                .filter_map(|line| {
                    line.split("calls=")
                        .nth(1)?
                        .split(',')
                        .next()?
                        .parse::<u64>()
                        .ok()
                })
                .sum();
            assert_eq!(commands, 0, "{stats}");
        }
    }
}

mod in_flight {
    //! The concurrency limit through the layer: an rmcp server (streamed answers, SSE) whose
    //! `hold` tool waits until the test opens its door, tokens of the real `oidc-provider`, and
    //! one principal's calls in flight held to the limit while another's pass.

    use std::convert::Infallible;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use axum::Router;
    use mcp_gate::GateBuilder;
    use mcp_gate::limit::ConcurrencyLimit;
    use mcp_gate::policy::{Decision, Evaluation};
    use rmcp::handler::server::router::tool::ToolRouter;
    use rmcp::handler::server::wrapper::Parameters;
    use rmcp::model::{ServerCapabilities, ServerConfig};
    use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService,
    };
    use rmcp::{ServerHandler, tool, tool_handler, tool_router};
    use serde_json::{Value, json};
    use tokio::sync::watch;

    use crate::common::peers::{AuthServer, GatedServer, Reply, SECRET};
    use crate::common::tools::EchoArgs;

    /// The second client `oidc-provider` registers: another principal.
    const OTHER_CLIENT: &str = "mcp-client-post";

    /// What the test sees of the server's `hold` calls, and the door they wait at.
    struct Door {
        entered: AtomicUsize,
        open: watch::Sender<bool>,
    }

    impl Door {
        fn new() -> Arc<Self> {
            Arc::new(Self {
                entered: AtomicUsize::new(0),
                open: watch::Sender::new(false),
            })
        }

        /// Waits until `count` `hold` calls have reached the tool.
        async fn entered(&self, count: usize) {
            let waited = tokio::time::timeout(Duration::from_secs(20), async {
                while self.entered.load(Ordering::SeqCst) < count {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            });
            waited.await.expect("the calls reached the tool");
        }
    }

    /// An rmcp server with `hold` (waits at the door) and `echo` (answers at once).
    #[derive(Clone)]
    struct Blocking {
        tool_router: ToolRouter<Self>,
        door: Arc<Door>,
    }

    #[tool_router]
    impl Blocking {
        #[tool(description = "Wait until the door opens")]
        async fn hold(&self) -> String {
            let mut open = self.door.open.subscribe();
            self.door.entered.fetch_add(1, Ordering::SeqCst);
            let _ = open.wait_for(|open| *open).await;
            "released".to_owned()
        }

        #[tool(description = "Echo the given text back")]
        fn echo(&self, Parameters(EchoArgs { text }): Parameters<EchoArgs>) -> String {
            text
        }
    }

    #[tool_handler(router = self.tool_router)]
    impl ServerHandler for Blocking {
        fn get_info(&self) -> ServerConfig {
            ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
        }
    }

    /// The server at `/mcp`, answering in event streams (the layer streams them through).
    fn blocking(door: &Arc<Door>) -> Router {
        let door = Arc::clone(door);
        let service: StreamableHttpService<Blocking, LocalSessionManager> =
            StreamableHttpService::new(
                move || {
                    Ok(Blocking {
                        tool_router: Blocking::tool_router(),
                        door: Arc::clone(&door),
                    })
                },
                Default::default(),
                StreamableHttpServerConfig::default().with_legacy_session_mode(false),
            );
        Router::new().nest_service("/mcp", service)
    }

    /// A gate trusting `auth`, allowing every call, at most `max` calls of a principal in
    /// flight.
    fn limited(builder: GateBuilder, auth: &AuthServer, max: u32) -> GateBuilder {
        builder
            .issuer(auth.issuer.as_str())
            .evaluate(|_: Evaluation| async { Ok::<_, Infallible>(Decision::allow()) })
            .concurrency_limit(ConcurrencyLimit::per_principal(max))
    }

    /// The JSON-RPC answer of `reply`, streamed or not.
    fn answer(reply: &Reply) -> Value {
        if reply.body.is_object() {
            reply.body.clone()
        } else {
            reply.streamed_answer()
        }
    }

    /// Asserts that `reply` is the limit answer for calls in flight.
    fn assert_concurrency_limited(reply: &Reply) {
        assert_eq!(reply.status, 200, "{}", reply.text);
        let result = &answer(reply)["result"];
        assert_eq!(result["isError"], true, "{}", reply.text);
        let info = &result["_meta"]["mcp-gate/rateLimit"];
        assert_eq!(info["scope"], "concurrency", "{}", reply.text);
        assert_eq!(info["retryAfterSeconds"], 1, "{}", reply.text);
        let retry = reply.headers.get("retry-after").expect("Retry-After");
        assert_eq!(retry.to_str().ok(), Some("1"));
    }

    /// Asserts that `reply` is `echo`'s own answer, `text`.
    fn assert_echoed(reply: &Reply, text: &str) {
        let result = &answer(reply)["result"];
        assert_eq!(result["content"][0]["text"], text, "{}", reply.text);
        assert!(
            result["_meta"]["mcp-gate/rateLimit"].is_null(),
            "{}",
            reply.text
        );
    }

    /// `hold` called on `server` with `token`, under way in a task of its own.
    fn hold(server: &GatedServer, token: &str) -> tokio::task::JoinHandle<Reply> {
        let (url, token) = (server.url.clone(), token.to_owned());
        tokio::spawn(async move {
            let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                              "params": {"name": "hold", "arguments": {}}});
            let request = reqwest::Client::new()
                .post(&url)
                .header("accept", "application/json, text/event-stream")
                .bearer_auth(token)
                .json(&body);
            Reply::from(request.send().await.expect("a call")).await
        })
    }

    /// `echo` of `text` through `server` with `token`.
    async fn echo(server: &GatedServer, token: &str, text: &str) -> Reply {
        server
            .call_tool(Some(token), "echo", json!({ "text": text }))
            .await
    }

    #[tokio::test]
    async fn a_principal_past_its_calls_in_flight_gets_the_limit_answer_until_one_ends() {
        let auth = AuthServer::start(&[]).await;
        let door = Door::new();
        let server = GatedServer::start_with(
            |_| limited(mcp_gate::Gate::builder(), &auth, 2),
            blocking(&door),
        )
        .await;
        let alice = auth.client_token("mcp:read", &server.url).await;
        let bob = auth
            .token(OTHER_CLIENT, SECRET, Some("mcp:read"), Some(&server.url))
            .await;
        // Alice's two calls are under way, waiting at the door.
        let held = [hold(&server, &alice), hold(&server, &alice)];
        door.entered(2).await;
        // Her third is refused with the limit answer, and never reaches the server.
        let third = echo(&server, &alice, "third").await;
        assert_concurrency_limited(&third);
        // Listings are not counted.
        let list = r#"{"jsonrpc":"2.0","id":7,"method":"tools/list","params":{}}"#;
        let listed = server.post(Some(&alice), &[], list).await;
        assert!(
            answer(&listed)["result"]["tools"].is_array(),
            "{}",
            listed.text
        );
        // Bob has places of his own.
        assert_echoed(&echo(&server, &bob, "bob's").await, "bob's");
        // The door opens: both calls end, and give their places back.
        door.open.send_replace(true);
        for call in held {
            let reply = call.await.expect("the call's task");
            assert_eq!(answer(&reply)["result"]["content"][0]["text"], "released");
        }
        for text in ["after", "and again", "and once more"] {
            assert_echoed(&echo(&server, &alice, text).await, text);
        }
        assert_eq!(door.entered.load(Ordering::SeqCst), 2);
    }

    #[cfg(feature = "redis")]
    #[tokio::test]
    async fn two_replicas_on_one_redis_share_a_principals_calls_in_flight() {
        use mcp_gate::store::limits::RedisLimitStore;

        let Some(redis) = crate::common::redis_server::RedisServer::start_or_skip() else {
            return;
        };
        let auth = AuthServer::start(&[]).await;
        let door = Door::new();
        let resource = "http://127.0.0.1:9/mcp";
        let mut replicas = Vec::new();
        for _ in 0..2 {
            let store = RedisLimitStore::new(&redis.url(), "in-flight")
                .await
                .expect("a store");
            let configure =
                |_: &str| limited(mcp_gate::Gate::builder(), &auth, 1).limit_store(store);
            replicas.push(GatedServer::start_replica(resource, configure, blocking(&door)).await);
        }
        let alice = auth.client_token("mcp:read", resource).await;
        let bob = auth
            .token(OTHER_CLIENT, SECRET, Some("mcp:read"), Some(resource))
            .await;
        // Alice's one place is taken on the first replica; the second knows it.
        let held = hold(&replicas[0], &alice);
        door.entered(1).await;
        assert_concurrency_limited(&echo(&replicas[1], &alice, "second").await);
        assert_concurrency_limited(&echo(&replicas[0], &alice, "second").await);
        assert_echoed(&echo(&replicas[1], &bob, "bob's").await, "bob's");
        let mut raw = redis.raw().await;
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg("in-flight:inflight:*")
            .query_async(&mut raw)
            .await
            .expect("keys");
        assert_eq!(keys.len(), 1, "only Alice's leases are held: {keys:?}");
        assert!(keys[0].starts_with("in-flight:inflight:{") && keys[0].ends_with('}'));
        let ttl: i64 = redis::cmd("PTTL")
            .arg(&keys[0])
            .query_async(&mut raw)
            .await
            .expect("ttl");
        let lease = ConcurrencyLimit::DEFAULT_LEASE.as_millis() as i64;
        assert!(
            ttl > lease - 60_000 && ttl <= lease,
            "the set expires with its lease: {ttl}"
        );
        // The call ends: its lease is given back (a moment later: the release is sent after
        // the answer's end), and Alice calls again on the other replica.
        door.open.send_replace(true);
        let reply = held.await.expect("the call's task");
        assert_eq!(answer(&reply)["result"]["content"][0]["text"], "released");
        let mut again = echo(&replicas[1], &alice, "after").await;
        for _ in 0..50 {
            if answer(&again)["result"]["_meta"]["mcp-gate/rateLimit"].is_null() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
            again = echo(&replicas[1], &alice, "after").await;
        }
        assert_echoed(&again, "after");
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg("in-flight:inflight:*")
            .query_async(&mut raw)
            .await
            .expect("keys");
        assert!(keys.is_empty(), "every lease given back: {keys:?}");
    }
}
