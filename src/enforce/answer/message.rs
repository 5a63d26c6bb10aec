//! What one JSON-RPC message of an inner answer is, read strictly.

use serde_json::Value;

use super::Problem;
use crate::mcp::json::parse_strict;

/// The kinds of message an answer can hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A request of the server's own (an elicitation, say): it has a method and an id.
    Request,
    /// A notification: a method, no id.
    Notification,
    /// A response: an id and exactly one of `result` and `error`.
    Response,
}

/// `text` as one JSON value, duplicate keys and trailing bytes refused.
pub(crate) fn strict_json(text: &[u8]) -> Result<Value, Problem> {
    parse_strict(text).map_err(|_| Problem::NotJson)
}

/// What `message` is, if it is one JSON-RPC 2.0 message: an object with `"jsonrpc": "2.0"`;
/// a request or notification has a string `method` and neither `result` nor `error`; a
/// response has an `id`, no `method`, and exactly one of a `result` or an `error` object with
/// an integer `code` and a string `message`. A batch (an array) is not one message.
pub(crate) fn kind(message: &Value) -> Result<Kind, Problem> {
    let object = message.as_object().ok_or(Problem::NotJsonRpc)?;
    kind_of(Top {
        jsonrpc_is_2_0: object.get("jsonrpc").and_then(Value::as_str) == Some("2.0"),
        method: object.get("method").map(Value::is_string),
        id: object.get("id"),
        has_result: object.contains_key("result"),
        error: object.get("error"),
    })
}

/// The top-level members of one message object, as far as its [`Kind`] depends on them.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Top<'v> {
    /// `jsonrpc` is present and is exactly the string `"2.0"`.
    pub jsonrpc_is_2_0: bool,
    /// `method`, when present: whether it is a string.
    pub method: Option<bool>,
    /// `id`, when present.
    pub id: Option<&'v Value>,
    /// Whether a `result` is present (whatever its value).
    pub has_result: bool,
    /// `error`, when present.
    pub error: Option<&'v Value>,
}

/// What a message whose top level is `top` is, by the rule of [`kind`].
pub(crate) fn kind_of(top: Top<'_>) -> Result<Kind, Problem> {
    if !top.jsonrpc_is_2_0 {
        return Err(Problem::NotJsonRpc);
    }
    let id_ok = |id: &Value| id.is_string() || id.is_i64() || id.is_u64();
    match (top.method, top.id, top.has_result, top.error) {
        (Some(true), None, false, None) => Ok(Kind::Notification),
        (Some(true), Some(id), false, None) if id_ok(id) => Ok(Kind::Request),
        (None, Some(id), true, None) if id_ok(id) => Ok(Kind::Response),
        (None, Some(id), false, Some(error)) if id_ok(id) || id.is_null() => {
            let well_formed = error.get("code").is_some_and(|c| c.is_i64())
                && error.get("message").is_some_and(Value::is_string);
            if well_formed {
                Ok(Kind::Response)
            } else {
                Err(Problem::NotJsonRpc)
            }
        }
        _ => Err(Problem::NotJsonRpc),
    }
}

/// Whether `message` carries a JSON-RPC result anywhere a client would look: its own
/// `result`, or that of any member of a batch.
pub(crate) fn carries_result(message: &Value) -> bool {
    match message {
        Value::Object(object) => object.contains_key("result"),
        Value::Array(items) => items.iter().any(carries_result),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn messages_are_told_apart_strictly() {
        let ok = [
            (
                json!({"jsonrpc": "2.0", "method": "notifications/progress"}),
                Kind::Notification,
            ),
            (
                json!({"jsonrpc": "2.0", "method": "elicitation/create", "id": 3}),
                Kind::Request,
            ),
            (
                json!({"jsonrpc": "2.0", "id": "a", "result": {}}),
                Kind::Response,
            ),
            (
                json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32700, "message": "x"}}),
                Kind::Response,
            ),
        ];
        for (message, expected) in ok {
            assert_eq!(kind(&message), Ok(expected), "{message}");
        }
        let refused = [
            json!([{"jsonrpc": "2.0", "id": 1, "result": {}}]),
            json!({"id": 1, "result": {}}),
            json!({"jsonrpc": "2.0", "id": 1}),
            json!({"jsonrpc": "2.0", "id": 1, "result": {}, "error": {"code": 1, "message": "x"}}),
            json!({"jsonrpc": "2.0", "id": 1, "method": "x", "result": {}}),
            json!({"jsonrpc": "2.0", "id": 1.5, "result": {}}),
            json!({"jsonrpc": "2.0", "id": null, "result": {}}),
            json!({"jsonrpc": "2.0", "id": 1, "error": {"code": "1", "message": "x"}}),
            json!({"jsonrpc": "1.0", "id": 1, "result": {}}),
        ];
        for message in refused {
            assert_eq!(kind(&message), Err(Problem::NotJsonRpc), "{message}");
        }
    }

    #[test]
    fn strict_json_refuses_duplicates_and_trailing_bytes() {
        assert_eq!(strict_json(br#"{"a":1,"a":2}"#), Err(Problem::NotJson));
        assert_eq!(strict_json(br#"{"a":1} {}"#), Err(Problem::NotJson));
        assert_eq!(strict_json(b" {\"a\":1}\n"), Ok(json!({"a": 1})));
    }
}
