//! Discovery filtering: the answers of every listing method of the
//! [method table](crate::mcp::METHODS) (`tools/list`, `prompts/list`, `resources/list`,
//! `resources/templates/list`, `resources/directory/read`, `skills/list`) are filtered per
//! caller.
//!
//! Each entry of the inner server's page is shown to `evaluate` in the discovery phase, and
//! entries it does not allow are removed before the client sees the page. Pagination cursors
//! are wrapped in the layer's own signed cursor, bound to the caller and the list method, so a
//! cursor cannot be replayed by someone else or against another list. A policy that fails on
//! any entry fails the whole list with an internal error: a list is never silently emptied.
//! List-changed notifications are not filtered: they carry no entries, only a hint to list
//! again, and the next list is filtered.

use std::future::Future;
use std::time::Duration;

use bytes::Bytes;
use http::{Response, header};
use http_body::Body;
use serde_json::{Map, Value};

use http::request::Parts;

use super::body::GateBody;
use super::bounds::Inner;
use super::buffer::collect;
use super::interaction::binding;
use super::pipeline::{local, protocol_error, start};
use super::refuse::internal_error;
use crate::auth::Principal;
use crate::gate::Gate;
use crate::mcp::annotations::ListedTool;
use crate::mcp::request::McpRequest;
use crate::mcp::{EntryKind, Listing, ProtocolContext, ProtocolError, Target};
use crate::policy::{self, Decision, Evaluation, EvaluationData, Phase};

/// What `evaluate` is shown for one list entry: the entry's name as the kind of target the
/// listing holds, or `None` when the entry does not name itself as it must.
pub(crate) fn entry_target(listing: Listing, entry: &Value) -> Option<Target> {
    let name = entry
        .get(listing.entry.name_field())
        .and_then(Value::as_str)?
        .to_owned();
    Some(match listing.entry {
        EntryKind::Tool => Target::Tool {
            name,
            arguments: Default::default(),
        },
        EntryKind::Prompt => Target::Prompt {
            name,
            arguments: Default::default(),
        },
        EntryKind::Resource | EntryKind::ResourceTemplate => Target::Resource { uri: name },
        EntryKind::Skill => Target::Skill { uri: name },
    })
}

/// An inner answer read whole: its JSON-RPC messages, to read or rewrite, and how to write
/// them back as the inner server framed them.
pub(crate) struct InnerAnswer {
    /// The answer's JSON-RPC messages, in order: one for `application/json`, one per event
    /// with data for `text/event-stream`, none for an answer that is not a success.
    pub messages: Vec<Value>,
    framing: Framing,
}

/// How an inner answer was framed.
enum Framing {
    Json,
    /// The events as they came; those with data hold `messages` in order.
    EventStream(Vec<SseEvent>),
    /// Not a success: passed on as read.
    AsIs(Bytes),
}

impl InnerAnswer {
    /// The answer's bytes, with its messages as they are now.
    pub fn into_body(self) -> Bytes {
        let mut messages = self.messages.into_iter();
        match self.framing {
            Framing::Json => {
                Bytes::from(messages.next().map(|m| m.to_string()).unwrap_or_default())
            }
            Framing::EventStream(mut events) => {
                for event in events.iter_mut().filter(|event| !event.data.is_empty()) {
                    if let Some(message) = messages.next() {
                        event.data = message.to_string();
                    }
                }
                write_sse(&events)
            }
            Framing::AsIs(bytes) => bytes,
        }
    }
}

/// One server-sent event, kept field by field so it can be written back.
pub(crate) struct SseEvent {
    /// Lines other than `data:` (id, event, retry, comments), in order.
    pub other: Vec<String>,
    pub data: String,
}

/// Calls the inner service and reads its answer whole: head and body within one time limit
/// (none for a held call, which may run long), the body up to `max` bytes (read by
/// [`collect`], the layer's one body reader). The inner service's own error comes out as the
/// outer `Err`; an answer that is late, too large or broken off as the inner one.
pub(crate) async fn fetch_whole<F, B, E>(
    call: F,
    (max, limit): (usize, Option<Duration>),
) -> Result<Result<(http::response::Parts, Bytes), &'static str>, E>
where
    F: Future<Output = Result<Response<B>, E>>,
    B: Body<Data = Bytes>,
{
    const LATE: &str = "the answer did not arrive in time";
    let deadline = limit.map(|limit| tokio::time::Instant::now() + limit);
    let response = match deadline {
        Some(deadline) => match tokio::time::timeout_at(deadline, call).await {
            Ok(response) => response?,
            Err(_) => return Ok(Err(LATE)),
        },
        None => call.await?,
    };
    let (parts, body) = response.into_parts();
    let read = collect(body, max);
    let read = match deadline {
        Some(deadline) => match tokio::time::timeout_at(deadline, read).await {
            Ok(read) => read,
            Err(_) => return Ok(Err(LATE)),
        },
        None => read.await,
    };
    Ok(read
        .map(|bytes| (parts, bytes))
        .map_err(|_| "the answer is too large, or broke off"))
}

