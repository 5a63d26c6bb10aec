//! Real peers for integration tests: the `oidc-provider` authorization server, the example MCP
//! server behind the layer, and the official TypeScript and Python MCP SDK clients.
//!
//! Every process binds 127.0.0.1, is killed when its handle drops, and exits by itself when
//! its stdin closes (`AS_EXIT_ON_STDIN_EOF`).

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Once;
use std::time::Duration;

use axum::Router;
use mcp_gate::{Gate, GateBuilder, Issuer, StaticKeys};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use super::modern::ModernRequest;
use super::tokens::TestKey;
use super::tools;

/// The `client_credentials` client `oidc-provider` registers for the tests (HTTP Basic).
pub const CLIENT: &str = "mcp-client";
/// The secret of [`CLIENT`] (and of every other client tests/peers/as.mjs registers).
pub const SECRET: &str = "mcp-client-secret";

/// `tests/peers`.
pub fn peers_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join("peers")
}

/// Installs the Node and Python peers if a previous step has not (idempotent, serialised).
pub fn ensure_peers() {
    static SETUP: Once = Once::new();
    SETUP.call_once(|| {
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("scripts")
            .join("setup-peers.sh");
        let status = std::process::Command::new("bash")
            .arg(script)
            .status()
            .expect("run scripts/setup-peers.sh");
        assert!(status.success(), "scripts/setup-peers.sh failed: {status}");
    });
}

/// A running `oidc-provider` authorization server (tests/peers/as.mjs).
pub struct AuthServer {
    child: Child,
    pub issuer: String,
    pub token_endpoint: String,
    pub introspection_endpoint: String,
    pub jwks_uri: String,
    pub kid: String,
    pub port: u16,
}

impl AuthServer {
    /// Starts the server with extra environment (`AS_PORT`, `AS_KEYS_FILE`, `AS_ALG`, ...).
    pub async fn start(env: &[(&str, &str)]) -> Self {
        ensure_peers();
        let mut command = Command::new("node");
        command
            .arg(peers_dir().join("as.mjs"))
            .env("AS_EXIT_ON_STDIN_EOF", "1")
            .env("AS_MAX_SECONDS", "300")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true);
        for (key, value) in env {
            command.env(key, value);
        }
        let mut child = command.spawn().expect("spawn node as.mjs");
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .expect("authorization server did not start within 30 s")
            .expect("read as.mjs stdout")
            .expect("as.mjs exited before printing its address");
        let info: Value = serde_json::from_str(&line).expect("as.mjs start line is JSON");
        let text = |name: &str| info[name].as_str().expect(name).to_owned();
        let issuer = text("issuer");
        let port = issuer
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .expect("port");
        Self {
            child,
            token_endpoint: text("token_endpoint"),
            introspection_endpoint: text("introspection_endpoint"),
            jwks_uri: text("jwks_uri"),
            kid: text("kid"),
            issuer,
            port,
        }
    }

    /// Requests a `client_credentials` token.
    pub async fn token(
        &self,
        client: &str,
        secret: &str,
        scope: Option<&str>,
        resource: Option<&str>,
    ) -> String {
        let response = self
            .token_response(client, secret, scope, resource, None)
            .await;
        response["access_token"]
            .as_str()
            .unwrap_or_else(|| panic!("no access_token in {response}"))
            .to_owned()
    }

    /// The token endpoint's answer to a `client_credentials` request, with a `DPoP` proof
    /// header when `dpop` is given (the token is then bound to the proof's key).
    pub async fn token_response(
        &self,
        client: &str,
        secret: &str,
        scope: Option<&str>,
        resource: Option<&str>,
        dpop: Option<&str>,
    ) -> Value {
        let mut form: Vec<(&str, &str)> = vec![("grant_type", "client_credentials")];
        if let Some(scope) = scope {
            form.push(("scope", scope));
        }
        if let Some(resource) = resource {
            form.push(("resource", resource));
        }
        // `mcp-client-post` authenticates in the form body; every other client with HTTP Basic.
        let post = client.ends_with("-post");
        if post {
            form.push(("client_id", client));
            form.push(("client_secret", secret));
        }
        let mut request = reqwest::Client::new().post(&self.token_endpoint);
        if !post {
            request = request.basic_auth(client, Some(secret));
        }
        if let Some(proof) = dpop {
            request = request.header("dpop", proof);
        }
        request
            .form(&form)
            .send()
            .await
            .expect("token request")
            .json()
            .await
            .expect("token response JSON")
    }

    /// A token of [`CLIENT`] for `resource` holding `scope`.
    pub async fn client_token(&self, scope: &str, resource: &str) -> String {
        self.token(CLIENT, SECRET, Some(scope), Some(resource))
            .await
    }

    /// The server's counters (`jwks_fetches`, `token_requests`, `introspections`).
    pub async fn stats(&self) -> Value {
        reqwest::get(format!("{}/__stats", self.issuer))
            .await
            .expect("stats")
            .json()
            .await
            .expect("stats JSON")
    }

    /// Stops the server and waits for it to exit.
    pub async fn stop(mut self) {
        let _ = self.child.kill().await;
    }
}

