//! A list cursor the layer sealed, edited (see `splice`): never reaches the inner list.
#![no_main]

use http::{HeaderMap, StatusCode};
use libfuzzer_sys::fuzz_target;
use mcp_gate_fuzz::{harness, list_body, splice};

fuzz_target!(|data: &[u8]| {
    let h = harness();
    let cursor = splice(&h.cursor, data);
    if cursor == h.cursor {
        return;
    }
    let reply = h.post(&h.alice, &HeaderMap::new(), list_body(Some(&cursor)));
    assert!(
        !reply.reached,
        "an edited cursor reached the inner list: {cursor:?}"
    );
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert_eq!(reply.json["error"]["message"], "invalid cursor");
});
