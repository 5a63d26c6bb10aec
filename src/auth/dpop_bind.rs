//! DPoP in the layer (RFC 9449): which tokens need a proof, and the check of each proof
//! against its request, the server's nonce and the replay store.
//!
//! **Threat.** A stolen DPoP-bound token used without its key; a proof lifted from one request
//! and replayed with another, or with the same one on another replica; a bound token presented
//! as a bearer token to skip the proof.
//!
//! **Rules.** A token whose `cnf` carries `jkt` (a JWT claim, or a member of the introspection
//! response, RFC 9449 §6) is accepted only as `Authorization: DPoP <token>` with exactly one
//! `DPoP` header holding a proof that [`verify_proof`] accepts for this request: `htm` the
//! request's method, `htu` the resource URI (the gate guards one endpoint, whose public URL is
//! the configured resource), `ath` the token's hash, the key's thumbprint `cnf.jkt`. Then, if
//! nonces are configured, the proof's nonce must be one the gate issued ([`DpopNonces`]: an
//! HMAC over a time window, accepted by any replica with the same key). What is left is the
//! proof's single use: [`ProofUse`] says what to record, and `enforce/proof.rs` records it in
//! the gate's replay store (this module knows no store).
//!
//! A bound token presented as `Bearer` is refused whether or not DPoP is configured here (RFC
//! 9449 §7.2: the resource server must check the binding; a gate without DPoP cannot, so it
//! refuses). A token presented with the DPoP scheme that is not bound is refused, and so is any
//! unbound token when DPoP-bound tokens are required.
//!
//! The verified-token cache keeps the token's verification (its principal carries the `jkt`);
//! the proof is checked on every request.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use http::{HeaderMap, Method};
use jsonwebtoken::Algorithm;
use sha2::{Digest as _, Sha256};

use super::dpop::{DpopError, DpopProofRules, DpopRequest, verify_proof};
use super::dpop_nonce::{DpopNonces, MIN_KEY_BYTES};
use super::principal::Principal;
use super::rejection::{AuthError, InvalidToken};
use crate::error::ConfigError;

/// The header a DPoP proof travels in.
pub(crate) const DPOP_HEADER: http::HeaderName = http::HeaderName::from_static("dpop");

/// DPoP options for [`GateBuilder::dpop`](crate::GateBuilder::dpop).
///
/// ```
/// use std::time::Duration;
/// use mcp_gate::auth::Dpop;
/// use jsonwebtoken::Algorithm;
///
/// let dpop = Dpop::new()
///     .algorithms([Algorithm::ES256, Algorithm::EdDSA])
///     .required()
///     .nonce(vec![0x42; 32], Duration::from_secs(300))
///     .iat_window(Duration::from_secs(60), Duration::from_secs(5));
/// # let _ = dpop;
/// ```
///
/// Defaults: the asymmetric algorithms of [`DpopProofRules`], bound tokens accepted beside
/// unbound ones, no nonce, a proof at most 60 seconds old and 5 seconds ahead. Used proofs are
/// remembered in the gate's replay store ([`GateBuilder::replay_store`](crate::GateBuilder::replay_store)):
/// give every replica the same Redis store so that a proof is used once across all of them.
#[derive(Clone)]
#[must_use]
pub struct Dpop {
    algorithms: Vec<Algorithm>,
    required: bool,
    nonce: Option<(Vec<u8>, Duration)>,
    max_age: Duration,
    leeway: Duration,
}

impl std::fmt::Debug for Dpop {
    // The nonce key is a secret: not shown.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dpop")
            .field("algorithms", &self.algorithms)
            .field("required", &self.required)
            .field("nonce_lifetime", &self.nonce.as_ref().map(|(_, l)| l))
            .field("max_age", &self.max_age)
            .field("leeway", &self.leeway)
            .finish()
    }
}

impl Default for Dpop {
    fn default() -> Self {
        let rules = DpopProofRules::default();
        Self {
            algorithms: rules.allowed_algorithms().to_vec(),
            required: false,
            nonce: None,
            max_age: rules.max_age_limit(),
            leeway: rules.leeway_limit(),
        }
    }
}

impl Dpop {
    /// The defaults (see the type's documentation).
    pub fn new() -> Self {
        Self::default()
    }

    /// The proof algorithms accepted, advertised in `algs` and
    /// `dpop_signing_alg_values_supported`. Asymmetric ones only: a symmetric one, or none
    /// at all, is a [`ConfigError::DpopAlgorithm`] at build.
    pub fn algorithms(mut self, algorithms: impl IntoIterator<Item = Algorithm>) -> Self {
        self.algorithms = algorithms.into_iter().collect();
        self
    }

