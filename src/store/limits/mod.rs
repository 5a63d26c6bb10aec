//! Rate-limit counters: one GCRA counter per limited key, shared by every replica when the
//! store is shared.
//!
//! **Threat.** A counter one replica keeps alone lets a caller spread its calls over the
//! replicas and get N times its rate; a store one caller can fill stops counting everyone
//! else; a store that cannot answer and lets the call through is no limit at all. So the
//! counters live in one store every replica asks, a full store or a failed one refuses the
//! call (never admits it uncounted), and each caller's counters are bounded by the limits
//! configured, not by what the caller sends (a tool name that is not listed is counted as
//! `other`).
//!
//! **API.** A [`LimitStore`] is asked once per call with every counter that applies to it
//! ([`Tally`]); it admits the call on all of them or on none, and says which was out and
//! when to come back ([`Taken`]). Two backends, one file each: [`MemoryLimitStore`]
//! (`memory.rs`, one process, bounded) and `RedisLimitStore` (`redis.rs`, feature `redis`:
//! one script per call, the counters of one caller in one hash slot).

use std::time::Duration;

use super::{StoreFuture, into_shared};

pub(crate) mod gcra;
mod memory;
mod rate;
#[cfg(feature = "redis")]
mod redis;

pub use memory::MemoryLimitStore;
pub use rate::{RateError, RateLimit};
#[cfg(feature = "redis")]
pub use redis::RedisLimitStore;

/// One counter a call is counted on: its key and its rate.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Tally {
    /// What the counter's key is grouped by (the caller's digest, or the tool's for a limit
    /// over every caller): counters of one group are checked together, and in Redis they
    /// share a hash slot.
    pub group: String,
    /// The counter's name within its group (which limit, and the tool it counts).
    pub name: String,
    /// Its rate.
    pub rate: RateLimit,
}

impl Tally {
    /// The counter `name` of `group`, at `rate`.
    pub fn new(group: impl Into<String>, name: impl Into<String>, rate: RateLimit) -> Self {
        Self {
            group: group.into(),
            name: name.into(),
            rate,
        }
    }
}

/// Whether a call was admitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
#[non_exhaustive]
pub enum Taken {
    /// Counted on every tally.
    Admitted,
    /// Refused, counted on none: the tally (its index) that was out, and when the call would
    /// pass on all of them.
    Limited {
        /// The index of the first tally that was out.
        tally: usize,
        /// How long until the call would pass.
        retry_after: Duration,
    },
}

/// What [`LimitStore::take`] returns.
pub type LimitFuture<'a> = StoreFuture<'a, Taken>;

/// Keeps rate-limit counters.
pub trait LimitStore: Send + Sync + 'static {
    /// Counts one call on every tally in `tallies` if each has room, else on none. The
    /// tallies of one group are checked and counted atomically; a store that cannot answer
    /// fails, and the call is refused.
    fn take<'a>(&'a self, tallies: &'a [Tally]) -> LimitFuture<'a>;

    /// What backs the store: `memory`, `redis`, or `custom` (this default).
    fn backend(&self) -> &'static str {
        "custom"
    }

    /// Whether the store answers now, for a readiness report (this default: it does).
    fn reachable(&self) -> StoreFuture<'_, ()> {
        Box::pin(async { Ok(()) })
    }
}

into_shared!(LimitStore);
