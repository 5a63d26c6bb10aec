//! Where the gate keeps what outlives one request, one folder per kind of record:
//!
//! - [`sessions`]: legacy sessions bound to the principal that opened them;
//! - [`replay`]: used continuation states, so that each is accepted once;
//! - [`tasks`]: calls held for approval, with their compare-and-set lifecycle;
//! - [`revocations`]: revoked tokens, subjects and clients, copied into every replica.
//!
//! Each folder's `mod.rs` holds its trait, its records and its future alias, and each backend
//! is one file beside it: `memory.rs` (one process, bounded, never evicting) and `redis.rs`
//! (feature `redis`, shared by every replica on one namespace, with the same bounds counted in
//! its scripts). A new backend is one more file in each folder it serves.
//!
//! What the three share is here: one error ([`StoreError`], which names the store it comes
//! from as a [`StoreKind`]), one future shape ([`StoreFuture`]), the conversion the builder's
//! store methods take ([`IntoShared`]) and, with feature `redis`, the one connection to Redis
//! (`RedisConnection`, feature `redis`), which an application may build from its own client.
//!
//! Every store is asynchronous and fallible, so that a shared store can stand behind the same
//! trait as a memory one, and a store that fails is a refusal (`503`, or `429` for a quota),
//! never an allow.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

pub mod limits;
#[cfg(feature = "redis")]
mod redis;
pub mod replay;
pub mod revocations;
pub mod sessions;
pub mod tasks;

#[cfg(feature = "redis")]
pub use self::redis::{RedisConnectError, RedisConnection};

use self::tasks::{TaskId, TaskStatus};

/// What every store method returns: a boxed, sendable future of a result whose error is a
/// [`StoreError`]. Each store names its own use of it ([`sessions::SessionFuture`],
/// [`replay::ReplayFuture`], [`tasks::TaskFuture`]).
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// Which store an error comes from: its [`Display`](fmt::Display) text says so.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StoreKind {
    /// Legacy session bindings ([`sessions`]).
    Sessions,
    /// Used continuation states ([`replay`]).
    Replay,
    /// Calls held for approval ([`tasks`]).
    Tasks,
    /// Rate-limit counters ([`limits`]).
    Limits,
    /// Revoked tokens, subjects and clients ([`revocations`]).
    Revocations,
}

impl StoreKind {
    /// The store's name in messages: `session`, `replay` or `task`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Sessions => "session",
            Self::Replay => "replay",
            Self::Tasks => "task",
            Self::Limits => "limit",
            Self::Revocations => "revocation",
        }
    }
}

