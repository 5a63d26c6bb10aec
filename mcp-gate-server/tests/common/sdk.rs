//! The official SDK clients, driven through the repository's driver scripts
//! (`tests/peers/ts-client.mjs`, `tests/peers/py_client.py`; their headers say the flags and
//! the JSON lines they print), and the operations listener's held-call console.

use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;

use super::peers_dir;

/// Which SDK's client runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sdk {
    /// `@modelcontextprotocol/sdk` 1.32.2 (`ts-client.mjs`): legacy MCP (2025-11-25).
    TypeScript,
    /// `mcp` 2.3.0 (`py_client.py`): modern MCP (2026-07-28) where the server answers
    /// `server/discover`, legacy otherwise.
    Python,
}

impl Sdk {
    /// Both, in the order the suites run them.
    pub const BOTH: [Sdk; 2] = [Sdk::TypeScript, Sdk::Python];
}

/// What one client run printed.
#[derive(Debug)]
pub struct ClientRun {
    /// Whether it exited 0 (every step ok).
    pub success: bool,
    /// Every `{"http": ...}` exchange, in order.
    pub http: Vec<Value>,
    /// Every other line (`step`, `elicit`, `task`, `poll`), in order.
    pub lines: Vec<Value>,
    /// What it wrote on stderr.
    pub stderr: String,
}

impl ClientRun {
    /// The first step line of `kind` (`connect`, `list`, `step-up`, ...).
    pub fn step(&self, kind: &str) -> &Value {
        self.lines
            .iter()
            .find(|line| line["step"] == kind)
            .unwrap_or_else(|| panic!("no {kind} step: {self:#?}"))
    }

    /// Every call step of `tool`, in order (a call retried after a step-up has two).
    pub fn calls(&self, tool: &str) -> Vec<&Value> {
        self.lines
            .iter()
            .filter(|line| line["step"] == "call" && line["name"] == tool)
            .collect()
    }

    /// The last call step of `tool`.
    pub fn call(&self, tool: &str) -> &Value {
        self.calls(tool)
            .last()
            .copied()
            .unwrap_or_else(|| panic!("no call of {tool}: {self:#?}"))
    }

    /// The tools the first `list` step showed, sorted.
    pub fn listed(&self) -> Vec<String> {
        let list = self.step("list");
        assert_eq!(list["ok"], true, "{self:#?}");
        let mut tools: Vec<String> = list["tools"]
            .as_array()
            .expect("tools")
            .iter()
            .filter_map(|tool| tool.as_str().map(str::to_owned))
            .collect();
        tools.sort();
        tools
    }

    /// The lines of `kind` that are not steps (`elicit`, `task`, `poll`).
    pub fn lines_of(&self, kind: &str) -> Vec<&Value> {
        self.lines
            .iter()
            .filter(|line| line.get(kind).is_some())
            .collect()
    }

    /// Whether the client asked `token_endpoint` for a token holding every scope of `scopes`.
    pub fn asked_for_scopes(&self, token_endpoint: &str, scopes: &[&str]) -> bool {
        self.http.iter().any(|exchange| {
            exchange["url"] == token_endpoint
                && exchange["form"]["scope"].as_str().is_some_and(|asked| {
                    scopes
                        .iter()
                        .all(|scope| asked.split(' ').any(|s| s == *scope))
                })
        })
    }
}

/// The command running `sdk`'s driver against `url` with `args`.
fn command(sdk: Sdk, url: &str, args: &[&str]) -> Command {
    let mut command = match sdk {
        Sdk::TypeScript => {
            let mut command = Command::new("node");
            command.arg(peers_dir().join("ts-client.mjs"));
            command
        }
        Sdk::Python => {
            let mut command = Command::new(peers_dir().join(".venv").join("bin").join("python"));
            command.arg(peers_dir().join("py_client.py"));
            command
        }
    };
    command.arg(url).args(args).kill_on_drop(true);
    command
}

/// Runs `sdk`'s client against `url` with `args` (bounded by 60 s). Each `{"task": ...}` line
/// it prints (a held call, with `--tasks --wait-task`) is handed to `decide` with the task's
/// id, as an approver would act on it, and then the client is told to go on (a line on its
/// stdin).
pub async fn run_client<F, Fut>(sdk: Sdk, url: &str, args: &[&str], mut decide: F) -> ClientRun
where
    F: FnMut(String) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let mut command = command(sdk, url, args);
    command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().expect("the client starts");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut stderr = child.stderr.take().expect("stderr");
    let errors = tokio::spawn(async move {
        let mut text = String::new();
        let _ = tokio::io::AsyncReadExt::read_to_string(&mut stderr, &mut text).await;
        text
    });
    let (mut http, mut lines) = (Vec::new(), Vec::new());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while let Ok(Ok(Some(line))) = tokio::time::timeout_at(deadline, stdout.next_line()).await {
        let Ok(value) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        if let Some(exchange) = value.get("http") {
            http.push(exchange.clone());
            continue;
        }
        if let Some(task) = value["task"]["taskId"].as_str() {
            decide(task.to_owned()).await;
            let _ = stdin.write_all(b"go\n").await;
            let _ = stdin.flush().await;
        }
        lines.push(value);
    }
    drop(stdin);
    let status = tokio::time::timeout_at(deadline, child.wait())
        .await
        .expect("the client finished within 60 s")
        .expect("wait");
    ClientRun {
        success: status.success(),
        http,
        lines,
        stderr: errors.await.unwrap_or_default(),
    }
}

/// [`run_client`] for a run that holds no call.
pub async fn run(sdk: Sdk, url: &str, args: &[&str]) -> ClientRun {
    run_client(sdk, url, args, |task| async move {
        panic!("no call was to be held, yet task {task} was made")
    })
    .await
}

/// The held-call console of a gateway's operations listener at `operations`
/// (`http://127.0.0.1:PORT`).
pub struct Console {
    operations: String,
    http: reqwest::Client,
}

impl Console {
    /// The console at `operations`.
    pub fn new(operations: &str) -> Self {
        Self {
            operations: operations.to_owned(),
            http: reqwest::Client::new(),
        }
    }

    /// `GET /tasks`: the waiting calls.
    pub async fn waiting(&self) -> Vec<Value> {
        let answer: Value = self
            .http
            .get(format!("{}/tasks", self.operations))
            .send()
            .await
            .expect("GET /tasks")
            .json()
            .await
            .expect("JSON");
        answer["tasks"].as_array().expect("tasks").clone()
    }

    /// `POST /tasks/{id}/approve` by `by`: the status and the answer.
    pub async fn approve(&self, id: &str, by: &str) -> (u16, Value) {
        self.decide(id, "approve", json!({ "by": by })).await
    }

    /// `POST /tasks/{id}/refuse` for `reason`: the status and the answer.
    pub async fn refuse(&self, id: &str, reason: &str) -> (u16, Value) {
        self.decide(id, "refuse", json!({ "reason": reason })).await
    }

    async fn decide(&self, id: &str, decision: &str, body: Value) -> (u16, Value) {
        let answer = self
            .http
            .post(format!("{}/tasks/{id}/{decision}", self.operations))
            .json(&body)
            .send()
            .await
            .expect("POST a decision");
        let status = answer.status().as_u16();
        (status, answer.json().await.unwrap_or(Value::Null))
    }
}
