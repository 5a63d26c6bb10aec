//! The gateway in front of the TypeScript SDK's server: a call with a token goes through,
//! without the client's token; one without is challenged.

mod common;

use common::{AuthServer, Gateway, UpstreamServer, free_port};

#[tokio::test]
async fn a_call_goes_through_without_the_clients_token() {
    let auth = AuthServer::start(&[]).await;
    let upstream = UpstreamServer::ts_plain().await;
    let port = free_port();
    let resource = format!("http://127.0.0.1:{port}/mcp");
    let config = format!(
        "listen = \"127.0.0.1:{port}\"\n[upstream]\nurl = \"{}\"\n[resource]\nuri = \"{resource}\"\n[[issuer]]\nurl = \"{}\"\n[policy]\nallow-all = true\nallow-destructive = true\n",
        upstream.url, auth.issuer
    );
    let gateway = Gateway::start(&config, &[]).await;
    let client = reqwest::Client::new();
    let initialize = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"smoke","version":"1"}}}"#;
    let refused = client
        .post(&resource)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(initialize)
        .send()
        .await
        .expect("post");
    assert_eq!(refused.status(), 401);
    assert!(
        refused.headers()["www-authenticate"]
            .to_str()
            .unwrap()
            .contains("resource_metadata=")
    );

    let token = auth.token("mcp:read", &resource).await;
    let answer = client
        .post(&resource)
        .bearer_auth(&token)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("cookie", "secret=1")
        .body(initialize)
        .send()
        .await
        .expect("post");
    assert_eq!(answer.status(), 200, "{}", gateway.log());
    let session = answer.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let body = answer.text().await.unwrap();
    assert!(body.contains("mcp-gate-ts-server"), "{body}");

    let seen = upstream.received().await;
    assert!(!seen.is_empty());
    for entry in seen {
        assert_eq!(entry["authorization"], serde_json::json!(false), "{entry}");
        let headers = entry["headers"].to_string();
        assert!(!headers.contains("cookie"), "{headers}");
    }
    assert!(!session.is_empty());
}
