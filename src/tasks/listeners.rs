//! The open `subscriptions/listen` streams of this process that asked for task
//! notifications, by owner: each recorded transition goes to the streams of the task's owner
//! that named the task, and to no other.
//!
//! # Threat model
//!
//! - **Another principal's tasks.** Streams are kept under their owner (the (issuer, subject,
//!   client id) triple) and a record is looked up under its own owner: a stream is never even
//!   considered for another owner's task, whatever ids it named.
//! - **One owner holding every stream.** An owner may have at most `per_owner` streams open
//!   in this process, and the process at most `most`; one more is refused (the oldest is
//!   never dropped for it: a stolen token cannot cut its owner's streams), and other owners
//!   are not affected.
//! - **A slow reader.** Each stream has a queue of `queue` records; when it is full the record
//!   is dropped for that stream and counted, and delivery goes on: a slow reader never blocks
//!   the transition that published, nor the other streams.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::mpsc;
use tokio::sync::mpsc::error::TrySendError;

use crate::store::tasks::{TaskId, TaskListener, TaskOwner, TaskRecord};

/// The task-notification streams of this process.
pub(crate) struct Listeners {
    per_owner: usize,
    most: usize,
    queue: usize,
    state: Mutex<State>,
    dropped: AtomicU64,
}

#[derive(Default)]
struct State {
    next: u64,
    live: usize,
    owners: HashMap<TaskOwner, Vec<Slot>>,
}

/// One stream: the tasks it named, where their records go.
struct Slot {
    id: u64,
    tasks: Vec<TaskId>,
    sender: mpsc::Sender<Arc<TaskRecord>>,
    dropped: Arc<AtomicU64>,
}

/// Why a stream was not opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// The owner has this many streams open already.
    Owner(usize),
    /// The process has this many streams open already.
    Full(usize),
}

/// One open stream: its records as they come, what it lost, and its place (given back when
/// dropped).
pub(crate) struct Listening {
    /// The records of the stream's tasks, in the order they were heard.
    pub receiver: mpsc::Receiver<Arc<TaskRecord>>,
    /// Records dropped because the queue was full.
    pub dropped: Arc<AtomicU64>,
    _place: Place,
}

struct Place {
    listeners: Arc<Listeners>,
    owner: TaskOwner,
    id: u64,
}

impl Drop for Place {
    fn drop(&mut self) {
        self.listeners.unregister(&self.owner, self.id);
    }
}

