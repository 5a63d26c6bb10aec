//! The process's Prometheus recorder for the `metrics` facade the library counts through:
//! installed once, and drained every 5 s so that a process nobody scrapes does not keep every
//! histogram sample. Shared with the example server and `bench_target`, which compile this
//! file through `examples/server/metrics_route.rs`.

use std::time::Duration;

use metrics_exporter_prometheus::PrometheusHandle;

/// How often the recorder is drained when nobody scrapes it.
const UPKEEP: Duration = Duration::from_secs(5);

/// Installs the Prometheus recorder as the process's `metrics` recorder and starts its upkeep
/// task (call it inside the Tokio runtime). The handle renders the text a scrape gets.
pub fn install() -> Result<PrometheusHandle, String> {
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
    Ok(handle)
}
