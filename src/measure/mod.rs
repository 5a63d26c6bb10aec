//! The measuring points outside the judge: token verification, the key sets, the stores, policy
//! reloads. Each is one function called at the one place its step happens; with feature
//! `metrics` it counts through the [`metrics`] facade, without it it does nothing (so the
//! places that call it read the same either way). A leaf: it imports nothing of the crate, so
//! any module may measure without an import cycle. The labels are the callers' fixed words
//! (`docs/operations.md` lists them), and each label set's key is made once (`keys`), so a
//! count on the request path allocates nothing. [`traced`] keeps the spans held across awaits
//! out of a request's future when no subscriber wants them.

#[cfg(feature = "metrics")]
pub(crate) mod keys;
pub(crate) mod revocation;
pub(crate) mod traced;

#[cfg(feature = "metrics")]
mod on {
    use std::time::Duration;

    use super::keys::Keys;

    /// Tokens looked up in the verified-token cache.
    static TOKEN_CACHE: Keys<1> = Keys::new("mcp_gate_token_cache_total", ["result"]);
    /// Tokens verified, by method and outcome.
    static VERIFICATIONS: Keys<2> =
        Keys::new("mcp_gate_token_verifications_total", ["method", "outcome"]);
    /// How long verifications took, by method.
    static VERIFICATION_TIME: Keys<1> =
        Keys::new("mcp_gate_token_verification_duration_seconds", ["method"]);
    /// Keys looked up in remote key sets.
    #[cfg(feature = "jwks")]
    static JWKS_LOOKUPS: Keys<1> = Keys::new("mcp_gate_jwks_lookups_total", ["result"]);
    /// Remote key sets fetched.
    #[cfg(feature = "jwks")]
    static JWKS_FETCHES: Keys<1> = Keys::new("mcp_gate_jwks_fetches_total", ["outcome"]);
    /// Policy sets reloaded or refused.
    #[cfg_attr(
        not(feature = "cedar"),
        allow(dead_code, reason = "only Cedar reloads")
    )]
    static RELOADS: Keys<1> = Keys::new("mcp_gate_policy_reloads_total", ["outcome"]);
    /// Store operations, by store, backend, operation and outcome.
    static STORE_OPERATIONS: Keys<4> = Keys::new(
        "mcp_gate_store_operations_total",
        ["store", "backend", "operation", "outcome"],
    );
    /// How long store operations took.
    static STORE_TIME: Keys<3> = Keys::new(
        "mcp_gate_store_operation_duration_seconds",
        ["store", "backend", "operation"],
    );
    /// Store operations refused at a bound.
    static QUOTA_REFUSALS: Keys<2> = Keys::new("mcp_gate_quota_refusals_total", ["store", "kind"]);
    /// Task notifications: listens opened or refused, notifications sent or dropped.
    static TASK_NOTIFICATIONS: Keys<1> = Keys::new("mcp_gate_task_notifications_total", ["event"]);

    /// A token looked up in the verified-token cache.
    pub(crate) fn token_cache(hit: bool) {
        let result = if hit { "hit" } else { "miss" };
        TOKEN_CACHE.counter([result]).increment(1);
    }

    /// A token verified (or not) by `method`, with the outcome and the time it took.
    pub(crate) fn token_verified(method: &'static str, outcome: &'static str, took: Duration) {
        VERIFICATIONS.counter([method, outcome]).increment(1);
        VERIFICATION_TIME
            .histogram([method])
            .record(took.as_secs_f64());
    }

    #[cfg(feature = "jwks")]
    /// A key looked up in a remote key set: found at once, or not.
    pub(crate) fn jwks_lookup(hit: bool) {
        let result = if hit { "hit" } else { "miss" };
        JWKS_LOOKUPS.counter([result]).increment(1);
    }

    #[cfg(feature = "jwks")]
    /// A remote key set fetched.
    pub(crate) fn jwks_fetch(ok: bool) {
        let outcome = if ok { "ok" } else { "error" };
        JWKS_FETCHES.counter([outcome]).increment(1);
    }

    /// A policy set in force, at its first load or a reload: `version` is 1, the one it
    /// replaced 0. (Rare: through the macro, which makes the label each time.)
    #[cfg_attr(
        not(feature = "cedar"),
        allow(dead_code, reason = "only Cedar sets load")
    )]
    pub(crate) fn policy_in_force(replaced: Option<&str>, version: &str) {
        if let Some(old) = replaced.filter(|old| *old != version) {
            metrics::gauge!("mcp_gate_policy_set_info", "version" => old.to_owned()).set(0.0);
        }
        metrics::gauge!("mcp_gate_policy_set_info", "version" => version.to_owned()).set(1.0);
    }

    /// A policy set reloaded, or its reload refused (the old one stays).
    #[cfg_attr(
        not(feature = "cedar"),
        allow(dead_code, reason = "only Cedar reloads")
    )]
    pub(crate) fn policy_reload(ok: bool) {
        let outcome = if ok { "ok" } else { "refused" };
        RELOADS.counter([outcome]).increment(1);
    }

    /// A task-notification event: `listen_opened`, `listen_refused`, `sent`, `dropped`.
    pub(crate) fn task_notification(event: &'static str) {
        TASK_NOTIFICATIONS.counter([event]).increment(1);
    }

    /// One store operation: what it was, how it ended, and how long it took.
    pub(crate) fn store_operation(
        store: &'static str,
        backend: &'static str,
        operation: &'static str,
        outcome: &'static str,
        took: Duration,
    ) {
        STORE_OPERATIONS
            .counter([store, backend, operation, outcome])
            .increment(1);
        STORE_TIME
            .histogram([store, backend, operation])
            .record(took.as_secs_f64());
        if matches!(outcome, "full" | "owner_quota" | "over_budget") {
            QUOTA_REFUSALS.counter([store, outcome]).increment(1);
        }
    }
}

