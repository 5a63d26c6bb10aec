//! A listing's answer, read once and written once.
//!
//! The rule is the module's ([`super`]): the answer is read whole and exactly, and passes only
//! as one JSON-RPC response to this request, with nothing after it; every problem is the
//! [`Problem`] [`super::read`] names for the same bytes, in the same order. What differs is
//! how much is built. Each message is read in one strict pass that keeps only what the layer
//! asks of it ([`list_json`](super::list_json)): the entries' names (a tool's annotations and
//! input schema) and the next cursor. The layer then writes what it sends from the bytes it
//! read: the messages as they came, the result edited where the layer changes it (entries
//! hidden, the cursor sealed, the result marked private; [`list_edit`](super::list_edit)).
//! A JSON answer the layer changes nothing in goes out as the same bytes; an event stream is
//! always written in [`super::sse`]'s canonical form, each message on one `data` line.

use std::borrow::Cow;
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, Response};
use serde_json::Value;

use super::list_edit::{self, Edit};
use super::list_json::{self, Message, Outcome, Page, Wanted};
use super::message::{Kind, kind_of};
use super::{Framing, Problem, framing, sse, written};
use crate::mcp::listings::{KeptList, KeptWrite};

/// The messages of a success answer, as text, before any is read: the body of a JSON answer,
/// or the data of each event of a stream that carries some.
pub(crate) struct Frame<'a> {
    framing: Framing,
    body: &'a Bytes,
    /// Each message's text, with the type of the event that carried it (`message` for JSON).
    events: Vec<sse::Event<'a>>,
    /// The stream ended on data it did not dispatch.
    undispatched_data: bool,
}

impl<'a> Frame<'a> {
    /// The messages of a success answer whose head has `headers`.
    pub(crate) fn of(headers: &HeaderMap, body: &'a Bytes) -> Result<Self, Problem> {
        let framing = framing(headers)?;
        let (events, undispatched_data) = match framing {
            Framing::Json => {
                // Invalid UTF-8 is not JSON.
                let text = crate::utf8::text(body).ok_or(Problem::NotJson)?;
                let event = sse::Event {
                    kind: Cow::Borrowed("message"),
                    data: Cow::Borrowed(text),
                };
                (vec![event], false)
            }
            Framing::EventStream => {
                let text = crate::utf8::text(body).ok_or(Problem::NotUtf8)?;
                let mut stream = sse::parse(text);
                // An event with empty data carries no message; clients skip it, and so does
                // the layer.
                stream.events.retain(|event| !event.data.is_empty());
                (stream.events, stream.undispatched_data)
            }
        };
        Ok(Self {
            framing,
            body,
            events,
            undispatched_data,
        })
    }
}

/// A listing's answer that passed the rule.
pub(crate) struct ListAnswer<'a> {
    framing: Framing,
    body: &'a Bytes,
    /// The notifications and server requests before the response, as they came.
    before: Vec<&'a str>,
    /// The response, as it came.
    response: &'a str,
    /// The result, when the response is one.
    page: Option<Page<'a>>,
    /// The result's member holding the entries.
    entries: &'static str,
    /// The response as the memo keeps it, and the text of its id now.
    kept: Option<(Arc<KeptList>, &'a str)>,
}

impl<'a> ListAnswer<'a> {
    /// Reads `frame`'s messages for the request whose id is `id`, keeping what `wanted` asks
    /// of the result.
    pub(crate) fn read(
        frame: &'a Frame<'_>,
        id: &Value,
        wanted: Wanted<'_>,
    ) -> Result<Self, Problem> {
        let mut messages = Vec::with_capacity(frame.events.len());
        for event in &frame.events {
            if event.kind != "message" {
                return Err(Problem::EventType);
            }
            let text: &'a str = &event.data;
            let message = list_json::read(text, wanted).map_err(|_| Problem::NotJson)?;
            messages.push((text, message));
        }
        let mut before = Vec::new();
        let mut response = None;
        for (text, message) in messages {
            let Message::Object(members) = message else {
                return Err(Problem::NotJsonRpc);
            };
            let kind = kind_of(members.top())?;
            if response.is_some() {
                return Err(Problem::AfterResponse);
            }
            match kind {
                Kind::Response if members.id.as_ref() == Some(id) => {
                    response = Some((text, members));
                }
                Kind::Response => return Err(Problem::OtherId),
                Kind::Request | Kind::Notification => before.push(text),
            }
        }
        let (response, members) = response.ok_or(Problem::NoResponse)?;
        if frame.undispatched_data {
            return Err(Problem::AfterResponse);
        }
        let kept = members.kept.zip(members.id_text);
        let page = match members.result {
            Some(Outcome::Page(page)) => Some(page),
            Some(Outcome::NotObject) => return Err(Problem::BadResult),
            None => None,
        };
        Ok(Self {
            framing: frame.framing,
            body: frame.body,
            before,
            response,
            page,
            entries: wanted.entries,
            kept,
        })
    }

