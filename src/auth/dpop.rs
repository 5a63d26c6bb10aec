//! DPoP proof verification (RFC 9449 §4.3), on its own: one proof, one request, one answer.
//! The layer's use of it (scheme, binding, nonce, replay store) is `auth/dpop_bind.rs`.
//!
//! A DPoP-bound access token is worth nothing without the private key its `cnf.jkt` names:
//! each request carries a fresh proof, a JWS signed with that key over the request's method
//! and URL, the hash of the token, a unique `jti` and an issue time. This module checks such
//! a proof against the request it came with; it keeps no state.
//!
//! Threats it answers: a stolen token replayed without the key (the thumbprint of the proof's
//! key must equal `cnf.jkt`); a proof lifted from one request and sent with another method,
//! URL or token (`htm`, `htu`, `ath`); an old proof kept for later (`iat` window, and a
//! server-chosen `nonce` when one is expected); a proof signed with a shared secret, with no
//! signature at all (`none`), or carrying the private key itself (asymmetric algorithms from
//! an allow-list only; a `jwk` with private members is refused). What it does not answer on
//! its own: a proof replayed within its window. [`VerifiedProof::jti`] must be marked used in
//! a replay store shared by every replica, for at least [`DpopProofRules::replay_window`].
//!
//! Checks run cheapest first: the compact JWS shape, the header (`crit`, `typ`, `alg`,
//! `jwk`), the payload's JSON, then the signature, then the claims (`jti`, `htm`, `htu`,
//! `iat`, `ath`, the key's thumbprint, `nonce`). No claim is trusted before the signature
//! holds. Errors never quote the proof or the token.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::jwk::{AlgorithmParameters, Jwk, ThumbprintHash};
use jsonwebtoken::{Algorithm, DecodingKey};
use serde_json::{Map, Value};
use sha2::{Digest as _, Sha256};
use url::Url;

/// The JWK members that carry private or symmetric key material (RFC 7518 §6.2.2, §6.3.2,
/// §6.4.1). A proof's `jwk` holding any of them is refused.
const PRIVATE_MEMBERS: [&str; 8] = ["d", "p", "q", "dp", "dq", "qi", "oth", "k"];

/// The asymmetric algorithms accepted by default.
const DEFAULT_ALGORITHMS: [Algorithm; 9] = [
    Algorithm::ES256,
    Algorithm::ES384,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::EdDSA,
];

/// What a DPoP proof must satisfy beyond the request it came with: which algorithms may sign
/// it and how old or how far ahead its `iat` may be.
///
/// The defaults: the asymmetric algorithms ES256, ES384, PS256, PS384, PS512, RS256, RS384,
/// RS512 and EdDSA; a proof at most 60 seconds old; 5 seconds of clock leeway into the future.
/// A proof is accepted when `now - max_age <= iat <= now + leeway`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DpopProofRules {
    algorithms: Vec<Algorithm>,
    max_age: Duration,
    leeway: Duration,
}

impl Default for DpopProofRules {
    fn default() -> Self {
        Self {
            algorithms: DEFAULT_ALGORITHMS.to_vec(),
            max_age: Duration::from_secs(60),
            leeway: Duration::from_secs(5),
        }
    }
}

impl DpopProofRules {
    /// The default rules (see the type's documentation).
    pub fn new() -> Self {
        Self::default()
    }

    /// Accepts exactly these algorithms. Symmetric ones (HS256, HS384, HS512) are dropped:
    /// a proof's key is public, so a MAC over it proves nothing. An empty result refuses
    /// every proof.
    #[must_use]
    pub fn algorithms(mut self, algorithms: impl IntoIterator<Item = Algorithm>) -> Self {
        let mut kept: Vec<Algorithm> = Vec::new();
        for alg in algorithms {
            if !is_symmetric(alg) && !kept.contains(&alg) {
                kept.push(alg);
            }
        }
        self.algorithms = kept;
        self
    }

    /// How old a proof's `iat` may be (60 seconds by default).
    #[must_use]
    pub fn max_age(mut self, max_age: Duration) -> Self {
        self.max_age = max_age;
        self
    }

    /// How far into the future a proof's `iat` may be, for clocks that disagree (5 seconds by
    /// default).
    #[must_use]
    pub fn leeway(mut self, leeway: Duration) -> Self {
        self.leeway = leeway;
        self
    }

    /// The accepted algorithms, in the order given (for `WWW-Authenticate: DPoP algs="…"` and
    /// `dpop_signing_alg_values_supported`).
    pub fn allowed_algorithms(&self) -> &[Algorithm] {
        &self.algorithms
    }

    /// How old a proof's `iat` may be.
    pub fn max_age_limit(&self) -> Duration {
        self.max_age
    }

    /// How far into the future a proof's `iat` may be.
    pub fn leeway_limit(&self) -> Duration {
        self.leeway
    }

    /// How long a proof stays acceptable from the first moment it could be accepted
    /// (`max_age + leeway`): the least time a replay store must remember a used `jti`.
    pub fn replay_window(&self) -> Duration {
        self.max_age.saturating_add(self.leeway)
    }
}

fn is_symmetric(alg: Algorithm) -> bool {
    matches!(alg, Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512)
}

/// The request a DPoP proof is checked against, as the resource server sees it.
#[derive(Debug, Clone, Copy)]
pub struct DpopRequest<'a> {
    /// The request's HTTP method (`htm` must equal it exactly).
    pub method: &'a http::Method,
    /// The request's target URI as an absolute URL, as the resource server is reached (its
    /// public scheme, host and port, not those behind a proxy). Query and fragment are
    /// ignored.
    pub uri: &'a str,
    /// The access token presented with the proof (`ath` must be its SHA-256 hash).
    pub access_token: &'a str,
    /// The token's `cnf.jkt`: the SHA-256 JWK thumbprint (RFC 7638) of the key it is bound
    /// to, base64url without padding.
    pub jkt: &'a str,
    /// The nonce the server expects in the proof, if it asks for one (RFC 9449 §8, §9).
    pub nonce: Option<&'a str>,
}

/// What a proof that passed every check established.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedProof {
    jti: String,
    iat: u64,
    thumbprint: String,
    nonce: Option<String>,
}

