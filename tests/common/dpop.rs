//! A DPoP client's key in Rust (RFC 9449): proofs for the token endpoint and for the gate,
//! each part of which a test may change, and DPoP-bound tokens from `oidc-provider`.
#![allow(dead_code)]

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::jwk::ThumbprintHash;
use serde_json::{Map, Value, json};
use sha2::Digest as _;

use super::peers::{AuthServer, CLIENT, SECRET};
use super::tokens::{TestKey, now};

/// A client's DPoP key: its public JWK goes in every proof's header, its thumbprint is the
/// `cnf.jkt` of the tokens bound to it.
pub struct Prover {
    key: TestKey,
    jwk: Value,
    /// The key's SHA-256 JWK thumbprint (RFC 7638), base64url.
    pub jkt: String,
}

/// `ath`: the base64url SHA-256 of `token`.
pub fn ath(token: &str) -> String {
    URL_SAFE_NO_PAD.encode(sha2::Sha256::digest(token.as_bytes()))
}

/// A `jti` no other proof of this process has.
fn fresh_jti() -> String {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).expect("random bytes");
    URL_SAFE_NO_PAD.encode(bytes)
}

impl Prover {
    /// A fresh ES256 key.
    pub fn new() -> Self {
        let key = TestKey::es256("dpop");
        let mut jwk = serde_json::to_value(&key.jwk).expect("a JWK serialises");
        // Only the public key's members (a `kid` or `use` would be harmless, but is not sent).
        if let Value::Object(members) = &mut jwk {
            members.retain(|name, _| matches!(name.as_str(), "kty" | "crv" | "x" | "y"));
        }
        let jkt = key
            .jwk
            .thumbprint(ThumbprintHash::SHA256)
            .expect("thumbprint");
        Self { key, jwk, jkt }
    }

    /// The claims of a valid proof for `method` at `htu`, for `token` when given.
    pub fn claims(&self, method: &str, htu: &str, token: Option<&str>) -> Map<String, Value> {
        let mut claims = Map::new();
        claims.insert("jti".into(), json!(fresh_jti()));
        claims.insert("htm".into(), json!(method));
        claims.insert("htu".into(), json!(htu));
        claims.insert("iat".into(), json!(now()));
        if let Some(token) = token {
            claims.insert("ath".into(), json!(ath(token)));
        }
        claims
    }

    /// A proof with these claims, signed with this key.
    pub fn sign(&self, claims: &Map<String, Value>) -> String {
        let header = json!({"typ": "dpop+jwt", "alg": "ES256", "jwk": self.jwk});
        let h = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&header).expect("header"));
        let p = URL_SAFE_NO_PAD.encode(serde_json::to_vec(claims).expect("claims"));
        self.key.sign_segments(&h, &p)
    }

    /// A valid proof for `method` at `htu` with `token`.
    pub fn proof(&self, method: &str, htu: &str, token: &str) -> String {
        self.sign(&self.claims(method, htu, Some(token)))
    }

    /// A `client_credentials` token of [`CLIENT`] for `resource` holding `scope`, bound to this
    /// key: the token request carries a proof (RFC 9449 §5). Returns the token and its
    /// `token_type`.
    pub async fn bound_token(
        &self,
        auth: &AuthServer,
        scope: &str,
        resource: &str,
    ) -> (String, String) {
        self.bound_token_of(auth, CLIENT, scope, resource).await
    }

    /// [`bound_token`](Self::bound_token) of `client` (every test client has [`SECRET`]).
    pub async fn bound_token_of(
        &self,
        auth: &AuthServer,
        client: &str,
        scope: &str,
        resource: &str,
    ) -> (String, String) {
        let proof = self.sign(&self.claims("POST", &auth.token_endpoint, None));
        let response = auth
            .token_response(client, SECRET, Some(scope), Some(resource), Some(&proof))
            .await;
        let token = response["access_token"]
            .as_str()
            .unwrap_or_else(|| panic!("no access_token in {response}"))
            .to_owned();
        let kind = response["token_type"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        (token, kind)
    }
}
