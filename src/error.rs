//! Configuration errors: everything wrong with how the layer was set up, found when it is built.
//!
//! Request-time refusals are a different type, [`AuthError`](crate::AuthError): a
//! `ConfigError` never reaches a client, and an `AuthError` never stops a server from starting.

#[cfg(feature = "cedar")]
mod cedar;

#[cfg(feature = "cedar")]
pub use cedar::{CedarError, Diagnostic};

/// A mistake in the layer's configuration, reported by [`GateBuilder::build`](crate::GateBuilder::build).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// No resource URI was given.
    #[error("the resource URI is required: call GateBuilder::resource")]
    MissingResource,
    /// The resource URI cannot be used as an RFC 8707 resource indicator.
    #[error("invalid resource URI {value:?}: {reason}")]
    InvalidResource {
        /// The URI as given.
        value: String,
        /// Why it was refused.
        reason: &'static str,
    },
    /// No issuer was configured and introspection is off, so no token could ever be accepted.
    #[error("no token source: configure at least one issuer or token introspection")]
    NoTokenSource,
    /// An issuer identifier is not a usable URL.
    #[error("invalid issuer {value:?}: {reason}")]
    InvalidIssuer {
        /// The issuer as given.
        value: String,
        /// Why it was refused.
        reason: &'static str,
    },
    /// The same issuer was configured twice.
    #[error("issuer {0:?} is configured twice")]
    DuplicateIssuer(String),
    /// A URL option (JWKS URI, introspection endpoint, documentation link) is unusable.
    #[error("invalid URL for {field}: {value:?}: {reason}")]
    InvalidUrl {
        /// Which option.
        field: &'static str,
        /// The URL as given.
        value: String,
        /// Why it was refused.
        reason: &'static str,
    },
    /// A static verification key could not be read.
    #[error("invalid verification key: {0}")]
    InvalidKey(String),
    /// A key set holds no key the layer can verify with.
    #[error("the key set for issuer {0:?} holds no usable verification key")]
    NoUsableKey(String),
    /// A remote key source was configured but the crate was built without the `jwks` feature.
    #[error(
        "remote keys for issuer {0:?} need the `jwks` feature (enabled by `rustls`, \
         `rustls-no-provider` or `native-tls`)"
    )]
    JwksFeatureDisabled(String),
    /// No JWT crypto backend is active: the crate was built with neither `crypto-rust` nor
    /// `crypto-aws-lc`, and the application installed no `jsonwebtoken` provider. (With both
    /// features on, aws-lc-rs is used: that is not an error.)
    #[error(
        "no JWT crypto backend is active: enable the feature `crypto-rust` or `crypto-aws-lc`, \
         or install one with jsonwebtoken::crypto::CryptoProvider::install_default"
    )]
    CryptoBackend,
    /// A scope string does not follow RFC 6749 §3.3.
    #[error(
        "invalid scope {0:?}: scopes are printable ASCII without spaces, quotes or backslashes"
    )]
    InvalidScope(String),
    /// A numeric or duration option is out of range.
    #[error("invalid value for {field}: {reason}")]
    InvalidOption {
        /// Which option.
        field: &'static str,
        /// Why it was refused.
        reason: &'static str,
    },
    /// The SEP-2643 revision is not one the layer has pinned.
    #[error("unknown SEP-2643 revision {given:?}: use \"current\" or one of {supported}")]
    UnknownRevision {
        /// The name as given.
        given: String,
        /// The supported revision ids, comma-separated.
        supported: String,
    },
    /// No policy was given: the layer never guesses one.
    #[error(
        "no policy: call GateBuilder::evaluate (mcp_gate::policy::allow_all() for an open server)"
    )]
    MissingPolicy,
    /// An option the selected revision does not allow.
    #[error("{0}")]
    NotInRevision(&'static str),
    /// A DPoP proof algorithm that cannot be accepted (a symmetric one), or none at all
    /// (`Dpop::algorithms`).
    #[error(
        "DPoP algorithms: {0}: give one or more asymmetric algorithms (ES256, EdDSA, PS256, ...)"
    )]
    DpopAlgorithm(String),
    /// The DPoP nonce key is shorter than 32 bytes (`Dpop::nonce`).
    #[error("the DPoP nonce key has {len} bytes: it needs at least 32")]
    DpopNonceKey {
        /// The length given.
        len: usize,
    },
    /// DPoP needs a replay store for the proofs' `jti`, and `reusable_state` removed it: give
    /// one with `replay_store`.
    #[error(
        "DPoP needs a replay store (for each proof's jti): do not combine it with reusable_state, or give one with replay_store"
    )]
    DpopWithoutReplayStore,
    /// The HTTP client for key fetches and introspection could not be built.
    #[error("could not build the HTTP client: {0}")]
    HttpClient(String),
    /// A Cedar policy set, schema, entities file or tool list that cannot be used, with
    /// Cedar's own diagnostics (file, line, message).
    #[cfg(feature = "cedar")]
    #[cfg_attr(docsrs, doc(cfg(feature = "cedar")))]
    #[error(transparent)]
    Cedar(#[from] CedarError),
}
