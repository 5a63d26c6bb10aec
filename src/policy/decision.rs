//! What `evaluate` answers: [`Decision`], and for denials the [`Remediation`] that says what
//! would fix it.

use serde_json::Value;

/// The input key of a URL remedy unless [`UrlRemedy::input_key`] names another.
const DEFAULT_INPUT_KEY: &str = "approval";

/// The outcome of one evaluation.
///
/// ```
/// use mcp_gate::policy::{Decision, Remediation};
/// use serde_json::json;
///
/// let allow = Decision::allow();
/// let admin = Decision::scopes(["mcp:admin"]);
/// let gone = Decision::unavailable("Deleting everything is never allowed.");
/// let pay = Remediation::credential([json!({"type": "payment_initiation", "instructedAmount": {"amount": "40.00", "currency": "EUR"}})])
///     .single_use()
///     .message("This transfer needs a payment-specific authorization.");
/// assert!(matches!(Decision::from(pay), Decision::Deny(Remediation::Credential { .. })));
/// # let _ = (allow, admin, gone);
/// ```
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Decision {
    /// Let the request through to the inner service, unchanged.
    Allow,
    /// Ask the user to confirm the call in the client first.
    Ask {
        /// What the user is asked to confirm.
        message: String,
    },
    /// Refuse, saying what would fix it.
    Deny(Remediation),
    /// No opinion. Combinators ([`first_match`](super::first_match), [`all_of`](super::all_of))
    /// skip it; as the final answer it is a denial (`undisclosed`), never an allow.
    Abstain,
}

/// How a denied caller could obtain access.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Remediation {
    /// A token with more scopes: a 403 `insufficient_scope` challenge listing every scope the
    /// operation needs (these plus the endpoint-wide ones).
    Scope {
        /// Scopes the operation needs beyond the endpoint-wide ones.
        scopes: Vec<String>,
    },
    /// A new credential for exactly this operation (RFC 9396 authorization details).
    Credential {
        /// The RFC 9396 `authorization_details` a new token must carry; each has a `type`.
        authorization_details: Vec<Value>,
        /// How `authorization_reference` is filled in.
        reference: CredentialReference,
        /// Text shown to the user.
        message: Option<String>,
    },
    /// The user must approve something at a URL, then retry.
    Url {
        /// The approval page (HTTPS).
        url: String,
        /// What the user is asked to do.
        message: String,
        /// The key of the input request in the multi-round-trip result.
        input_key: String,
    },
    /// Someone decides out of band; the call is held as a task meanwhile.
    Task {
        /// What is being waited for.
        message: String,
    },
    /// No remedy exists; the client should not retry.
    Unavailable {
        /// Text shown to the user.
        message: String,
    },
    /// A remedy may exist but is not disclosed.
    Undisclosed {
        /// Text shown to the user.
        message: String,
    },
}

/// How the `authorization_reference` of a credential remedy is produced.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum CredentialReference {
    /// Derived from the canonical JSON of the details: equal details, equal reference.
    #[default]
    Derived,
    /// A fixed reference chosen by the application.
    Fixed(String),
    /// No reference: the credential is meant for one use only.
    SingleUse,
}

impl Decision {
    /// Let the request through.
    pub fn allow() -> Self {
        Decision::Allow
    }

    /// Ask the user to confirm.
    pub fn ask(message: impl Into<String>) -> Self {
        Decision::Ask {
            message: message.into(),
        }
    }

    /// Deny until the token carries these scopes too.
    pub fn scopes<I, S>(scopes: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Decision::Deny(Remediation::Scope {
            scopes: scopes.into_iter().map(Into::into).collect(),
        })
    }

    /// Deny until a token carries these authorization details (reference derived).
    pub fn credential<I: IntoIterator<Item = Value>>(authorization_details: I) -> Self {
        Remediation::credential(authorization_details).into()
    }

    /// Deny until the user approves at `url`; the input key is `"approval"`.
    pub fn url(url: impl Into<String>, message: impl Into<String>) -> Self {
        Remediation::url(url, message).into()
    }

