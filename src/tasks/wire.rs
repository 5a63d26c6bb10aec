//! How tasks look on the wire (MCP 2026-07-28, Tasks extension): the `CreateTaskResult` that
//! answers a held call, the `tasks/get` result, and the result of a refused call.

use serde_json::{Map, Value, json};

use crate::denial::envelope::Envelope;
use crate::denial::{RemediationState, Revision};
use crate::store::tasks::{TaskRecord, TaskStatus};

/// The envelope every non-terminal answer about a task repeats: `available`, hint `task`, the
/// task's own context id.
fn pending_envelope(record: &TaskRecord, revision: Revision) -> Value {
    let envelope = Envelope {
        remediation: RemediationState::Available,
        context_id: &record.context_id,
        hints: vec![json!({"type": "task"})],
    };
    json!({ Envelope::key(revision): envelope.to_json(revision) })
}

/// The task fields shared by `CreateTaskResult` and the `tasks/get` result.
fn task_fields(record: &TaskRecord, result_type: &str) -> Map<String, Value> {
    let mut fields = Map::new();
    fields.insert("resultType".into(), result_type.into());
    fields.insert("taskId".into(), record.id.as_str().into());
    fields.insert("status".into(), record.status.wire_status().into());
    fields.insert("createdAt".into(), record.created_at_rfc3339().into());
    fields.insert(
        "lastUpdatedAt".into(),
        record.last_updated_at_rfc3339().into(),
    );
    fields.insert("ttlMs".into(), record.ttl_ms.into());
    if !record.status.is_terminal() {
        fields.insert("pollIntervalMs".into(), record.poll_interval_ms.into());
    }
    fields
}

/// The `CreateTaskResult` answering a held `tools/call`.
pub(crate) fn created(record: &TaskRecord, revision: Revision) -> Value {
    let mut result = task_fields(record, "task");
    result.insert("_meta".into(), pending_envelope(record, revision));
    Value::Object(result)
}

/// The `tasks/get` result: the envelope while the task is pending, the tool's result once
/// completed, the error once failed.
pub(crate) fn status(record: &TaskRecord, revision: Revision) -> Value {
    let mut result = task_fields(record, "complete");
    match record.status {
        TaskStatus::Working | TaskStatus::Approved | TaskStatus::Executing => {
            result.insert("_meta".into(), pending_envelope(record, revision));
        }
        TaskStatus::Completed => {
            if let Some(value) = &record.result {
                result.insert("result".into(), value.clone());
            }
        }
        TaskStatus::Failed => {
            if let Some(error) = &record.error {
                let mut object = Map::new();
                object.insert("code".into(), error.code.into());
                object.insert("message".into(), error.message.clone().into());
                if let Some(data) = &error.data {
                    object.insert("data".into(), data.clone());
                }
                result.insert("error".into(), Value::Object(object));
                // The Tasks extension: a failed task's `tasks/get` SHOULD say why.
                result.insert("statusMessage".into(), error.message.clone().into());
            }
        }
        TaskStatus::Cancelled => {}
    }
    Value::Object(result)
}

/// The `CallToolResult` a refused (or, on approval, denied) call completes with: `isError`,
/// the reason in text, and the envelope with `unavailable` and the task's context id.
pub(crate) fn refusal(context_id: &str, message: &str, revision: Revision) -> Value {
    let envelope = Envelope {
        remediation: RemediationState::Unavailable,
        context_id,
        hints: Vec::new(),
    };
    json!({
        "resultType": "complete",
        "isError": true,
        "content": [{"type": "text", "text": message}],
        "_meta": { Envelope::key(revision): envelope.to_json(revision) },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> TaskRecord {
        crate::store::tasks::sample_record(Value::Null, "actx_AAAAAAAAAAAAAAAAAAAAAA", 60_000)
    }

    #[test]
    fn created_and_pending_answers_carry_the_same_envelope() {
        let revision = Revision::current();
        let r = record();
        let created = created(&r, revision);
        assert_eq!(created["resultType"], "task");
        assert_eq!(created["status"], "working");
        assert_eq!(created["ttlMs"], 60_000);
        assert_eq!(created["pollIntervalMs"], 1_000);
        let polled = status(&r, revision);
        assert_eq!(polled["resultType"], "complete");
        assert_eq!(created["_meta"], polled["_meta"]);
        let envelope = &created["_meta"]["io.modelcontextprotocol/authorization"];
        assert_eq!(envelope["remediation"], "available");
        assert_eq!(envelope["authorizationContextId"], r.context_id.as_str());
        assert_eq!(envelope["remediationHints"], json!([{"type": "task"}]));
    }

    #[test]
    fn finished_answers_carry_the_outcome_and_no_envelope() {
        let revision = Revision::current();
        let mut r = record();
        r.status = TaskStatus::Completed;
        r.result = Some(refusal(&r.context_id, "no", revision));
        let polled = status(&r, revision);
        assert_eq!(polled["status"], "completed");
        assert!(polled.get("_meta").is_none());
        assert!(polled.get("pollIntervalMs").is_none());
        let inner = &polled["result"]["_meta"]["io.modelcontextprotocol/authorization"];
        assert_eq!(inner["remediation"], "unavailable");
        assert_eq!(inner["authorizationContextId"], r.context_id.as_str());
        assert!(inner.get("remediationHints").is_none());
    }

    #[test]
    fn a_failed_task_says_why_in_its_status_message() {
        let mut r = record();
        r.status = TaskStatus::Failed;
        r.error = Some(crate::store::tasks::TaskError {
            code: -32603,
            message: "the tool broke".into(),
            data: None,
        });
        let polled = status(&r, Revision::current());
        assert_eq!(polled["status"], "failed");
        assert_eq!(polled["statusMessage"], "the tool broke");
        assert_eq!(polled["error"]["message"], "the tool broke");
    }
}
