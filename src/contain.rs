//! Containment of application callbacks: a panic or an overrun becomes a value, never an
//! unwinding layer or a stuck request.
//!
//! The layer runs two kinds of application code on the request path: the `evaluate` policy and
//! the task start hook. The hook goes through [`contained`]; the policy, asked once per call
//! and once per listed entry, through a small future of its own with the same rules
//! (`policy/run.rs`). Both are limited the same lazy way (the timer of
//! [`deadline`](crate::deadline) is armed only for a future that is not ready on its first
//! poll) and both catch panics the same way.

use std::fmt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::time::Duration;

use futures_util::FutureExt;

/// Why a contained future produced no output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Contained {
    /// The future panicked (while being created inside it, or while polled).
    Panicked,
    /// The future was still pending after the limit, which it carries.
    TimedOut(Duration),
}

impl fmt::Display for Contained {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Contained::Panicked => f.write_str("panicked"),
            Contained::TimedOut(limit) => write!(f, "timed out after {limit:?}"),
        }
    }
}

/// Runs `future` to completion unless it panics or is still pending after `limit`.
///
/// Put the call to the application inside the future (`async move { hook.start(task).await }`,
/// not `hook.start(task)`): the call then happens on the first poll, under the panic guard, so
/// a callback that panics before returning its future is caught too.
///
/// The future is dropped when the limit passes; nothing it started on its own keeps the request
/// waiting.
pub(crate) async fn contained<F: Future>(
    limit: Duration,
    future: F,
) -> Result<F::Output, Contained> {
    let guarded = AssertUnwindSafe(future).catch_unwind();
    match crate::deadline::within(limit, guarded).await {
        Err(_) => Err(Contained::TimedOut(limit)),
        Ok(Err(_panic)) => Err(Contained::Panicked),
        Ok(Ok(output)) => Ok(output),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn boom() -> std::future::Ready<u8> {
        panic!("the callback panicked before returning its future")
    }

    #[tokio::test]
    async fn output_panic_and_timeout_are_told_apart() {
        let limit = Duration::from_millis(20);
        assert_eq!(contained(limit, async { 7 }).await, Ok(7));
        let late = contained(Duration::from_secs(5), async {
            tokio::time::sleep(Duration::from_millis(5)).await;
            8
        })
        .await;
        assert_eq!(late, Ok(8));
        assert_eq!(
            contained(limit, std::future::pending::<()>()).await,
            Err(Contained::TimedOut(limit))
        );
        assert_eq!(
            contained(limit, async { panic!("while polled") }).await,
            Err::<(), _>(Contained::Panicked)
        );
        // A panic in the call that makes the future, when the call is inside the future.
        assert_eq!(
            contained(limit, async { boom().await }).await,
            Err(Contained::Panicked)
        );
        // A panic after a first pending poll, under the timer.
        let later = contained(Duration::from_secs(5), async {
            tokio::time::sleep(Duration::from_millis(5)).await;
            panic!("after a pending poll")
        })
        .await;
        assert_eq!(later, Err::<(), _>(Contained::Panicked));
    }

    #[test]
    fn messages() {
        assert_eq!(Contained::Panicked.to_string(), "panicked");
        assert_eq!(
            Contained::TimedOut(Duration::from_secs(5)).to_string(),
            "timed out after 5s"
        );
    }
}
