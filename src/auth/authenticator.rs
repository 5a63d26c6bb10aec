//! The authentication pipeline: bearer extraction, the verified-token cache, JWT verification or
//! introspection, then the endpoint-wide scope check.

use std::sync::Arc;
use std::time::Duration;

use http::{HeaderMap, Uri};

use super::bearer::{Scheme, check_token, located, token_text};
use super::dpop_bind::{DpopSettings, ProofUse, admit_bearer};
use super::jwt::JwtVerifier;
use super::principal::Principal;
use super::rejection::{AuthError, InvalidToken};
use super::revocation::RevocationCheck;
use super::scope::{ScopeHierarchy, ScopeSet};
use super::token_cache::{TokenCache, TokenDigest, digest_bytes};

/// Everything needed to turn a request's credentials into a [`Principal`].
pub(crate) struct Authenticator {
    pub jwt: Option<JwtVerifier>,
    #[cfg(feature = "introspection")]
    pub introspector: Option<super::introspection::Introspector>,
    pub cache: Option<TokenCache>,
    pub cache_max_age: Duration,
    pub required_scopes: ScopeSet,
    pub hierarchy: ScopeHierarchy,
    pub max_token_bytes: usize,
    /// DPoP (RFC 9449), when configured; `None` costs the Bearer path nothing.
    pub dpop: Option<DpopSettings>,
    /// The revocation set every verified token is checked against, cached or not; `None`
    /// when revocation is not configured (nothing is checked, nothing costs).
    pub revocations: Option<Arc<dyn RevocationCheck>>,
}

/// What the synchronous first step found.
pub(crate) enum FirstStep<'a> {
    /// The token was in the cache: the request is decided without waiting.
    Decided(Result<Principal, AuthError>),
    /// The token must be verified.
    Verify { token: &'a str, key: TokenDigest },
    /// A token presented with the DPoP scheme: verified if `cached` is `None`, and its proof
    /// checked in any case ([`DpopSettings::prove`]).
    Prove {
        token: &'a str,
        key: TokenDigest,
        cached: Option<Principal>,
    },
}

