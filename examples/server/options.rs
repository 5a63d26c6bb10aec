//! The example server's options: its command line, which is also the list of keys a
//! configuration file (`--config`, see `config.rs`) may set.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;

/// An MCP server behind the mcp-gate OAuth layer, with a policy that makes every kind of decision.
///
/// The inner server (rmcp) has 13 tools: echo, whoami, uppercase, word_count, now and add
/// (allowed), admin_report (needs scope mcp:admin), transfer (needs a payment credential),
/// delete_everything (unavailable), secret_sauce (undisclosed), share_folder (URL approval),
/// delete_file (asks to confirm) and deploy (held until approved on the console); three
/// prompts (greet, summarize, layoffs) and three resources (demo://readme, demo://changelog,
/// demo://payroll). The decisions come from policy.rs, or from a Cedar policy set (--cedar).
///
/// On --listen it serves /mcp (the MCP endpoint, behind the gate), the protected-resource
/// metadata (/.well-known/oauth-protected-resource and the resource's path: .../mcp by
/// default), /approve/{id} (the URL approvals of
/// share_folder), /healthz (ok while the process serves), /readyz (200 once keys are loaded
/// and the stores answer, 503 naming what is not) and, when built with --features metrics,
/// /metrics (Prometheus text). On --console-listen it serves the approval console for held
/// calls: /tasks (a page) and /tasks.json. Without --issuer it also starts a development
/// issuer (loopback only) and prints a command that gets a token and calls echo.
///
/// Every option can also be set in a TOML file (--config FILE), under the key named as the
/// flag without its leading -- (listen = "127.0.0.1:8080", issuer = ["https://..."]);
/// examples/server/server.example.toml lists them all. A flag given on the command line wins
/// over the file, and the file over the defaults shown here.
#[derive(Parser, Debug, Clone, PartialEq)]
#[command(name = "server")]
pub struct Options {
    /// Read options from this TOML file; flags given on the command line win over it.
    /// Relative paths in the file are taken from the file's folder.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Address to listen on for /mcp, the metadata, the approval pages, /healthz, /readyz
    /// and /metrics.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// The resource URI clients connect to, the audience tokens must carry (default:
    /// http://LISTEN/mcp); the development issuer mints its tokens for it unless asked for
    /// another. Replicas behind one address share one resource. On
    /// http://127.0.0.1 or http://localhost the gate runs in development mode (approval URLs
    /// may be plain http).
    #[arg(long, value_name = "URL")]
    pub resource: Option<String>,
    /// A trusted issuer (repeatable): https, or plain http on loopback. Its keys are found by
    /// discovery (or at --jwks-uri). Without one, a development issuer starts in-process.
    #[arg(long = "issuer", value_name = "URL")]
    pub issuers: Vec<String>,
    /// Where the development issuer listens, when there is no --issuer (loopback only). Port 0
    /// picks a free port at each start; a fixed one keeps the issuer URL and token endpoint the
    /// same across restarts (not its tokens: its signing key is new at each start).
    #[arg(
        long,
        value_name = "ADDR",
        default_value = "127.0.0.1:0",
        conflicts_with = "issuers"
    )]
    pub dev_issuer_listen: SocketAddr,
    /// The JWK set URL of the issuer, instead of discovery (needs exactly one --issuer).
    #[arg(long, value_name = "URL")]
    pub jwks_uri: Option<String>,
    /// A scope every request needs (repeatable).
    #[arg(long = "required-scope", value_name = "SCOPE")]
    pub required_scopes: Vec<String>,
    /// The SEP-2643 revision denials are rendered in: `current` or the 40-hex id of a revision
    /// the crate pins (the folders of spec/).
    #[arg(long, default_value = "current")]
    pub revision: String,
    /// Share held calls, used continuation states and legacy session bindings through this
    /// Redis (`redis://127.0.0.1:6379/`), so that any replica serves any request; without it
    /// they live in this process's memory. Needs `--features redis`. Replicas also need the
    /// same continuation keys (`--continuation-keys-file`). The example's URL approvals
    /// (`/approve/{id}`, share_folder) stay in the memory of the process that served them.
    #[arg(long, value_name = "URL")]
    pub redis: Option<String>,
    /// Where the approval console for held calls listens (loopback only: whoever reaches it
    /// can approve any held call).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8081")]
    pub console_listen: SocketAddr,
    /// A file of continuation-state keys, one `<id>:<base64url secret of at least 32 bytes>`
    /// per line, the first signing. Every replica must hold the same keys. Without it the
    /// environment variable MCP_GATE_CONTINUATION_KEYS is read (same format); without both,
    /// each process makes its own random key.
    #[arg(long, value_name = "FILE")]
    pub continuation_keys_file: Option<PathBuf>,
    /// A browser origin allowed to call the endpoint besides the resource's own (repeatable),
    /// for a browser client served from elsewhere (an inspector on another port, say).
    #[arg(long = "allowed-origin", value_name = "ORIGIN")]
    pub allowed_origins: Vec<String>,
    /// Decide with the Cedar policy set in this folder (`*.cedar`, `schema.cedarschema`,
    /// optional `entities.json` and `tools.json`) instead of the built-in example policy;
    /// `examples/server/cedar` is that policy in Cedar. The files are checked every 2 s and
    /// reloaded when they change (an invalid change is refused and the last good set stays).
    /// Needs `--features cedar`.
    #[arg(long, value_name = "DIR")]
    pub cedar: Option<PathBuf>,
    /// Append an audit record for every decision and every request authentication refuses to
    /// this file, one JSON object a line (CloudEvents; schemas/audit-record.v1.json, described
    /// in docs/audit.md). The file is created if missing. Without it, decisions go to the
    /// log only (target mcp_gate::decision).
    #[arg(long, value_name = "FILE")]
    pub audit_log: Option<PathBuf>,
    /// Also ask the Cedar policy set in this folder (the same files as --cedar) about every
    /// decision, as a shadow: never acted on, its ruling is logged, counted
    /// (mcp_gate_shadow_decisions_total, with --features metrics) and written to each audit
    /// record, marked where it differs from the live policy's. A way to try a rule change on
    /// live traffic before turning it on. Reloaded when its files change. Needs
    /// `--features cedar`.
    #[arg(long, value_name = "DIR")]
    pub shadow_cedar: Option<PathBuf>,
}
