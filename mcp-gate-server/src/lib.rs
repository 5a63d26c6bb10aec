//! `mcp-gate-server`: the mcp-gate layer as a standalone gateway in front of any MCP server
//! (TypeScript, Python, anything that speaks streamable HTTP), configured by one TOML file.
//!
//! ```text
//! mcp-gate-server --config gateway.toml          # serve
//! mcp-gate-server --config gateway.toml --check  # read and check the file, then exit
//! ```
//!
//! `docs/gateway.md` is the guide; `mcp-gate-server/gateway.example.toml` documents every key.
//!
//! A request's way through: the client listener ([`serve`]) hands it to the gate in force
//! ([`live`]), built from the file by [`assemble`] over the stores that outlive reloads
//! ([`stores`], with the task feed every gate is told through, [`task_feed`]); the gate decides, and an allowed request goes to the upstream through
//! [`proxy`], which writes what the upstream sees, with the caller's signed identity when
//! [`identity`] is configured. [`reload`] rebuilds the gate when the file
//! or the policies change; [`operations`] serves health, readiness, metrics and revocation on
//! a listener of its own.

pub mod assemble;
pub mod config;
pub mod dev_issuer;
pub mod forwarded;
pub mod identity;
pub mod live;
pub mod operations;
pub mod prometheus;
pub mod proxy;
pub mod reload;
pub mod serve;
pub mod signing_key;
pub mod stores;
pub mod task_feed;
