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

use std::time::Duration;

use bytes::Bytes;
use http::{Response, header};
use http_body::Body;
use http_body_util::{BodyExt, Limited};
use serde_json::{Map, Value};

use super::pipeline::BoxError;
use crate::mcp::{EntryKind, Listing, Target};

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

/// An inner answer, read whole.
pub(crate) enum ListAnswer {
    /// `application/json`: one JSON-RPC message.
    Json(Value),
    /// `text/event-stream`: events, one of which is the response.
    Sse(Vec<SseEvent>),
    /// Not a success: no result, passed through as read.
    Other(Bytes),
}

/// One server-sent event, kept field by field so it can be written back.
pub(crate) struct SseEvent {
    /// Lines other than `data:` (id, event, retry, comments), in order.
    pub other: Vec<String>,
    pub data: String,
}

/// Reads an inner answer whole, as bytes, up to `max` bytes and, when `limit` is set, within
/// that time.
pub(crate) async fn read_raw<B>(
    response: Response<B>,
    max: usize,
    limit: Option<Duration>,
) -> Result<(http::response::Parts, Bytes), &'static str>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    let (parts, body) = response.into_parts();
    let collect = Limited::new(body, max).collect();
    let collected = match limit {
        Some(limit) => crate::deadline::within(limit, collect)
            .await
            .map_err(|_| "the answer did not arrive in time")?,
        None => collect.await,
    };
    let bytes = collected
        .map_err(|_| "the answer is too large, or broke off")?
        .to_bytes();
    Ok((parts, bytes))
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

/// Reads an inner answer whole (see [`read_raw`]). A success answer must be JSON or an event
/// stream that the layer can parse; anything else is an error, never passed on unread. An
/// answer that is not a success (a 404 for an ended session, say) carries no result and is
/// passed on as it came.
pub(crate) async fn read_answer<B>(
    response: Response<B>,
    max: usize,
    limit: Option<Duration>,
) -> Result<(http::response::Parts, ListAnswer), &'static str>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    let (parts, bytes) = read_raw(response, max, limit).await?;
    if !parts.status.is_success() {
        return Ok((parts, ListAnswer::Other(bytes)));
    }
    let answer = match readable_type(&parts) {
        Some(Readable::Json) => {
            let message: Value =
                serde_json::from_slice(&bytes).map_err(|_| "the answer is not JSON")?;
            if !message.is_object() {
                return Err("the answer is not one JSON-RPC message");
            }
            ListAnswer::Json(message)
        }
        Some(Readable::EventStream) => {
            let text = std::str::from_utf8(&bytes).map_err(|_| "the event stream is not UTF-8")?;
            let events = parse_sse(text);
            for event in &events {
                // Events without data (rmcp's priming event) carry no message.
                if !event.data.is_empty()
                    && !serde_json::from_str::<Value>(&event.data).is_ok_and(|m| m.is_object())
                {
                    return Err("an event of the stream is not one JSON-RPC message");
                }
            }
            ListAnswer::Sse(events)
        }
        None => return Err("the answer has a content type the layer cannot read"),
    };
    Ok((parts, answer))
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