/// The example MCP server (rmcp, tools `echo` and `whoami`) behind a gate, on 127.0.0.1.
pub struct GatedServer {
    pub url: String,
    pub gate: Gate,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for GatedServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl GatedServer {
    /// Binds a port, then builds the gate with `configure(resource)` and serves the example
    /// rmcp server (stateless, JSON answers) behind it.
    pub async fn start(configure: impl FnOnce(&str) -> GateBuilder) -> Self {
        Self::start_with(
            configure,
            Router::new().nest_service("/mcp", tools::mcp_service()),
        )
        .await
    }

    /// Like [`GatedServer::start`], with any router serving `/mcp`.
    pub async fn start_with(configure: impl FnOnce(&str) -> GateBuilder, mcp: Router) -> Self {
        Self::start_full(configure, mcp, |_| Router::new()).await
    }

    /// The example server as `cargo run --example server` runs it: the demo policy with its
    /// approval pages (outside the layer), in development mode for loopback approval URLs.
    /// `configure` adds issuers and options.
    pub async fn start_demo(configure: impl FnOnce(GateBuilder) -> GateBuilder) -> Self {
        Self::start_demo_serving(
            Router::new().nest_service("/mcp", tools::mcp_service()),
            configure,
        )
        .await
    }

    /// Like [`GatedServer::start_demo`], with any router serving `/mcp`.
    pub async fn start_demo_serving(
        mcp: Router,
        configure: impl FnOnce(GateBuilder) -> GateBuilder,
    ) -> Self {
        let approvals = super::approvals::Approvals::default();
        let pages = approvals.clone();
        Self::start_full(
            |resource| {
                let origin = resource.trim_end_matches("/mcp").to_owned();
                configure(
                    mcp_gate::Gate::builder()
                        .evaluate(super::policy::DemoPolicy::new(approvals, origin))
                        .development_mode(),
                )
            },
            mcp,
            move |gate| pages.router(gate.clone()),
        )
        .await
    }

    /// Like [`GatedServer::start_with`], the gate trusting `issuer` with `key` as its only
    /// signing key (a static key set: no discovery, no fetches); `configure` adds the rest.
    pub async fn start_trusting(
        issuer: &str,
        key: &TestKey,
        configure: impl FnOnce(GateBuilder) -> GateBuilder,
        mcp: Router,
    ) -> Self {
        let keys = StaticKeys::from_jwks_json(&key.jwks_json()).expect("a test key's JWKS reads");
        let issuer = Issuer::with_keys(issuer, keys);
        Self::start_with(move |_| configure(Gate::builder().issuer(issuer)), mcp).await
    }

    /// Serves `mcp` behind the gate, plus the metadata and `extra` routes outside it.
    pub async fn start_full(
        configure: impl FnOnce(&str) -> GateBuilder,
        mcp: Router,
        extra: impl FnOnce(&Gate) -> Router,
    ) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}/mcp", listener.local_addr().expect("addr"));
        Self::serve(listener, url.clone(), &url, configure, mcp, extra)
    }

    /// One replica of a deployment whose resource URI is `resource`: it listens on its own
    /// loopback port (`url`) and accepts the tokens every replica accepts.
    pub async fn start_replica(
        resource: &str,
        configure: impl FnOnce(&str) -> GateBuilder,
        mcp: Router,
    ) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}/mcp", listener.local_addr().expect("addr"));
        Self::serve(listener, url, resource, configure, mcp, |_| Router::new())
    }

    fn serve(
        listener: tokio::net::TcpListener,
        url: String,
        resource: &str,
        configure: impl FnOnce(&str) -> GateBuilder,
        mcp: Router,
        extra: impl FnOnce(&Gate) -> Router,
    ) -> Self {
        let gate = configure(resource)
            .resource(resource)
            .build()
            .expect("gate builds");
        let app = mcp
            .layer(gate.layer())
            .merge(gate.metadata_router())
            .merge(extra(&gate));
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { url, gate, task }
    }

    /// POSTs a JSON-RPC body with extra headers; returns status, headers and body.
    pub async fn post(&self, token: Option<&str>, headers: &[(&str, &str)], body: &str) -> Reply {
        let mut request = reqwest::Client::new()
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(body.to_owned());
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        Reply::from(request.send().await.expect("post")).await
    }

    /// POSTs `request` (built by `common::modern::modern`) with the headers that mirror it;
    /// without `with_name`, all but `Mcp-Name` (a request that names nothing sends none).
    pub async fn post_modern(
        &self,
        token: &str,
        request: &ModernRequest,
        with_name: bool,
    ) -> Reply {
        let (body, headers) = request;
        let headers: Vec<(&str, &str)> = headers
            .iter()
            .filter(|(header, _)| with_name || *header != "mcp-name")
            .map(|(header, value)| (*header, value.as_str()))
            .collect();
        self.post(Some(token), &headers, body).await
    }

    /// Sends a `tools/call` with an optional bearer token; returns status, headers and body.
    pub async fn call_tool(&self, token: Option<&str>, tool: &str, arguments: Value) -> Reply {
        let body = serde_json::json!({
            "jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": tool, "arguments": arguments}
        });
        let mut request = reqwest::Client::new()
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .json(&body);
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        Reply::from(request.send().await.expect("call")).await
    }
}

