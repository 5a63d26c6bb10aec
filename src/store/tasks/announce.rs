//! Task transitions told as they are recorded: a [`TaskFeed`] carries each record a
//! transition wrote to the [`TaskListener`] of every process (the in-process [`LocalFeed`], or
//! with feature `redis` the `RedisTaskFeed` through Redis pub/sub), and [`Announcing`] is the
//! task store that publishes every transition it applies.
//!
//! # Threat model
//!
//! - **A record crosses processes.** A record published by another replica is decoded as
//!   strictly as one read from the store (`TaskRecord::from_json`); whoever receives it still
//!   compares its owner with the listener's before telling anyone.
//! - **Publishing never waits.** [`TaskFeed::publish`] must not block or await: it is called on
//!   the transition's own path (an owner's poll, an approval). A feed that cannot keep up
//!   drops, and counts what it dropped; the store stays the truth (`tasks/get`).

use std::sync::{Arc, OnceLock};

use super::{TaskChange, TaskFuture, TaskId, TaskQuery, TaskRecord, TaskStore, Transition};
use crate::store::StoreFuture;

/// Who is told, in this process, of each recorded transition.
pub trait TaskListener: Send + Sync + 'static {
    /// A transition was recorded: `record` is the task as stored after it. Must not block.
    fn deliver(&self, record: Arc<TaskRecord>);
}

/// How recorded transitions reach every process serving the tasks.
pub trait TaskFeed: Send + Sync + 'static {
    /// Publishes `record` (just written by a transition) to the listener of every process,
    /// this one included. Must not block or await.
    fn publish(&self, record: &TaskRecord);

    /// Where this process's copy of every published record goes. Set once; later calls are
    /// ignored.
    fn deliver_to(&self, listener: Arc<dyn TaskListener>);

    /// What carries the feed, for start-up lines: `memory` or `redis`.
    fn backend(&self) -> &'static str;
}

/// The feed of one process: a published record goes straight to this process's listener.
/// Right for the memory task store (no other process sees its tasks).
#[derive(Default)]
pub struct LocalFeed {
    listener: OnceLock<Arc<dyn TaskListener>>,
}

impl LocalFeed {
    /// A feed with no listener yet.
    pub fn new() -> Self {
        Self::default()
    }
}

impl TaskFeed for LocalFeed {
    fn publish(&self, record: &TaskRecord) {
        if let Some(listener) = self.listener.get() {
            listener.deliver(Arc::new(record.clone()));
        }
    }

    fn deliver_to(&self, listener: Arc<dyn TaskListener>) {
        let _ = self.listener.set(listener);
    }

    fn backend(&self) -> &'static str {
        "memory"
    }
}

/// A task store that publishes every transition it applies to a [`TaskFeed`]. Everything
/// else is the wrapped store's.
pub(crate) struct Announcing {
    store: Arc<dyn TaskStore>,
    feed: Arc<dyn TaskFeed>,
}

impl Announcing {
    /// `store`, publishing its applied transitions to `feed`.
    pub(crate) fn new(store: Arc<dyn TaskStore>, feed: Arc<dyn TaskFeed>) -> Self {
        Self { store, feed }
    }
}

impl TaskStore for Announcing {
    fn create(&self, record: TaskRecord) -> TaskFuture<'_, ()> {
        self.store.create(record)
    }

    fn create_within(&self, record: TaskRecord, quota: usize) -> TaskFuture<'_, ()> {
        self.store.create_within(record, quota)
    }

    fn get<'a>(&'a self, id: &'a TaskId) -> TaskFuture<'a, Option<TaskRecord>> {
        self.store.get(id)
    }

    fn transition<'a>(&'a self, id: &'a TaskId, change: TaskChange) -> TaskFuture<'a, Transition> {
        Box::pin(async move {
            let done = self.store.transition(id, change).await?;
            if let Transition::Applied(record) = &done {
                self.feed.publish(record);
            }
            Ok(done)
        })
    }

    fn list<'a>(&'a self, query: TaskQuery<'a>) -> TaskFuture<'a, Vec<TaskRecord>> {
        self.store.list(query)
    }

    fn backend(&self) -> &'static str {
        self.store.backend()
    }

    fn reachable(&self) -> StoreFuture<'_, ()> {
        self.store.reachable()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use serde_json::Value;

    use super::*;
    use crate::store::tasks::{MemoryTaskStore, TaskStatus, sample_record};

    #[derive(Default)]
    struct Heard(Mutex<Vec<TaskStatus>>);

    impl TaskListener for Heard {
        fn deliver(&self, record: Arc<TaskRecord>) {
            self.0.lock().unwrap().push(record.status);
        }
    }

    #[tokio::test]
    async fn every_applied_transition_is_published_once_and_conflicts_never() {
        let feed = Arc::new(LocalFeed::new());
        let heard = Arc::new(Heard::default());
        feed.deliver_to(heard.clone());
        let store = Announcing::new(Arc::new(MemoryTaskStore::new(10)), feed);
        let record = sample_record(Value::Null, "actx_AAAAAAAAAAAAAAAAAAAAAA", 60_000);
        let id = record.id.clone();
        store.create(record).await.unwrap();
        let approve = TaskChange::new(TaskStatus::Working, TaskStatus::Approved)
            .decision(crate::store::tasks::TaskDecision::Approved { by: "ops".into() });
        assert!(
            store
                .transition(&id, approve.clone())
                .await
                .unwrap()
                .is_applied()
        );
        assert!(!store.transition(&id, approve).await.unwrap().is_applied());
        let cancel = TaskChange::new(TaskStatus::Approved, TaskStatus::Cancelled);
        assert!(store.transition(&id, cancel).await.unwrap().is_applied());
        assert_eq!(
            *heard.0.lock().unwrap(),
            [TaskStatus::Approved, TaskStatus::Cancelled]
        );
    }
}
