//! The one reader of inner answers the layer reads whole: the six listings, `server/discover`,
//! conceal probes, the answer to an approved held call, the layer's side requests, and the
//! answers it marks private to caches.
//!
//! One rule, wherever an answer is read:
//!
//! 1. **Read whole and exactly.** Head and body within one time limit (none for a held call)
//!    and one size bound. JSON is read strictly ([`crate::mcp::json`]); an event stream as the
//!    WHATWG standard reads it ([`sse`]).
//! 2. **Pass only what was read.** A success passes only when it is JSON or an event stream
//!    (one `Content-Type`, no `Content-Encoding`), every message in it is one JSON-RPC message,
//!    and it holds exactly one response for this request's id, with only notifications and the
//!    server's requests before it and nothing after it. A non-2xx answer passes only when it
//!    carries no result. Anything else is a [`Problem`], and the client gets `-32603` naming it.
//! 3. **The layer writes what it sends.** Only what it read: JSON as the one message
//!    serialised, an event stream in [`sse::write`]'s canonical form, the layer's own
//!    `Content-Type`, and none of the inner headers that describe the bytes it replaced. A
//!    listing is read once and written once ([`listed`]): its messages are written from the
//!    bytes they came in, which passed the same strict reading, with only the layer's edits
//!    (entries left out, the cursor sealed, the result marked private); a JSON listing it
//!    changes nothing in goes out as the same bytes.
//!
//! Answers the layer does not read (an allowed `tools/call`, the GET stream, everything else
//! forwarded) are streamed untouched; `docs/security.md` lists both sets, with the reasons.

mod cache;
mod list_edit;
mod list_json;
mod list_memo;
mod listed;
mod listen;
mod message;
mod one;
mod problem;
mod sse;
mod stream;

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Response, StatusCode, header};
use http_body::Body;
use serde_json::{Map, Value, json};

pub use cache::CACHEABLE;
pub(crate) use cache::{judged_per_caller, mark_private};
pub(crate) use list_edit::Edit;
pub(crate) use list_json::{Entries, Entry, Page, Tool, Wanted};
pub(crate) use listed::{Frame, ListAnswer};
pub(crate) use listen::{Grant, ListenStream};
pub use one::{AnswerError, AnswerMessages, read_answer, read_response};
pub(crate) use problem::Problem;
pub(crate) use stream::{Watch, watch_get};

use super::buffer::{Unread, collect};
use crate::denial::render::json_rpc;
use crate::mcp::request::McpRequest;
use crate::mcp::{INTERNAL_ERROR, ProtocolError};
use message::{Kind, carries_result, kind, strict_json};

/// How a success answer was framed, and how the layer writes it back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Framing {
    /// `application/json`: the one response.
    Json,
    /// `text/event-stream`: the messages before the response, then the response.
    EventStream,
}

impl Framing {
    /// The `Content-Type` the layer writes an answer of this framing with.
    fn content_type(self) -> &'static str {
        match self {
            Framing::Json => "application/json",
            Framing::EventStream => "text/event-stream",
        }
    }
}

/// An inner answer that passed the rule.
#[derive(Debug)]
pub(crate) enum Read {
    /// A success holding this request's response.
    Answered(Answer),
    /// A non-2xx answer carrying no result: its head, and the one JSON-RPC error it held, if
    /// its body was exactly that (any other body is not passed on). A GET's answer that is no
    /// event stream comes out as one too, its body kept when it is strict JSON.
    NotSuccess(http::response::Parts, Option<Value>),
}

/// A success answer, read.
#[derive(Debug)]
pub(crate) struct Answer {
    head: http::response::Parts,
    framing: Framing,
    /// The notifications and server requests that came before the response, in order.
    before: Vec<Value>,
    /// The response to this request's id.
    response: Value,
    /// The length of the inner body: about what the layer writes back.
    size_hint: usize,
}

impl Answer {
    /// The response, taken.
    pub(crate) fn into_response_message(self) -> Value {
        self.response
    }

    /// The result, when the response is one (checked to be an object when read).
    pub(crate) fn result_mut(&mut self) -> Option<&mut Map<String, Value>> {
        self.response
            .get_mut("result")
            .and_then(Value::as_object_mut)
    }
}

impl Read {
    /// The result, when this is a success whose response is a result.
    pub(crate) fn result_mut(&mut self) -> Option<&mut Map<String, Value>> {
        match self {
            Read::Answered(answer) => answer.result_mut(),
            Read::NotSuccess(..) => None,
        }
    }

