//! With both JWT crypto backends compiled in (`crypto-rust` and `crypto-aws-lc`, as
//! `--all-features` does), jsonwebtoken alone would pick neither and panic on the first
//! verification. The crate's features are additive instead: aws-lc-rs is chosen, every time,
//! and the gate builds and verifies.
//!
//! Run with `cargo test --features crypto-aws-lc --test crypto_backend` (the default features
//! already include `crypto-rust`).
#![cfg(all(feature = "crypto-rust", feature = "crypto-aws-lc"))]

mod common;

use common::tokens;

use http::{HeaderMap, HeaderValue, Uri, header};
use jsonwebtoken::crypto::CryptoProvider;
use mcp_gate::policy::allow_all;
use mcp_gate::{Gate, Issuer, StaticKeys};

const ISSUER: &str = "https://as.example";
const RESOURCE: &str = "http://127.0.0.1:8080/mcp";

fn bearer(token: &str) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(
        header::AUTHORIZATION,
        HeaderValue::from_str(&format!("Bearer {token}")).unwrap(),
    );
    headers
}

#[tokio::test]
async fn both_crypto_backends_choose_aws_lc_and_verify() {
    // Before any gate: jsonwebtoken sees two backends and picks none by itself.
    assert!(CryptoProvider::try_get_default().is_none());

    let builder = Gate::builder();
    let chosen = CryptoProvider::try_get_default().expect("a backend was chosen");
    assert!(
        std::ptr::eq(chosen, &jsonwebtoken::crypto::aws_lc::DEFAULT_PROVIDER),
        "aws-lc-rs is the backend chosen when both are on"
    );

    let key = tokens::TestKey::es256("k1");
    let keys = StaticKeys::from_jwks_json(&key.jwks_json()).expect("the key set");
    let gate = builder
        .evaluate(allow_all())
        .resource(RESOURCE)
        .issuer(Issuer::with_keys(ISSUER, keys))
        .build()
        .expect("two backends build");

    // A second configuration keeps the same choice.
    let _ = Gate::builder();
    assert!(std::ptr::eq(
        CryptoProvider::try_get_default().unwrap(),
        &jsonwebtoken::crypto::aws_lc::DEFAULT_PROVIDER
    ));

    let uri: Uri = RESOURCE.parse().unwrap();
    let token = key.mint(&tokens::claims(ISSUER, RESOURCE, "mcp:read"));
    let principal = gate
        .authenticate(&bearer(&token), &uri)
        .await
        .expect("a validly signed token is admitted");
    assert_eq!(principal.subject(), Some("user-1"));

    // A signature from another key is refused, not admitted and not a panic.
    let other = tokens::TestKey::es256("k1");
    let forged = other.mint(&tokens::claims(ISSUER, RESOURCE, "mcp:read"));
    assert!(gate.authenticate(&bearer(&forged), &uri).await.is_err());
}
