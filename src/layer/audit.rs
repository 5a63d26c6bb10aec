//! The decision log: one `mcp_gate::decision` event per authorization decision, written here
//! and nowhere else, so every phase carries the same fields.
//!
//! | field | value |
//! |---|---|
//! | `phase` | `invocation` (the request itself) or `approval` (a held call, re-judged before it runs) |
//! | `subject`, `client_id` | the caller's token (empty when the token names none) |
//! | `method`, `target` | what was asked: the method (`other` outside the method table) and the kind of target (`tool`, `prompt`, `resource`, ...; never its name, which the caller chose) |
//! | `decision` | `allow`, `deny`, `ask` or `abstain` |
//! | `context_id` | the `authorizationContextId` the client received; absent on an allow |
//! | `remediation` | the remedy's kind (`scope`, `credential`, `url`, `task`, ...); absent when there is none |
//! | `expressed_as` | how the answer was said (`scope`, `credential`, `undisclosed`, `task`, `confirmed`, ...); absent on a plain allow |
//! | `task_id` | the held call's task; absent outside tasks |
//!
//! Never arguments, tokens or bodies.

use crate::auth::Principal;
use crate::mcp::Target;

/// One authorization decision, as logged.
pub(crate) struct DecisionEvent<'a> {
    pub principal: &'a Principal,
    pub method: &'a str,
    pub target: &'a Target,
    pub approval: bool,
    pub decision: &'static str,
    pub context_id: Option<&'a str>,
    pub remediation: Option<&'static str>,
    pub expressed_as: Option<&'static str>,
    pub task_id: Option<&'a str>,
}

impl DecisionEvent<'_> {
    /// Writes the event.
    pub fn emit(&self) {
        tracing::info!(
            target: "mcp_gate::decision",
            phase = if self.approval { "approval" } else { "invocation" },
            subject = self.principal.subject().unwrap_or(""),
            client_id = self.principal.client_id().unwrap_or(""),
            method = crate::mcp::method_label(self.method),
            target = self.target.kind(),
            decision = self.decision,
            context_id = self.context_id,
            remediation = self.remediation,
            expressed_as = self.expressed_as,
            task_id = self.task_id,
            "authorization decision"
        );
    }
}
