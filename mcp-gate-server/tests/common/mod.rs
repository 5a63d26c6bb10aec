//! What the gateway's integration tests start: the real authorization server
//! (`tests/peers/as.mjs`, oidc-provider), real upstream MCP servers, and the gateway binary
//! itself, each on 127.0.0.1, each killed when dropped and bounded in time.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Once;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

pub mod sdk;

/// The `client_credentials` client as.mjs registers (HTTP Basic), and its secret.
pub const CLIENT: &str = "mcp-client";
/// The secret of every client as.mjs registers.
pub const SECRET: &str = "mcp-client-secret";

/// The repository's root (the library's folder).
pub fn repository() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the gateway crate lives in the repository")
        .to_path_buf()
}

/// `tests/peers` of the repository.
pub fn peers_dir() -> PathBuf {
    repository().join("tests").join("peers")
}

/// Installs the Node and Python peers if nothing has yet (idempotent, serialised).
pub fn ensure_peers() {
    static SETUP: Once = Once::new();
    SETUP.call_once(|| {
        let status = std::process::Command::new("bash")
            .arg(repository().join("scripts").join("setup-peers.sh"))
            .status()
            .expect("run scripts/setup-peers.sh");
        assert!(status.success(), "scripts/setup-peers.sh failed: {status}");
    });
}

/// Spawns `command` and reads its first stdout line, a JSON object (the peers' ready line).
async fn spawn_ready(mut command: Command, what: &str) -> (Child, Value) {
    command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true);
    let mut child = command
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {what}: {e}"));
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines();
    let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .unwrap_or_else(|_| panic!("{what} did not start within 30 s"))
        .expect("read stdout")
        .unwrap_or_else(|| panic!("{what} exited before its ready line"));
    let info = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{what}: {e}: {line}"));
    // Keep reading stdout so that the peer never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    (child, info)
}

/// A running oidc-provider (tests/peers/as.mjs).
pub struct AuthServer {
    _child: Child,
    /// `iss`.
    pub issuer: String,
    /// The token endpoint.
    pub token_endpoint: String,
}

impl AuthServer {
    /// Starts it with extra environment (`AS_TOKEN_TTL`, `AS_SCOPES`, ...).
    pub async fn start(env: &[(&str, &str)]) -> Self {
        ensure_peers();
        let mut command = Command::new("node");
        command
            .arg(peers_dir().join("as.mjs"))
            .env("AS_EXIT_ON_STDIN_EOF", "1")
            .env("AS_MAX_SECONDS", "300");
        for (key, value) in env {
            command.env(key, value);
        }
        let (child, info) = spawn_ready(command, "as.mjs").await;
        let text = |name: &str| info[name].as_str().expect(name).to_owned();
        Self {
            _child: child,
            issuer: text("issuer"),
            token_endpoint: text("token_endpoint"),
        }
    }

    /// A `client_credentials` token of [`CLIENT`] for `resource` with `scope`.
    pub async fn token(&self, scope: &str, resource: &str) -> String {
        let answer: Value = reqwest::Client::new()
            .post(&self.token_endpoint)
            .basic_auth(CLIENT, Some(SECRET))
            .form(&[
                ("grant_type", "client_credentials"),
                ("scope", scope),
                ("resource", resource),
            ])
            .send()
            .await
            .expect("token request")
            .json()
            .await
            .expect("token JSON");
        answer["access_token"]
            .as_str()
            .unwrap_or_else(|| panic!("no access_token in {answer}"))
            .to_owned()
    }
}

/// A running upstream MCP server.
pub struct UpstreamServer {
    _child: Child,
    /// Its MCP endpoint.
    pub url: String,
    /// The whole ready line.
    pub info: Value,
}

impl UpstreamServer {
    /// The TypeScript SDK's `McpServer` of tests/peers/ts-server.mjs (`echo`, `seen_headers`,
    /// `forbidden`; `GET /__log` lists what it received).
    pub async fn ts_plain() -> Self {
        ensure_peers();
        let mut command = Command::new("node");
        command
            .arg(peers_dir().join("ts-server.mjs"))
            .env("TS_SERVER_EXIT_ON_STDIN_EOF", "1")
            .env("TS_SERVER_MAX_SECONDS", "300");
        let (child, info) = spawn_ready(command, "ts-server.mjs").await;
        Self {
            _child: child,
            url: info["url"].as_str().expect("url").to_owned(),
            info,
        }
    }
}

