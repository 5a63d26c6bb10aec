//! A bounded cache of verified tokens, so a token seen again skips signature verification or
//! introspection.
//!
//! Keys are SHA-256 digests of the token, never the token itself. An entry never outlives the
//! token's `exp` nor the configured maximum age, and the cache holds at most its capacity.
//! Only successful verifications are cached: a refused token is checked again each time.
//!
//! The cache sits on every request's path, so it is `quick_cache`'s sharded cache: a hit is a
//! read lock on one shard and a clone of the entry, with no queue of reads to replay. Its
//! eviction (CLOCK-Pro) admits every new token, into a section that is nearly all of the
//! capacity here, and gives a second chance to the ones seen again, so a new population of
//! callers is verified about once each, instead of being turned away for as long as
//! yesterday's busy tokens stay warm (the trouble with a frequency-based admission policy such
//! as TinyLFU).

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use quick_cache::sync::{Cache, DefaultLifecycle};
use quick_cache::{DefaultHashBuilder, OptionsBuilder, UnitWeighter};
use sha2::{Digest, Sha256};

use super::principal::Principal;

/// The cache key: SHA-256 of the token.
pub(crate) type TokenDigest = [u8; 32];

/// The digest under which a token is cached.
pub(crate) fn digest(token: &str) -> TokenDigest {
    digest_bytes(token.as_bytes())
}

/// [`digest`] of a token still in the header's bytes.
pub(crate) fn digest_bytes(token: &[u8]) -> TokenDigest {
    Sha256::digest(token).into()
}

/// The share of the capacity reserved for tokens seen more than once. The rest, nearly all of
/// it, takes new tokens: with a larger reserve, a new population as large as the cache would
/// churn through the small remainder and be verified again on every request, while the
/// reserve still held yesterday's tokens.
const HOT_SHARE: f64 = 0.05;

/// The fewest tokens one shard holds. Each shard evicts on its own, so a shard must be large
/// enough that hashing spreads a population evenly over the shards: with 32-entry shards (what
/// `quick_cache` picks for a 1,000-token cache on a 8-core machine), a population at 80% of
/// the capacity overfills some shards by chance, and their tokens are verified again and again.
const MIN_SHARD_ITEMS: usize = 256;

/// How many shards a cache of `capacity` tokens gets: a power of two (as `quick_cache` rounds
/// up to one) with at least [`MIN_SHARD_ITEMS`] tokens each, at most four per core (for low
/// lock contention), at least one.
fn shard_count(capacity: usize, cores: usize) -> usize {
    let wanted = (capacity / MIN_SHARD_ITEMS)
        .min(cores.saturating_mul(4))
        .max(1);
    // The largest power of two not above `wanted`.
    1 << wanted.ilog2()
}

/// One verified token: who it is, and until when that may be believed.
#[derive(Clone)]
struct Entry {
    principal: Principal,
    valid_until: Instant,
}

/// The verified-token cache (see the module documentation).
pub(crate) struct TokenCache {
    entries: Cache<TokenDigest, Entry>,
}

impl TokenCache {
    /// A cache of at most `capacity` tokens (at least one).
    pub fn new(capacity: u64) -> Self {
        let capacity = usize::try_from(capacity).unwrap_or(usize::MAX).max(1);
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let options = OptionsBuilder::new()
            .estimated_items_capacity(capacity)
            .weight_capacity(capacity as u64)
            .hot_allocation(HOT_SHARE)
            .shards(shard_count(capacity, cores))
            .build();
        let entries = match options {
            Ok(options) => Cache::with_options(
                options,
                UnitWeighter,
                DefaultHashBuilder::default(),
                DefaultLifecycle::default(),
            ),
            // Only a share outside 0..1 is refused, and HOT_SHARE is a constant inside it.
            Err(_) => Cache::new(capacity),
        };
        Self { entries }
    }

    /// The principal of a cached, still valid token. An expired entry is dropped on sight.
    pub fn get(&self, key: &TokenDigest) -> Option<Principal> {
        let entry = self.entries.get(key)?;
        if Instant::now() < entry.valid_until {
            Some(entry.principal)
        } else {
            self.entries.remove(key);
            None
        }
    }

    /// Caches a verified token until its `exp` or for `max_age`, whichever comes first.
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
    fn len(&self) -> usize {
        self.entries.len()
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
            dpop_jkt: None,
        })
    }

    fn now() -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs()
    }

    #[test]
    fn shards_hold_enough_tokens_to_share_a_population_evenly() {
        // A small cache on a large machine stays in few, large shards.
        assert_eq!(shard_count(1000, 64), 2);
        assert_eq!(shard_count(10, 64), 1);
        assert_eq!(shard_count(0, 0), 1);
        // A large cache gets many shards, up to four per core, a power of two.
        assert_eq!(shard_count(10_000, 2), 8);
        assert_eq!(shard_count(10_000, 64), 32);
        assert_eq!(shard_count(usize::MAX, 3), 8);
        for capacity in [1, 255, 256, 511, 512, 10_000, 1 << 40] {
            for cores in [0, 1, 2, 3, 8, 64, 1000] {
                let shards = shard_count(capacity, cores);
                assert!(shards.is_power_of_two());
                assert!(shards == 1 || capacity / shards >= MIN_SHARD_ITEMS);
                assert!(shards <= (cores * 4).max(1));
            }
        }
    }

    #[test]
    fn a_new_population_of_tokens_displaces_an_old_busy_one() {
        // The cache is sharded: populations stay below its capacity so that no shard is full
        // by the luck of the hash alone. The shard count does not depend on this machine's
        // cores at this capacity (see `shard_count`), so the test means the same everywhere.
        let cache = TokenCache::new(1000);
        let p = principal(Some(now() + 600));
        let max_age = Duration::from_secs(600);
        let old = |i: usize| digest(&format!("old-{i}"));
        let new = |i: usize| digest(&format!("new-{i}"));
        for i in 0..500 {
            cache.insert(old(i), &p, max_age);
        }
        for _ in 0..20 {
            for i in 0..500 {
                assert!(cache.get(&old(i)).is_some());
            }
        }
        // The new callers arrive; each one that misses is verified again and inserted, as the
        // authenticator does: each is verified about once, and then it is what is cached.
        let mut verifications = 0;
        for _ in 0..8 {
            for i in 0..800 {
                if cache.get(&new(i)).is_none() {
                    verifications += 1;
                    cache.insert(new(i), &p, max_age);
                }
            }
        }
        assert!(cache.len() <= 1000, "{}", cache.len());
        let cached = (0..800).filter(|&i| cache.get(&new(i)).is_some()).count();
        assert!(cached >= 760, "only {cached} of 800 new tokens are cached");
        assert!(
            verifications <= 800 + 80,
            "{verifications} verifications for 800 new tokens: they are being turned away"
        );
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
