//! Test keys and token minting, for unit-style tests that do not need a real issuer.
//!
//! Real-issuer tests use `oidc-provider` (see `peers.rs`); these helpers are for the many
//! hostile-input cases a real issuer will never sign on request (expired, wrong audience,
//! `crit`, odd claim types...).
#![allow(dead_code)]

use std::time::{SystemTime, UNIX_EPOCH};

use jsonwebtoken::jwk::{Jwk, JwkSet};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use p256::pkcs8::EncodePrivateKey;
use serde_json::{Value, json};

/// A P-256 signing key with its public JWK set.
pub struct TestKey {
    pub kid: String,
    pub encoding: EncodingKey,
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
        let der = secret.to_pkcs8_der().expect("pkcs8");
        let encoding = EncodingKey::from_ec_der(der.as_bytes());
        let mut jwk = Jwk::from_encoding_key(&encoding, Algorithm::ES256).expect("jwk");
        jwk.common.key_id = Some(kid.to_owned());
        Self {
            kid: kid.to_owned(),
            encoding,
            jwk,
        }
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