impl Listeners {
    /// At most `per_owner` streams per owner, `most` in all, each with a queue of `queue`.
    pub(crate) fn new(per_owner: usize, most: usize, queue: usize) -> Self {
        Self {
            per_owner,
            most,
            queue,
            state: Mutex::new(State::default()),
            dropped: AtomicU64::new(0),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Opens a stream of `owner`'s records of `tasks`, unless a bound refuses it.
    pub(crate) fn register(
        self: &Arc<Self>,
        owner: TaskOwner,
        tasks: Vec<TaskId>,
    ) -> Result<Listening, Refused> {
        let (sender, receiver) = mpsc::channel(self.queue);
        let dropped = Arc::new(AtomicU64::new(0));
        let mut state = self.state();
        if state.live >= self.most {
            crate::measure::task_notification("listen_refused");
            return Err(Refused::Full(self.most));
        }
        let id = state.next;
        let slots = state.owners.entry(owner.clone()).or_default();
        if slots.len() >= self.per_owner {
            crate::measure::task_notification("listen_refused");
            return Err(Refused::Owner(self.per_owner));
        }
        slots.push(Slot {
            id,
            tasks,
            sender,
            dropped: Arc::clone(&dropped),
        });
        state.next += 1;
        state.live += 1;
        drop(state);
        crate::measure::task_notification("listen_opened");
        Ok(Listening {
            receiver,
            dropped,
            _place: Place {
                listeners: Arc::clone(self),
                owner,
                id,
            },
        })
    }

    fn unregister(&self, owner: &TaskOwner, id: u64) {
        let mut state = self.state();
        let Some(slots) = state.owners.get_mut(owner) else {
            return;
        };
        let before = slots.len();
        slots.retain(|slot| slot.id != id);
        let removed = before - slots.len();
        if slots.is_empty() {
            state.owners.remove(owner);
        }
        state.live -= removed;
    }

    /// Records dropped for slow readers since the process started, all streams together.
    pub(crate) fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Streams open now, and those of `owner`.
    #[cfg(test)]
    fn open(&self, owner: &TaskOwner) -> (usize, usize) {
        let state = self.state();
        (state.live, state.owners.get(owner).map_or(0, Vec::len))
    }
}

impl TaskListener for Listeners {
    fn deliver(&self, record: Arc<TaskRecord>) {
        let state = self.state();
        let Some(slots) = state.owners.get(&record.owner) else {
            return;
        };
        for slot in slots.iter().filter(|slot| slot.tasks.contains(&record.id)) {
            match slot.sender.try_send(Arc::clone(&record)) {
                Ok(()) => crate::measure::task_notification("sent"),
                Err(TrySendError::Full(_)) => {
                    slot.dropped.fetch_add(1, Ordering::Relaxed);
                    self.dropped.fetch_add(1, Ordering::Relaxed);
                    crate::measure::task_notification("dropped");
                }
                // The stream ended; its place is being given back.
                Err(TrySendError::Closed(_)) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;
    use crate::store::tasks::{TaskStatus, sample_record};

    fn record_of(owner: &TaskOwner) -> TaskRecord {
        let mut record = sample_record(Value::Null, "actx_AAAAAAAAAAAAAAAAAAAAAA", 60_000);
        record.owner = owner.clone();
        record
    }

    fn owner(subject: &str) -> TaskOwner {
        TaskOwner::new(
            "https://as.example",
            Some(subject.into()),
            Some("cli".into()),
        )
    }

    #[test]
    fn a_record_reaches_only_its_owners_streams_that_named_it() {
        let listeners = Arc::new(Listeners::new(4, 16, 8));
        let (alice, bob) = (owner("alice"), owner("bob"));
        let task = record_of(&alice);
        let mut named = listeners
            .register(alice.clone(), vec![task.id.clone()])
            .unwrap();
        let mut other = listeners.register(alice.clone(), Vec::new()).unwrap();
        // Bob names Alice's task: he is still never considered for it.
        let mut stranger = listeners
            .register(bob.clone(), vec![task.id.clone()])
            .unwrap();
        listeners.deliver(Arc::new(task.clone()));
        assert_eq!(named.receiver.try_recv().unwrap().id, task.id);
        assert!(other.receiver.try_recv().is_err());
        assert!(stranger.receiver.try_recv().is_err());
        // The same id under Bob's name (a forged record) reaches only Bob's stream.
        let mut forged = task.clone();
        forged.owner = bob;
        listeners.deliver(Arc::new(forged));
        assert!(named.receiver.try_recv().is_err());
        assert!(stranger.receiver.try_recv().is_ok());
    }

    #[test]
    fn owners_and_the_process_are_bounded_and_places_come_back() {
        let listeners = Arc::new(Listeners::new(2, 3, 8));
        let (alice, bob) = (owner("alice"), owner("bob"));
        let first = listeners.register(alice.clone(), Vec::new()).unwrap();
        let _second = listeners.register(alice.clone(), Vec::new()).unwrap();
        assert_eq!(
            listeners.register(alice.clone(), Vec::new()).err(),
            Some(Refused::Owner(2))
        );
        let _bobs = listeners.register(bob.clone(), Vec::new()).unwrap();
        assert_eq!(
            listeners.register(bob.clone(), Vec::new()).err(),
            Some(Refused::Full(3))
        );
        drop(first);
        assert_eq!(listeners.open(&alice), (2, 1));
        assert!(listeners.register(alice, Vec::new()).is_ok());
    }

    #[test]
    fn a_full_queue_drops_and_counts_without_blocking_others() {
        let listeners = Arc::new(Listeners::new(4, 16, 1));
        let alice = owner("alice");
        let mut task = record_of(&alice);
        let mut slow = listeners
            .register(alice.clone(), vec![task.id.clone()])
            .unwrap();
        let mut quick = listeners.register(alice, vec![task.id.clone()]).unwrap();
        listeners.deliver(Arc::new(task.clone()));
        assert!(quick.receiver.try_recv().is_ok());
        task.status = TaskStatus::Approved;
        listeners.deliver(Arc::new(task));
        assert_eq!(
            quick.receiver.try_recv().unwrap().status,
            TaskStatus::Approved
        );
        assert_eq!(slow.dropped.load(Ordering::Relaxed), 1);
        assert_eq!(listeners.dropped(), 1);
        assert_eq!(
            slow.receiver.try_recv().unwrap().status,
            TaskStatus::Working
        );
    }
}
