//! POST bodies through the layer, with the mirrored headers a client would derive from them.
//! Refusals are 400 with a documented JSON-RPC code; what reaches the inner handler is the
//! body byte for byte, strict JSON, and never a call of the refused tool.
#![no_main]

use http::{HeaderMap, HeaderValue, StatusCode};
use libfuzzer_sys::fuzz_target;
use mcp_gate_fuzz::{harness, header_text_ok, strict_json};
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let h = harness();
    let mut headers = HeaderMap::new();
    if let Ok(message) = serde_json::from_slice::<Value>(data) {
        let params = &message["params"];
        let pairs = [
            (
                "mcp-protocol-version",
                &params["_meta"]["io.modelcontextprotocol/protocolVersion"],
            ),
            ("mcp-method", &message["method"]),
            ("mcp-name", &params["name"]),
        ];
        for (name, value) in pairs {
            if let Some(text) = value.as_str().filter(|t| header_text_ok(t)) {
                headers.insert(name, HeaderValue::from_str(text).unwrap());
            }
        }
    }
    let reply = h.post(&h.alice, &headers, data.to_vec());
    if reply.reached {
        assert_eq!(
            h.last_body().as_deref(),
            Some(data),
            "not forwarded byte for byte"
        );
        let message = strict_json(data).expect("a forwarded body is strict JSON");
        assert_eq!(message["jsonrpc"], "2.0");
        let is_request = message.get("id").is_some();
        let secret = message["method"] == "tools/call" && message["params"]["name"] == "secret";
        assert!(
            !(is_request && secret),
            "the refused tool reached the inner handler"
        );
        return;
    }
    match reply.status {
        StatusCode::BAD_REQUEST => {
            let code = reply.rpc_code().expect("a JSON-RPC error");
            assert!(
                [-32700, -32600, -32602, -32020, -32021, -32022].contains(&code),
                "{code}"
            );
            if strict_json(data).is_none() {
                assert_eq!(code, -32700);
            }
        }
        StatusCode::OK => assert_ne!(reply.rpc_code(), Some(-32603), "internal error"),
        other => panic!("status {other}"),
    }
});
