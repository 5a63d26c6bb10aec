//! `[identity]`: the upstream learns who is calling from the gateway's signed token, verified
//! against the key set the gateway publishes by a Python SDK server with PyJWT and by a
//! TypeScript SDK server with jose (the verifiers docs/gateway.md shows); the same servers
//! refuse a request that comes around the gateway; without `[identity]` nothing is sent and
//! they refuse the gateway's calls too.

mod common;

use std::process::Stdio;
use std::time::Duration;

use common::{AuthServer, Gateway, UpstreamServer, free_port, peers_dir};
use p256::elliptic_curve::Generate as _;
use p256::pkcs8::EncodePrivateKey as _;
use serde_json::Value;

const JWKS_PATH: &str = "/.well-known/mcp-gate/identity-jwks.json";

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"identity","version":"1"}}}"#;

/// A gateway configuration on `port` in front of `upstream`, trusting `issuer`, with `extra`
/// appended (tables).
fn config(port: u16, upstream: &str, issuer: &str, extra: &str) -> String {
    format!(
        "listen = \"127.0.0.1:{port}\"\n[upstream]\nurl = \"{upstream}\"\n[resource]\nuri = \"http://127.0.0.1:{port}/mcp\"\n[[issuer]]\nurl = \"{issuer}\"\n[policy]\nallow-all = true\n[reload]\nwatch-interval = \"0s\"\n{extra}"
    )
}

/// The official SDK a test's upstream server and client are made with.
#[derive(Clone, Copy, Debug)]
enum Sdk {
    /// mcp 2.3.0: py_identity_upstream.py, py_client.py.
    Python,
    /// @modelcontextprotocol/sdk: ts-identity-upstream.mjs, ts-client.mjs.
    TypeScript,
}

impl Sdk {
    async fn upstream(self, jwks_url: &str, issuer: &str) -> UpstreamServer {
        match self {
            Sdk::Python => UpstreamServer::py_identity(jwks_url, issuer).await,
            Sdk::TypeScript => UpstreamServer::ts_identity(jwks_url, issuer).await,
        }
    }

    /// The SDK's client peer: the program and its script.
    fn client(self) -> (std::path::PathBuf, &'static str) {
        match self {
            Sdk::Python => (peers_dir().join(".venv/bin/python"), "py_client.py"),
            Sdk::TypeScript => ("node".into(), "ts-client.mjs"),
        }
    }
}

/// Runs `sdk`'s client peer against `url` with `token`, calling `whoami`; the call step it
/// prints.
async fn whoami_through(sdk: Sdk, url: &str, token: &str) -> Value {
    let (program, script) = sdk.client();
    let mut command = tokio::process::Command::new(program);
    command
        .arg(peers_dir().join(script))
        .arg(url)
        .arg("--token")
        .arg(token)
        .arg("--no-list")
        .arg("--call")
        .arg("whoami={}")
        .arg("--timeout-ms")
        .arg("20000")
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .kill_on_drop(true);
    let output = tokio::time::timeout(Duration::from_secs(40), command.output())
        .await
        .expect("the client finished in time")
        .expect("run the client");
    let stdout = String::from_utf8_lossy(&output.stdout);
    stdout
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .find(|line| line["step"] == "call")
        .unwrap_or_else(|| panic!("no call step in:\n{stdout}"))
}

/// The member `name` of what `whoami` returned in `step` (`claims` from the Python server,
/// `caller` from the TypeScript one).
fn returned(step: &Value, name: &str) -> Value {
    assert_eq!(step["ok"], true, "{step}");
    let result = &step["result"];
    if let Some(value) = result["structuredContent"].get(name) {
        return value.clone();
    }
    let text = result["content"][0]["text"].as_str().expect("text content");
    serde_json::from_str::<Value>(text).expect("JSON text")[name].clone()
}

/// An initialize POSTed to `url`, with `token` when given.
async fn initialize(url: &str, token: Option<&str>) -> reqwest::Response {
    let mut request = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(INITIALIZE);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    request.send().await.expect("post")
}

async fn jwks(url: &str) -> Value {
    let answer = reqwest::get(url).await.expect("get the key set");
    assert_eq!(answer.status(), 200, "{url}");
    answer.json().await.expect("a JSON key set")
}

/// What a test starts: the authorization server, the gateway's future port (its resource URI
/// and key set URL follow), and an upstream trusting them.
struct Behind {
    auth: AuthServer,
    port: u16,
    resource: String,
    jwks_url: String,
    upstream: UpstreamServer,
}

