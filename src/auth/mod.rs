//! Who is calling: bearer extraction, token verification, scopes, challenges and metadata.
//!
//! This module knows nothing of MCP. It turns a request's credentials into a
//! [`Principal`] or an [`AuthError`].

pub(crate) mod authenticator;
pub(crate) mod bearer;
pub(crate) mod challenge;
mod claims;
pub mod dpop;
pub(crate) mod dpop_bind;
mod dpop_nonce;
#[cfg(feature = "introspection")]
pub(crate) mod introspection;
#[cfg(feature = "jwks")]
pub(crate) mod jwks;
pub(crate) mod jwt;
pub(crate) mod keys;
pub(crate) mod metadata;
mod owner;
mod principal;
pub(crate) mod rejection;
pub(crate) mod revocation;
pub(crate) mod scope;
pub(crate) mod token_cache;

pub use bearer::bearer_token;
pub use challenge::ErrorCode;
pub use dpop_bind::Dpop;
#[cfg(feature = "introspection")]
pub use introspection::Introspection;
#[cfg(feature = "jwks")]
pub use jwks::KeyRefresh;
pub use jwt::TypPolicy;
pub use keys::StaticKeys;
pub use metadata::ProtectedResourceMetadata;
pub use owner::Owner;
#[cfg(feature = "axum")]
pub use principal::MissingPrincipal;
#[cfg(test)]
pub(crate) use principal::PrincipalParts;
pub use principal::{Principal, PrincipalBuilder, PrincipalError, TokenKind};
pub use rejection::{AuthError, AuthRejection, InvalidRequest, InvalidToken};
pub use revocation::Revocation;
pub use scope::{ScopeHierarchy, ScopeSet};