    /// The result, when the response is one.
    pub(crate) fn page_mut(&mut self) -> Option<&mut Page<'a>> {
        self.page.as_mut()
    }

    /// The answer as the layer writes it, `edit` applied to the result: the inner head less
    /// the headers that described the inner bytes, and the layer's own `Content-Type`.
    pub(crate) fn into_http(
        self,
        head: http::response::Parts,
        edit: &Edit,
    ) -> Result<Response<Bytes>, Problem> {
        let body = match self.framing {
            Framing::Json if edit.changes_nothing() => self.body.clone(),
            Framing::Json => {
                let mut out = Vec::with_capacity(self.body.len() + EDIT_ROOM);
                self.write_response(edit, &mut out)?;
                Bytes::from(out)
            }
            Framing::EventStream => {
                let mut out = Vec::with_capacity(self.body.len() + EDIT_ROOM);
                for message in &self.before {
                    let start = event_start(&mut out);
                    out.extend_from_slice(message.as_bytes());
                    event_end(&mut out, start);
                }
                let start = event_start(&mut out);
                self.write_response(edit, &mut out)?;
                event_end(&mut out, start);
                Bytes::from(out)
            }
        };
        Ok(written(head, Some(self.framing.content_type()), body))
    }

    /// The response, `edit` applied: as it was last written with the same edit when the memo
    /// kept it, its id aside (the writer copies the id and nothing else differs), else
    /// written, and kept for the next.
    fn write_response(&self, edit: &Edit, out: &mut Vec<u8>) -> Result<(), Problem> {
        if edit.changes_nothing() {
            out.extend_from_slice(self.response.as_bytes());
            return Ok(());
        }
        let kept = self.kept.as_ref();
        if let Some((list, id)) = kept
            && let Some(written) = list.written_with(edit)
            && let (Some(before), Some(after)) = (
                written.text.get(..written.id.start),
                written.text.get(written.id.end..),
            )
        {
            out.extend_from_slice(before);
            out.extend_from_slice(id.as_bytes());
            out.extend_from_slice(after);
            return Ok(());
        }
        let start = out.len();
        // The text was read whole and strictly already: this cannot fail, and were it to,
        // nothing of it would be sent.
        let id = list_edit::write(self.response, self.entries, edit, out)
            .map_err(|_| Problem::NotJson)?;
        if let (Some((list, _)), Some(id), Some(text)) = (kept, id, out.get(start..)) {
            list.keep_written(KeptWrite {
                edit: edit.clone(),
                text: Box::from(text),
                id: id.start - start..id.end - start,
            });
        }
        Ok(())
    }
}

/// About how much an edit may add to the answer: a sealed cursor, a private scope.
const EDIT_ROOM: usize = 512;

/// Starts one event of the canonical stream; its message starts at the returned offset.
fn event_start(out: &mut Vec<u8>) -> usize {
    out.extend_from_slice(sse::EVENT_START);
    out.len()
}

