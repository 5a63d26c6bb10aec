//! The Cedar suites (feature `cedar`) in one test binary: `policy` drives `CedarPolicy` from
//! the outside (build, reload, watch, generated decisions), `equivalence` holds the example
//! server's Cedar set against the closure it reproduces.
//!
//! ```text
//! cargo test --features introspection,redis,cedar --test cedar
//! ```
#![cfg(feature = "cedar")]

#[path = "../common/mod.rs"]
mod common;

mod equivalence;
mod policy;
