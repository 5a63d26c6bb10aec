//! Test keys and token minting, for unit-style tests that do not need a real issuer.
//!
//! Real-issuer tests use `oidc-provider` (see `peers.rs`); these helpers are for the many
//! hostile-input cases a real issuer will never sign on request (expired, wrong audience,
//! `crit`, odd claim types...).
//!
//! The fuzz targets (`fuzz/src/lib.rs`) include this same file, so it needs nothing beyond
//! `jsonwebtoken`, `p256`, `getrandom` and `serde_json`.
#![allow(dead_code)]

use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::jwk::{Jwk, JwkSet};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use p256::ecdsa::signature::Signer;
use p256::pkcs8::EncodePrivateKey;
use serde_json::{Value, json};

/// A P-256 signing key with its public JWK set. It signs two ways: through `jsonwebtoken`
/// (`mint`, from a header and claims) and directly with p256 over segments the caller encoded
/// (`sign_segments`, several times cheaper in debug builds, and free to sign what
/// `jsonwebtoken` would refuse to write).
pub struct TestKey {
    pub kid: String,
    pub encoding: EncodingKey,
    pub signing: p256::ecdsa::SigningKey,
    pub jwk: Jwk,
}

impl TestKey {
    /// A fresh ES256 key with the given `kid`.
    pub fn es256(kid: &str) -> Self {
        let secret = loop {
            let mut bytes = [0u8; 32];
            getrandom::fill(&mut bytes).expect("random bytes");
            if let Ok(secret) = p256::SecretKey::from_slice(&bytes) {
                break secret;
            }
        };
        Self::from_secret(kid, &secret)
    }

    /// The ES256 key with this scalar (for runs that must replay alike in every process).
    pub fn es256_fixed(kid: &str, scalar: [u8; 32]) -> Self {
        let secret = p256::SecretKey::from_slice(&scalar).expect("a valid P-256 scalar");
        Self::from_secret(kid, &secret)
    }

    fn from_secret(kid: &str, secret: &p256::SecretKey) -> Self {
        let der = secret.to_pkcs8_der().expect("pkcs8");
        let encoding = EncodingKey::from_ec_der(der.as_bytes());
        let mut jwk = Jwk::from_encoding_key(&encoding, Algorithm::ES256).expect("jwk");
        jwk.common.key_id = Some(kid.to_owned());
        Self {
            kid: kid.to_owned(),
            encoding,
            signing: p256::ecdsa::SigningKey::from(secret),
            jwk,
        }
    }

    /// The public JWK set holding this key.
    pub fn jwk_set(&self) -> JwkSet {
        JwkSet {
            keys: vec![self.jwk.clone()],
        }
    }

    /// The base64url ES256 signature (`r || s`) of a JWS signing input.
    pub fn signature(&self, signing_input: &str) -> String {
        let signature: p256::ecdsa::Signature = self.signing.sign(signing_input.as_bytes());
        URL_SAFE_NO_PAD.encode(signature.to_bytes())
    }

    /// A compact JWS over already encoded header and payload segments.
    pub fn sign_segments(&self, header: &str, payload: &str) -> String {
        let input = format!("{header}.{payload}");
        let signature = self.signature(&input);
        format!("{input}.{signature}")
    }

    /// The public JWK set document holding this key.
    pub fn jwks_json(&self) -> String {
        jwks_json(&[self])
    }

    /// The default header: ES256, `typ: at+jwt`, this key's `kid`.
    pub fn header(&self) -> Header {
        let mut header = Header::new(Algorithm::ES256);
        header.typ = Some("at+jwt".into());
        header.kid = Some(self.kid.clone());
        header
    }

    /// Signs `claims` with this key and its default header.
    pub fn mint(&self, claims: &Value) -> String {
        self.mint_with(&self.header(), claims)
    }

    /// Signs `claims` with this key and the given header.
    pub fn mint_with(&self, header: &Header, claims: &Value) -> String {
        jsonwebtoken::encode(header, claims, &self.encoding).expect("encode")
    }
}

/// A JWK set document holding several keys.
pub fn jwks_json(keys: &[&TestKey]) -> String {
    serde_json::to_string(&JwkSet {
        keys: keys.iter().map(|k| k.jwk.clone()).collect(),
    })
    .expect("jwks")
}

/// Seconds since the Unix epoch.
pub fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_secs()
}

/// Claims of a valid access token: `iss`, `aud`, `sub`, `client_id`, `iat`, `exp` (now + 300 s)
/// and `scope`.
pub fn claims(issuer: &str, audience: &str, scope: &str) -> Value {
    json!({
        "iss": issuer,
        "aud": audience,
        "sub": "user-1",
        "client_id": "client-1",
        "iat": now(),
        "exp": now() + 300,
        "scope": scope,
    })
}
