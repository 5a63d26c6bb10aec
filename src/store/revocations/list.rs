//! [`RevocationList`]: this process's copy of the revocation set, read on every request
//! without a round trip, and how current that copy is.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use super::RevocationEntry;
use crate::auth::{Owner, Principal, Revocation};
use crate::store::{StoreError, StoreKind};

/// When an entry was stored, and until when it lives (milliseconds since the epoch).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp {
    revoked_at_ms: u64,
    until_ms: u64,
}

impl Stamp {
    /// The later of two revocations of the same thing: the latest revocation time (so that a
    /// token issued between two revocations stays refused) and the longest life.
    fn merge(self, other: Self) -> Self {
        Self {
            revoked_at_ms: self.revoked_at_ms.max(other.revoked_at_ms),
            until_ms: self.until_ms.max(other.until_ms),
        }
    }

    fn live(self, now_ms: u64) -> bool {
        now_ms < self.until_ms
    }
}

/// Entries by issuer, then by the name (`jti`, subject or client id) they revoke.
type ByIssuer = HashMap<String, HashMap<String, Stamp>>;

#[derive(Default)]
struct Index {
    hashes: HashMap<[u8; 32], Stamp>,
    jtis: ByIssuer,
    subjects: ByIssuer,
    clients: ByIssuer,
}

impl Index {
    fn len(&self) -> usize {
        let named = |map: &ByIssuer| map.values().map(HashMap::len).sum::<usize>();
        self.hashes.len() + named(&self.jtis) + named(&self.subjects) + named(&self.clients)
    }

    /// Whether `revocation` is already held (a second revocation of it takes no room).
    fn holds(&self, revocation: &Revocation) -> bool {
        match revocation {
            Revocation::TokenHash { sha256, .. } => self.hashes.contains_key(sha256),
            Revocation::Jti { issuer, jti, .. } => named(&self.jtis, issuer, jti).is_some(),
            Revocation::Subject { issuer, subject } => {
                named(&self.subjects, issuer, subject).is_some()
            }
            Revocation::Client { issuer, client_id } => {
                named(&self.clients, issuer, client_id).is_some()
            }
        }
    }

    fn insert(&mut self, entry: &RevocationEntry) {
        let stamp = Stamp {
            revoked_at_ms: entry.revoked_at_ms,
            until_ms: entry.until_ms,
        };
        let slot = match &entry.revocation {
            Revocation::TokenHash { sha256, .. } => self.hashes.entry(*sha256).or_insert(stamp),
            Revocation::Jti { issuer, jti, .. } => name_slot(&mut self.jtis, issuer, jti, stamp),
            Revocation::Subject { issuer, subject } => {
                name_slot(&mut self.subjects, issuer, subject, stamp)
            }
            Revocation::Client { issuer, client_id } => {
                name_slot(&mut self.clients, issuer, client_id, stamp)
            }
        };
        *slot = slot.merge(stamp);
    }

    fn purge(&mut self, now_ms: u64) {
        self.hashes.retain(|_, stamp| stamp.live(now_ms));
        for map in [&mut self.jtis, &mut self.subjects, &mut self.clients] {
            map.retain(|_, names| {
                names.retain(|_, stamp| stamp.live(now_ms));
                !names.is_empty()
            });
        }
    }
}

fn named<'a>(map: &'a ByIssuer, issuer: &str, name: &str) -> Option<&'a Stamp> {
    map.get(issuer)?.get(name)
}

fn name_slot<'a>(map: &'a mut ByIssuer, issuer: &str, name: &str, stamp: Stamp) -> &'a mut Stamp {
    map.entry(issuer.to_owned())
        .or_default()
        .entry(name.to_owned())
        .or_insert(stamp)
}

/// Whether a revocation of everything an owner held at `revoked_at_ms` covers a token (or a
/// state, a task) issued at `issued_at_ms`: issued at or before the revocation. A token's
/// `iat` is whole seconds, taken as the start of its second, so a token issued in the
/// revocation's second is covered. Without an issue time it cannot be placed after the
/// revocation, so it is covered.
fn issued_before(stamp: Stamp, issued_at_ms: Option<u64>) -> bool {
    match issued_at_ms {
        Some(issued) => issued <= stamp.revoked_at_ms,
        None => true,
    }
}

