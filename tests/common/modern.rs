//! Modern (2026-07-28) requests for the tests that build them by hand: the version and the
//! capabilities in `_meta`, and the `Mcp-*` headers mirroring the body.

use serde_json::{Value, json};

/// A request body and the headers that mirror it.
pub type ModernRequest = (String, Vec<(&'static str, String)>);

/// The capabilities of a client that declared the Tasks extension.
pub fn tasks_capabilities() -> Value {
    json!({"extensions": {"io.modelcontextprotocol/tasks": {}}})
}

/// `method` with `params`, declaring `capabilities`; `name` is what `Mcp-Name` mirrors.
pub fn modern(
    id: u64,
    method: &str,
    mut params: Value,
    name: &str,
    capabilities: Value,
) -> ModernRequest {
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": capabilities,
    });
    let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string();
    let headers = vec![
        ("mcp-protocol-version", "2026-07-28".to_owned()),
        ("mcp-method", method.to_owned()),
        ("mcp-name", name.to_owned()),
    ];
    (body, headers)
}

/// The SEP-2643 envelope in a result's `_meta` (`Null` when absent).
pub fn envelope(result: &Value) -> &Value {
    &result["_meta"][mcp_gate::denial::ENVELOPE_KEY]
}