    /// Only DPoP-bound tokens are accepted (an unbound one is refused as `invalid_token`), and
    /// the metadata says `dpop_bound_access_tokens_required: true`.
    pub fn required(mut self) -> Self {
        self.required = true;
        self
    }

    /// Every proof must carry a nonce the gate issued (RFC 9449 §8, §9): a proof without one,
    /// or with a stale one, is answered `401 use_dpop_nonce` with a fresh `DPoP-Nonce`. Nonces
    /// are an HMAC under `key` (at least 32 bytes, the same on every replica) over a window of
    /// `lifetime` (1 s to 1 h); one is accepted for one to two lifetimes.
    pub fn nonce(mut self, key: impl Into<Vec<u8>>, lifetime: Duration) -> Self {
        self.nonce = Some((key.into(), lifetime));
        self
    }

    /// How old a proof's `iat` may be (1 s to 5 min) and how far ahead of this clock (at most
    /// 1 min).
    pub fn iat_window(mut self, max_age: Duration, leeway: Duration) -> Self {
        self.max_age = max_age;
        self.leeway = leeway;
        self
    }

    /// The algorithms' names, as advertised.
    pub(crate) fn algorithm_names(&self) -> Vec<String> {
        self.algorithms.iter().map(|a| format!("{a:?}")).collect()
    }

    /// Whether only bound tokens are accepted.
    pub(crate) fn is_required(&self) -> bool {
        self.required
    }

    /// The checked settings, for a gate whose resource is `htu`; `has_replay_store` says
    /// whether the gate has a replay store for the proofs' `jti`.
    pub(crate) fn settings(
        &self,
        htu: &str,
        has_replay_store: bool,
    ) -> Result<DpopSettings, ConfigError> {
        if self.algorithms.is_empty() {
            return Err(ConfigError::DpopAlgorithm("none given".to_owned()));
        }
        if let Some(symmetric) = self
            .algorithms
            .iter()
            .find(|alg| matches!(alg, Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512))
        {
            return Err(ConfigError::DpopAlgorithm(format!("{symmetric:?}")));
        }
        let invalid = |field, reason| Err(ConfigError::InvalidOption { field, reason });
        if self.max_age.is_zero() || self.max_age > Duration::from_secs(300) {
            return invalid("dpop iat_window max_age", "between 1 second and 5 minutes");
        }
        if self.leeway > Duration::from_secs(60) {
            return invalid("dpop iat_window leeway", "at most 1 minute");
        }
        let nonces = match &self.nonce {
            None => None,
            Some((key, _)) if key.len() < MIN_KEY_BYTES => {
                return Err(ConfigError::DpopNonceKey { len: key.len() });
            }
            Some((_, lifetime))
                if *lifetime < Duration::from_secs(1) || *lifetime > Duration::from_secs(3600) =>
            {
                return invalid("dpop nonce lifetime", "between 1 second and 1 hour");
            }
            Some((key, lifetime)) => Some(DpopNonces::new(key.clone(), *lifetime)),
        };
        if !has_replay_store {
            return Err(ConfigError::DpopWithoutReplayStore);
        }
        let algs = self.algorithm_names();
        Ok(DpopSettings {
            rules: DpopProofRules::new()
                .algorithms(self.algorithms.iter().copied())
                .max_age(self.max_age)
                .leeway(self.leeway),
            required: self.required,
            nonces,
            algs: algs.join(" "),
            htu: htu.to_owned(),
        })
    }
}

/// DPoP as the built gate checks it.
pub(crate) struct DpopSettings {
    rules: DpopProofRules,
    required: bool,
    nonces: Option<DpopNonces>,
    /// The algorithms, space-separated, for `algs`.
    algs: String,
    /// The resource URI: every proof's `htu`.
    htu: String,
}

/// A proof that passed every check but its single use: what the replay store must record.
#[derive(Debug)]
pub(crate) struct ProofUse {
    /// `dpop:<jkt>`: the store's per-owner quota bounds one key's proofs.
    pub owner: String,
    /// The store's key for the proof ([`replay_key`]).
    pub key: String,
    /// When the proof was issued, as the store judges it.
    pub issued: SystemTime,
    /// Until when a second use must be refused.
    pub until: SystemTime,
}

impl std::fmt::Debug for DpopSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DpopSettings")
            .field("algs", &self.algs)
            .field("required", &self.required)
            .field("nonces", &self.nonces)
            .finish_non_exhaustive()
    }
}