impl fmt::Display for StoreKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a store operation failed, for every store. A refusal either way: nothing a failed
/// operation was asked to record is taken as recorded.
///
/// The bounds ([`Full`](Self::Full), [`OwnerQuota`](Self::OwnerQuota),
/// [`OverBudget`](Self::OverBudget)) are refusals of a new entry: no store evicts a live one
/// to make room. The layer answers a quota with `429` and the other bounds and
/// [`Unavailable`](Self::Unavailable) with `503` and `Retry-After`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreError {
    /// The store holds as many live entries as it may (sessions, used states or tasks); the
    /// new one is refused until some end or expire.
    Full {
        /// The store that is full.
        store: StoreKind,
        /// Its capacity.
        capacity: usize,
    },
    /// This owner holds as many live entries as one owner may; other owners are not affected.
    /// For tasks, through [`TaskStore::create_within`](tasks::TaskStore::create_within): the
    /// calls waiting for approval.
    OwnerQuota {
        /// The store that counts them.
        store: StoreKind,
        /// Entries one owner may hold at once.
        quota: usize,
    },
    /// The task store's held calls would take more than its byte budget; nothing is evicted
    /// to make room.
    OverBudget {
        /// The store's budget, in bytes.
        budget: usize,
    },
    /// The store could not be reached or did not answer in time. Nothing is known to have
    /// changed; a caller holding a denied call keeps it denied.
    Unavailable {
        /// The store that failed.
        store: StoreKind,
        /// What failed (never a URL or a record's values).
        reason: String,
    },
    /// The session id is already bound to another owner (an inner server that reuses ids).
    Taken,
    /// [`TaskStore::create`](tasks::TaskStore::create) with an id that is already stored.
    Duplicate(TaskId),
    /// The task has expired: created already expired, or a transition demanded more time than
    /// is left ([`TaskChange::require_remaining_ms`](tasks::TaskChange::require_remaining_ms)).
    Expired(TaskId),
    /// A stored task record is not a valid record.
    Corrupt {
        /// The id it was stored under.
        id: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A stored task record was written in another format, by an older or newer build.
    UnsupportedSchema {
        /// The id it was stored under.
        id: String,
        /// The version it carries.
        found: u64,
        /// The version this build reads.
        supported: u32,
    },
    /// A task transition the lifecycle does not allow
    /// ([`TaskStatus::can_become`](tasks::TaskStatus::can_become)).
    InvalidTransition {
        /// The expected current status.
        from: TaskStatus,
        /// The requested status.
        to: TaskStatus,
    },
    /// A task record (new, or as a transition would leave it) breaks a rule of the format.
    InvalidRecord(&'static str),
    /// The store's configuration is unusable (namespace, URL).
    Config {
        /// The store that cannot be made.
        store: StoreKind,
        /// What is wrong (never the URL itself, which may hold a password).
        reason: String,
    },
}

impl StoreError {
    /// The error's kind, as metrics name it: one fixed word per variant.
    #[cfg(feature = "metrics")]
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Self::Full { .. } => "full",
            Self::OwnerQuota { .. } => "owner_quota",
            Self::OverBudget { .. } => "over_budget",
            Self::Unavailable { .. } => "unavailable",
            Self::Taken => "taken",
            Self::Duplicate(_) => "duplicate",
            Self::Expired(_) => "expired",
            Self::Corrupt { .. } => "corrupt",
            Self::UnsupportedSchema { .. } => "unsupported_schema",
            Self::InvalidTransition { .. } => "invalid_transition",
            Self::InvalidRecord(_) => "invalid_record",
            Self::Config { .. } => "config",
        }
    }

    /// The store's configuration cannot be used, said as each store has always said it: the
    /// task store as [`Config`](Self::Config), the session and replay stores as
    /// [`Unavailable`](Self::Unavailable). Only the Redis stores have a configuration to refuse.
    #[cfg(feature = "redis")]
    pub(crate) fn unusable(store: StoreKind, reason: impl Into<String>) -> Self {
        let reason = reason.into();
        match store {
            StoreKind::Tasks | StoreKind::Limits | StoreKind::Revocations => {
                Self::Config { store, reason }
            }
            StoreKind::Sessions | StoreKind::Replay => Self::Unavailable { store, reason },
        }
    }

    /// `store` could not answer: `reason`.
    pub(crate) fn unavailable(store: StoreKind, reason: impl fmt::Display) -> Self {
        Self::Unavailable {
            store,
            reason: reason.to_string(),
        }
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use StoreKind::{Limits, Replay, Revocations, Sessions, Tasks};
        match self {
            Self::Full {
                store: Revocations,
                capacity,
            } => write!(
                f,
                "the revocation set is full ({capacity} live revocations); new revocations are refused until some expire"
            ),
            Self::Full {
                store: Sessions,
                capacity,
            } => write!(
                f,
                "the session store is full ({capacity} sessions); new sessions are refused until some end or expire"
            ),
            Self::Full {
                store: Replay,
                capacity,
            } => write!(f, "the replay store is full ({capacity} live states)"),
            Self::Full {
                store: Limits,
                capacity,
            } => write!(
                f,
                "the limit store is full ({capacity} live counters); calls needing a new counter are refused until some are due"
            ),
            Self::OwnerQuota {
                store: Limits,
                quota,
            } => write!(f, "this principal has {quota} live rate-limit counters"),
            Self::Full {
                store: Tasks,
                capacity,
            } => write!(
                f,
                "the task store is full ({capacity} live tasks); new tasks are refused until some finish or expire"
            ),
            Self::OwnerQuota {
                store: Sessions,
                quota,
            } => write!(
                f,
                "this principal holds {quota} open sessions, as many as one principal may"
            ),
            Self::OwnerQuota {
                store: Replay,
                quota,
            } => write!(
                f,
                "this principal has used {quota} states that are still live, as many as one may"
            ),
            Self::OwnerQuota {
                store: Tasks,
                quota,
            } => write!(
                f,
                "this principal has {quota} calls waiting for approval, as many as one may: wait for a decision, or cancel one"
            ),
            Self::OwnerQuota {
                store: Revocations,
                quota,
            } => write!(f, "{quota} revocations of one owner are live"),
            Self::OverBudget { budget } => write!(
                f,
                "the task store holds as many bytes of held calls as it may ({budget} bytes); new tasks are refused until some finish or expire"
            ),
            Self::Unavailable { store, reason } => {
                write!(f, "the {store} store is unavailable: {reason}")
            }
            Self::Taken => f.write_str("the session id is already bound to another principal"),
            Self::Duplicate(id) => write!(f, "task {id} already exists"),
            Self::Expired(id) => write!(
                f,
                "task {id} has expired, or would expire before it could finish"
            ),
            Self::Corrupt { id, reason } => write!(f, "task record {id} is corrupt: {reason}"),
            Self::UnsupportedSchema {
                id,
                found,
                supported,
            } => write!(
                f,
                "task record {id} has schema version {found}; this build reads only version {supported}"
            ),
            Self::InvalidTransition { from, to } => {
                write!(f, "a task cannot move from {from} to {to}")
            }
            Self::InvalidRecord(rule) => write!(f, "invalid task record: {rule}"),
            Self::Config { store, reason } => {
                write!(f, "invalid {store} store configuration: {reason}")
            }
        }
    }
}

