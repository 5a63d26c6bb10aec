//! The GET stream, watched as it flows.
//!
//! The standalone GET stream carries the server's notifications and requests, and no
//! responses: the layer forwards a GET without `Last-Event-ID`, so no stream it passes resumes
//! an earlier one. It cannot be read whole (it lasts as long as the session), so it is read
//! event by event, as the WHATWG standard reads an event stream, and written again by the
//! layer: each message as a canonical event, each comment as an empty one (a keep-alive), and
//! nothing else. The first thing the stream may not carry ends it: a response (an answer the
//! layer never read, say to a list it filtered), data that is not one JSON-RPC message, an
//! event of another type, bytes that are not UTF-8, or an event larger than the answer bound.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::{Response, StatusCode};
use http_body::Body;

use super::super::body::GateBody;
use super::Problem;
use super::message::{Kind, kind, strict_json};
use super::sse::{Line, write};

/// An event stream read as it arrives.
#[derive(Debug)]
pub(crate) struct Watch {
    /// Bytes of a line not yet ended.
    partial: BytesMut,
    /// The last chunk ended in CR: an LF starting the next one belongs to that line end.
    after_cr: bool,
    /// No line has ended yet: a BOM may open the stream.
    first_line: bool,
    /// The data of the event being read (`None`: no `data` field yet).
    data: Option<String>,
    /// The type of the event being read.
    kind: String,
    /// The most an event (its line or its data) may hold.
    max: usize,
}

impl Watch {
    /// A watch over a stream whose events may hold at most `max` bytes.
    pub(crate) fn new(max: usize) -> Self {
        Self {
            partial: BytesMut::new(),
            after_cr: false,
            first_line: true,
            data: None,
            kind: String::new(),
            max,
        }
    }

    /// The layer's writing of what `chunk` completes, and, when the stream ends here, why
    /// (what came before the end is written).
    pub(crate) fn feed(&mut self, chunk: &[u8]) -> (Bytes, Option<Problem>) {
        let mut out = Vec::new();
        let ended = self.read(chunk, &mut out).err();
        (Bytes::from(out), ended)
    }

    fn read(&mut self, mut chunk: &[u8], out: &mut Vec<u8>) -> Result<(), Problem> {
        if std::mem::take(&mut self.after_cr) && chunk.first() == Some(&b'\n') {
            chunk = &chunk[1..];
        }
        while let Some(end) = memchr::memchr2(b'\r', b'\n', chunk) {
            let ending = chunk[end];
            self.partial.extend_from_slice(&chunk[..end]);
            chunk = &chunk[end + 1..];
            if ending == b'\r' {
                match chunk.first() {
                    Some(b'\n') => chunk = &chunk[1..],
                    Some(_) => {}
                    None => self.after_cr = true,
                }
            }
            let line = self.partial.split().freeze();
            self.line(&line, out)?;
        }
        self.partial.extend_from_slice(chunk);
        if self.partial.len() > self.max {
            return Err(Problem::TooLarge);
        }
        Ok(())
    }

    fn line(&mut self, line: &[u8], out: &mut Vec<u8>) -> Result<(), Problem> {
        let mut line = crate::utf8::text(line).ok_or(Problem::NotUtf8)?;
        if std::mem::take(&mut self.first_line) {
            line = line.strip_prefix('\u{FEFF}').unwrap_or(line);
        }
        match Line::of(line) {
            Line::Blank => self.dispatch(out)?,
            Line::Comment => out.extend_from_slice(b":\n\n"),
            Line::Data(value) => match &mut self.data {
                None => self.data = Some(value.to_owned()),
                Some(data) => {
                    data.push('\n');
                    data.push_str(value);
                    if data.len() > self.max {
                        return Err(Problem::TooLarge);
                    }
                }
            },
            Line::Event(value) => value.clone_into(&mut self.kind),
            Line::Other => {}
        }
        Ok(())
    }

    /// The standard's dispatch step, then the rule: only the server's requests and
    /// notifications pass.
    fn dispatch(&mut self, out: &mut Vec<u8>) -> Result<(), Problem> {
        let kind_name = std::mem::take(&mut self.kind);
        let Some(data) = self.data.take() else {
            return Ok(());
        };
        if data.is_empty() {
            return Ok(());
        }
        if !(kind_name.is_empty() || kind_name == "message") {
            return Err(Problem::EventType);
        }
        let message = strict_json(data.as_bytes())?;
        match kind(&message)? {
            Kind::Request | Kind::Notification => {
                out.extend_from_slice(&write([&message], data.len() + 24));
                Ok(())
            }
            Kind::Response => Err(Problem::ResponseOnStream),
        }
    }
}

