//! What the application decides: the `evaluate` seam.
//!
//! After the token is verified and the request classified, the layer calls the application's
//! [`Policy`] with an [`Evaluation`] and acts on the [`Decision`]. The callback runs before
//! the inner service and before any task, on every request it guards, including every retry.
//! A callback that panics, returns an error or runs past its timeout (5 s by default) fails
//! the request with an internal error; it is never taken as an allow.
//!
//! Any `async` function or closure taking an [`Evaluation`] and returning a [`Decision`] is a
//! policy:
//!
//! ```
//! use mcp_gate::policy::{Decision, Evaluation};
//!
//! let policy = |evaluation: Evaluation| async move {
//!     match evaluation.tool() {
//!         Some("delete_everything") => Decision::unavailable("Deleting everything is never allowed."),
//!         Some("admin_report") if !evaluation.principal().has_scope("mcp:admin") => Decision::scopes(["mcp:admin"]),
//!         _ => Decision::allow(),
//!     }
//! };
//! # fn check<P: mcp_gate::policy::Policy>(_: P) {}
//! # check(policy);
//! ```
//!
//! A policy that can fail returns `Result<Decision, E>` instead, for any error `E` that
//! converts into a [`BoxError`] (every `std::error::Error + Send + Sync + 'static`, `String`,
//! `anyhow::Error`, ...); an `Err` fails the request with an internal error:
//!
//! ```
//! use mcp_gate::policy::{Decision, Evaluation};
//!
//! #[derive(Debug, thiserror::Error)]
//! #[error("the permissions database is unreachable")]
//! struct Unreachable;
//!
//! async fn lookup(subject: Option<&str>) -> Result<bool, Unreachable> {
//!     Ok(subject == Some("alice"))
//! }
//!
//! async fn policy(evaluation: Evaluation) -> Result<Decision, Unreachable> {
//!     Ok(if lookup(evaluation.principal().subject()).await? {
//!         Decision::allow()
//!     } else {
//!         Decision::undisclosed("Not allowed.")
//!     })
//! }
//! # fn check<P: mcp_gate::policy::Policy>(_: P) {}
//! # check(policy);
//! ```
//!
//! Both shapes are [`IntoDecision`]. The [`Evaluation`] and [`Principal`](crate::Principal)
//! builders make a policy testable without a running layer; the [guide](crate::guide) shows a
//! unit test.
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
#[cfg(feature = "cedar")]
#[cfg_attr(docsrs, doc(cfg(feature = "cedar")))]
pub mod cedar;
mod decision;
mod details;
mod evaluation;
mod explanation;
mod presets;
mod run;
mod seen;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

pub use answered::{Answered, InputAction, Interaction};
pub use decision::{CredentialReference, CredentialRemedy, Decision, Remediation, UrlRemedy};
pub use details::authorization_details_cover;
pub use evaluation::{Approval, Evaluation, EvaluationBuilder, EvaluationError, Phase};
pub(crate) use evaluation::{EvaluationData, Protocol};
pub use explanation::Explanation;
pub use presets::{
    AllOf, AllowAll, Allowlist, DenyAll, FirstMatch, ScopesPerTool, all_of, allow_all, allowlist,
    deny_all, first_match, scopes_per_tool,
};
pub(crate) use run::run;
pub(crate) use seen::{ExtensionCopy, client_address, copied, copy_of, snapshot};

/// An error a policy may return; the layer turns it into an internal error.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A boxed evaluation future.
pub type EvaluateFuture = Pin<Box<dyn Future<Output = Result<Decision, BoxError>> + Send>>;

/// What a policy's future may produce: a [`Decision`], or a `Result<Decision, E>` whose error
/// converts into a [`BoxError`].
///
/// Sealed: the two shapes above are the only ones, so that an output is never mistaken for a
/// decision it does not spell out.
///
/// ```
/// use mcp_gate::policy::{Decision, IntoDecision};
///
/// assert_eq!(Decision::allow().into_decision().ok(), Some(Decision::allow()));
/// let failed: Result<Decision, std::io::Error> = Err(std::io::Error::other("down"));
/// assert!(failed.into_decision().is_err());
/// ```
pub trait IntoDecision: sealed::Sealed {
    /// The decision, or the error that fails the request.
    fn into_decision(self) -> Result<Decision, BoxError>;
}

