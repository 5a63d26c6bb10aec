//! What is being asked: JSON-RPC classification and protocol eras.
//!
//! This module knows nothing of OAuth. It turns a buffered request body and its headers into a
//! classified request with its era and the client's declared capabilities, or a JSON-RPC
//! error that says why it cannot.

pub(crate) mod annotations;
pub(crate) mod era;
mod json;
pub(crate) mod request;

pub use era::{
    ClientCapabilities, Era, META_CLIENT_CAPABILITIES, META_PROTOCOL_VERSION, MODERN_VERSIONS,
    ProtocolContext, TASKS_EXTENSION,
};
pub use request::{
    CompletionReference, HEADER_MISMATCH, INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST,
    MISSING_CAPABILITY, PARSE_ERROR, ProtocolError, Target, UNSUPPORTED_VERSION,
};