    /// Hold the call until someone decides out of band.
    pub fn task(message: impl Into<String>) -> Self {
        Decision::Deny(Remediation::Task {
            message: message.into(),
        })
    }

    /// Deny for good.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Decision::Deny(Remediation::Unavailable {
            message: message.into(),
        })
    }

    /// Deny without saying how to get access.
    pub fn undisclosed(message: impl Into<String>) -> Self {
        Decision::Deny(Remediation::Undisclosed {
            message: message.into(),
        })
    }

    /// A short stable name for logs: `allow`, `ask` or `deny`.
    pub fn kind(&self) -> &'static str {
        match self {
            Decision::Allow => "allow",
            Decision::Ask { .. } => "ask",
            Decision::Deny(_) => "deny",
            Decision::Abstain => "abstain",
        }
    }
}

impl Remediation {
    /// A credential remedy, reference derived and no message: a [`CredentialRemedy`] whose
    /// modifiers set its reference and message, then `.into()` a [`Remediation`] or a
    /// [`Decision`].
    ///
    /// ```
    /// use mcp_gate::policy::{Decision, Remediation};
    /// use serde_json::json;
    ///
    /// let decision: Decision = Remediation::credential([json!({"type": "payment_initiation"})])
    ///     .single_use()
    ///     .message("Approve this payment.")
    ///     .into();
    /// assert!(matches!(decision, Decision::Deny(Remediation::Credential { .. })));
    /// ```
    pub fn credential<I: IntoIterator<Item = Value>>(authorization_details: I) -> CredentialRemedy {
        CredentialRemedy {
            authorization_details: authorization_details.into_iter().collect(),
            reference: CredentialReference::Derived,
            message: None,
        }
    }

    /// A URL approval remedy, input key `"approval"`: a [`UrlRemedy`] whose
    /// [`input_key`](UrlRemedy::input_key) names another key, then `.into()` a
    /// [`Remediation`] or a [`Decision`].
    ///
    /// ```
    /// use mcp_gate::policy::{Decision, Remediation};
    ///
    /// let decision: Decision = Remediation::url("https://mcp.example.com/approve/7", "Approve, then retry.")
    ///     .input_key("approve_folder")
    ///     .into();
    /// assert!(matches!(&decision, Decision::Deny(Remediation::Url { input_key, .. }) if input_key == "approve_folder"));
    /// ```
    pub fn url(url: impl Into<String>, message: impl Into<String>) -> UrlRemedy {
        UrlRemedy {
            url: url.into(),
            message: message.into(),
            input_key: DEFAULT_INPUT_KEY.into(),
        }
    }

    /// Whether the client can act on this remedy (a scope step-up, a credential, a URL
    /// approval, a task), as opposed to `unavailable` and `undisclosed`.
    ///
    /// ```
    /// use mcp_gate::policy::Remediation;
    ///
    /// assert!(Remediation::Scope { scopes: vec!["mcp:admin".into()] }.is_actionable());
    /// assert!(!Remediation::Undisclosed { message: String::new() }.is_actionable());
    /// ```
    pub fn is_actionable(&self) -> bool {
        !matches!(
            self,
            Remediation::Unavailable { .. } | Remediation::Undisclosed { .. }
        )
    }

    /// A short stable name for logs: `scope`, `credential`, `url`, `task`, `unavailable`,
    /// `undisclosed`.
    pub fn kind(&self) -> &'static str {
        match self {
            Remediation::Scope { .. } => "scope",
            Remediation::Credential { .. } => "credential",
            Remediation::Url { .. } => "url",
            Remediation::Task { .. } => "task",
            Remediation::Unavailable { .. } => "unavailable",
            Remediation::Undisclosed { .. } => "undisclosed",
        }
    }
}

impl From<Remediation> for Decision {
    fn from(remediation: Remediation) -> Self {
        Decision::Deny(remediation)
    }
}

