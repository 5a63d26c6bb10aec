//! Minting: a principal in, a signed identity token out, reused from a bounded cache while
//! more than half of its lifetime remains.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::{HeaderName, HeaderValue};
use jsonwebtoken::{Algorithm, Header};
use mcp_gate::Principal;
use serde::Serialize;

use crate::signing_key::SigningKey;

/// The JWT `typ` of an identity token: explicit (RFC 8725 §3.11), so that a verifier can
/// tell it from an access token or an ID token.
pub const TYP: &str = "mcp-gate-identity+jwt";

/// How many minted tokens are kept for reuse at most.
pub const CACHE_CAPACITY: usize = 4096;

/// Why no identity token could be minted (the request is then refused).
#[derive(Debug, thiserror::Error)]
pub enum MintError {
    /// Signing failed.
    #[error("the identity token could not be signed: {0}")]
    Sign(#[from] jsonwebtoken::errors::Error),
    /// The signed token does not fit in a header value (it always does: base64url only).
    #[error("the identity token is not a valid header value")]
    Header,
}

/// What the token says, in the order it is written.
#[derive(Serialize)]
struct Claims<'a> {
    iss: &'a str,
    aud: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    sub: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    client_id: Option<&'a str>,
    #[serde(skip_serializing_if = "String::is_empty")]
    scope: String,
    token_issuer: &'a str,
    iat: u64,
    exp: u64,
}

/// Who a token is about: two principals with the same key get the same token.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Who {
    issuer: String,
    subject: Option<String>,
    client: Option<String>,
    scopes: String,
}

impl Who {
    fn of(principal: &Principal) -> Self {
        Self {
            issuer: principal.issuer().to_owned(),
            subject: principal.subject().map(str::to_owned),
            client: principal.client_id().map(str::to_owned),
            // A `BTreeSet`: the same scopes give the same text whatever order they came in.
            scopes: principal
                .scopes()
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>()
                .join(" "),
        }
    }
}

/// A minted token and until when it is handed out again.
struct Minted {
    value: HeaderValue,
    /// `iat` plus half the lifetime, in seconds since the epoch.
    reuse_until: u64,
}

/// The bounded cache of minted tokens.
struct Cache {
    entries: HashMap<Who, Minted>,
    capacity: usize,
    /// No sweep of stale entries before this second (a full cache of fresh entries is then
    /// not walked on every call).
    next_sweep: u64,
}

impl Cache {
    fn get(&self, who: &Who, now: u64) -> Option<HeaderValue> {
        self.entries
            .get(who)
            .filter(|minted| now < minted.reuse_until)
            .map(|minted| minted.value.clone())
    }

    /// Keeps `minted` for `who` if there is room (after dropping stale entries, at most once a
    /// second); when full of fresh entries, refuses: the token is used once and not kept.
    fn put(&mut self, who: Who, minted: Minted, now: u64) {
        if self.entries.len() >= self.capacity
            && !self.entries.contains_key(&who)
            && now >= self.next_sweep
        {
            self.entries.retain(|_, kept| now < kept.reuse_until);
            self.next_sweep = now + 1;
        }
        if self.entries.len() < self.capacity || self.entries.contains_key(&who) {
            self.entries.insert(who, minted);
        }
    }
}

/// Mints identity tokens for one audience with one key. Cheap to clone (shared cache).
#[derive(Clone)]
pub struct Minter(Arc<MinterData>);

struct MinterData {
    key: SigningKey,
    audience: String,
    issuer: String,
    ttl: Duration,
    header: HeaderName,
    cache: Mutex<Cache>,
}

impl std::fmt::Debug for Minter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Minter")
            .field("kid", &self.0.key.kid())
            .field("audience", &self.0.audience)
            .field("issuer", &self.0.issuer)
            .field("ttl", &self.0.ttl)
            .field("header", &self.0.header)
            .finish_non_exhaustive()
    }
}

impl Minter {
    /// A minter signing with `key` tokens for `audience`, issued as `issuer`, living `ttl`,
    /// carried in `header`; it keeps at most [`CACHE_CAPACITY`] tokens for reuse.
    pub fn new(
        key: SigningKey,
        audience: String,
        issuer: String,
        ttl: Duration,
        header: HeaderName,
    ) -> Self {
        Self::with_capacity(key, audience, issuer, ttl, header, CACHE_CAPACITY)
    }

    fn with_capacity(
        key: SigningKey,
        audience: String,
        issuer: String,
        ttl: Duration,
        header: HeaderName,
        capacity: usize,
    ) -> Self {
        Self(Arc::new(MinterData {
            key,
            audience,
            issuer,
            ttl,
            header,
            cache: Mutex::new(Cache {
                entries: HashMap::new(),
                capacity,
                next_sweep: 0,
            }),
        }))
    }

