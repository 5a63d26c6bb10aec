//! Start to stop: the file read, the stores opened, the gate built, the listeners bound, the
//! reloader started, and on SIGTERM (or Ctrl-C) the calls in flight drained before exit.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum_server::accept::NoDelayAcceptor;
use http::Request;

use crate::assemble::{self, AssembleError, Lasting};
use crate::config::{Config, ConfigError};
use crate::live::{Current, Live};
use crate::stores::{Backend, StoreOpenError, Stores};

/// How long in-flight calls get to finish after SIGTERM before the process exits anyway.
pub const DRAIN: Duration = Duration::from_secs(30);

/// Why the gateway could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The configuration file was refused.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The gate could not be built from it.
    #[error(transparent)]
    Assemble(#[from] AssembleError),
    /// The stores could not be opened.
    #[error("{file}: [redis]: {source}")]
    Stores {
        /// The configuration file.
        file: String,
        /// Why.
        #[source]
        source: StoreOpenError,
    },
    /// A listener could not be bound.
    #[error("{file}: {key}: cannot listen on {address}: {source}")]
    Listen {
        /// The configuration file.
        file: String,
        /// The address.
        address: SocketAddr,
        /// The key that names it.
        key: &'static str,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The TLS certificate or key could not be used.
    #[error("{file}: [tls]: {message}")]
    Tls {
        /// The configuration file.
        file: String,
        /// Why.
        message: String,
    },
    /// No random source for the start-up continuation key or identity key, or the audit log
    /// cannot be opened, or the metrics recorder cannot be installed.
    #[error("{0}")]
    Other(String),
}

/// The gateway, started: where it listens, and how to stop it.
pub struct Running {
    /// The client listener's address.
    pub address: SocketAddr,
    /// The operations listener's address, when there is one.
    pub operations: Option<SocketAddr>,
    /// The gate in force.
    pub live: Live,
    handle: axum_server::Handle<SocketAddr>,
    served: tokio::task::JoinHandle<std::io::Result<()>>,
    lasting: Lasting,
}

impl Running {
    /// Stops taking connections, lets calls in flight finish (at most `drain`), and returns
    /// once the client listener has closed; the audit log is flushed. From the start of the
    /// drain `/readyz` answers `503`.
    pub async fn shutdown(self, drain: Duration) -> std::io::Result<()> {
        let began = std::time::Instant::now();
        self.live.begin_draining();
        tracing::info!(
            connections = self.handle.connection_count(),
            ?drain,
            "draining: the listener is closed, open connections finish their calls"
        );
        self.handle.graceful_shutdown(Some(drain));
        let served = self.served.await.unwrap_or(Ok(()));
        if began.elapsed() >= drain {
            tracing::warn!(
                ?drain,
                "the drain ran out: calls still in flight were cut off"
            );
        } else {
            tracing::info!(took = ?began.elapsed(), "drained: every call in flight finished");
        }
        if let Some(audit) = &self.lasting.audit
            && let Err(error) = audit.close()
        {
            tracing::error!(%error, "the audit log could not be flushed");
        }
        served
    }
}

/// Reads and checks the file at `path` and builds a gate from it (policies, keys files and
/// every option the library checks), over stores in memory, without binding or fetching
/// anything: what `--check` runs.
pub fn check(path: &Path) -> Result<Config, StartError> {
    let config = Config::load(path)?;
    let random_keys = mcp_gate::continuation::Keyring::random().map_err(|error| {
        StartError::Other(format!("no continuation key could be made: {error}"))
    })?;
    let identity_key = crate::identity::SigningKey::generate()
        .map_err(|error| StartError::Other(format!("no identity key could be made: {error}")))?;
    let mut stores = Stores::memory_with(&config.file.sessions);
    if config.file.tasks.notifications.is_some() {
        // What the check builds with: the feed's own connection is not opened.
        stores.task_notifications = Some(mcp_gate::tasks::TaskNotifications::in_process());
    }
    let lasting = Lasting {
        stores,
        random_keys,
        audit: None,
        // The identifier the development issuer would have, without starting it.
        development_issuer: config
            .file
            .development_issuer
            .as_ref()
            .map(|development| format!("http://{}", development.get_ref().listen)),
        identity_key,
    };
    assemble::assemble(&config, &lasting)?;
    Ok(config)
}

/// Reads `path`, starts everything, and returns once the listeners are bound.
pub async fn start(path: &Path) -> Result<Running, StartError> {
    let hangups = crate::reload::hangups();
    // Before the files are read: a change made from here on is seen by the first check.
    let seen = crate::reload::fingerprint(path);
    let config = Config::load(path)?;
    let file_name = config.path.display().to_string();
    let metrics = match &config.file.operations {
        Some(operations) if operations.get_ref().metrics => Some(
            crate::operations::install_metrics()
                .map_err(|error| StartError::Other(error.to_string()))?,
        ),
        _ => None,
    };
    let stores = match &config.file.redis {
        Some(redis) => Stores::redis(redis.get_ref(), &config.file.sessions)
            .await
            .map_err(|source| StartError::Stores {
                file: file_name.clone(),
                source,
            })?,
        None => Stores::memory_with(&config.file.sessions),
    };
    let stores = stores
        .with_task_feed(&config.file)
        .await
        .map_err(|source| StartError::Stores {
            file: file_name.clone(),
            source,
        })?;
    let random_keys = mcp_gate::continuation::Keyring::random().map_err(|error| {
        StartError::Other(format!("no continuation key could be made: {error}"))
    })?;
    let audit = match &config.file.audit {
        Some(audit) => {
            let path = config.resolve(&audit.file);
            Some(
                mcp_gate::audit::JsonLines::append_to(&path).map_err(|error| {
                    StartError::Other(format!(
                        "{file_name}: [audit] file {}: {error}",
                        path.display()
                    ))
                })?,
            )
        }
        None => None,
    };
    let development = match &config.file.development_issuer {
        Some(development) => {
            let development = development.get_ref();
            let issuer = crate::dev_issuer::DevIssuer::start(
                development.listen,
                config.file.resource.uri.get_ref().as_str(),
                development.scopes.clone(),
            )
            .await
            .map_err(|error| {
                StartError::Other(format!("{file_name}: [development-issuer]: {error}"))
            })?;
            tracing::warn!(
                issuer = %issuer.issuer,
                "a development issuer runs in this process: anyone who can reach it gets tokens; never protect real data with it"
            );
            Some(issuer)
        }
        None => None,
    };
    let identity_key = crate::identity::SigningKey::generate()
        .map_err(|error| StartError::Other(format!("no identity key could be made: {error}")))?;
    let lasting = Lasting {
        stores,
        random_keys,
        audit,
        development_issuer: development.as_ref().map(|issuer| issuer.issuer.clone()),
        identity_key,
    };
    let current = build(&config, &lasting, metrics.as_ref())?;
    report_readiness(&current.gate).await;
    banner(&config, &current, lasting.stores.backend);
    if let Some(issuer) = &development {
        development_banner(issuer, current.gate.resource().as_str());
    }
    let live = Live::new(current);

    let client = client_service(live.clone(), config.file.forwarded.trust);
    let handle = axum_server::Handle::new();
    let listen = config.file.listen;
    let cannot_listen = |address: SocketAddr, key: &'static str| {
        let file = file_name.clone();
        move |source| StartError::Listen {
            file,
            address,
            key,
            source,
        }
    };
    let std_listener =
        std::net::TcpListener::bind(listen).map_err(cannot_listen(listen, "listen"))?;
    std_listener
        .set_nonblocking(true)
        .map_err(cannot_listen(listen, "listen"))?;
    let address = std_listener
        .local_addr()
        .map_err(cannot_listen(listen, "listen"))?;
    let make = client.into_make_service_with_connect_info::<SocketAddr>();
    // Streamed answers are written as they come, the last chunk apart: with Nagle's algorithm
    // on, that last small write waits for the client's delayed ACK (about 40 ms a call).
    let served = match &config.file.tls {
        Some(tls) => {
            let rustls = axum_server::tls_rustls::RustlsConfig::from_pem_file(
                config.resolve(&tls.certificate),
                config.resolve(&tls.private_key),
            )
            .await
            .map_err(|error| StartError::Tls {
                file: file_name.clone(),
                message: error.to_string(),
            })?;
            let server = axum_server::from_tcp_rustls(std_listener, rustls)
                .map_err(cannot_listen(listen, "listen"))?
                .map(|tls| tls.acceptor(NoDelayAcceptor::new()))
                .handle(handle.clone());
            tokio::spawn(server.serve(make))
        }
        None => {
            let server = axum_server::from_tcp(std_listener)
                .map_err(cannot_listen(listen, "listen"))?
                .acceptor(NoDelayAcceptor::new())
                .handle(handle.clone());
            tokio::spawn(server.serve(make))
        }
    };

    let operations = match &config.file.operations {
        Some(operations) => {
            let address = operations.get_ref().listen;
            let listener = tokio::net::TcpListener::bind(address)
                .await
                .map_err(cannot_listen(address, "[operations] listen"))?;
            let bound = listener
                .local_addr()
                .map_err(cannot_listen(address, "[operations] listen"))?;
            let live = live.clone();
            let service = Router::new().fallback_service(tower::service_fn(move |request| {
                live.clone().serve_operations(request)
            }));
            tokio::spawn(async move {
                if let Err(error) = axum::serve(listener, service).await {
                    tracing::error!(%error, "the operations listener stopped");
                }
            });
            Some(bound)
        }
        None => None,
    };

    crate::reload::spawn(
        crate::reload::Reloader::new(&config, live.clone(), lasting.clone(), metrics),
        hangups,
        config.file.reload.watch_interval.0,
        seen,
    );
    tracing::info!(%address, "serving");
    Ok(Running {
        address,
        operations,
        live,
        handle,
        served,
        lasting,
    })
}

