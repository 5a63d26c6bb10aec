//! The gate's figures through the [`metrics`] facade (feature `metrics`).
//!
//! The facade, not an exporter: the application installs the recorder it runs (Prometheus,
//! OpenTelemetry, StatsD, ...). Each label set's key is made once and kept (`measure::keys`),
//! so a count allocates nothing, with a recorder or without: `docs/benchmarks.md` has the
//! figures. Names follow OpenTelemetry's MCP conventions where one exists (`mcp.method.name`,
//! `gen_ai.tool.name`, `mcp.server.operation.duration`; a Prometheus exporter writes them
//! `mcp_method_name`, ...), the crate's own otherwise. `docs/operations.md` lists every
//! metric with its labels.
//!
//! | metric | labels |
//! |---|---|
//! | `mcp_gate_decisions_total` | `phase`, `decision`, `remediation` (`none` when there is none), `mcp.method.name`, `gen_ai.tool.name` (a listed tool's name, else `other`; `none` off tools) |
//! | `mcp_gate_decision_refusals_total` | `reason`: why the layer refused to decide (`error`, `panic`, `timeout`, `unusable_remediation`, `no_randomness`) |
//! | `mcp_gate_policy_duration_seconds` (histogram) | `phase` |
//! | `mcp_gate_decision_duration_seconds` (histogram) | `phase`: from the question to the answer said |
//! | `mcp_gate_shadow_decisions_total` | `phase`, `differs` (`true` / `false`) |
//! | `mcp_gate_auth_refusals_total` | `reason`: the authentication failure's reason code; `status` (`400`, `401`, `403`, `503`, or `other`) |
//! | `mcp_gate_token_cache_total` | `result` (`hit`, `miss`) |
//! | `mcp_gate_token_verifications_total` | `method` (`jwt`, `introspection`), `outcome` (`ok` or the failure's reason code) |
//! | `mcp_gate_token_verification_duration_seconds` (histogram) | `method` |
//! | `mcp_gate_jwks_lookups_total` | `result` (`hit`, `miss`) |
//! | `mcp_gate_jwks_fetches_total` | `outcome` (`ok`, `error`) |
//! | `mcp_gate_store_operations_total` | `store` (`sessions`, `replay`, `tasks`), `backend` (`memory`, `redis`, `custom`), `operation`, `outcome` (`ok` or the error's kind) |
//! | `mcp_gate_store_operation_duration_seconds` (histogram) | `store`, `backend`, `operation` |
//! | `mcp_gate_quota_refusals_total` | `store`, `kind` (`full`, `owner_quota`, `over_budget`) |
//! | `mcp_gate_task_notifications_total` | `event` (`listen_opened`, `listen_refused`, `sent`, `dropped`) |
//! | `mcp_gate_policy_reloads_total` | `outcome` (`ok`, `refused`) |
//! | `mcp_gate_policy_set_info` (gauge) | `version`: 1 for the set in force, 0 for one replaced |

use crate::judge::{DecisionEvent, Observer};
use crate::measure::keys::{Keys, tool_name};

/// Counts every decision the judge writes, and every request authentication refused.
pub(crate) struct DecisionMetrics;

/// The decisions counter.
static DECISIONS: Keys<5> = Keys::new(
    "mcp_gate_decisions_total",
    [
        "phase",
        "decision",
        "remediation",
        "mcp.method.name",
        "gen_ai.tool.name",
    ],
);
/// The counter of decisions the layer refused to make.
static DECISION_REFUSALS: Keys<1> = Keys::new("mcp_gate_decision_refusals_total", ["reason"]);
/// The counter of requests refused before any decision, by authentication.
static AUTH_REFUSALS: Keys<2> = Keys::new("mcp_gate_auth_refusals_total", ["reason", "status"]);
/// How long the policy took, per decision.
static POLICY_DURATION: Keys<1> = Keys::new("mcp_gate_policy_duration_seconds", ["phase"]);
/// How long a decision took, from the question to the answer said.
static DECISION_DURATION: Keys<1> = Keys::new("mcp_gate_decision_duration_seconds", ["phase"]);
/// Operations refused by a rate limit, by the limit's scope.
static RATE_LIMITED: Keys<1> = Keys::new("mcp_gate_rate_limited_total", ["scope"]);
/// Decisions a shadow policy was asked about, and whether it ruled otherwise.
static SHADOW_DECISIONS: Keys<2> =
    Keys::new("mcp_gate_shadow_decisions_total", ["phase", "differs"]);

impl Observer for DecisionMetrics {
    fn decided(&self, event: &DecisionEvent<'_>) {
        let said = event.said;
        let remediation = said.remediation.map_or("none", |r| r.as_str());
        let tool = match (event.target.kind(), event.listed_tool) {
            (_, Some(listed)) => tool_name(listed),
            ("tool", None) => "other",
            _ => "none",
        };
        let phase = event.phase();
        DECISIONS
            .counter([
                phase,
                said.decision.as_str(),
                remediation,
                crate::mcp::method_label(event.method),
                tool,
            ])
            .increment(1);
        if let Some(refusal) = &said.refusal {
            DECISION_REFUSALS.counter([refusal.as_str()]).increment(1);
        }
        if let Some(scope) = said.limit {
            RATE_LIMITED.counter([scope.as_str()]).increment(1);
        }
        POLICY_DURATION
            .histogram([phase])
            .record(event.policy_time.as_secs_f64());
        DECISION_DURATION
            .histogram([phase])
            .record(event.latency.as_secs_f64());
        if let Some(differs) = event.shadow_differs() {
            let differs = if differs { "true" } else { "false" };
            SHADOW_DECISIONS.counter([phase, differs]).increment(1);
        }
    }

    fn auth_refused(&self, reason: &'static str, status: u16) {
        AUTH_REFUSALS
            .counter([reason, status_label(status)])
            .increment(1);
    }
}

/// An HTTP status as a label: the few the layer writes, or `other`.
fn status_label(status: u16) -> &'static str {
    match status {
        400 => "400",
        401 => "401",
        403 => "403",
        503 => "503",
        _ => "other",
    }
}
