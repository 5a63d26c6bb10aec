//! # mcp-gate
//!
//! OAuth 2 resource-server protection for MCP (Model Context Protocol) servers on Axum and
//! Tower: one layer in front of the MCP endpoint verifies bearer tokens and answers every
//! failure with a challenge that tells the client what to do next.
//!
//! ## Quick start
//!
//! ```no_run
//! use axum::{Router, routing::post};
//! use mcp_gate::Gate;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let gate = Gate::builder()
//!     .evaluate(mcp_gate::policy::allow_all())     // who may do what: see `policy`
//!     .resource("https://mcp.example.com/mcp")   // what clients connect to; tokens' `aud`
//!     .issuer("https://auth.example.com")          // keys found through discovery
//!     .required_scopes(["mcp:read"])
//!     .build()?;                                   // every configuration error surfaces here
//!
//! let app = Router::new()
//!     .route("/mcp", post(|| async { "your MCP service goes here" }))
//!     .layer(gate.layer())                         // authenticate /mcp
//!     .merge(gate.metadata_router());              // RFC 9728 metadata, outside auth
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! axum::serve(listener, app).await?;
//! # Ok(()) }
//! ```
//!
//! Handlers behind the layer receive the verified [`Principal`] (as an axum extractor, or from
//! the request extensions, which is where rmcp tools find it through
//! `Extension<http::request::Parts>`). The bearer token itself is removed from the request.
//!
//! ## Security model
//!
//! What is checked, in order; the first failure answers the request:
//!
//! 1. **Carrier** (400 `invalid_request`): the token comes from exactly one
//!    `Authorization: Bearer <b64token>` header. A token in the query string or a form body,
//!    two `Authorization` headers or a malformed value is refused, never ignored. No header at
//!    all, or another scheme, is a 401 challenge without an error code (RFC 6750 §3.1).
//! 2. **Size** (401 `invalid_token`): tokens longer than 8 KiB (configurable) are refused
//!    before any parsing.
//! 3. **Cache**: a token verified before, still within its `exp` and the cache's maximum age,
//!    skips step 4. The cache is keyed by a SHA-256 digest and bounded in size.
//! 4. **Verification** (401 `invalid_token`, or 503 when keys or introspection are unreachable):
//!    - JWTs: no `crit` header; `typ` is `at+jwt`, `application/at+jwt`, `JWT` or absent
//!      ([`TypPolicy`]); `iss` is exactly one of the configured issuers and only that issuer's
//!      keys are consulted; the key is chosen by `kid` and its own algorithm allow-list, never
//!      by the token's `alg` alone (symmetric keys are never loaded, and there is no `none`);
//!      signature; `exp` required; `nbf` honoured; both with a leeway of 30 s by default;
//!      `aud` contains the canonical resource URI; `scope`, `scp`, `sub`, `client_id` and
//!      `authorization_details` have the right types.
//!    - Opaque tokens (feature `introspection`): RFC 7662 with the gateway's client
//!      credentials; `active` must be true, `iss` a configured issuer, `aud` the resource,
//!      `exp` in the future.
//! 5. **Endpoint scopes** (403 `insufficient_scope`): every required scope, directly or
//!    through the [`ScopeHierarchy`]; the challenge lists every required scope, not only the
//!    missing ones, because some clients replace their scope set rather than merge it.
//!
//! Every challenge carries `resource_metadata`, values are escaped so nothing can break out of
//! the header, and every refusal has `Cache-Control: no-store` and a JSON body that agrees with
//! the header. Each refusal is logged as one `tracing` event (target `mcp_gate::auth`, fields
//! `status`, `error`, `reason`, `method`), never with the token or the body.
//!
//! Only POST carries an operation: GET, DELETE and OPTIONS go on without a body, a CORS
//! preflight without a token, and any other HTTP method gets 405. A request bearing an
//! `Mcp-Session-Id` goes on only when that legacy session is bound to the caller (one fixed 404
//! otherwise; see [`mcp::SessionStore`]).
//!
//! After authentication, for each POST:
//!
//! 6. **Body**: read whole, at most 4 MiB, within 30 s (413 / 408).
//! 7. **Classification** ([`mcp`]): exactly one JSON-RPC message, read strictly (duplicate keys,
//!    batches and wrong types are refused with their own JSON-RPC error).
//! 8. **Era**: modern requests carry their version and capabilities in `_meta`, and their
//!    `Mcp-*` headers must match the body; legacy sessions keep what `initialize` declared.
//! 9. **Policy** ([`policy`]): the [method table](mcp::METHODS) puts every method in one
//!    class; the application's `evaluate` callback decides every guarded operation, and every
//!    entry of a listing in the discovery phase. A method in no row is refused (`-32601`) unless
//!    the application opted in to judge it. A panic, an error or a timeout is an internal
//!    error, never an allow.
//! 10. **Answer**: the request goes to the inner service unchanged, or the layer answers with a
//!     SEP-2643 denial in the pinned [`Revision`] ([`denial`]), a URL approval or confirmation
//!     round trip with signed state ([`continuation`]), a durable approval task ([`tasks`]),
//!     or, in conceal mode, what the inner server says of a component that does not exist.
//!
//! The [`guide`] shows how to write `evaluate` callbacks and choose a revision.
//!
//! Not covered: token revocation for cached JWTs (entries live at most `token_cache_max_age`,
//! default 5 min), DPoP and mTLS-bound tokens, and task notifications (owners poll their
//! tasks; `subscriptions/listen` is judged and forwarded to the inner server, which serves it).
//!
//! ## Feature flags
//!
//! | feature | default | what it enables | C code it builds |
//! |---|---|---|---|
//! | `crypto-rust` | yes | JWT signature verification in pure Rust (RustCrypto) | none |
//! | `crypto-aws-lc` | no | JWT signature verification through aws-lc-rs; when `crypto-rust` is on too, aws-lc-rs is used | `aws-lc-sys` |
//! | `rustls` | yes | `jwks` over rustls with its default provider, aws-lc-rs (reqwest's default); `rediss://` for `redis` | `aws-lc-sys` |
//! | `rustls-no-provider` | no | `jwks` over rustls with the provider the application installs (`rustls::crypto::CryptoProvider::install_default`) before building the gate; `rediss://` for `redis` | none; the provider's own (ring and aws-lc-rs build C) |
//! | `native-tls` | no | `jwks` over the platform's TLS: OpenSSL on Linux, SChannel on Windows, Security.framework on macOS; reqwest prefers it when a rustls feature is on too | on Linux and other Unix: `openssl-sys` (a C compiler, OpenSSL's headers and pkg-config); none on Windows and macOS |
//! | `jwks` | yes, through `rustls` | remote key sets and issuer discovery over reqwest; alone, plain `http://` only | none |
//! | `introspection` | no | opaque tokens through RFC 7662, with the `oauth2` crate; implies `jwks` | none |
//! | `axum` | yes | the `Principal` extractor and [`Gate::metadata_router`] | none |
//! | `redis` | no | the Redis stores shared between replicas (`store::tasks::RedisTaskStore` and the others in [`store`]), built from a URL or the application's own client | none |
//! | `opentelemetry` | no | W3C trace context for the gate's `tracing` spans (through `tracing-opentelemetry`): a request's span continues `params._meta.traceparent`, else the `traceparent` header, and the inner server is sent the gate's own (`docs/operations.md`) | none |
//!
//! The features are additive. At least one JWT backend must be on, or the application
//! installs a `jsonwebtoken::crypto::CryptoProvider` itself; otherwise [`GateBuilder::build`]
//! returns [`ConfigError::CryptoBackend`]. `--all-features` builds a crate that verifies with
//! aws-lc-rs and fetches keys over native TLS. Without any C code:
//! `default-features = false, features = ["crypto-rust", "axum"]` (static keys only), plus
//! `rustls-no-provider` for remote keys with a pure-Rust rustls provider.