    /// Every message the layer will write back, to read or rewrite.
    pub(crate) fn messages_mut(&mut self) -> Vec<&mut Value> {
        match self {
            Read::Answered(answer) => answer
                .before
                .iter_mut()
                .chain(std::iter::once(&mut answer.response))
                .collect(),
            Read::NotSuccess(_, error) => error.iter_mut().collect(),
        }
    }

    /// The answer as the layer writes it: the inner head less the headers that described the
    /// inner bytes, the layer's own `Content-Type`, and the messages serialised.
    pub(crate) fn into_http(self) -> Response<Bytes> {
        match self {
            Read::Answered(answer) => {
                let hint = answer.size_hint;
                let body = match answer.framing {
                    Framing::Json => json_bytes(&answer.response, hint),
                    Framing::EventStream => {
                        sse::write(answer.before.iter().chain([&answer.response]), hint)
                    }
                };
                written(answer.head, Some(answer.framing.content_type()), body)
            }
            Read::NotSuccess(head, Some(error)) => {
                written(head, Some("application/json"), json_bytes(&error, 0))
            }
            Read::NotSuccess(head, None) => written(head, None, Bytes::new()),
        }
    }
}

/// `message` as compact JSON; `hint` is about how long it will be.
fn json_bytes(message: &Value, hint: usize) -> Bytes {
    let mut out = Vec::with_capacity(hint);
    // Writing a `Value` into a `Vec` cannot fail.
    let _ = serde_json::to_writer(&mut out, message);
    Bytes::from(out)
}

/// Headers of the inner answer that describe the bytes (or the connection) the layer replaced
/// with its own; they never pass. Names, not strings: a string is parsed again at every
/// removal.
const REPLACED: [HeaderName; 14] = [
    header::CONTENT_TYPE,
    header::CONTENT_LENGTH,
    header::CONTENT_ENCODING,
    header::CONTENT_RANGE,
    header::TRANSFER_ENCODING,
    header::ETAG,
    header::TRAILER,
    header::CONNECTION,
    header::UPGRADE,
    // Digests of the inner body (no `http` constants for them).
    HeaderName::from_static("content-md5"),
    HeaderName::from_static("digest"),
    HeaderName::from_static("content-digest"),
    HeaderName::from_static("repr-digest"),
    HeaderName::from_static("keep-alive"),
];

fn written(
    mut head: http::response::Parts,
    content_type: Option<&'static str>,
    body: Bytes,
) -> Response<Bytes> {
    for name in &REPLACED {
        head.headers.remove(name);
    }
    if let Some(content_type) = content_type {
        head.headers
            .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    }
    Response::from_parts(head, body)
}

/// Calls the inner service and reads its answer under the rule, for the request whose id is
/// `id`: head and body within `limit` (none for a held call, which may run long), the body up
/// to `max` bytes. The inner service's own error comes out as the outer `Err`.
pub(crate) async fn fetch<F, B, E>(
    call: F,
    bounds: (usize, Option<Duration>),
    id: &Value,
) -> Result<Result<Read, Problem>, E>
where
    F: Future<Output = Result<Response<B>, E>>,
    B: Body<Data = Bytes>,
{
    Ok(match fetch_whole(call, bounds).await? {
        Ok((head, bytes)) => read(head, &bytes, id),
        Err(problem) => Err(problem),
    })
}

/// Calls the inner service and collects its answer whole, not yet read: head and body within
/// `limit`, the body up to `max` bytes (see [`fetch`]).
///
/// One timer bounds both steps, and only once the answer has kept the request waiting while
/// the runtime ran what else it had queued ([`before`]).
pub(crate) async fn fetch_whole<F, B, E>(
    call: F,
    (max, limit): (usize, Option<Duration>),
) -> Result<Result<(http::response::Parts, Bytes), Problem>, E>
where
    F: Future<Output = Result<Response<B>, E>>,
    B: Body<Data = Bytes>,
{
    let deadline = limit.map(|limit| tokio::time::Instant::now() + limit);
    let mut timer = std::pin::pin!(None);
    let response = match before(deadline, timer.as_mut(), call).await {
        Some(response) => response?,
        None => return Ok(Err(Problem::Late)),
    };
    let (head, body) = response.into_parts();
    let Some(body) = before(deadline, timer.as_mut(), collect(body, max)).await else {
        return Ok(Err(Problem::Late));
    };
    Ok(unread_problem(body).map(|bytes| (head, bytes)))
}

/// How many times a future is let wait for the runtime's other queued work before a timer is
/// armed for it.
const UNTIMED_ROUNDS: usize = 2;

