//! The example server: an rmcp MCP server behind the mcp-gate layer, with a policy that
//! exercises every kind of decision (see `policy.rs`).
//!
//! ```text
//! cargo run --example server                       # with an embedded development issuer
//! cargo run --example server -- --dev-issuer-listen 127.0.0.1:9000   # ... at a fixed address
//! cargo run --example server -- --issuer https://auth.example.com --resource https://mcp.example.com/mcp
//! cargo run --example server --features redis -- --redis redis://127.0.0.1:6379/   # shared tasks
//! cargo run --example server --features cedar -- --cedar examples/server/cedar   # Cedar policies
//! MCP_GATE_CONTINUATION_KEYS="k1:<base64url secret>" cargo run --example server   # shared keys
//! cargo run --example server -- --config examples/server/server.example.toml   # options from a file
//! ```
//!
//! Every option can be set in a TOML file (`--config FILE`, keys named as the long flags,
//! `server.example.toml` lists them); a flag on the command line wins over the file
//! (`config.rs`).
//!
//! Calls to `deploy` are held for approval: decide them on the approval console
//! (`http://127.0.0.1:8081/tasks` by default, loopback only).
//!
//! With `--cedar DIR` the decisions come from the Cedar policy set in DIR instead of
//! `policy.rs`; `examples/server/cedar` is the same policy written in Cedar (see
//! `cedar_policy.rs`). The files are watched and reloaded when they change.

mod approvals;
#[cfg(feature = "cedar")]
mod cedar_policy;
mod config;
// The development issuer is the gateway's too (`mcp-gate-server`'s `[development-issuer]`):
// one file, compiled into both.
#[path = "../../mcp-gate-server/src/dev_issuer.rs"]
mod dev_issuer;
#[cfg(feature = "metrics")]
mod metrics_route;
mod options;
mod policy;
#[path = "../../mcp-gate-server/src/signing_key.rs"]
#[allow(
    dead_code,
    reason = "the development issuer makes a key; it never reads one from a file"
)]
mod signing_key;
mod task_console;
mod tools;

use std::path::Path;
use std::process::ExitCode;

use axum::Router;
use axum::serve::{Listener, ListenerExt};
use clap::CommandFactory;
use mcp_gate::policy::Policy;
use mcp_gate::{Gate, Issuer};

use options::Options;

/// The environment variable the example reads continuation-state keys from.
const KEYS_VARIABLE: &str = "MCP_GATE_CONTINUATION_KEYS";

/// Runs the server; a configuration or start-up error is printed as a sentence (its
/// `Display`, not its `Debug` form) and the process exits with status 1.
#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        // Colour codes only on a terminal: a log file or a collector gets plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,rmcp=warn".into()),
        )
        .init();
    // The command line, completed from `--config FILE` (flags win over the file). A bad
    // command line or `--help` exits here, as clap does; a bad file is an error below.
    let matches = Options::command().get_matches();
    let options = match config::resolve(&matches) {
        Ok(options) => options,
        Err(error) => {
            eprintln!("error: {error}");
            return ExitCode::FAILURE;
        }
    };
    match run(options).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}