/// A credential remedy being built ([`Remediation::credential`]): its modifiers exist only
/// here, so none can be called on a remedy it would not change. Becomes a
/// [`Remediation::Credential`] (or a [`Decision`] denying with it) through `.into()`.
#[derive(Clone, Debug, PartialEq)]
#[must_use = "a remedy does nothing until it is turned into a Decision"]
pub struct CredentialRemedy {
    authorization_details: Vec<Value>,
    reference: CredentialReference,
    message: Option<String>,
}

impl CredentialRemedy {
    /// No `authorization_reference`: the credential is meant for one use only.
    pub fn single_use(self) -> Self {
        self.with_reference(CredentialReference::SingleUse)
    }

    /// How `authorization_reference` is filled in (derived by default).
    pub fn with_reference(mut self, reference: CredentialReference) -> Self {
        self.reference = reference;
        self
    }

    /// The text shown to the user.
    pub fn message(mut self, text: impl Into<String>) -> Self {
        self.message = Some(text.into());
        self
    }
}

impl From<CredentialRemedy> for Remediation {
    fn from(remedy: CredentialRemedy) -> Self {
        Remediation::Credential {
            authorization_details: remedy.authorization_details,
            reference: remedy.reference,
            message: remedy.message,
        }
    }
}

/// A URL approval remedy being built ([`Remediation::url`]): its one modifier,
/// [`input_key`](Self::input_key), exists only here. Becomes a [`Remediation::Url`] (or a
/// [`Decision`] denying with it) through `.into()`.
#[derive(Clone, Debug, PartialEq)]
#[must_use = "a remedy does nothing until it is turned into a Decision"]
pub struct UrlRemedy {
    url: String,
    message: String,
    input_key: String,
}

impl UrlRemedy {
    /// The key of the input request in the multi-round-trip result (default `"approval"`).
    pub fn input_key(mut self, key: impl Into<String>) -> Self {
        self.input_key = key.into();
        self
    }
}

impl From<UrlRemedy> for Remediation {
    fn from(remedy: UrlRemedy) -> Self {
        Remediation::Url {
            url: remedy.url,
            message: remedy.message,
            input_key: remedy.input_key,
        }
    }
}

/// A remedy being built denies with it: `Remediation::url(..).into()` is a [`Decision`].
macro_rules! denies_with {
    ($($remedy:ty),+) => {$(
        impl From<$remedy> for Decision {
            fn from(remedy: $remedy) -> Self {
                Decision::Deny(remedy.into())
            }
        }
    )+};
}

denies_with!(CredentialRemedy, UrlRemedy);

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_builders_make_the_variants_they_name() {
        let details = json!({"type": "payment_initiation"});
        assert_eq!(
            Remediation::from(
                Remediation::credential([details.clone()])
                    .with_reference(CredentialReference::Fixed("r1".into()))
                    .message("Pay?")
            ),
            Remediation::Credential {
                authorization_details: vec![details.clone()],
                reference: CredentialReference::Fixed("r1".into()),
                message: Some("Pay?".into()),
            }
        );
        assert_eq!(
            Decision::from(Remediation::credential([details.clone()]).single_use()),
            Decision::Deny(Remediation::Credential {
                authorization_details: vec![details.clone()],
                reference: CredentialReference::SingleUse,
                message: None,
            })
        );
        assert_eq!(
            Decision::credential([details.clone()]),
            Decision::Deny(Remediation::Credential {
                authorization_details: vec![details],
                reference: CredentialReference::Derived,
                message: None,
            })
        );
        assert_eq!(
            Decision::url("https://a.example/ok", "Approve."),
            Decision::Deny(Remediation::Url {
                url: "https://a.example/ok".into(),
                message: "Approve.".into(),
                input_key: "approval".into(),
            })
        );
        assert_eq!(
            Remediation::from(Remediation::url("https://a.example/ok", "Approve.").input_key("k")),
            Remediation::Url {
                url: "https://a.example/ok".into(),
                message: "Approve.".into(),
                input_key: "k".into(),
            }
        );
    }
}
