//! Legacy sessions bound to the principal that opened them.
//!
//! **Threat.** A 2025-11-25 session is named by its `Mcp-Session-Id` alone. Without a binding,
//! anyone with a valid token of their own and someone else's session id could run calls inside
//! that session, attach to its event stream (`GET`) and end it (`DELETE`). So the layer records
//! who opened each session, from the inner server's answer to `initialize`, and answers a
//! request bearing an id that is not bound to its caller (another owner's, or one the layer
//! never saw) with one fixed `404` of its own, without forwarding it: nobody can tell which
//! sessions exist.
//!
//! **API.** A [`SessionStore`] keeps [`SessionRecord`]s under their session ids. Its methods are
//! asynchronous and fallible so that a store shared by several replicas can stand behind the
//! same trait; a store that fails is a refusal (`503`), never an allow. Two backends, one file
//! each: [`MemorySessionStore`] (`memory.rs`, one process) and, with feature `redis`,
//! `RedisSessionStore` (`redis.rs`, shared by replicas). Both are bounded twice: a total
//! capacity, and a quota per owner. When either is reached a new session is refused
//! ([`StoreError::Full`], [`StoreError::OwnerQuota`]); no binding is ever evicted to make
//! room, and idle bindings expire (after which the client gets the fixed `404` and opens a new
//! session, as the MCP transport says it must).
//!
//! These types were at `mcp_gate::mcp` before, and are still re-exported there.
//!
//! ```
//! use std::time::Duration;
//! use mcp_gate::auth::Owner;
//! use mcp_gate::store::sessions::{MemorySessionStore, SessionRecord, SessionStore};
//! use mcp_gate::store::{StoreError, StoreKind};
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let store = MemorySessionStore::new(100, 1, Duration::from_secs(60));
//! let alice = Owner::new("https://as.example", Some("alice".into()), Some("cli".into()));
//! store.bind("s1", SessionRecord::new(alice.clone())).await.unwrap();
//! assert_eq!(store.get("s1").await.unwrap().unwrap().owner, alice);
//! // Alice's quota is one session.
//! assert_eq!(
//!     store.bind("s2", SessionRecord::new(alice.clone())).await,
//!     Err(StoreError::OwnerQuota { store: StoreKind::Sessions, quota: 1 })
//! );
//! # });
//! ```

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{StoreError, StoreFuture, into_shared};
use crate::auth::Owner;

mod memory;
#[cfg(feature = "redis")]
mod redis;

pub use memory::MemorySessionStore;
#[cfg(feature = "redis")]
pub use redis::RedisSessionStore;

/// What every [`SessionStore`] method returns.
pub type SessionFuture<'a, T> = StoreFuture<'a, T>;

/// The name session store errors had before every store shared [`StoreError`].
#[deprecated(since = "0.1.0", note = "use mcp_gate::store::StoreError")]
pub type SessionStoreError = StoreError;

/// What the layer knows of one legacy session: who opened it and what it declared.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SessionRecord {
    /// The principal that opened the session.
    pub owner: Owner,
    /// The protocol version the client asked for in `initialize`.
    pub protocol_version: Option<String>,
    /// The capabilities the client declared in `initialize`.
    pub capabilities: Map<String, Value>,
}

impl SessionRecord {
    /// A session of `owner` that declared nothing.
    pub fn new(owner: Owner) -> Self {
        Self {
            owner,
            protocol_version: None,
            capabilities: Map::new(),
        }
    }

    /// With the protocol version the client asked for.
    pub fn protocol_version(mut self, version: impl Into<String>) -> Self {
        self.protocol_version = Some(version.into());
        self
    }

    /// With the capabilities the client declared.
    pub fn capabilities(mut self, capabilities: Map<String, Value>) -> Self {
        self.capabilities = capabilities;
        self
    }
}

/// Where the layer keeps its session bindings.
pub trait SessionStore: Send + Sync + 'static {
    /// Binds `session_id` to `record.owner`. Binding an id again for the same owner replaces
    /// the record; for another owner it is [`StoreError::Taken`].
    fn bind<'a>(&'a self, session_id: &'a str, record: SessionRecord) -> SessionFuture<'a, ()>;

    /// The record bound to `session_id`, if any; a lookup keeps the binding alive.
    fn get<'a>(&'a self, session_id: &'a str) -> SessionFuture<'a, Option<SessionRecord>>;

    /// Removes the binding of `session_id` if `owner` holds it.
    fn unbind<'a>(&'a self, session_id: &'a str, owner: &'a Owner) -> SessionFuture<'a, ()>;

    /// What backs the store, for start-up lines and readiness reports: `memory`, `redis`,
    /// or `custom` (this default) for a store of the application's own.
    fn backend(&self) -> &'static str {
        "custom"
    }

    /// Whether the store answers now, for a readiness report
    /// ([`Gate::readiness`](crate::Gate::readiness)): a memory store always does, a shared
    /// one sends one round trip. This default answers yes; a store of your own that can be
    /// unreachable should say so.
    fn reachable(&self) -> StoreFuture<'_, ()> {
        Box::pin(std::future::ready(Ok(())))
    }
}

into_shared!(SessionStore);
