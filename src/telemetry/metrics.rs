//! Decision and refusal counters through the [`metrics`] facade (feature `metrics`).
//!
//! The facade, not an exporter: the application installs the recorder it runs (Prometheus,
//! OpenTelemetry, StatsD, ...). With none installed a count costs the label list the macro
//! builds (one allocation) and a look-up that finds no recorder: `docs/benchmarks.md` has the
//! figures. Names follow OpenTelemetry's MCP conventions where one exists (`mcp.method.name`;
//! a Prometheus exporter writes it `mcp_method_name`), the crate's own otherwise.
//!
//! | metric | labels |
//! |---|---|
//! | `mcp_gate_decisions_total` | `phase`, `decision`, `remediation` (`none` when there is none), `mcp.method.name` |
//! | `mcp_gate_decision_refusals_total` | `reason`: why the layer refused to decide (`error`, `panic`, `timeout`, `unusable_remediation`, `no_randomness`) |
//! | `mcp_gate_auth_refusals_total` | `reason`: the authentication failure's reason code; `status` (`400`, `401`, `403`, `503`, or `other`) |

use metrics::counter;

use crate::judge::{DecisionEvent, Observer};

/// Counts every decision the judge writes, and every request authentication refused.
pub(crate) struct DecisionMetrics;

/// The decisions counter.
const DECISIONS: &str = "mcp_gate_decisions_total";
/// The counter of decisions the layer refused to make.
const DECISION_REFUSALS: &str = "mcp_gate_decision_refusals_total";
/// The counter of requests refused before any decision, by authentication.
const AUTH_REFUSALS: &str = "mcp_gate_auth_refusals_total";

impl Observer for DecisionMetrics {
    fn decided(&self, event: &DecisionEvent<'_>) {
        let said = event.said;
        let remediation = said.remediation.map_or("none", |r| r.as_str());
        counter!(
            DECISIONS,
            "phase" => event.phase(),
            "decision" => said.decision.as_str(),
            "remediation" => remediation,
            "mcp.method.name" => crate::mcp::method_label(event.method),
        )
        .increment(1);
        if let Some(refusal) = &said.refusal {
            counter!(DECISION_REFUSALS, "reason" => refusal.as_str()).increment(1);
        }
    }

    fn auth_refused(&self, reason: &'static str, status: u16) {
        let status = match status {
            400 => "400",
            401 => "401",
            403 => "403",
            503 => "503",
            _ => "other",
        };
        counter!(AUTH_REFUSALS, "reason" => reason, "status" => status).increment(1);
    }
}
