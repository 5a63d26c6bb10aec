//! End-to-end tests against real parts: tokens from `oidc-provider`, the layer in front of an
//! rmcp server, and the official TypeScript and Python MCP SDK clients doing OAuth discovery.

use crate::common;

use std::time::Duration;

use common::clients::{
    authenticate_concurrently, calling, credentials_args, echo_status, read_scope_args,
    start_allowing,
};
use common::peers::{AuthServer, CLIENT, GatedServer, Sdk, run_client};
use common::tokens::{TestKey, claims};
use mcp_gate::KeyRefresh;
use serde_json::{Value, json};

fn temp_path(name: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    std::env::temp_dir()
        .join(format!(
            "mcp-gate-{name}-{}-{nanos}.json",
            std::process::id()
        ))
        .to_string_lossy()
        .into_owned()
}

/// The discovery exchange both SDKs must go through: 401 with `resource_metadata`, the
/// metadata document, the token endpoint, then a successful retry.
fn assert_discovery_flow(http: &[Value], server: &GatedServer, auth: &AuthServer) {
    let first = &http[0];
    assert_eq!(first["status"], 401, "first exchange: {first}");
    let challenge = first["www_authenticate"]
        .as_str()
        .expect("a challenge on the first 401");
    assert!(
        challenge.contains(&format!(
            "resource_metadata=\"{}\"",
            server.gate.metadata_url()
        )),
        "{challenge}"
    );
    assert!(
        !challenge.contains("error="),
        "no error code without a credential: {challenge}"
    );
    let fetched_metadata = http
        .iter()
        .any(|h| h["url"] == server.gate.metadata_url() && h["status"] == 200);
    assert!(
        fetched_metadata,
        "the client fetched the metadata document: {http:#?}"
    );
    let got_token = http
        .iter()
        .any(|h| h["url"] == auth.token_endpoint.as_str() && h["status"] == 200);
    assert!(
        got_token,
        "the client got a token from oidc-provider: {http:#?}"
    );
    let retried = http
        .iter()
        .any(|h| h["url"] == server.url.as_str() && h["status"] == 200);
    assert!(retried, "an authenticated MCP request succeeded: {http:#?}");
}

fn whoami(step: &Value) -> Value {
    let text = step["result"]["content"][0]["text"]
        .as_str()
        .expect("whoami text");
    serde_json::from_str(text).expect("whoami JSON")
}

