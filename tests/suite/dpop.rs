//! DPoP (RFC 9449) through the layer, with real parts: `oidc-provider` with DPoP on issuing
//! DPoP-bound tokens (JWT and, through introspection, opaque), the TypeScript SDK's client
//! over a fetch that signs proofs (`tests/peers/ts-dpop.mjs`, on `jose`: the SDK has no DPoP
//! client), proofs made in Rust for the broken cases, and two replicas sharing a real
//! `redis-server` replay store.
//!
//! What it shows: bound tokens accepted with valid proofs, and the SDK client reading the
//! gate's `DPoP algs` and `use_dpop_nonce` challenges; a proof used once across replicas; a
//! bound token refused as `Bearer` (with DPoP configured or not); a proof for another URL,
//! method, token or key refused, each with its own reason in the audit trail; the step-up
//! challenge in the DPoP scheme; the metadata document's DPoP fields.

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use common::dpop::{Prover, ath};
use common::peers::{AuthServer, GatedServer, Reply, ensure_peers, peers_dir};
use mcp_gate::audit::AuditRecord;
use mcp_gate::auth::Dpop;
use mcp_gate::policy::allow_all;
use mcp_gate::{Gate, GateBuilder};
use serde_json::{Value, json};
use tokio::io::AsyncBufReadExt as _;

const LIST: &str = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
const NONCE_KEY: [u8; 32] = [0x5a; 32];

/// A POST of `body` presenting `token` with the DPoP scheme and each of `proofs` as a `DPoP`
/// header.
async fn dpop_post(server: &GatedServer, token: &str, proofs: &[&str], body: &str) -> Reply {
    let authorization = format!("DPoP {token}");
    let mut headers = vec![("authorization", authorization.as_str())];
    headers.extend(proofs.iter().map(|proof| ("dpop", *proof)));
    server.post(None, &headers, body).await
}

