//! Single use of continuation states: where used states are remembered.
//!
//! **Threat.** A confirmation state (`requestState`) that can be presented twice runs the
//! confirmed call twice. A store that forgets a used state before the state expires (an
//! evicting cache) lets that happen, and a store one caller can fill blocks everyone else's
//! confirmations. A store on one replica lets the state be used again on another.
//!
//! **API.** A [`ReplayStore`] records each used state's nonce until the state expires, and
//! answers whether this was the first use. It is asynchronous and fallible: a store that
//! cannot answer is a refusal, never an allow. [`MemoryReplayStore`] (one process) is bounded
//! twice, in total and per owner, and when either bound is reached it refuses new states
//! instead of forgetting live ones. [`RedisReplayStore`] (feature `redis`) shares used states
//! between replicas, and the same two bounds with them: counted in Redis, for every replica at
//! once, in the script that records the state.
//!
//! ```
//! use std::time::{Duration, SystemTime};
//! use mcp_gate::continuation::{FirstUse, MemoryReplayStore, ReplayError, ReplayStore, StateUse};
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let store = MemoryReplayStore::new(100, 1);
//! let (now, until) = (SystemTime::now(), SystemTime::now() + Duration::from_secs(600));
//! let state = |owner, nonce| StateUse::new(owner, nonce, now, until);
//! assert_eq!(store.first_use(state("alice", "n1")).await, Ok(FirstUse::Yes));
//! assert_eq!(store.first_use(state("alice", "n1")).await, Ok(FirstUse::AlreadyUsed));
//! // Alice's quota is one live state; Bob is not affected.
//! assert_eq!(store.first_use(state("alice", "n2")).await, Err(ReplayError::OwnerQuota { quota: 1 }));
//! assert_eq!(store.first_use(state("bob", "n3")).await, Ok(FirstUse::Yes));
//! // A state issued before the store existed (a restart) cannot be judged.
//! let old = StateUse::new("bob", "n4", now - Duration::from_secs(60), until);
//! assert_eq!(store.first_use(old).await, Ok(FirstUse::Unknowable));
//! # });
//! ```

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

#[cfg(feature = "redis")]
mod redis;
#[cfg(feature = "redis")]
pub use self::redis::RedisReplayStore;
#[cfg(feature = "redis")]
pub(crate) use self::redis::key_digest;

/// Whether a state was used for the first time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
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

/// Why a replay store could not answer. The state is refused either way.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReplayError {
    /// The store holds as many live states as it may; it refuses new ones rather than forget
    /// one that is still valid.
    #[error("the replay store is full ({capacity} live states)")]
    Full {
        /// The store's capacity.
        capacity: usize,
    },
    /// This owner has used as many states as one owner may within their lifetime.
    #[error("this principal has used {quota} states that are still live, as many as one may")]
    OwnerQuota {
        /// Live used states per owner.
        quota: usize,
    },
    /// The store could not be reached or did not answer in time.
    #[error("the replay store is unavailable: {0}")]
    Unavailable(String),
}

/// What every [`ReplayStore`] method returns.
pub type ReplayFuture<'a> =
    Pin<Box<dyn Future<Output = Result<FirstUse, ReplayError>> + Send + 'a>>;

/// Remembers used states when single use is on.
pub trait ReplayStore: Send + Sync + 'static {
    /// Records the use of a state until it expires, and says whether it was the first. A
    /// store whose memory began after the state was issued answers [`FirstUse::Unknowable`].
    fn first_use<'a>(&'a self, state: StateUse<'a>) -> ReplayFuture<'a>;
}

/// An in-memory [`ReplayStore`] for one process: at most `capacity` used states that have not
/// expired, at most `per_owner` of them for one owner. At either bound new states are refused
/// ([`ReplayError`]) until older ones expire; a used state is never forgotten while it is
/// valid.
#[derive(Debug)]
pub struct MemoryReplayStore {
    capacity: usize,
    per_owner: usize,
    /// When this store's memory began: states issued earlier cannot be judged.
    started: SystemTime,
    state: Mutex<Used>,
}

#[derive(Debug, Default)]
struct Used {
    /// Nonce -> (owner, when the state expires).
    nonces: HashMap<String, (String, Instant)>,
    /// Owner -> live used states.
    owners: HashMap<String, usize>,
}

impl Used {
    fn forget_expired(&mut self, now: Instant) {
        let owners = &mut self.owners;
        self.nonces.retain(|_, (owner, until)| {
            let live = *until > now;
            if !live && let Some(count) = owners.get_mut(owner.as_str()) {
                *count -= 1;
                if *count == 0 {
                    owners.remove(owner.as_str());
                }
            }
            live
        });
    }
}

