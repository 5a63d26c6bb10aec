//! [`Explanation`]: which rules of a policy decided, as the policy itself says.
//!
//! A policy may tell the layer, once per evaluation, the ids of the rules that determined its
//! decision and the version of the rules it read ([`Evaluation::explain`]). The layer does not
//! act on it: the decision event and the audit record carry it, so that an operator can say
//! which rule allowed or denied a call. [`CedarPolicy`](crate::policy::cedar::CedarPolicy)
//! (feature `cedar`) explains every decision it makes.

use std::sync::Arc;

use super::Evaluation;

/// The rules that determined a decision, and the version of the rule set they belong to.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Explanation {
    version: Option<Arc<str>>,
    determining: Vec<String>,
}

impl Explanation {
    /// The ids of the rules that determined the decision (for Cedar, the permit policies of an
    /// allow, or the forbid policies of a denial; none for a default denial).
    pub fn new(determining: impl IntoIterator<Item = impl Into<String>>) -> Self {
        Self {
            version: None,
            determining: determining.into_iter().map(Into::into).collect(),
        }
    }

    /// With the version of the rule set the rules belong to ([`Policy::version`](super::Policy::version)).
    pub fn version(mut self, version: Arc<str>) -> Self {
        self.version = Some(version);
        self
    }

    /// The rule set's version, when the policy named one.
    pub fn set_version(&self) -> Option<&str> {
        self.version.as_deref()
    }

    /// The ids of the rules that determined the decision.
    pub fn determining(&self) -> &[String] {
        &self.determining
    }
}

impl Evaluation {
    /// Says which rules decided this evaluation. The first explanation stands: a later one is
    /// refused (`false`), so that a composed policy's outer step cannot overwrite what the
    /// deciding one said.
    pub fn explain(&self, explanation: Explanation) -> bool {
        self.0.explained.set(explanation).is_ok()
    }

    /// What the policy said decided this evaluation, if it said anything.
    pub fn explanation(&self) -> Option<&Explanation> {
        self.0.explained.get()
    }
}
