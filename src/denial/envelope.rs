//! The SEP-2643 envelope: `io.modelcontextprotocol/authorization`.
//!
//! Its presence says the operation was **not** performed, so the layer only ever attaches it
//! to answers it writes itself, before the inner service runs; a result of an operation that
//! started is never given one.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Map, Value};

use super::revision::{Family, Revision};
use crate::random::RandomnessUnavailable;

/// Where result-based revisions put the envelope (`_meta` of a result, or `error.data`).
pub const ENVELOPE_KEY: &str = "io.modelcontextprotocol/authorization";
/// Where a retrying client echoes the context id (`params._meta`). Never trusted.
pub const CONTEXT_ID_ECHO_KEY: &str = "io.modelcontextprotocol/authorization-context-id";
/// Where error-based revisions put the envelope (`error.data`).
pub const ERROR_DATA_KEY: &str = "authorization";
/// The extension identifier every pinned revision defines, which the layer adds to the
/// inner server's `server/discover` capabilities.
pub const EXTENSION_ID: &str = "io.modelcontextprotocol/structured-authorization-denials";

/// Whether and how the caller could get access.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RemediationState {
    /// A remedy exists and is described (hints, or a challenge, or the result shape).
    Available,
    /// No remedy: do not retry.
    Unavailable,
    /// A remedy may exist but is not described.
    Undisclosed,
}

impl RemediationState {
    /// The wire value.
    pub fn as_str(self) -> &'static str {
        match self {
            RemediationState::Available => "available",
            RemediationState::Unavailable => "unavailable",
            RemediationState::Undisclosed => "undisclosed",
        }
    }
}

/// A fresh opaque correlation handle: `actx_` and 22 base64url characters of randomness.
/// Derived from nothing about the request, the caller or the policy. Without a working
/// random source there is no handle, and the denial becomes an internal error rather than a
/// response sharing a guessable id.
pub fn new_context_id() -> Result<String, RandomnessUnavailable> {
    let mut bytes = [0u8; 16];
    crate::random::fill(&mut bytes)?;
    Ok(format!("actx_{}", URL_SAFE_NO_PAD.encode(bytes)))
}

/// One envelope, rendered per revision.
pub(crate) struct Envelope<'a> {
    pub remediation: RemediationState,
    pub context_id: &'a str,
    /// Only for `Available`.
    pub hints: Vec<Value>,
}

impl Envelope<'_> {
    /// The envelope object in the revision's shape.
    pub fn to_json(&self, revision: Revision) -> Value {
        let mut object = Map::new();
        object.insert("reason".into(), "insufficient_authorization".into());
        if let Family::ResultBased { .. } = revision.family() {
            object.insert("remediation".into(), self.remediation.as_str().into());
        }
        object.insert("authorizationContextId".into(), self.context_id.into());
        if self.remediation == RemediationState::Available && !self.hints.is_empty() {
            object.insert("remediationHints".into(), Value::Array(self.hints.clone()));
        }
        Value::Object(object)
    }

    /// The key under which the envelope goes, per revision.
    pub fn key(revision: Revision) -> &'static str {
        match revision.family() {
            Family::ResultBased { .. } => ENVELOPE_KEY,
            Family::ErrorBased => ERROR_DATA_KEY,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn context_ids_are_fresh_and_opaque() {
        let a = new_context_id().unwrap();
        let b = new_context_id().unwrap();
        assert_ne!(a, b);
        assert_eq!(a.len(), 5 + 22);
        assert!(
            a[5..]
                .bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
        );
    }

    #[test]
    fn hints_only_when_available() {
        let revision = Revision::current();
        let envelope = Envelope {
            remediation: RemediationState::Undisclosed,
            context_id: "actx_x",
            hints: vec![serde_json::json!({"type": "url"})],
        };
        assert!(envelope.to_json(revision).get("remediationHints").is_none());
    }
}
