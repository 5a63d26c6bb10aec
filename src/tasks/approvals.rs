//! [`Approvals`]: deciding held calls, from an approval page or a worker in another process.

use std::sync::Arc;

use super::wire;
use crate::denial::Revision;
use crate::store::StoreError;
use crate::store::tasks::{
    TaskChange, TaskDecision, TaskId, TaskQuery, TaskRecord, TaskStatus, TaskStore, Transition,
};

/// Why a decision was not recorded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecideError {
    /// No such task: the id is malformed, was never stored, or has expired.
    #[error("no task {0} is waiting for a decision (unknown or expired)")]
    UnknownTask(String),
    /// The task is no longer waiting: decided, cancelled or finished.
    #[error("task {id} is {status} and no longer waits for a decision")]
    AlreadyDecided {
        /// The task.
        id: TaskId,
        /// Where it stands now.
        status: TaskStatus,
    },
    /// The store failed; nothing is known to have changed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Approves or refuses held calls in a [`TaskStore`].
///
/// Get one from [`Gate::tasks`](crate::Gate::tasks), or build one over the same store in
/// another process (an approval service, a ticket worker): replicas and workers that share a
/// store share every task. A decision is a compare-and-set on the task's status, so of two
/// approvers deciding the same task at the same moment exactly one wins; the other gets
/// [`DecideError::AlreadyDecided`].
///
/// Approving does not run the call: the owner's next `tasks/get`, on whichever replica serves
/// it, evaluates the call again (phase [`Approval`](crate::policy::Phase::Approval)) and runs
/// it once if the policy allows.
///
/// ```
/// use std::sync::Arc;
/// use mcp_gate::tasks::{Approvals, DecideError, MemoryTaskStore};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let approvals = Approvals::new(Arc::new(MemoryTaskStore::default()));
/// assert!(approvals.pending(10).await.unwrap().is_empty());
/// assert!(matches!(
///     approvals.approve("tsk_AAAAAAAAAAAAAAAAAAAAAA", "ops").await,
///     Err(DecideError::UnknownTask(_))
/// ));
/// # }
/// ```
#[derive(Clone)]
pub struct Approvals {
    store: Arc<dyn TaskStore>,
    revision: Revision,
}

impl std::fmt::Debug for Approvals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Approvals")
            .field("revision", &self.revision)
            .finish_non_exhaustive()
    }
}

impl Approvals {
    /// Decisions on the tasks in `store`, with refusals rendered in the `current` revision.
    pub fn new(store: Arc<dyn TaskStore>) -> Self {
        Self {
            store,
            revision: Revision::current(),
        }
    }

    /// Renders refusals in `revision`: use the revision the gateways serving the owners pin.
    pub fn with_revision(mut self, revision: Revision) -> Self {
        self.revision = revision;
        self
    }

    /// The store decisions are written to.
    pub fn store(&self) -> &Arc<dyn TaskStore> {
        &self.store
    }

    /// Approves a waiting task; `approver` is kept in the record. The call runs when its owner
    /// next polls, if the policy, asked again, allows it.
    pub async fn approve(
        &self,
        id: &str,
        approver: impl Into<String>,
    ) -> Result<TaskRecord, DecideError> {
        let by = approver.into();
        let change = TaskChange::new(TaskStatus::Working, TaskStatus::Approved)
            .decision(TaskDecision::Approved { by });
        self.decide(id, change).await
    }

    /// Refuses a waiting task: it completes at once with a `CallToolResult` (`isError`)
    /// carrying `reason` and the envelope with `unavailable` and the task's context id. The
    /// reason is shown to the caller.
    pub async fn refuse(
        &self,
        id: &str,
        reason: impl Into<String>,
    ) -> Result<TaskRecord, DecideError> {
        let reason = reason.into();
        let record = self.waiting(id).await?;
        let message = format!("The approver refused this request: {reason}");
        let change = TaskChange::new(TaskStatus::Working, TaskStatus::Completed)
            .decision(TaskDecision::Refused { reason })
            .result(wire::refusal(&record.context_id, &message, self.revision));
        self.decide(id, change).await
    }

    /// Tasks waiting for a decision, those expiring soonest first (at most `limit`, and never
    /// more than [`MAX_LIST`](super::MAX_LIST)).
    pub async fn pending(&self, limit: usize) -> Result<Vec<TaskRecord>, StoreError> {
        let waiting = TaskQuery::new().status(TaskStatus::Working).limit(limit);
        self.store.list(waiting).await
    }

    /// One task, whatever its status; `None` if unknown, malformed or expired.
    pub async fn get(&self, id: &str) -> Result<Option<TaskRecord>, StoreError> {
        match TaskId::parse(id) {
            Some(id) => self.store.get(&id).await,
            None => Ok(None),
        }
    }

    async fn waiting(&self, id: &str) -> Result<TaskRecord, DecideError> {
        let unknown = || DecideError::UnknownTask(id.to_owned());
        let task_id = TaskId::parse(id).ok_or_else(unknown)?;
        let record = self.store.get(&task_id).await?.ok_or_else(unknown)?;
        if record.status != TaskStatus::Working {
            return Err(DecideError::AlreadyDecided {
                id: record.id,
                status: record.status,
            });
        }
        Ok(record)
    }

    /// Applies `change`, a move from `working`, to the task `id`.
    async fn decide(&self, id: &str, change: TaskChange) -> Result<TaskRecord, DecideError> {
        let task_id = TaskId::parse(id).ok_or_else(|| DecideError::UnknownTask(id.to_owned()))?;
        match self.store.transition(&task_id, change).await? {
            Transition::Applied(record) => {
                tracing::info!(target: "mcp_gate::tasks", task_id = %record.id, context_id = %record.context_id, status = %record.status, "task decided");
                Ok(record)
            }
            Transition::Conflict(Some(record)) => Err(DecideError::AlreadyDecided {
                id: record.id,
                status: record.status,
            }),
            Transition::Conflict(None) => Err(DecideError::UnknownTask(id.to_owned())),
        }
    }
}
