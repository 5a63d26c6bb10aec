//! [`MemorySessionStore`]: session bindings in this process's memory, bounded in total and
//! per owner, idle ones forgotten.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::{SessionFuture, SessionRecord, SessionStore};
use crate::auth::Owner;
use crate::store::{StoreError, StoreKind};

/// The in-process [`SessionStore`]: at most `capacity` sessions, at most `per_owner` of one
/// owner, each forgotten after `idle` without a request. Full means refused, never evicted.
/// Bindings are per process: behind a load balancer, route a legacy session to the replica
/// that opened it (the inner server keeps the session there too).
#[derive(Debug)]
pub struct MemorySessionStore {
    capacity: usize,
    per_owner: usize,
    idle: Duration,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    sessions: HashMap<String, Entry>,
    owners: HashMap<Owner, usize>,
}

#[derive(Debug)]
struct Entry {
    record: SessionRecord,
    last_used: Instant,
}

impl State {
    fn remove(&mut self, session_id: &str) {
        if let Some(entry) = self.sessions.remove(session_id) {
            self.release(&entry.record.owner);
        }
    }

    fn release(&mut self, owner: &Owner) {
        if let Some(count) = self.owners.get_mut(owner) {
            *count -= 1;
            if *count == 0 {
                self.owners.remove(owner);
            }
        }
    }

    /// Forgets every binding idle for longer than `idle`.
    fn expire(&mut self, idle: Duration, now: Instant) {
        let expired: Vec<String> = self
            .sessions
            .iter()
            .filter(|(_, entry)| now.duration_since(entry.last_used) > idle)
            .map(|(id, _)| id.clone())
            .collect();
        for id in expired {
            self.remove(&id);
        }
    }
}

impl MemorySessionStore {
    /// A store of at most `capacity` sessions, `per_owner` of them per owner, each forgotten
    /// after `idle` without a request. Zero bounds refuse every session.
    pub fn new(capacity: usize, per_owner: usize, idle: Duration) -> Self {
        Self {
            capacity,
            per_owner,
            idle,
            state: Mutex::new(State::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding the lock leaves counts that are still consistent (every
        // mutation is one map operation and its count), so the state is used as it is.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn bind_now(&self, session_id: &str, record: SessionRecord) -> Result<(), StoreError> {
        let now = Instant::now();
        let mut state = self.lock();
        if let Some(entry) = state.sessions.get_mut(session_id) {
            if now.duration_since(entry.last_used) <= self.idle {
                if entry.record.owner != record.owner {
                    return Err(StoreError::Taken);
                }
                *entry = Entry {
                    record,
                    last_used: now,
                };
                return Ok(());
            }
            state.remove(session_id);
        }
        let owned = |state: &State| state.owners.get(&record.owner).copied().unwrap_or(0);
        if state.sessions.len() >= self.capacity || owned(&state) >= self.per_owner {
            state.expire(self.idle, now);
        }
        if state.sessions.len() >= self.capacity {
            return Err(StoreError::Full {
                store: StoreKind::Sessions,
                capacity: self.capacity,
            });
        }
        if owned(&state) >= self.per_owner {
            return Err(StoreError::OwnerQuota {
                store: StoreKind::Sessions,
                quota: self.per_owner,
            });
        }
        *state.owners.entry(record.owner.clone()).or_insert(0) += 1;
        state.sessions.insert(
            session_id.to_owned(),
            Entry {
                record,
                last_used: now,
            },
        );
        Ok(())
    }

    fn get_now(&self, session_id: &str) -> Option<SessionRecord> {
        let now = Instant::now();
        let mut state = self.lock();
        let entry = state.sessions.get_mut(session_id)?;
        if now.duration_since(entry.last_used) > self.idle {
            state.remove(session_id);
            return None;
        }
        entry.last_used = now;
        Some(entry.record.clone())
    }

    fn unbind_now(&self, session_id: &str, owner: &Owner) {
        let mut state = self.lock();
        if state
            .sessions
            .get(session_id)
            .is_some_and(|entry| entry.record.owner == *owner)
        {
            state.remove(session_id);
        }
    }

    /// How many sessions are bound now (expired ones included until they are swept).
    pub fn len(&self) -> usize {
        self.lock().sessions.len()
    }

    /// Whether no session is bound.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl SessionStore for MemorySessionStore {
    fn backend(&self) -> &'static str {
        "memory"
    }

    fn bind<'a>(&'a self, session_id: &'a str, record: SessionRecord) -> SessionFuture<'a, ()> {
        Box::pin(std::future::ready(self.bind_now(session_id, record)))
    }

    fn get<'a>(&'a self, session_id: &'a str) -> SessionFuture<'a, Option<SessionRecord>> {
        Box::pin(std::future::ready(Ok(self.get_now(session_id))))
    }

    fn unbind<'a>(&'a self, session_id: &'a str, owner: &'a Owner) -> SessionFuture<'a, ()> {
        self.unbind_now(session_id, owner);
        Box::pin(std::future::ready(Ok(())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(subject: &str) -> Owner {
        Owner::new("iss", Some(subject.into()), Some("client".into()))
    }

    fn bind(store: &MemorySessionStore, id: &str, who: &str) -> Result<(), StoreError> {
        store.bind_now(id, SessionRecord::new(owner(who)))
    }

    #[test]
    fn a_full_store_refuses_and_forgets_no_one() {
        let store = MemorySessionStore::new(3, 2, Duration::from_secs(60));
        bind(&store, "a1", "alice").unwrap();
        bind(&store, "a2", "alice").unwrap();
        assert_eq!(
            bind(&store, "a3", "alice"),
            Err(StoreError::OwnerQuota {
                store: StoreKind::Sessions,
                quota: 2
            })
        );
        bind(&store, "b1", "bob").unwrap();
        assert_eq!(
            bind(&store, "c1", "carol"),
            Err(StoreError::Full {
                store: StoreKind::Sessions,
                capacity: 3
            })
        );
        for id in ["a1", "a2", "b1"] {
            assert!(store.get_now(id).is_some(), "{id} is still bound");
        }
        // Ending a session frees its owner's slot, and only its owner can end it.
        store.unbind_now("a1", &owner("bob"));
        assert!(store.get_now("a1").is_some());
        store.unbind_now("a1", &owner("alice"));
        bind(&store, "c1", "carol").unwrap();
        assert_eq!(store.len(), 3);
    }

    #[test]
    fn an_id_is_bound_to_one_owner() {
        let store = MemorySessionStore::new(10, 10, Duration::from_secs(60));
        bind(&store, "s", "alice").unwrap();
        assert_eq!(bind(&store, "s", "bob"), Err(StoreError::Taken));
        // The same owner again replaces the record and counts once.
        bind(&store, "s", "alice").unwrap();
        assert_eq!(store.lock().owners[&owner("alice")], 1);
    }

    #[test]
    fn idle_bindings_expire_and_free_their_slot() {
        let store = MemorySessionStore::new(1, 1, Duration::from_millis(20));
        bind(&store, "old", "alice").unwrap();
        std::thread::sleep(Duration::from_millis(40));
        assert!(store.get_now("old").is_none());
        bind(&store, "new", "bob").unwrap();
        std::thread::sleep(Duration::from_millis(40));
        // Expired but not yet swept: a new binding sweeps it.
        bind(&store, "newer", "carol").unwrap();
        assert!(store.get_now("new").is_none());
    }
}
