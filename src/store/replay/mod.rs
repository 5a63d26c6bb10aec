//! Single use of continuation states: where used states are remembered, for how long, and
//! within which bounds.
//!
//! **Threat.** A confirmation state (`requestState`) that can be presented twice runs the
//! confirmed call twice. A store that forgets a used state before the state expires (an
//! evicting cache) lets that happen, and a store one caller can fill blocks everyone else's
//! confirmations. A store on one replica lets the state be used again on another.
//!
//! **API.** A [`ReplayStore`] records each used state's nonce until the state expires, and
//! answers whether this was the first use. It is asynchronous and fallible: a store that
//! cannot answer is a refusal, never an allow. Two backends, one file each:
//! [`MemoryReplayStore`] (`memory.rs`, one process) is bounded twice, in total and per owner,
//! and when either bound is reached it refuses new states ([`StoreError::Full`],
//! [`StoreError::OwnerQuota`]) instead of forgetting live ones. `RedisReplayStore` (`redis.rs`,
//! feature `redis`) shares used states between replicas, and the same two bounds with them:
//! counted in Redis, for every replica at once, in the script that records the state.
//!
//! These types are also re-exported at `mcp_gate::continuation`, where they were before.
//!
//! ```
//! use std::time::{Duration, SystemTime};
//! use mcp_gate::store::replay::{FirstUse, MemoryReplayStore, ReplayStore, StateUse};
//! use mcp_gate::store::{StoreError, StoreKind};
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let store = MemoryReplayStore::new(100, 1);
//! let (now, until) = (SystemTime::now(), SystemTime::now() + Duration::from_secs(600));
//! let state = |owner, nonce| StateUse::new(owner, nonce, now, until);
//! assert_eq!(store.first_use(state("alice", "n1")).await, Ok(FirstUse::Yes));
//! assert_eq!(store.first_use(state("alice", "n1")).await, Ok(FirstUse::AlreadyUsed));
//! // Alice's quota is one live state; Bob is not affected.
//! assert_eq!(
//!     store.first_use(state("alice", "n2")).await,
//!     Err(StoreError::OwnerQuota { store: StoreKind::Replay, quota: 1 })
//! );
//! assert_eq!(store.first_use(state("bob", "n3")).await, Ok(FirstUse::Yes));
//! // A state issued before the store existed (a restart) cannot be judged.
//! let old = StateUse::new("bob", "n4", now - Duration::from_secs(60), until);
//! assert_eq!(store.first_use(old).await, Ok(FirstUse::Unknowable));
//! # });
//! ```

use std::time::SystemTime;

use super::{StoreError, StoreFuture, into_shared};

mod memory;
#[cfg(feature = "redis")]
mod redis;

pub use memory::MemoryReplayStore;
#[cfg(feature = "redis")]
pub use redis::RedisReplayStore;

/// Whether a state was used for the first time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
#[non_exhaustive]
pub enum FirstUse {
    /// First use: recorded now.
    Yes,
    /// Used before: refuse it.
    AlreadyUsed,
    /// Issued before the store's memory began (the process restarted, or Redis lost its
    /// data): the store cannot tell whether it was used, so it is refused.
    Unknowable,
}

/// One presentation of a state, as a replay store records it.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct StateUse<'a> {
    /// An opaque key, the same for every state of one principal.
    pub owner: &'a str,
    /// The state's unique nonce.
    pub nonce: &'a str,
    /// When the state was issued.
    pub issued_at: SystemTime,
    /// When the state expires; it must be remembered until then.
    pub expires_at: SystemTime,
}

impl<'a> StateUse<'a> {
    /// One presentation of the state `nonce` of `owner`.
    pub fn new(
        owner: &'a str,
        nonce: &'a str,
        issued_at: SystemTime,
        expires_at: SystemTime,
    ) -> Self {
        Self {
            owner,
            nonce,
            issued_at,
            expires_at,
        }
    }
}

/// The name replay store errors had before every store shared [`StoreError`].
#[deprecated(since = "0.1.0", note = "use mcp_gate::store::StoreError")]
pub type ReplayError = StoreError;

/// What every [`ReplayStore`] method returns.
pub type ReplayFuture<'a> = StoreFuture<'a, FirstUse>;

/// Remembers used states when single use is on.
pub trait ReplayStore: Send + Sync + 'static {
    /// Records the use of a state until it expires, and says whether it was the first. A
    /// store whose memory began after the state was issued answers [`FirstUse::Unknowable`].
    fn first_use<'a>(&'a self, state: StateUse<'a>) -> ReplayFuture<'a>;

    /// What backs the store, for start-up lines and readiness reports: `memory`, `redis`,
    /// or `custom` (this default) for a store of the application's own.
    fn backend(&self) -> &'static str {
        "custom"
    }

    /// Whether the store answers now, for a readiness report
    /// ([`Gate::readiness`](crate::Gate::readiness)): a memory store always does, a shared
    /// one sends one round trip. This default answers yes; a store of your own that can be
    /// unreachable should say so.
    fn reachable(&self) -> StoreFuture<'_, ()> {
        Box::pin(std::future::ready(Ok(())))
    }
}

into_shared!(ReplayStore);
