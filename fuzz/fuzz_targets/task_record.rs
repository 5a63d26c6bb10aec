//! Stored task records: `TaskRecord::from_json` returns only consistent records, and its
//! errors never quote a value from the record.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mcp_gate::tasks::{StoreError, TaskDecision, TaskRecord, TaskStatus};

const ID: &str = "tsk_AAAAAAAAAAAAAAAAAAAAAA";

fuzz_target!(|data: &[u8]| {
    match TaskRecord::from_json(data, ID) {
        Ok(record) => {
            assert_eq!(record.id.as_str(), ID);
            assert!(record.ttl_ms > 0 && record.poll_interval_ms > 0);
            assert!(record.last_updated_at >= record.created_at);
            assert!(!record.owner.issuer.is_empty() && !record.call.method.is_empty());
            assert!((1..=256).contains(&record.context_id.len()));
            let approved = matches!(record.decision, Some(TaskDecision::Approved { .. }));
            match record.status {
                TaskStatus::Working => assert!(record.decision.is_none()),
                TaskStatus::Approved | TaskStatus::Executing => assert!(approved),
                TaskStatus::Completed => assert!(record.result.is_some() && record.error.is_none()),
                TaskStatus::Failed => assert!(record.error.is_some() && record.result.is_none()),
                TaskStatus::Cancelled => {}
                other => panic!("a status this target does not know: {other}"),
            }
            let again = TaskRecord::from_json(&record.to_json().unwrap(), ID).unwrap();
            assert_eq!(again, record);
        }
        Err(StoreError::Corrupt { id, reason }) => {
            assert_eq!(id, ID);
            // Reasons name what is wrong, never a value: no quotes from the input.
            assert!(!reason.contains('"'), "{reason}");
        }
        Err(StoreError::UnsupportedSchema { id, found, .. }) => {
            assert_eq!(id, ID);
            assert_ne!(found, 1);
        }
        Err(other) => panic!("undocumented error {other:?}"),
    }
});