/// `future`'s output, or `None` once `deadline` (when there is one) has passed first.
///
/// Each Tokio timer is registered and removed under the runtime's one timer lock, and one due
/// sooner than every other registered wakes the thread parked on the I/O driver (a write to
/// its eventfd, then a context switch): over loopback, a timed answer made about one such
/// wake-up per request, which the bare server never pays. An inner server in the same process
/// mostly answers once the runtime has run the tasks already queued, so the future is first
/// polled, then let the runtime run the rest of its queue ([`tokio::task::yield_now`]) a few
/// times; only a future still pending then gets the timer, at the same deadline. `timer` is
/// the one timer of every step of an answer, armed by the first step that needs it.
async fn before<F: Future>(
    deadline: Option<tokio::time::Instant>,
    mut timer: Pin<&mut Option<tokio::time::Sleep>>,
    future: F,
) -> Option<F::Output> {
    let Some(deadline) = deadline else {
        return Some(future.await);
    };
    let mut future = std::pin::pin!(future);
    if timer.is_none() {
        for _ in 0..UNTIMED_ROUNDS {
            if let Poll::Ready(output) =
                std::future::poll_fn(|cx| Poll::Ready(future.as_mut().poll(cx))).await
            {
                return Some(output);
            }
            tokio::task::yield_now().await;
        }
        timer.set(Some(tokio::time::sleep_until(deadline)));
    }
    // Armed just above or by an earlier step; were it not, the answer would count as late.
    let mut timer = timer.as_pin_mut()?;
    std::future::poll_fn(|cx| {
        if let Poll::Ready(output) = future.as_mut().poll(cx) {
            return Poll::Ready(Some(output));
        }
        timer.as_mut().poll(cx).map(|()| None)
    })
    .await
}

/// The body, at most `max` bytes, by `deadline` when there is one (timed as [`before`] times).
async fn collect_by<B: Body<Data = Bytes>>(
    body: B,
    max: usize,
    deadline: Option<tokio::time::Instant>,
) -> Result<Bytes, Problem> {
    let timer = std::pin::pin!(None);
    match before(deadline, timer, collect(body, max)).await {
        Some(body) => unread_problem(body),
        None => Err(Problem::Late),
    }
}

/// A body not read whole, as the problem it is.
fn unread_problem(body: Result<Bytes, Unread>) -> Result<Bytes, Problem> {
    body.map_err(|unread| match unread {
        Unread::TooLarge => Problem::TooLarge,
        Unread::Broken => Problem::Broken,
    })
}

/// An answer that answers no request (a GET's that is no event stream), read whole: it passes
/// only without a JSON-RPC result, its body only when it is one strict JSON value (written
/// again by the layer), never as it came.
pub(crate) async fn read_unanswering<B: Body<Data = Bytes>>(
    response: Response<B>,
    max: usize,
    deadline: Option<tokio::time::Instant>,
) -> Result<Read, Problem> {
    let (head, body) = response.into_parts();
    let bytes = collect_by(body, max, deadline).await?;
    let error = not_success_body(&head.headers, &bytes)?;
    let json = framing(&head.headers) == Ok(Framing::Json);
    let body = error.or_else(|| json.then(|| strict_json(&bytes).ok()).flatten());
    Ok(Read::NotSuccess(head, body))
}

/// Whether a success answer declares an event stream (and nothing else the rule refuses).
pub(crate) fn is_event_stream(headers: &HeaderMap) -> bool {
    framing(headers) == Ok(Framing::EventStream)
}

/// The head of an answer the layer writes again as it flows: the layer's own `Content-Type`,
/// none of the inner headers that describe the bytes it replaces.
pub(crate) fn rewritten_head(head: http::response::Parts) -> http::response::Parts {
    written(head, Some("text/event-stream"), Bytes::new())
        .into_parts()
        .0
}

