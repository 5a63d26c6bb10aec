//! The mirrored `MCP-Protocol-Version`, `Mcp-Method` and `Mcp-Name` headers of a modern call of
//! `echo`: input lines are header values, in that order, a fourth line and more repeat
//! `Mcp-Name`. The call runs exactly when each header is present once and equal to the body;
//! otherwise -32020 with HTTP 400.
#![no_main]

use http::{HeaderMap, HeaderValue, StatusCode};
use libfuzzer_sys::fuzz_target;
use mcp_gate_fuzz::{VERSION, harness, modern_body};
use serde_json::json;

fuzz_target!(|data: &[u8]| {
    let h = harness();
    let names = ["mcp-protocol-version", "mcp-method", "mcp-name"];
    let mut headers = HeaderMap::new();
    let mut values: Vec<Vec<&[u8]>> = vec![Vec::new(); 3];
    for (i, line) in data.split(|b| *b == b'\n').enumerate() {
        let Ok(value) = HeaderValue::from_bytes(line) else {
            return;
        };
        let slot = i.min(2);
        values[slot].push(line);
        headers.append(names[slot], value);
    }
    let body = modern_body(
        "tools/call",
        json!({"name": "echo", "arguments": {}}),
        json!({}),
    );
    let reply = h.post(&h.alice, &headers, body);
    let expected = [VERSION.as_bytes(), b"tools/call", b"echo"];
    let agree = values
        .iter()
        .zip(expected)
        .all(|(v, want)| v.len() == 1 && v[0] == want);
    assert_eq!(reply.reached, agree, "{values:?}");
    if !agree {
        assert_eq!(reply.status, StatusCode::BAD_REQUEST);
        assert_eq!(reply.rpc_code(), Some(-32020));
    }
});
