//! Revoked tokens, subjects and clients: the set every request is checked against.
//!
//! **Threat.** A token withdrawn at the authorization server stays usable at a resource server
//! that cached its verification; a revocation one replica knows and another does not is a
//! revocation an attacker routes around; a set one caller can fill blocks the next
//! revocation.
//!
//! **API.** A [`RevocationStore`] stores each [`RevocationEntry`] (a
//! [`Revocation`], when it was made, and until when it lives) and
//! keeps a [`RevocationList`] in this process: the copy each request is checked against,
//! without a round trip. Two backends, one file each: [`MemoryRevocations`] (`memory.rs`, one
//! process: the list is the set) and `RedisRevocations` (`redis.rs`, feature `redis`: a
//! durable set in Redis, published to every replica, reloaded by a replica that reconnects).
//! Both are bounded alike: at the capacity a new revocation is refused
//! ([`StoreError::Full`](super::StoreError::Full)), never a live one forgotten. `list.rs` is the local copy both keep.
//!
//! ```
//! use mcp_gate::auth::Revocation;
//! use mcp_gate::store::revocations::{MemoryRevocations, RevocationEntry, RevocationStore};
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let set = MemoryRevocations::new(1);
//! let now = 1_800_000_000_000;
//! let entry = |subject| RevocationEntry::new(Revocation::subject("https://as", subject), now, now + 60_000);
//! set.revoke(&entry("alice")).await.unwrap();
//! assert_eq!(set.list().len(), 1);
//! // Full: a new revocation is refused until an entry expires.
//! assert!(set.revoke(&entry("bob")).await.is_err());
//! # });
//! ```

use serde::{Deserialize, Serialize};

use super::{StoreFuture, into_shared};
use crate::auth::Revocation;

mod list;
mod memory;
#[cfg(feature = "redis")]
mod redis;

pub use list::{FeedState, RevocationList};
pub use memory::MemoryRevocations;
#[cfg(feature = "redis")]
pub use redis::RedisRevocations;

/// The default bound on live revocations, on every backend.
pub const DEFAULT_CAPACITY: usize = 100_000;

/// One stored revocation: what, when (milliseconds since the epoch), and until when it lives
/// (the expiry of the longest token it could match).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct RevocationEntry {
    /// What is revoked.
    pub revocation: Revocation,
    /// When it was revoked: tokens of a revoked subject or client issued later are accepted.
    pub revoked_at_ms: u64,
    /// When the entry goes.
    pub until_ms: u64,
}

impl RevocationEntry {
    /// An entry for `revocation`, made at `revoked_at_ms`, living until `until_ms`.
    pub fn new(revocation: Revocation, revoked_at_ms: u64, until_ms: u64) -> Self {
        Self {
            revocation,
            revoked_at_ms,
            until_ms,
        }
    }
}

/// Where revocations are stored, and this process's copy of them.
pub trait RevocationStore: Send + Sync + 'static {
    /// Stores `entry` for every replica that shares the set, and puts it in this process's
    /// [`list`](Self::list) before answering. Refused at the set's capacity
    /// ([`StoreError::Full`](super::StoreError::Full)) or when the set cannot be reached
    /// ([`StoreError::Unavailable`](super::StoreError::Unavailable)):
    /// the revocation is then not in force, and the caller must be told.
    fn revoke<'a>(&'a self, entry: &'a RevocationEntry) -> StoreFuture<'a, ()>;

    /// This process's copy, checked on every request.
    fn list(&self) -> &RevocationList;

    /// What backs the set: `memory`, `redis`, or `custom` (this default).
    fn backend(&self) -> &'static str {
        "custom"
    }

    /// Whether the set answers now, for a readiness report. This default answers yes.
    fn reachable(&self) -> StoreFuture<'_, ()> {
        Box::pin(std::future::ready(Ok(())))
    }
}

into_shared!(RevocationStore);
