//! Which JWT crypto backend verifies signatures.
//!
//! jsonwebtoken verifies through one process-wide `CryptoProvider`. It picks one by itself
//! when exactly one of its backends is compiled in, and none when both are, which Cargo's
//! feature unification makes easy: `cargo build --all-features`, or `features =
//! ["crypto-aws-lc"]` without `default-features = false`. This crate's features are additive
//! instead: with both `crypto-rust` and `crypto-aws-lc` on, aws-lc-rs verifies, the backend
//! that had to be asked for by name. A provider the application installed itself
//! (`jsonwebtoken::crypto::CryptoProvider::install_default`) always wins, if it did so first.

/// Makes the choice above before a gate is configured. Idempotent, and cheap after the first
/// call. With one backend or none compiled in, it does nothing: jsonwebtoken's own choice (or
/// the application's provider) stands, and with none [`crate::ConfigError::CryptoBackend`]
/// is returned at build.
pub(crate) fn select() {
    #[cfg(all(feature = "crypto-rust", feature = "crypto-aws-lc"))]
    {
        // `Err` means a provider is installed already (the application's, or ours from an
        // earlier call), which is kept.
        let _ = jsonwebtoken::crypto::CryptoProvider::install_default(
            &jsonwebtoken::crypto::aws_lc::DEFAULT_PROVIDER,
        );
    }
}
