//! [`TaskNotifications`]: the builder's option that turns on `notifications/tasks` for the
//! layer's held tasks (`docs/tasks.md`, "Task notifications").

use std::sync::Arc;

use crate::store::tasks::{LocalFeed, TaskFeed};

/// Task notifications over `subscriptions/listen`: how transitions reach every replica (the
/// [`TaskFeed`]) and the bounds on the streams. Give it to
/// [`GateBuilder::task_notifications`](crate::GateBuilder::task_notifications).
///
/// ```
/// use mcp_gate::tasks::TaskNotifications;
///
/// // One process, memory task store.
/// let notifications = TaskNotifications::in_process().listens_per_owner(4).queue(32);
/// # let _ = notifications;
/// ```
#[derive(Clone)]
pub struct TaskNotifications {
    pub(crate) feed: Arc<dyn TaskFeed>,
    pub(crate) per_owner: usize,
    pub(crate) most: usize,
    pub(crate) queue: usize,
}

impl std::fmt::Debug for TaskNotifications {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskNotifications")
            .field("feed", &self.feed.backend())
            .field("per_owner", &self.per_owner)
            .field("most", &self.most)
            .field("queue", &self.queue)
            .finish()
    }
}

impl TaskNotifications {
    /// Listens an owner may have open at once in one process, by default.
    pub const DEFAULT_PER_OWNER: usize = 8;
    /// Listens one process keeps open at once, by default.
    pub const DEFAULT_MOST: usize = 10_000;
    /// Notifications waiting for one slow stream, by default.
    pub const DEFAULT_QUEUE: usize = 64;

    /// Transitions told within this process only: right with the memory task store.
    pub fn in_process() -> Self {
        Self::through(Arc::new(LocalFeed::new()))
    }

    /// Transitions told through `feed`: with a shared task store, a feed every replica
    /// shares (`RedisTaskFeed`, feature `redis`).
    pub fn through(feed: Arc<dyn TaskFeed>) -> Self {
        Self {
            feed,
            per_owner: Self::DEFAULT_PER_OWNER,
            most: Self::DEFAULT_MOST,
            queue: Self::DEFAULT_QUEUE,
        }
    }

    /// At most `listens` task listens per owner open in one process (at least 1); one more
    /// is refused (429), the open ones are kept.
    pub fn listens_per_owner(mut self, listens: usize) -> Self {
        self.per_owner = listens;
        self
    }

    /// At most `listens` task listens open in one process, all owners together.
    pub fn most_listens(mut self, listens: usize) -> Self {
        self.most = listens;
        self
    }

    /// At most `notifications` waiting for one stream (at least 1); a stream whose reader is
    /// slower loses the newest, counted.
    pub fn queue(mut self, notifications: usize) -> Self {
        self.queue = notifications;
        self
    }
}
