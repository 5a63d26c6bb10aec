//! `GET /metrics` (feature `metrics`): the Prometheus recorder installed for the whole process,
//! and its text. Shared by the example server and `bench_target`.

use std::time::Duration;

use axum::Router;

/// How often the recorder is drained when nobody scrapes it.
const UPKEEP: Duration = Duration::from_secs(5);

/// Installs the Prometheus recorder as the process's `metrics` recorder and adds `/metrics`
/// to `router`. Call it inside the Tokio runtime: the recorder keeps every histogram sample
/// until it is drained, a scrape drains it, and a task started here drains it every 5 s too,
/// so that a server nobody scrapes does not grow.
pub fn with_metrics<S: Clone + Send + Sync + 'static>(
    router: Router<S>,
) -> Result<Router<S>, String> {
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder)
        .map_err(|error| format!("cannot install the metrics recorder: {error}"))?;
    let upkeep = handle.clone();
    tokio::spawn(async move {
        let mut every = tokio::time::interval(UPKEEP);
        loop {
            every.tick().await;
            upkeep.run_upkeep();
        }
    });
    Ok(router.route(
        "/metrics",
        axum::routing::get(move || std::future::ready(handle.render())),
    ))
}
