//! Verification keys: which key may verify which algorithm, and where keys come from.
//!
//! The algorithm that verifies a token is never taken from the token alone. Each key carries an
//! allow-list derived from the key itself (its JWK `alg` when present, otherwise its key type
//! and curve), and a token is verified only when its `alg` is on the list of the key it names.
//! Symmetric (`oct`) keys are never loaded: a public key set can never make the layer accept an
//! HMAC token, and there is no `none` algorithm to ask for.
//!
//! ```
//! use mcp_gate::StaticKeys;
//!
//! let jwks = r#"{"keys":[{"kty":"EC","crv":"P-256","kid":"k1","alg":"ES256",
//!   "x":"MKBCTNIcKUSDii11ySs3526iDZ8AiTo7Tu6KPAqv7D4","y":"4Etl6SRW2YiLUrN5vfvVHuhp7x8PxltmWWlbbM4IFyM"},
//!   {"kty":"oct","k":"c2VjcmV0","kid":"hmac"}]}"#;
//! let keys = StaticKeys::from_jwks_json(jwks).unwrap();
//! assert_eq!(keys.len(), 1); // the symmetric key was skipped
//! ```

use std::sync::Arc;

use jsonwebtoken::jwk::{
    AlgorithmParameters, EllipticCurve, Jwk, JwkSet, KeyAlgorithm, PublicKeyUse,
};
use jsonwebtoken::{Algorithm, DecodingKey};

use crate::error::ConfigError;

/// One verification key and the algorithms it may verify.
pub(crate) struct VerificationKey {
    pub kid: Option<String>,
    pub key: DecodingKey,
    pub algorithms: Vec<Algorithm>,
}

/// The outcome of looking a key up for a token.
pub(crate) enum Lookup {
    Found(Arc<VerificationKey>),
    /// A key matches the `kid` but may not verify the token's `alg`.
    DisallowedAlgorithm,
    NotFound,
}

/// An immutable set of verification keys.
#[derive(Default)]
pub(crate) struct KeySet {
    keys: Vec<Arc<VerificationKey>>,
}

impl KeySet {
    /// Loads every usable key of a JWK set, at most `max_keys` of them.
    pub fn from_jwk_set(set: &JwkSet, max_keys: usize) -> Self {
        let keys = set
            .keys
            .iter()
            .filter_map(key_from_jwk)
            .take(max_keys)
            .map(Arc::new)
            .collect();
        Self { keys }
    }

    #[cfg(feature = "jwks")]
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Finds the key for a token's `kid` and `alg`.
    ///
    /// A token with a `kid` uses the keys with that `kid`; a token without one, or whose `kid`
    /// is unknown while the set also holds keys without a `kid`, may use a key without a `kid`
    /// only if exactly one of those allows its `alg`.
    pub fn find(&self, kid: Option<&str>, alg: Algorithm) -> Lookup {
        if let Some(kid) = kid {
            let mut named = self
                .keys
                .iter()
                .filter(|k| k.kid.as_deref() == Some(kid))
                .peekable();
            if named.peek().is_some() {
                return named
                    .find(|k| k.algorithms.contains(&alg))
                    .map_or(Lookup::DisallowedAlgorithm, |k| Lookup::Found(k.clone()));
            }
        }
        let mut unnamed = self
            .keys
            .iter()
            .filter(|k| k.kid.is_none() && k.algorithms.contains(&alg));
        match (unnamed.next(), unnamed.next()) {
            (Some(key), None) => Lookup::Found(key.clone()),
            _ => Lookup::NotFound,
        }
    }
}

/// Turns one JWK into a verification key, or skips it.
fn key_from_jwk(jwk: &Jwk) -> Option<VerificationKey> {
    if matches!(jwk.common.public_key_use, Some(PublicKeyUse::Encryption)) {
        return None;
    }
    let family = family_algorithms(&jwk.algorithm)?;
    let algorithms = match jwk.common.key_algorithm {
        Some(declared) => {
            let alg = key_algorithm(declared)?;
            if !family.contains(&alg) {
                return None;
            }
            vec![alg]
        }
        None => family,
    };
    let key = DecodingKey::from_jwk(jwk).ok()?;
    Some(VerificationKey {
        kid: jwk.common.key_id.clone(),
        key,
        algorithms,
    })
}

