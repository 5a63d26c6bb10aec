//! A confirmation state the layer issued, edited (see `splice`), on an approved retry: the call
//! never runs unless the state is exactly the one issued.
#![no_main]

use http::StatusCode;
use libfuzzer_sys::fuzz_target;
use mcp_gate_fuzz::{guarded_call, harness, splice};

fuzz_target!(|data: &[u8]| {
    let h = harness();
    let state = splice(&h.state, data);
    if state == h.state {
        return;
    }
    let (body, headers) = guarded_call(Some(&state));
    let reply = h.post(&h.alice, &headers, body);
    assert!(!reply.reached, "an edited state ran the call: {state:?}");
    if state.starts_with("mcpgate1.") {
        assert_eq!(reply.status, StatusCode::BAD_REQUEST);
        assert_eq!(reply.rpc_code(), Some(-32602));
    } else {
        // The application's own state: the layer asks again.
        assert_eq!(reply.json["result"]["resultType"], "input_required");
    }
});