/// Builds the gate from `options`, starts the listeners, prints the banner and serves until
/// Ctrl-C or SIGTERM.
async fn run(options: Options) -> Result<(), Box<dyn std::error::Error>> {
    let resource = options
        .resource
        .clone()
        .unwrap_or_else(|| format!("http://{}/mcp", options.listen));

    let origin = resource
        .split_once("://")
        .and_then(|(scheme, rest)| {
            rest.split('/')
                .next()
                .map(|host| format!("{scheme}://{host}"))
        })
        .ok_or("--resource must be an absolute URL")?;
    let approvals = approvals::Approvals::default();
    let shadow = match &options.shadow_cedar {
        Some(dir) => Some(cedar("--shadow-cedar", dir, approvals.clone(), &origin)?),
        None => None,
    };
    let (policy, policy_name) = match &options.cedar {
        Some(dir) => cedar("--cedar", dir, approvals.clone(), &origin)?,
        None => {
            let demo = policy::DemoPolicy::new(approvals.clone(), origin);
            (
                Box::new(demo) as Box<dyn Policy>,
                "built-in (policy.rs)".to_owned(),
            )
        }
    };
    let mut builder = Gate::builder()
        .evaluate(policy)
        .revision(options.revision.clone())
        .resource(&resource)
        .required_scopes(options.required_scopes.clone())
        .resource_name("mcp-gate example server");
    let mut dev = None;
    match (options.issuers.as_slice(), &options.jwks_uri) {
        ([], Some(_)) => return Err("--jwks-uri needs an --issuer".into()),
        ([], None) => {
            let scopes = ["mcp:read", "mcp:write", "mcp:admin"]
                .map(String::from)
                .to_vec();
            let issuer =
                dev_issuer::DevIssuer::start(options.dev_issuer_listen, &resource, scopes).await?;
            builder = builder.issuer(issuer.issuer.as_str());
            dev = Some(issuer);
        }
        ([issuer], Some(jwks_uri)) => {
            builder = builder.issuer(Issuer::with_jwks_uri(issuer, jwks_uri))
        }
        (_, Some(_)) => return Err("--jwks-uri applies to exactly one --issuer".into()),
        (issuers, None) => {
            for issuer in issuers {
                builder = builder.issuer(issuer.as_str());
            }
        }
    }
    if resource.starts_with("http://127.0.0.1") || resource.starts_with("http://localhost") {
        // Approval pages on loopback are plain http.
        builder = builder.development_mode();
    }
    if !options.console_listen.ip().is_loopback() {
        return Err("--console-listen must be a loopback address: anyone reaching the console can approve any held call".into());
    }
    if let Some(url) = &options.redis {
        builder = with_redis(builder, url).await?;
    }
    let keys = match &options.continuation_keys_file {
        Some(path) => Some(
            mcp_gate::continuation::Keyring::from_file(path)
                .map_err(|error| format!("--continuation-keys-file {}: {error}", path.display()))?,
        ),
        None if std::env::var_os(KEYS_VARIABLE).is_some() => Some(
            mcp_gate::continuation::Keyring::from_env(KEYS_VARIABLE)
                .map_err(|error| format!("{KEYS_VARIABLE}: {error}"))?,
        ),
        None => None,
    };
    let keys_source = match (&options.continuation_keys_file, &keys) {
        (Some(path), _) => format!("file {}", path.display()),
        (None, Some(_)) => format!("environment variable {KEYS_VARIABLE}"),
        (None, None) => {
            "random at start (states do not survive a restart or cross replicas)".to_owned()
        }
    };
    if let Some(keys) = keys {
        builder = builder.continuation_keys(keys);
    }
    builder = builder.allowed_origins(options.allowed_origins.iter().cloned());
    let audit = match &options.audit_log {
        Some(path) => Some(
            mcp_gate::audit::JsonLines::append_to(path)
                .map_err(|error| format!("--audit-log {}: {error}", path.display()))?,
        ),
        None => None,
    };
    if let Some(audit) = &audit {
        builder = builder.audit(audit.clone());
    }
    let shadow_name = match shadow {
        Some((shadow, name)) => {
            builder = builder.shadow_policy(shadow);
            Some(name)
        }
        None => None,
    };
    let gate = builder.build()?;

    let app = Router::new()
        .nest_service("/mcp", tools::mcp_service())
        .layer(gate.layer())
        .merge(gate.metadata_router())
        .merge(approvals.router(gate.clone()))
        .merge(operations_router(gate.clone())?);
    // TCP_NODELAY: streamed answers end with a small write of their own, which Nagle's
    // algorithm would hold for the client's delayed ACK (about 40 ms a call).
    let listener = tokio::net::TcpListener::bind(options.listen)
        .await
        .map_err(|error| format!("cannot listen on {} (--listen): {error}", options.listen))?
        .tap_io(|tcp| {
            let _ = tcp.set_nodelay(true);
        });
    let address = listener.local_addr()?;
    let console_listener = tokio::net::TcpListener::bind(options.console_listen)
        .await
        .map_err(|error| {
            format!(
                "cannot listen on {} (--console-listen): {error}",
                options.console_listen
            )
        })?;
    let console_address = console_listener.local_addr()?;
    let console = task_console::router(gate.tasks(), format!("http://{console_address}"));
    tokio::spawn(async move {
        if let Err(error) = axum::serve(console_listener, console).await {
            tracing::error!(%error, "the approval console stopped");
        }
    });

    println!("mcp-gate example server");
    println!("  MCP endpoint:      http://{address}/mcp");
    println!("  health:            http://{address}/healthz, readiness http://{address}/readyz");
    if cfg!(feature = "metrics") {
        println!("  metrics:           http://{address}/metrics");
    }
    println!("  resource:          {}", gate.resource());
    println!("  metadata:          {}", gate.metadata_url());
    println!("  SEP-2643 revision: {}", gate.revision());
    println!("  policy:            {policy_name}");
    if let Some(name) = &shadow_name {
        println!("  shadow policy:     {name} (asked beside it, never acted on)");
    }
    println!("  continuation keys: {keys_source}");
    match &options.audit_log {
        Some(path) => println!(
            "  audit records:     {} (one JSON line each)",
            path.display()
        ),
        None => println!("  audit records:     none (decisions go to the log only)"),
    }
    let stores = if options.redis.is_some() {
        "sessions, used states and held calls in Redis (shared by replicas)"
    } else {
        "sessions, used states and held calls in this process's memory"
    };
    println!("  stores:            {stores}");
    println!(
        "  approval console:  http://{console_address}/tasks (held calls: {})",
        if options.redis.is_some() {
            "Redis"
        } else {
            "memory"
        }
    );
    if let Some(dev) = &dev {
        println!(
            "  development issuer {} (client {} / {})",
            dev.issuer,
            dev_issuer::CLIENT_ID,
            dev_issuer::CLIENT_SECRET
        );
        println!();
        println!("Get a token and call `echo`:");
        println!();
        println!(
            "  TOKEN=$(curl -s -u {}:{} -d grant_type=client_credentials --data-urlencode resource={} {} | sed -E 's/.*\"access_token\":\"([^\"]+)\".*/\\1/')",
            dev_issuer::CLIENT_ID,
            dev_issuer::CLIENT_SECRET,
            gate.resource(),
            dev.token_endpoint
        );
        println!(
            "  curl -s http://{address}/mcp -H \"Authorization: Bearer $TOKEN\" -H 'Content-Type: application/json' \\\n    -H 'Accept: application/json, text/event-stream' \\\n    -d '{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{{\"name\":\"echo\",\"arguments\":{{\"text\":\"hello\"}}}}}}'"
        );
        println!();
    }
    // The key prefetch: a wrong issuer shows here, not as 503s to the first callers.
    let report = gate.load_keys().await;
    if report.is_ready() {
        tracing::info!("ready: keys loaded for every issuer, stores reachable");
    } else {
        tracing::warn!(%report, "serving, but not ready yet (/readyz answers 503 until it is)");
    }
    println!("Press Ctrl-C to stop.");
    axum::serve(listener, app)
        .with_graceful_shutdown(stop_signal())
        .await?;
    // Every record of the requests served is on disk before the process ends.
    if let Some(audit) = &audit
        && let Err(error) = audit.close()
    {
        tracing::error!(%error, "the audit log could not be flushed");
    }
    tracing::info!("stopped");
    Ok(())
}

