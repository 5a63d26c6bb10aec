//! The operations listener: what an operator, an orchestrator or a scraper asks, on an
//! address of its own that clients never reach (loopback unless the file says otherwise).
//!
//! - `GET /healthz`: the process serves (always `200 ok`).
//! - `GET /readyz`: the gate in force can serve (keys for every issuer, stores reachable,
//!   policy loaded): `200` or `503` with reason codes.
//! - `GET /metrics`: the gate's counters in Prometheus's text format (`[operations]
//!   metrics`, on by default).
//! - `POST /revoke`: puts a revocation in force (with `[revocation]`).
//! - `GET /tasks`, `POST /tasks/{id}/approve`, `POST /tasks/{id}/refuse`: the held-call
//!   console ([`tasks`], `[operations] tasks`, on by default).

pub mod tasks;

use axum::Router;
use axum::routing::get;
use metrics_exporter_prometheus::PrometheusHandle;

use crate::config::Operations;

/// Why the metrics recorder could not be installed.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct MetricsError(String);

/// Installs the process's Prometheus recorder (once, at start) and keeps it drained.
pub fn install_metrics() -> Result<PrometheusHandle, MetricsError> {
    crate::prometheus::install().map_err(MetricsError)
}

/// The operations routes over `gate`, as `operations` asks; the held-call console decides the
/// tasks in the gate's own task store (the store every gate built from the file shares, as the
/// gate writes to it: with `[tasks.notifications]`, a decision is told to the task's listens).
pub fn router(
    gate: &mcp_gate::Gate,
    operations: &Operations,
    revocation: bool,
    metrics: Option<&PrometheusHandle>,
) -> Router {
    let mut router = Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", mcp_gate::readiness::handler(gate.clone()));
    if operations.metrics
        && let Some(handle) = metrics
    {
        let handle = handle.clone();
        router = router.route("/metrics", get(move || std::future::ready(handle.render())));
    }
    if revocation && operations.revoke != Some(false) {
        router = router.route(
            "/revoke",
            mcp_gate::revocation::handler::route(gate.clone()),
        );
    }
    if operations.tasks {
        router = router.merge(tasks::router(gate.tasks()));
    }
    router
}