impl Authenticator {
    /// Extracts the token and consults the cache, without awaiting anything.
    pub fn first_step<'a>(&self, headers: &'a HeaderMap, uri: &Uri) -> FirstStep<'a> {
        let (scheme, token) = match located(headers, uri, self.dpop.is_some()) {
            Ok(located) => located,
            Err(error) => return FirstStep::Decided(Err(error)),
        };
        if token.len() > self.max_token_bytes {
            // A malformed credential is a bad request, however long.
            let refused = check_token(token)
                .err()
                .unwrap_or(AuthError::InvalidToken(InvalidToken::TooLarge));
            return FirstStep::Decided(Err(refused));
        }
        let key = digest_bytes(token);
        let cached = self.cache.as_ref().and_then(|cache| cache.get(&key));
        // The token's grammar is checked only for bytes the cache does not hold: the cache
        // stores a token under the SHA-256 of its bytes only once they passed this check and
        // were verified, so a hit is those very bytes again.
        if cached.is_none()
            && let Err(error) = check_token(token)
        {
            return FirstStep::Decided(Err(error));
        }
        if self.cache.is_some() {
            crate::measure::token_cache(cached.is_some());
        }
        if let Some(principal) = &cached
            && let Err(refused) = self.not_revoked(&key, principal)
        {
            return FirstStep::Decided(Err(refused));
        }
        match (scheme, cached) {
            (Scheme::Bearer, Some(principal)) => FirstStep::Decided(
                admit_bearer(self.dpop.as_ref(), principal)
                    .and_then(|principal| self.check_scopes(principal)),
            ),
            (scheme, cached) => match token_text(token) {
                Err(error) => FirstStep::Decided(Err(error)),
                Ok(token) if scheme == Scheme::Dpop => FirstStep::Prove { token, key, cached },
                Ok(token) => FirstStep::Verify { token, key },
            },
        }
    }

    /// Verifies a bearer token that was not in the cache, caches it, and checks its binding
    /// (a DPoP-bound token is refused as a bearer token) and the endpoint scopes.
    pub async fn verify(&self, token: &str, key: TokenDigest) -> Result<Principal, AuthError> {
        let principal = self.verify_token(token, key).await?;
        admit_bearer(self.dpop.as_ref(), principal)
    }

    /// A DPoP presentation: the token verified (or taken from the cache) with its endpoint
    /// scopes, then its proof checked; what is left is the proof's single use ([`ProofUse`]),
    /// for the caller to record.
    pub async fn prove(
        &self,
        method: &http::Method,
        headers: &HeaderMap,
        token: &str,
        key: TokenDigest,
        cached: Option<Principal>,
    ) -> Result<(Principal, ProofUse), AuthError> {
        let Some(dpop) = &self.dpop else {
            return Err(AuthError::UnsupportedScheme);
        };
        let principal = match cached {
            Some(principal) => self.check_scopes(principal)?,
            None => self.verify_token(token, key).await?,
        };
        let now = std::time::SystemTime::now();
        let proof = dpop.check(method, headers, token, &principal, now)?;
        Ok((principal, proof))
    }

    /// Verifies a token that was not in the cache, caches it, and checks the endpoint scopes.
    async fn verify_token(&self, token: &str, key: TokenDigest) -> Result<Principal, AuthError> {
        let started = std::time::Instant::now();
        let mut method = "jwt";
        let verified = self.verify_uncached(token, &key, &mut method).await;
        let outcome = match &verified {
            Ok(_) => "ok",
            Err(error) => error.reason(),
        };
        crate::measure::token_verified(method, outcome, started.elapsed());
        let (principal, max_age) = verified?;
        self.not_revoked(&key, &principal)?;
        if let Some(cache) = &self.cache {
            cache.insert(key, &principal, max_age);
        }
        self.check_scopes(principal)
    }

    async fn verify_uncached(
        &self,
        token: &str,
        #[cfg_attr(not(feature = "introspection"), allow(unused_variables))] key: &TokenDigest,
        #[cfg_attr(not(feature = "introspection"), allow(unused_variables))]
        method: &mut &'static str,
    ) -> Result<(Principal, Duration), AuthError> {
        if let Some(jwt) = self.jwt.as_ref().filter(|_| self.is_jwt(token)) {
            let principal = jwt.verify(token, &self.hierarchy).await?;
            return Ok((principal, self.cache_max_age));
        }
        #[cfg(feature = "introspection")]
        if let Some(introspector) = &self.introspector {
            *method = "introspection";
            // One call for every request that bears this token meanwhile.
            let principal = introspector
                .introspect_shared(token, key, &self.hierarchy)
                .await?;
            return Ok((principal, introspector.cache_max_age));
        }
        Err(AuthError::InvalidToken(
            if JwtVerifier::looks_like_jwt(token) {
                InvalidToken::Malformed
            } else {
                InvalidToken::Unverifiable
            },
        ))
    }

    /// The revocation check of a verified token (`docs/revocation.md`): nothing when
    /// revocation is not configured.
    fn not_revoked(&self, key: &TokenDigest, principal: &Principal) -> Result<(), AuthError> {
        match &self.revocations {
            Some(revocations) => revocations.check(key, principal),
            None => Ok(()),
        }
    }

    /// Whether `token` goes to JWT verification: three dot-separated parts, and, when
    /// introspection is configured too, a header that decodes as a JWT header. An opaque token
    /// that happens to hold two dots (`v2.local.…`) is then introspected rather than refused as
    /// a malformed JWT.
    fn is_jwt(&self, token: &str) -> bool {
        if !JwtVerifier::looks_like_jwt(token) {
            return false;
        }
        #[cfg(feature = "introspection")]
        if self.introspector.is_some() {
            return jsonwebtoken::decode_header(token).is_ok();
        }
        true
    }

    /// The endpoint-wide scope check: every required scope, directly or through the hierarchy.
    pub fn check_scopes(&self, principal: Principal) -> Result<Principal, AuthError> {
        if self.required_scopes.iter().all(|s| principal.has_scope(s)) {
            Ok(principal)
        } else {
            Err(AuthError::InsufficientScope {
                required: self.required_scopes.clone(),
            })
        }
    }
}