/// Ctrl-C, or (on Unix) SIGTERM, which is how a container runtime or an orchestrator stops a
/// process: requests in flight finish, new connections are refused.
async fn stop_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut terminate) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = terminate.recv() => {}
                }
            }
            Err(error) => {
                tracing::warn!(%error, "no SIGTERM handler; Ctrl-C still stops the server");
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    let _ = tokio::signal::ctrl_c().await;
    tracing::info!("stopping: requests in flight finish first");
}

/// `/healthz` (the process serves), `/readyz` (the gate's readiness report: keys, stores,
/// policy), and with the feature `metrics`, `/metrics`: the gate's decision and refusal
/// counters in Prometheus's text format.
fn operations_router(gate: mcp_gate::Gate) -> Result<Router, Box<dyn std::error::Error>> {
    let router = Router::new()
        .route("/healthz", axum::routing::get(|| async { "ok\n" }))
        .route("/readyz", mcp_gate::readiness::handler(gate));
    #[cfg(feature = "metrics")]
    let router = metrics_route::with_metrics(router)?;
    Ok(router)
}

/// The Cedar policy set in `dir` (given with `flag`), watched for changes, and how the banner
/// names it.
#[cfg(feature = "cedar")]
fn cedar(
    flag: &str,
    dir: &Path,
    approvals: approvals::Approvals,
    origin: &str,
) -> Result<(Box<dyn Policy>, String), Box<dyn std::error::Error>> {
    let policy = cedar_policy::cedar_policy(dir, approvals, origin)
        .map_err(|error| format!("{flag} {}: {error}", dir.display()))?;
    // Runs as long as the process; an invalid edit is logged and the last good set stays.
    drop(policy.watch(std::time::Duration::from_secs(2)));
    let name = format!(
        "Cedar, {} ({} policies, reloaded on change)",
        dir.display(),
        policy.policy_count()
    );
    Ok((Box::new(policy), name))
}

