//! Conceal mode: a refused component is answered exactly as the inner server answers one that
//! does not exist.
//!
//! With `GateBuilder::conceal_refusals`, an `unavailable` or `undisclosed` refusal of
//! `tools/call`, `prompts/get` or `resources/read` is not rendered by the layer. Instead the
//! layer asks the inner server the same question about a name that cannot exist (random), and
//! answers with the inner server's reply, that name put back to the one the client asked for.
//! A prober then cannot tell a hidden component from a missing one. The decision is still
//! logged with its context id.

use bytes::Bytes;
use serde_json::{Value, json};

use crate::mcp::request::McpRequest;

/// The methods whose refusals can be concealed, and the parameter that names the component.
pub(crate) fn concealable(request: &McpRequest) -> Option<&'static str> {
    match &*request.method {
        "tools/call" | "prompts/get" => Some("name"),
        "resources/read" => Some("uri"),
        _ => None,
    }
}

/// A request about a component that cannot exist, and its made-up name.
pub(crate) fn probe(request: &McpRequest, field: &str) -> Option<(Bytes, String)> {
    let mut bytes = [0u8; 12];
    getrandom::fill(&mut bytes).ok()?;
    let suffix: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let name = if field == "uri" {
        format!("mcp-gate-absent://{suffix}")
    } else {
        format!("mcp_gate_absent_{suffix}")
    };
    let mut params = request.params().into_owned();
    params.insert(field.to_owned(), Value::String(name.clone()));
    let message =
        json!({"jsonrpc": "2.0", "id": request.id, "method": request.method, "params": params});
    Some((Bytes::from(message.to_string()), name))
}

/// The inner server's answer about the made-up name, speaking of the real one instead.
pub(crate) fn restore(answer: &[u8], made_up: &str, original: &str) -> Bytes {
    // Inside JSON text the original name must be escaped like any JSON string content.
    let escaped = Value::String(original.to_owned()).to_string();
    let escaped = &escaped[1..escaped.len() - 1];
    match std::str::from_utf8(answer) {
        Ok(text) => Bytes::from(text.replace(made_up, escaped)),
        Err(_) => Bytes::copy_from_slice(answer),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restore_escapes_the_original_name() {
        let answer = br#"{"error":{"message":"Tool mcp_gate_absent_1 not found"}}"#;
        let restored = restore(answer, "mcp_gate_absent_1", "a\"b");
        assert_eq!(
            &restored[..],
            br#"{"error":{"message":"Tool a\"b not found"}}"#
        );
    }
}