/// How current a [`RevocationList`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FeedState {
    /// The list is the set itself (a memory set): always current.
    InSync,
    /// The feed is connected; its last confirmed sync was at `synced_at_ms`.
    Live {
        /// Milliseconds since the epoch.
        synced_at_ms: u64,
    },
    /// The feed is not connected; the last confirmed sync was at `synced_at_ms` (0: never).
    Down {
        /// Milliseconds since the epoch.
        synced_at_ms: u64,
    },
}

impl FeedState {
    /// `in_sync`, `live` or `down`: for readiness reports and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InSync => "in_sync",
            Self::Live { .. } => "live",
            Self::Down { .. } => "down",
        }
    }

    /// Milliseconds since the last confirmed sync at `now_ms` (0 for a list always in sync;
    /// `u64::MAX` for a feed never synced).
    pub fn staleness_ms(self, now_ms: u64) -> u64 {
        match self {
            Self::InSync => 0,
            Self::Live { synced_at_ms } | Self::Down { synced_at_ms } if synced_at_ms == 0 => {
                u64::MAX
            }
            Self::Live { synced_at_ms } | Self::Down { synced_at_ms } => {
                now_ms.saturating_sub(synced_at_ms)
            }
        }
    }
}

/// This process's copy of the revocation set: every live entry, indexed so that a request's
/// check is a few map lookups under a read lock, and nothing at all while the set is empty.
/// A memory set is its list; a shared set keeps one in each replica, fed by the backend
/// ([`RevocationStore::list`](super::RevocationStore::list)).
///
/// Bounded: [`insert`](Self::insert) refuses a new entry past the capacity (after dropping the
/// expired ones), never forgetting a live one.
pub struct RevocationList {
    index: RwLock<Index>,
    /// Live entries, read before the lock: an empty set costs one atomic load.
    len: AtomicUsize,
    capacity: usize,
    /// Whether a feed fills the list (a shared set) or the list is the set (memory).
    fed: bool,
    live: AtomicBool,
    synced_at_ms: AtomicU64,
}

impl std::fmt::Debug for RevocationList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RevocationList")
            .field("len", &self.len())
            .field("capacity", &self.capacity)
            .field("fed", &self.fed)
            .finish_non_exhaustive()
    }
}

impl RevocationList {
    /// A list that is the whole set (one process), of at most `capacity` entries.
    pub fn new(capacity: usize) -> Self {
        Self::with(capacity, false)
    }

    /// A list a feed fills (a shared set), of at most `capacity` entries: not in sync until
    /// the feed says it is ([`mark_synced`](Self::mark_synced)).
    pub fn fed(capacity: usize) -> Self {
        Self::with(capacity, true)
    }

    fn with(capacity: usize, fed: bool) -> Self {
        Self {
            index: RwLock::new(Index::default()),
            len: AtomicUsize::new(0),
            capacity,
            fed,
            live: AtomicBool::new(false),
            synced_at_ms: AtomicU64::new(0),
        }
    }

    /// The most entries the list holds.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Live entries (and expired ones not yet dropped).
    pub fn len(&self) -> usize {
        self.len.load(Ordering::Acquire)
    }

