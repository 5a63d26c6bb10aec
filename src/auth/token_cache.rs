//! A bounded cache of verified tokens, so a token seen again skips signature verification or
//! introspection.
//!
//! Keys are SHA-256 digests of the token, never the token itself. An entry never outlives the
//! token's `exp` nor the configured maximum age, and the cache holds at most its capacity; the
//! least recently used entries are evicted first. Every new verified token is admitted: a
//! frequency-based admission policy (moka's default TinyLFU) would keep yesterday's busy tokens
//! and turn away a new population of callers, who would then pay a full verification on every
//! request until the old tokens cooled down. Only successful verifications are cached: a
//! refused token is checked again each time.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use moka::Expiry;
use moka::sync::Cache;
use sha2::{Digest, Sha256};

use super::principal::Principal;

/// The digest a token is cached under.
pub(crate) type TokenDigest = [u8; 32];

/// Digests a token for cache look-ups.
pub(crate) fn digest(token: &str) -> TokenDigest {
    Sha256::digest(token.as_bytes()).into()
}

#[derive(Clone)]
struct Entry {
    principal: Principal,
    valid_until: Instant,
}

struct UntilValid;

impl Expiry<TokenDigest, Entry> for UntilValid {
    fn expire_after_create(
        &self,
        _key: &TokenDigest,
        value: &Entry,
        created_at: Instant,
    ) -> Option<Duration> {
        Some(value.valid_until.saturating_duration_since(created_at))
    }
}

/// The verified-token cache.
pub(crate) struct TokenCache {
    entries: Cache<TokenDigest, Entry>,
}

impl TokenCache {
    pub fn new(capacity: u64) -> Self {
        Self {
            entries: Cache::builder()
                .max_capacity(capacity)
                .eviction_policy(moka::policy::EvictionPolicy::lru())
                .expire_after(UntilValid)
                .build(),
        }
    }

    /// The cached principal for a token, if it is still valid.
    pub fn get(&self, key: &TokenDigest) -> Option<Principal> {
        let entry = self.entries.get(key)?;
        if Instant::now() < entry.valid_until {
            Some(entry.principal)
        } else {
            self.entries.invalidate(key);
            None
        }
    }

    /// Caches a verified principal until its `exp` or for `max_age`, whichever comes first.
    pub fn insert(&self, key: TokenDigest, principal: &Principal, max_age: Duration) {
        let lifetime = match principal.expires_at() {
            Some(exp) => {
                let now = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map(|d| d.as_secs())
                    .unwrap_or(u64::MAX);
                Duration::from_secs(exp.saturating_sub(now)).min(max_age)
            }
            None => max_age,
        };
        if lifetime.is_zero() {
            return;
        }
        self.entries.insert(
            key,
            Entry {
                principal: principal.clone(),
                valid_until: Instant::now() + lifetime,
            },
        );
    }

    #[cfg(test)]
    fn len(&self) -> u64 {
        self.entries.run_pending_tasks();
        self.entries.entry_count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::principal::{PrincipalParts, TokenKind};

    fn principal(expires_at: Option<u64>) -> Principal {
        Principal::new(PrincipalParts {
            issuer: "i".into(),
            subject: None,
            client_id: None,
            scopes: Default::default(),
            effective_scopes: Default::default(),
            authorization_details: Vec::new(),
            claims: Default::default(),
            expires_at,
            kind: TokenKind::Jwt,
        })
    }

    fn now() -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs()
    }

    #[test]
    fn a_new_population_of_tokens_displaces_an_old_busy_one() {
        let cache = TokenCache::new(100);
        let p = principal(Some(now() + 600));
        let max_age = Duration::from_secs(600);
        for i in 0..100 {
            cache.insert(digest(&format!("old-{i}")), &p, max_age);
        }
        for _ in 0..20 {
            for i in 0..100 {
                assert!(cache.get(&digest(&format!("old-{i}"))).is_some());
            }
        }
        for i in 0..100 {
            cache.insert(digest(&format!("new-{i}")), &p, max_age);
        }
        assert!(cache.len() <= 100);
        let admitted = (0..100)
            .filter(|i| cache.get(&digest(&format!("new-{i}"))).is_some())
            .count();
        assert_eq!(admitted, 100, "every new token is cached");
    }

    #[test]
    fn expired_tokens_are_not_cached() {
        let cache = TokenCache::new(10);
        cache.insert(
            digest("a"),
            &principal(Some(now() - 1)),
            Duration::from_secs(60),
        );
        assert!(cache.get(&digest("a")).is_none());
    }

    #[test]
    fn entries_never_outlive_exp() {
        let cache = TokenCache::new(10);
        cache.insert(
            digest("a"),
            &principal(Some(now() + 1)),
            Duration::from_secs(60),
        );
        assert!(cache.get(&digest("a")).is_some());
        std::thread::sleep(Duration::from_millis(2100));
        assert!(cache.get(&digest("a")).is_none());
    }

    #[test]
    fn capacity_is_bounded() {
        let cache = TokenCache::new(100);
        for i in 0..1000 {
            cache.insert(
                digest(&i.to_string()),
                &principal(None),
                Duration::from_secs(60),
            );
        }
        assert!(cache.len() <= 100, "{}", cache.len());
    }
}
