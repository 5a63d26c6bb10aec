//! [`MemoryRevocations`]: the revocation set of one process.

use super::{DEFAULT_CAPACITY, RevocationEntry, RevocationList, RevocationStore};
use crate::store::StoreFuture;

/// A revocation set in this process's memory: its list is the set, always in sync. It
/// protects one process only; replicas need a shared set (`RedisRevocations`, feature
/// `redis`). Bounded: at `capacity` live entries a new revocation is refused.
#[derive(Debug)]
pub struct MemoryRevocations {
    list: RevocationList,
}

impl MemoryRevocations {
    /// A set of at most `capacity` live revocations.
    pub fn new(capacity: usize) -> Self {
        Self {
            list: RevocationList::new(capacity),
        }
    }
}

impl Default for MemoryRevocations {
    /// A set of [`DEFAULT_CAPACITY`] live revocations.
    fn default() -> Self {
        Self::new(DEFAULT_CAPACITY)
    }
}

impl RevocationStore for MemoryRevocations {
    fn revoke<'a>(&'a self, entry: &'a RevocationEntry) -> StoreFuture<'a, ()> {
        let stored = self.list.insert(entry, crate::clock::now_ms());
        Box::pin(std::future::ready(stored))
    }

    fn list(&self) -> &RevocationList {
        &self.list
    }

    fn backend(&self) -> &'static str {
        "memory"
    }
}
