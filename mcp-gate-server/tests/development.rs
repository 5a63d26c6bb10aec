//! `[development-issuer]`: the gateway tried out with no authorization server. The issuer it
//! starts hands tokens to its fixed client, the gateway trusts them, and nothing else.

mod common;

use common::{AuthServer, Gateway, UpstreamServer, free_port};

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"dev","version":"1"}}}"#;

#[tokio::test]
async fn the_development_issuer_gives_tokens_the_gateway_accepts_and_no_other_issuer_is_trusted() {
    let upstream = UpstreamServer::ts_plain().await;
    let port = free_port();
    let resource = format!("http://127.0.0.1:{port}/mcp");
    let config = format!(
        "listen = \"127.0.0.1:{port}\"\n[upstream]\nurl = \"{}\"\n[resource]\nuri = \"{resource}\"\n\
         [development-issuer]\n[policy]\nallow-all = true\n",
        upstream.url
    );
    let gateway = Gateway::start(&config, &[]).await;
    assert!(
        gateway.development_issuer.is_some(),
        "the banner names the issuer"
    );
    assert!(
        gateway.log().contains("never protect real data"),
        "{}",
        gateway.log()
    );

    let client = reqwest::Client::new();
    let token = gateway.development_token(&resource).await;
    let token = token.as_str();
    let called = |token: String| {
        client
            .post(&resource)
            .bearer_auth(token)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(INITIALIZE)
            .send()
    };
    let accepted = called(token.to_owned()).await.expect("post");
    assert_eq!(accepted.status(), 200, "{}", gateway.log());

    // A token from a real issuer the file does not name is refused.
    let other = AuthServer::start(&[]).await;
    let foreign = other.token("mcp:read", &resource).await;
    let refused = called(foreign).await.expect("post");
    assert_eq!(refused.status(), 401);
}

#[tokio::test]
async fn a_development_issuer_off_loopback_or_beside_real_issuers_is_refused_with_its_line() {
    let dir = tempfile::tempdir().expect("dir");
    // The line of the key to blame (`listen`), or of the table.
    for (body, expected, line) in [
        (
            "[development-issuer]\nlisten = \"0.0.0.0:9000\"\n",
            "[development-issuer] listen: not a loopback address",
            8,
        ),
        (
            "[development-issuer]\n[[issuer]]\nurl = \"https://auth.example.com\"\n",
            "a development issuer excludes `[[issuer]]`",
            7,
        ),
    ] {
        let config = format!(
            "[upstream]\nurl = \"http://127.0.0.1:3000/mcp\"\n[resource]\nuri = \"http://127.0.0.1:8080/mcp\"\n[policy]\nallow-all = true\n{body}"
        );
        let path = dir.path().join("gateway.toml");
        std::fs::write(&path, &config).expect("write");
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_mcp-gate-server"))
            .arg("--config")
            .arg(&path)
            .arg("--check")
            .output()
            .expect("run");
        assert!(!output.status.success());
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(expected), "{stderr}");
        assert!(
            stderr.contains(&format!("gateway.toml:{line}:")),
            "the line {line}: {stderr}"
        );
    }
}