impl Behind {
    async fn start(sdk: Sdk) -> Self {
        let auth = AuthServer::start(&[]).await;
        let port = free_port();
        let resource = format!("http://127.0.0.1:{port}/mcp");
        let jwks_url = format!("http://127.0.0.1:{port}{JWKS_PATH}");
        let upstream = sdk.upstream(&jwks_url, &resource).await;
        Self {
            auth,
            port,
            resource,
            jwks_url,
            upstream,
        }
    }
}

#[tokio::test]
async fn the_python_sdk_server_verifies_the_gateways_identity_token_with_pyjwt() {
    let Behind {
        auth,
        port,
        resource,
        upstream,
        ..
    } = Behind::start(Sdk::Python).await;

    let secret = p256::SecretKey::try_generate().expect("a P-256 key");
    let pem = secret
        .to_pkcs8_pem(p256::pkcs8::LineEnding::LF)
        .expect("PEM")
        .to_string();
    let operations = free_port();
    let extra = format!(
        "[identity]\nkey-file = \"keys/identity.pem\"\nttl = \"30s\"\n[operations]\nlisten = \"127.0.0.1:{operations}\"\nmetrics = false\n"
    );
    let gateway = Gateway::start(
        &config(port, &upstream.url, &auth.issuer, &extra),
        &[("keys/identity.pem", &pem)],
    )
    .await;

    // The key set, public half only, the same on both listeners.
    let published = jwks(&format!("{}{JWKS_PATH}", gateway.origin)).await;
    let key = &published["keys"][0];
    assert_eq!(published["keys"].as_array().map(Vec::len), Some(1));
    assert_eq!(
        (&key["kty"], &key["crv"], &key["alg"]),
        (&"EC".into(), &"P-256".into(), &"ES256".into())
    );
    assert!(key.get("d").is_none(), "private key published: {key}");
    let operations = gateway.operations.clone().expect("operations listener");
    assert_eq!(jwks(&format!("{operations}{JWKS_PATH}")).await, published);

    // Through the gateway: the upstream verified the token and reads the caller from it.
    let token = auth.token("mcp:read mcp:write", &resource).await;
    let step = whoami_through(Sdk::Python, &resource, &token).await;
    let claims = returned(&step, "claims");
    assert_eq!(claims["sub"], common::CLIENT, "{claims}");
    assert_eq!(claims["client_id"], common::CLIENT, "{claims}");
    assert_eq!(claims["scope"], "mcp:read mcp:write", "{claims}");
    assert_eq!(claims["token_issuer"], auth.issuer.as_str(), "{claims}");
    assert_eq!(claims["iss"], resource.as_str(), "{claims}");
    assert_eq!(claims["aud"], upstream.url.as_str(), "{claims}");
    let (iat, exp) = (claims["iat"].as_u64(), claims["exp"].as_u64());
    assert_eq!(
        exp.zip(iat).map(|(exp, iat)| exp - iat),
        Some(30),
        "{claims}"
    );

    // Around the gateway, the client's own token (or none) is refused by the upstream.
    let straight = initialize(&upstream.url, Some(&token)).await;
    assert_eq!(straight.status(), 401);
    assert_eq!(initialize(&upstream.url, None).await.status(), 401);
    // And the gateway's log holds no token.
    let log = gateway.log();
    assert!(!log.contains(&token), "the client's token was logged");
    assert!(!log.contains("eyJ"), "a JWT was logged:\n{log}");
}

#[tokio::test]
async fn without_identity_the_upstream_gets_no_authorization_and_its_refusal_is_not_passed_on() {
    let Behind {
        auth,
        port,
        resource,
        jwks_url,
        upstream,
    } = Behind::start(Sdk::Python).await;
    let gateway = Gateway::start(&config(port, &upstream.url, &auth.issuer, ""), &[]).await;

    let token = auth.token("mcp:read", &resource).await;
    let answer = initialize(&resource, Some(&token)).await;
    // The gate let it through; the upstream, given no Authorization, refused the gateway. The
    // client gets a 502, never the upstream's challenge (which would send its OAuth flow to
    // the upstream's own metadata), and the gateway says why in its log.
    assert_eq!(answer.status(), 502, "{}", gateway.log());
    assert!(answer.headers().get("www-authenticate").is_none());
    let body = answer.text().await.unwrap();
    assert!(body.contains("refused the gateway"), "{body}");
    assert!(
        gateway
            .log()
            .contains("the upstream refused the gateway's request")
            && gateway.log().contains("status=401"),
        "{}",
        gateway.log()
    );
    // No key set is published.
    let missing = reqwest::get(&jwks_url).await.expect("get");
    assert_eq!(missing.status(), 404);
}

