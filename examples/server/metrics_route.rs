//! `GET /metrics` (feature `metrics`): the Prometheus recorder installed for the whole process,
//! and its text. Shared by the example server and `bench_target`; the recorder itself is the
//! gateway's (`mcp-gate-server/src/prometheus.rs`), compiled here too.

use axum::Router;

#[path = "../../mcp-gate-server/src/prometheus.rs"]
mod prometheus;

/// Installs the Prometheus recorder as the process's `metrics` recorder and adds `/metrics`
/// to `router`. Call it inside the Tokio runtime: the recorder keeps every histogram sample
/// until it is drained, a scrape drains it, and a task drains it every 5 s too.
pub fn with_metrics<S: Clone + Send + Sync + 'static>(
    router: Router<S>,
) -> Result<Router<S>, String> {
    let handle = prometheus::install()?;
    Ok(router.route(
        "/metrics",
        axum::routing::get(move || std::future::ready(handle.render())),
    ))
}