#[cfg(not(feature = "metrics"))]
mod off {
    use std::time::Duration;

    /// A token looked up in the verified-token cache.
    #[inline(always)]
    pub(crate) fn token_cache(_hit: bool) {}

    /// A token verified (or not).
    #[inline(always)]
    pub(crate) fn token_verified(_method: &'static str, _outcome: &'static str, _took: Duration) {}

    #[cfg(feature = "jwks")]
    /// A key looked up in a remote key set.
    #[inline(always)]
    pub(crate) fn jwks_lookup(_hit: bool) {}

    #[cfg(feature = "jwks")]
    /// A remote key set fetched.
    #[inline(always)]
    pub(crate) fn jwks_fetch(_ok: bool) {}

    /// A policy set in force.
    #[cfg_attr(
        not(feature = "cedar"),
        allow(dead_code, reason = "only Cedar sets load")
    )]
    #[inline(always)]
    pub(crate) fn policy_in_force(_replaced: Option<&str>, _version: &str) {}

    /// A policy set reloaded, or its reload refused.
    #[cfg_attr(
        not(feature = "cedar"),
        allow(dead_code, reason = "only Cedar reloads")
    )]
    #[inline(always)]
    pub(crate) fn policy_reload(_ok: bool) {}

    /// A task-notification event.
    #[inline(always)]
    pub(crate) fn task_notification(_event: &'static str) {}
}

#[cfg(not(feature = "metrics"))]
use off as points;
#[cfg(feature = "metrics")]
use on as points;
#[cfg(feature = "metrics")]
pub(crate) use on::store_operation;

#[cfg(feature = "jwks")]
pub(crate) use points::{jwks_fetch, jwks_lookup};
#[cfg(feature = "cedar")]
pub(crate) use points::{policy_in_force, policy_reload};
pub(crate) use points::{task_notification, token_cache, token_verified};
