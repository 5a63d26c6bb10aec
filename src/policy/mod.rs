//! What the application decides: the `evaluate` seam.
//!
//! After the token is verified and the request classified, the layer calls the application's
//! [`Policy`] with an [`Evaluation`] and acts on the [`Decision`]. The callback runs before
//! the inner service and before any task, on every request it guards, including every retry.
//! A callback that panics, returns an error or runs past its timeout (5 s by default) fails
//! the request with an internal error; it is never taken as an allow.
//!
//! Any `async` closure taking an [`Evaluation`] and returning `Result<Decision, E>` is a
//! policy:
//!
//! ```
//! use mcp_gate::policy::{Decision, Evaluation};
//!
//! let policy = |evaluation: Evaluation| async move {
//!     Ok::<_, std::convert::Infallible>(match evaluation.tool() {
//!         Some("delete_everything") => Decision::unavailable("Deleting everything is never allowed."),
//!         Some("admin_report") if !evaluation.principal().has_scope("mcp:admin") => Decision::scopes(["mcp:admin"]),
//!         _ => Decision::allow(),
//!     })
//! };
//! # fn check<P: mcp_gate::policy::Policy>(_: P) {}
//! # check(policy);
//! ```
//!
//! Which methods are guarded: `tools/call`, `resources/read`, `resources/subscribe`,
//! `resources/unsubscribe`, `prompts/get`, `completion/complete` and the task methods
//! (`tasks/get`, `tasks/update`, `tasks/cancel`, `tasks/result`) on tasks that are not the
//! layer's own. The layer's own approval tasks are answered to their owner only, without
//! `evaluate`; the held call itself is evaluated again before it runs (phase
//! [`Phase::Approval`]). Lifecycle and listing
//! methods (`initialize`, `ping`, `server/discover`, `*/list`, `logging/setLevel`),
//! notifications and responses pass after authentication.

mod answered;
mod decision;
mod details;
mod evaluation;
mod presets;

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::time::Duration;

use futures_util::FutureExt;

pub use answered::{Answered, InputAction, Interaction};
pub use decision::{CredentialReference, Decision, Remediation};
pub use details::authorization_details_cover;
pub use evaluation::{Approval, Evaluation, Phase};
pub use presets::{
    AllOf, AllowAll, Allowlist, DenyAll, FirstMatch, ScopesPerTool, all_of, allow_all, allowlist,
    deny_all, first_match, scopes_per_tool,
};

/// An error a policy may return; the layer turns it into an internal error.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A boxed evaluation future.
pub type EvaluateFuture = Pin<Box<dyn Future<Output = Result<Decision, BoxError>> + Send>>;

/// The application's authorization callback.
///
/// Implemented for every `Fn(Evaluation) -> impl Future<Output = Result<Decision, E>>`, and
/// implementable by hand for a type that holds state.
pub trait Policy: Send + Sync + 'static {
    /// Decides one request.
    fn evaluate(&self, evaluation: Evaluation) -> EvaluateFuture;

    /// Whether this policy lets everything through (like [`allow_all`]). The builder warns
    /// when an open policy guards a resource that is not on loopback.
    fn is_open(&self) -> bool {
        false
    }

    /// Whether this policy reads tool annotations
    /// ([`Evaluation::tool_annotations`](crate::policy::Evaluation::tool_annotations)). When
    /// it does, a process that does not know a called tool's annotations (no `tools/list`
    /// passed through it since it started: a new replica, say) lists the inner server's tools
    /// itself, as the caller, before asking the policy; a tool still unknown then is one the
    /// server does not list. Policies that do not read them cost nothing.
    fn needs_tool_annotations(&self) -> bool {
        false
    }
}

impl Policy for Box<dyn Policy> {
    fn evaluate(&self, evaluation: Evaluation) -> EvaluateFuture {
        (**self).evaluate(evaluation)
    }

    fn is_open(&self) -> bool {
        (**self).is_open()
    }

    fn needs_tool_annotations(&self) -> bool {
        (**self).needs_tool_annotations()
    }
}

impl<F, Fut, E> Policy for F
where
    F: Fn(Evaluation) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Decision, E>> + Send + 'static,
    E: Into<BoxError>,
{
    fn evaluate(&self, evaluation: Evaluation) -> EvaluateFuture {
        let future = self(evaluation);
        Box::pin(async move { future.await.map_err(Into::into) })
    }
}

/// Why a policy produced no decision.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyFailure {
    /// The callback returned an error.
    #[error("the policy returned an error: {0}")]
    Failed(BoxError),
    /// The callback panicked.
    #[error("the policy panicked")]
    Panicked,
    /// The callback ran past its timeout.
    #[error("the policy timed out after {0:?}")]
    TimedOut(Duration),
}

impl PolicyFailure {
    /// A stable name for logs.
    pub fn kind(&self) -> &'static str {
        match self {
            PolicyFailure::Failed(_) => "error",
            PolicyFailure::Panicked => "panic",
            PolicyFailure::TimedOut(_) => "timeout",
        }
    }
}

/// Runs a policy with panic containment and a timeout.
pub(crate) async fn run(
    policy: &dyn Policy,
    evaluation: Evaluation,
    timeout: Duration,
) -> Result<Decision, PolicyFailure> {
    // The call itself happens inside the guarded future, so a panic before the first await is
    // caught too.
    let guarded = AssertUnwindSafe(async move { policy.evaluate(evaluation).await }).catch_unwind();
    let Ok(finished) = crate::deadline::within(timeout, guarded).await else {
        return Err(PolicyFailure::TimedOut(timeout));
    };
    match finished {
        Err(_) => Err(PolicyFailure::Panicked),
        Ok(Err(error)) => Err(PolicyFailure::Failed(error)),
        Ok(Ok(decision)) => Ok(decision),
    }
}
