//! The `start` hook: the application's chance to tell an approver that a call is waiting.

use std::future::Future;
use std::pin::Pin;

use crate::policy::BoxError;
use crate::store::tasks::{HeldCall, TaskId, TaskOwner};

/// A boxed start-hook future.
pub type StartFuture = Pin<Box<dyn Future<Output = Result<(), BoxError>> + Send>>;

/// What the start hook is told about a task the layer has just stored.
///
/// The task is `working` and readable in the store; nothing has run. The owner has not been
/// answered yet: if the hook fails, the task is marked failed and the owner gets an internal
/// error instead of a task.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct StartedTask {
    /// The new task's id, for an approval link or a ticket.
    pub id: TaskId,
    /// Who made the held call.
    pub owner: TaskOwner,
    /// The call waiting for a decision: tool name and arguments are in `call.params`.
    pub call: HeldCall,
    /// The policy's message for the denial that created the task.
    pub message: String,
    /// When the task expires (ms since the Unix epoch): a decision after that is too late.
    pub expires_at: u64,
}

/// Called once for each task the layer creates, before the owner is answered.
///
/// Implemented for every `Fn(StartedTask) -> impl Future<Output = Result<(), E>>`. Like
/// `evaluate`, a hook that panics, fails or runs past the evaluate timeout fails the call
/// closed.
///
/// ```
/// use mcp_gate::tasks::StartedTask;
///
/// let notify = |task: StartedTask| async move {
///     println!("approval needed for {} (task {})", task.call.params["name"], task.id);
///     Ok::<_, std::convert::Infallible>(())
/// };
/// # fn check<H: mcp_gate::tasks::TaskStart>(_: H) {}
/// # check(notify);
/// ```
pub trait TaskStart: Send + Sync + 'static {
    /// Starts the approval of `task` (notify someone, open a ticket, ...).
    fn start(&self, task: StartedTask) -> StartFuture;
}

impl<F, Fut, E> TaskStart for F
where
    F: Fn(StartedTask) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), E>> + Send + 'static,
    E: Into<BoxError>,
{
    fn start(&self, task: StartedTask) -> StartFuture {
        let future = self(task);
        Box::pin(async move { future.await.map_err(Into::into) })
    }
}