impl std::error::Error for StoreError {}

/// A store as the gate holds it: shared, behind an [`Arc`]. The builder's store methods
/// (`session_store`, `replay_store`, `task_store`) take any of
///
/// - a store, moved in: `task_store(MemoryTaskStore::new(100))`;
/// - an `Arc` of one, so that the application keeps a typed handle:
///   `task_store(Arc::clone(&store))`;
/// - an `Arc<dyn …>` already shared, say with an approval worker.
///
/// `S` is the store's trait object: `dyn SessionStore`, `dyn ReplayStore` or `dyn TaskStore`.
pub trait IntoShared<S: ?Sized> {
    /// The store, shared.
    fn into_shared(self) -> Arc<S>;
}

/// The three ways a store comes in ([`IntoShared`]), for one store trait.
macro_rules! into_shared {
    ($store:ident) => {
        impl<T: $store> $crate::store::IntoShared<dyn $store> for T {
            fn into_shared(self) -> ::std::sync::Arc<dyn $store> {
                ::std::sync::Arc::new(self)
            }
        }

        impl<T: $store> $crate::store::IntoShared<dyn $store> for ::std::sync::Arc<T> {
            fn into_shared(self) -> ::std::sync::Arc<dyn $store> {
                self
            }
        }

        impl $crate::store::IntoShared<dyn $store> for ::std::sync::Arc<dyn $store> {
            fn into_shared(self) -> ::std::sync::Arc<dyn $store> {
                self
            }
        }
    };
}
pub(crate) use into_shared;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_store_says_which_it_is() {
        let full = |store| StoreError::Full { store, capacity: 3 };
        assert_eq!(
            full(StoreKind::Replay).to_string(),
            "the replay store is full (3 live states)"
        );
        assert!(full(StoreKind::Sessions).to_string().contains("3 sessions"));
        assert!(full(StoreKind::Tasks).to_string().contains("3 live tasks"));
        for (store, name) in [
            (StoreKind::Sessions, "session"),
            (StoreKind::Replay, "replay"),
            (StoreKind::Tasks, "task"),
        ] {
            assert_eq!(
                StoreError::unavailable(store, "down").to_string(),
                format!("the {name} store is unavailable: down")
            );
        }
    }

    #[cfg(feature = "redis")]
    #[test]
    fn an_unusable_configuration_is_said_as_each_store_said_it() {
        assert_eq!(
            StoreError::unusable(StoreKind::Tasks, "bad").to_string(),
            "invalid task store configuration: bad"
        );
        assert_eq!(
            StoreError::unusable(StoreKind::Sessions, "bad").to_string(),
            "the session store is unavailable: bad"
        );
    }
}