impl DpopSettings {
    /// The accepted algorithms, space-separated (`algs`).
    pub fn algs(&self) -> &str {
        &self.algs
    }

    /// Whether only DPoP-bound tokens are accepted.
    pub fn required(&self) -> bool {
        self.required
    }

    /// Checks the request's one proof for `token` (already verified as `principal`) at `now`:
    /// everything but its single use, which the caller records ([`ProofUse`]).
    pub fn check(
        &self,
        method: &Method,
        headers: &HeaderMap,
        token: &str,
        principal: &Principal,
        now: SystemTime,
    ) -> Result<ProofUse, AuthError> {
        let jkt = principal
            .dpop_jkt()
            .ok_or(AuthError::InvalidToken(InvalidToken::NotDpopBound))?;
        let proof = one_proof(headers).map_err(AuthError::InvalidDpopProof)?;
        let request = DpopRequest {
            method,
            uri: &self.htu,
            access_token: token,
            jkt,
            nonce: None,
        };
        let verified =
            verify_proof(proof, &request, &self.rules, now).map_err(AuthError::InvalidDpopProof)?;
        if let Some(nonces) = &self.nonces
            && !verified.nonce().is_some_and(|n| nonces.accepts(n, now))
        {
            return Err(AuthError::UseDpopNonce {
                nonce: nonces.issue(now),
            });
        }
        // `iat` is whole seconds: the proof is taken as issued at the end of its second, so a
        // proof made in the second the store's memory began is not refused as unknowable.
        let issued = UNIX_EPOCH + Duration::from_millis(verified.iat().saturating_mul(1000) + 999);
        // Accepted while `iat >= now - max_age` in whole seconds: remembered until then.
        let until = verified.issued_at() + self.rules.max_age_limit() + Duration::from_secs(1);
        Ok(ProofUse {
            owner: format!("dpop:{jkt}"),
            key: replay_key(jkt, verified.jti()),
            issued,
            until,
        })
    }
}

/// The request's one `DPoP` header, as text.
fn one_proof(headers: &HeaderMap) -> Result<&str, DpopError> {
    let mut values = headers.get_all(DPOP_HEADER).iter();
    let Some(value) = values.next() else {
        return Err(DpopError::MissingProof);
    };
    if values.next().is_some() {
        return Err(DpopError::MultipleProofs);
    }
    if value.len() > MAX_PROOF_BYTES {
        return Err(DpopError::Malformed);
    }
    value.to_str().map_err(|_| DpopError::Malformed)
}

/// The longest `DPoP` header read: a proof signed with a 4,096-bit RSA key, whose `jwk` carries
/// the modulus, is under 2 KiB; anything far longer is refused before it is decoded.
const MAX_PROOF_BYTES: usize = 8 * 1024;

/// The replay store's key for a proof: fixed-length whatever the client's `jti`, scoped to the
/// key (two keys may pick the same `jti`), and apart from continuation nonces (`.` is not
/// base64url).
fn replay_key(jkt: &str, jti: &str) -> String {
    let mut hash = Sha256::new();
    hash.update(jkt.as_bytes());
    hash.update([0]);
    hash.update(jti.as_bytes());
    format!("dpop.{}", URL_SAFE_NO_PAD.encode(hash.finalize()))
}

/// Whether a token presented as `Bearer` may go on: never a DPoP-bound one; an unbound one
/// only when bound tokens are not required.
pub(crate) fn admit_bearer(
    dpop: Option<&DpopSettings>,
    principal: Principal,
) -> Result<Principal, AuthError> {
    if principal.dpop_jkt().is_some() {
        return Err(AuthError::InvalidToken(InvalidToken::DpopBound));
    }
    if dpop.is_some_and(DpopSettings::required) {
        return Err(AuthError::InvalidToken(InvalidToken::NotDpopBound));
    }
    Ok(principal)
}

#[cfg(test)]
mod tests {
    use http::{HeaderMap, HeaderValue};

    use super::{DPOP_HEADER, DpopError, MAX_PROOF_BYTES, one_proof};

    fn with_proof(proof: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        if let Ok(value) = HeaderValue::from_str(proof) {
            headers.insert(DPOP_HEADER, value);
        }
        headers
    }

    #[test]
    fn a_proof_longer_than_the_bound_is_refused_before_it_is_read() {
        let at_bound = "a".repeat(MAX_PROOF_BYTES);
        assert_eq!(one_proof(&with_proof(&at_bound)), Ok(at_bound.as_str()));
        let over = "a".repeat(MAX_PROOF_BYTES + 1);
        assert_eq!(one_proof(&with_proof(&over)), Err(DpopError::Malformed));
    }
}
