//! [`Owner`]: who a piece of the layer's state belongs to.

use serde::{Deserialize, Serialize};

use super::Principal;

/// The (issuer, subject, client id) triple of a verified principal: the one key that binds
/// legacy sessions, durable tasks and continuation states to whoever created them. Two tokens
/// with the same triple are the same owner; a token of the same user through another client
/// is not.
///
/// ```
/// use mcp_gate::auth::Owner;
///
/// let owner = Owner::new("https://as.example", Some("alice".into()), Some("cli".into()));
/// assert_ne!(owner, Owner::new("https://as.example", Some("alice".into()), None));
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct Owner {
    /// The token's issuer.
    pub issuer: String,
    /// The token's `sub`, if it had one.
    pub subject: Option<String>,
    /// The token's `client_id`, if it had one.
    pub client_id: Option<String>,
}

impl Owner {
    /// An owner key.
    pub fn new(
        issuer: impl Into<String>,
        subject: Option<String>,
        client_id: Option<String>,
    ) -> Self {
        Self {
            issuer: issuer.into(),
            subject,
            client_id,
        }
    }

    /// The owner key of a verified principal.
    pub fn of(principal: &Principal) -> Self {
        Self::new(
            principal.issuer(),
            principal.subject().map(str::to_owned),
            principal.client_id().map(str::to_owned),
        )
    }

    /// Whether `principal` is this owner, without allocating.
    pub fn is(&self, principal: &Principal) -> bool {
        self.issuer == principal.issuer()
            && self.subject.as_deref() == principal.subject()
            && self.client_id.as_deref() == principal.client_id()
    }
}
