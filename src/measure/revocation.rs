//! The revocation feed's measuring points (feature `metrics`; no-ops without it): the feed's
//! state and staleness, set by the feed as it syncs, and the requests refused because of a
//! revocation or because the feed could not be trusted. Labels are fixed words only.

#[cfg(feature = "metrics")]
mod on {
    /// The feed's state: 1 for the state it is in, 0 for the others.
    pub(crate) fn feed_state(state: &'static str) {
        for each in ["in_sync", "live", "down"] {
            let value = if each == state { 1.0 } else { 0.0 };
            metrics::gauge!("mcp_gate_revocation_feed_state", "state" => each).set(value);
        }
    }

    /// Seconds since the feed's last confirmed sync (0 for a memory set, always in sync).
    #[cfg(feature = "redis")]
    pub(crate) fn feed_staleness(seconds: f64) {
        metrics::gauge!("mcp_gate_revocation_feed_staleness_seconds").set(seconds);
    }

    /// A request refused by the revocation check: `revoked` or `feed_unavailable`.
    pub(crate) fn refused(reason: &'static str) {
        metrics::counter!("mcp_gate_revocation_refusals_total", "reason" => reason).increment(1);
    }
}

#[cfg(not(feature = "metrics"))]
mod off {
    /// The feed's state.
    #[inline(always)]
    pub(crate) fn feed_state(_state: &'static str) {}

    /// Seconds since the feed's last confirmed sync.
    #[cfg(feature = "redis")]
    #[inline(always)]
    pub(crate) fn feed_staleness(_seconds: f64) {}

    /// A request refused by the revocation check.
    #[inline(always)]
    pub(crate) fn refused(_reason: &'static str) {}
}

#[cfg(all(feature = "redis", not(feature = "metrics")))]
pub(crate) use off::feed_staleness;
#[cfg(not(feature = "metrics"))]
pub(crate) use off::{feed_state, refused};
#[cfg(all(feature = "redis", feature = "metrics"))]
pub(crate) use on::feed_staleness;
#[cfg(feature = "metrics")]
pub(crate) use on::{feed_state, refused};
