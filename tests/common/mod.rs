//! Shared harness for the integration tests: real peers and token helpers.
#![allow(dead_code)]

pub mod peers;
pub mod tokens;

#[path = "../../examples/server/tools.rs"]
pub mod tools;

#[path = "../../examples/server/approvals.rs"]
pub mod approvals;

#[path = "../../examples/server/policy.rs"]
pub mod policy;
