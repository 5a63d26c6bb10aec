//! Durable approval tasks: the records behind a `task` remediation, and the stores that keep
//! them across restarts and replicas.
//!
//! A `task` remediation holds a denied `tools/call` until someone approves or refuses it out of
//! band. This module is the half that needs no inner service: a [`TaskRecord`] (the held call,
//! its owner, its status and outcome), the [`TaskStore`] trait with an atomic compare-and-set
//! ([`TaskStore::transition`]), an in-process [`MemoryTaskStore`] and, with the feature
//! `redis`, a shared `RedisTaskStore`; [`Approvals`] to decide tasks from an approval page or a
//! worker in another process; and the [`TaskStart`] hook. The layer holds calls, answers their
//! owners' `tasks/get` and `tasks/cancel`, and runs approved calls (see "Durable approval tasks"
//! in `docs/security.md`).
//!
//! # Threat model
//!
//! - **Records come back.** A record is written by one process and read later by another: after
//!   a restart, by another replica, by an approval worker. Nothing in a record is trusted more
//!   than the store it came from. Every record read is decoded strictly (unknown fields are
//!   refused), must carry the [`SCHEMA_VERSION`] this build understands (an older or newer
//!   record is refused with [`StoreError::UnsupportedSchema`], never half-read), must be
//!   stored under its own id, and must be internally consistent (a `completed` task has a
//!   result, a `working` one has none); anything else is [`StoreError::Corrupt`].
//! - **No credentials at rest.** A record holds who owns the task (issuer, subject, client id)
//!   and what was asked (method, params, protocol version, resource), never the bearer token:
//!   there is no field for it, and [`HeldCall::new`] drops the request's `_meta`,
//!   `inputResponses`, `requestState` and `task`, so client echoes and continuation state are
//!   not stored either. The params do hold the tool's arguments, so the store is as sensitive as
//!   the calls it holds: put Redis on loopback or a private network, behind an ACL user.
//! - **Exactly one executor.** Several replicas may poll, approve and run the same task at the
//!   same moment. The only way to change a stored record is [`TaskStore::transition`], a
//!   compare-and-set applied atomically by the store (under one lock in memory, in one Lua
//!   script in Redis): it applies only if the current status is the expected one. Statuses only
//!   move forward ([`TaskStatus::can_become`]), so a status seen once can never come back, and
//!   of any number of concurrent `Approved -> Executing` attempts exactly one is
//!   [`Transition::Applied`]; that one caller, and only it, runs the held call.
//! - **Expired tasks are never executed.** Every record has a lifetime (`ttl_ms` from
//!   `created_at`). An expired record reads as absent and no transition applies to it, whatever
//!   its status. In Redis the key itself expires at the same instant, and the compare-and-set
//!   checks the deadline against both the server's clock and the caller's, so a replica with a
//!   slow clock cannot revive a task. A claim can also demand time to spare
//!   ([`TaskChange::require_remaining_ms`]), so a call is not started with no time left to
//!   record its result.
//! - **Bounded, on every backend alike.** The memory and Redis stores refuse new tasks when
//!   full ([`StoreError::Full`]) or over their byte budget ([`StoreError::OverBudget`])
//!   rather than evicting pending work, and [`TaskStore::create_within`] refuses an owner
//!   who already has as many tasks waiting as one may ([`StoreError::OwnerQuota`]), counted
//!   without reading any record; the Redis store counts for every replica at once, in the
//!   script that stores the task. [`TaskStore::list`] returns at most [`MAX_LIST`] records.
//!
//! Not covered here: who may read or decide a task. The store returns any record by id; the
//! caller compares [`TaskRecord::owner`] with the principal asking, and answers a stranger
//! exactly as it answers an unknown id. Execution is at most once: a replica that dies after
//! claiming a task (`Executing`) leaves it `working` on the wire until it expires; it is never
//! run a second time.

mod approvals;
mod hook;
mod memory;
mod record;
#[cfg(feature = "redis")]
mod redis;
mod store;
pub(crate) mod wire;

#[cfg(feature = "redis")]
pub use self::redis::RedisTaskStore;
pub use approvals::{Approvals, DecideError};
pub use hook::{StartFuture, StartedTask, TaskStart};
pub use memory::MemoryTaskStore;
pub use record::{
    HeldCall, SCHEMA_VERSION, TaskDecision, TaskError, TaskId, TaskOwner, TaskRecord, TaskStatus,
    now_ms, rfc3339,
};
pub use store::{MAX_LIST, StoreError, StoreFuture, TaskChange, TaskQuery, TaskStore, Transition};