    /// Whether the list holds no entry.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    // A poisoned lock only means a panic elsewhere mid-update; the maps stay usable, and an
    // entry half-inserted is either there or not: either way no live entry is lost.
    fn read(&self) -> RwLockReadGuard<'_, Index> {
        self.index.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, Index> {
        self.index.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds `entry`, refusing it when the list holds `capacity` live entries and `entry` is
    /// not one of them ([`StoreError::Full`]). Expired entries are dropped first.
    pub fn insert(&self, entry: &RevocationEntry, now_ms: u64) -> Result<(), StoreError> {
        let mut index = self.write();
        index.purge(now_ms);
        if !index.holds(&entry.revocation) && index.len() >= self.capacity {
            self.len.store(index.len(), Ordering::Release);
            return Err(StoreError::Full {
                store: StoreKind::Revocations,
                capacity: self.capacity,
            });
        }
        if entry.until_ms > now_ms {
            index.insert(entry);
        }
        self.len.store(index.len(), Ordering::Release);
        Ok(())
    }

    /// Adds an entry a shared set already accepted (the set counted the bound, for every
    /// replica): never refused here. For a backend's feed.
    pub fn apply(&self, entry: &RevocationEntry, now_ms: u64) {
        let mut index = self.write();
        if entry.until_ms > now_ms {
            index.insert(entry);
        }
        self.len.store(index.len(), Ordering::Release);
    }

    /// Replaces every entry with `entries`: a feed's reload after it (re)connected.
    pub fn replace(&self, entries: &[RevocationEntry], now_ms: u64) {
        let mut fresh = Index::default();
        for entry in entries.iter().filter(|e| e.until_ms > now_ms) {
            fresh.insert(entry);
        }
        let mut index = self.write();
        *index = fresh;
        self.len.store(index.len(), Ordering::Release);
    }

    /// Drops the entries that have expired.
    pub fn purge(&self, now_ms: u64) {
        if self.is_empty() {
            return;
        }
        let mut index = self.write();
        index.purge(now_ms);
        self.len.store(index.len(), Ordering::Release);
    }

    /// Whether a verified token (SHA-256 `sha256`, principal `principal`) is revoked at
    /// `now_ms`: by its hash, its `jti`, its subject or its client (the last two only when
    /// issued at or before the revocation, or of unknown issue time).
    pub fn revokes(&self, sha256: &[u8; 32], principal: &Principal, now_ms: u64) -> bool {
        if self.is_empty() {
            return false;
        }
        let index = self.read();
        let live = |stamp: Option<&Stamp>| stamp.is_some_and(|s| s.live(now_ms));
        if live(index.hashes.get(sha256)) {
            return true;
        }
        let claims = principal.claims();
        let issuer = principal.issuer();
        if let Some(jti) = claims.get("jti").and_then(|v| v.as_str())
            && live(named(&index.jtis, issuer, jti))
        {
            return true;
        }
        let issued_at = claims
            .get("iat")
            .and_then(serde_json::Value::as_u64)
            .map(|iat| iat.saturating_mul(1000));
        Self::owner_covered(
            &index,
            issuer,
            principal.subject(),
            principal.client_id(),
            issued_at,
            now_ms,
        )
    }

    /// Whether what `owner` was given at `issued_at_ms` is revoked (by subject or client):
    /// for what an owner holds without a token at hand, a held task or a continuation state.
    pub fn revokes_owner(&self, owner: &Owner, issued_at_ms: u64, now_ms: u64) -> bool {
        if self.is_empty() {
            return false;
        }
        let index = self.read();
        Self::owner_covered(
            &index,
            &owner.issuer,
            owner.subject.as_deref(),
            owner.client_id.as_deref(),
            Some(issued_at_ms),
            now_ms,
        )
    }

    fn owner_covered(
        index: &Index,
        issuer: &str,
        subject: Option<&str>,
        client_id: Option<&str>,
        issued_at_ms: Option<u64>,
        now_ms: u64,
    ) -> bool {
        let covers = |map: &ByIssuer, name: Option<&str>| {
            name.and_then(|name| named(map, issuer, name))
                .is_some_and(|s| s.live(now_ms) && issued_before(*s, issued_at_ms))
        };
        covers(&index.subjects, subject) || covers(&index.clients, client_id)
    }

    /// The feed's confirmation that the list holds the whole set as of `now_ms`.
    pub fn mark_synced(&self, now_ms: u64) {
        self.synced_at_ms.store(now_ms, Ordering::Release);
        self.live.store(true, Ordering::Release);
    }

    /// The feed lost its connection: the list holds what it had.
    pub fn mark_down(&self) {
        self.live.store(false, Ordering::Release);
    }

    /// How current the list is.
    pub fn state(&self) -> FeedState {
        if !self.fed {
            return FeedState::InSync;
        }
        let synced_at_ms = self.synced_at_ms.load(Ordering::Acquire);
        if self.live.load(Ordering::Acquire) {
            FeedState::Live { synced_at_ms }
        } else {
            FeedState::Down { synced_at_ms }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::token_cache::digest;

    const NOW: u64 = 1_800_000_000_000;

    fn entry(revocation: Revocation, revoked_at_ms: u64, until_ms: u64) -> RevocationEntry {
        RevocationEntry {
            revocation,
            revoked_at_ms,
            until_ms,
        }
    }

    fn principal(iat: Option<u64>) -> Principal {
        let mut claims = serde_json::json!({"jti": "j1"});
        if let Some(iat) = iat {
            claims["iat"] = iat.into();
        }
        Principal::builder()
            .issuer("https://as")
            .subject("alice")
            .client_id("cli")
            .claims(claims)
            .build()
            .unwrap()
    }

    #[test]
    fn each_kind_revokes_until_its_entry_expires() {
        let p = principal(Some(NOW / 1000 - 60));
        let hash = digest("the token");
        for revocation in [
            Revocation::token_hash(hash, None),
            Revocation::jti("https://as", "j1", None),
            Revocation::subject("https://as", "alice"),
            Revocation::client("https://as", "cli"),
        ] {
            let list = RevocationList::new(10);
            assert!(!list.revokes(&hash, &p, NOW));
            list.insert(&entry(revocation.clone(), NOW, NOW + 1000), NOW)
                .unwrap();
            assert!(list.revokes(&hash, &p, NOW + 999), "{revocation:?}");
            assert!(
                !list.revokes(&hash, &p, NOW + 1000),
                "{revocation:?} expired"
            );
            list.purge(NOW + 1000);
            assert!(list.is_empty());
        }
    }

    #[test]
    fn other_issuers_subjects_and_tokens_are_not_revoked() {
        let list = RevocationList::new(10);
        list.insert(
            &entry(
                Revocation::subject("https://other", "alice"),
                NOW,
                NOW + 1000,
            ),
            NOW,
        )
        .unwrap();
        list.insert(
            &entry(Revocation::jti("https://as", "j2", None), NOW, NOW + 1000),
            NOW,
        )
        .unwrap();
        list.insert(
            &entry(Revocation::token("another", None), NOW, NOW + 1000),
            NOW,
        )
        .unwrap();
        assert!(!list.revokes(&digest("mine"), &principal(Some(1)), NOW));
    }

    #[test]
    fn a_token_issued_after_a_subject_revocation_is_accepted_again() {
        let list = RevocationList::new(10);
        list.insert(
            &entry(
                Revocation::subject("https://as", "alice"),
                NOW,
                NOW + 60_000,
            ),
            NOW,
        )
        .unwrap();
        let key = digest("t");
        // Issued in the revocation's second or before: refused; no `iat`: refused.
        assert!(list.revokes(&key, &principal(Some(NOW / 1000)), NOW + 10));
        assert!(list.revokes(&key, &principal(Some(NOW / 1000 - 1)), NOW + 10));
        assert!(list.revokes(&key, &principal(None), NOW + 10));
        // Issued in a later second: a grant given again.
        assert!(!list.revokes(&key, &principal(Some(NOW / 1000 + 1)), NOW + 1010));
        let owner = Owner::new("https://as", Some("alice".into()), None);
        assert!(list.revokes_owner(&owner, NOW, NOW + 5));
        assert!(!list.revokes_owner(&owner, NOW + 1, NOW + 5));
    }

    #[test]
    fn the_list_refuses_when_full_and_makes_room_as_entries_expire() {
        let list = RevocationList::new(2);
        let e = |name: &str, until| entry(Revocation::subject("i", name), NOW, until);
        list.insert(&e("a", NOW + 10), NOW).unwrap();
        list.insert(&e("b", NOW + 1000), NOW).unwrap();
        assert_eq!(
            list.insert(&e("c", NOW + 1000), NOW),
            Err(StoreError::Full {
                store: StoreKind::Revocations,
                capacity: 2
            })
        );
        // The same revocation again takes no room, and keeps the longer life.
        list.insert(&e("b", NOW + 5000), NOW).unwrap();
        assert_eq!(list.len(), 2);
        // Once "a" expired, "c" fits.
        list.insert(&e("c", NOW + 1000), NOW + 10).unwrap();
        assert_eq!(list.len(), 2);
        assert!(list.revokes_owner(&Owner::new("i", Some("b".into()), None), 0, NOW + 4000));
    }

    #[test]
    fn a_fed_list_is_down_until_synced() {
        let list = RevocationList::fed(1);
        assert_eq!(list.state(), FeedState::Down { synced_at_ms: 0 });
        assert_eq!(list.state().staleness_ms(NOW), u64::MAX);
        list.mark_synced(NOW);
        assert_eq!(list.state().staleness_ms(NOW + 250), 250);
        list.mark_down();
        assert_eq!(list.state().as_str(), "down");
        assert_eq!(RevocationList::new(1).state(), FeedState::InSync);
    }
}
