//! Revocation in force: [`Gate::revoke`](crate::Gate::revoke), the check every request goes
//! through, and what the gate does while the revocation feed cannot be trusted.
//!
//! **Threat.** A withdrawn grant that keeps working: on a replica that cached the token, on a
//! replica that missed the revocation, in a call held for approval hours ago, in a
//! continuation state issued before. **Answer.** Every request is checked against this
//! process's copy of the set (`store::revocations`), cached token or not; a held task and a
//! continuation state are checked by their owner when used; and while the copy cannot be
//! confirmed current, the configured [`FeedOutage`] decides. `docs/revocation.md` is the page.

#[cfg(feature = "axum")]
pub mod handler;

use std::sync::Arc;
use std::time::Duration;

use crate::auth::revocation::RevocationCheck;
use crate::auth::token_cache::TokenDigest;
use crate::auth::{AuthError, InvalidToken, Owner, Principal, Revocation};
use crate::store::StoreError;
use crate::store::revocations::{FeedState, RevocationEntry, RevocationStore};

/// What the gate does while the revocation feed is down or its last confirmed sync is old
/// (a shared set only; a memory set is always current).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FeedOutage {
    /// Fail closed: every authenticated request is refused (`503`, `Retry-After: 1`) as soon
    /// as the feed's connection is lost, or its last confirmed sync is older than 3 s. The
    /// default.
    Refuse,
    /// Accept requests checked against the copy as it was, while its last confirmed sync is
    /// at most this old; refuse (`503`) past it. A revocation made during the outage is
    /// missed by this replica for at most that long.
    AcceptStale(Duration),
}

impl FeedOutage {
    /// The staleness the `Refuse` mode tolerates on a connected feed (which confirms its copy
    /// every 500 ms): a confirmation late by a busy machine is not an outage.
    pub const REFUSE_GRACE: Duration = Duration::from_secs(3);

    /// Whether a copy in `state` may be used at `now_ms`.
    fn trusts(self, state: FeedState, now_ms: u64) -> bool {
        let staleness = Duration::from_millis(state.staleness_ms(now_ms));
        match (self, state) {
            (_, FeedState::InSync) => true,
            (Self::Refuse, FeedState::Live { .. }) => staleness <= Self::REFUSE_GRACE,
            (Self::Refuse, _) => false,
            (Self::AcceptStale(bound), _) => staleness <= bound,
        }
    }
}

/// Why [`Gate::revoke`](crate::Gate::revoke) did not put a revocation in force.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RevokeError {
    /// The gate was built without a revocation set (`GateBuilder::revocations`).
    #[error("revocation is not configured on this gate")]
    NotConfigured,
    /// The revocation names an empty issuer, subject, client id or `jti`.
    #[error("the revocation names an empty issuer, subject, client id or jti")]
    Invalid,
    /// The set refused it (full) or could not be reached: the revocation is not in force.
    #[error("{0}")]
    Store(#[from] StoreError),
}

/// What a revocation became.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Revoked {
    /// Stored, in force until `until_ms` (milliseconds since the epoch).
    Until {
        /// When the entry goes.
        until_ms: u64,
    },
    /// The token it names has already expired: nothing to store.
    AlreadyExpired,
}

/// The revocation set as a gate uses it: the store, the outage mode, and the longest token
/// lifetime (how long a revocation by subject or client, or of a token of unknown `exp`,
/// lives).
pub(crate) struct Revocations {
    pub store: Arc<dyn RevocationStore>,
    pub outage: FeedOutage,
    pub max_token_lifetime: Duration,
}

impl Revocations {
    /// Puts `revocation` in force now, for every replica sharing the set.
    pub async fn revoke(&self, revocation: Revocation) -> Result<Revoked, RevokeError> {
        if !revocation.is_well_formed() {
            return Err(RevokeError::Invalid);
        }
        let now = crate::clock::now_ms();
        let lifetime = u64::try_from(self.max_token_lifetime.as_millis()).unwrap_or(u64::MAX);
        let until_ms = match revocation.token_expiry() {
            Some(exp) => exp.saturating_mul(1000),
            None => now.saturating_add(lifetime),
        };
        if until_ms <= now {
            return Ok(Revoked::AlreadyExpired);
        }
        let entry = RevocationEntry::new(revocation, now, until_ms);
        self.store.revoke(&entry).await?;
        tracing::info!(
            target: "mcp_gate::revocation",
            by = entry.revocation.kind(),
            until_ms,
            "revocation in force"
        );
        Ok(Revoked::Until { until_ms })
    }

