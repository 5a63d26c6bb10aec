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
//! when to come back ([`Taken`]). For a concurrency limit it also counts the calls a holder
//! has in flight: [`LimitStore::acquire`] takes one of a holder's places (a [`Lease`]) or
//! says they are all taken, and [`LimitStore::release`] gives it back when the call ends. Two
//! backends, one file each: [`MemoryLimitStore`] (`memory.rs`, one process, bounded) and
//! `RedisLimitStore` (`redis.rs`, feature `redis`: one script per call, the counters of one
//! caller in one hash slot; a holder's leases in one sorted set, each expiring).

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

/// One call's place among the calls its holder has in flight: what
/// [`LimitStore::acquire`] hands out and [`LimitStore::release`] takes back. Not `Clone`: a
/// place is given back once.
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a lease not released holds its place until it expires"]
pub struct Lease {
    holder: String,
    id: u64,
}

impl Lease {
    /// The lease `id` (unique among `holder`'s leases) of `holder`'s calls.
    pub fn new(holder: impl Into<String>, id: u64) -> Self {
        Self {
            holder: holder.into(),
            id,
        }
    }

    /// Whose calls it is one of.
    pub fn holder(&self) -> &str {
        &self.holder
    }

    /// Its id among its holder's leases.
    pub fn id(&self) -> u64 {
        self.id
    }
}

/// What [`LimitStore::acquire`] returns: a lease, or `None` when the holder has as many calls
/// in flight as it may.
pub type AcquireFuture<'a> = StoreFuture<'a, Option<Lease>>;

/// What [`LimitStore::release`] returns: `None` when the place was given back at once, else
/// the work that gives it back (run on the runtime; its failure is logged, and the lease
/// then expires).
pub type ReleaseFuture = Option<StoreFuture<'static, ()>>;

/// Keeps rate-limit counters.
pub trait LimitStore: Send + Sync + 'static {
    /// Counts one call on every tally in `tallies` if each has room, else on none. The
    /// tallies of one group are checked and counted atomically; a store that cannot answer
    /// fails, and the call is refused.
    fn take<'a>(&'a self, tallies: &'a [Tally]) -> LimitFuture<'a>;

    /// Whether the store counts calls in flight ([`acquire`](Self::acquire) and
    /// [`release`](Self::release)). This default: it does not, and the builder refuses a
    /// concurrency limit kept in it.
    fn counts_in_flight(&self) -> bool {
        false
    }

    /// Takes one of the `max` places of `holder`'s calls in flight, for at most `lease`: a
    /// place not released by then is free again (so a replica that stopped while holding
    /// places cannot keep them). `Ok(None)` when `max` calls are in flight. A store that
    /// cannot answer fails, and the call is refused. This default fails: a store that counts
    /// calls in flight overrides it with [`counts_in_flight`](Self::counts_in_flight).
    fn acquire<'a>(&'a self, holder: &'a str, max: u32, lease: Duration) -> AcquireFuture<'a> {
        let _ = (holder, max, lease);
        Box::pin(async {
            Err(super::StoreError::unavailable(
                super::StoreKind::Limits,
                "this limit store does not count calls in flight",
            ))
        })
    }

    /// Gives `lease` back: its holder has one call fewer in flight. Called when the call ends,
    /// from a destructor, so it does not wait: it gives the place back at once (`None`), or
    /// returns the work that does (run on the runtime). This default does nothing.
    fn release(&self, lease: Lease) -> ReleaseFuture {
        drop(lease);
        None
    }

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