impl MemoryReplayStore {
    /// The capacity of the layer's default store: live used states in all.
    pub const DEFAULT_CAPACITY: usize = 100_000;
    /// The per-owner quota of the layer's default store: live used states of one owner.
    pub const DEFAULT_PER_OWNER: usize = 1_000;

    /// A store of at most `capacity` live used states, `per_owner` of them per owner.
    pub fn new(capacity: usize, per_owner: usize) -> Self {
        Self {
            capacity,
            per_owner,
            // To the millisecond, as states carry their issue time.
            started: UNIX_EPOCH + std::time::Duration::from_millis(crate::tasks::now_ms()),
            state: Mutex::new(Used::default()),
        }
    }

    fn record(&self, state: StateUse<'_>) -> Result<FirstUse, ReplayError> {
        let StateUse {
            owner,
            nonce,
            issued_at,
            expires_at,
        } = state;
        // A state issued before this store existed may have been used by the process before
        // it (keys from configuration outlive a restart): it cannot be judged.
        if issued_at < self.started {
            return Ok(FirstUse::Unknowable);
        }
        let now = Instant::now();
        let left = expires_at
            .duration_since(SystemTime::now())
            .unwrap_or_default();
        let until = now + left;
        // A panic while holding the lock leaves consistent maps (each change is one insert or
        // one retain with its count), so the state is used as it is.
        let mut used = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((_, live_until)) = used.nonces.get(nonce)
            && *live_until > now
        {
            return Ok(FirstUse::AlreadyUsed);
        }
        let count = |used: &Used| used.owners.get(owner).copied().unwrap_or(0);
        if used.nonces.len() >= self.capacity || count(&used) >= self.per_owner {
            used.forget_expired(now);
        }
        if used.nonces.len() >= self.capacity {
            return Err(ReplayError::Full {
                capacity: self.capacity,
            });
        }
        if count(&used) >= self.per_owner {
            return Err(ReplayError::OwnerQuota {
                quota: self.per_owner,
            });
        }
        *used.owners.entry(owner.to_owned()).or_insert(0) += 1;
        // An expired entry under the same nonce is replaced: its count is released first.
        if let Some((previous, _)) = used
            .nonces
            .insert(nonce.to_owned(), (owner.to_owned(), until))
            && let Some(count) = used.owners.get_mut(&previous)
        {
            *count -= 1;
            if *count == 0 {
                used.owners.remove(&previous);
            }
        }
        Ok(FirstUse::Yes)
    }
}

impl ReplayStore for MemoryReplayStore {
    fn first_use<'a>(&'a self, state: StateUse<'a>) -> ReplayFuture<'a> {
        Box::pin(std::future::ready(self.record(state)))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn later(seconds: u64) -> SystemTime {
        SystemTime::now() + Duration::from_secs(seconds)
    }

    impl MemoryReplayStore {
        fn use_now(
            &self,
            owner: &str,
            nonce: &str,
            expires_at: SystemTime,
        ) -> Result<FirstUse, ReplayError> {
            self.record(StateUse::new(owner, nonce, SystemTime::now(), expires_at))
        }
    }

    #[test]
    fn a_full_store_refuses_and_forgets_nothing_live() {
        let store = MemoryReplayStore::new(3, 2);
        assert_eq!(store.use_now("a", "1", later(60)), Ok(FirstUse::Yes));
        assert_eq!(store.use_now("a", "2", later(60)), Ok(FirstUse::Yes));
        assert_eq!(
            store.use_now("a", "3", later(60)),
            Err(ReplayError::OwnerQuota { quota: 2 })
        );
        assert_eq!(store.use_now("b", "4", later(60)), Ok(FirstUse::Yes));
        assert_eq!(
            store.use_now("c", "5", later(60)),
            Err(ReplayError::Full { capacity: 3 })
        );
        // However hard the store is pushed, a used state stays used.
        for nonce in ["1", "2", "4"] {
            assert_eq!(
                store.use_now("z", nonce, later(60)),
                Ok(FirstUse::AlreadyUsed)
            );
        }
    }

    #[test]
    fn expired_states_free_their_slots() {
        let store = MemoryReplayStore::new(1, 1);
        assert_eq!(
            store.use_now("a", "1", SystemTime::now()),
            Ok(FirstUse::Yes)
        );
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(store.use_now("b", "2", later(60)), Ok(FirstUse::Yes));
        let used = store.state.lock().unwrap();
        assert_eq!(used.nonces.len(), 1);
        assert_eq!(used.owners.get("a"), None);
        assert_eq!(used.owners.get("b"), Some(&1));
    }
}
