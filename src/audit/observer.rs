//! The audit trail as an observer of the one decision point.

use std::sync::Arc;

use super::{AuditRecord, AuditSink};
use crate::judge::{DecisionEvent, Observer};

/// Writes one record per decision (and per request authentication refused) to every sink.
pub(crate) struct AuditObserver {
    /// The CloudEvents `source`: the gate's resource URI.
    source: Arc<str>,
    sinks: Vec<Arc<dyn AuditSink>>,
}

impl AuditObserver {
    /// An observer writing to `sinks`, naming `source` (the resource URI) in every record.
    pub fn new(source: &str, sinks: Vec<Arc<dyn AuditSink>>) -> Self {
        Self {
            source: source.into(),
            sinks,
        }
    }

    fn write(&self, record: &AuditRecord) {
        for sink in &self.sinks {
            sink.record(record);
        }
    }
}

impl Observer for AuditObserver {
    fn decided(&self, event: &DecisionEvent<'_>) {
        self.write(&AuditRecord::decision(&self.source, event));
    }

    fn auth_refused(&self, reason: &'static str, status: u16) {
        self.write(&AuditRecord::authentication(&self.source, reason, status));
    }
}
