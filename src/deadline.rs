//! A time limit that costs nothing when it is not needed.
//!
//! Most futures the layer limits (a small request body, a policy that answers from memory) are
//! ready on their first poll. Arming a Tokio timer for them would register and cancel a timer
//! entry on every request; so the future is polled once first, and only a future that is
//! still pending gets a timer, boxed because a timer is large and the case is rare.

use std::future::Future;
use std::task::Poll;
use std::time::Duration;

/// The future's output, or `Err(Elapsed)` if it is still pending after `limit`.
pub(crate) async fn within<F: Future>(
    limit: Duration,
    future: F,
) -> Result<F::Output, tokio::time::error::Elapsed> {
    let mut future = std::pin::pin!(future);
    let first = std::future::poll_fn(|cx| Poll::Ready(future.as_mut().poll(cx))).await;
    match first {
        Poll::Ready(output) => Ok(output),
        Poll::Pending => Box::pin(tokio::time::timeout(limit, future)).await,
    }
}

/// At most one start per interval, across every caller of a process: for work the layer does
/// on its own initiative (asking the inner server for its tools or its name) when a request
/// finds something unknown, so that what is never found costs at most one try per interval.
pub(crate) struct OncePer {
    every_ms: u64,
    /// When the last try started (milliseconds since the epoch).
    last_ms: std::sync::atomic::AtomicU64,
}

impl OncePer {
    /// At most once per `every`.
    pub fn new(every: Duration) -> Self {
        Self {
            every_ms: u64::try_from(every.as_millis()).unwrap_or(u64::MAX),
            last_ms: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Whether this caller may try now; when it may, the next may only after the interval.
    pub fn try_now(&self) -> bool {
        use std::sync::atomic::Ordering;
        let now = crate::clock::now_ms();
        let last = self.last_ms.load(Ordering::Acquire);
        now.saturating_sub(last) >= self.every_ms
            && self
                .last_ms
                .compare_exchange(last, now, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn once_per_interval() {
        let once = OncePer::new(Duration::from_secs(10));
        assert!(once.try_now());
        assert!(!once.try_now());
    }

    #[tokio::test]
    async fn a_ready_future_needs_no_timer_and_a_stalled_one_times_out() {
        assert_eq!(within(Duration::ZERO, async { 7 }).await.ok(), Some(7));
        let stalled = within(Duration::from_millis(20), std::future::pending::<()>()).await;
        assert!(stalled.is_err());
        let late = within(Duration::from_secs(5), async {
            tokio::time::sleep(Duration::from_millis(10)).await;
            8
        })
        .await;
        assert_eq!(late.ok(), Some(8));
    }
}
