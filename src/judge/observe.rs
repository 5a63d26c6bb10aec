//! The seam where operations hang on decisions: an [`Observer`] is told of every decision
//! event the judge writes. The decision log is the first; metrics and limits are more of them,
//! added once here rather than at every place a decision is made.

use std::sync::Arc;

use super::event::DecisionEvent;

/// Told of every decision, after it is made and said. Called on the request's task: it must
/// not block.
pub(crate) trait Observer: Send + Sync + 'static {
    /// One decision.
    fn decided(&self, event: &DecisionEvent<'_>);

    /// Whether it reads the event's latencies: when no observer does, the judge reads no
    /// clock.
    fn times(&self) -> bool {
        true
    }

    /// A request refused by authentication, before any decision: the failure's reason code
    /// and the HTTP status of the challenge.
    fn auth_refused(&self, reason: &'static str, status: u16) {
        let _ = (reason, status);
    }
}

/// The decision log (`mcp_gate::decision`), always the first observer.
pub(crate) struct DecisionLog;

impl Observer for DecisionLog {
    fn decided(&self, event: &DecisionEvent<'_>) {
        event.write();
    }

    /// Only while a subscriber may write it (no level is enabled when there is none).
    fn times(&self) -> bool {
        tracing::level_enabled!(tracing::Level::ERROR)
    }
}

/// The observers a gate holds, in the order they are told.
#[derive(Clone)]
pub(crate) struct Observers(Vec<Arc<dyn Observer>>);

impl Default for Observers {
    fn default() -> Self {
        Self(vec![Arc::new(DecisionLog)])
    }
}

impl Observers {
    /// One more observer, told after those before it.
    #[cfg_attr(
        not(feature = "metrics"),
        allow(dead_code, reason = "the seam the metrics (feature `metrics`) hang on")
    )]
    pub fn push(&mut self, observer: Arc<dyn Observer>) {
        self.0.push(observer);
    }

    /// Whether any observer reads the latencies.
    pub fn timed(&self) -> bool {
        self.0.iter().any(|observer| observer.times())
    }

    /// Tells every observer of `event`.
    pub fn decided(&self, event: &DecisionEvent<'_>) {
        for observer in &self.0 {
            observer.decided(event);
        }
    }

    /// Tells every observer of a request authentication refused.
    pub fn auth_refused(&self, reason: &'static str, status: u16) {
        for observer in &self.0 {
            observer.auth_refused(reason, status);
        }
    }
}
