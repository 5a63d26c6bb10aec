//! The judge's typed outcome: the policy's [`Ruling`], and what the layer [`Said`] for it.

use crate::limit::Limited;
use crate::policy::{PolicyFailure, Remediation};
use crate::store::StoreError;

/// What the policy ruled, or that it could not.
pub(crate) enum Ruling {
    /// Allowed.
    Allow,
    /// Allowed once the user confirms.
    Ask { message: String },
    /// Denied, with the remedy the client is told of.
    Deny(Remediation),
    /// No policy had an opinion: never an allow.
    Abstain,
    /// The policy failed, panicked or timed out: the layer refuses.
    Failed(PolicyFailure),
    /// A rate limit (or the concurrency limit) was reached, before the policy was asked: come
    /// back later.
    Limited(Limited),
    /// The rate limits' store could not count the call: the layer refuses (never admits it
    /// uncounted).
    LimitFailed(StoreError),
    /// The grant the question was first asked under was revoked since (a held call whose
    /// owner was revoked): refused before the policy is asked.
    Withdrawn,
}

/// The decision, as the log names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DecisionKind {
    Allow,
    Ask,
    Deny,
    Abstain,
    /// The layer refused without a decision of the policy's (see [`Refusal`]).
    Refused,
    /// A rate limit was reached before the policy was asked.
    Limited,
}

impl DecisionKind {
    /// The log's word for it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Allow => "allow",
            Self::Ask => "ask",
            Self::Deny => "deny",
            Self::Abstain => "abstain",
            Self::Refused => "refused",
            Self::Limited => "limited",
        }
    }
}

/// The kind of a remedy, as the log names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RemedyKind {
    Scope,
    Credential,
    Url,
    Task,
    Unavailable,
    Undisclosed,
}

impl RemedyKind {
    /// The kind of `remediation`.
    pub fn of(remediation: &Remediation) -> Self {
        match remediation {
            Remediation::Scope { .. } => Self::Scope,
            Remediation::Credential { .. } => Self::Credential,
            Remediation::Url { .. } => Self::Url,
            Remediation::Task { .. } => Self::Task,
            Remediation::Unavailable { .. } => Self::Unavailable,
            Remediation::Undisclosed { .. } => Self::Undisclosed,
        }
    }

    /// The log's word for it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Scope => "scope",
            Self::Credential => "credential",
            Self::Url => "url",
            Self::Task => "task",
            Self::Unavailable => "unavailable",
            Self::Undisclosed => "undisclosed",
        }
    }
}

/// Why the layer refused on its own.
#[derive(Clone, Debug)]
pub(crate) enum Refusal {
    /// The policy failed (`error`, `panic`, `timeout`); its error's text.
    PolicyFailed { kind: &'static str, error: String },
    /// The policy returned a remediation the layer cannot send; what is wrong with it.
    UnusableRemediation(&'static str),
    /// No random source for a state or context id.
    NoRandomness,
    /// The rate limits' store failed; its error's text.
    LimitStore(String),
    /// The owner's grant was revoked after the call was held (`docs/revocation.md`).
    OwnerRevoked,
}

impl Refusal {
    /// The log's word for it.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::PolicyFailed { kind, .. } => kind,
            Self::UnusableRemediation(_) => "unusable_remediation",
            Self::NoRandomness => "no_randomness",
            Self::LimitStore(_) => "limit_store",
            Self::OwnerRevoked => "owner_revoked",
        }
    }

    /// What the log says beside the reason.
    pub fn detail(&self) -> Option<&str> {
        match self {
            Self::PolicyFailed { error, .. } => Some(error),
            Self::UnusableRemediation(problem) => Some(problem),
            Self::NoRandomness => None,
            Self::LimitStore(error) => Some(error),
            Self::OwnerRevoked => None,
        }
    }
}

/// What the layer said for a decision: the decision event's fields.
pub(crate) struct Said {
    pub decision: DecisionKind,
    pub remediation: Option<RemedyKind>,
    pub expressed_as: Option<crate::denial::render::Expressed>,
    /// The `authorizationContextId` the client received.
    pub context_id: Option<String>,
    /// The held call's task.
    pub task_id: Option<String>,
    /// Why the layer refused, when it did.
    pub refusal: Option<Refusal>,
    /// The limit the call was past (a rate limit's scope, or the concurrency limit), when it
    /// was limited.
    pub limit: Option<crate::limit::Reached>,
}

impl Said {
    /// A decision said with nothing more.
    pub fn plain(decision: DecisionKind) -> Self {
        Self {
            decision,
            remediation: None,
            expressed_as: None,
            context_id: None,
            task_id: None,
            refusal: None,
            limit: None,
        }
    }

    /// The layer's own refusal.
    pub fn refused(refusal: Refusal) -> Self {
        Self {
            refusal: Some(refusal),
            ..Self::plain(DecisionKind::Refused)
        }
    }

    /// With the way it was expressed.
    pub fn expressed(mut self, expressed_as: crate::denial::render::Expressed) -> Self {
        self.expressed_as = Some(expressed_as);
        self
    }

    /// With the remedy's kind.
    pub fn remedy(mut self, remediation: RemedyKind) -> Self {
        self.remediation = Some(remediation);
        self
    }

    /// With the context id the client received.
    pub fn context(mut self, context_id: &str) -> Self {
        self.context_id = Some(context_id.to_owned());
        self
    }
}