/// The asymmetric algorithms a key of this type may verify; `None` for symmetric or unknown keys.
fn family_algorithms(params: &AlgorithmParameters) -> Option<Vec<Algorithm>> {
    use Algorithm::*;
    match params {
        AlgorithmParameters::EllipticCurve(ec) => match ec.curve {
            EllipticCurve::P256 => Some(vec![ES256]),
            EllipticCurve::P384 => Some(vec![ES384]),
            _ => None,
        },
        AlgorithmParameters::RSA(_) => Some(vec![RS256, RS384, RS512, PS256, PS384, PS512]),
        AlgorithmParameters::OctetKeyPair(okp) => {
            matches!(okp.curve, EllipticCurve::Ed25519).then(|| vec![EdDSA])
        }
        _ => None,
    }
}

fn key_algorithm(declared: KeyAlgorithm) -> Option<Algorithm> {
    Some(match declared {
        KeyAlgorithm::ES256 => Algorithm::ES256,
        KeyAlgorithm::ES384 => Algorithm::ES384,
        KeyAlgorithm::RS256 => Algorithm::RS256,
        KeyAlgorithm::RS384 => Algorithm::RS384,
        KeyAlgorithm::RS512 => Algorithm::RS512,
        KeyAlgorithm::PS256 => Algorithm::PS256,
        KeyAlgorithm::PS384 => Algorithm::PS384,
        KeyAlgorithm::PS512 => Algorithm::PS512,
        KeyAlgorithm::EdDSA => Algorithm::EdDSA,
        _ => return None,
    })
}

/// Keys given in the configuration, never refreshed.
///
/// Built from a JWK set or from PEM public keys; symmetric keys are refused.
#[derive(Clone, Default)]
pub struct StaticKeys {
    keys: Vec<Arc<VerificationKey>>,
}

impl std::fmt::Debug for StaticKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StaticKeys")
            .field("len", &self.keys.len())
            .finish()
    }
}

impl StaticKeys {
    /// An empty key set; add keys with [`StaticKeys::with_pem`].
    pub fn new() -> Self {
        Self::default()
    }

    /// Loads the usable keys of a JWK set document (`{"keys": [...]}`).
    pub fn from_jwks_json(json: &str) -> Result<Self, ConfigError> {
        let set: JwkSet = serde_json::from_str(json)
            .map_err(|e| ConfigError::InvalidKey(format!("not a JWK set: {e}")))?;
        Self::from_jwk_set(&set)
    }

    /// Loads the usable keys of a parsed JWK set.
    pub fn from_jwk_set(set: &JwkSet) -> Result<Self, ConfigError> {
        let loaded = KeySet::from_jwk_set(set, usize::MAX);
        if loaded.is_empty() {
            return Err(ConfigError::InvalidKey(
                "the JWK set holds no usable asymmetric verification key".into(),
            ));
        }
        Ok(Self { keys: loaded.keys })
    }

    /// Adds a PEM-encoded public key that verifies exactly `algorithm`.
    pub fn with_pem(
        mut self,
        pem: &[u8],
        algorithm: Algorithm,
        kid: Option<&str>,
    ) -> Result<Self, ConfigError> {
        use Algorithm::*;
        let key = match algorithm {
            ES256 | ES384 => DecodingKey::from_ec_pem(pem),
            RS256 | RS384 | RS512 | PS256 | PS384 | PS512 => DecodingKey::from_rsa_pem(pem),
            EdDSA => DecodingKey::from_ed_pem(pem),
            _ => {
                return Err(ConfigError::InvalidKey(format!(
                    "{algorithm:?} is not an asymmetric signature algorithm"
                )));
            }
        }
        .map_err(|e| ConfigError::InvalidKey(format!("unreadable PEM key: {e}")))?;
        self.keys.push(Arc::new(VerificationKey {
            kid: kid.map(str::to_owned),
            key,
            algorithms: vec![algorithm],
        }));
        Ok(self)
    }

