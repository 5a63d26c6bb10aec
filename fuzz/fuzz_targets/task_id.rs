//! Task ids: `TaskId::parse` accepts exactly `tsk_` + 22 base64url characters, and through the
//! layer another principal polling any id of that shape (the real task's included) gets the
//! unknown-task answer byte for byte.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mcp_gate::tasks::TaskId;
use mcp_gate_fuzz::{harness, header_text_ok, task_call};

fuzz_target!(|data: &[u8]| {
    let h = harness();
    let id = String::from_utf8_lossy(data).into_owned();
    let shaped = id.strip_prefix("tsk_").is_some_and(|rest| {
        rest.len() == 22
            && rest
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    });
    assert_eq!(TaskId::parse(&id).is_some(), shaped, "{id:?}");
    if !header_text_ok(&id) {
        return;
    }
    let (body, headers) = task_call(&id);
    let reply = h.post(&h.mallory, &headers, body);
    assert!(
        !String::from_utf8_lossy(&reply.bytes).contains(&h.task),
        "another principal's task leaked"
    );
    if shaped {
        assert!(!reply.reached);
        assert_eq!(
            reply.bytes, h.unknown_task,
            "not the unknown-task answer for {id:?}"
        );
    }
});