    /// The key that signs.
    pub fn key(&self) -> &SigningKey {
        &self.0.key
    }

    /// The header the token goes in.
    pub fn header(&self) -> &HeaderName {
        &self.0.header
    }

    /// The token's `aud`.
    pub fn audience(&self) -> &str {
        &self.0.audience
    }

    /// The token's `iss`.
    pub fn issuer(&self) -> &str {
        &self.0.issuer
    }

    /// The header value stating `principal` to the upstream now.
    pub fn mint(&self, principal: &Principal) -> Result<HeaderValue, MintError> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        self.mint_at(principal, now)
    }

    /// The header value stating `principal`, at `now` (seconds since the epoch).
    pub fn mint_at(&self, principal: &Principal, now: u64) -> Result<HeaderValue, MintError> {
        let who = Who::of(principal);
        if let Some(value) = self.cache().get(&who, now) {
            return Ok(value);
        }
        let ttl = self.0.ttl.as_secs();
        let claims = Claims {
            iss: &self.0.issuer,
            aud: &self.0.audience,
            sub: who.subject.as_deref(),
            client_id: who.client.as_deref(),
            scope: who.scopes.clone(),
            token_issuer: &who.issuer,
            iat: now,
            exp: now + ttl,
        };
        let mut header = Header::new(Algorithm::ES256);
        header.typ = Some(TYP.to_owned());
        header.kid = Some(self.0.key.kid().to_owned());
        let jwt = jsonwebtoken::encode(&header, &claims, self.0.key.encoding())?;
        let text = if self.0.header == http::header::AUTHORIZATION {
            format!("Bearer {jwt}")
        } else {
            jwt
        };
        let mut value = HeaderValue::from_str(&text).map_err(|_| MintError::Header)?;
        value.set_sensitive(true);
        let minted = Minted {
            value: value.clone(),
            reuse_until: now + ttl / 2,
        };
        self.cache().put(who, minted, now);
        Ok(value)
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, Cache> {
        // A panic while the lock was held leaves at worst a missing or stale-but-valid entry.
        self.0
            .cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    #[cfg(test)]
    fn cached(&self) -> usize {
        self.cache().entries.len()
    }
}

#[cfg(test)]
mod tests {
    use jsonwebtoken::{DecodingKey, Validation};
    use serde_json::{Value, json};

    use super::*;

    const NOW: u64 = 1_800_000_000;

    fn minter(capacity: usize, header: &'static str) -> Minter {
        Minter::with_capacity(
            SigningKey::generate().unwrap(),
            "http://127.0.0.1:3000/mcp".to_owned(),
            "https://gw.example/mcp".to_owned(),
            Duration::from_secs(60),
            HeaderName::from_static(header),
            capacity,
        )
    }

    fn principal(subject: &str, scopes: &[&str]) -> Principal {
        Principal::builder()
            .issuer("https://as.example")
            .subject(subject)
            .client_id("cli")
            .scopes(scopes.iter().copied())
            .build()
            .unwrap()
    }

    /// The token in `value`, verified with the minter's published key, and its header.
    fn verify(minter: &Minter, value: &HeaderValue, now: u64) -> (jsonwebtoken::Header, Value) {
        let text = value.to_str().unwrap();
        let jwt = text.strip_prefix("Bearer ").unwrap_or(text);
        let set = minter.key().jwks();
        let key = DecodingKey::from_jwk(&set.keys[0]).unwrap();
        let mut validation = Validation::new(Algorithm::ES256);
        validation.set_audience(&[minter.audience()]);
        validation.set_issuer(&[minter.issuer()]);
        validation.validate_exp = false;
        let data = jsonwebtoken::decode::<Value>(jwt, &key, &validation).unwrap();
        let exp = data.claims["exp"].as_u64().unwrap();
        assert!(exp > now, "expired when minted");
        (data.header, data.claims)
    }

    #[test]
    fn the_token_states_the_caller_for_the_upstream_and_is_signed_by_the_published_key() {
        let minter = minter(8, "authorization");
        let alice = principal("alice", &["mcp:write", "mcp:read"]);
        let value = minter.mint_at(&alice, NOW).unwrap();
        assert!(value.is_sensitive());
        assert!(value.to_str().unwrap().starts_with("Bearer ey"));
        let (header, claims) = verify(&minter, &value, NOW);
        assert_eq!(header.typ.as_deref(), Some(TYP));
        assert_eq!(header.kid.as_deref(), Some(minter.key().kid()));
        assert_eq!(header.alg, Algorithm::ES256);
        assert_eq!(
            claims,
            json!({
                "iss": "https://gw.example/mcp",
                "aud": "http://127.0.0.1:3000/mcp",
                "sub": "alice",
                "client_id": "cli",
                "scope": "mcp:read mcp:write",
                "token_issuer": "https://as.example",
                "iat": NOW,
                "exp": NOW + 60,
            })
        );
        assert!(claims.get("jti").is_none(), "a reused token carries no jti");
    }

    #[test]
    fn absent_subject_client_and_scopes_are_left_out_and_another_header_gets_the_bare_jwt() {
        let minter = minter(8, "x-caller-identity");
        let anonymous = Principal::builder()
            .issuer("https://as.example")
            .build()
            .unwrap();
        let value = minter.mint_at(&anonymous, NOW).unwrap();
        assert!(value.to_str().unwrap().starts_with("ey"));
        let (_, claims) = verify(&minter, &value, NOW);
        for absent in ["sub", "client_id", "scope"] {
            assert!(claims.get(absent).is_none(), "{absent} in {claims}");
        }
        assert_eq!(claims["token_issuer"], "https://as.example");
    }

    #[test]
    fn an_expired_token_is_refused_by_a_verifier() {
        let minter = minter(8, "authorization");
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let value = minter.mint_at(&principal("alice", &[]), now - 61).unwrap();
        let jwt = value.to_str().unwrap().strip_prefix("Bearer ").unwrap();
        let key = DecodingKey::from_jwk(&minter.key().jwks().keys[0]).unwrap();
        let mut validation = Validation::new(Algorithm::ES256);
        validation.set_audience(&[minter.audience()]);
        validation.leeway = 0;
        // Minted 61 s ago with a 60 s lifetime: it has expired.
        let error = jsonwebtoken::decode::<Value>(jwt, &key, &validation).unwrap_err();
        assert_eq!(
            error.kind(),
            &jsonwebtoken::errors::ErrorKind::ExpiredSignature
        );
        // A fresh one verifies with the published key, and with no other.
        let fresh = minter.mint_at(&principal("alice", &[]), now).unwrap();
        let fresh = fresh.to_str().unwrap().strip_prefix("Bearer ").unwrap();
        assert!(jsonwebtoken::decode::<Value>(fresh, &key, &validation).is_ok());
        let other = minter_with_other_key(&minter);
        let key = DecodingKey::from_jwk(&other.key().jwks().keys[0]).unwrap();
        let error = jsonwebtoken::decode::<Value>(fresh, &key, &validation).unwrap_err();
        assert_eq!(
            error.kind(),
            &jsonwebtoken::errors::ErrorKind::InvalidSignature
        );
    }

    fn minter_with_other_key(like: &Minter) -> Minter {
        Minter::new(
            SigningKey::generate().unwrap(),
            like.audience().to_owned(),
            like.issuer().to_owned(),
            Duration::from_secs(60),
            like.header().clone(),
        )
    }

    #[test]
    fn a_token_is_reused_while_more_than_half_its_life_remains_then_minted_anew() {
        let minter = minter(8, "authorization");
        let alice = principal("alice", &["mcp:read"]);
        let first = minter.mint_at(&alice, NOW).unwrap();
        assert_eq!(minter.mint_at(&alice, NOW + 29).unwrap(), first);
        // The same caller with the same scopes from another token is the same statement.
        let again = principal("alice", &["mcp:read"]);
        assert_eq!(minter.mint_at(&again, NOW + 1).unwrap(), first);
        let later = minter.mint_at(&alice, NOW + 30).unwrap();
        assert_ne!(later, first);
        assert_eq!(verify(&minter, &later, NOW + 30).1["iat"], NOW + 30);
        // Another scope set, or another subject, is another token.
        assert_ne!(
            minter
                .mint_at(&principal("alice", &["mcp:write"]), NOW + 30)
                .unwrap(),
            later
        );
        assert_ne!(
            minter
                .mint_at(&principal("bob", &["mcp:read"]), NOW + 30)
                .unwrap(),
            later
        );
    }

    #[test]
    fn a_full_cache_mints_without_keeping_until_stale_entries_are_swept() {
        let minter = minter(2, "authorization");
        minter.mint_at(&principal("a", &[]), NOW).unwrap();
        minter.mint_at(&principal("b", &[]), NOW).unwrap();
        assert_eq!(minter.cached(), 2);
        let carol = principal("c", &[]);
        let first = minter.mint_at(&carol, NOW + 1).unwrap();
        assert_eq!(minter.cached(), 2, "the bound was passed");
        // Not kept: the next call mints another token.
        assert_ne!(minter.mint_at(&carol, NOW + 2).unwrap(), first);
        assert_eq!(minter.cached(), 2);
        // Once a and b are past half their life, they make room.
        let kept = minter.mint_at(&carol, NOW + 30).unwrap();
        assert_eq!(minter.cached(), 1);
        assert_eq!(minter.mint_at(&carol, NOW + 31).unwrap(), kept);
    }
}
