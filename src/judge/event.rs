//! The decision event: one per decision the judge makes, the same fields in every phase.
//!
//! | field | value |
//! |---|---|
//! | `phase` | `invocation` (the request itself), `discovery` (one listed entry) or `approval` (a held call, re-judged before it runs) |
//! | `subject`, `client_id` | the caller's token (empty when the token names none) |
//! | `method`, `target` | what was asked: the method (`other` outside the method table) and the kind of target (`tool`, `prompt`, `resource`, ...; never its name, which the caller chose) |
//! | `decision` | `allow`, `deny`, `ask`, `abstain`, or `refused` (the layer refused without a decision: see `reason`) |
//! | `context_id` | the `authorizationContextId` the client received; absent on an allow |
//! | `remediation` | the remedy's kind (`scope`, `credential`, `url`, `task`, ...); absent when there is none |
//! | `expressed_as` | how the answer was said (`scope`, `credential`, `undisclosed`, `task`, `confirmed`, `shown`, `hidden`, ...); absent on a plain allow |
//! | `task_id` | the held call's task; absent outside tasks |
//! | `reason`, `error` | on `refused`: why (`error`, `panic`, `timeout`, `unusable_remediation`, `no_randomness`) and the policy's own error text |
//!
//! Never arguments, tokens or bodies. Invocation and approval events are written at `info`
//! (a refusal at `error`); discovery events, one per listed entry, at `debug`.

use super::outcome::Said;
use crate::auth::Principal;
use crate::mcp::Target;
use crate::policy::Phase;

/// One decision, as the observers see it.
pub(crate) struct DecisionEvent<'a> {
    pub principal: &'a Principal,
    pub method: &'a str,
    pub target: &'a Target,
    pub phase: Phase,
    pub said: &'a Said,
}

impl DecisionEvent<'_> {
    /// The phase, as the log names it.
    pub fn phase(&self) -> &'static str {
        match self.phase {
            Phase::Invocation => "invocation",
            Phase::Discovery => "discovery",
            Phase::Approval => "approval",
        }
    }

    /// Writes the event on `mcp_gate::decision`.
    pub fn write(&self) {
        let said = self.said;
        macro_rules! write_at {
            ($level:expr) => {
                tracing::event!(
                    target: "mcp_gate::decision",
                    $level,
                    phase = self.phase(),
                    subject = self.principal.subject().unwrap_or(""),
                    client_id = self.principal.client_id().unwrap_or(""),
                    method = crate::mcp::method_label(self.method),
                    target = self.target.kind(),
                    decision = said.decision.as_str(),
                    context_id = said.context_id.as_deref(),
                    remediation = said.remediation.map(|r| r.as_str()),
                    expressed_as = said.expressed_as.map(|e| e.as_str()),
                    task_id = said.task_id.as_deref(),
                    reason = said.refusal.as_ref().map(|r| r.as_str()),
                    error = said.refusal.as_ref().and_then(|r| r.detail()),
                    "authorization decision"
                )
            };
        }
        if said.refusal.is_some() {
            write_at!(tracing::Level::ERROR);
        } else if self.phase == Phase::Discovery {
            write_at!(tracing::Level::DEBUG);
        } else {
            write_at!(tracing::Level::INFO);
        }
    }
}
