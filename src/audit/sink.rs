//! [`AuditSink`]: where audit records go.

use super::AuditRecord;

/// Takes every audit record the gate writes. Called on the request's task, after the answer is
/// decided: it must not block (hand the record to a queue, as [`JsonLines`](super::JsonLines)
/// does, rather than write to a disk or a network here).
///
/// A closure taking `&AuditRecord` is a sink:
///
/// ```
/// use std::sync::{Arc, Mutex};
/// use mcp_gate::audit::AuditRecord;
///
/// let seen = Arc::new(Mutex::new(Vec::new()));
/// let kept = seen.clone();
/// let sink = move |record: &AuditRecord| kept.lock().unwrap().push(record.to_json());
/// # fn takes(_: impl mcp_gate::audit::AuditSink) {}
/// takes(sink);
/// ```
pub trait AuditSink: Send + Sync + 'static {
    /// One record.
    fn record(&self, record: &AuditRecord);
}

impl<F> AuditSink for F
where
    F: Fn(&AuditRecord) + Send + Sync + 'static,
{
    fn record(&self, record: &AuditRecord) {
        self(record)
    }
}
