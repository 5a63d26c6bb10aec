//! Rate limits: how fast one caller, one client, or everyone together may call.
//!
//! **Threat.** One token can run an expensive tool thousands of times a second, keep the
//! policy busy with calls it denies, or flood the inner server for everyone. Quotas bound how
//! much *state* a caller holds, not how often it calls. A limit bounds the calls: counted per
//! principal (issuer, subject and client id together), per principal and tool, per client
//! id, or over every caller for one tool, at a [`RateLimit`] enforced with GCRA.
//!
//! The counters are kept in a [`LimitStore`](crate::store::limits::LimitStore): in memory
//! for one process, in Redis for every replica.

pub(crate) mod gcra;
mod rate;

pub use rate::{RateError, RateLimit};