/// The gate, its routes and its operations routes for `config`.
pub fn build(
    config: &Config,
    lasting: &Lasting,
    metrics: Option<&metrics_exporter_prometheus::PrometheusHandle>,
) -> Result<Current, AssembleError> {
    let assembled = assemble::assemble(config, lasting)?;
    let operations = match &config.file.operations {
        Some(operations) => crate::operations::router(
            &assembled.gate,
            operations.get_ref(),
            config.file.revocation.is_some(),
            metrics,
        )
        .merge(crate::identity::jwks_router(assembled.identity.as_ref())),
        None => Router::new(),
    };
    Ok(Current::new(assembled, operations))
}

/// Fetches the new gate's keys and logs whether it is ready.
pub async fn report_readiness(gate: &mcp_gate::Gate) -> bool {
    let report = gate.load_keys().await;
    if report.is_ready() {
        tracing::info!("ready: keys loaded for every issuer, stores reachable");
        true
    } else {
        tracing::warn!(%report, "serving, but not ready yet (/readyz answers 503 until it is)");
        false
    }
}

/// The client listener's service: the gate in force, the client's address from the
/// connection (or from the load balancer's `X-Forwarded-For` when trusted).
fn client_service(live: Live, trust_forwarded: bool) -> Router {
    let service = tower::service_fn(move |mut request: Request<Body>| {
        if trust_forwarded {
            crate::forwarded::apply(&mut request);
        }
        live.clone().serve(request)
    });
    Router::new().fallback_service(service)
}