impl VerifiedProof {
    /// The proof's unique identifier, to be marked used in the replay store (for at least
    /// [`DpopProofRules::replay_window`]) before the request is let through.
    pub fn jti(&self) -> &str {
        &self.jti
    }

    /// The proof's `iat`, in seconds since the Unix epoch.
    pub fn iat(&self) -> u64 {
        self.iat
    }

    /// The proof's `iat` as a point in time.
    pub fn issued_at(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(self.iat)
    }

    /// The SHA-256 JWK thumbprint (RFC 7638) of the proof's key, base64url without padding:
    /// equal to the token's `cnf.jkt`.
    pub fn jwk_thumbprint(&self) -> &str {
        &self.thumbprint
    }

    /// The proof's `nonce`, when it has one (a string): for a caller that checks nonces
    /// itself (several may be valid at once) and gave [`DpopRequest::nonce`] as `None`.
    pub fn nonce(&self) -> Option<&str> {
        self.nonce.as_deref()
    }
}

/// Why a DPoP proof was refused: one variant per check. The texts never quote the proof or
/// the token; [`DpopError::code`] gives a stable identifier for logs and metrics.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DpopError {
    /// Not a compact JWS of three base64url parts whose header and payload are JSON objects.
    #[error("the DPoP proof is not a well-formed compact JWS")]
    Malformed,
    /// The header names critical extensions (`crit`), none of which is understood here.
    #[error("the DPoP proof's header has critical extensions (crit)")]
    CriticalHeader,
    /// The header's `typ` is not `dpop+jwt`.
    #[error("the DPoP proof's typ is not dpop+jwt")]
    WrongType,
    /// The header's `alg` is missing, unknown, symmetric, `none`, or not in the allow-list.
    #[error("the DPoP proof's alg is not allowed")]
    AlgorithmNotAllowed,
    /// The header carries no `jwk`.
    #[error("the DPoP proof's header has no jwk")]
    MissingJwk,
    /// The header's `jwk` holds private or symmetric key material.
    #[error("the DPoP proof's jwk holds private key material")]
    PrivateKeyInJwk,
    /// The header's `jwk` is not a public key this verifier can use (not a key, or an RSA
    /// modulus under 2048 bits).
    #[error("the DPoP proof's jwk is not a usable public key")]
    InvalidJwk,
    /// The signature does not verify with the header's `jwk` and `alg`.
    #[error("the DPoP proof's signature does not verify")]
    BadSignature,
    /// A required claim is missing.
    #[error("the DPoP proof has no {claim} claim")]
    MissingClaim {
        /// The claim's name.
        claim: &'static str,
    },
    /// A claim has the wrong type (or `jti` is empty).
    #[error("the DPoP proof's {claim} claim has the wrong type")]
    InvalidClaim {
        /// The claim's name.
        claim: &'static str,
    },
    /// `htm` is not the request's method.
    #[error("the DPoP proof's htm does not match the request's method")]
    MethodMismatch,
    /// `htu` is not the request's URI (after normalisation, without query and fragment).
    #[error("the DPoP proof's htu does not match the request's URI")]
    UriMismatch,
    /// The request's own URI (given by the server, not the client) is not an absolute URL.
    #[error("the request's URI is not an absolute URL")]
    RequestUri,
    /// `iat` is older than the allowed age.
    #[error("the DPoP proof was issued too long ago")]
    IssuedTooLongAgo,
    /// `iat` is further in the future than the clock leeway.
    #[error("the DPoP proof was issued in the future")]
    IssuedInFuture,
    /// No `ath` claim, though the proof comes with an access token.
    #[error("the DPoP proof has no ath claim")]
    MissingAth,
    /// `ath` is not the hash of the access token presented with it.
    #[error("the DPoP proof's ath does not match the access token")]
    AthMismatch,
    /// The proof's key is not the one the access token is bound to (`cnf.jkt`).
    #[error("the DPoP proof's key is not the one the access token is bound to")]
    JktMismatch,
    /// The server expects a nonce and the proof has none.
    #[error("the DPoP proof has no nonce, and one is required")]
    MissingNonce,
    /// The proof's nonce is not the one the server expects.
    #[error("the DPoP proof's nonce is not the expected one")]
    NonceMismatch,
    /// The request carries no `DPoP` header, though its token is presented with the DPoP
    /// scheme.
    #[error("the request has no DPoP proof")]
    MissingProof,
    /// The request carries more than one `DPoP` header (RFC 9449 §4.3: exactly one).
    #[error("the request has more than one DPoP header")]
    MultipleProofs,
    /// The proof's `jti` was used before, within the proof's window (a replay).
    #[error("the DPoP proof was used before")]
    Replayed,
    /// The proof was issued before the replay store's memory began (a restart of the process
    /// or of Redis): whether it was used cannot be told, so it is refused.
    #[error("the DPoP proof predates the replay store's memory")]
    ReplayUnknowable,
    /// No JWT crypto backend is available to verify signatures (a build without
    /// `crypto-rust` or `crypto-aws-lc`, and no provider installed).
    #[error("no JWT crypto backend is available to verify DPoP proofs")]
    NoCryptoBackend,
}

