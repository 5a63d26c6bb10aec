//! One module per route of the [router](super::router): what the layer does for each class of
//! the method table.
//!
//! - [`initialize`]: `initialize` forwarded, the legacy session it opens bound to its caller;
//!   a named session checked on every later request.
//! - [`discover`]: `server/discover` forwarded, the layer's extensions added; the inner
//!   server's identity; the layer's own side requests.
//! - [`listing`]: the six listings, each entry judged for this caller.
//! - [`tasks`]: the calls held for approval: held, answered from the store, run once.
//! - [`guarded`]: every method the policy guards, judged before anything runs.
//! - [`listen`]: a judged `subscriptions/listen` for the layer's own tasks, answered by the
//!   layer (task notifications).

pub(crate) mod discover;
pub(crate) mod guarded;
pub(crate) mod initialize;
pub(crate) mod listen;
pub(crate) mod listing;
pub(crate) mod tasks;
