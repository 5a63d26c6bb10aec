//! The server side of `scripts/bench-peers.sh`: the example rmcp server (`echo` and friends),
//! bare or behind the layer, on `127.0.0.1:PORT/mcp`, for an external load generator (`wrk`).
//! It also mints the ES256 key set and the tokens that every configuration, the TypeScript
//! SDK peer included, verifies.
//!
//! ```text
//! cargo build --release --example bench_target
//! bench_target mint  --port 18931 --out DIR --tokens 20000     # DIR/jwks.json, DIR/token.txt, DIR/tokens.txt
//! bench_target serve --port 18931 --jwks DIR/jwks.json --config allow
//! ```
//!
//! Configurations (`--config`):
//! - `bare`:    the rmcp server alone, no authentication
//! - `allow`:   behind `gate.layer()`, static ES256 key, scope `mcp:read`, policy `allow_all`
//! - `deny`:    as `allow` with `deny_all`: the layer answers every call with an `unavailable` denial
//! - `nocache`: as `allow` with `token_cache_capacity(0)`: every request verifies the signature
//!
//! Built with `--features metrics`, a gated configuration also installs the Prometheus recorder
//! and serves its text on `/metrics`: the cost of counting, as a production server pays it
//! (`BENCH_FEATURES=metrics scripts/bench-peers.sh`).
//!
//! `serve` prints one JSON line (`{"ready":true,"url":...}`) once it listens, and exits by itself
//! after `--max-seconds`, so that a forgotten server never outlives its benchmark for long.

#[path = "../tests/common/tokens.rs"]
mod tokens;

#[cfg(feature = "metrics")]
#[path = "server/metrics_route.rs"]
mod metrics_route;

#[path = "server/tools.rs"]
#[allow(dead_code)]
mod tools;

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use axum::Router;
use axum::serve::ListenerExt;
use clap::{Parser, Subcommand, ValueEnum};
use mcp_gate::{Gate, Issuer, StaticKeys};
use serde_json::json;

/// The issuer named in every token (there is no issuer to fetch: the keys are static).
const ISSUER: &str = "https://issuer.bench.example";
/// The scope every configuration requires and every token carries.
const SCOPE: &str = "mcp:read";

type Failure = Box<dyn std::error::Error + Send + Sync>;