impl DpopError {
    /// A stable, machine-readable identifier of the failed check.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Malformed => "malformed",
            Self::CriticalHeader => "critical_header",
            Self::WrongType => "typ",
            Self::AlgorithmNotAllowed => "alg",
            Self::MissingJwk => "missing_jwk",
            Self::PrivateKeyInJwk => "private_jwk",
            Self::InvalidJwk => "invalid_jwk",
            Self::BadSignature => "signature",
            Self::MissingClaim { .. } => "missing_claim",
            Self::InvalidClaim { .. } => "invalid_claim",
            Self::MethodMismatch => "htm",
            Self::UriMismatch => "htu",
            Self::RequestUri => "request_uri",
            Self::IssuedTooLongAgo => "iat_too_old",
            Self::IssuedInFuture => "iat_in_future",
            Self::MissingAth => "missing_ath",
            Self::AthMismatch => "ath",
            Self::JktMismatch => "jkt",
            Self::MissingNonce => "missing_nonce",
            Self::NonceMismatch => "nonce",
            Self::MissingProof => "missing_proof",
            Self::MultipleProofs => "multiple_proofs",
            Self::Replayed => "replayed",
            Self::ReplayUnknowable => "replay_unknowable",
            Self::NoCryptoBackend => "no_crypto_backend",
        }
    }

    /// [`code`](Self::code) prefixed with `dpop_`, as a refusal's reason in logs and metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Malformed => "dpop_malformed",
            Self::CriticalHeader => "dpop_critical_header",
            Self::WrongType => "dpop_typ",
            Self::AlgorithmNotAllowed => "dpop_alg",
            Self::MissingJwk => "dpop_missing_jwk",
            Self::PrivateKeyInJwk => "dpop_private_jwk",
            Self::InvalidJwk => "dpop_invalid_jwk",
            Self::BadSignature => "dpop_signature",
            Self::MissingClaim { .. } => "dpop_missing_claim",
            Self::InvalidClaim { .. } => "dpop_invalid_claim",
            Self::MethodMismatch => "dpop_htm",
            Self::UriMismatch => "dpop_htu",
            Self::RequestUri => "dpop_request_uri",
            Self::IssuedTooLongAgo => "dpop_iat_too_old",
            Self::IssuedInFuture => "dpop_iat_in_future",
            Self::MissingAth => "dpop_missing_ath",
            Self::AthMismatch => "dpop_ath",
            Self::JktMismatch => "dpop_jkt",
            Self::MissingNonce => "dpop_missing_nonce",
            Self::NonceMismatch => "dpop_nonce",
            Self::MissingProof => "dpop_missing_proof",
            Self::MultipleProofs => "dpop_multiple_proofs",
            Self::Replayed => "dpop_replayed",
            Self::ReplayUnknowable => "dpop_replay_unknowable",
            Self::NoCryptoBackend => "dpop_no_crypto_backend",
        }
    }
}

/// Verifies one DPoP proof (the `DPoP` header's value) against the request it came with, at
/// time `now`.
///
/// On success the caller still has to mark [`VerifiedProof::jti`] used in its replay store
/// (and refuse the request if it was used already): this function keeps no state.
pub fn verify_proof(
    proof: &str,
    request: &DpopRequest<'_>,
    rules: &DpopProofRules,
    now: SystemTime,
) -> Result<VerifiedProof, DpopError> {
    // Shape: three base64url segments, header and payload JSON objects.
    let mut parts = proof.split('.');
    let (Some(header_b64), Some(payload_b64), Some(signature_b64), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(DpopError::Malformed);
    };
    if signature_b64.is_empty() {
        return Err(DpopError::Malformed);
    }
    let header = json_object(header_b64)?;

    // Header: no critical extensions, the DPoP type, an allowed algorithm, a public key.
    if header.contains_key("crit") {
        return Err(DpopError::CriticalHeader);
    }
    match header.get("typ") {
        Some(Value::String(typ)) if is_dpop_type(typ) => {}
        _ => return Err(DpopError::WrongType),
    }
    let alg = match header.get("alg") {
        Some(Value::String(alg)) => alg
            .parse::<Algorithm>()
            .map_err(|_| DpopError::AlgorithmNotAllowed)?,
        _ => return Err(DpopError::AlgorithmNotAllowed),
    };
    if is_symmetric(alg) || !rules.algorithms.contains(&alg) {
        return Err(DpopError::AlgorithmNotAllowed);
    }
    let jwk_value = match header.get("jwk") {
        None => return Err(DpopError::MissingJwk),
        Some(Value::Object(jwk)) => jwk,
        Some(_) => return Err(DpopError::InvalidJwk),
    };
    if PRIVATE_MEMBERS.iter().any(|m| jwk_value.contains_key(*m)) {
        return Err(DpopError::PrivateKeyInJwk);
    }
    let jwk: Jwk = serde_json::from_value(Value::Object(jwk_value.clone()))
        .map_err(|_| DpopError::InvalidJwk)?;
    if let AlgorithmParameters::RSA(rsa) = &jwk.algorithm
        && !rsa_modulus_is_strong(&rsa.n)
    {
        return Err(DpopError::InvalidJwk);
    }
    let key = DecodingKey::from_jwk(&jwk).map_err(|_| DpopError::InvalidJwk)?;

    let claims = json_object(payload_b64)?;

    // Signature, with the key the proof carries.
    crate::crypto_backend::select();
    if jsonwebtoken::crypto::CryptoProvider::try_get_default().is_none() {
        return Err(DpopError::NoCryptoBackend);
    }
    let signing_input_len = header_b64.len() + 1 + payload_b64.len();
    let signing_input = proof.get(..signing_input_len).ok_or(DpopError::Malformed)?;
    match jsonwebtoken::crypto::verify(signature_b64, signing_input.as_bytes(), &key, alg) {
        Ok(true) => {}
        Ok(false) | Err(_) => return Err(DpopError::BadSignature),
    }

    // Claims: present, typed, then compared with the request.
    let jti = match claims.get("jti") {
        None => return Err(DpopError::MissingClaim { claim: "jti" }),
        Some(Value::String(jti)) if !jti.is_empty() => jti,
        Some(_) => return Err(DpopError::InvalidClaim { claim: "jti" }),
    };
    let htm = string_claim(&claims, "htm")?;
    let htu = string_claim(&claims, "htu")?;
    let iat = match claims.get("iat") {
        None => return Err(DpopError::MissingClaim { claim: "iat" }),
        Some(Value::Number(n)) if n.is_i64() || n.is_u64() => n,
        Some(_) => return Err(DpopError::InvalidClaim { claim: "iat" }),
    };

    if htm != request.method.as_str() {
        return Err(DpopError::MethodMismatch);
    }
    let expected_uri = normalised_uri(request.uri).ok_or(DpopError::RequestUri)?;
    if normalised_uri(htu).as_deref() != Some(expected_uri.as_str()) {
        return Err(DpopError::UriMismatch);
    }

    let now_secs = i128::from(
        now.duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
    );
    let iat_secs: i128 = match (iat.as_i64(), iat.as_u64()) {
        (Some(i), _) => i128::from(i),
        (None, Some(u)) => i128::from(u),
        (None, None) => return Err(DpopError::InvalidClaim { claim: "iat" }),
    };
    if iat_secs > now_secs + i128::from(rules.leeway.as_secs()) {
        return Err(DpopError::IssuedInFuture);
    }
    if iat_secs < now_secs - i128::from(rules.max_age.as_secs()) {
        return Err(DpopError::IssuedTooLongAgo);
    }
    let iat = u64::try_from(iat_secs).map_err(|_| DpopError::IssuedTooLongAgo)?;

    let ath = match claims.get("ath") {
        None => return Err(DpopError::MissingAth),
        Some(Value::String(ath)) => ath,
        Some(_) => return Err(DpopError::InvalidClaim { claim: "ath" }),
    };
    let expected_ath = URL_SAFE_NO_PAD.encode(Sha256::digest(request.access_token.as_bytes()));
    if !constant_time_eq(ath.as_bytes(), expected_ath.as_bytes()) {
        return Err(DpopError::AthMismatch);
    }

    let thumbprint = jwk
        .thumbprint(ThumbprintHash::SHA256)
        .map_err(|_| DpopError::InvalidJwk)?;
    if !constant_time_eq(thumbprint.as_bytes(), request.jkt.as_bytes()) {
        return Err(DpopError::JktMismatch);
    }

    if let Some(expected) = request.nonce {
        match claims.get("nonce") {
            None => return Err(DpopError::MissingNonce),
            Some(Value::String(nonce))
                if constant_time_eq(nonce.as_bytes(), expected.as_bytes()) => {}
            Some(_) => return Err(DpopError::NonceMismatch),
        }
    }
    let nonce = match claims.get("nonce") {
        Some(Value::String(nonce)) => Some(nonce.clone()),
        _ => None,
    };

    Ok(VerifiedProof {
        jti: jti.clone(),
        iat,
        thumbprint,
        nonce,
    })
}

