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

use bytes::Bytes;
use http::{Response, StatusCode, header};
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
    /// `application/json`: one JSON-RPC response.
    Json(Value),
    /// `text/event-stream`: events, one of which is the response.
    Sse(Vec<SseEvent>),
    /// Anything else: passed through as read.
    Other(Bytes),
}

/// One server-sent event, kept field by field so it can be written back.
pub(crate) struct SseEvent {
    /// Lines other than `data:` (id, event, retry, comments), in order.
    pub other: Vec<String>,
    pub data: String,
}

/// Reads an inner answer whole, as bytes, up to `max` bytes.
pub(crate) async fn read_raw<B>(
    response: Response<B>,
    max: usize,
) -> Result<(http::response::Parts, Bytes), &'static str>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    let (parts, body) = response.into_parts();
    let bytes = Limited::new(body, max)
        .collect()
        .await
        .map_err(|_| "the answer could not be read whole")?
        .to_bytes();
    Ok((parts, bytes))
}

/// Reads an inner answer up to `max` bytes.
pub(crate) async fn read_answer<B>(
    response: Response<B>,
    max: usize,
) -> Result<(http::response::Parts, ListAnswer), &'static str>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    let (parts, bytes) = read_raw(response, max).await?;
    let content_type = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase();
    let answer = if parts.status != StatusCode::OK {
        ListAnswer::Other(bytes)
    } else if content_type.starts_with("application/json") {
        ListAnswer::Json(serde_json::from_slice(&bytes).map_err(|_| "the list answer is not JSON")?)
    } else if content_type.starts_with("text/event-stream") {
        ListAnswer::Sse(parse_sse(
            std::str::from_utf8(&bytes).map_err(|_| "the event stream is not UTF-8")?,
        ))
    } else {
        ListAnswer::Other(bytes)
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

/// The list result inside a JSON-RPC response for `id`, if it is one.
pub(crate) fn result_of<'a>(
    message: &'a mut Value,
    id: &Value,
) -> Option<&'a mut Map<String, Value>> {
    if message.get("id") != Some(id) {
        return None;
    }
    message.get_mut("result").and_then(Value::as_object_mut)
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
