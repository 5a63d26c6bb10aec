//! Asking a policy, contained: a panic becomes [`PolicyFailure::Panicked`], an answer still
//! pending after the timeout becomes [`PolicyFailure::TimedOut`], never an unwinding layer or a
//! stuck request.
//!
//! Written as one small future rather than nested `async fn`s: the judge asks a policy once per
//! call and once per listed entry, and every layer of `async fn` would store its arguments
//! again and be copied whole wherever it is awaited. It holds the policy, the question or the
//! boxed answer, and a timer armed only when the answer is not ready at its first poll (as
//! [`crate::deadline::within`] arms one): at most 64 bytes, where the nested form took 368.

use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use super::{Decision, EvaluateFuture, Evaluation, Policy, PolicyFailure};

/// Asks `policy` about `evaluation`, limited to `timeout` once its answer is not ready at once.
/// The policy is called on the first poll, under the panic guard, so a policy that panics
/// before it returns its future is caught too.
pub(crate) fn run(policy: &dyn Policy, evaluation: Evaluation, timeout: Duration) -> Run<'_> {
    Run {
        policy,
        timeout,
        state: State::Unasked(evaluation),
    }
}

/// The future of [`run`].
pub(crate) struct Run<'p> {
    policy: &'p dyn Policy,
    timeout: Duration,
    state: State,
}

/// Where a [`Run`] is.
enum State {
    /// The policy has not been called yet.
    Unasked(Evaluation),
    /// The policy was called: its answer, and the timer once one is armed.
    Asked {
        answer: EvaluateFuture,
        timer: Option<Pin<Box<tokio::time::Sleep>>>,
    },
    /// The outcome was given; what the policy started is dropped.
    Done,
}

impl Future for Run<'_> {
    type Output = Result<Decision, PolicyFailure>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let policy = this.policy;
        this.state = match std::mem::replace(&mut this.state, State::Done) {
            State::Unasked(evaluation) => {
                match catch_unwind(AssertUnwindSafe(|| policy.evaluate(evaluation))) {
                    Ok(answer) => State::Asked {
                        answer,
                        timer: None,
                    },
                    Err(_panic) => return Poll::Ready(Err(PolicyFailure::Panicked)),
                }
            }
            asked_or_done => asked_or_done,
        };
        let State::Asked { answer, timer } = &mut this.state else {
            // Polled after its outcome: nothing is allowed on it.
            return Poll::Ready(Err(PolicyFailure::Panicked));
        };
        let outcome = match catch_unwind(AssertUnwindSafe(|| answer.as_mut().poll(cx))) {
            Err(_panic) => Err(PolicyFailure::Panicked),
            Ok(Poll::Ready(Ok(decision))) => Ok(decision),
            Ok(Poll::Ready(Err(error))) => Err(PolicyFailure::Failed(error)),
            Ok(Poll::Pending) => {
                let timeout = this.timeout;
                let timer = timer.get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
                if timer.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                Err(PolicyFailure::TimedOut(timeout))
            }
        };
        this.state = State::Done;
        Poll::Ready(outcome)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Instant;

    use super::super::tests::evaluation;
    use super::*;

    /// Sets its flag when dropped.
    struct Dropped(Arc<AtomicBool>);

    impl Drop for Dropped {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    #[tokio::test]
    async fn a_late_answer_within_the_limit_counts_and_a_stalled_one_is_dropped_at_it() {
        let late = |_: Evaluation| async {
            tokio::time::sleep(Duration::from_millis(20)).await;
            Decision::allow()
        };
        let answer = run(&late, evaluation(), Duration::from_secs(30)).await;
        assert!(matches!(answer, Ok(Decision::Allow)), "{answer:?}");

        let dropped = Arc::new(AtomicBool::new(false));
        let flag = dropped.clone();
        let stalled = move |_: Evaluation| {
            let held = Dropped(flag.clone());
            async move {
                let _held = held;
                std::future::pending::<Decision>().await
            }
        };
        let limit = Duration::from_millis(40);
        let started = Instant::now();
        let answer = run(&stalled, evaluation(), limit).await;
        assert!(
            matches!(answer, Err(PolicyFailure::TimedOut(d)) if d == limit),
            "{answer:?}"
        );
        assert!(started.elapsed() >= limit, "not before the limit");
        assert!(
            dropped.load(Ordering::SeqCst),
            "the stalled answer is dropped"
        );
    }

    /// The size this module's comment states, kept: it is copied wherever a judgement is
    /// awaited.
    #[test]
    fn the_future_stays_small() {
        assert!(std::mem::size_of::<Run<'static>>() <= 64);
    }
}