impl UpstreamServer {
    /// The official Python SDK's `MCPServer` of tests/peers/py_upstream.py: the demo tools
    /// (`echo`, `admin_report`, `transfer`, `share_folder`, `deploy`, `delete_file`,
    /// `delete_everything`, `secret_sauce`), both eras; `GET /__runs` counts each tool's runs.
    pub async fn python_demo() -> Self {
        ensure_peers();
        let mut command = Command::new(peers_dir().join(".venv").join("bin").join("python"));
        command
            .arg(peers_dir().join("py_upstream.py"))
            .env("PY_UPSTREAM_EXIT_ON_STDIN_EOF", "1")
            .env("PY_UPSTREAM_MAX_SECONDS", "300");
        Self::demo(command, "py_upstream.py").await
    }

    /// The TypeScript SDK's `McpServer` of tests/peers/ts-upstream.mjs: the same tools as
    /// [`python_demo`](Self::python_demo), legacy sessions only.
    pub async fn typescript_demo() -> Self {
        ensure_peers();
        let mut command = Command::new("node");
        command
            .arg(peers_dir().join("ts-upstream.mjs"))
            .env("TS_UPSTREAM_EXIT_ON_STDIN_EOF", "1")
            .env("TS_UPSTREAM_MAX_SECONDS", "300");
        Self::demo(command, "ts-upstream.mjs").await
    }

    async fn demo(command: Command, what: &str) -> Self {
        let (child, info) = spawn_ready(command, what).await;
        Self {
            _child: child,
            url: info["url"].as_str().expect("url").to_owned(),
            info,
        }
    }

    /// The Python SDK's `MCPServer` of tests/peers/py_identity_upstream.py, trusting only the
    /// gateway's identity token (verified with PyJWT against `jwks_url`, `iss` `issuer`, `aud`
    /// its own URL, as docs/gateway.md shows); tool `whoami` returns the verified claims.
    pub async fn py_identity(jwks_url: &str, issuer: &str) -> Self {
        let python = peers_dir().join(".venv").join("bin").join("python");
        Self::identity(python, "py_identity_upstream.py", jwks_url, issuer).await
    }

    /// The TypeScript SDK's `McpServer` of tests/peers/ts-identity-upstream.mjs behind
    /// `requireBearerAuth`, trusting only the gateway's identity token (verified with jose,
    /// as docs/gateway.md shows); tool `whoami` returns the caller it read.
    pub async fn ts_identity(jwks_url: &str, issuer: &str) -> Self {
        Self::identity("node".into(), "ts-identity-upstream.mjs", jwks_url, issuer).await
    }

    async fn identity(program: PathBuf, script: &str, jwks_url: &str, issuer: &str) -> Self {
        ensure_peers();
        let mut command = Command::new(program);
        command
            .arg(peers_dir().join(script))
            .arg("--jwks-url")
            .arg(jwks_url)
            .arg("--issuer")
            .arg(issuer)
            .arg("--max-seconds")
            .arg("300");
        let (child, info) = spawn_ready(command, script).await;
        Self {
            _child: child,
            url: info["url"].as_str().expect("url").to_owned(),
            info,
        }
    }

    /// How many times each tool of a demo upstream ran (`{"deploy": 1, ...}`).
    pub async fn runs(&self) -> Value {
        let url = self.info["runs_url"].as_str().expect("a demo upstream");
        reqwest::get(url)
            .await
            .expect("GET /__runs")
            .json()
            .await
            .expect("runs JSON")
    }

    /// The TypeScript demo upstream's sessions: `{"opened": n, "open": m}`; `None` for an
    /// upstream that does not count them.
    pub async fn sessions(&self) -> Option<Value> {
        let url = self.info["sessions_url"].as_str()?;
        let sessions = reqwest::get(url)
            .await
            .expect("GET /__sessions")
            .json()
            .await
            .expect("sessions JSON");
        Some(sessions)
    }

    /// What ts-server.mjs received so far (`GET /__log`), one entry per HTTP request.
    pub async fn received(&self) -> Vec<Value> {
        let url = self.info["log_url"]
            .as_str()
            .expect("a server with a log_url");
        let log: Value = reqwest::get(url)
            .await
            .expect("GET /__log")
            .json()
            .await
            .expect("a JSON log");
        let Value::Array(entries) = log else {
            panic!("the log is not a list: {log}");
        };
        entries
    }
}

/// Free loopback ports for a test that must name an address (the resource URI, the
/// configuration file) before the gateway starts: below the kernel's ephemeral range, so no
/// other process is handed one between the check and the gateway's bind.
#[path = "../../../tests/common/ports.rs"]
pub mod ports;
#[allow(unused_imports)] // the conformance test takes `ports` whole
pub use ports::free_port;

