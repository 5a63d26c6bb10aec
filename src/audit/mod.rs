//! The audit trail: one record per decision, in a documented, versioned format.
//!
//! Threat: an audit trail is read by people who were not there (an incident responder, an
//! auditor), and kept for a long time by systems the gate does not control. So a record says
//! who asked what and what the gate answered, in closed words and ids, and never carries what
//! a request held: no token, no argument, no body. A record is written after the answer is
//! decided and said, by an observer of the one decision point (`judge/`), so no decision
//! escapes it; a request refused by authentication before any decision has a record too.
//!
//! The format is a [CloudEvents 1.0](https://cloudevents.io) event in its JSON form, with the
//! gate's fields under `data`; `schemas/audit-record.v1.json` in the repository is its JSON
//! Schema, and `docs/audit.md` shows it field by field and says why CloudEvents rather than
//! OCSF.
//!
//! Records go to every [`AuditSink`] the application gives
//! [`GateBuilder::audit`](crate::GateBuilder::audit): [`JsonLines`] writes them one per line
//! to a file or any writer, off the request's task; a closure takes them as they come. The
//! decision log (`mcp_gate::decision`, through `tracing`) has the same fields, sink or not.

mod json_lines;
mod observer;
mod record;
mod sink;

pub use json_lines::JsonLines;
pub(crate) use observer::AuditObserver;
pub use record::{
    AuditData, AuditPolicy, AuditPrincipal, AuditRecord, AuditShadow, AuditTarget, SCHEMA_URI,
};
pub use sink::AuditSink;