impl IntoDecision for Decision {
    fn into_decision(self) -> Result<Decision, BoxError> {
        Ok(self)
    }
}

impl<E: Into<BoxError>> IntoDecision for Result<Decision, E> {
    fn into_decision(self) -> Result<Decision, BoxError> {
        self.map_err(Into::into)
    }
}

mod sealed {
    use super::Decision;

    /// Keeps [`IntoDecision`](super::IntoDecision) to the shapes this crate names.
    pub trait Sealed {}

    impl Sealed for Decision {}
    impl<E> Sealed for Result<Decision, E> {}
}

/// The application's authorization callback.
///
/// Implemented for every `Fn(Evaluation) -> impl Future<Output = O>` where `O` is a
/// [`Decision`] or a `Result<Decision, E>` ([`IntoDecision`]), and implementable by hand for a
/// type that holds state.
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

    /// The version of what this policy decides from, when it has one: a Cedar set's digest,
    /// say. Readiness reports, audit records and metrics name it, so that an operator can
    /// tell which rules decided. The same rules give the same version on every replica.
    fn version(&self) -> Option<Arc<str>> {
        None
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

    fn version(&self) -> Option<Arc<str>> {
        (**self).version()
    }
}

impl<F, Fut> Policy for F
where
    F: Fn(Evaluation) -> Fut + Send + Sync + 'static,
    Fut: Future + Send + 'static,
    Fut::Output: IntoDecision,
{
    fn evaluate(&self, evaluation: Evaluation) -> EvaluateFuture {
        let future = self(evaluation);
        Box::pin(async move { future.await.into_decision() })
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

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;
    use crate::Principal;

    /// An evaluation of a call to tool `t` (also `run.rs`'s tests').
    pub(super) fn evaluation() -> Evaluation {
        let principal = Principal::builder().issuer("https://as.example").build();
        Evaluation::builder(principal.expect("a principal"))
            .tool("t", Value::Null)
            .build()
            .expect("an evaluation")
    }

    /// A hand-written policy that panics before it returns its future.
    struct PanicsWhenCalled;

    impl Policy for PanicsWhenCalled {
        fn evaluate(&self, _: Evaluation) -> EvaluateFuture {
            panic!("panicked before returning a future")
        }
    }

    #[tokio::test]
    async fn both_output_shapes_and_every_failure() {
        let limit = Duration::from_millis(50);
        let plain = |_: Evaluation| async { Decision::allow() };
        assert_eq!(
            run(&plain, evaluation(), limit).await.ok(),
            Some(Decision::Allow)
        );
        let fallible = |_: Evaluation| async { Ok::<_, std::io::Error>(Decision::allow()) };
        assert_eq!(
            run(&fallible, evaluation(), limit).await.ok(),
            Some(Decision::Allow)
        );

        let failing = |_: Evaluation| async { Err::<Decision, _>("the database is down") };
        let failure = run(&failing, evaluation(), limit).await.err();
        assert!(
            matches!(&failure, Some(PolicyFailure::Failed(e)) if e.to_string() == "the database is down"),
            "{failure:?}"
        );
        let io = |_: Evaluation| async { Err::<Decision, _>(std::io::Error::other("io")) };
        let failure = run(&io, evaluation(), limit).await.err();
        assert_eq!(failure.map(|f| f.kind()), Some("error"));

        let failure = run(&PanicsWhenCalled, evaluation(), limit).await.err();
        assert!(
            matches!(failure, Some(PolicyFailure::Panicked)),
            "{failure:?}"
        );
        let panics_later = |_: Evaluation| async {
            tokio::task::yield_now().await;
            if true {
                panic!("panicked while polled");
            }
            Decision::allow()
        };
        let failure = run(&panics_later, evaluation(), limit).await.err();
        assert!(
            matches!(failure, Some(PolicyFailure::Panicked)),
            "{failure:?}"
        );

        let stalled = |_: Evaluation| std::future::pending::<Decision>();
        let failure = run(&stalled, evaluation(), limit).await.err();
        assert!(
            matches!(failure, Some(PolicyFailure::TimedOut(d)) if d == limit),
            "{failure:?}"
        );
    }

    #[test]
    fn boxed_policies_forward() {
        let boxed: Box<dyn Policy> = Box::new(allow_all());
        assert!(boxed.is_open());
        fn is_policy<P: Policy>(_: &P) {}
        is_policy(&boxed);
    }
}