#[derive(Parser)]
#[command(about = "Benchmark target for scripts/bench-peers.sh")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Writes a fresh ES256 key set and tokens for `http://127.0.0.1:PORT/mcp`.
    Mint {
        /// The port the servers will listen on: the tokens' audience names it.
        #[arg(long)]
        port: u16,
        /// Directory for `jwks.json` (public key set), `token.txt` (one token) and
        /// `tokens.txt` (`--tokens` tokens, one a line, each with its own `sub` and `jti`).
        #[arg(long)]
        out: PathBuf,
        /// How many distinct tokens go to `tokens.txt`.
        #[arg(long, default_value_t = 10_000)]
        tokens: usize,
        /// Lifetime of the tokens, in seconds.
        #[arg(long, default_value_t = 4 * 3600)]
        lifetime: u64,
    },
    /// Serves one configuration on `127.0.0.1:PORT/mcp`.
    Serve {
        #[arg(long)]
        port: u16,
        #[arg(long, value_enum)]
        config: Config,
        /// The public key set written by `mint` (not needed for `bare`).
        #[arg(long)]
        jwks: Option<PathBuf>,
        /// Exit after this many seconds whatever happens.
        #[arg(long, default_value_t = 3600)]
        max_seconds: u64,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum Config {
    Bare,
    Allow,
    Deny,
    Nocache,
}

fn resource(port: u16) -> String {
    format!("http://127.0.0.1:{port}/mcp")
}

fn main() -> Result<(), Failure> {
    match Cli::parse().command {
        Command::Mint {
            port,
            out,
            tokens: count,
            lifetime,
        } => mint(port, &out, count, lifetime),
        Command::Serve {
            port,
            config,
            jwks,
            max_seconds,
        } => tokio::runtime::Runtime::new()?.block_on(async move {
            match tokio::time::timeout(Duration::from_secs(max_seconds), serve(port, config, jwks))
                .await
            {
                Ok(outcome) => outcome,
                Err(_) => {
                    eprintln!("bench_target: --max-seconds {max_seconds} reached, exiting");
                    Ok(())
                }
            }
        }),
    }
}

fn mint(port: u16, out: &std::path::Path, count: usize, lifetime: u64) -> Result<(), Failure> {
    std::fs::create_dir_all(out)?;
    let mut kid = [0u8; 6];
    getrandom::fill(&mut kid).map_err(|e| format!("random bytes: {e}"))?;
    let run: String = kid.iter().map(|b| format!("{b:02x}")).collect();
    let key = tokens::TestKey::es256(&format!("bench-{run}"));
    let audience = resource(port);
    let now = tokens::now();
    let token = |n: usize| {
        key.mint(&json!({
            "iss": ISSUER,
            "aud": audience,
            "sub": format!("bench-user-{n}"),
            "client_id": "bench-client",
            "jti": format!("bench-{run}-{n}"),
            "iat": now,
            "exp": now + lifetime,
            "scope": SCOPE,
        }))
    };
    std::fs::write(out.join("jwks.json"), key.jwks_json())?;
    std::fs::write(out.join("token.txt"), token(usize::MAX))?;
    let mut all = String::with_capacity(count * 600);
    for n in 0..count {
        all.push_str(&token(n));
        all.push('\n');
    }
    std::fs::write(out.join("tokens.txt"), all)?;
    println!(
        "{}",
        json!({"jwks": out.join("jwks.json"), "tokens": count, "audience": audience, "issuer": ISSUER})
    );
    Ok(())
}

/// With the feature `metrics`: the Prometheus recorder installed and drained, as the example
/// server's (a production server's) is, and its text on `GET /metrics` (outside the layer).
#[cfg(feature = "metrics")]
fn with_metrics(app: Router) -> Result<Router, Failure> {
    Ok(metrics_route::with_metrics(app)?)
}

/// Without the feature `metrics`: the server as it is.
#[cfg(not(feature = "metrics"))]
fn with_metrics(app: Router) -> Result<Router, Failure> {
    Ok(app)
}

async fn serve(port: u16, config: Config, jwks: Option<PathBuf>) -> Result<(), Failure> {
    let url = resource(port);
    let mcp = Router::new().nest_service("/mcp", tools::mcp_service());
    let app = match config {
        Config::Bare => mcp,
        Config::Allow | Config::Deny | Config::Nocache => {
            let path = jwks.ok_or("--jwks is needed for a gated configuration")?;
            let keys = StaticKeys::from_jwks_json(&std::fs::read_to_string(&path)?)?;
            let builder = Gate::builder()
                .resource(&url)
                .issuer(Issuer::with_keys(ISSUER, keys))
                .required_scopes([SCOPE]);
            let builder = match config {
                Config::Deny => {
                    builder.evaluate(mcp_gate::policy::deny_all("not for the benchmark"))
                }
                _ => builder.evaluate(mcp_gate::policy::allow_all()),
            };
            let builder = match config {
                Config::Nocache => builder.token_cache_capacity(0),
                _ => builder,
            };
            let gate = builder.build()?;
            with_metrics(mcp.layer(gate.layer()).merge(gate.metadata_router()))?
        }
    };
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await?
        .tap_io(|tcp| {
            let _ = tcp.set_nodelay(true);
        });
    let name = match config {
        Config::Bare => "bare",
        Config::Allow => "allow",
        Config::Deny => "deny",
        Config::Nocache => "nocache",
    };
    println!(
        "{}",
        json!({"ready": true, "url": url, "config": name, "pid": std::process::id()})
    );
    std::io::stdout().flush()?;
    axum::serve(listener, app).await?;
    Ok(())
}