/// What the gateway prints at start: where it listens and what it enforces.
fn banner(config: &Config, current: &Current, backend: Backend) {
    let gate = &current.gate;
    println!("mcp-gate-server {}", env!("CARGO_PKG_VERSION"));
    println!("  configuration:     {}", config.path.display());
    println!("  upstream:          {}", config.file.upstream.url);
    println!("  resource:          {}", gate.resource());
    println!("  metadata:          {}", gate.metadata_url());
    println!("  SEP-2643 revision: {}", gate.revision());
    println!("  policy:            {}", current.policy_name);
    println!("  continuation keys: {}", assemble::keys_source(config));
    println!(
        "  upstream identity: {}",
        crate::identity::describe(config, current.identity.as_ref())
    );
    println!(
        "  stores:            {}",
        match backend {
            Backend::Memory => "this process's memory (not shared with replicas)",
            Backend::Redis => "Redis (shared by replicas)",
        }
    );
}

/// How to get a token from the development issuer.
fn development_banner(issuer: &crate::dev_issuer::DevIssuer, resource: &str) {
    use crate::dev_issuer::{CLIENT_ID, CLIENT_SECRET};
    println!(
        "  development issuer {} (client {CLIENT_ID} / {CLIENT_SECRET}; never for real data)",
        issuer.issuer
    );
    println!(
        "  a token:           curl -s -u {CLIENT_ID}:{CLIENT_SECRET} -d grant_type=client_credentials --data-urlencode resource={resource} {}",
        issuer.token_endpoint
    );
}

/// Ctrl-C, or SIGTERM (how an orchestrator stops a process). SIGTERM is caught from the call
/// on (call it before [`start`]: one sent while the gateway starts then stops it once started,
/// rather than killing it); the future ends when either arrives.
pub fn stop_signal() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{SignalKind, signal};
    let terminate = signal(SignalKind::terminate());
    async move {
        match terminate {
            Ok(mut terminate) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = terminate.recv() => {}
                }
            }
            Err(error) => {
                tracing::warn!(%error, "no SIGTERM handler; Ctrl-C still stops the gateway");
                let _ = tokio::signal::ctrl_c().await;
            }
        }
        tracing::info!("stopping: no new connections; calls in flight finish first");
    }
}
