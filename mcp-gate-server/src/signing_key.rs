//! An ES256 signing key: read from a PEM PKCS#8 file or made at start, and its public half as
//! a JWK set. The upstream identity token's key (`identity`), and the development issuer's
//! (`dev_issuer`; the example server and the demo compile this file beside it). The private
//! half never leaves this module except as the `jsonwebtoken` key that signs.

use std::path::Path;
use std::sync::Arc;

use jsonwebtoken::jwk::{Jwk, JwkSet, PublicKeyUse, ThumbprintHash};
use jsonwebtoken::{Algorithm, EncodingKey};
use p256::elliptic_curve::Generate as _;
use p256::pkcs8::{DecodePrivateKey as _, EncodePrivateKey as _};

/// Why a signing key could not be had.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// The key file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file holds no unencrypted PKCS#8 P-256 private key.
    #[error(
        "{path} is not an unencrypted PEM PKCS#8 EC P-256 private key (`-----BEGIN PRIVATE KEY-----`); \
         make one with `openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out {path}`"
    )]
    NotP256Pkcs8 {
        /// The file.
        path: String,
    },
    /// The system's random source failed while a key was made.
    #[error("no random key could be made: {0}")]
    Random(String),
    /// The key could not be encoded (its DER, its JWK or its thumbprint).
    #[error("the key could not be encoded: {0}")]
    Encode(String),
}

/// An ES256 signing key with its key id (the RFC 7638 thumbprint of its public JWK). Cheap
/// to clone; `Debug` shows the key id only.
#[derive(Clone)]
pub struct SigningKey(Arc<KeyData>);

struct KeyData {
    encoding: EncodingKey,
    kid: String,
    public: Jwk,
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningKey")
            .field("kid", &self.0.kid)
            .finish_non_exhaustive()
    }
}

impl SigningKey {
    /// A new key from the system's random source.
    pub fn generate() -> Result<Self, KeyError> {
        let secret =
            p256::SecretKey::try_generate().map_err(|error| KeyError::Random(error.to_string()))?;
        Self::from_secret(&secret)
    }

    /// The key in the PEM file at `path`.
    pub fn from_pem_file(path: &Path) -> Result<Self, KeyError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| KeyError::Read {
            path: shown.clone(),
            source,
        })?;
        Self::from_pkcs8_pem(&text).map_err(|error| match error {
            KeyError::NotP256Pkcs8 { .. } => KeyError::NotP256Pkcs8 { path: shown },
            other => other,
        })
    }

    /// The key in `pem` (`-----BEGIN PRIVATE KEY-----`, P-256).
    pub fn from_pkcs8_pem(pem: &str) -> Result<Self, KeyError> {
        let secret = p256::SecretKey::from_pkcs8_pem(pem).map_err(|_| KeyError::NotP256Pkcs8 {
            path: "the key".to_owned(),
        })?;
        Self::from_secret(&secret)
    }

    fn from_secret(secret: &p256::SecretKey) -> Result<Self, KeyError> {
        let der = secret
            .to_pkcs8_der()
            .map_err(|error| KeyError::Encode(error.to_string()))?;
        let encoding = EncodingKey::from_ec_der(der.as_bytes());
        let mut public = Jwk::from_encoding_key(&encoding, Algorithm::ES256)
            .map_err(|error| KeyError::Encode(error.to_string()))?;
        let kid = public
            .thumbprint(ThumbprintHash::SHA256)
            .map_err(|error| KeyError::Encode(error.to_string()))?;
        public.common.key_id = Some(kid.clone());
        public.common.public_key_use = Some(PublicKeyUse::Signature);
        Ok(Self(Arc::new(KeyData {
            encoding,
            kid,
            public,
        })))
    }

    /// The key id: the base64url SHA-256 JWK thumbprint (RFC 7638) of the public key.
    pub fn kid(&self) -> &str {
        &self.0.kid
    }

    /// What signs.
    pub(crate) fn encoding(&self) -> &EncodingKey {
        &self.0.encoding
    }

    /// The public key as a JWK set: `kty`, `crv`, `x`, `y`, `kid`, `use` `sig`, `alg` `ES256`.
    pub fn jwks(&self) -> JwkSet {
        JwkSet {
            keys: vec![self.0.public.clone()],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PEM: &str = "-----BEGIN PRIVATE KEY-----\nMIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgERERERERERERERERERERERERERERERERERERERERHhRANCAAQC\n-----END PRIVATE KEY-----\n";

    #[test]
    fn a_generated_key_publishes_its_public_half_only_under_its_thumbprint() {
        let key = SigningKey::generate().unwrap();
        let set = serde_json::to_value(key.jwks()).unwrap();
        let jwk = &set["keys"][0];
        assert_eq!(set["keys"].as_array().unwrap().len(), 1);
        assert_eq!(jwk["kty"], "EC");
        assert_eq!(jwk["crv"], "P-256");
        assert_eq!(jwk["alg"], "ES256");
        assert_eq!(jwk["use"], "sig");
        assert_eq!(jwk["kid"], key.kid());
        assert!(
            jwk.get("d").is_none(),
            "the private scalar is published: {jwk}"
        );
        // RFC 7638: SHA-256 over the required members in lexicographic order.
        let canonical = format!(
            r#"{{"crv":"P-256","kty":"EC","x":"{}","y":"{}"}}"#,
            jwk["x"].as_str().unwrap(),
            jwk["y"].as_str().unwrap()
        );
        let parsed: Jwk = serde_json::from_str(&canonical).unwrap();
        assert_eq!(
            parsed.thumbprint(ThumbprintHash::SHA256).unwrap(),
            key.kid()
        );
        assert_ne!(SigningKey::generate().unwrap().kid(), key.kid());
    }

    #[test]
    fn a_pem_file_gives_the_same_key_each_time_and_other_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let secret = p256::SecretKey::from_slice(&[0x11; 32]).unwrap();
        let pem = secret
            .to_pkcs8_pem(p256::pkcs8::LineEnding::LF)
            .unwrap()
            .to_string();
        let path = dir.path().join("identity.pem");
        std::fs::write(&path, &pem).unwrap();
        let one = SigningKey::from_pem_file(&path).unwrap();
        let two = SigningKey::from_pem_file(&path).unwrap();
        assert_eq!(one.kid(), two.kid());

        let sec1 = secret.to_sec1_pem(p256::pkcs8::LineEnding::LF).unwrap();
        std::fs::write(&path, sec1.as_bytes()).unwrap();
        let error = SigningKey::from_pem_file(&path).unwrap_err().to_string();
        assert!(
            error.contains("not an unencrypted PEM PKCS#8 EC P-256"),
            "{error}"
        );
        assert!(error.contains(&path.display().to_string()), "{error}");
        assert!(SigningKey::from_pkcs8_pem(PEM).is_err());
        let missing = SigningKey::from_pem_file(&dir.path().join("none.pem")).unwrap_err();
        assert!(matches!(missing, KeyError::Read { .. }));
    }
}
