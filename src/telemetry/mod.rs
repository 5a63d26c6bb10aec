//! What operators see of the gate: figures hung on the judge's observer seam
//! ([`crate::judge::Observer`]), never on the places that decide; the measured stores; and the
//! spans of each request ([`trace`]; its trace context with
//! feature `opentelemetry`).
//!
//! Threat: telemetry is a channel out of the gate. A label or a span attribute that carries
//! what a caller chose (a subject, a token, an argument, a URI, an unknown method or tool name)
//! leaks it to whoever reads the figures, and a label lets one caller mint series without bound
//! until the collector falls over. So every label here is one of a closed set of words the crate
//! itself defines, or a name the inner server bounds (a listed tool's); and every span
//! attribute such a word, a number, a digest, or one of the two bounded texts OpenTelemetry's
//! MCP conventions name (see [`trace`]).
//!
//! The measuring points of the steps that are not decisions (token verification, key sets,
//! policy reloads) are in `crate::measure`, a leaf every module may call.

#[cfg(feature = "metrics")]
mod metrics;
#[cfg(feature = "opentelemetry")]
mod otel;
#[cfg(feature = "metrics")]
mod stores;
pub(crate) mod trace;

#[cfg(feature = "metrics")]
pub(crate) use metrics::DecisionMetrics;
#[cfg(feature = "metrics")]
pub(crate) use stores::{measured_limits, measured_replay, measured_sessions, measured_tasks};

/// Without feature `metrics`: the stores as configured.
#[cfg(not(feature = "metrics"))]
mod unmeasured {
    use std::sync::Arc;

    use crate::store::limits::LimitStore;
    use crate::store::replay::ReplayStore;
    use crate::store::sessions::SessionStore;
    use crate::store::tasks::TaskStore;

    /// The limit store.
    pub(crate) fn measured_limits(store: Arc<dyn LimitStore>) -> Arc<dyn LimitStore> {
        store
    }

    /// The task store.
    pub(crate) fn measured_tasks(store: Arc<dyn TaskStore>) -> Arc<dyn TaskStore> {
        store
    }

    /// The replay store.
    pub(crate) fn measured_replay(store: Arc<dyn ReplayStore>) -> Arc<dyn ReplayStore> {
        store
    }

    /// The session store.
    pub(crate) fn measured_sessions(store: Arc<dyn SessionStore>) -> Arc<dyn SessionStore> {
        store
    }
}

#[cfg(not(feature = "metrics"))]
pub(crate) use unmeasured::{measured_limits, measured_replay, measured_sessions, measured_tasks};
