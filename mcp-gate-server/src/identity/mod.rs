//! Who is calling, told to the upstream: an opt-in (`[identity]`), short-lived ES256 JWT the
//! gateway mints with its own key for each verified caller, and the public key published as
//! a JWK set for the upstream to verify it with.
//!
//! Threat: the upstream sits behind the gateway and must know who calls, but it must never
//! see the client's token (MCP forbids passing it through: the upstream could replay it
//! anywhere its audience allows), and a plain header (`X-User: alice`) is believed by
//! anyone who reaches the upstream without the gateway. So the gateway states the caller in
//! a token only it can sign, for this upstream only (`aud`), good for a short time (`exp`,
//! 10 s to 10 min, 60 s by default). A leaked identity token lets its holder call this
//! upstream as that caller, with those scopes, until it expires, and nothing else. Its `exp`
//! is not tied to the client's token: one minted just before that token expires (or is
//! revoked) outlives it by at most `ttl`, which is why `ttl` is short. Without
//! `[identity]` the upstream gets no `Authorization` at all: unsigned identity headers are
//! never sent.
//!
//! The token (header `typ` [`TYP`], `alg` `ES256`, `kid` the RFC 7638 thumbprint of
//! the key):
//!
//! | claim | value |
//! | --- | --- |
//! | `iss` | `[identity] issuer`, by default the resource URI |
//! | `aud` | `[identity] audience`, by default the upstream URL |
//! | `sub` | the client's token's subject; absent when it has none |
//! | `client_id` | the client the token was issued to; absent when unknown |
//! | `scope` | the granted scopes, space-separated; absent when none |
//! | `token_issuer` | the authorization server that issued the client's token (`sub` is unique only per issuer) |
//! | `iat`, `exp` | minted at, expires at (seconds) |
//!
//! No `jti`. Signing costs an ECDSA signature per call, so a minted token is kept (at most
//! [`CACHE_CAPACITY`], per issuer, subject, client and scopes) and handed out again
//! while more than half of its lifetime remains; a full cache first drops stale entries
//! (at most once a second) and otherwise mints without keeping. A reused token goes in front
//! of many calls, so a `jti` would name no single call, and an upstream that refused a second
//! use of one (replay detection) would refuse the caller's next call. The token is a
//! statement of identity for a short time, like the client's own access token, which is also
//! presented on every call of its lifetime; it is not a one-time authorization of one
//! request. Replay across services is stopped by `aud`, and the replay window by `exp`.
//!
//! The key is `[identity] key-file` (PEM PKCS#8 P-256; every replica must share it), read
//! again on each reload, or one made at start and kept across reloads (each replica then has
//! its own, and a restart changes it). The public key is served at [`JWKS_PATH`] on the
//! client listener (outside the gate: the upstream fetches it without a token) and on the
//! operations listener.
//!
//! The flow: the gate puts the verified [`mcp_gate::Principal`] in the request's extensions;
//! [`Stamp`] mints its token and hands the proxy a [`crate::proxy::UpstreamIdentity`]; the
//! proxy writes it as the configured header. A request without a principal, or whose token
//! cannot be minted, is refused with a `500` and never forwarded without its identity.

mod mint;
mod stamp;

use axum::Router;
use axum::routing::get;

pub use crate::signing_key::{KeyError, SigningKey};
pub use mint::{CACHE_CAPACITY, MintError, Minter, TYP};
pub use stamp::Stamp;

use crate::config::Config;

/// Where the gateway's identity key set is published, on both listeners.
pub const JWKS_PATH: &str = "/.well-known/mcp-gate/identity-jwks.json";

/// How long a verifier may keep the key set (a reload that changes the key is seen after at
/// most this; verifiers also fetch again on an unknown `kid`).
const JWKS_MAX_AGE: &str = "public, max-age=300";

/// The minter `[identity]` asks for, signing with the key file or else `random` (the key
/// made at start); `None` without `[identity]`. A key file that cannot be used is
/// `Err((key, why))`.
pub fn minter(
    config: &Config,
    random: &SigningKey,
) -> Result<Option<Minter>, (&'static str, String)> {
    let Some(identity) = &config.file.identity else {
        return Ok(None);
    };
    let identity = identity.get_ref();
    let key = match &identity.key_file {
        Some(path) => SigningKey::from_pem_file(&config.resolve(path))
            .map_err(|error| ("[identity] key-file", error.to_string()))?,
        None => {
            tracing::warn!(
                kid = random.kid(),
                "[identity] has no key-file: identity tokens are signed with a key made at start; \
                 replicas each have their own, and a restart changes it"
            );
            random.clone()
        }
    };
    let audience = identity
        .audience
        .clone()
        .unwrap_or_else(|| config.file.upstream.url.as_str().to_owned());
    let issuer = identity
        .issuer
        .clone()
        .unwrap_or_else(|| config.file.resource.uri.get_ref().as_str().to_owned());
    let header = identity.header_name()?;
    Ok(Some(Minter::new(
        key,
        audience,
        issuer,
        identity.ttl.0,
        header,
    )))
}