#![cfg_attr(docsrs, feature(doc_cfg))]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

/// Reading an MCP server's answer to one request as the layer reads the answers it judges:
/// whole, strictly, JSON or an event stream, exactly one response. For code that asks an MCP
/// server something itself (the standalone gateway's handshake with a legacy upstream).
pub mod answer {
    pub use crate::enforce::answer::{
        AnswerError, AnswerMessages, CACHEABLE, read_answer, read_response,
    };
}
pub mod audit;
pub mod auth;
#[doc = include_str!("../docs/guide.md")]
pub mod guide {}
mod builder;
mod clock;
mod contain;
pub mod continuation;
mod crypto_backend;
mod deadline;
pub mod denial;
mod enforce;
mod error;
mod gate;
mod headers;
#[cfg(feature = "jwks")]
mod http_client;
mod judge;
pub mod layer;
pub mod limit;
pub mod mcp;
mod measure;
pub mod policy;
mod random;
pub mod readiness;
mod resource;
pub mod revocation;
mod settings;
pub mod store;
pub mod tasks;
mod telemetry;
mod utf8;

#[cfg(feature = "introspection")]
pub use auth::Introspection;
#[cfg(feature = "jwks")]
pub use auth::KeyRefresh;
pub use auth::{
    AuthError, AuthRejection, ErrorCode, InvalidRequest, InvalidToken, Principal,
    ProtectedResourceMetadata, ScopeHierarchy, ScopeSet, StaticKeys, TokenKind, TypPolicy,
};
pub use builder::{GateBuilder, Issuer};
pub use denial::{CredentialDelivery, IntoRevision, Revision};
pub use error::ConfigError;
pub use gate::Gate;
pub use layer::{GateBody, GateLayer, GateService, ResponseFuture};
pub use policy::{Decision, Evaluation, Remediation};
pub use random::RandomnessUnavailable;
pub use resource::{METADATA_WELL_KNOWN, ResourceUri};