#[tokio::test]
async fn typescript_sdk_client_discovers_and_calls_echo() {
    let auth = AuthServer::start(&[]).await;
    let server = start_allowing(&auth, |b| b.required_scopes(["mcp:read"])).await;
    let calls = [r#"echo={"text":"hello from typescript"}"#, "whoami"];
    let args = calling(read_scope_args(&auth, &[]), &calls);
    let run = run_client(Sdk::TypeScript, &server.url, &args).await;
    assert!(run.success, "{run:#?}");
    assert_eq!(
        run.call("echo")["result"]["content"][0]["text"],
        "hello from typescript"
    );
    let me = whoami(run.call("whoami"));
    assert_eq!(me["client_id"], CLIENT);
    assert_eq!(me["issuer"], auth.issuer.as_str());
    assert_eq!(
        me["saw_authorization_header"], false,
        "the token never reaches the inner service"
    );
    assert_discovery_flow(&run.http, &server, &auth);
}

#[tokio::test]
async fn python_sdk_client_discovers_and_calls_echo() {
    let auth = AuthServer::start(&[]).await;
    let server = start_allowing(&auth, |b| b.required_scopes(["mcp:read"])).await;
    let calls = [r#"echo={"text":"hello from python"}"#, "whoami"];
    let args = calling(credentials_args(&auth, &[]), &calls);
    let run = run_client(Sdk::Python, &server.url, &args).await;
    assert!(run.success, "{run:#?}");
    assert_eq!(
        run.call("echo")["result"]["content"][0]["text"],
        "hello from python"
    );
    let me = whoami(run.call("whoami"));
    assert_eq!(me["client_id"], CLIENT);
    // The Python SDK requests the scope named in the 401 challenge.
    assert_eq!(me["scopes"], json!(["mcp:read"]));
    assert_discovery_flow(&run.http, &server, &auth);
}

#[tokio::test]
async fn token_for_another_audience_is_refused_with_401() {
    let auth = AuthServer::start(&[]).await;
    let server = start_allowing(&auth, |b| b).await;
    let foreign = auth
        .client_token("mcp:read", "http://127.0.0.1:1/other-mcp")
        .await;
    let reply = server
        .call_tool(Some(&foreign), "echo", json!({"text": "x"}))
        .await;
    assert_eq!(reply.status, 401);
    let challenge = reply.www_authenticate.clone().expect("challenge");
    assert!(
        challenge.starts_with("Bearer error=\"invalid_token\""),
        "{challenge}"
    );
    assert!(challenge.contains("error_description=\"the token audience is not this resource\""));
    assert_eq!(reply.body["error"], "invalid_token");

    // The TypeScript SDK, handed the same token, surfaces the 401.
    let run = run_client(
        Sdk::TypeScript,
        &server.url,
        &["--token", &foreign, "--no-list"],
    )
    .await;
    assert!(!run.success);
    let error = run
        .steps
        .iter()
        .find_map(|s| s.get("error"))
        .expect("an error step");
    assert_eq!(error["http_status"], 401, "{error}");
}

#[tokio::test]
async fn token_lacking_a_required_scope_gets_403_with_the_full_scope_set() {
    let auth = AuthServer::start(&[]).await;
    let server = start_allowing(&auth, |b| b.required_scopes(["mcp:read", "mcp:write"])).await;
    let narrow = auth.client_token("mcp:read", &server.url).await;
    let reply = server
        .call_tool(Some(&narrow), "echo", json!({"text": "x"}))
        .await;
    assert_eq!(reply.status, 403);
    let challenge = reply.www_authenticate.clone().expect("challenge");
    assert!(
        challenge.contains("error=\"insufficient_scope\""),
        "{challenge}"
    );
    assert!(
        challenge.contains("scope=\"mcp:read mcp:write\""),
        "{challenge}"
    );
    assert_eq!(reply.body["scope"], "mcp:read mcp:write");

    // TypeScript SDK (client_credentials asks only for its configured scope): it sees the 403,
    // retries once, and gives up with the 403 surfaced.
    let args = read_scope_args(&auth, &["--call", "echo={\"text\":\"x\"}"]);
    let run = run_client(Sdk::TypeScript, &server.url, &args).await;
    assert!(!run.success);
    assert!(
        run.http.iter().any(|h| h["status"] == 403
            && h["www_authenticate"]
                .as_str()
                .is_some_and(|c| c.contains("scope=\"mcp:read mcp:write\""))),
        "{run:#?}"
    );

    // Python SDK: the 401 challenge already names the full set, so it asks for both and succeeds.
    let args = credentials_args(&auth, &["--call", "whoami"]);
    let run = run_client(Sdk::Python, &server.url, &args).await;
    assert!(run.success, "{run:#?}");
    assert_eq!(
        whoami(run.call("whoami"))["scopes"],
        json!(["mcp:read", "mcp:write"])
    );
}

#[tokio::test]
async fn rotated_key_is_picked_up_after_exactly_one_jwks_fetch() {
    let keys_file = temp_path("rotation-keys");
    let first = AuthServer::start(&[("AS_KEYS_FILE", &keys_file)]).await;
    let (port, old_kid) = (first.port.to_string(), first.kid.clone());
    let cooldown = KeyRefresh::default().cooldown(Duration::from_millis(300));
    let server = start_allowing(&first, |b| b.key_refresh(cooldown)).await;
    let old_token = first.client_token("mcp:read", &server.url).await;
    assert_eq!(echo_status(&server, &old_token, "a").await, 200);
    assert_eq!(first.stats().await["jwks_fetches"], 1);
    first.stop().await;

    // The authorization server comes back on the same port signing with a new key.
    let second = AuthServer::start(&[
        ("AS_KEYS_FILE", &keys_file),
        ("AS_PORT", &port),
        ("AS_ROTATE", "1"),
    ])
    .await;
    assert_ne!(second.kid, old_kid);
    tokio::time::sleep(Duration::from_millis(400)).await; // past the unknown-kid cooldown
    let new_token = second.client_token("mcp:read", &server.url).await;

    // 1,000 concurrent verifications of the new-kid token: one fetch between them.
    for principal in authenticate_concurrently(&server.gate, &new_token, 1000).await {
        assert_eq!(principal.client_id(), Some(CLIENT));
    }
    assert_eq!(
        second.stats().await["jwks_fetches"],
        1,
        "exactly one JWKS fetch after rotation"
    );
    assert_eq!(server.gate.jwks_fetch_count(), 2);

    let reply = server
        .call_tool(Some(&new_token), "echo", json!({"text": "b"}))
        .await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.tool_text(), "b");
    let _ = std::fs::remove_file(&keys_file);
}

#[tokio::test]
async fn known_keys_keep_working_while_the_issuer_is_down() {
    let auth = AuthServer::start(&[]).await;
    let issuer = auth.issuer.clone();
    // No token cache: every request below really verifies against the key set.
    let cooldown = KeyRefresh::default().cooldown(Duration::from_millis(100));
    let server = start_allowing(&auth, |b| b.token_cache_capacity(0).key_refresh(cooldown)).await;
    let used = auth.client_token("mcp:read", &server.url).await;
    let unused = auth.client_token("mcp:write", &server.url).await;
    assert_eq!(echo_status(&server, &used, "a").await, 200);
    auth.stop().await;

    for token in [&used, &unused, &used] {
        let reply = server
            .call_tool(Some(token), "echo", json!({"text": "still up"}))
            .await;
        assert_eq!(reply.status, 200, "{reply:?}");
        assert_eq!(reply.tool_text(), "still up");
    }
    // A token naming a key nobody published: the refresh fails (issuer down), the old keys stay,
    // and the token is refused as an unknown key, not with a 5xx and never accepted.
    tokio::time::sleep(Duration::from_millis(150)).await;
    let stranger = TestKey::es256("not-published");
    let forged = stranger.mint(&claims(&issuer, &server.url, "mcp:read"));
    let reply = server
        .call_tool(Some(&forged), "echo", json!({"text": "x"}))
        .await;
    assert_eq!(reply.status, 401);
    assert!(
        reply
            .www_authenticate
            .unwrap()
            .contains("signed with an unknown key")
    );
    assert_eq!(echo_status(&server, &used, "a").await, 200);
}

#[tokio::test]
async fn thousand_concurrent_first_requests_cause_one_jwks_fetch() {
    let auth = AuthServer::start(&[]).await;
    let server = start_allowing(&auth, |b| b).await;
    let token = auth.client_token("mcp:read", &server.url).await;
    authenticate_concurrently(&server.gate, &token, 1000).await;
    assert_eq!(auth.stats().await["jwks_fetches"], 1);
    assert_eq!(server.gate.jwks_fetch_count(), 1);
}

#[tokio::test]
async fn rs256_tokens_from_oidc_provider_verify() {
    let auth = AuthServer::start(&[("AS_ALG", "RS256")]).await;
    let server = start_allowing(&auth, |b| b).await;
    let token = auth.client_token("mcp:read", &server.url).await;
    let reply = server
        .call_tool(Some(&token), "echo", json!({"text": "rsa"}))
        .await;
    assert_eq!(reply.status, 200, "{reply:?}");
    assert_eq!(reply.tool_text(), "rsa");
}

#[tokio::test]
async fn explicit_jwks_uri_is_used_without_discovery() {
    let auth = AuthServer::start(&[]).await;
    let (issuer, jwks_uri) = (auth.issuer.clone(), auth.jwks_uri.clone());
    let server = GatedServer::start(|_| {
        mcp_gate::Gate::builder()
            .evaluate(mcp_gate::policy::allow_all())
            .issuer(mcp_gate::Issuer::with_jwks_uri(issuer, jwks_uri))
    })
    .await;
    let token = auth
        .token(CLIENT, common::peers::SECRET, None, Some(&server.url))
        .await;
    assert_eq!(echo_status(&server, &token, "k").await, 200);
}

#[tokio::test]
async fn metadata_is_served_at_both_paths_with_cors() {
    let auth = AuthServer::start(&[]).await;
    let server = start_allowing(&auth, |b| {
        b.required_scopes(["mcp:read"])
            .resource_name("test server")
            .authorization_details_types(["mcp_tool"])
    })
    .await;
    let origin = server.url.trim_end_matches("/mcp");
    for path in [
        "/.well-known/oauth-protected-resource/mcp",
        "/.well-known/oauth-protected-resource",
    ] {
        let response = reqwest::Client::new()
            .get(format!("{origin}{path}"))
            .header("origin", "https://app.example")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{path}");
        assert_eq!(response.headers()["access-control-allow-origin"], "*");
        let document: Value = response.json().await.unwrap();
        assert_eq!(
            document,
            json!({
                "resource": server.url,
                "authorization_servers": [auth.issuer],
                "scopes_supported": ["mcp:read"],
                "bearer_methods_supported": ["header"],
                "resource_name": "test server",
                "authorization_details_types_supported": ["mcp_tool"],
            })
        );
    }
}
