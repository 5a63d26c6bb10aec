//! The readiness report against a real `oidc-provider` and a real `redis-server`: an issuer
//! whose keys cannot be fetched makes the gate not ready, naming the issuer and why, and it
//! is ready once they load; a Redis store that stops answering makes it not ready again.

use crate::common;

use std::time::{Duration, Instant};

use axum::Router;
use common::peers::{AuthServer, GatedServer};
#[cfg(feature = "redis")]
use common::redis_server::RedisServer;
use mcp_gate::readiness::{CheckStatus, Component, NotReadyReason};
#[cfg(feature = "redis")]
use mcp_gate::store::StoreKind;
use mcp_gate::{Gate, KeyRefresh};
use serde_json::Value;

/// A gate trusting `issuer` (keys by discovery, a short cooldown so a probe retries soon),
/// serving `/readyz` outside the layer.
async fn gate_for(
    issuer: &str,
    configure: impl FnOnce(mcp_gate::GateBuilder) -> mcp_gate::GateBuilder,
) -> GatedServer {
    let issuer = issuer.to_owned();
    GatedServer::start_full(
        move |_| {
            configure(
                Gate::builder()
                    .evaluate(mcp_gate::policy::allow_all())
                    .issuer(issuer.as_str())
                    .key_refresh(
                        KeyRefresh::default()
                            .cooldown(Duration::from_millis(200))
                            .timeout(Duration::from_secs(2)),
                    ),
            )
        },
        Router::new().nest_service("/mcp", common::tools::mcp_service()),
        |gate| Router::new().route("/readyz", mcp_gate::readiness::handler(gate.clone())),
    )
    .await
}

/// `GET /readyz`: its status and JSON body.
async fn readyz(server: &GatedServer) -> (u16, Value) {
    let url = server.url.replace("/mcp", "/readyz");
    let response = reqwest::get(url).await.expect("GET /readyz");
    let status = response.status().as_u16();
    assert_eq!(
        response.headers()["cache-control"],
        "no-store",
        "a readiness answer is never cached"
    );
    (status, response.json().await.expect("a JSON body"))
}

/// The `/readyz` row of `component`.
fn row<'a>(body: &'a Value, component: &str) -> &'a Value {
    body["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .find(|row| row["component"] == component)
        .unwrap_or_else(|| panic!("no {component} check in {body}"))
}

#[tokio::test]
async fn an_issuer_whose_keys_cannot_be_fetched_is_not_ready_until_they_load() {
    let port = crate::common::ports::free_port();
    let issuer = format!("http://127.0.0.1:{port}");
    let server = gate_for(&issuer, |builder| builder).await;

    // Nothing listens at the issuer yet: the prefetch fails, and the report says who and why.
    let report = server.gate.load_keys().await;
    assert!(!report.is_ready(), "{report}");
    let failing: Vec<_> = report.not_ready().collect();
    assert_eq!(failing.len(), 1, "{report}");
    assert_eq!(failing[0].component, Component::Issuer);
    assert_eq!(failing[0].name, issuer);
    match &failing[0].status {
        CheckStatus::NotReady { why, detail } => {
            assert_eq!(*why, NotReadyReason::KeysUnavailable);
            assert!(!detail.is_empty());
        }
        CheckStatus::Ready => unreachable!("not ready"),
    }
    assert!(report.to_string().contains(&issuer), "{report}");
    let (status, body) = readyz(&server).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["ready"], false);
    let issuer_row = row(&body, "issuer");
    assert_eq!(issuer_row["name"], issuer.as_str());
    assert_eq!(issuer_row["why"], "keys_unavailable");
    assert_eq!(row(&body, "policy")["ready"], true);
    assert_eq!(row(&body, "task_store")["name"], "memory");
    assert!(
        !body.to_string().contains("error sending request"),
        "the handler serves reason codes, not error texts: {body}"
    );

    // The issuer comes up on that port: a probe asking again finds the keys loaded.
    let port_text = port.to_string();
    let auth = AuthServer::start(&[("AS_PORT", port_text.as_str())]).await;
    assert_eq!(auth.issuer, issuer);
    let deadline = Instant::now() + Duration::from_secs(15);
    let body = loop {
        let (status, body) = readyz(&server).await;
        if status == 200 {
            break body;
        }
        assert!(Instant::now() < deadline, "never ready: {body}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert_eq!(body["ready"], true);
    assert_eq!(row(&body, "issuer")["ready"], true);
    assert!(server.gate.readiness().await.is_ready());
    auth.stop().await;
}

#[tokio::test]
async fn the_key_prefetch_loads_a_reachable_issuer_before_any_token() {
    let auth = AuthServer::start(&[]).await;
    let server = gate_for(&auth.issuer, |builder| builder).await;
    assert_eq!(
        server.gate.jwks_fetch_count(),
        0,
        "no fetch before the prefetch"
    );
    let report = server.gate.load_keys().await;
    assert!(report.is_ready(), "{report}");
    assert_eq!(server.gate.jwks_fetch_count(), 1);
    auth.stop().await;
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn a_redis_store_that_stops_answering_is_not_ready() {
    let Some(mut redis) = RedisServer::start_or_skip() else {
        return;
    };
    let auth = AuthServer::start(&[]).await;
    let store = redis.store("readiness").await;
    let server = gate_for(&auth.issuer, move |builder| builder.task_store(store)).await;
    let report = server.gate.load_keys().await;
    assert!(report.is_ready(), "{report}");
    let tasks = report
        .checks
        .iter()
        .find(|check| check.component == Component::Store(StoreKind::Tasks))
        .expect("a task store check");
    assert_eq!(tasks.name, "redis");

    redis.stop();
    let report = server.gate.readiness().await;
    let failing: Vec<_> = report.not_ready().collect();
    assert_eq!(failing.len(), 1, "{report}");
    assert_eq!(failing[0].component, Component::Store(StoreKind::Tasks));
    assert!(matches!(
        failing[0].status,
        CheckStatus::NotReady {
            why: NotReadyReason::StoreUnreachable,
            ..
        }
    ));
    let (status, body) = readyz(&server).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(row(&body, "task_store")["why"], "store_unreachable");
    auth.stop().await;
}
