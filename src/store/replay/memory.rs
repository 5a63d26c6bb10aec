//! [`MemoryReplayStore`]: used states in this process's memory, bounded in total and per
//! owner, and refusing what was issued before its memory began.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use super::{FirstUse, ReplayFuture, ReplayStore, StateUse};
use crate::store::{StoreError, StoreKind};

/// An in-memory [`ReplayStore`] for one process: at most `capacity` used states that have not
/// expired, at most `per_owner` of them for one owner. At either bound new states are refused
/// ([`StoreError::Full`], [`StoreError::OwnerQuota`]) until older ones expire; a used state is never forgotten while it is
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
            started: UNIX_EPOCH + std::time::Duration::from_millis(crate::clock::now_ms()),
            state: Mutex::new(Used::default()),
        }
    }

    fn record(&self, state: StateUse<'_>) -> Result<FirstUse, StoreError> {
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
            return Err(StoreError::Full {
                store: StoreKind::Replay,
                capacity: self.capacity,
            });
        }
        if count(&used) >= self.per_owner {
            return Err(StoreError::OwnerQuota {
                store: StoreKind::Replay,
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
    fn backend(&self) -> &'static str {
        "memory"
    }

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
        ) -> Result<FirstUse, StoreError> {
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
            Err(StoreError::OwnerQuota {
                store: StoreKind::Replay,
                quota: 2
            })
        );
        assert_eq!(store.use_now("b", "4", later(60)), Ok(FirstUse::Yes));
        assert_eq!(
            store.use_now("c", "5", later(60)),
            Err(StoreError::Full {
                store: StoreKind::Replay,
                capacity: 3
            })
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
