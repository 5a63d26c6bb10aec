//! With both JWT crypto backends enabled, jsonwebtoken cannot pick one and would panic on the
//! first verification. The layer must refuse to build instead.
//!
//! Run with `cargo test --features aws-lc-rs --test crypto_backend` (the default features
//! already include `rust_crypto`).
#![cfg(all(feature = "rust_crypto", feature = "aws-lc-rs"))]

use mcp_gate::policy::allow_all;
use mcp_gate::{ConfigError, Gate};

#[test]
fn both_crypto_backends_are_a_build_error_not_a_request_panic() {
    let error = Gate::builder()
        .evaluate(allow_all())
        .resource("http://127.0.0.1:8080/mcp")
        .issuer("http://127.0.0.1:9000")
        .build()
        .expect_err("two backends must not build");
    assert!(matches!(error, ConfigError::CryptoBackend), "{error}");
    assert!(error.to_string().contains("exactly one of the features"));
}