/// [`fetch_whole`], then the answer parsed (see [`parse_answer`]).
pub(crate) async fn fetch_answer<F, B, E>(
    call: F,
    bounds: (usize, Option<Duration>),
) -> Result<Result<(http::response::Parts, InnerAnswer), &'static str>, E>
where
    F: Future<Output = Result<Response<B>, E>>,
    B: Body<Data = Bytes>,
{
    Ok(fetch_whole(call, bounds)
        .await?
        .and_then(|(parts, bytes)| parse_answer(parts, bytes)))
}

/// The content type of an answer the layer reads, if it can read it: JSON or an event stream.
pub(crate) fn readable_type(parts: &http::response::Parts) -> Option<Readable> {
    let content_type = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())?;
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    match essence.as_str() {
        "application/json" => Some(Readable::Json),
        "text/event-stream" => Some(Readable::EventStream),
        _ => None,
    }
}

/// The two forms of answer the layer reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Readable {
    Json,
    EventStream,
}

/// An inner answer read whole, parsed. A success answer must be JSON or an event stream that
/// the layer can parse; anything else is an error, never passed on unread. An answer that is
/// not a success (a 404 for an ended session, say) carries no result and is passed on as it
/// came.
pub(crate) fn parse_answer(
    parts: http::response::Parts,
    bytes: Bytes,
) -> Result<(http::response::Parts, InnerAnswer), &'static str> {
    let answer = |messages, framing| InnerAnswer { messages, framing };
    if !parts.status.is_success() {
        return Ok((parts, answer(Vec::new(), Framing::AsIs(bytes))));
    }
    let one_message = |text: &[u8], problem| match serde_json::from_slice::<Value>(text) {
        Ok(message) if message.is_object() => Ok(message),
        _ => Err(problem),
    };
    let parsed = match readable_type(&parts) {
        Some(Readable::Json) => answer(
            vec![one_message(
                &bytes,
                "the answer is not one JSON-RPC message",
            )?],
            Framing::Json,
        ),
        Some(Readable::EventStream) => {
            let text = std::str::from_utf8(&bytes).map_err(|_| "the event stream is not UTF-8")?;
            let events = parse_sse(text);
            // Events without data (rmcp's priming event) carry no message.
            let messages = events
                .iter()
                .filter(|event| !event.data.is_empty())
                .map(|event| {
                    let problem = "an event of the stream is not one JSON-RPC message";
                    one_message(event.data.as_bytes(), problem)
                })
                .collect::<Result<Vec<_>, _>>()?;
            answer(messages, Framing::EventStream(events))
        }
        None => return Err("the answer has a content type the layer cannot read"),
    };
    Ok((parts, parsed))
}

fn parse_sse(text: &str) -> Vec<SseEvent> {
    let normalized = text.replace("\r\n", "\n");
    normalized
        .split("\n\n")
        .filter(|block| !block.trim().is_empty())
        .map(|block| {
            let mut event = SseEvent {
                other: Vec::new(),
                data: String::new(),
            };
            let mut data_lines = Vec::new();
            for line in block.lines() {
                match line.strip_prefix("data:") {
                    Some(data) => data_lines.push(data.strip_prefix(' ').unwrap_or(data)),
                    None => event.other.push(line.to_owned()),
                }
            }
            event.data = data_lines.join("\n");
            event
        })
        .collect()
}

/// Writes events back in the SSE format.
pub(crate) fn write_sse(events: &[SseEvent]) -> Bytes {
    let mut out = String::new();
    for event in events {
        for line in &event.other {
            out.push_str(line);
            out.push('\n');
        }
        if !event.data.is_empty() || event.other.is_empty() {
            for line in event.data.split('\n') {
                out.push_str("data: ");
                out.push_str(line);
                out.push('\n');
            }
        }
        out.push('\n');
    }
    Bytes::from(out)
}

