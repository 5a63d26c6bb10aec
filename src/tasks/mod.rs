//! Durable approval tasks: deciding them, announcing them, and saying them on the wire.
//!
//! A `task` remediation holds a denied `tools/call` until someone approves or refuses it out of
//! band. This module is the half that needs no inner service: [`Approvals`] to decide tasks
//! from an approval page or a worker in another process, the [`TaskStart`] hook, and the wire
//! shapes of the Tasks extension. The records and their stores live in
//! [`store::tasks`](crate::store::tasks) (the threat model is written there), and are
//! re-exported here, where they have always been found: [`TaskRecord`], the [`TaskStore`]
//! trait with its compare-and-set ([`TaskStore::transition`]), [`MemoryTaskStore`] and, with
//! the feature `redis`, `RedisTaskStore`. The layer holds calls, answers their owners'
//! `tasks/get` and `tasks/cancel`, and runs approved calls (see "Durable approval tasks" in
//! `docs/security.md`).

mod approvals;
mod hook;
pub(crate) mod wire;

pub use approvals::{Approvals, DecideError};
pub use hook::{StartFuture, StartedTask, TaskStart};

pub use crate::clock::{now_ms, rfc3339};
#[cfg(feature = "redis")]
pub use crate::store::tasks::RedisTaskStore;
pub use crate::store::tasks::{
    HeldCall, MAX_LIST, MemoryTaskStore, SCHEMA_VERSION, TaskChange, TaskDecision, TaskError,
    TaskFuture, TaskId, TaskOwner, TaskQuery, TaskRecord, TaskStatus, TaskStore, Transition,
};
/// The error and future shared by every store, now found at `mcp_gate::store`.
pub use crate::store::{StoreError, StoreFuture};

// Task notifications (`notifications/tasks` over `subscriptions/listen`).
pub(crate) mod listeners;
mod notifications;
#[cfg(feature = "redis")]
pub use crate::store::tasks::RedisTaskFeed;
pub use crate::store::tasks::{LocalFeed, TaskFeed, TaskListener};
pub use notifications::TaskNotifications;
