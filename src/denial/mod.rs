//! How a denial is said on the wire: pinned SEP-2643 revisions, the envelope, the
//! `authorization_reference`, and the renderer.
//!
//! This module never calls `auth` verification or `policy`: it only shapes answers.

pub(crate) mod envelope;
mod reference;
pub(crate) mod render;
mod revision;

pub use envelope::{
    CONTEXT_ID_ECHO_KEY, ENVELOPE_KEY, ERROR_DATA_KEY, EXTENSION_ID, RemediationState,
    new_context_id,
};
pub(crate) use reference::canonical_json;
pub use reference::derive_reference;
pub use render::{
    CredentialDelivery, DEFAULT_DENIAL_CODE, MAX_CHALLENGE_REMEDIATION, URL_ELICITATION_REQUIRED,
};
pub use revision::{CURRENT, Family, IntoRevision, Revision};
