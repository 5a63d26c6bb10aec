//! Durable approval tasks as a store keeps them: the [`TaskRecord`] (`record.rs`: the held
//! call, its owner, its status and outcome), the [`TaskStore`] trait with its atomic
//! compare-and-set ([`TaskStore::transition`]), the rules every backend shares, and one file
//! per backend: [`MemoryTaskStore`] (`memory.rs`) and, with feature `redis`, `RedisTaskStore`
//! (`redis.rs`, shared by replicas, surviving restarts of the gateway).
//!
//! These types are also re-exported at `mcp_gate::tasks`, beside the decision API
//! (`Approvals`), the start hook and the wire shapes, which need more than a store.
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

use serde_json::Value;

use super::{StoreError, StoreFuture, into_shared};

mod memory;
mod record;
#[cfg(feature = "redis")]
mod redis;

// Task notifications: transitions published as they are recorded.
mod announce;
#[cfg(feature = "redis")]
mod feed;
pub(crate) use announce::Announcing;
pub use announce::{LocalFeed, TaskFeed, TaskListener};
#[cfg(feature = "redis")]
pub use feed::RedisTaskFeed;

pub use memory::MemoryTaskStore;
#[cfg(test)]
pub(crate) use record::sample_record;
pub use record::{
    HeldCall, SCHEMA_VERSION, TaskDecision, TaskError, TaskId, TaskOwner, TaskRecord, TaskStatus,
};
#[cfg(feature = "redis")]
pub use redis::RedisTaskStore;

/// The most records one [`TaskStore::list`] returns.
pub const MAX_LIST: usize = 1000;

/// What every [`TaskStore`] method returns.
pub type TaskFuture<'a, T> = StoreFuture<'a, T>;

/// What [`TaskStore::transition`] did.
#[derive(Clone, Debug, PartialEq)]
#[must_use]
pub enum Transition {
    /// The record had the expected status and was changed; this is the record as stored now.
    /// Exactly one of any number of concurrent identical transitions gets this.
    Applied(TaskRecord),
    /// Nothing changed: the record is missing or expired (`None`), or its status was not the
    /// expected one (`Some`, as it is now).
    Conflict(Option<TaskRecord>),
}

impl Transition {
    /// Whether the transition was applied.
    pub fn is_applied(&self) -> bool {
        matches!(self, Self::Applied(_))
    }
}

/// One [`TaskStore::transition`]: the status the task must have, the status it gets, and what
/// else changes. `last_updated_at` is always set to now.
///
/// ```
/// use mcp_gate::tasks::{TaskChange, TaskDecision, TaskStatus};
///
/// let approve = TaskChange::new(TaskStatus::Working, TaskStatus::Approved)
///     .decision(TaskDecision::Approved { by: "ops".into() });
/// let claim =
///     TaskChange::new(TaskStatus::Approved, TaskStatus::Executing).require_remaining_ms(30_000);
/// # let _ = (approve, claim);
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct TaskChange {
    from: TaskStatus,
    to: TaskStatus,
    decision: Option<TaskDecision>,
    result: Option<Value>,
    error: Option<TaskError>,
    require_remaining_ms: u64,
}

impl TaskChange {
    /// From `from` to `to`, with no other change but `last_updated_at`.
    pub fn new(from: TaskStatus, to: TaskStatus) -> Self {
        Self {
            from,
            to,
            decision: None,
            result: None,
            error: None,
            require_remaining_ms: 0,
        }
    }

    /// Records the decision. A task's decision is recorded once.
    pub fn decision(mut self, decision: TaskDecision) -> Self {
        self.decision = Some(decision);
        self
    }

    /// Sets the final result (for `completed`).
    pub fn result(mut self, result: Value) -> Self {
        self.result = Some(result);
        self
    }

    /// Sets the error (for `failed`).
    pub fn error(mut self, error: TaskError) -> Self {
        self.error = Some(error);
        self
    }