/// One HTTP answer, decoded.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub www_authenticate: Option<String>,
    pub body: Value,
    /// The body exactly as received.
    pub text: String,
    pub headers: reqwest::header::HeaderMap,
}

impl Reply {
    /// Reads a reqwest response whole.
    pub async fn from(response: reqwest::Response) -> Self {
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let text = response.text().await.expect("body");
        Reply {
            status,
            www_authenticate: headers
                .get("www-authenticate")
                .map(|v| v.to_str().expect("ascii").to_owned()),
            body: serde_json::from_str(&text).unwrap_or(Value::String(text.clone())),
            text,
            headers,
        }
    }

    /// The JSON-RPC answer (a result or an error) among the `data:` lines of an event-stream
    /// body; panics when there is none.
    pub fn streamed_answer(&self) -> Value {
        self.text
            .lines()
            .filter_map(|line| line.strip_prefix("data:"))
            .filter_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
            .find(|m| m.get("result").is_some() || m.get("error").is_some())
            .unwrap_or_else(|| panic!("no JSON-RPC answer in {self:?}"))
    }

    /// The text of the first content item of a tool result.
    pub fn tool_text(&self) -> &str {
        self.body["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_else(|| panic!("not a tool result: {:?}", self.body))
    }
}

/// What an SDK client run printed.
#[derive(Debug)]
pub struct ClientRun {
    pub success: bool,
    pub http: Vec<Value>,
    pub steps: Vec<Value>,
    pub stderr: String,
}

impl ClientRun {
    /// Every step line for calls of `name`, in order (a retried call has two).
    pub fn calls(&self, name: &str) -> Vec<&Value> {
        self.steps
            .iter()
            .filter(|s| s["step"] == "call" && s["name"] == name)
            .collect()
    }

    /// Whether the client asked `token_endpoint` for a token holding every scope of `scopes`
    /// (a step-up to the union of scopes).
    pub fn asked_for_scopes(&self, token_endpoint: &str, scopes: &[&str]) -> bool {
        self.http.iter().any(|h| {
            h["url"] == token_endpoint
                && h["form"]["scope"].as_str().is_some_and(|asked| {
                    scopes
                        .iter()
                        .all(|scope| asked.split(' ').any(|s| s == *scope))
                })
        })
    }

    /// The first step line of `kind` (`connect`, `step-up`, `list`, ...).
    pub fn step(&self, kind: &str) -> &Value {
        self.steps
            .iter()
            .find(|s| s["step"] == kind)
            .unwrap_or_else(|| panic!("no {kind} step: {self:#?}"))
    }

