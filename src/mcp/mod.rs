//! What is being asked: JSON-RPC classification and protocol eras.
//!
//! This module knows nothing of OAuth. It turns a buffered request body and its headers into a
//! classified request with its era and the client's declared capabilities, or a JSON-RPC
//! error that says why it cannot.

pub(crate) mod annotations;
pub(crate) mod era;
pub(crate) mod identity;
pub(crate) mod json;
pub(crate) mod listings;
mod methods;
pub(crate) mod params;
pub(crate) mod reading;
pub(crate) mod request;

/// The session stores, now found at `mcp_gate::store::sessions`.
#[cfg(feature = "redis")]
pub use crate::store::sessions::RedisSessionStore;
/// The session stores, now found at `mcp_gate::store::sessions`.
#[allow(deprecated)]
pub use crate::store::sessions::{
    MemorySessionStore, SessionFuture, SessionRecord, SessionStore, SessionStoreError,
};
pub use era::{
    ClientCapabilities, Era, META_CLIENT_CAPABILITIES, META_PROTOCOL_VERSION, MODERN_VERSIONS,
    ProtocolContext, SUPPORTED_VERSIONS, TASKS_EXTENSION,
};
pub use identity::SERVER_INFO_META;
pub use methods::{EntryKind, Listing, METHODS, MethodClass, MethodRow, method_class};
pub use request::{
    Arguments, CompletionReference, HEADER_MISMATCH, INTERNAL_ERROR, INVALID_PARAMS,
    INVALID_REQUEST, METHOD_NOT_FOUND, MISSING_CAPABILITY, PARSE_ERROR, Target,
    UNSUPPORTED_VERSION,
};
pub(crate) use request::{ProtocolError, http_method_label, method_label};