/// The gateway binary, running on a configuration file in a folder of its own.
pub struct Gateway {
    child: Child,
    /// The folder holding the configuration (and whatever the test put beside it).
    pub dir: tempfile::TempDir,
    /// The client listener, `http://127.0.0.1:PORT`.
    pub origin: String,
    /// The operations listener, when the file has one.
    pub operations: Option<String>,
    /// The development issuer's identifier, when the file starts one.
    pub development_issuer: Option<String>,
    /// Everything it logged on stderr so far (read by [`Gateway::log`]).
    log: std::sync::Arc<std::sync::Mutex<String>>,
}

/// The line the binary prints last once it serves.
pub const STARTED: &str = "Send SIGTERM";

/// The configuration file's name in the gateway's folder.
pub const CONFIG: &str = "gateway.toml";

impl Gateway {
    /// A token from the gateway's development issuer (`dev-client`), for `resource`.
    pub async fn development_token(&self, resource: &str) -> String {
        let issuer = self
            .development_issuer
            .as_deref()
            .expect("a development issuer");
        let answer: Value = reqwest::Client::new()
            .post(format!("{issuer}/token"))
            .basic_auth("dev-client", Some("dev-secret"))
            .form(&[("grant_type", "client_credentials"), ("resource", resource)])
            .send()
            .await
            .expect("token")
            .json()
            .await
            .expect("JSON");
        answer["access_token"].as_str().expect("a token").to_owned()
    }

    /// Writes `config` (and each `(relative path, content)` of `files`) into a new folder and
    /// starts the binary on it; returns once it prints where it listens.
    pub async fn start(config: &str, files: &[(&str, &str)]) -> Self {
        Self::start_with_env(config, files, &[]).await
    }

    /// [`start`](Self::start) with extra environment variables.
    pub async fn start_with_env(
        config: &str,
        files: &[(&str, &str)],
        env: &[(&str, &str)],
    ) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join(CONFIG), config).expect("write config");
        for (path, content) in files {
            let path = dir.path().join(path);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).expect("mkdir");
            }
            std::fs::write(path, content).expect("write file");
        }
        Self::start_in(dir, env).await
    }

    /// Starts the binary on `dir/gateway.toml`.
    pub async fn start_in(dir: tempfile::TempDir, env: &[(&str, &str)]) -> Self {
        let mut command = Command::new(env!("CARGO_BIN_EXE_mcp-gate-server"));
        command
            .arg("--config")
            .arg(dir.path().join(CONFIG))
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        for (key, value) in env {
            command.env(key, value);
        }
        let mut child = command.spawn().expect("spawn mcp-gate-server");
        let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let stderr = child.stderr.take().expect("stderr");
        let sink = log.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let mut log = sink.lock().expect("log");
                log.push_str(&line);
                log.push('\n');
            }
        });
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        let mut origin = None;
        let mut operations = None;
        let mut development_issuer = None;
        let started = tokio::time::timeout(Duration::from_secs(60), async {
            while let Ok(Some(line)) = lines.next_line().await {
                let line = line.trim();
                if let Some(address) = line.strip_prefix("listening:") {
                    origin = Some(format!("http://{}", address.trim()));
                } else if let Some(address) = line.strip_prefix("operations:") {
                    operations = Some(format!("http://{}", address.trim()));
                } else if let Some(rest) = line.strip_prefix("development issuer ") {
                    development_issuer = rest.split_whitespace().next().map(str::to_owned);
                } else if line.starts_with(STARTED) {
                    break;
                }
            }
        })
        .await;
        let Some(origin) = origin.filter(|_| started.is_ok()) else {
            let _ = child.kill().await;
            let log = log.lock().expect("log").clone();
            panic!("the gateway did not start:\n{log}");
        };
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Self {
            child,
            dir,
            origin,
            operations,
            development_issuer,
            log,
        }
    }

    /// What it logged so far.
    pub fn log(&self) -> String {
        self.log.lock().expect("log").clone()
    }

    /// The configuration file's path.
    pub fn config_path(&self) -> PathBuf {
        self.dir.path().join(CONFIG)
    }

    /// A path in its folder.
    pub fn path(&self, relative: impl AsRef<Path>) -> PathBuf {
        self.dir.path().join(relative)
    }

    /// The process id (for signals).
    pub fn pid(&self) -> u32 {
        self.child.id().expect("running")
    }

    /// Sends `signal` (`"HUP"`, `"TERM"`) to it.
    pub fn signal(&self, signal: &str) {
        let status = std::process::Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.pid().to_string())
            .status()
            .expect("kill");
        assert!(status.success());
    }

    /// Waits for it to exit (at most `limit`) and returns its status.
    pub async fn wait(&mut self, limit: Duration) -> std::process::ExitStatus {
        tokio::time::timeout(limit, self.child.wait())
            .await
            .expect("the gateway did not exit in time")
            .expect("wait")
    }
}
