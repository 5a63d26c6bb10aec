//! Writes a Cedar schema for a running MCP server, offline from the gate: asks the server for
//! `tools/list` (every page), saves the result as `tools.json`, and generates
//! `schema.cedarschema` from a stub with cedar-for-agents' generator
//! ([`mcp_gate::policy::cedar::generate_schema`]).
//!
//! ```text
//! cargo run --features cedar --example cedar_schema -- \
//!     --url http://127.0.0.1:3000/mcp --stub my.cedarschema --out policies/
//! ```
//!
//! Point it at the inner server (not the gate), or give `--token` for a server that wants one.
//! Through the gate, the list is the one its policy shows that token's caller: a tool hidden
//! from the caller is missing from the schema (`docs/cedar.md`, "Schemas from the server",
//! runs it against the example server, whose MCP endpoint is `127.0.0.1:8080/mcp`).
//! Without `--stub`, the gate's own stub (`GATE_SCHEMA_STUB`, namespace `Gate`) is used. It
//! speaks the 2025-11-25 handshake (`initialize`, then `tools/list` in that session), which
//! servers of both eras answer.

use std::path::PathBuf;

use clap::Parser;
use mcp_gate::policy::cedar::{GATE_SCHEMA_STUB, generate_schema};
use serde_json::{Value, json};

/// Writes `tools.json` and `schema.cedarschema` for an MCP server.
#[derive(Parser, Debug)]
struct Args {
    /// The server's MCP endpoint.
    #[arg(long)]
    url: String,
    /// A bearer token, when the server wants one.
    #[arg(long)]
    token: Option<String>,
    /// The schema stub (Cedar schema syntax, one namespace); default: the gate's own stub.
    #[arg(long)]
    stub: Option<PathBuf>,
    /// The folder to write `tools.json` and `schema.cedarschema` into.
    #[arg(long)]
    out: PathBuf,
}

/// How many `tools/list` pages are read at most.
const MAX_PAGES: usize = 100;

/// One JSON-RPC exchange over Streamable HTTP: the response to `id`, from a JSON body or an
/// SSE stream.
struct Client {
    http: reqwest::Client,
    url: String,
    token: Option<String>,
    session: Option<String>,
}

impl Client {
    async fn post(&mut self, message: Value) -> Result<Option<Value>, String> {
        let mut request = self
            .http
            .post(&self.url)
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-11-25")
            .json(&message);
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        if let Some(session) = &self.session {
            request = request.header("mcp-session-id", session);
        }
        let response = request.send().await.map_err(|e| e.to_string())?;
        let status = response.status();
        if let Some(session) = response.headers().get("mcp-session-id") {
            self.session = session.to_str().ok().map(str::to_owned);
        }
        let body = response.text().await.map_err(|e| e.to_string())?;
        if !status.is_success() {
            return Err(format!("the server answered {status}: {body}"));
        }
        let Some(id) = message.get("id") else {
            return Ok(None);
        };
        // A JSON body, or SSE events whose data lines carry messages.
        let candidates = std::iter::once(body.as_str())
            .chain(body.lines().filter_map(|line| line.strip_prefix("data:")));
        let answer = candidates
            .filter_map(|text| serde_json::from_str::<Value>(text.trim()).ok())
            .find(|message| message.get("id") == Some(id));
        match answer {
            Some(answer) if answer.get("error").is_some() => {
                Err(format!("the server refused: {}", answer["error"]))
            }
            Some(answer) => Ok(answer.get("result").cloned()),
            None => Err(format!("no answer to request {id} in: {body}")),
        }
    }
}

async fn list_tools(args: &Args) -> Result<Vec<Value>, String> {
    let mut client = Client {
        http: reqwest::Client::new(),
        url: args.url.clone(),
        token: args.token.clone(),
        session: None,
    };
    client
        .post(json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "mcp-gate-cedar-schema", "version": env!("CARGO_PKG_VERSION")},
        }}))
        .await?;
    client
        .post(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await?;
    let mut tools = Vec::new();
    let mut cursor: Option<String> = None;
    for page in 1..=MAX_PAGES {
        let params = match &cursor {
            Some(cursor) => json!({"cursor": cursor}),
            None => json!({}),
        };
        let result = client
            .post(json!({"jsonrpc": "2.0", "id": page, "method": "tools/list", "params": params}))
            .await?
            .ok_or("tools/list gave no result")?;
        let listed = result
            .get("tools")
            .and_then(Value::as_array)
            .ok_or("a result without tools")?;
        tools.extend(listed.iter().cloned());
        match result.get("nextCursor").and_then(Value::as_str) {
            Some(next) => cursor = Some(next.to_owned()),
            None => return Ok(tools),
        }
    }
    Err(format!("more than {MAX_PAGES} pages of tools"))
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), String> {
    let args = Args::parse();
    let stub = match &args.stub {
        Some(path) => {
            std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?
        }
        None => GATE_SCHEMA_STUB.to_owned(),
    };
    let tools = list_tools(&args).await?;
    let tools_json =
        serde_json::to_string_pretty(&json!({"tools": tools})).map_err(|e| e.to_string())?;
    let schema = generate_schema(&stub, &tools_json).map_err(|e| e.to_string())?;
    std::fs::create_dir_all(&args.out).map_err(|e| e.to_string())?;
    let write = |name: &str, text: &str| {
        let path = args.out.join(name);
        std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))
    };
    write("tools.json", &(tools_json + "\n"))?;
    write("schema.cedarschema", &schema)?;
    println!(
        "{} tools: wrote {} and {}",
        tools.len(),
        args.out.join("tools.json").display(),
        args.out.join("schema.cedarschema").display()
    );
    Ok(())
}