    /// Applies only if the task has at least `ms` milliseconds to live; otherwise the
    /// transition fails with [`StoreError::Expired`]. For the claim before running a call:
    /// a call started with no time left would finish after its task is gone, its result lost.
    pub fn require_remaining_ms(mut self, ms: u64) -> Self {
        self.require_remaining_ms = ms;
        self
    }

    /// The time [`require_remaining_ms`](Self::require_remaining_ms) demands (0: none).
    pub fn required_remaining_ms(&self) -> u64 {
        self.require_remaining_ms
    }

    /// Checks the move against the lifecycle, before the store is touched.
    pub(crate) fn check_move(&self) -> Result<(), StoreError> {
        if self.from.can_become(self.to) {
            Ok(())
        } else {
            Err(StoreError::InvalidTransition {
                from: self.from,
                to: self.to,
            })
        }
    }
}

/// Which live tasks [`TaskStore::list`] returns: by default every one, at most [`MAX_LIST`].
///
/// ```
/// use mcp_gate::tasks::{TaskQuery, TaskStatus};
///
/// let waiting = TaskQuery::new().status(TaskStatus::Working).limit(100);
/// # let _ = waiting;
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TaskQuery<'a> {
    owner: Option<&'a TaskOwner>,
    status: Option<TaskStatus>,
    limit: usize,
}

impl<'a> TaskQuery<'a> {
    /// Every live task, at most [`MAX_LIST`] of them.
    pub fn new() -> Self {
        Self {
            owner: None,
            status: None,
            limit: MAX_LIST,
        }
    }

    /// Only `owner`'s tasks.
    pub fn owner(mut self, owner: &'a TaskOwner) -> Self {
        self.owner = Some(owner);
        self
    }

    /// Only the tasks in `status`.
    pub fn status(mut self, status: TaskStatus) -> Self {
        self.status = Some(status);
        self
    }

    /// At most `limit` tasks (and never more than [`MAX_LIST`]).
    pub fn limit(mut self, limit: usize) -> Self {
        self.limit = limit;
        self
    }

    /// Whether `record` is one of the owner's (if one is named) in the status (if one is named).
    /// Expiry is the store's to judge.
    pub(crate) fn matches(&self, record: &TaskRecord) -> bool {
        self.owner.is_none_or(|owner| record.owner == *owner)
            && self.status.is_none_or(|status| record.status == status)
    }

    /// How many records to return at most.
    pub(crate) fn most(&self) -> usize {
        self.limit.min(MAX_LIST)
    }
}

impl Default for TaskQuery<'_> {
    fn default() -> Self {
        Self::new()
    }
}

