//! The in-process integration suites in one test binary, one module each, sharing the
//! harness in `tests/common` (compiled and linked once, not once per suite). Each module's own
//! doc says what it covers; run one with its module path as the filter:
//!
//! ```text
//! cargo test --features introspection,redis --test suite golden::
//! ```
//!
//! The suites that need a process of their own stay apart: `canary` (it installs the global
//! tracing subscriber), `conformance` (it re-executes its binary in a network namespace),
//! `soak` (it measures the process's resident memory), `redis_tls` (it sets `SSL_CERT_FILE`),
//! `crypto_backend` (its own feature set) and `cedar` (feature `cedar`).

#[path = "../common/mod.rs"]
mod common;

mod audit_docs;
mod bounds;
mod cache_scope;
mod compose;
mod decision_events;
mod default_deny;
mod discovery;
mod dpop;
mod fail_closed;
mod get_stream;
mod golden;
mod hostile;
mod house;
mod interactive;
mod introspection;
mod limit_golden;
mod limits;
mod method_model;
mod quotas;
mod readiness;
mod real_peers;
#[cfg(feature = "redis")]
mod redis_failover;
mod redis_outage;
mod redis_recovery;
mod refusals;
mod replay;
mod replicas;
mod response_sdk;
mod response_side;
mod resume;
mod revocation;
mod sdk_denials;
mod sdk_error_based;
mod seam;
mod seen;
mod task_notify;
mod task_store_redis;
mod tasks;
mod tasks_redis;
mod wire_fidelity;
mod wire_pages;