    /// Whether `owner`'s grant was revoked (by subject or client) at or after `issued_at_ms`:
    /// for what the owner holds without a token at hand (a held task, a continuation state).
    /// The feed's state is not asked again: the request that brings it was just checked.
    pub fn owner_revoked(&self, owner: &Owner, issued_at_ms: u64) -> bool {
        let revoked = self
            .store
            .list()
            .revokes_owner(owner, issued_at_ms, crate::clock::now_ms());
        if revoked {
            crate::measure::revocation::refused("owner_revoked");
        }
        revoked
    }

    /// Whether the copy may be used now (for readiness).
    pub fn usable_now(&self) -> bool {
        let state = self.store.list().state();
        self.outage.trusts(state, crate::clock::now_ms())
    }

    /// The refusal when the copy may not be trusted now.
    fn feed_trusted(&self, now_ms: u64) -> Result<(), AuthError> {
        if self.outage.trusts(self.store.list().state(), now_ms) {
            Ok(())
        } else {
            crate::measure::revocation::refused("feed_unavailable");
            Err(AuthError::RevocationsUnavailable)
        }
    }
}

fn revoked() -> AuthError {
    crate::measure::revocation::refused("revoked");
    AuthError::InvalidToken(InvalidToken::Revoked)
}

impl RevocationCheck for Revocations {
    fn check(&self, key: &TokenDigest, principal: &Principal) -> Result<(), AuthError> {
        let now = crate::clock::now_ms();
        self.feed_trusted(now)?;
        if self.store.list().revokes(key, principal, now) {
            return Err(revoked());
        }
        Ok(())
    }
}

/// The builder's revocation options (`GateBuilder::revocations` and the two after it).
pub(crate) struct RevocationOptions {
    pub store: Option<Arc<dyn RevocationStore>>,
    pub outage: FeedOutage,
    pub max_token_lifetime: Duration,
}

impl RevocationOptions {
    /// The longest token lifetime assumed by default: 24 hours.
    pub const DEFAULT_MAX_TOKEN_LIFETIME: Duration = Duration::from_secs(24 * 3600);

    /// The set as the gate holds it, or `None` when no store was given.
    pub fn build(&self) -> Option<Arc<Revocations>> {
        let store = self.store.clone()?;
        crate::measure::revocation::feed_state(store.list().state().as_str());
        Some(Arc::new(Revocations {
            store,
            outage: self.outage,
            max_token_lifetime: self.max_token_lifetime,
        }))
    }
}

impl Default for RevocationOptions {
    fn default() -> Self {
        Self {
            store: None,
            outage: FeedOutage::Refuse,
            max_token_lifetime: Self::DEFAULT_MAX_TOKEN_LIFETIME,
        }
    }
}

impl std::fmt::Debug for RevocationOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RevocationOptions")
            .field("backend", &self.store.as_ref().map(|s| s.backend()))
            .field("outage", &self.outage)
            .field("max_token_lifetime", &self.max_token_lifetime)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_outage_modes_trust_what_they_say() {
        let now = 1_800_000_000_000;
        let live = |ago: u64| FeedState::Live {
            synced_at_ms: now - ago,
        };
        let down = |ago: u64| FeedState::Down {
            synced_at_ms: now - ago,
        };
        let stale = FeedOutage::AcceptStale(Duration::from_secs(30));
        for mode in [FeedOutage::Refuse, stale] {
            assert!(mode.trusts(FeedState::InSync, now));
            assert!(mode.trusts(live(500), now));
            assert!(!mode.trusts(live(31_000), now));
            assert!(!mode.trusts(FeedState::Down { synced_at_ms: 0 }, now));
        }
        assert!(!FeedOutage::Refuse.trusts(down(500), now));
        assert!(stale.trusts(down(29_000), now));
        assert!(!stale.trusts(down(31_000), now));
    }
}
