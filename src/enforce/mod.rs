//! The MCP flow: what happens to a request once the Tower shell ([`crate::layer`]) let it in.
//!
//! Read in this order:
//! - [`entry`]: the caller verified (if the shell could not settle it), admitted, its session
//!   checked; a bodyless verb passed on.
//! - [`router`]: the message read ([`buffer`]), classified, its era worked out, and sent down
//!   one of the [`routes`]: `initialize`, `server/discover`, listings, tasks, guarded methods.
//! - [`crate::judge`]: the one decision point. Every question the policy is asked goes through it,
//!   and it writes the one decision event its observers (the log first) are told of.
//! - [`interaction`]: the layer's own round trips (URL approval, confirmation).
//! - [`answer`]: the one reader of inner answers the layer reads whole, and its writer.
//! - [`reply`]: every response the layer writes itself (a [`reply::Reply`]).
//!
//! The flow is given the gate's [`Settings`](crate::settings::Settings) and the inner
//! service; it never sees the [`Gate`](crate::Gate) that holds them.

pub(crate) mod answer;
pub(crate) mod body;
pub(crate) mod bounds;
pub(crate) mod buffer;
mod call;
mod conceal;
pub(crate) mod entry;
pub(crate) mod interaction;
mod limited;
pub(crate) mod proof;
pub(crate) mod reply;
mod router;
pub(crate) mod routes;
mod whole;

pub(crate) use entry::{Carries, Identity, Proving, admit, after_authentication};