#[tokio::test]
async fn another_header_carries_the_token_and_authorization_stays_empty() {
    let auth = AuthServer::start(&[]).await;
    let upstream = UpstreamServer::ts_plain().await;
    let port = free_port();
    let resource = format!("http://127.0.0.1:{port}/mcp");
    let extra = "[identity]\nheader = \"x-caller-identity\"\n";
    let gateway = Gateway::start(&config(port, &upstream.url, &auth.issuer, extra), &[]).await;
    // The warning about the key made at start.
    logged(&gateway, "no key-file", 1).await;

    let token = auth.token("mcp:read", &resource).await;
    let answer = initialize(&resource, Some(&token)).await;
    assert_eq!(answer.status(), 200, "{}", gateway.log());
    let seen = upstream.received().await;
    assert!(!seen.is_empty());
    for entry in seen {
        assert_eq!(entry["authorization"], false, "{entry}");
        let headers = entry["headers"].as_array().expect("header names");
        assert!(headers.contains(&"x-caller-identity".into()), "{entry}");
    }
}

#[tokio::test]
async fn the_typescript_sdk_server_verifies_it_with_jose() {
    let Behind {
        auth,
        port,
        resource,
        upstream,
        ..
    } = Behind::start(Sdk::TypeScript).await;
    let config = config(port, &upstream.url, &auth.issuer, "[identity]\n");
    let _gateway = Gateway::start(&config, &[]).await;

    let token = auth.token("mcp:read", &resource).await;
    let step = whoami_through(Sdk::TypeScript, &resource, &token).await;
    let caller = returned(&step, "caller");
    assert_eq!(
        caller,
        serde_json::json!({
            "sub": common::CLIENT,
            "client_id": common::CLIENT,
            "scopes": ["mcp:read"],
            "token_issuer": auth.issuer,
        })
    );
    assert_eq!(initialize(&upstream.url, Some(&token)).await.status(), 401);
}

/// The `kid` of the key set at `url`.
async fn published_kid(url: &str) -> String {
    let set = jwks(url).await;
    set["keys"][0]["kid"].as_str().expect("a kid").to_owned()
}

/// Waits (at most 10 s: stderr is read apart) until `gateway` has logged `text` `times` times.
async fn logged(gateway: &Gateway, text: &str, times: usize) {
    for _ in 0..200 {
        if gateway.log().matches(text).count() >= times {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "`{text}` not logged {times} times within 10 s:\n{}",
        gateway.log()
    );
}

/// Sends SIGHUP and waits until the log says `reloaded` once more.
async fn reload(gateway: &Gateway) {
    let before = gateway.log().matches("reloaded").count();
    gateway.signal("HUP");
    logged(gateway, "reloaded", before + 1).await;
}

#[tokio::test]
async fn the_start_key_survives_reloads_and_a_new_key_file_is_taken_on_reload() {
    let auth = AuthServer::start(&[]).await;
    let port = free_port();
    let upstream = "http://127.0.0.1:9/mcp";
    let gateway = Gateway::start(&config(port, upstream, &auth.issuer, "[identity]\n"), &[]).await;
    let url = format!("{}{JWKS_PATH}", gateway.origin);
    let started = published_kid(&url).await;

    // Another ttl: a new gate, the same key made at start.
    let edited = config(port, upstream, &auth.issuer, "[identity]\nttl = \"2m\"\n");
    std::fs::write(gateway.config_path(), edited).expect("write config");
    reload(&gateway).await;
    assert_eq!(published_kid(&url).await, started);

    // A key file: its key, from the reload on.
    let secret = p256::SecretKey::try_generate().expect("a P-256 key");
    let pem = secret
        .to_pkcs8_pem(p256::pkcs8::LineEnding::LF)
        .expect("PEM");
    std::fs::write(gateway.path("identity.pem"), pem.as_bytes()).expect("write key");
    let with_file = config(
        port,
        upstream,
        &auth.issuer,
        "[identity]\nkey-file = \"identity.pem\"\n",
    );
    std::fs::write(gateway.config_path(), with_file).expect("write config");
    reload(&gateway).await;
    let from_file = published_kid(&url).await;
    assert_ne!(from_file, started);

    // A key file that is not a key: the reload is refused and the key in force stays.
    std::fs::write(gateway.path("identity.pem"), "not a key").expect("write key");
    gateway.signal("HUP");
    logged(&gateway, "[identity] key-file", 1).await;
    assert_eq!(published_kid(&url).await, from_file);
}