/// Without the feature `cedar`: `--cedar` and `--shadow-cedar` are refused with how to build
/// the example.
#[cfg(not(feature = "cedar"))]
fn cedar(
    flag: &str,
    _dir: &Path,
    _approvals: approvals::Approvals,
    _origin: &str,
) -> Result<(Box<dyn Policy>, String), Box<dyn std::error::Error>> {
    Err(format!("{flag} needs the example built with `--features cedar` (cargo run --example server --features cedar -- {flag} DIR)").into())
}

/// Everything replicas share, in the Redis at `url` under the namespace `mcp-gate-example`:
/// held calls, used continuation states and legacy session bindings.
#[cfg(feature = "redis")]
async fn with_redis(
    builder: mcp_gate::GateBuilder,
    url: &str,
) -> Result<mcp_gate::GateBuilder, Box<dyn std::error::Error>> {
    use mcp_gate::store::RedisConnection;
    use mcp_gate::store::replay::RedisReplayStore;
    use mcp_gate::store::sessions::RedisSessionStore;
    use mcp_gate::store::tasks::RedisTaskStore;

    const NAMESPACE: &str = "mcp-gate-example";
    // One connection serves the three stores. An application that has its own client builds
    // it with `RedisConnection::from_client(client)` instead.
    let redis = RedisConnection::open(url).await?;
    let tasks = RedisTaskStore::with_connection(redis.clone(), NAMESPACE).await?;
    let replay = RedisReplayStore::with_connection(redis.clone(), NAMESPACE).await?;
    let sessions = RedisSessionStore::with_connection(
        redis,
        NAMESPACE,
        10_000,
        100,
        std::time::Duration::from_secs(3600),
    )
    .await?;
    Ok(builder
        .task_store(tasks)
        .replay_store(replay)
        .session_store(sessions))
}

/// Without the feature `redis`: `--redis` is refused with how to build it.
#[cfg(not(feature = "redis"))]
async fn with_redis(
    _builder: mcp_gate::GateBuilder,
    _url: &str,
) -> Result<mcp_gate::GateBuilder, Box<dyn std::error::Error>> {
    Err("--redis needs the example built with `--features redis`".into())
}
