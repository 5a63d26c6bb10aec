//! What operators see of the gate: figures hung on the judge's observer seam
//! ([`crate::judge::Observer`]), never on the places that decide; outside the judge, one
//! measuring point per step that is not a decision (token verification, the key sets, the
//! stores, policy reloads); and the spans of each request ([`trace`]; its trace context with
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
//! The measuring points below are functions that do nothing without feature `metrics`, so the
//! places that call them read the same either way.

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
pub(crate) use stores::{measured_replay, measured_sessions, measured_tasks};

#[cfg(feature = "metrics")]
pub(crate) use metrics::{jwks_fetch, jwks_lookup, token_cache, token_verified};
#[cfg(all(feature = "metrics", feature = "cedar"))]
pub(crate) use metrics::{policy_in_force, policy_reload};

/// Without feature `metrics`: the measuring points cost nothing.
#[cfg(not(feature = "metrics"))]
mod off {
    use std::time::Duration;

    /// A token looked up in the verified-token cache.
    #[inline(always)]
    pub(crate) fn token_cache(_hit: bool) {}

    /// A token verified (or not).
    #[inline(always)]
    pub(crate) fn token_verified(_method: &'static str, _outcome: &'static str, _took: Duration) {}

    /// A key looked up in a remote key set.
    #[inline(always)]
    pub(crate) fn jwks_lookup(_hit: bool) {}

    /// A remote key set fetched.
    #[inline(always)]
    pub(crate) fn jwks_fetch(_ok: bool) {}

    /// A policy set in force.
    #[cfg_attr(
        not(feature = "cedar"),
        allow(dead_code, reason = "only Cedar sets load")
    )]
    #[inline(always)]
    pub(crate) fn policy_in_force(_replaced: Option<&str>, _version: &str) {}

    /// A policy set reloaded, or its reload refused.
    #[cfg_attr(
        not(feature = "cedar"),
        allow(dead_code, reason = "only Cedar reloads")
    )]
    #[inline(always)]
    pub(crate) fn policy_reload(_ok: bool) {}
}

/// Without feature `metrics`: the stores as configured.
#[cfg(not(feature = "metrics"))]
mod unmeasured {
    use std::sync::Arc;

    use crate::store::replay::ReplayStore;
    use crate::store::sessions::SessionStore;
    use crate::store::tasks::TaskStore;

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
pub(crate) use unmeasured::{measured_replay, measured_sessions, measured_tasks};

#[cfg(not(feature = "metrics"))]
pub(crate) use off::{jwks_fetch, jwks_lookup, token_cache, token_verified};
#[cfg(all(not(feature = "metrics"), feature = "cedar"))]
pub(crate) use off::{policy_in_force, policy_reload};
