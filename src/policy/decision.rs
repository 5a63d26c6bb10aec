//! What `evaluate` answers: [`Decision`], and for denials the [`Remediation`] that says what
//! would fix it.

use serde_json::Value;

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
        Decision::Deny(Remediation::credential(authorization_details))
    }

    /// Deny until the user approves at `url`; the input key is `"approval"`.
    pub fn url(url: impl Into<String>, message: impl Into<String>) -> Self {
        Decision::Deny(Remediation::Url {
            url: url.into(),
            message: message.into(),
            input_key: "approval".into(),
        })
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
    /// A credential remedy with a derived reference and no message.
    pub fn credential<I: IntoIterator<Item = Value>>(authorization_details: I) -> Self {
        Remediation::Credential {
            authorization_details: authorization_details.into_iter().collect(),
            reference: CredentialReference::Derived,
            message: None,
        }
    }

    /// Marks a credential remedy single-use (no `authorization_reference`).
    pub fn single_use(self) -> Self {
        self.with_reference(CredentialReference::SingleUse)
    }

    /// Sets a credential remedy's reference.
    pub fn with_reference(mut self, new: CredentialReference) -> Self {
        if let Remediation::Credential { reference, .. } = &mut self {
            *reference = new;
        }
        self
    }

    /// Sets a credential remedy's message.
    pub fn message(mut self, text: impl Into<String>) -> Self {
        if let Remediation::Credential { message, .. } = &mut self {
            *message = Some(text.into());
        }
        self
    }

    /// Sets a URL remedy's input key.
    pub fn input_key(mut self, key: impl Into<String>) -> Self {
        if let Remediation::Url { input_key, .. } = &mut self {
            *input_key = key.into();
        }
        self
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