/// The smallest RSA modulus accepted, in bits (RFC 7518 §3.3 and §3.5).
const MIN_RSA_MODULUS_BITS: usize = 2048;

/// Whether a JWK's base64url `n` is an RSA modulus of at least 2048 bits.
fn rsa_modulus_is_strong(n: &str) -> bool {
    let Ok(modulus) = URL_SAFE_NO_PAD.decode(n) else {
        return false;
    };
    let mut significant = modulus.iter().skip_while(|b| **b == 0);
    let Some(first) = significant.next() else {
        return false;
    };
    let bits = 8 * significant.count() + (8 - first.leading_zeros() as usize);
    bits >= MIN_RSA_MODULUS_BITS
}

/// A base64url (unpadded) segment holding a JSON object.
fn json_object(segment: &str) -> Result<Map<String, Value>, DpopError> {
    let bytes = URL_SAFE_NO_PAD
        .decode(segment)
        .map_err(|_| DpopError::Malformed)?;
    match serde_json::from_slice::<Value>(&bytes) {
        Ok(Value::Object(map)) => Ok(map),
        _ => Err(DpopError::Malformed),
    }
}

fn string_claim<'m>(
    claims: &'m Map<String, Value>,
    claim: &'static str,
) -> Result<&'m str, DpopError> {
    match claims.get(claim) {
        None => Err(DpopError::MissingClaim { claim }),
        Some(Value::String(s)) => Ok(s),
        Some(_) => Err(DpopError::InvalidClaim { claim }),
    }
}

/// `dpop+jwt` or `application/dpop+jwt`, compared case-insensitively (RFC 7515 §4.1.9).
fn is_dpop_type(typ: &str) -> bool {
    let media_type = match typ.get(..12) {
        Some(prefix) if prefix.eq_ignore_ascii_case("application/") => typ.get(12..).unwrap_or(typ),
        _ => typ,
    };
    media_type.eq_ignore_ascii_case("dpop+jwt")
}

/// An absolute URL without query and fragment, in the form two equivalent URLs share:
/// scheme and host lower-cased, the default port dropped, dot segments removed (all by the
/// `url` crate's parser), percent-encodings upper-cased and those of unreserved characters
/// decoded (RFC 3986 §6.2.2). `None` when it is not an absolute hierarchical URL.
fn normalised_uri(raw: &str) -> Option<String> {
    let mut url = Url::parse(raw).ok()?;
    if url.cannot_be_a_base() {
        return None;
    }
    url.set_query(None);
    url.set_fragment(None);
    Some(normalise_percent_encoding(url.as_str()))
}

fn normalise_percent_encoding(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let (Some(hi), Some(lo)) = (
                bytes.get(i + 1).and_then(|b| hex_value(*b)),
                bytes.get(i + 2).and_then(|b| hex_value(*b)),
            )
        {
            let byte = hi << 4 | lo;
            if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
                out.push(char::from(byte));
            } else {
                out.push('%');
                out.push(char::from(b"0123456789ABCDEF"[usize::from(hi)]));
                out.push(char::from(b"0123456789ABCDEF"[usize::from(lo)]));
            }
            i += 3;
            continue;
        }
        // `s` is a serialised URL: ASCII only, so every byte is a char.
        out.push(char::from(bytes[i]));
        i += 1;
    }
    out
}

fn hex_value(b: u8) -> Option<u8> {
    char::from(b)
        .to_digit(16)
        .and_then(|d| u8::try_from(d).ok())
}

/// Equality whose time depends on the lengths only.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// A test signer of proofs, shared by this module's tests and the layer's (`enforce/proof.rs`).
#[cfg(test)]
pub(crate) mod test_key {
    use base64::Engine as _;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use jsonwebtoken::Algorithm;
    use jsonwebtoken::jwk::{Jwk, ThumbprintHash};
    use p256::ecdsa::signature::Signer as _;
    use p256::pkcs8::EncodePrivateKey as _;
    use serde_json::{Map, Value};

    /// An ES256 key: p256 signs (cheaper than `jsonwebtoken::encode` in debug builds), the
    /// public JWK and its thumbprint go into headers and requests.
    pub(crate) struct Key {
        pub signing: p256::ecdsa::SigningKey,
        pub jwk: Map<String, Value>,
        pub jkt: String,
    }

