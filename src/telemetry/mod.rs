//! What operators see of the gate: figures hung on the judge's observer seam
//! ([`crate::judge::Observer`]), never on the places that decide, and the spans of each
//! request ([`trace`]; its trace context with feature `opentelemetry`).
//!
//! Threat: telemetry is a channel out of the gate. A label or a span attribute that carries
//! what a caller chose (a subject, a token, an argument, a URI, an unknown method or tool name)
//! leaks it to whoever reads the figures, and a label lets one caller mint series without bound
//! until the collector falls over. So every label here is one of a closed set of words the crate
//! itself defines, and every span attribute such a word, a number, a digest, or one of the two
//! bounded texts OpenTelemetry's MCP conventions name (see [`trace`]).

#[cfg(feature = "metrics")]
mod metrics;
#[cfg(feature = "opentelemetry")]
mod otel;
pub(crate) mod trace;

#[cfg(feature = "metrics")]
pub(crate) use metrics::DecisionMetrics;