/// The inner server's answer to a GET, as the layer passes it: a success that is an event
/// stream is watched as it flows ([`Watch`]); any other answer is read whole and passes as a
/// non-2xx does, only without a result (its status and headers, its body only when it is one
/// JSON-RPC error). What cannot pass is a `502` with no body: a GET has no JSON-RPC id to
/// answer with.
pub(crate) async fn watch_get<B: Body<Data = Bytes>>(
    response: Response<B>,
    (max, limit): (usize, Option<Duration>),
) -> Response<GateBody<B>> {
    if response.status().is_success() && super::is_event_stream(response.headers()) {
        let (head, body) = response.into_parts();
        let head = super::rewritten_head(head);
        return Response::from_parts(head, GateBody::watched(body, Watch::new(max)));
    }
    let deadline = limit.map(|limit| tokio::time::Instant::now() + limit);
    let read = super::read_unanswering(response, max, deadline).await;
    match read {
        Ok(read) => read.into_http().map(GateBody::reply),
        Err(problem) => {
            tracing::error!(target: "mcp_gate::answer", answer = "GET", problem = problem.code(), "inner answer not passed on: {}", problem.describe());
            let mut refused = Response::new(GateBody::reply(Bytes::new()));
            *refused.status_mut() = StatusCode::BAD_GATEWAY;
            refused
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOTE: &str =
        r#"{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info"}}"#;
    const ASK: &str = r#"{"jsonrpc":"2.0","id":"s1","method":"elicitation/create","params":{}}"#;
    const RESPONSE: &str = r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"hidden"}]}}"#;

    /// What the watch writes for `chunks`, and whether it ended the stream (with why).
    fn watched(chunks: &[&[u8]]) -> (String, Option<Problem>) {
        let mut watch = Watch::new(1 << 20);
        let mut out = Vec::new();
        for chunk in chunks {
            let (written, ended) = watch.feed(chunk);
            out.extend_from_slice(&written);
            if ended.is_some() {
                return (String::from_utf8(out).unwrap(), ended);
            }
        }
        (String::from_utf8(out).unwrap(), None)
    }

    fn canonical(message: &str) -> String {
        let value: serde_json::Value = serde_json::from_str(message).unwrap();
        format!("event: message\ndata: {value}\n\n")
    }

    #[test]
    fn every_split_of_a_stream_reads_the_same() {
        let text = format!(
            "\u{FEFF}id: 0\r\nretry: 3000\r\ndata:\r\n\r\n: ping\r{}\r\rdata: {NOTE}\n\nevent: message\ndata: {ASK}\r\n\r\n",
            "x-other: 1"
        );
        let bytes = text.as_bytes();
        let expected = format!(":\n\n{}{}", canonical(NOTE), canonical(ASK));
        assert_eq!(watched(&[bytes]), (expected.clone(), None));
        for cut in 0..=bytes.len() {
            let (a, b) = bytes.split_at(cut);
            assert_eq!(watched(&[a, b]), (expected.clone(), None), "cut at {cut}");
            for second in cut..=bytes.len() {
                let (b, c) = bytes[cut..].split_at(second - cut);
                assert_eq!(
                    watched(&[a, b, c]),
                    (expected.clone(), None),
                    "cuts at {cut}, {second}"
                );
            }
        }
    }

    #[test]
    fn a_response_or_anything_unreadable_ends_the_stream() {
        let note = format!("data: {NOTE}\n\n");
        let cases: &[(String, Problem)] = &[
            (
                format!("{note}data: {RESPONSE}\n\ndata: {NOTE}\n\n"),
                Problem::ResponseOnStream,
            ),
            (
                format!("{note}event: other\ndata: {NOTE}\n\n"),
                Problem::EventType,
            ),
            (format!("{note}data: {{\"a\":1}}\n\n"), Problem::NotJsonRpc),
            (format!("{note}data: {NOTE} trailing\n\n"), Problem::NotJson),
        ];
        for (text, problem) in cases {
            let (written, ended) = watched(&[text.as_bytes()]);
            assert_eq!(written, canonical(NOTE), "{text}");
            assert_eq!(ended, Some(*problem), "{text}");
            assert!(!written.contains("hidden"));
        }
        let (_, ended) = watched(&[b"data: \xff\n\n"]);
        assert_eq!(ended, Some(Problem::NotUtf8));
    }

    #[test]
    fn an_event_larger_than_the_bound_ends_the_stream() {
        let mut watch = Watch::new(64);
        let line = format!("data: {}\n", "x".repeat(40));
        assert_eq!(watch.feed(line.as_bytes()).1, None);
        assert_eq!(watch.feed(line.as_bytes()).1, Some(Problem::TooLarge));
        let mut watch = Watch::new(64);
        assert_eq!(watch.feed(&[b'x'; 65]).1, Some(Problem::TooLarge));
    }
}