    impl Key {
        /// The key whose scalar is `scalar` repeated.
        pub fn fixed(scalar: u8) -> Self {
            let secret = p256::SecretKey::from_slice(&[scalar; 32]).expect("a P-256 scalar");
            let der = secret.to_pkcs8_der().expect("pkcs8");
            let encoding = jsonwebtoken::EncodingKey::from_ec_der(der.as_bytes());
            let jwk = Jwk::from_encoding_key(&encoding, Algorithm::ES256).expect("jwk");
            let jkt = jwk.thumbprint(ThumbprintHash::SHA256).expect("thumbprint");
            let Ok(Value::Object(jwk)) = serde_json::to_value(&jwk) else {
                panic!("a JWK serialises to an object");
            };
            Self {
                signing: p256::ecdsa::SigningKey::from(&secret),
                jwk,
                jkt,
            }
        }

        /// A compact JWS over these header and claims, signed with this key.
        pub fn sign(&self, header: &Map<String, Value>, claims: &Map<String, Value>) -> String {
            let h = URL_SAFE_NO_PAD.encode(serde_json::to_vec(header).expect("header"));
            let p = URL_SAFE_NO_PAD.encode(serde_json::to_vec(claims).expect("claims"));
            self.sign_segments(&h, &p)
        }

        /// A compact JWS over these encoded segments.
        pub fn sign_segments(&self, h: &str, p: &str) -> String {
            let input = format!("{h}.{p}");
            let signature: p256::ecdsa::Signature = self.signing.sign(input.as_bytes());
            format!("{input}.{}", URL_SAFE_NO_PAD.encode(signature.to_bytes()))
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::LazyLock;

    use proptest::prelude::*;
    use serde_json::json;

    use super::test_key::Key;
    use super::*;

    const NOW: u64 = 1_800_000_000;
    const TOKEN: &str = "eyJhbGciOiJFUzI1NiJ9.an-access-token.sig";
    const URI: &str = "https://mcp.example.com/mcp";
    static POST: http::Method = http::Method::POST;

    static KEY: LazyLock<Key> = LazyLock::new(|| Key::fixed(0x11));
    static OTHER_KEY: LazyLock<Key> = LazyLock::new(|| Key::fixed(0x22));

    fn ath(token: &str) -> String {
        URL_SAFE_NO_PAD.encode(Sha256::digest(token.as_bytes()))
    }

    fn header() -> Map<String, Value> {
        let Value::Object(h) = json!({"typ": "dpop+jwt", "alg": "ES256", "jwk": KEY.jwk}) else {
            unreachable!()
        };
        h
    }

    fn claims() -> Map<String, Value> {
        let Value::Object(c) = json!({
            "jti": "e1j3V_bKic8-LAEB", "htm": "POST", "htu": URI, "iat": NOW, "ath": ath(TOKEN),
        }) else {
            unreachable!()
        };
        c
    }

    fn request() -> DpopRequest<'static> {
        DpopRequest {
            method: &POST,
            uri: URI,
            access_token: TOKEN,
            jkt: &KEY.jkt,
            nonce: None,
        }
    }

    fn at_now() -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(NOW)
    }

    fn check(proof: &str, request: &DpopRequest<'_>) -> Result<VerifiedProof, DpopError> {
        verify_proof(proof, request, &DpopProofRules::default(), at_now())
    }

    fn with_header(edit: impl FnOnce(&mut Map<String, Value>)) -> String {
        let mut h = header();
        edit(&mut h);
        KEY.sign(&h, &claims())
    }

    fn with_claims(edit: impl FnOnce(&mut Map<String, Value>)) -> String {
        let mut c = claims();
        edit(&mut c);
        KEY.sign(&header(), &c)
    }

    #[test]
    fn a_valid_proof_is_accepted() {
        let verified = check(&KEY.sign(&header(), &claims()), &request()).expect("valid");
        assert_eq!(verified.jti(), "e1j3V_bKic8-LAEB");
        assert_eq!(verified.iat(), NOW);
        assert_eq!(verified.issued_at(), at_now());
        assert_eq!(verified.jwk_thumbprint(), KEY.jkt);
    }