/// The Rust recipes of the README and of `docs/`, compiled (and run, unless a block says
/// `no_run`) as doctests, so that none can rot. The guide's are [`guide`]'s own doctests, the
/// Cedar page's are `policy::cedar`'s (feature `cedar`). Pages with no Rust block are here too:
/// an untagged block added to one fails as Rust.
#[cfg(doctest)]
mod recipes {
    mod readme {
        #![doc = include_str!("../README.md")]
    }
    mod audit {
        #![doc = include_str!("../docs/audit.md")]
    }
    mod benchmarks {
        #![doc = include_str!("../docs/benchmarks.md")]
    }
    mod dpop {
        #![doc = include_str!("../docs/dpop.md")]
    }
    mod example_server {
        #![doc = include_str!("../docs/example-server.md")]
    }
    mod gateway {
        #![doc = include_str!("../docs/gateway.md")]
    }
    mod methods {
        #![doc = include_str!("../docs/methods.md")]
    }
    #[cfg(feature = "redis")]
    mod replicas {
        #![doc = include_str!("../docs/replicas.md")]
    }
    #[cfg(feature = "redis")]
    mod security {
        #![doc = include_str!("../docs/security.md")]
    }
    #[cfg(feature = "redis")]
    mod tasks {
        #![doc = include_str!("../docs/tasks.md")]
    }
    mod testing {
        #![doc = include_str!("../docs/testing.md")]
    }
    mod operations {
        #![doc = include_str!("../docs/operations.md")]
    }
    mod troubleshooting {
        #![doc = include_str!("../docs/troubleshooting.md")]
    }
    mod wire {
        mod index {
            #![doc = include_str!("../docs/wire/README.md")]
        }
        mod ask {
            #![doc = include_str!("../docs/wire/ask.md")]
        }
        mod credential {
            #![doc = include_str!("../docs/wire/credential.md")]
        }
        mod scope {
            #![doc = include_str!("../docs/wire/scope.md")]
        }
        mod task {
            #![doc = include_str!("../docs/wire/task.md")]
        }
        mod unavailable {
            #![doc = include_str!("../docs/wire/unavailable.md")]
        }
        mod undisclosed {
            #![doc = include_str!("../docs/wire/undisclosed.md")]
        }
        mod url {
            #![doc = include_str!("../docs/wire/url.md")]
        }
    }
}