/// The result inside one message of a list answer. `Ok(None)` for a message that is not a
/// response (a request or notification of the server's, passed on) or an error response; an
/// error for a response to another id, or a result that is not an object, which the layer
/// cannot filter and never passes on.
pub(crate) fn result_of<'a>(
    message: &'a mut Value,
    id: &Value,
) -> Result<Option<&'a mut Map<String, Value>>, &'static str> {
    let is_response = message.get("result").is_some() || message.get("error").is_some();
    if !is_response {
        return Ok(None);
    }
    if message.get("id") != Some(id) {
        return Err("the answer holds a response to another request");
    }
    match message.get_mut("result") {
        None => Ok(None),
        Some(Value::Object(result)) => Ok(Some(result)),
        Some(_) => Err("the result is not an object"),
    }
}

/// A list request: its cursor opened, the inner answer filtered, the next cursor sealed.
pub(super) struct ListRequest<'a> {
    pub gate: &'a Gate,
    pub principal: &'a Principal,
    pub request: &'a McpRequest,
    pub protocol: &'a ProtocolContext,
    pub class: Listing,
}

impl ListRequest<'_> {
    pub(super) async fn run<S: Inner>(
        &self,
        inner: &mut S,
        mut parts: Parts,
        bytes: Bytes,
    ) -> Result<Response<GateBody<S::Res>>, S::Error> {
        let settings = &*self.gate.inner;
        let resource = self.gate.inner.resource.uri.as_str();
        let binding = binding(self.principal, resource, self.protocol, self.request);
        let body = match self.inner_cursor(&binding) {
            Ok(None) => bytes,
            Ok(Some(rewritten)) => {
                // The body is rewritten: the client's length no longer describes it.
                parts.headers.remove(header::CONTENT_LENGTH);
                rewritten
            }
            Err(error) => return Ok(protocol_error(&error.with_id(Some(&self.request.id)))),
        };
        let limits = &settings.requests;
        let call = start(inner, parts, S::Req::from(body));
        let read = fetch_answer(call, limits.answer_bounds());
        let (mut head, mut answer) = match read.await? {
            Ok(read) => read,
            Err(problem) => {
                tracing::error!(target: "mcp_gate::discovery", method = %self.request.method, problem, "list answer unreadable; refusing");
                return Ok(local(internal_error(self.request)));
            }
        };
        for message in &mut answer.messages {
            if let Err(response) = self.filter(message, &binding).await {
                return Ok(local(response));
            }
        }
        head.headers.remove(header::CONTENT_LENGTH);
        Ok(Response::from_parts(
            head,
            GateBody::local(answer.into_body()),
        ))
    }

    /// The request to send on when the client's cursor is one of the layer's: the same request
    /// with the inner server's cursor in its place. `None` for a first page.
    fn inner_cursor(
        &self,
        binding: &crate::continuation::Binding<'_>,
    ) -> Result<Option<Bytes>, ProtocolError> {
        let cursor = match self.request.param("cursor") {
            None | Some(serde_json::Value::Null) => return Ok(None),
            Some(serde_json::Value::String(cursor)) => cursor,
            Some(_) => return Err(ProtocolError::invalid_params("the cursor must be a string")),
        };
        let state = &self.gate.inner.continuation.state;
        let inner_cursor = state
            .open_cursor(binding, cursor)
            .map_err(|error| ProtocolError::invalid_params(error.to_string()))?;
        let mut params = self.request.params().into_owned();
        params.insert("cursor".into(), inner_cursor.into());
        let (id, method) = (&self.request.id, &self.request.method);
        let message =
            serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        Ok(Some(Bytes::from(message.to_string())))
    }

    /// Whether the policy lets this caller see one entry; an entry the layer cannot name is
    /// hidden. A listed tool's annotations are remembered on the way (an empty object for a
    /// tool listed without any).
    async fn shows(&self, entry: &serde_json::Value) -> Result<bool, Response<Bytes>> {
        let settings = &self.gate.inner.policy;
        let is_tool = self.class.entry == EntryKind::Tool;
        let annotations = is_tool.then(|| std::sync::Arc::new(ListedTool::from_entry(entry)));
        if let (Some(name), Some(annotations)) = (
            entry.get("name").and_then(serde_json::Value::as_str),
            &annotations,
        ) {
            settings
                .tool_annotations
                .remember(name, annotations.clone());
        }
        let Some(target) = entry_target(self.class, entry) else {
            return Ok(false);
        };
        let evaluation = Evaluation::new(EvaluationData {
            principal: self.principal.clone(),
            method: self.request.method.clone(),
            target,
            protocol: self.protocol.clone(),
            phase: Phase::Discovery,
            answered: None,
            listed: annotations,
            approval: None,
        });
        match policy::run(&*settings.policy, evaluation, settings.evaluate_timeout).await {
            Ok(decision) => Ok(match decision {
                Decision::Allow => true,
                // A remedy the client can act on keeps the entry listed only when asked for.
                Decision::Ask { .. } => self.gate.inner.discovery.list_remediable,
                Decision::Deny(remedy) => {
                    self.gate.inner.discovery.list_remediable && remedy.is_actionable()
                }
                _ => false,
            }),
            Err(failure) => {
                tracing::error!(target: "mcp_gate::discovery", method = %self.request.method, failure = failure.kind(), error = %failure, "the policy failed on a list entry; refusing the list");
                Err(internal_error(self.request))
            }
        }
    }

    /// Filters the entries of one JSON-RPC list response in place.
    async fn filter(
        &self,
        message: &mut serde_json::Value,
        binding: &crate::continuation::Binding<'_>,
    ) -> Result<(), Response<Bytes>> {
        let settings = &*self.gate.inner;
        let refuse = |problem: &'static str| {
            tracing::error!(target: "mcp_gate::discovery", method = %self.request.method, problem, "list answer unreadable; refusing");
            internal_error(self.request)
        };
        let result = match result_of(message, &self.request.id) {
            Ok(Some(result)) => result,
            // A message of the server's own, or an error: nothing to filter.
            Ok(None) => return Ok(()),
            Err(problem) => return Err(refuse(problem)),
        };
        let entries = match result.get_mut(self.class.entries) {
            Some(serde_json::Value::Array(entries)) => entries,
            // No entries: nothing is shown.
            None => return Ok(()),
            Some(_) => return Err(refuse("the entries of the result are not an array")),
        };
        let listed = entries.len();
        let mut kept = Vec::with_capacity(listed);
        for entry in entries.drain(..) {
            if self.shows(&entry).await? {
                kept.push(entry);
            }
        }
        let shown = kept.len();
        *entries = kept;
        if let Some(next) = result.get("nextCursor").and_then(serde_json::Value::as_str) {
            let sealed = settings.continuation.state.seal_cursor(
                binding,
                next,
                settings.continuation.cursor_ttl,
            );
            result.insert("nextCursor".into(), sealed.into());
        }
        tracing::info!(
            target: "mcp_gate::decision",
            subject = self.principal.subject().unwrap_or(""),
            client_id = self.principal.client_id().unwrap_or(""),
            method = %self.request.method,
            listed,
            shown,
            hidden = listed - shown,
            "discovery filtered"
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sse_round_trip_keeps_ids_and_events() {
        let text = "id: 1\nevent: message\ndata: {\"a\":1}\n\n: comment\n\ndata: {\"b\":\n\n";
        let events = parse_sse(text);
        assert_eq!(events.len(), 3);
        assert_eq!(events[0].other, ["id: 1", "event: message"]);
        assert_eq!(events[0].data, "{\"a\":1}");
        let written = write_sse(&events);
        let again = parse_sse(std::str::from_utf8(&written).unwrap());
        assert_eq!(again[0].data, events[0].data);
        assert_eq!(again[1].other, [": comment"]);
    }

    fn listing(method: &str) -> Listing {
        match crate::mcp::method_class(method) {
            crate::mcp::MethodClass::Listing(listing) => listing,
            other => panic!("{method} is {other:?}"),
        }
    }

    #[test]
    fn targets_of_entries() {
        let tool = serde_json::json!({"name": "echo"});
        assert_eq!(
            entry_target(listing("tools/list"), &tool)
                .and_then(|t| t.name().map(str::to_owned))
                .as_deref(),
            Some("echo")
        );
        let template = serde_json::json!({"uriTemplate": "file:///{path}"});
        assert!(matches!(
            entry_target(listing("resources/templates/list"), &template),
            Some(Target::Resource { .. })
        ));
        let skill = serde_json::json!({"uri": "skill://a/SKILL.md", "frontmatter": {"name": "a"}});
        assert_eq!(
            entry_target(listing("skills/list"), &skill),
            Some(Target::Skill {
                uri: "skill://a/SKILL.md".into()
            })
        );
        let child = serde_json::json!({"uri": "demo://secret", "name": "secret"});
        assert_eq!(
            entry_target(listing("resources/directory/read"), &child),
            Some(Target::Resource {
                uri: "demo://secret".into()
            })
        );
        assert!(
            entry_target(
                listing("tools/list"),
                &serde_json::json!({"title": "no name"})
            )
            .is_none()
        );
    }
}