/// Ends the event whose message started at `start`: the message made one line, then the
/// blank line.
fn event_end(out: &mut Vec<u8>, start: usize) {
    list_edit::one_line(out, start);
    out.extend_from_slice(b"\n\n");
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use http::header;
    use proptest::prelude::*;
    use serde_json::json;

    use super::super::list_json::{TOOLS, Wanted};
    use super::super::{Read, read};
    use super::*;

    /// Messages, well-formed or not, as an inner server might send them.
    const MESSAGES: &[&str] = &[
        r#"{"jsonrpc":"2.0","id":7,"result":{"tools":[{"name":"a","inputSchema":{"type":"object"}},{"name":"b","annotations":{"readOnlyHint":true}}],"nextCursor":"c","ttlMs":90000}}"#,
        "{\"jsonrpc\":\"2.0\",\n\"id\":7,\"result\":{\"tools\":[ {\"name\":\"x\"},\r\n{\"name\":\"y\"} ]}}",
        r#"{"jsonrpc":"2.0","id":7,"result":{"tools":{}}}"#,
        r#"{"jsonrpc":"2.0","id":7,"result":{}}"#,
        r#"{"jsonrpc":"2.0","id":8,"result":{"tools":[]}}"#,
        r#"{"jsonrpc":"2.0","id":"7","result":{"tools":[]}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"p":1}}"#,
        r#"{"jsonrpc":"2.0","id":"s1","method":"elicitation/create"}"#,
        r#"{"jsonrpc":"2.0","id":7,"error":{"code":-1,"message":"x"}}"#,
        r#"{"jsonrpc":"2.0","id":7,"error":{"code":"x","message":"x"}}"#,
        r#"{"jsonrpc":"2.0","id":7,"result":[]}"#,
        r#"{"jsonrpc":"2.0","id":7,"result":{"tools":[{"name":"a","name":"b"}]}}"#,
        r#"{"jsonrpc":"2.0","id":7,"id":7,"result":{}}"#,
        r#"{"jsonrpc":"2.0","id":7,"result":{}} x"#,
        r#"[{"jsonrpc":"2.0","id":7,"result":{}}]"#,
        r#"{"id":7,"result":{}}"#,
        r#"{"jsonrpc":"2.0","id":7,"result":{"tools":[{"name":"\ud800"}]}}"#,
        r#"{"jsonrpc":"2.0","id":7,"method":"m","result":{}}"#,
        "nope",
        " ",
    ];

    fn head(content_type: &str) -> http::response::Parts {
        let response = http::Response::builder().header(header::CONTENT_TYPE, content_type);
        response.body(()).unwrap().into_parts().0
    }

    /// What a client reads of a written answer: each message as a JSON value.
    fn messages_of(content_type: &str, body: &[u8]) -> Vec<Value> {
        let text = std::str::from_utf8(body).unwrap();
        if content_type == "application/json" {
            return vec![serde_json::from_str(text).unwrap()];
        }
        sse::parse(text)
            .events
            .iter()
            .map(|event| serde_json::from_str(&event.data).unwrap())
            .collect()
    }

    /// Reads `body` both ways: the listing's reader refuses exactly what the module's reader
    /// refuses, with the same problem, and writes what it passes as the same messages (and,
    /// edited, as the same messages edited).
    fn both_ways(content_type: &str, body: &[u8]) -> Result<(), TestCaseError> {
        let id = json!(7);
        let body = Bytes::copy_from_slice(body);
        let expected = read(head(content_type), &body, &id);
        let head = head(content_type);
        let frame = Frame::of(&head.headers, &body);
        let list = frame.and_then(|frame| {
            let list = ListAnswer::read(&frame, &id, TOOLS)?;
            let plain = list.into_http(head.clone(), &Edit::default())?;
            let list = ListAnswer::read(&frame, &id, TOOLS)?;
            // Entries that are no array are refused before anything is written.
            let listed = matches!(
                list.page.as_ref().map(|page| &page.entries),
                Some(list_json::Entries::Listed(_))
            );
            let edit = Edit {
                kept: listed.then(|| vec![false, true]),
                next_cursor: Some("sealed".into()),
                private: Some(Duration::from_secs(60)),
            };
            Ok((plain, list.into_http(head.clone(), &edit)?))
        });
        let (expected, (plain, edited)) = match (expected, list) {
            (Err(expected), Err(problem)) => {
                prop_assert_eq!(expected, problem);
                return Ok(());
            }
            (Ok(expected), Ok(list)) => (expected, list),
            (expected, list) => {
                return Err(TestCaseError::fail(format!("{expected:?} but {list:?}")));
            }
        };
        let Read::Answered(_) = &expected else {
            return Err(TestCaseError::fail("a success read as no success"));
        };
        let mut expected = expected;
        let expected_edit = {
            let mut messages: Vec<Value> = expected
                .messages_mut()
                .into_iter()
                .map(|m| m.clone())
                .collect();
            if let Some(result) = messages
                .last_mut()
                .and_then(|m| m.get_mut("result"))
                .and_then(Value::as_object_mut)
            {
                if let Some(tools) = result.get_mut("tools").and_then(Value::as_array_mut) {
                    let kept: Vec<Value> = tools.iter().skip(1).take(1).cloned().collect();
                    *tools = kept;
                }
                if result.contains_key("nextCursor") {
                    result.insert("nextCursor".into(), "sealed".into());
                }
                super::super::mark_private(result, Duration::from_secs(60));
            }
            messages
        };
        let written = expected.into_http();
        let content_type = written.headers()[header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .to_owned();
        prop_assert_eq!(&plain.headers()[header::CONTENT_TYPE], &content_type);
        let expected_plain = messages_of(&content_type, written.body());
        prop_assert_eq!(messages_of(&content_type, plain.body()), expected_plain);
        prop_assert_eq!(messages_of(&content_type, edited.body()), expected_edit);
        Ok(())
    }

    /// `messages` framed as an event stream: each message's lines as `data` lines, some events
    /// of another type, a priming event first, and maybe an event left open at the end.
    fn stream(messages: &[(usize, bool)], priming: bool, open_end: bool) -> String {
        let mut text = String::new();
        if priming {
            text.push_str("id: 0\nretry: 3000\ndata:\n\n");
        }
        for (message, other_type) in messages {
            if *other_type {
                text.push_str("event: other\n");
            }
            for line in MESSAGES[*message].split('\n') {
                text.push_str(&format!("data: {}\n", line.trim_end_matches('\r')));
            }
            text.push_str(": note\nid: 1\n\n");
        }
        if open_end {
            text.push_str("data: {\"jsonrpc\"");
        }
        text
    }

    proptest! {
        #[test]
        fn json_answers_read_as_the_rule_reads_them(message in 0..MESSAGES.len()) {
            both_ways("application/json", MESSAGES[message].as_bytes())?;
        }

        #[test]
        fn streams_read_as_the_rule_reads_them(
            messages in prop::collection::vec((0..MESSAGES.len(), prop::bool::weighted(0.05)), 0..4),
            priming in any::<bool>(),
            open_end in prop::bool::weighted(0.1),
        ) {
            both_ways("text/event-stream", stream(&messages, priming, open_end).as_bytes())?;
        }
    }

    #[test]
    fn bytes_that_are_no_text_are_refused_alike() {
        for (content_type, body) in [
            ("application/json", &b"{\"a\":\"\xff\"}"[..]),
            ("text/event-stream", b"data: \xff\n\n"),
        ] {
            both_ways(content_type, body).unwrap();
        }
    }

    #[test]
    fn a_json_answer_left_as_it_came_is_the_same_bytes() {
        let body =
            Bytes::from_static(b" {\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{\"tools\":[]}}\n");
        let head = head("application/json");
        let frame = Frame::of(&head.headers, &body).unwrap();
        let list = ListAnswer::read(&frame, &json!(7), TOOLS).unwrap();
        let written = list.into_http(head, &Edit::default()).unwrap();
        assert_eq!(written.body(), &body);
        assert_eq!(written.body().as_ptr(), body.as_ptr(), "not copied");
    }

    /// Writes `message` (as the inner server framed it in `content_type`, answering `id`)
    /// with `edit`, reading it for `wanted`.
    fn written(
        content_type: &str,
        message: &str,
        id: &Value,
        wanted: Wanted<'_>,
        edit: &Edit,
    ) -> Bytes {
        let body = match content_type {
            "application/json" => Bytes::from(message.to_owned()),
            _ => Bytes::from(format!("id: 0\ndata:\n\ndata: {message}\n\n")),
        };
        let head = head(content_type);
        let frame = Frame::of(&head.headers, &body).unwrap();
        let list = ListAnswer::read(&frame, id, wanted).unwrap();
        list.into_http(head, edit).unwrap().into_body()
    }

    #[test]
    fn a_listing_written_again_from_the_memo_is_the_bytes_written_whole() {
        let memo = crate::mcp::listings::ListMemo::default();
        let remembering = Wanted {
            entries: "resources",
            name: "uri",
            tools: false,
            known: None,
            memo: Some(&memo),
        };
        let whole = Wanted {
            memo: None,
            ..remembering
        };
        let page = |id: &str| {
            format!(
                r#"{{"jsonrpc":"2.0","id":{id},"result":{{"resources":[{{"uri":"a:1"}}, {{"uri":"a:2"}},{{"uri":"a:3"}}],"nextCursor":"inner","ttlMs":900000,"cacheScope":"public"}}}}"#
            )
        };
        let hide_one = Edit {
            kept: Some(vec![true, false, true]),
            next_cursor: Some("sealed-1".into()),
            private: Some(Duration::from_secs(60)),
        };
        let private_only = Edit {
            private: Some(Duration::from_secs(30)),
            ..Edit::default()
        };
        let other_cursor = Edit {
            next_cursor: Some("sealed-2".into()),
            ..hide_one.clone()
        };
        let ids = [
            ("1", json!(1)),
            (" \"x\" ", json!("x")),
            ("\t 7 \t", json!(7)),
            ("\"a\\u0062\"", json!("ab")),
            ("98765", json!(98765)),
        ];
        for content_type in ["application/json", "text/event-stream"] {
            for edit in [
                &hide_one,
                &hide_one,
                &private_only,
                &other_cursor,
                &hide_one,
            ] {
                for (text, id) in &ids {
                    let message = page(text);
                    let expected = written(content_type, &message, id, whole, edit);
                    let from_memo = written(content_type, &message, id, remembering, edit);
                    assert_eq!(from_memo, expected, "{content_type}, id {text}, {edit:?}");
                }
                let kept = memo.last("resources").expect("kept");
                assert!(kept.written_with(edit).is_some(), "{edit:?}: written kept");
            }
        }
        // What was written with one edit is not taken for another.
        let kept = memo.last("resources").expect("kept");
        assert!(kept.written_with(&hide_one).is_some());
        assert!(kept.written_with(&other_cursor).is_none());
        assert!(kept.written_with(&Edit::default()).is_none());
    }
}
