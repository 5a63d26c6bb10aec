//! What operators see of the gate: figures hung on the judge's observer seam
//! ([`crate::judge::Observer`]), never on the places that decide.
//!
//! Threat: telemetry is a channel out of the gate. A label that carries what a caller chose (a
//! subject, a token, an argument, a URI, an unknown method or tool name) leaks it to whoever
//! reads the figures, and lets one caller mint series without bound until the collector
//! falls over. So every label here is one of a closed set of words the crate itself defines.

#[cfg(feature = "metrics")]
mod metrics;

#[cfg(feature = "metrics")]
pub(crate) use metrics::DecisionMetrics;