    #[test]
    fn the_thumbprint_is_rfc_7638() {
        // The canonical form by hand: required members only, sorted, no whitespace.
        let (crv, x, y) = (&KEY.jwk["crv"], &KEY.jwk["x"], &KEY.jwk["y"]);
        let canonical = format!(r#"{{"crv":{crv},"kty":"EC","x":{x},"y":{y}}}"#);
        assert_eq!(
            URL_SAFE_NO_PAD.encode(Sha256::digest(canonical.as_bytes())),
            KEY.jkt
        );
    }

    #[test]
    fn equivalent_uris_and_media_types_are_accepted() {
        for htu in [
            "HTTPS://MCP.Example.COM:443/mcp",
            "https://mcp.example.com/a/../mcp?q=1#frag",
            "https://mcp.example.com/./%6dcp",
        ] {
            let proof = with_claims(|c| {
                c.insert("htu".into(), json!(htu));
            });
            assert!(check(&proof, &request()).is_ok(), "{htu}");
        }
        let request = DpopRequest {
            uri: "https://mcp.example.com/mcp?session=1",
            ..request()
        };
        assert!(check(&KEY.sign(&header(), &claims()), &request).is_ok());
        let proof = with_header(|h| {
            h.insert("typ".into(), json!("application/DPoP+JWT"));
        });
        assert!(check(&proof, &request).is_ok());
    }

    #[test]
    fn a_nonce_is_checked_when_expected() {
        let expecting = DpopRequest {
            nonce: Some("n-1"),
            ..request()
        };
        let with_nonce = |n: Value| {
            with_claims(|c| {
                c.insert("nonce".into(), n);
            })
        };
        assert!(check(&with_nonce(json!("n-1")), &expecting).is_ok());
        assert_eq!(
            check(&with_nonce(json!("n-2")), &expecting),
            Err(DpopError::NonceMismatch)
        );
        assert_eq!(
            check(&with_nonce(json!(1)), &expecting),
            Err(DpopError::NonceMismatch)
        );
        assert_eq!(
            check(&KEY.sign(&header(), &claims()), &expecting),
            Err(DpopError::MissingNonce)
        );
        // Not expected: a nonce in the proof is ignored.
        assert!(check(&with_nonce(json!("n-2")), &request()).is_ok());
    }

    #[test]
    fn the_iat_window_has_its_edges() {
        let rules = DpopProofRules::new()
            .max_age(Duration::from_secs(30))
            .leeway(Duration::from_secs(2));
        assert_eq!(rules.replay_window(), Duration::from_secs(32));
        let at = |iat: u64| {
            let proof = with_claims(|c| {
                c.insert("iat".into(), json!(iat));
            });
            verify_proof(&proof, &request(), &rules, at_now())
        };
        assert!(at(NOW - 30).is_ok());
        assert_eq!(at(NOW - 31), Err(DpopError::IssuedTooLongAgo));
        assert!(at(NOW + 2).is_ok());
        assert_eq!(at(NOW + 3), Err(DpopError::IssuedInFuture));
    }

    #[test]
    fn the_algorithm_allow_list_holds() {
        let es384_only = DpopProofRules::new().algorithms([Algorithm::ES384, Algorithm::HS256]);
        assert_eq!(es384_only.allowed_algorithms(), [Algorithm::ES384]);
        assert_eq!(
            verify_proof(
                &KEY.sign(&header(), &claims()),
                &request(),
                &es384_only,
                at_now()
            ),
            Err(DpopError::AlgorithmNotAllowed)
        );
        assert!(
            DpopProofRules::new()
                .allowed_algorithms()
                .iter()
                .all(|a| !is_symmetric(*a))
        );
    }

    #[test]
    fn each_check_refuses_with_its_own_error() {
        let good = KEY.sign(&header(), &claims());
        let (h, p, s) = {
            let mut it = good.split('.');
            (
                it.next().unwrap_or_default().to_owned(),
                it.next().unwrap_or_default().to_owned(),
                it.next().unwrap_or_default().to_owned(),
            )
        };
        let cases: Vec<(&str, String, DpopRequest<'static>, DpopError)> = vec![
            (
                "two parts",
                format!("{h}.{p}"),
                request(),
                DpopError::Malformed,
            ),
            (
                "four parts",
                format!("{good}.x"),
                request(),
                DpopError::Malformed,
            ),
            (
                "no signature",
                format!("{h}.{p}."),
                request(),
                DpopError::Malformed,
            ),
            (
                "padded",
                format!("{h}=.{p}.{s}"),
                request(),
                DpopError::Malformed,
            ),
            (
                "header not an object",
                KEY.sign_segments(&URL_SAFE_NO_PAD.encode("[1]"), &p),
                request(),
                DpopError::Malformed,
            ),
            (
                "payload not JSON",
                KEY.sign_segments(&h, &URL_SAFE_NO_PAD.encode("{")),
                request(),
                DpopError::Malformed,
            ),
            (
                "crit",
                with_header(|h| {
                    h.insert("crit".into(), json!(["exp"]));
                }),
                request(),
                DpopError::CriticalHeader,
            ),
            (
                "typ jwt",
                with_header(|h| {
                    h.insert("typ".into(), json!("JWT"));
                }),
                request(),
                DpopError::WrongType,
            ),
            (
                "no typ",
                with_header(|h| {
                    h.remove("typ");
                }),
                request(),
                DpopError::WrongType,
            ),
            (
                "alg none",
                with_header(|h| {
                    h.insert("alg".into(), json!("none"));
                }),
                request(),
                DpopError::AlgorithmNotAllowed,
            ),
            (
                "alg HS256",
                with_header(|h| {
                    h.insert("alg".into(), json!("HS256"));
                }),
                request(),
                DpopError::AlgorithmNotAllowed,
            ),
            (
                "no jwk",
                with_header(|h| {
                    h.remove("jwk");
                }),
                request(),
                DpopError::MissingJwk,
            ),
            (
                "private jwk",
                with_header(|h| {
                    if let Some(Value::Object(jwk)) = h.get_mut("jwk") {
                        jwk.insert("d".into(), json!("AAAA"));
                    }
                }),
                request(),
                DpopError::PrivateKeyInJwk,
            ),
            (
                "jwk not a key",
                with_header(|h| {
                    h.insert("jwk".into(), json!({"kty": "EC"}));
                }),
                request(),
                DpopError::InvalidJwk,
            ),
            (
                "signed by another key",
                OTHER_KEY.sign(&header(), &claims()),
                request(),
                DpopError::BadSignature,
            ),
            (
                "claims changed after signing",
                format!(
                    "{h}.{}.{s}",
                    URL_SAFE_NO_PAD.encode(
                        serde_json::to_vec(&{
                            let mut c = claims();
                            c.insert("htm".into(), json!("GET"));
                            c
                        })
                        .unwrap_or_default()
                    )
                ),
                request(),
                DpopError::BadSignature,
            ),
            (
                "no jti",
                with_claims(|c| {
                    c.remove("jti");
                }),
                request(),
                DpopError::MissingClaim { claim: "jti" },
            ),
            (
                "empty jti",
                with_claims(|c| {
                    c.insert("jti".into(), json!(""));
                }),
                request(),
                DpopError::InvalidClaim { claim: "jti" },
            ),
            (
                "no htm",
                with_claims(|c| {
                    c.remove("htm");
                }),
                request(),
                DpopError::MissingClaim { claim: "htm" },
            ),
            (
                "htu a number",
                with_claims(|c| {
                    c.insert("htu".into(), json!(7));
                }),
                request(),
                DpopError::InvalidClaim { claim: "htu" },
            ),
            (
                "iat a float",
                with_claims(|c| {
                    c.insert("iat".into(), json!(1.5e9));
                }),
                request(),
                DpopError::InvalidClaim { claim: "iat" },
            ),
            (
                "htm lower case",
                with_claims(|c| {
                    c.insert("htm".into(), json!("post"));
                }),
                request(),
                DpopError::MethodMismatch,
            ),
            (
                "htu another path",
                with_claims(|c| {
                    c.insert("htu".into(), json!("https://mcp.example.com/other"));
                }),
                request(),
                DpopError::UriMismatch,
            ),
            (
                "htu plain http",
                with_claims(|c| {
                    c.insert("htu".into(), json!("http://mcp.example.com/mcp"));
                }),
                request(),
                DpopError::UriMismatch,
            ),
            (
                "htu relative",
                with_claims(|c| {
                    c.insert("htu".into(), json!("/mcp"));
                }),
                request(),
                DpopError::UriMismatch,
            ),
            (
                "request uri relative",
                good.clone(),
                DpopRequest {
                    uri: "/mcp",
                    ..request()
                },
                DpopError::RequestUri,
            ),
            (
                "iat old",
                with_claims(|c| {
                    c.insert("iat".into(), json!(NOW - 61));
                }),
                request(),
                DpopError::IssuedTooLongAgo,
            ),
            (
                "iat negative",
                with_claims(|c| {
                    c.insert("iat".into(), json!(-1));
                }),
                request(),
                DpopError::IssuedTooLongAgo,
            ),
            (
                "iat ahead",
                with_claims(|c| {
                    c.insert("iat".into(), json!(NOW + 6));
                }),
                request(),
                DpopError::IssuedInFuture,
            ),
            (
                "iat huge",
                with_claims(|c| {
                    c.insert("iat".into(), json!(u64::MAX));
                }),
                request(),
                DpopError::IssuedInFuture,
            ),
            (
                "no ath",
                with_claims(|c| {
                    c.remove("ath");
                }),
                request(),
                DpopError::MissingAth,
            ),
            (
                "ath of another token",
                with_claims(|c| {
                    c.insert("ath".into(), json!(ath("another token")));
                }),
                request(),
                DpopError::AthMismatch,
            ),
            (
                "token bound to another key",
                good.clone(),
                DpopRequest {
                    jkt: &OTHER_KEY.jkt,
                    ..request()
                },
                DpopError::JktMismatch,
            ),
        ];
        for (name, proof, request, expected) in cases {
            let error = check(&proof, &request).expect_err(name);
            assert_eq!(error, expected, "{name}");
            let text = error.to_string();
            assert!(!text.contains(&proof) && !text.contains(TOKEN), "{name}");
        }
    }

    #[test]
    fn rsa_keys_under_2048_bits_are_refused() {
        // Not real keys: the size check comes before the signature, a key of the right size
        // then fails at the signature.
        let rsa = |bytes: usize| {
            let mut n = vec![0xC5u8; bytes];
            n.insert(0, 0);
            with_header(|h| {
                h.insert("alg".into(), json!("RS256"));
                h.insert(
                    "jwk".into(),
                    json!({"kty": "RSA", "n": URL_SAFE_NO_PAD.encode(&n), "e": "AQAB"}),
                );
            })
        };
        assert_eq!(check(&rsa(255), &request()), Err(DpopError::InvalidJwk));
        assert_eq!(check(&rsa(256), &request()), Err(DpopError::BadSignature));
        assert!(!rsa_modulus_is_strong("!"));
        assert!(!rsa_modulus_is_strong(
            &URL_SAFE_NO_PAD.encode([0x7Fu8; 256])
        ));
    }

    #[test]
    fn codes_are_distinct() {
        let errors = [
            DpopError::Malformed,
            DpopError::CriticalHeader,
            DpopError::WrongType,
            DpopError::AlgorithmNotAllowed,
            DpopError::MissingJwk,
            DpopError::PrivateKeyInJwk,
            DpopError::InvalidJwk,
            DpopError::BadSignature,
            DpopError::MissingClaim { claim: "jti" },
            DpopError::InvalidClaim { claim: "jti" },
            DpopError::MethodMismatch,
            DpopError::UriMismatch,
            DpopError::RequestUri,
            DpopError::IssuedTooLongAgo,
            DpopError::IssuedInFuture,
            DpopError::MissingAth,
            DpopError::AthMismatch,
            DpopError::JktMismatch,
            DpopError::MissingNonce,
            DpopError::NonceMismatch,
            DpopError::MissingProof,
            DpopError::MultipleProofs,
            DpopError::Replayed,
            DpopError::ReplayUnknowable,
            DpopError::NoCryptoBackend,
        ];
        let mut codes: Vec<&str> = errors.iter().map(DpopError::code).collect();
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), errors.len());
        for error in &errors {
            assert_eq!(error.reason(), format!("dpop_{}", error.code()));
        }
    }

    /// One way to break a proof (or its binding), with its parameters.
    #[derive(Debug, Clone)]
    enum Mutation {
        DropSegment(usize),
        Crit,
        Typ(String),
        Alg(&'static str),
        NoJwk,
        PrivateMember(&'static str, String),
        SignatureBit(usize, u8),
        OtherSigner,
        DropClaim(&'static str),
        ClaimType(&'static str, Value),
        Htm(String),
        HtuPath(String),
        HtuHost(String),
        IatOld(u64),
        IatFuture(u64),
        NoAth,
        AthOf(String),
        Jkt(String),
        NoNonce,
        Nonce(String),
    }

    const EXPECTED_NONCE: &str = "server-nonce-1";

    fn mutation() -> impl Strategy<Value = Mutation> {
        let claim = prop::sample::select(vec!["jti", "htm", "htu", "iat"]);
        let wrong_type = prop_oneof![
            any::<bool>().prop_map(Value::Bool),
            Just(Value::Null),
            Just(json!(["x"])),
            Just(json!({"a": 1})),
        ];
        prop_oneof![
            (0usize..3).prop_map(Mutation::DropSegment),
            Just(Mutation::Crit),
            "[ -~]{0,20}"
                .prop_filter("not the DPoP type", |t| !is_dpop_type(t))
                .prop_map(Mutation::Typ),
            prop::sample::select(vec![
                "none", "HS256", "HS384", "HS512", "ES512", "es256", ""
            ])
            .prop_map(Mutation::Alg),
            Just(Mutation::NoJwk),
            (
                prop::sample::select(PRIVATE_MEMBERS.to_vec()),
                "[A-Za-z0-9_-]{1,40}"
            )
                .prop_map(|(m, v)| Mutation::PrivateMember(m, v)),
            (0usize..64, 1u8..=255).prop_map(|(i, x)| Mutation::SignatureBit(i, x)),
            Just(Mutation::OtherSigner),
            claim.clone().prop_map(Mutation::DropClaim),
            (claim, wrong_type).prop_map(|(c, v)| Mutation::ClaimType(c, v)),
            "[A-Za-z]{1,10}"
                .prop_filter("another method", |m| m != "POST")
                .prop_map(Mutation::Htm),
            "[a-z0-9]{1,12}"
                .prop_filter("another path", |p| p != "mcp")
                .prop_map(Mutation::HtuPath),
            "[a-z][a-z0-9]{0,10}"
                .prop_filter("another host", |h| h != "mcp")
                .prop_map(Mutation::HtuHost),
            (61u64..1_000_000_000).prop_map(Mutation::IatOld),
            (6u64..1_000_000_000).prop_map(Mutation::IatFuture),
            Just(Mutation::NoAth),
            "[ -~]{0,64}"
                .prop_filter("another token", |t| t != TOKEN)
                .prop_map(Mutation::AthOf),
            "[A-Za-z0-9_-]{0,43}".prop_map(Mutation::Jkt),
            Just(Mutation::NoNonce),
            "[ -~]{0,32}"
                .prop_filter("another nonce", |n| n != EXPECTED_NONCE)
                .prop_map(Mutation::Nonce),
        ]
    }

    /// The proof this mutation makes, the `cnf.jkt` of the request it comes with, and the
    /// error it must meet. The request expects [`EXPECTED_NONCE`].
    fn mutated(mutation: &Mutation) -> (String, String, DpopError) {
        let mut h = header();
        let mut c = claims();
        c.insert("nonce".into(), json!(EXPECTED_NONCE));
        let mut signer: &Key = &KEY;
        let mut jkt = KEY.jkt.clone();
        let expected = match mutation {
            Mutation::DropSegment(_) => DpopError::Malformed,
            Mutation::SignatureBit(..) => DpopError::BadSignature,
            Mutation::Crit => {
                h.insert("crit".into(), json!(["htu"]));
                DpopError::CriticalHeader
            }
            Mutation::Typ(t) => {
                h.insert("typ".into(), json!(t));
                DpopError::WrongType
            }
            Mutation::Alg(a) => {
                h.insert("alg".into(), json!(a));
                DpopError::AlgorithmNotAllowed
            }
            Mutation::NoJwk => {
                h.remove("jwk");
                DpopError::MissingJwk
            }
            Mutation::PrivateMember(m, v) => {
                if let Some(Value::Object(jwk)) = h.get_mut("jwk") {
                    jwk.insert((*m).to_owned(), json!(v));
                }
                DpopError::PrivateKeyInJwk
            }
            Mutation::OtherSigner => {
                signer = &OTHER_KEY;
                DpopError::BadSignature
            }
            Mutation::DropClaim(claim) => {
                c.remove(*claim);
                DpopError::MissingClaim { claim }
            }
            Mutation::ClaimType(claim, v) => {
                c.insert((*claim).to_owned(), v.clone());
                DpopError::InvalidClaim { claim }
            }
            Mutation::Htm(m) => {
                c.insert("htm".into(), json!(m));
                DpopError::MethodMismatch
            }
            Mutation::HtuPath(p) => {
                c.insert("htu".into(), json!(format!("https://mcp.example.com/{p}")));
                DpopError::UriMismatch
            }
            Mutation::HtuHost(host) => {
                c.insert(
                    "htu".into(),
                    json!(format!("https://{host}.example.com/mcp")),
                );
                DpopError::UriMismatch
            }
            Mutation::IatOld(by) => {
                c.insert("iat".into(), json!(NOW - by));
                DpopError::IssuedTooLongAgo
            }
            Mutation::IatFuture(by) => {
                c.insert("iat".into(), json!(NOW + by));
                DpopError::IssuedInFuture
            }
            Mutation::NoAth => {
                c.remove("ath");
                DpopError::MissingAth
            }
            Mutation::AthOf(token) => {
                c.insert("ath".into(), json!(ath(token)));
                DpopError::AthMismatch
            }
            Mutation::Jkt(j) => {
                if *j != KEY.jkt {
                    jkt.clone_from(j);
                } else {
                    jkt.clone_from(&OTHER_KEY.jkt);
                }
                DpopError::JktMismatch
            }
            Mutation::NoNonce => {
                c.remove("nonce");
                DpopError::MissingNonce
            }
            Mutation::Nonce(n) => {
                c.insert("nonce".into(), json!(n));
                DpopError::NonceMismatch
            }
        };
        let mut proof = signer.sign(&h, &c);
        match mutation {
            Mutation::DropSegment(i) => {
                let mut parts: Vec<&str> = proof.split('.').collect();
                parts.remove(*i);
                proof = parts.join(".");
            }
            Mutation::SignatureBit(i, x) => {
                let (input, signature) = proof.rsplit_once('.').unwrap_or_default();
                let mut bytes = URL_SAFE_NO_PAD.decode(signature).unwrap_or_default();
                if let Some(b) = bytes.get_mut(*i) {
                    *b ^= *x;
                }
                proof = format!("{input}.{}", URL_SAFE_NO_PAD.encode(&bytes));
            }
            _ => {}
        }
        (proof, jkt, expected)
    }

    fn expecting_nonce(jkt: &str) -> DpopRequest<'_> {
        DpopRequest {
            jkt,
            nonce: Some(EXPECTED_NONCE),
            ..request()
        }
    }

    /// 10,000 cases unless `PROPTEST_CASES` says otherwise.
    fn cases() -> u32 {
        std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(10_000)
    }

    #[test]
    fn the_unmutated_proptest_proof_is_accepted() {
        let mut c = claims();
        c.insert("nonce".into(), json!(EXPECTED_NONCE));
        assert!(check(&KEY.sign(&header(), &c), &expecting_nonce(&KEY.jkt)).is_ok());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(cases()))]

        /// Every proof broken in one way is refused, with the error of that check.
        #[test]
        fn mutated_proofs_are_refused_with_their_error(mutation in mutation()) {
            let (proof, jkt, expected) = mutated(&mutation);
            prop_assert_eq!(check(&proof, &expecting_nonce(&jkt)), Err(expected));
        }
    }
}