    /// The step line for a tool call.
    pub fn call(&self, name: &str) -> &Value {
        self.steps
            .iter()
            .find(|s| s["step"] == "call" && s["name"] == name)
            .unwrap_or_else(|| panic!("no call step for {name}: {self:#?}"))
    }
}

/// Which SDK client to run.
#[derive(Clone, Copy, Debug)]
pub enum Sdk {
    TypeScript,
    Python,
}

/// Runs an SDK client that may stop at URL elicitations: for each `{"elicit": {"mode": "url"}}`
/// line it prints, `visit` is called with the URL (as a user would open it), then the client
/// is told to go on (a line on its stdin; start it with `--wait-url`).
pub async fn run_client_visiting<F, Fut>(
    sdk: Sdk,
    url: &str,
    args: &[&str],
    mut visit: F,
) -> ClientRun
where
    F: FnMut(String) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    use tokio::io::AsyncWriteExt;

    let mut command = client_command(sdk, url, args);
    command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().expect("client starts");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut stderr = child.stderr.take().expect("stderr");
    let (mut http, mut steps) = (Vec::new(), Vec::new());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while let Ok(Ok(Some(line))) = tokio::time::timeout_at(deadline, lines.next_line()).await {
        let Ok(value) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        if let Some(exchange) = value.get("http") {
            http.push(exchange.clone());
            continue;
        }
        // A URL to visit, or a task to decide: the test acts, then lets the client go on.
        let waiting_on = if value["elicit"]["mode"] == "url" {
            value["elicit"]["url"].as_str()
        } else {
            value["task"]["taskId"].as_str()
        };
        if let Some(what) = waiting_on {
            visit(what.to_owned()).await;
            let _ = stdin.write_all(b"go\n").await;
            let _ = stdin.flush().await;
        }
        steps.push(value);
    }
    let status = tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .expect("client exits")
        .expect("client status");
    let mut err = String::new();
    let _ = tokio::io::AsyncReadExt::read_to_string(&mut stderr, &mut err).await;
    ClientRun {
        success: status.success(),
        http,
        steps,
        stderr: err,
    }
}

/// The command that runs `sdk`'s client against `url` with `args` and a 30 s timeout of its
/// own, killed when dropped (the peers installed first).
fn client_command(sdk: Sdk, url: &str, args: &[&str]) -> Command {
    ensure_peers();
    let mut command = match sdk {
        Sdk::TypeScript => {
            let mut c = Command::new("node");
            c.arg(peers_dir().join("ts-client.mjs"));
            c
        }
        Sdk::Python => {
            let mut c = Command::new(peers_dir().join(".venv").join("bin").join("python"));
            c.arg(peers_dir().join("py_client.py"));
            c
        }
    };
    command
        .arg(url)
        .args(args)
        .args(["--timeout-ms", "30000"])
        .kill_on_drop(true);
    command
}

/// Runs an SDK client against `url` with the given arguments (`--client-id`, `--call`, ...).
pub async fn run_client(sdk: Sdk, url: &str, args: &[&str]) -> ClientRun {
    let mut command = client_command(sdk, url, args);
    let output = tokio::time::timeout(Duration::from_secs(60), command.output())
        .await
        .expect("client finished within 60 s")
        .expect("client ran");
    let mut http = Vec::new();
    let mut steps = Vec::new();
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let Ok(value) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if let Some(exchange) = value.get("http") {
            http.push(exchange.clone());
        } else {
            steps.push(value);
        }
    }
    ClientRun {
        success: output.status.success(),
        http,
        steps,
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// The example policy's credential challenge for `transfer` (40.00 EUR), as an SDK client saw
/// it: `insufficient_authorization` with the payment details and a derived reference.
pub fn assert_credential_challenge(run: &ClientRun) {
    let challenge = run
        .http
        .iter()
        .filter_map(|h| h["www_authenticate"].as_str())
        .find(|c| c.contains("insufficient_authorization"))
        .unwrap_or_else(|| panic!("no credential challenge: {run:#?}"));
    let encoded = challenge
        .split("authorization_remediation=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("authorization_remediation parameter");
    let remedy: Value = serde_json::from_slice(
        &base64::Engine::decode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, encoded)
            .expect("base64url"),
    )
    .expect("JSON");
    assert_eq!(
        remedy["authorization_details"][0]["type"],
        "payment_initiation"
    );
    assert_eq!(
        remedy["authorization_details"][0]["instructedAmount"]["amount"],
        "40.00"
    );
    assert!(
        remedy["authorization_reference"]
            .as_str()
            .is_some_and(|r| r.starts_with("ref_"))
    );
}
