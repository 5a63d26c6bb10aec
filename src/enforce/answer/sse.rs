//! The event-stream format, read as the WHATWG HTML standard's "interpreting an event stream"
//! defines it, and written in one canonical form.
//!
//! Why not the `sse-stream` crate (in the lock through rmcp)? It refuses framings the standard
//! accepts and every browser and SDK client reads: a field line without a colon, an unknown
//! field, a repeated `id` or `event`, a `retry` that is not a number. Refusing a valid answer is
//! safe but wrong; this reader takes the whole grammar, and a property test checks it against
//! generated streams.
//!
//! The layer reads an answer whole, so the parser works on the complete text:
//!
//! - one leading U+FEFF is dropped;
//! - lines end at CRLF, LF or CR; text after the last line ending is not a line;
//! - an empty line dispatches the event: its data (each `data` value followed by LF, the last
//!   LF removed) and its type (`event`, else `message`). An event whose data buffer is empty is
//!   not dispatched;
//! - a line starting with `:` is a comment; otherwise the field name runs to the first `:`
//!   (the whole line when there is none), and one space after the colon is dropped;
//! - `id`, `retry` and unknown fields change no message; the layer does not keep them;
//! - an event whose data is empty (`data:` alone, the priming event of SEP-1699, a keep-alive)
//!   is dispatched, but carries no message: clients skip it, and the reader does too;
//! - at the end of the text, an event not yet dispatched is discarded, as the standard says.

use std::borrow::Cow;

use bytes::Bytes;
use serde_json::Value;

/// One dispatched event.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Event<'a> {
    /// The event's type: `message` unless an `event` field named another.
    pub kind: Cow<'a, str>,
    /// The event's data: borrowed from the text when it came on one line.
    pub data: Cow<'a, str>,
}

/// A stream read whole.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Stream<'a> {
    /// The dispatched events, in order.
    pub events: Vec<Event<'a>>,
    /// Data the stream ended on without dispatching it: a `data` field of an event whose
    /// blank line never came, or the start of one on a line that never ended.
    pub undispatched_data: bool,
}

/// The event being read: its data buffer (`None` before the first `data` field: the
/// standard's empty buffer) and its type buffer.
#[derive(Default)]
struct Pending<'a> {
    data: Option<Cow<'a, str>>,
    kind: &'a str,
}

/// What one line of an event stream is, as the standard reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Line<'a> {
    /// An empty line: the event is dispatched.
    Blank,
    /// A line starting with `:`.
    Comment,
    /// A `data` field, with its value.
    Data(&'a str),
    /// An `event` field: the event's type.
    Event(&'a str),
    /// `id`, `retry`, and fields the standard does not name: no part of a message.
    Other,
}

impl<'a> Line<'a> {
    /// The field a line holds: its name runs to the first `:` (the whole line when there is
    /// none), and one space after the colon is dropped.
    pub(crate) fn of(line: &'a str) -> Self {
        if line.is_empty() {
            return Line::Blank;
        }
        if line.starts_with(':') {
            return Line::Comment;
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "data" => Line::Data(value),
            "event" => Line::Event(value),
            _ => Line::Other,
        }
    }
}

/// The text's events.
pub(crate) fn parse(text: &str) -> Stream<'_> {
    let text = text.strip_prefix('\u{FEFF}').unwrap_or(text);
    let mut stream = Stream::default();
    let mut pending = Pending::default();
    let mut rest = text;
    while let Some(end) = memchr::memchr2(b'\r', b'\n', rest.as_bytes()) {
        let line = &rest[..end];
        let terminator = if rest[end..].starts_with("\r\n") {
            2
        } else {
            1
        };
        rest = &rest[end + terminator..];
        match Line::of(line) {
            Line::Blank => dispatch(&mut stream, std::mem::take(&mut pending)),
            Line::Data(value) => {
                pending.data = Some(match pending.data.take() {
                    None => Cow::Borrowed(value),
                    Some(data) => {
                        let mut joined = data.into_owned();
                        joined.push('\n');
                        joined.push_str(value);
                        Cow::Owned(joined)
                    }
                });
            }
            Line::Event(value) => pending.kind = value,
            Line::Comment | Line::Other => {}
        }
    }
    let unfinished_line_is_data = matches!(Line::of(rest), Line::Data(_));
    stream.undispatched_data = pending.data.is_some() || unfinished_line_is_data;
    stream
}

