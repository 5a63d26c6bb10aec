//! The reader of inner answers, offered to code outside the layer that asks an MCP server
//! something itself (the gateway's handshake with a legacy upstream): one answer, read whole
//! under the same rule as the answers the layer judges.

use http::{HeaderMap, StatusCode};
use serde_json::Value;

use bytes::Bytes;

use super::{Framing, Read, read, sse};

/// Why [`read_response`] did not return a response.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AnswerError {
    /// The server did not answer with a success status.
    #[error("the server answered HTTP {0}")]
    Status(StatusCode),
    /// The answer broke the reading rule (see the layer's `docs/security.md` table).
    #[error("the answer cannot be read ({code}): {why}")]
    Unreadable {
        /// The rule's short name, as the layer logs it (`not_json`, `no_response`, …).
        code: &'static str,
        /// The rule, in words.
        why: &'static str,
    },
}

/// One MCP server's answer to one request, read whole (see [`read_answer`]).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct AnswerMessages {
    /// The notifications and server requests that came before the response, in order.
    pub before: Vec<Value>,
    /// The response to the request: a result or a JSON-RPC error.
    pub response: Value,
    /// Whether the answer came as an event stream (else as one JSON message).
    pub event_stream: bool,
}

impl AnswerMessages {
    /// The answer written again, in the framing it came in: its `Content-Type` and body (one
    /// compact JSON message, or each message as one canonical `message` event). Only the
    /// messages read are written; nothing of the bytes they came in.
    pub fn into_body(self) -> (&'static str, Bytes) {
        if self.event_stream {
            let body = sse::write(self.before.iter().chain([&self.response]), 0);
            return ("text/event-stream", body);
        }
        // Writing a `Value` into a `Vec` cannot fail.
        let body = serde_json::to_vec(&self.response).unwrap_or_default();
        ("application/json", Bytes::from(body))
    }
}

/// Reads one MCP server's answer to the request whose id is `id`, whole and exactly, as the
/// layer reads the answers it judges: a success framed as JSON or as an event stream (the
/// WHATWG grammar), every message strict JSON-RPC, exactly one response to `id`, nothing
/// after it, a result only as an object.
pub fn read_answer(
    status: StatusCode,
    headers: &HeaderMap,
    body: &[u8],
    id: &Value,
) -> Result<AnswerMessages, AnswerError> {
    if !status.is_success() {
        return Err(AnswerError::Status(status));
    }
    let mut head = http::Response::new(()).into_parts().0;
    head.status = status;
    head.headers = headers.clone();
    match read(head, body, id) {
        Ok(Read::Answered(answer)) => Ok(AnswerMessages {
            event_stream: answer.framing == Framing::EventStream,
            before: answer.before,
            response: answer.response,
        }),
        Ok(Read::NotSuccess(head, _)) => Err(AnswerError::Status(head.status)),
        Err(problem) => Err(AnswerError::Unreadable {
            code: problem.code(),
            why: problem.describe(),
        }),
    }
}

/// [`read_answer`]'s response alone.
pub fn read_response(
    status: StatusCode,
    headers: &HeaderMap,
    body: &[u8],
    id: &Value,
) -> Result<Value, AnswerError> {
    read_answer(status, headers, body, id).map(|answer| answer.response)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;
    use serde_json::json;

    fn typed(content_type: &'static str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static(content_type),
        );
        headers
    }

    #[test]
    fn the_response_comes_out_of_json_and_of_an_event_stream() {
        let id = json!("h");
        let json_body = br#"{"jsonrpc":"2.0","id":"h","result":{"a":1}}"#;
        let read = read_response(StatusCode::OK, &typed("application/json"), json_body, &id);
        assert_eq!(read.expect("read")["result"]["a"], 1);
        let stream = b"event: message\r\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{}}\r\n\r\ndata: {\"jsonrpc\":\"2.0\",\"id\":\"h\",\"result\":{\"a\":2}}\n\n";
        let read =
            read_answer(StatusCode::OK, &typed("text/event-stream"), stream, &id).expect("read");
        assert_eq!(read.response["result"]["a"], 2);
        assert_eq!(read.before[0]["method"], "notifications/message");
        let (content_type, written) = read.into_body();
        assert_eq!(content_type, "text/event-stream");
        let again = read_answer(StatusCode::OK, &typed(content_type), &written, &id);
        assert_eq!(again.expect("read again").before.len(), 1);
    }

    #[test]
    fn anything_else_is_an_error_naming_why() {
        let id = json!(1);
        for (status, content_type, body, code) in [
            (200, "application/json", &b"{\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{}}"[..], Some("other_id")),
            (200, "application/json", b"{\"jsonrpc\":\"2.0\",\"id\":1,\"id\":1,\"result\":{}}", Some("not_json")),
            (200, "text/plain", b"{}", Some("content_type")),
            (200, "text/event-stream", b"data: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"x\"}\n\n", Some("after_response")),
            (400, "application/json", b"{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":-1,\"message\":\"no\"}}", None),
        ] {
            let status = StatusCode::from_u16(status).expect("a status");
            let error = read_response(status, &typed(content_type), body, &id)
                .expect_err("not a readable success");
            match (error, code) {
                (AnswerError::Unreadable { code: got, .. }, Some(code)) => assert_eq!(got, code),
                (AnswerError::Status(got), None) => assert_eq!(got, status),
                (other, _) => panic!("{other:?} for {status} {content_type}"),
            }
        }
    }
}