/// The reasons of the authentication refusals `records` holds, in order.
fn refusals(records: &Mutex<Vec<Option<&'static str>>>) -> Vec<&'static str> {
    records
        .lock()
        .expect("records")
        .iter()
        .flatten()
        .copied()
        .collect()
}

/// Every `WWW-Authenticate` value of `reply`, joined as a fetch client reads them.
fn challenges(reply: &Reply) -> String {
    let values: Vec<&str> = reply
        .headers
        .get_all("www-authenticate")
        .iter()
        .map(|value| value.to_str().expect("ASCII"))
        .collect();
    values.join(", ")
}

/// A gate trusting `auth`, allowing everything, requiring `mcp:read`.
fn trusting(auth: &AuthServer) -> GateBuilder {
    Gate::builder()
        .evaluate(allow_all())
        .issuer(auth.issuer.as_str())
        .required_scopes(["mcp:read"])
}

/// What `ts-dpop.mjs` printed, and whether it succeeded.
struct DpopRun {
    success: bool,
    lines: Vec<Value>,
}

impl DpopRun {
    fn first(&self, key: &str) -> &Value {
        self.lines
            .iter()
            .find_map(|line| line.get(key))
            .unwrap_or_else(|| panic!("no {key:?} line: {:#?}", self.lines))
    }

    fn step(&self, name: &str) -> &Value {
        self.lines
            .iter()
            .find(|line| line["step"] == name)
            .unwrap_or_else(|| panic!("no step {name:?}: {:#?}", self.lines))
    }

    fn exchanges(&self) -> Vec<&Value> {
        self.lines
            .iter()
            .filter_map(|line| line.get("http"))
            .collect()
    }
}

/// Runs the TypeScript SDK's client with its DPoP fetch against `server`, whose resource is its
/// URL, with a token from `auth`; every line it prints, read within 60 s.
async fn run_ts_dpop(auth: &AuthServer, server: &GatedServer, echo: &str) -> DpopRun {
    ensure_peers();
    let mut command = tokio::process::Command::new("node");
    command
        .arg(peers_dir().join("ts-dpop.mjs"))
        .arg(&server.url)
        .args(["--token-endpoint", &auth.token_endpoint])
        .args(["--client-id", common::peers::CLIENT])
        .args(["--client-secret", common::peers::SECRET])
        .args(["--resource", &server.url, "--scope", "mcp:read"])
        .args(["--echo", echo, "--timeout-ms", "30000"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .kill_on_drop(true);
    let mut child = command.spawn().expect("node ts-dpop.mjs starts");
    let stdout = child.stdout.take().expect("stdout");
    let mut reader = tokio::io::BufReader::new(stdout).lines();
    let mut lines = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while let Ok(Ok(Some(line))) = tokio::time::timeout_at(deadline, reader.next_line()).await {
        if let Ok(value) = serde_json::from_str::<Value>(&line) {
            lines.push(value);
        }
    }
    let status = tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .expect("ts-dpop.mjs exits")
        .expect("its status");
    DpopRun {
        success: status.success(),
        lines,
    }
}

#[tokio::test]
async fn the_sdk_client_proves_oidc_provider_tokens_and_follows_the_gates_nonce() {
    let auth = AuthServer::start(&[("AS_DPOP", "1")]).await;
    let server = GatedServer::start(|_| {
        trusting(&auth).dpop(Dpop::new().nonce(NONCE_KEY.to_vec(), Duration::from_secs(300)))
    })
    .await;
    let run = run_ts_dpop(&auth, &server, "bound").await;
    assert!(run.success, "{:#?}", run.lines);

    // The challenges it read before it had a token: Bearer, and DPoP naming ES256.
    let algs = run.first("algs");
    assert!(
        algs.as_array().is_some_and(|a| a.contains(&json!("ES256"))),
        "{algs}"
    );
    let schemes = &run.lines[0]["schemes"];
    assert_eq!(schemes, &json!(["Bearer", "DPoP"]), "{:#?}", run.lines);

    // oidc-provider bound the token to the client's key.
    assert_eq!(run.first("token")["token_type"], "DPoP");

    // The gate asked for its nonce once (the first request had none), and the client's retry
    // with it went through; every later request reused it.
    let exchanges = run.exchanges();
    let asked = exchanges[0];
    assert_eq!(asked["status"], 401, "{exchanges:#?}");
    let challenge = asked["www_authenticate"].as_str().expect("a challenge");
    assert!(
        challenge.starts_with("DPoP error=\"use_dpop_nonce\""),
        "{challenge}"
    );
    assert!(asked["dpop_nonce"].as_str().is_some_and(|n| !n.is_empty()));
    assert_eq!(run.first("nonce_retries"), 1, "{exchanges:#?}");
    assert!(
        exchanges[1..].iter().all(|e| e["status"] != 401),
        "{exchanges:#?}"
    );

    // The tool ran, for the client the token names.
    assert_eq!(run.step("list")["ok"], true);
    let call = run.step("call:echo");
    assert_eq!(call["ok"], true, "{call}");
    assert_eq!(call["result"]["content"][0]["text"], "bound");
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn a_proof_is_used_once_across_replicas_and_bound_to_its_request_token_and_key() {
    use common::redis_server::RedisServer;
    use mcp_gate::store::replay::RedisReplayStore;

    let Some(redis) = RedisServer::start_or_skip() else {
        return;
    };
    let auth = AuthServer::start(&[("AS_DPOP", "1")]).await;
    // One deployment's public URL; each replica listens on a port of its own behind it.
    let resource = "http://127.0.0.1:9/mcp";
    let records = Arc::new(Mutex::new(Vec::new()));
    let mut replicas = Vec::new();
    for _ in 0..2 {
        let store = RedisReplayStore::new(&redis.url(), "dpop-replicas")
            .await
            .expect("the replay store");
        let seen = Arc::clone(&records);
        let sink = move |record: &AuditRecord| {
            seen.lock().expect("records").push(record.data().refusal);
        };
        let builder = trusting(&auth)
            .replay_store(store)
            .audit(sink)
            .dpop(Dpop::new());
        replicas.push(
            GatedServer::start_replica(
                resource,
                move |_| builder,
                Router::new().nest_service("/mcp", common::tools::mcp_service()),
            )
            .await,
        );
    }
    let (a, b) = (&replicas[0], &replicas[1]);
    let prover = Prover::new();
    let (token, kind) = prover.bound_token(&auth, "mcp:read", resource).await;
    assert_eq!(kind, "DPoP");

    // A valid proof on A; the same proof on B is a replay (and on A again, now from the cache).
    let proof = prover.proof("POST", resource, &token);
    assert_eq!(dpop_post(a, &token, &[&proof], LIST).await.status, 200);
    let replayed = dpop_post(b, &token, &[&proof], LIST).await;
    assert_eq!(replayed.status, 401, "{replayed:?}");
    let challenge = challenges(&replayed);
    assert!(
        challenge.starts_with("DPoP error=\"invalid_dpop_proof\""),
        "{challenge}"
    );
    assert!(challenge.contains("algs=\"ES256"), "{challenge}");
    assert_eq!(dpop_post(a, &token, &[&proof], LIST).await.status, 401);

    // The same token as a bearer token: refused, with the DPoP challenge beside.
    let bearer = b.post(Some(&token), &[], LIST).await;
    assert_eq!(bearer.status, 401, "{bearer:?}");
    let challenge = challenges(&bearer);
    assert!(
        challenge.starts_with("Bearer error=\"invalid_token\""),
        "{challenge}"
    );
    assert!(challenge.contains(", DPoP scope="), "{challenge}");
    assert!(
        challenge.ends_with("algs=\"ES256 ES384 PS256 PS384 PS512 RS256 RS384 RS512 EdDSA\""),
        "{challenge}"
    );

    // Proofs for another URL, another method, another token; by another key; none; two.
    let other_url = prover.proof("POST", "http://127.0.0.1:9/other", &token);
    let other_method = prover.proof("GET", resource, &token);
    let other_token = prover.proof("POST", resource, "another.access.token");
    let stranger = Prover::new();
    let other_key = stranger.proof("POST", resource, &token);
    let mut no_ath = prover.claims("POST", resource, None);
    no_ath.remove("ath");
    let no_ath = prover.sign(&no_ath);
    let (first, second) = (
        prover.proof("POST", resource, &token),
        prover.proof("POST", resource, &token),
    );
    let broken: [(&[&str], &str); 7] = [
        (&[&other_url], "dpop_htu"),
        (&[&other_method], "dpop_htm"),
        (&[&other_token], "dpop_ath"),
        (&[&other_key], "dpop_jkt"),
        (&[&no_ath], "dpop_missing_ath"),
        (&[], "dpop_missing_proof"),
        (&[&first, &second], "dpop_multiple_proofs"),
    ];
    for (proofs, _) in &broken {
        let reply = dpop_post(b, &token, proofs, LIST).await;
        assert_eq!(reply.status, 401, "{reply:?}");
    }

    // An unbound token presented with the DPoP scheme: refused.
    let unbound = auth.client_token("mcp:read", resource).await;
    let unbound_proof = prover.proof("POST", resource, &unbound);
    assert_eq!(
        dpop_post(b, &unbound, &[&unbound_proof], LIST).await.status,
        401
    );

    // Each refusal for its own reason, in order.
    let mut expected = vec!["dpop_replayed", "dpop_replayed", "dpop_bound"];
    expected.extend(broken.iter().map(|(_, reason)| *reason));
    expected.push("not_dpop_bound");
    assert_eq!(refusals(&records), expected);

    // A fresh proof goes through on B.
    let fresh = prover.proof("POST", resource, &token);
    assert_eq!(dpop_post(b, &token, &[&fresh], LIST).await.status, 200);
    assert_eq!(ath(&token).len(), 43);
}

#[tokio::test]
async fn a_bound_token_is_refused_as_bearer_where_dpop_is_not_configured() {
    let auth = AuthServer::start(&[("AS_DPOP", "1")]).await;
    let server = GatedServer::start(|_| trusting(&auth)).await;
    let prover = Prover::new();
    let (token, _) = prover.bound_token(&auth, "mcp:read", &server.url).await;
    let bearer = server.post(Some(&token), &[], LIST).await;
    assert_eq!(bearer.status, 401, "{bearer:?}");
    assert_eq!(bearer.body["error"], "invalid_token");
    assert_eq!(
        bearer.body["error_description"],
        "the token is DPoP-bound: present it with the DPoP scheme and a proof"
    );
    // No DPoP challenge: this gate does not speak DPoP, and its document says nothing of it.
    let challenge = challenges(&bearer);
    assert!(challenge.starts_with("Bearer "), "{challenge}");
    assert!(!challenge.contains("algs="), "{challenge}");
    let proof = prover.proof("POST", &server.url, &token);
    let dpop = dpop_post(&server, &token, &[&proof], LIST).await;
    assert_eq!(
        dpop.status, 401,
        "the DPoP scheme is not accepted here: {dpop:?}"
    );
    let document = metadata(&server).await;
    assert!(document.get("dpop_signing_alg_values_supported").is_none());
    // An unbound token is served as before.
    let unbound = auth.client_token("mcp:read", &server.url).await;
    assert_eq!(server.post(Some(&unbound), &[], LIST).await.status, 200);
}

/// The metadata document `server` serves (its resource is its own URL).
async fn metadata(server: &GatedServer) -> Value {
    reqwest::get(server.gate.metadata_url())
        .await
        .expect("metadata")
        .json()
        .await
        .expect("metadata JSON")
}

#[tokio::test]
async fn required_dpop_is_advertised_and_refuses_unbound_tokens() {
    let auth = AuthServer::start(&[("AS_DPOP", "1")]).await;
    let algorithms = [
        jsonwebtoken::Algorithm::ES256,
        jsonwebtoken::Algorithm::EdDSA,
    ];
    let server =
        GatedServer::start(|_| trusting(&auth).dpop(Dpop::new().algorithms(algorithms).required()))
            .await;
    // The document: still a valid RFC 9728 document, with the DPoP fields.
    let document = metadata(&server).await;
    assert_eq!(document["resource"], server.url.as_str());
    assert_eq!(document["authorization_servers"], json!([auth.issuer]));
    assert_eq!(document["bearer_methods_supported"], json!(["header"]));
    assert_eq!(
        document["dpop_signing_alg_values_supported"],
        json!(["ES256", "EdDSA"])
    );
    assert_eq!(document["dpop_bound_access_tokens_required"], true);

    // An unbound token is refused, as Bearer and as DPoP.
    let prover = Prover::new();
    let unbound = auth.client_token("mcp:read", &server.url).await;
    let bearer = server.post(Some(&unbound), &[], LIST).await;
    assert_eq!(bearer.status, 401, "{bearer:?}");
    let challenge = challenges(&bearer);
    assert!(challenge.contains(", DPoP scope="), "{challenge}");
    assert!(challenge.ends_with("algs=\"ES256 EdDSA\""), "{challenge}");
    let proof = prover.proof("POST", &server.url, &unbound);
    assert_eq!(
        dpop_post(&server, &unbound, &[&proof], LIST).await.status,
        401
    );

    // A bound one with a valid proof is served.
    let (token, _) = prover.bound_token(&auth, "mcp:read", &server.url).await;
    let proof = prover.proof("POST", &server.url, &token);
    assert_eq!(
        dpop_post(&server, &token, &[&proof], LIST).await.status,
        200
    );
}

#[tokio::test]
async fn the_step_up_challenge_of_a_dpop_client_is_in_the_dpop_scheme() {
    let auth = AuthServer::start(&[("AS_DPOP", "1")]).await;
    let server = GatedServer::start(|_| {
        trusting(&auth)
            .required_scopes(["mcp:read", "mcp:admin"])
            .dpop(Dpop::new())
    })
    .await;
    let prover = Prover::new();
    let (token, _) = prover.bound_token(&auth, "mcp:read", &server.url).await;
    let proof = prover.proof("POST", &server.url, &token);
    let reply = dpop_post(&server, &token, &[&proof], LIST).await;
    assert_eq!(reply.status, 403, "{reply:?}");
    let challenge = challenges(&reply);
    assert!(
        challenge.starts_with("DPoP error=\"insufficient_scope\", scope=\"mcp:admin mcp:read\""),
        "{challenge}"
    );
    assert!(challenge.contains("algs=\""), "{challenge}");
}

#[cfg(feature = "introspection")]
#[tokio::test]
async fn an_introspected_token_is_bound_through_cnf() {
    let auth = AuthServer::start(&[("AS_DPOP", "1")]).await;
    let endpoint = auth.introspection_endpoint.clone();
    let server = GatedServer::start(|_| {
        trusting(&auth)
            .introspection(mcp_gate::Introspection::new(
                endpoint,
                "mcp-gateway",
                "mcp-gateway-secret",
            ))
            .dpop(Dpop::new())
    })
    .await;
    let prover = Prover::new();
    let (opaque, kind) = prover
        .bound_token_of(&auth, "mcp-client-opaque", "mcp:read", &server.url)
        .await;
    assert_eq!(kind, "DPoP");
    assert!(!opaque.contains('.'), "an opaque token: {opaque}");
    assert_eq!(server.post(Some(&opaque), &[], LIST).await.status, 401);
    let proof = prover.proof("POST", &server.url, &opaque);
    assert_eq!(
        dpop_post(&server, &opaque, &[&proof], LIST).await.status,
        200
    );
}

#[test]
fn dpop_options_are_checked_at_build() {
    use jsonwebtoken::Algorithm;
    use mcp_gate::ConfigError;

    let refusal = |configure: fn(GateBuilder) -> GateBuilder| {
        let builder = Gate::builder()
            .resource("https://mcp.example.com/mcp")
            .issuer("https://auth.example.com")
            .evaluate(allow_all());
        configure(builder).build().err()
    };
    assert!(refusal(|b| b.dpop(Dpop::new())).is_none());
    assert!(matches!(
        refusal(|b| b.dpop(Dpop::new().algorithms([]))),
        Some(ConfigError::DpopAlgorithm(given)) if given == "none given"
    ));
    assert!(matches!(
        refusal(|b| b.dpop(Dpop::new().algorithms([Algorithm::ES256, Algorithm::HS256]))),
        Some(ConfigError::DpopAlgorithm(given)) if given == "HS256"
    ));
    assert!(matches!(
        refusal(|b| b.dpop(Dpop::new().nonce(vec![1; 31], Duration::from_secs(60)))),
        Some(ConfigError::DpopNonceKey { len: 31 })
    ));
    assert!(matches!(
        refusal(|b| b.reusable_state().dpop(Dpop::new())),
        Some(ConfigError::DpopWithoutReplayStore)
    ));
    for configure in [
        (|b: GateBuilder| b.dpop(Dpop::new().nonce(vec![1; 32], Duration::ZERO)))
            as fn(GateBuilder) -> GateBuilder,
        |b| b.dpop(Dpop::new().nonce(vec![1; 32], Duration::from_secs(3601))),
        |b| b.dpop(Dpop::new().iat_window(Duration::ZERO, Duration::ZERO)),
        |b| b.dpop(Dpop::new().iat_window(Duration::from_secs(301), Duration::ZERO)),
        |b| b.dpop(Dpop::new().iat_window(Duration::from_secs(60), Duration::from_secs(61))),
    ] {
        assert!(
            matches!(refusal(configure), Some(ConfigError::InvalidOption { .. })),
            "{:?}",
            refusal(configure)
        );
    }
}

#[tokio::test]
async fn a_policys_step_up_and_credential_challenges_to_a_dpop_client_are_dpop_challenges() {
    let auth = AuthServer::start(&[("AS_DPOP", "1")]).await;
    let issuer = auth.issuer.clone();
    let server = GatedServer::start_demo(move |builder| {
        builder
            .issuer(issuer.as_str())
            .required_scopes(["mcp:read"])
            .dpop(Dpop::new())
    })
    .await;
    let prover = Prover::new();
    let (token, _) = prover.bound_token(&auth, "mcp:read", &server.url).await;
    let call = |tool: &str, arguments: Value| {
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
               "params": {"name": tool, "arguments": arguments}})
        .to_string()
    };
    // The demo policy's scope step-up (`admin_report` needs `mcp:admin`).
    let proof = prover.proof("POST", &server.url, &token);
    let body = call("admin_report", json!({}));
    let reply = dpop_post(&server, &token, &[&proof], &body).await;
    assert_eq!(reply.status, 403, "{reply:?}");
    let challenge = challenges(&reply);
    assert!(
        challenge.starts_with("DPoP error=\"insufficient_scope\""),
        "{challenge}"
    );
    assert!(challenge.contains("mcp:admin"), "{challenge}");
    // Its credential remedy (`transfer` needs payment details).
    let proof = prover.proof("POST", &server.url, &token);
    let arguments = json!({"amount": "40.00", "currency": "EUR", "iban": "DE00TEST"});
    let reply = dpop_post(&server, &token, &[&proof], &call("transfer", arguments)).await;
    assert_eq!(reply.status, 401, "{reply:?}");
    let challenge = challenges(&reply);
    assert!(
        challenge.starts_with("DPoP error=\"insufficient_authorization\""),
        "{challenge}"
    );
    assert!(
        challenge.contains("authorization_remediation=\""),
        "{challenge}"
    );
    assert!(challenge.contains("algs=\""), "{challenge}");
    // A bearer client of the same gate still gets Bearer challenges.
    let unbound = auth.client_token("mcp:read", &server.url).await;
    let reply = server
        .post(Some(&unbound), &[], &call("admin_report", json!({})))
        .await;
    assert_eq!(reply.status, 403, "{reply:?}");
    assert!(
        challenges(&reply).starts_with("Bearer error=\"insufficient_scope\""),
        "{reply:?}"
    );
}
