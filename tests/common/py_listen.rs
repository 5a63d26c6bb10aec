//! The official Python SDK client's task listen (`tests/peers/py_listen.py`, which says which
//! SDK calls drive it), its lines read as they come. Shared by the library's task-notification
//! tests (`tests/suite/task_notify.rs`) and the gateway's replicas test, which includes this
//! file by path; the caller installs the peers first.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};

/// The Python SDK client listening for `ids` at `url`.
pub struct Listener {
    child: Child,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Listener {
    /// Starts the client from the peers folder `peers` (its `.venv` and `py_listen.py`),
    /// listening at the MCP endpoint `url` with `token` for the tasks `ids`.
    pub fn start(peers: &Path, url: &str, token: &str, ids: &[&str]) -> Self {
        let mut command = Command::new(peers.join(".venv").join("bin").join("python"));
        command.arg(peers.join("py_listen.py")).arg(url).args([
            "--token",
            token,
            "--timeout-ms",
            "60000",
        ]);
        for id in ids {
            command.args(["--task-id", id]);
        }
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("the Python client starts");
        let stdout = child.stdout.take().expect("stdout");
        Self {
            child,
            lines: BufReader::new(stdout).lines(),
        }
    }

    /// The next line the client printed (generous bound: a busy machine starts Python slowly).
    pub async fn next(&mut self) -> Value {
        let line = tokio::time::timeout(Duration::from_secs(60), self.lines.next_line())
            .await
            .expect("the client printed within 60 s")
            .expect("stdout readable");
        match line {
            Some(line) => serde_json::from_str(&line).expect("one JSON line"),
            None => panic!("the client ended early: {}", self.stderr().await),
        }
    }

    /// Every line left, once the client has exited, and whether it exited 0.
    pub async fn rest(mut self) -> (Vec<Value>, bool) {
        let mut lines = Vec::new();
        for _ in 0..1000 {
            let line = tokio::time::timeout(Duration::from_secs(60), self.lines.next_line())
                .await
                .expect("the client ended within 60 s")
                .expect("stdout readable");
            match line {
                Some(line) => lines.push(serde_json::from_str(&line).expect("one JSON line")),
                None => break,
            }
        }
        let status = tokio::time::timeout(Duration::from_secs(30), self.child.wait())
            .await
            .expect("the client exits")
            .expect("exit status");
        (lines, status.success())
    }

    /// What the client wrote on stderr so far (read once it has ended).
    pub async fn stderr(&mut self) -> String {
        let mut text = String::new();
        if let Some(mut stderr) = self.child.stderr.take() {
            let _ = tokio::time::timeout(Duration::from_secs(5), stderr.read_to_string(&mut text))
                .await;
        }
        text
    }
}

/// The `params` of a `{"task": ...}` line, checked to be one.
pub fn task(line: &Value) -> &Value {
    line.get("task")
        .unwrap_or_else(|| panic!("a notification: {line}"))
}
