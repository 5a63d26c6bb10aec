//! The decision event: one per decision the judge makes, the same fields in every phase.
//!
//! | field | value |
//! |---|---|
//! | `request_id` | the HTTP request's id (32 hex digits, the layer's own): every decision of one request shares it |
//! | `phase` | `invocation` (the request itself), `discovery` (one listed entry) or `approval` (a held call, re-judged before it runs) |
//! | `issuer`, `subject`, `client_id` | the caller's token (empty when the token names none) |
//! | `method`, `target` | what was asked: the method (`other` outside the method table) and the kind of target (`tool`, `prompt`, `resource`, ...; never its name, which the caller chose) |
//! | `decision` | `allow`, `deny`, `ask`, `abstain`, or `refused` (the layer refused without a decision: see `reason`) |
//! | `context_id` | the `authorizationContextId` the client received; absent on an allow |
//! | `remediation` | the remedy's kind (`scope`, `credential`, `url`, `task`, ...); absent when there is none |
//! | `expressed_as` | how the answer was said (`scope`, `credential`, `undisclosed`, `task`, `confirmed`, `shown`, `hidden`, ...); absent on a plain allow |
//! | `task_id` | the held call's task; absent outside tasks |
//! | `policy_version`, `policies` | the rule set's version and the ids of the rules that decided, when the policy says (`CedarPolicy` does; [`Evaluation::explain`](crate::policy::Evaluation::explain)) |
//! | `shadow`, `shadow_differs` | with a shadow policy: what it ruled (`allow`, `deny:url`, ...), and whether that differs from the live policy's ruling |
//! | `latency_us`, `policy_us` | microseconds from the question to the answer said, and of them the policy's |
//! | `reason`, `error` | on `refused`: why (`error`, `panic`, `timeout`, `unusable_remediation`, `no_randomness`) and the policy's own error text |
//!
//! Never arguments, tokens or bodies. Invocation and approval events are written at `info`
//! (a refusal at `error`); discovery events, one per listed entry, at `debug`.

use std::fmt;
use std::time::Duration;

use super::outcome::Said;
use super::request_id::RequestId;
use super::shadow::{Shadowed, Verdict};
use crate::auth::Principal;
use crate::mcp::Target;
use crate::policy::{Explanation, Phase};

/// One decision, as the observers see it.
pub(crate) struct DecisionEvent<'a> {
    /// The HTTP request the decision was made in.
    pub request: RequestId,
    pub principal: &'a Principal,
    pub method: &'a str,
    pub target: &'a Target,
    pub phase: Phase,
    /// What the live policy ruled (the phase may say it otherwise: see `said`).
    pub live: Verdict,
    pub said: &'a Said,
    /// What the live policy said decided it.
    pub explanation: Option<&'a Explanation>,
    /// What the shadow policy ruled, when there is one.
    pub shadow: Option<Shadowed<'a>>,
    /// The tool's name when a listing the layer read named it (a name the inner server
    /// bounds, not one the caller chose): the only tool name a metric label may carry.
    #[cfg_attr(
        not(feature = "metrics"),
        allow(dead_code, reason = "read by the metrics (feature `metrics`)")
    )]
    pub listed_tool: Option<&'a str>,
    /// How long the policy took.
    pub policy_time: Duration,
    /// How long the judgement took, from the question to the answer said.
    pub latency: Duration,
}

impl DecisionEvent<'_> {
    /// Whether a shadow policy ruled otherwise than the live one.
    pub fn shadow_differs(&self) -> Option<bool> {
        self.shadow
            .as_ref()
            .map(|shadow| shadow.verdict != self.live)
    }

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
                    request_id = %self.request,
                    phase = self.phase(),
                    issuer = self.principal.issuer(),
                    subject = self.principal.subject().unwrap_or(""),
                    client_id = self.principal.client_id().unwrap_or(""),
                    method = crate::mcp::method_label(self.method),
                    target = self.target.kind(),
                    decision = said.decision.as_str(),
                    context_id = said.context_id.as_deref(),
                    remediation = said.remediation.map(|r| r.as_str()),
                    expressed_as = said.expressed_as.map(|e| e.as_str()),
                    task_id = said.task_id.as_deref(),
                    policy_version = self.explanation.and_then(Explanation::set_version),
                    policies = self.explanation.map(|e| Joined(e.determining())).map(tracing::field::display),
                    shadow = self.shadow.as_ref().map(|s| tracing::field::display(s.verdict)),
                    shadow_differs = self.shadow_differs(),
                    latency_us = micros(self.latency),
                    policy_us = micros(self.policy_time),
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

/// Whole microseconds, saturating.
pub(crate) fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

/// Rule ids as one comma-separated field.
struct Joined<'a>(&'a [String]);

impl fmt::Display for Joined<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (at, id) in self.0.iter().enumerate() {
            if at > 0 {
                f.write_str(",")?;
            }
            f.write_str(id)?;
        }
        Ok(())
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.decision.as_str())?;
        if let Some(remediation) = self.remediation {
            write!(f, ":{}", remediation.as_str())?;
        }
        Ok(())
    }
}
