//! Shared harness for the integration tests: real peers and token helpers.
#![allow(dead_code)]

pub mod clients;
pub mod confirm;
pub mod dpop;
pub mod fixtures;
pub mod modern;
pub mod normalize;
pub mod paging;
pub mod peers;
pub mod ports;
pub mod proxy;
pub mod py_listen;
pub mod scripted;
pub mod strict_json;
pub mod surface;
pub mod tokens;

#[cfg(feature = "redis")]
pub mod redis_server;
#[cfg(feature = "redis")]
pub mod redis_topology;

#[path = "../../examples/server/tools.rs"]
pub mod tools;

#[path = "../../examples/server/approvals.rs"]
pub mod approvals;

#[path = "../../examples/server/policy.rs"]
pub mod policy;

#[cfg(feature = "cedar")]
#[path = "../../examples/server/cedar_policy.rs"]
pub mod cedar_policy;