    /// How many keys the set holds.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether the set holds no key.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    pub(crate) fn into_key_set(self) -> KeySet {
        KeySet { keys: self.keys }
    }
}

/// Where an issuer's keys come from.
pub(crate) enum KeySource {
    /// Keys fixed in the configuration.
    Static(Arc<KeySet>),
    /// A JWK set fetched over HTTP and refreshed.
    #[cfg(feature = "jwks")]
    Remote(Arc<super::jwks::RemoteJwks>),
}

impl KeySource {
    /// The key for a token's `kid` and `alg`, refreshing a remote set if the `kid` is unknown.
    pub async fn find(
        &self,
        kid: Option<&str>,
        alg: Algorithm,
    ) -> Result<Arc<VerificationKey>, crate::auth::AuthError> {
        use crate::auth::rejection::{AuthError, InvalidToken};
        match self {
            KeySource::Static(set) => match set.find(kid, alg) {
                Lookup::Found(key) => Ok(key),
                Lookup::DisallowedAlgorithm => {
                    Err(AuthError::InvalidToken(InvalidToken::DisallowedAlgorithm))
                }
                Lookup::NotFound => Err(AuthError::InvalidToken(InvalidToken::UnknownKey)),
            },
            #[cfg(feature = "jwks")]
            KeySource::Remote(remote) => remote.find(kid, alg).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EC_JWK: &str = r#"{"kty":"EC","crv":"P-256","x":"MKBCTNIcKUSDii11ySs3526iDZ8AiTo7Tu6KPAqv7D4","y":"4Etl6SRW2YiLUrN5vfvVHuhp7x8PxltmWWlbbM4IFyM"}"#;

    fn jwk(extra: &str) -> String {
        format!("{}{}}}", &EC_JWK[..EC_JWK.len() - 1], extra)
    }

    fn set(items: &[String]) -> KeySet {
        let json = format!("{{\"keys\":[{}]}}", items.join(","));
        KeySet::from_jwk_set(&serde_json::from_str(&json).unwrap(), 8)
    }

    #[test]
    fn algorithm_comes_from_the_key() {
        let keys = set(&[jwk(r#","kid":"a""#)]);
        assert!(matches!(
            keys.find(Some("a"), Algorithm::ES256),
            Lookup::Found(_)
        ));
        assert!(matches!(
            keys.find(Some("a"), Algorithm::HS256),
            Lookup::DisallowedAlgorithm
        ));
        assert!(matches!(
            keys.find(Some("a"), Algorithm::RS256),
            Lookup::DisallowedAlgorithm
        ));
        assert!(matches!(
            keys.find(Some("b"), Algorithm::ES256),
            Lookup::NotFound
        ));
    }

    #[test]
    fn symmetric_and_encryption_keys_are_skipped() {
        let keys = set(&[
            r#"{"kty":"oct","k":"c2VjcmV0","kid":"h","alg":"HS256"}"#.to_owned(),
            jwk(r#","kid":"e","use":"enc""#),
            jwk(r#","kid":"mismatch","alg":"RS256""#),
        ]);
        assert!(keys.is_empty());
    }

    #[test]
    fn keys_without_kid_need_a_unique_match() {
        let one = set(&[jwk("")]);
        assert!(matches!(one.find(None, Algorithm::ES256), Lookup::Found(_)));
        assert!(matches!(
            one.find(Some("x"), Algorithm::ES256),
            Lookup::Found(_)
        ));
        let two = set(&[jwk(""), jwk("")]);
        assert!(matches!(two.find(None, Algorithm::ES256), Lookup::NotFound));
    }

    #[test]
    fn key_count_is_capped() {
        let many: Vec<String> = (0..20).map(|i| jwk(&format!(r#","kid":"k{i}""#))).collect();
        assert_eq!(set(&many).len(), 8);
    }

    #[test]
    fn hmac_pem_is_a_config_error() {
        assert!(
            StaticKeys::new()
                .with_pem(b"x", Algorithm::HS256, None)
                .is_err()
        );
    }
}