/// The route publishing `minter`'s public key at [`JWKS_PATH`]; none without a minter.
pub fn jwks_router(minter: Option<&Minter>) -> Router {
    let Some(minter) = minter else {
        return Router::new();
    };
    let body = serde_json::to_string(&minter.key().jwks()).unwrap_or_default();
    Router::new().route(
        JWKS_PATH,
        get(move || {
            let body = body.clone();
            async move {
                (
                    [
                        (http::header::CONTENT_TYPE, "application/json"),
                        (http::header::CACHE_CONTROL, JWKS_MAX_AGE),
                    ],
                    body,
                )
            }
        }),
    )
}

/// How the banner names the identity sent upstream.
pub fn describe(config: &Config, minter: Option<&Minter>) -> String {
    let Some(minter) = minter else {
        return "none (the upstream gets no Authorization)".to_owned();
    };
    let source = match config
        .file
        .identity
        .as_ref()
        .and_then(|i| i.get_ref().key_file.as_ref())
    {
        Some(path) => format!("key {}", config.resolve(path).display()),
        None => "key made at start".to_owned(),
    };
    format!(
        "ES256 JWT in {} for {}, kid {} ({source}); keys at {JWKS_PATH}",
        minter.header(),
        minter.audience(),
        minter.key().kid()
    )
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use http::Request;
    use tower::ServiceExt as _;

    use super::*;

    fn config(identity: &str) -> Config {
        let text = format!(
            "[upstream]\nurl = \"http://127.0.0.1:3000/mcp\"\n[resource]\nuri = \"http://127.0.0.1:8080/mcp\"\n[[issuer]]\nurl = \"http://127.0.0.1:9000\"\n[policy]\nallow-all = true\n{identity}"
        );
        Config::parse(Path::new("/nowhere/gateway.toml"), &text).unwrap()
    }

    #[test]
    fn defaults_name_the_upstream_and_the_resource_and_sign_with_the_start_key() {
        let random = SigningKey::generate().unwrap();
        assert!(minter(&config(""), &random).unwrap().is_none());
        let minter = minter(&config("[identity]\n"), &random).unwrap().unwrap();
        assert_eq!(minter.audience(), "http://127.0.0.1:3000/mcp");
        assert_eq!(minter.issuer(), "http://127.0.0.1:8080/mcp");
        assert_eq!(minter.key().kid(), random.kid());
        assert_eq!(minter.header(), "authorization");
    }

    #[test]
    fn a_key_file_relative_to_the_config_is_read_and_a_bad_one_refused() {
        let dir = tempfile::tempdir().unwrap();
        let random = SigningKey::generate().unwrap();
        let text = "[upstream]\nurl = \"http://127.0.0.1:3000/mcp\"\n[resource]\nuri = \"http://127.0.0.1:8080/mcp\"\n[[issuer]]\nurl = \"http://127.0.0.1:9000\"\n[policy]\nallow-all = true\n[identity]\nkey-file = \"keys/id.pem\"\naudience = \"urn:upstream\"\n";
        let config = Config::parse(&dir.path().join("gateway.toml"), text).unwrap();
        let (key, why) = super::minter(&config, &random).unwrap_err();
        assert_eq!(key, "[identity] key-file");
        assert!(why.contains("keys/id.pem"), "{why}");

        std::fs::create_dir(dir.path().join("keys")).unwrap();
        let secret = p256::SecretKey::from_slice(&[0x42; 32]).unwrap();
        let pem = p256::pkcs8::EncodePrivateKey::to_pkcs8_pem(&secret, p256::pkcs8::LineEnding::LF)
            .unwrap();
        std::fs::write(dir.path().join("keys/id.pem"), pem.as_bytes()).unwrap();
        let minter = super::minter(&config, &random).unwrap().unwrap();
        assert_ne!(minter.key().kid(), random.kid());
        assert_eq!(minter.audience(), "urn:upstream");
    }

    /// `GET` [`JWKS_PATH`] on `router`.
    async fn fetch_jwks(router: Router) -> axum::response::Response {
        let request = Request::get(JWKS_PATH)
            .body(axum::body::Body::empty())
            .unwrap();
        router.oneshot(request).await.unwrap()
    }

    #[tokio::test]
    async fn the_key_set_is_served_with_the_public_key_only() {
        let random = SigningKey::generate().unwrap();
        let minter = minter(&config("[identity]\n"), &random).unwrap();
        let answer = fetch_jwks(jwks_router(minter.as_ref())).await;
        assert_eq!(answer.status(), 200);
        assert_eq!(answer.headers()["content-type"], "application/json");
        let bytes = axum::body::to_bytes(answer.into_body(), 1 << 16)
            .await
            .unwrap();
        let set: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(set["keys"][0]["kid"], random.kid());
        assert!(set["keys"][0].get("d").is_none());
        assert_eq!(fetch_jwks(jwks_router(None)).await.status(), 404);
    }
}
