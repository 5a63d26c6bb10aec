//! What the client answered to the layer's own input request, on a retry.

use serde::{Deserialize, Serialize};

/// Which of the layer's own round trips a state continues, and a retry answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Interaction {
    /// A URL approval.
    Url,
    /// A confirmation (ask).
    Confirmation,
}

/// The `action` of an elicitation response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum InputAction {
    /// The user accepted. For a URL this only means they agreed to open the page, never that
    /// the approval happened: check your own record.
    Accept,
    /// The user declined.
    Decline,
    /// The user dismissed the request.
    Cancel,
    /// No usable answer under the layer's key (absent, or not an elicitation response).
    Missing,
}

/// The layer's input request this retry answers, and how it was answered.
///
/// Handed to `evaluate` through [`Evaluation::answered`](super::Evaluation::answered) only
/// after the continuation state was verified: the principal, the call and the expiry all match.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answered {
    pub(crate) interaction: Interaction,
    pub(crate) input_key: String,
    pub(crate) action: InputAction,
    pub(crate) confirmed: bool,
    pub(crate) round: u32,
}

impl Answered {
    /// URL approval or confirmation.
    pub fn interaction(&self) -> Interaction {
        self.interaction
    }

    /// The input key the application chose (for a URL remedy), without the layer's prefix.
    pub fn input_key(&self) -> &str {
        &self.input_key
    }

    /// What the user did.
    pub fn action(&self) -> InputAction {
        self.action
    }

    /// For a confirmation: whether it was an explicit `accept` with `approve: true`, the only
    /// answer that counts as consent.
    pub fn confirmed(&self) -> bool {
        self.confirmed
    }

    /// How many gateway rounds this call has been through.
    pub fn round(&self) -> u32 {
        self.round
    }
}