/// Where durable tasks live. Object safe: hold one as `Arc<dyn TaskStore>`.
///
/// Every store gives the same guarantees, checked by one conformance suite
/// (`tests/suite/task_store_redis.rs`):
/// - a created record can be read back at once, by this and (for shared stores) every other
///   instance;
/// - an expired record is never returned and never transitioned;
/// - [`transition`](Self::transition) is an atomic compare-and-set on the status: of any number
///   of concurrent calls with the same `from`, at most one is applied.
pub trait TaskStore: Send + Sync + 'static {
    /// Stores a new `working` task. Fails with [`StoreError::Duplicate`] if its id is stored
    /// (and not expired), [`StoreError::Expired`] if it is already expired,
    /// [`StoreError::InvalidRecord`] if it is not a valid new record.
    fn create(&self, record: TaskRecord) -> TaskFuture<'_, ()>;

    /// [`create`](Self::create), unless the record's owner already has `quota` live tasks
    /// waiting for approval (`working`): then [`StoreError::OwnerQuota`], and nothing is
    /// stored. [`MemoryTaskStore`] and `RedisTaskStore` count and
    /// store in one atomic step, from a count of the owner's waiting tasks kept beside the
    /// records (no record is read). This default counts with [`list`](Self::list) first:
    /// it copies the owner's waiting records, and creates of one owner racing each other
    /// can pass it together. A store of your own should implement it.
    fn create_within(&self, record: TaskRecord, quota: usize) -> TaskFuture<'_, ()> {
        Box::pin(async move {
            let waiting = {
                let query = TaskQuery::new()
                    .owner(&record.owner)
                    .status(TaskStatus::Working)
                    .limit(quota);
                self.list(query).await?.len()
            };
            if waiting >= quota {
                return Err(StoreError::OwnerQuota {
                    store: super::StoreKind::Tasks,
                    quota,
                });
            }
            self.create(record).await
        })
    }

    /// The task, or `None` if it is unknown or expired.
    fn get<'a>(&'a self, id: &'a TaskId) -> TaskFuture<'a, Option<TaskRecord>>;

    /// Applies `change` to the task, moving it from the change's `from` status to its `to`, if
    /// and only if it is stored, not expired, and its status is `from`, all checked and
    /// written in one atomic step. A move the lifecycle forbids is
    /// [`StoreError::InvalidTransition`], before the store is touched; a change that would
    /// leave an invalid record (say `completed` without a result) is
    /// [`StoreError::InvalidRecord`].
    fn transition<'a>(&'a self, id: &'a TaskId, change: TaskChange) -> TaskFuture<'a, Transition>;

    /// The live tasks `query` asks for, those expiring soonest first. Meant for an approval
    /// page; a snapshot, not a consistent read.
    fn list<'a>(&'a self, query: TaskQuery<'a>) -> TaskFuture<'a, Vec<TaskRecord>>;

    /// What backs the store, for start-up lines and readiness reports: `memory`, `redis`,
    /// or `custom` (this default) for a store of the application's own.
    fn backend(&self) -> &'static str {
        "custom"
    }

    /// Whether the store answers now, for a readiness report
    /// ([`Gate::readiness`](crate::Gate::readiness)): a memory store always does, a shared
    /// one sends one round trip. This default answers yes; a store of your own that can be
    /// unreachable should say so.
    fn reachable(&self) -> StoreFuture<'_, ()> {
        Box::pin(std::future::ready(Ok(())))
    }
}

/// Checks a record offered to [`TaskStore::create`] at `now`.
pub(crate) fn check_new(record: &TaskRecord, now: u64) -> Result<(), StoreError> {
    if record.status != TaskStatus::Working {
        return Err(StoreError::InvalidRecord("a new task must be working"));
    }
    record.check().map_err(StoreError::InvalidRecord)?;
    if record.is_expired_at(now) {
        return Err(StoreError::Expired(record.id.clone()));
    }
    Ok(())
}

/// What a transition does to `current` (the stored record, if any) at `now`.
pub(crate) enum Plan {
    /// Do nothing, answer this.
    Conflict(Option<TaskRecord>),
    /// Write this record in place of the current one.
    Write(TaskRecord),
}

/// The shared transition rule. The caller must write the planned record only if the stored
/// record is still exactly `current`.
pub(crate) fn plan(
    current: Option<TaskRecord>,
    change: &TaskChange,
    now: u64,
) -> Result<Plan, StoreError> {
    let Some(current) = current.filter(|r| !r.is_expired_at(now)) else {
        return Ok(Plan::Conflict(None));
    };
    if current.status != change.from {
        return Ok(Plan::Conflict(Some(current)));
    }
    if current.remaining_ms(now) < change.require_remaining_ms {
        return Err(StoreError::Expired(current.id));
    }
    let mut next = current;
    if let Some(decision) = &change.decision {
        if next.decision.is_some() {
            return Err(StoreError::InvalidRecord(
                "the task's decision is already recorded",
            ));
        }
        next.decision = Some(decision.clone());
    }
    if let Some(result) = &change.result {
        next.result = Some(result.clone());
    }
    if let Some(error) = &change.error {
        next.error = Some(error.clone());
    }
    next.status = change.to;
    next.last_updated_at = next.last_updated_at.max(now);
    next.check().map_err(StoreError::InvalidRecord)?;
    Ok(Plan::Write(next))
}

into_shared!(TaskStore);