/// An answer read whole, under the rule (see the module documentation).
pub(crate) fn read(head: http::response::Parts, bytes: &[u8], id: &Value) -> Result<Read, Problem> {
    if !head.status.is_success() {
        let error = not_success_body(&head.headers, bytes)?;
        return Ok(Read::NotSuccess(head, error));
    }
    let framing = framing(&head.headers)?;
    let (messages, undispatched_data) = match framing {
        Framing::Json => (vec![strict_json(bytes)?], false),
        Framing::EventStream => {
            let text = crate::utf8::text(bytes).ok_or(Problem::NotUtf8)?;
            let stream = sse::parse(text);
            let mut messages = Vec::with_capacity(stream.events.len());
            // An event with empty data (`data:` alone: a priming event, a keep-alive) carries
            // no message; clients skip it, and so does the layer.
            for event in stream.events.iter().filter(|event| !event.data.is_empty()) {
                if event.kind != "message" {
                    return Err(Problem::EventType);
                }
                messages.push(strict_json(event.data.as_bytes())?);
            }
            (messages, stream.undispatched_data)
        }
    };
    let mut before = Vec::new();
    let mut response = None;
    for message in messages {
        let kind = kind(&message)?;
        if response.is_some() {
            return Err(Problem::AfterResponse);
        }
        match kind {
            Kind::Response if message.get("id") == Some(id) => response = Some(message),
            Kind::Response => return Err(Problem::OtherId),
            Kind::Request | Kind::Notification => before.push(message),
        }
    }
    let response = response.ok_or(Problem::NoResponse)?;
    if undispatched_data {
        return Err(Problem::AfterResponse);
    }
    if response
        .get("result")
        .is_some_and(|result| !result.is_object())
    {
        return Err(Problem::BadResult);
    }
    Ok(Read::Answered(Answer {
        head,
        framing,
        before,
        response,
        size_hint: bytes.len(),
    }))
}

/// The framing a success answer declares: exactly one `Content-Type`, JSON or an event stream,
/// and no `Content-Encoding` but `identity`.
fn framing(headers: &HeaderMap) -> Result<Framing, Problem> {
    let identity = headers
        .get_all(header::CONTENT_ENCODING)
        .iter()
        .all(|value| {
            value
                .to_str()
                .is_ok_and(|value| value.trim().eq_ignore_ascii_case("identity"))
        });
    if !identity {
        return Err(Problem::ContentEncoding);
    }
    let mut types = headers.get_all(header::CONTENT_TYPE).iter();
    let (Some(value), None) = (types.next(), types.next()) else {
        return Err(Problem::ContentType);
    };
    // The two types as servers write them, without parameters, need no parser.
    let bytes = value.as_bytes();
    if bytes.eq_ignore_ascii_case(b"application/json") {
        return Ok(Framing::Json);
    }
    if bytes.eq_ignore_ascii_case(b"text/event-stream") {
        return Ok(Framing::EventStream);
    }
    let mime: mime::Mime = value
        .to_str()
        .ok()
        .and_then(|value| value.parse().ok())
        .ok_or(Problem::ContentType)?;
    match mime.essence_str() {
        "application/json" => Ok(Framing::Json),
        "text/event-stream" => Ok(Framing::EventStream),
        _ => Err(Problem::ContentType),
    }
}

/// The body of a non-2xx answer, as far as the layer passes it: refused when it carries a
/// JSON-RPC result in any form a client might read (JSON, whatever its declared type, or an
/// event stream); kept when it is exactly one JSON-RPC error response; dropped otherwise.
fn not_success_body(headers: &HeaderMap, bytes: &[u8]) -> Result<Option<Value>, Problem> {
    let mut messages = Vec::new();
    if let Ok(value) = serde_json::from_slice::<Value>(bytes) {
        messages.push(value);
    }
    if let Some(text) = crate::utf8::text(bytes) {
        let stream = sse::parse(text);
        messages.extend(
            stream
                .events
                .iter()
                .filter_map(|event| serde_json::from_str::<Value>(&event.data).ok()),
        );
    }
    if messages.iter().any(carries_result) {
        return Err(Problem::ResultOnErrorStatus);
    }
    if framing(headers) != Ok(Framing::Json) {
        return Ok(None);
    }
    Ok(strict_json(bytes)
        .ok()
        .filter(|message| kind(message) == Ok(Kind::Response)))
}

/// The client's answer when the inner answer to `request` could not be passed on: `-32603`,
/// with the problem named in `error.data.problem`. Logged with the method and the problem,
/// never the answer's content.
pub(crate) fn refusal(
    request: &McpRequest,
    problem: Problem,
    what: &'static str,
) -> Response<Bytes> {
    tracing::error!(
        target: "mcp_gate::answer",
        method = crate::mcp::method_label(&request.method),
        answer = what,
        problem = problem.code(),
        "inner answer not passed on: {}",
        problem.describe()
    );
    let error = ProtocolError::new(
        StatusCode::OK,
        INTERNAL_ERROR,
        "the server's answer could not be passed on",
    )
    .with_data(json!({"problem": problem.code()}))
    .with_id(Some(&request.id));
    json_rpc(StatusCode::OK, error.to_json(), false)
}

#[cfg(test)]
mod tests;
