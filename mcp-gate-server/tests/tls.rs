//! TLS termination with rustls (`[tls]`): the gateway serves MCP over https with the
//! certificate the file names, and nothing over plain http on that port.

mod common;

use common::{AuthServer, Gateway, UpstreamServer, free_port};

#[tokio::test]
async fn the_gateway_terminates_tls_with_the_configured_certificate() {
    let auth = AuthServer::start(&[]).await;
    let upstream = UpstreamServer::ts_plain().await;
    let port = free_port();
    let resource = format!("https://localhost:{port}/mcp");
    let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()])
        .expect("a self-signed certificate");
    let certificate = certified.cert.pem();
    let key = certified.signing_key.serialize_pem();
    let config = format!(
        "listen = \"127.0.0.1:{port}\"\n\
         [upstream]\nurl = \"{}\"\n\
         [resource]\nuri = \"{resource}\"\n\
         [[issuer]]\nurl = \"{}\"\n\
         [policy]\nallow-all = true\nallow-destructive = true\n\
         [tls]\ncertificate = \"tls/cert.pem\"\nprivate-key = \"tls/key.pem\"\n",
        upstream.url, auth.issuer
    );
    let gateway = Gateway::start(
        &config,
        &[("tls/cert.pem", &certificate), ("tls/key.pem", &key)],
    )
    .await;

    let trusted = reqwest::Certificate::from_pem(certificate.as_bytes()).expect("certificate");
    let client = reqwest::Client::builder()
        .add_root_certificate(trusted)
        .resolve("localhost", ([127, 0, 0, 1], port).into())
        .build()
        .expect("client");
    let token = auth.token("mcp:read", &resource).await;
    let answer = client
        .post(&resource)
        .bearer_auth(&token)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"tls","version":"1"}}}"#)
        .send()
        .await
        .expect("an https call");
    assert_eq!(answer.status(), 200, "{}", gateway.log());
    assert!(
        answer
            .text()
            .await
            .expect("body")
            .contains("mcp-gate-ts-server")
    );

    // The metadata names the https resource.
    let metadata: serde_json::Value = client
        .get(format!(
            "https://localhost:{port}/.well-known/oauth-protected-resource/mcp"
        ))
        .send()
        .await
        .expect("metadata")
        .json()
        .await
        .expect("JSON");
    assert_eq!(metadata["resource"], serde_json::json!(resource));

    // Plain http on the same port gets no MCP answer.
    let plain = reqwest::Client::new()
        .post(format!("http://127.0.0.1:{port}/mcp"))
        .bearer_auth(&token)
        .body("{}")
        .send()
        .await;
    assert!(
        plain.map_or(true, |answer| !answer.status().is_success()),
        "plain http was served"
    );
}

#[tokio::test]
async fn a_missing_certificate_stops_the_start_with_the_key_named() {
    let port = free_port();
    let config = format!(
        "listen = \"127.0.0.1:{port}\"\n\
         [upstream]\nurl = \"http://127.0.0.1:9/mcp\"\n\
         [resource]\nuri = \"https://localhost:{port}/mcp\"\n\
         [[issuer]]\nurl = \"http://127.0.0.1:9\"\n\
         [policy]\nallow-all = true\n\
         [tls]\ncertificate = \"missing.pem\"\nprivate-key = \"missing-key.pem\"\n"
    );
    let dir = tempfile::tempdir().expect("dir");
    std::fs::write(dir.path().join("gateway.toml"), config).expect("write");
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_mcp-gate-server"))
        .arg("--config")
        .arg(dir.path().join("gateway.toml"))
        .output()
        .await
        .expect("run");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("[tls]"), "{stderr}");
}