/// The standard's dispatch step: an event with no data line is not dispatched, and its type
/// is forgotten with it.
fn dispatch<'a>(stream: &mut Stream<'a>, pending: Pending<'a>) {
    let Some(data) = pending.data else {
        return;
    };
    let kind = match pending.kind {
        "" => Cow::Borrowed("message"),
        kind => Cow::Borrowed(kind),
    };
    stream.events.push(Event { kind, data });
}

/// How every event of the canonical stream starts; its message follows on the same line.
pub(crate) const EVENT_START: &[u8] = b"event: message\ndata: ";

/// The canonical stream of `messages`: per message, `event: message`, one `data` line with the
/// message as compact JSON (which holds no line ending), and a blank line. Nothing else: no
/// ids, no retry, no comments. `hint` is about how long it will be.
pub(crate) fn write<'a>(messages: impl IntoIterator<Item = &'a Value>, hint: usize) -> Bytes {
    let mut out = Vec::with_capacity(hint);
    for message in messages {
        out.extend_from_slice(EVENT_START);
        // Writing a `Value` into a `Vec` cannot fail.
        let _ = serde_json::to_writer(&mut out, message);
        out.extend_from_slice(b"\n\n");
    }
    Bytes::from(out)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    fn events(text: &str) -> Vec<(String, String)> {
        parse(text)
            .events
            .into_iter()
            .map(|event| (event.kind.into_owned(), event.data.into_owned()))
            .collect()
    }

    fn message(data: &str) -> (String, String) {
        ("message".to_owned(), data.to_owned())
    }

    #[test]
    fn every_line_ending_and_the_bom() {
        for text in [
            "data: a\n\n",
            "data: a\r\n\r\n",
            "data: a\r\r",
            "\u{FEFF}data: a\n\n",
            "data:a\r\n\n",
        ] {
            assert_eq!(events(text), [message("a")], "{text:?}");
        }
        // Only one BOM is dropped: a second one starts a field name.
        assert_eq!(events("\u{FEFF}\u{FEFF}data: a\n\n"), []);
    }

    #[test]
    fn fields_comments_and_multi_line_data() {
        let text = ": comment\nid: 7\nretry: soon\nfoo: bar\nevent: message\ndata: {\"a\":\ndata\ndata:  1}\n\n";
        assert_eq!(events(text), [message("{\"a\":\n\n 1}")]);
        assert_eq!(
            events("event: ping\ndata: x\n\ndata: y\n\n"),
            [("ping".to_owned(), "x".to_owned()), message("y")]
        );
        // An event type does not outlive an event without data.
        assert_eq!(events("event: ping\n\ndata: y\n\n"), [message("y")]);
        // `data:` alone is an empty data line: the event's data is empty, but it is dispatched.
        assert_eq!(events("data:\n\n"), [message("")]);
        // A priming event (an id and no data) dispatches nothing.
        assert_eq!(events("id: 0\nretry: 3000\n\n"), []);
    }

    #[test]
    fn the_last_event_without_a_blank_line_is_not_dispatched() {
        let stream = parse("data: a\n\ndata: b\n");
        assert_eq!(
            stream.events,
            [Event {
                kind: "message".into(),
                data: "a".into()
            }]
        );
        assert!(stream.undispatched_data);
        assert!(parse("data: a\n\ndata: b").undispatched_data);
        assert!(parse("data: a\n\ndat").events.len() == 1);
        assert!(!parse("data: a\n\ndat").undispatched_data);
        assert!(!parse("data: a\n\nid: 1\n").undispatched_data);
        assert!(!parse("data: a\n\n: comment").undispatched_data);
    }

    #[test]
    fn the_canonical_form_reads_back() {
        let messages = [json!({"a": "line\nbreak\r"}), json!({"b": [1, 2]})];
        let written = write(&messages, 0);
        let text = std::str::from_utf8(&written).unwrap();
        let read: Vec<Value> = parse(text)
            .events
            .iter()
            .map(|event| serde_json::from_str(&event.data).unwrap())
            .collect();
        assert_eq!(read, messages);
        assert_eq!(text.matches('\n').count(), 6);
    }

    /// One way of writing a line ending.
    fn ending() -> impl Strategy<Value = &'static str> {
        prop_oneof![Just("\n"), Just("\r\n"), Just("\r")]
    }

    /// A line that adds nothing to any event: a comment, an id, a retry, an unknown field, or
    /// a field line without a colon.
    fn noise() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-z ]{0,8}".prop_map(|text| format!(":{text}")),
            "[0-9a-z]{0,6}".prop_map(|id| format!("id: {id}")),
            "[0-9a-z]{0,4}".prop_map(|retry| format!("retry:{retry}")),
            Just("foo: bar".to_owned()),
            Just("id".to_owned()),
            Just("event: message".to_owned()),
        ]
    }

    /// An event of data lines (the data split at random points) with noise between them.
    fn event_text(data: &str, cuts: &[usize], noise: &[String], endings: &[&str]) -> String {
        let mut pieces = Vec::new();
        let mut last = 0;
        let mut cuts: Vec<usize> = cuts
            .iter()
            .map(|cut| cut % (data.len() + 1))
            .filter(|cut| data.is_char_boundary(*cut))
            .collect();
        cuts.sort_unstable();
        cuts.dedup();
        for cut in cuts {
            pieces.push(&data[last..cut]);
            last = cut;
        }
        pieces.push(&data[last..]);
        let mut text = String::new();
        let mut ending = endings.iter().cycle();
        let mut noise = noise.iter();
        for (n, piece) in pieces.iter().enumerate() {
            if let Some(line) = noise.next() {
                text.push_str(line);
                text.push_str(ending.next().unwrap_or(&"\n"));
            }
            // Without a space after the colon, a piece's own leading space would be dropped.
            let space = if n % 2 == 0 || piece.starts_with(' ') {
                " "
            } else {
                ""
            };
            text.push_str(&format!("data:{space}{piece}"));
            text.push_str(ending.next().unwrap_or(&"\n"));
        }
        text
    }

    proptest! {
        /// Data split over lines in any framing the grammar allows reads back as the data
        /// joined with LF.
        #[test]
        fn generated_streams_read_as_the_grammar_says(
            datas in prop::collection::vec("[a-z{}\":, ]{0,12}", 1..4),
            cuts in prop::collection::vec(0usize..16, 0..3),
            noise in prop::collection::vec(noise(), 0..4),
            endings in prop::collection::vec(ending(), 1..4),
            bom in any::<bool>(),
        ) {
            let mut text = if bom { "\u{FEFF}".to_owned() } else { String::new() };
            let mut expected = Vec::new();
            for data in &datas {
                text.push_str(&event_text(data, &cuts, &noise, &endings));
                // A CR ending followed by the blank line's LF would read as one CRLF.
                let blank = if text.ends_with('\r') { "\r" } else { endings[0] };
                text.push_str(blank);
                let mut pieces = 0;
                let mut joined = String::new();
                let mut last = 0;
                let mut sorted: Vec<usize> = cuts
                    .iter()
                    .map(|cut| cut % (data.len() + 1))
                    .filter(|cut| data.is_char_boundary(*cut))
                    .collect();
                sorted.sort_unstable();
                sorted.dedup();
                for cut in sorted {
                    if pieces > 0 { joined.push('\n'); }
                    joined.push_str(&data[last..cut]);
                    last = cut;
                    pieces += 1;
                }
                if pieces > 0 { joined.push('\n'); }
                joined.push_str(&data[last..]);
                expected.push(message(&joined));
            }
            prop_assert_eq!(events(&text), expected, "{:?}", text);
        }
    }
}
