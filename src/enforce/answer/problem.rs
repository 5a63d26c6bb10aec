//! Why an inner answer was refused: one code per rule of the reader, sent to the client as
//! `error.data.problem` and logged beside the method.

/// One reason an inner answer is not passed on. [`Problem::code`] is the wire and log name;
/// `docs/security.md` renders this table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Problem {
    /// The head or the body did not arrive within the answer time limit.
    Late,
    /// The body is larger than the answer bound.
    TooLarge,
    /// The body broke off.
    Broken,
    /// A success with no, several, or another `Content-Type` than JSON or an event stream.
    ContentType,
    /// A `Content-Encoding` other than `identity`.
    ContentEncoding,
    /// An event stream that is not UTF-8.
    NotUtf8,
    /// A message (the JSON body, or an event's data) that is not one strict JSON value.
    NotJson,
    /// JSON that is not one JSON-RPC 2.0 message.
    NotJsonRpc,
    /// An event with data whose type is not `message`.
    EventType,
    /// No response to this request's id.
    NoResponse,
    /// A response to another id.
    OtherId,
    /// A second response, or any message after the response.
    AfterResponse,
    /// A non-2xx answer that carries a JSON-RPC result.
    ResultOnErrorStatus,
    /// The result is not what the method returns.
    BadResult,
    /// A response on the GET stream, which carries none.
    ResponseOnStream,
}

impl Problem {
    /// Every problem, in the documented order.
    #[cfg(test)]
    pub(crate) const ALL: [Problem; 15] = [
        Problem::Late,
        Problem::TooLarge,
        Problem::Broken,
        Problem::ContentType,
        Problem::ContentEncoding,
        Problem::NotUtf8,
        Problem::NotJson,
        Problem::NotJsonRpc,
        Problem::EventType,
        Problem::NoResponse,
        Problem::OtherId,
        Problem::AfterResponse,
        Problem::ResultOnErrorStatus,
        Problem::BadResult,
        Problem::ResponseOnStream,
    ];

    /// The name sent as `error.data.problem` and logged.
    pub(crate) fn code(self) -> &'static str {
        match self {
            Problem::Late => "late",
            Problem::TooLarge => "too_large",
            Problem::Broken => "broken",
            Problem::ContentType => "content_type",
            Problem::ContentEncoding => "content_encoding",
            Problem::NotUtf8 => "not_utf8",
            Problem::NotJson => "not_json",
            Problem::NotJsonRpc => "not_jsonrpc",
            Problem::EventType => "event_type",
            Problem::NoResponse => "no_response",
            Problem::OtherId => "other_id",
            Problem::AfterResponse => "after_response",
            Problem::ResultOnErrorStatus => "result_on_error_status",
            Problem::BadResult => "bad_result",
            Problem::ResponseOnStream => "response_on_stream",
        }
    }

    /// What went wrong, in words, for the documentation table and the log line.
    pub(crate) fn describe(self) -> &'static str {
        match self {
            Problem::Late => "the head or the body did not arrive within the answer time limit",
            Problem::TooLarge => "the body is larger than the answer bound",
            Problem::Broken => "the body broke off",
            Problem::ContentType => {
                "a success with no, several, or another Content-Type than JSON or an event stream"
            }
            Problem::ContentEncoding => "a Content-Encoding other than identity",
            Problem::NotUtf8 => "an event stream that is not UTF-8",
            Problem::NotJson => {
                "a message (the JSON body, or an event's data) that is not one strict JSON value"
            }
            Problem::NotJsonRpc => "JSON that is not one JSON-RPC 2.0 message",
            Problem::EventType => "an event with data whose type is not `message`",
            Problem::NoResponse => "no response to this request's id",
            Problem::OtherId => "a response to another id",
            Problem::AfterResponse => "a second response, or any message after the response",
            Problem::ResultOnErrorStatus => "a non-2xx answer that carries a JSON-RPC result",
            Problem::BadResult => "the result is not what the method returns",
            Problem::ResponseOnStream => "a response on the GET stream, which carries none",
        }
    }
}
