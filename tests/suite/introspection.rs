//! Opaque tokens from `oidc-provider`, checked through RFC 7662 introspection.
#![cfg(feature = "introspection")]

use crate::common;

use common::peers::{AuthServer, GatedServer};
use mcp_gate::policy::allow_all;
use mcp_gate::{Gate, Introspection};
use serde_json::json;

async fn gated(auth: &AuthServer) -> GatedServer {
    let (issuer, endpoint) = (auth.issuer.clone(), auth.introspection_endpoint.clone());
    GatedServer::start(|_| {
        Gate::builder()
            .evaluate(allow_all())
            .issuer(issuer.as_str())
            .required_scopes(["mcp:read"])
            .introspection(Introspection::new(
                endpoint,
                "mcp-gateway",
                "mcp-gateway-secret",
            ))
    })
    .await
}

/// An opaque `mcp:read` token for `server`'s resource, issued by `auth`.
async fn opaque_token(auth: &AuthServer, server: &GatedServer) -> String {
    auth.token(
        "mcp-client-opaque",
        "mcp-client-secret",
        Some("mcp:read"),
        Some(&server.url),
    )
    .await
}

#[tokio::test]
async fn active_opaque_token_is_accepted_and_cached() {
    let auth = AuthServer::start(&[]).await;
    let server = gated(&auth).await;
    let opaque = opaque_token(&auth, &server).await;
    assert!(
        !opaque.contains('.'),
        "oidc-provider issued an opaque token: {opaque}"
    );
    let reply = server.call_tool(Some(&opaque), "whoami", json!({})).await;
    assert_eq!(reply.status, 200, "{reply:?}");
    let me: serde_json::Value = serde_json::from_str(reply.tool_text()).unwrap();
    assert_eq!(me["client_id"], "mcp-client-opaque");
    assert_eq!(me["issuer"], auth.issuer.as_str());
    let again = server
        .call_tool(Some(&opaque), "echo", json!({"text": "again"}))
        .await;
    assert_eq!(again.status, 200);
    assert_eq!(
        auth.stats().await["introspections"],
        1,
        "the second call used the cache"
    );
}

#[tokio::test]
async fn inactive_token_gets_401() {
    let auth = AuthServer::start(&[]).await;
    let server = gated(&auth).await;
    let reply = server
        .call_tool(Some("not-a-token-the-server-issued"), "echo", json!({}))
        .await;
    assert_eq!(reply.status, 401);
    let challenge = reply.www_authenticate.unwrap();
    assert!(challenge.contains("error=\"invalid_token\""), "{challenge}");
    assert!(challenge.contains("the token is not active"), "{challenge}");
}

#[tokio::test]
async fn opaque_token_without_audience_is_refused() {
    let auth = AuthServer::start(&[]).await;
    let server = gated(&auth).await;
    // No resource indicator: oidc-provider issues an opaque token with no `aud`.
    let unbound = auth
        .token("mcp-client", "mcp-client-secret", Some("mcp:read"), None)
        .await;
    let reply = server.call_tool(Some(&unbound), "echo", json!({})).await;
    assert_eq!(reply.status, 401);
    assert!(
        reply
            .www_authenticate
            .unwrap()
            .contains("the token audience is not this resource")
    );
}

#[tokio::test]
async fn unreachable_introspection_endpoint_is_503_never_an_allow() {
    let auth = AuthServer::start(&[]).await;
    let server = gated(&auth).await;
    let opaque = opaque_token(&auth, &server).await;
    auth.stop().await;
    let reply = server.call_tool(Some(&opaque), "echo", json!({})).await;
    assert_eq!(reply.status, 503);
    assert!(reply.www_authenticate.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_first_uses_of_one_token_share_one_introspection() {
    let auth = AuthServer::start(&[]).await;
    let server = std::sync::Arc::new(gated(&auth).await);
    let opaque = opaque_token(&auth, &server).await;
    let before = auth.stats().await["introspections"].as_u64().unwrap();
    let start = std::sync::Arc::new(tokio::sync::Barrier::new(20));
    let calls: Vec<_> = (0..20)
        .map(|n| {
            let (server, opaque, start) = (server.clone(), opaque.clone(), start.clone());
            tokio::spawn(async move {
                start.wait().await;
                server
                    .call_tool(Some(&opaque), "echo", json!({"text": n.to_string()}))
                    .await
                    .status
            })
        })
        .collect();
    for call in calls {
        assert_eq!(call.await.unwrap(), 200);
    }
    let made = auth.stats().await["introspections"].as_u64().unwrap() - before;
    eprintln!("20 concurrent first uses made {made} introspection calls");
    assert_eq!(made, 1, "one introspection call for one token");
}
