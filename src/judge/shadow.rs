//! Shadow policies: a candidate policy asked every question the live one is asked, its answer
//! compared and never acted on.
//!
//! Threat: a rule change tried on live traffic must not change a single answer. So the judge
//! asks the candidate beside the live policy (concurrently, each in its own containment, each
//! on its own copy of the evaluation), then lets the phase say the *live* ruling only. What
//! the candidate ruled reaches the observers as a [`Verdict`] beside the live one: the
//! decision log says where they differ, the metrics count it, the audit record keeps both. A
//! candidate that fails, panics or times out is a verdict of `refused` and changes nothing
//! else; its time does count, since the judge waits for both (the slower of the two sets the
//! latency, never more than the evaluation timeout).

use crate::judge::{DecisionKind, RemedyKind};
use crate::policy::{Decision, Explanation, PolicyFailure};

/// What a policy ruled, reduced to what two policies are compared on: the decision and the
/// remedy's kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Verdict {
    pub decision: DecisionKind,
    pub remediation: Option<RemedyKind>,
}

impl Verdict {
    /// The verdict of one policy's answer; a failure is `refused`.
    pub fn of(answer: &Result<Decision, PolicyFailure>) -> Self {
        let (decision, remediation) = match answer {
            Ok(Decision::Allow) => (DecisionKind::Allow, None),
            Ok(Decision::Ask { .. }) => (DecisionKind::Ask, None),
            Ok(Decision::Deny(remediation)) => {
                (DecisionKind::Deny, Some(RemedyKind::of(remediation)))
            }
            Ok(Decision::Abstain) => (DecisionKind::Abstain, None),
            Err(_) => (DecisionKind::Refused, None),
        };
        Self {
            decision,
            remediation,
        }
    }
}

impl Verdict {
    /// The verdict of a ruling made before any policy was asked (a rate limit).
    pub fn unasked(ruling: &super::Ruling) -> Self {
        let decision = match ruling {
            super::Ruling::Limited(_) => DecisionKind::Limited,
            _ => DecisionKind::Refused,
        };
        Self {
            decision,
            remediation: None,
        }
    }
}

/// What the candidate ruled on one question, beside the live policy's verdict.
pub(crate) struct Shadowed<'a> {
    /// The candidate's verdict.
    pub verdict: Verdict,
    /// What the candidate said decided it.
    pub explanation: Option<&'a Explanation>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_compare_the_decision_and_the_remedy_kind_only() {
        let deny = |message: &str| Ok(Decision::unavailable(message));
        assert_eq!(Verdict::of(&deny("one")), Verdict::of(&deny("other")));
        assert_ne!(Verdict::of(&deny("one")), Verdict::of(&Ok(Decision::Allow)));
        let failed = Verdict::of(&Err(PolicyFailure::Panicked));
        assert_eq!(failed.decision, DecisionKind::Refused);
        assert_eq!(failed.remediation, None);
    }
}
