//! Default deny on the response side (issue 24): every answer the layer reads whole passes
//! only what the layer read, written by the layer itself; anything else is refused with
//! `-32603` and a `data.problem` naming what was wrong.
//!
//! The inner server is scripted (`common::scripted`): each request is answered with the
//! status, headers and body chunks a test chooses, so the framings real servers and proxies
//! produce (and broken ones) reach the layer byte for byte, split where the test splits them.
//! The gate is in front of it over real HTTP on 127.0.0.1.
//!
//! The policy hides every name that has a `/`-separated segment starting with `hidden_` (a
//! tool `hidden_a`, a resource `demo://r/hidden_a`, a skill `skill://hidden_a/SKILL.md`); it
//! holds `deploy` for approval; it allows everything else.
//!
//! What the client got is read by a small reference reader of the WHATWG event-stream grammar
//! ([`read_event_stream`]), not by the layer's own code, and the raw bytes are searched for
//! every hidden name.

use crate::common;

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::peers::Reply;
use common::scripted::{ERAS, Era, LISTINGS, Listing, Script, ScriptedGate};
use mcp_gate::GateBuilder;
use mcp_gate::denial::EXTENSION_ID as DENIALS_EXTENSION;
use mcp_gate::policy::{Decision, Evaluation, Policy};
use mcp_gate::tasks::TaskStatus;
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::{Map, Value, json};

/// JSON-RPC internal error: the layer's refusal of an inner answer it cannot pass.
const INTERNAL_ERROR: i64 = -32603;

// ---------------------------------------------------------------------------------------------
// The harness: the policy, the gate in front of a script, requests of both eras.
// ---------------------------------------------------------------------------------------------

/// Whether the policy hides `name`: one of its `/`-separated segments starts with `hidden_`.
fn hidden(name: &str) -> bool {
    name.split('/')
        .any(|segment| segment.starts_with("hidden_"))
}

/// The tests' policy: hidden names are undisclosed, `deploy` is held until approved.
fn judge(e: &Evaluation) -> Decision {
    if e.target().name().is_some_and(hidden) {
        Decision::undisclosed("This is not available to you.")
    } else if e.tool() == Some("deploy") && e.approval().is_none() {
        Decision::task("deploys need approval")
    } else {
        Decision::allow()
    }
}

fn policy() -> impl Policy {
    |e: Evaluation| async move { Ok::<_, Infallible>(judge(&e)) }
}

/// The gate (the tests' policy, a known server identity so that it asks no
/// `server/discover` of its own, then `configure`) in front of `script`.
async fn start(
    script: impl Fn(&Value) -> Script + Send + Sync + 'static,
    configure: impl FnOnce(GateBuilder) -> GateBuilder,
) -> ScriptedGate {
    ScriptedGate::start(script, |b| {
        configure(
            b.evaluate(policy())
                .server_info("scripted", "1.0.0")
                .inner_read_timeout(Duration::from_secs(5))
                .task_poll_interval(Duration::from_millis(50)),
        )
    })
    .await
}

/// The first page of `listing`.
async fn list(gated: &ScriptedGate, era: Era, id: u64, listing: &Listing) -> Reply {
    let (params, name) = listing.params();
    gated.send(era, id, listing.method, params, name).await
}

/// The directory `resources/directory/read` lists.
const DIRECTORY: &str = "demo://r/";

impl Listing {
    /// One entry named `name`, as the method lists it (a description that is not ASCII, so
    /// that chunk splits fall inside UTF-8 sequences too).
    fn entry(&self, name: &str) -> Value {
        let description = "caf\u{e9} \u{2615}";
        match self.method {
            "tools/list" => json!({"name": name, "description": description,
                                   "inputSchema": {"type": "object", "properties": {}}}),
            "prompts/list" => json!({"name": name, "description": description}),
            "resources/list" | "resources/directory/read" => {
                json!({"uri": format!("{DIRECTORY}{name}"), "name": name,
                       "description": description})
            }
            "resources/templates/list" => {
                json!({"uriTemplate": format!("demo://t/{name}/{{path}}"),
                                                 "name": name, "description": description})
            }
            "skills/list" => json!({"uri": format!("skill://{name}/SKILL.md"),
                                    "frontmatter": {"name": name, "description": description}}),
            other => panic!("no listing {other}"),
        }
    }

    /// The params of a first page, and the name a modern request mirrors.
    fn params(&self) -> (Value, Option<&'static str>) {
        if self.method == "resources/directory/read" {
            (json!({"uri": DIRECTORY}), Some(DIRECTORY))
        } else {
            (json!({}), None)
        }
    }

    /// The response of a page holding `entries`.
    fn response(&self, id: &Value, entries: Vec<Value>) -> Value {
        json!({"jsonrpc": "2.0", "id": id, "result": {self.entries: entries}})
    }
}

/// A page of `listing` with these entries (`true`: hidden), their names unique in the page:
/// the page's entries, the visible ones, and the hidden names.
fn page(listing: &Listing, hidden: &[bool], salt: u64) -> (Vec<Value>, Vec<Value>, Vec<String>) {
    let (mut all, mut visible, mut names) = (Vec::new(), Vec::new(), Vec::new());
    for (i, &is_hidden) in hidden.iter().enumerate() {
        let kind = if is_hidden { "hidden" } else { "visible" };
        let name = format!("{kind}_{i}_{salt:x}");
        let entry = listing.entry(&name);
        if is_hidden {
            names.push(name);
        } else {
            visible.push(entry.clone());
        }
        all.push(entry);
    }
    (all, visible, names)
}

/// A progress notification and a server request, as may come before a response.
fn notification() -> Value {
    json!({"jsonrpc": "2.0", "method": "notifications/message",
           "params": {"level": "info", "data": "listing"}})
}

fn server_request() -> Value {
    json!({"jsonrpc": "2.0", "id": "srv-1", "method": "ping"})
}

// ---------------------------------------------------------------------------------------------
// Writing framings: JSON text in any key order and whitespace; event streams in any valid form.
// ---------------------------------------------------------------------------------------------

/// How a JSON value is written.
#[derive(Clone, Copy, Debug, Default)]
struct JsonStyle {
    /// One member per line, indented (else compact).
    pretty: bool,
    /// Object members in reverse order of their keys (else in order).
    reverse: bool,
}

fn json_text(value: &Value, style: JsonStyle) -> String {
    let mut out = String::new();
    write_json(value, style, 0, &mut out);
    out
}

fn write_json(value: &Value, style: JsonStyle, depth: usize, out: &mut String) {
    let newline = |out: &mut String, depth: usize| {
        if style.pretty {
            out.push('\n');
            out.push_str(&"  ".repeat(depth));
        }
    };
    let (open, close, items): (char, char, Vec<(Option<&String>, &Value)>) = match value {
        Value::Object(map) if !map.is_empty() => {
            let mut members: Vec<_> = map.iter().map(|(k, v)| (Some(k), v)).collect();
            if style.reverse {
                members.reverse();
            }
            ('{', '}', members)
        }
        Value::Array(items) if !items.is_empty() => {
            ('[', ']', items.iter().map(|v| (None, v)).collect())
        }
        other => return out.push_str(&other.to_string()),
    };
    out.push(open);
    for (i, (key, item)) in items.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        newline(out, depth + 1);
        if let Some(key) = key {
            out.push_str(&Value::String(key.clone()).to_string());
            out.push_str(if style.pretty { ": " } else { ":" });
        }
        write_json(item, style, depth + 1, out);
    }
    newline(out, depth);
    out.push(close);
}

/// A line ending of the event-stream grammar.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ending {
    Lf,
    CrLf,
    Cr,
}

impl Ending {
    fn text(self) -> &'static str {
        match self {
            Ending::Lf => "\n",
            Ending::CrLf => "\r\n",
            Ending::Cr => "\r",
        }
    }
}

/// How one event is written.
#[derive(Clone, Debug, Default)]
struct EventStyle {
    /// A comment line first.
    comment: bool,
    /// An `id` field.
    id: Option<u16>,
    /// An `event: message` field (the type is `message` without it too).
    event_field: bool,
    /// A `retry` field.
    retry: bool,
    /// A field of no known name (ignored).
    unknown: bool,
    /// A field line of no known name without a colon (ignored).
    colonless: bool,
    /// `data: ` with one space (else `data:`).
    space: bool,
    /// How the message's JSON is written; pretty JSON is split over several `data` lines.
    json: JsonStyle,
    /// For each line break of pretty JSON: keep it a new `data` line (else join with a space).
    breaks: Vec<bool>,
    /// A `data` line without a colon (an empty line of data, JSON whitespace) at this place
    /// among the data lines.
    empty_data_at: Option<Index>,
}

impl EventStyle {
    /// The lines of an event holding `message` (the blank line that dispatches it not
    /// included), of type `kind` when one is given.
    fn lines(&self, message: &str, kind: Option<&str>) -> Vec<String> {
        let mut lines = Vec::new();
        if self.comment {
            lines.push(": keep-alive".to_owned());
        }
        if let Some(id) = self.id {
            lines.push(format!("id: {id}"));
        }
        match kind {
            Some(kind) => lines.push(format!("event: {kind}")),
            None if self.event_field => lines.push("event: message".to_owned()),
            None => {}
        }
        if self.retry {
            lines.push("retry: 2500".to_owned());
        }
        if self.unknown {
            lines.push("x-trace: 1".to_owned());
        }
        if self.colonless {
            lines.push("x-flag".to_owned());
        }
        let prefix = if self.space { "data: " } else { "data:" };
        let mut data: Vec<String> = Vec::new();
        for (i, piece) in message.split('\n').enumerate() {
            let keep = i == 0 || self.breaks.get(i - 1).copied().unwrap_or(true);
            match data.last_mut() {
                Some(last) if !keep => {
                    last.push(' ');
                    last.push_str(piece.trim_start());
                }
                _ => data.push(piece.to_owned()),
            }
        }
        let mut data: Vec<String> = data
            .into_iter()
            .map(|piece| {
                // `data:` without the space: a piece starting with a space keeps it as JSON
                // whitespace after the one space the reader removes.
                format!("{prefix}{piece}")
            })
            .collect();
        if let Some(at) = &self.empty_data_at {
            data.insert(at.index(data.len() + 1), "data".to_owned());
        }
        lines.extend(data);
        lines
    }
}

/// What may come in a stream before or after the response's event.
#[derive(Clone, Debug)]
enum Extra {
    /// A notification's event.
    Notification(EventStyle),
    /// A server request's event.
    ServerRequest(EventStyle),
    /// An event without data (rmcp's priming event): an id and a retry.
    Priming,
    /// A comment alone.
    Comment,
}

/// How a whole event stream is written.
#[derive(Clone, Debug)]
struct StreamStyle {
    bom: bool,
    /// The line endings, used in turn.
    endings: Vec<Ending>,
    before: Vec<Extra>,
    response: EventStyle,
    /// Comments or data-less events after the response (no message).
    after: Vec<bool>,
}

/// Joins `lines` (an empty one dispatches an event) with the style's endings in turn.
fn join_lines(lines: &[String], endings: &[Ending], bom: bool) -> String {
    let mut out = String::from(if bom { "\u{feff}" } else { "" });
    let mut previous = None;
    for (i, line) in lines.iter().enumerate() {
        let mut ending = endings[i % endings.len()];
        // CR then LF would be one CRLF: an empty line after a CR must not end in a lone LF.
        if line.is_empty() && previous == Some(Ending::Cr) && ending == Ending::Lf {
            ending = Ending::Cr;
        }
        out.push_str(line);
        out.push_str(ending.text());
        previous = Some(ending);
    }
    out
}

impl StreamStyle {
    /// The stream: the extras before, the response (of type `kind` when given; followed by
    /// the blank line that dispatches it when `dispatched`), the extras after.
    fn write(&self, response: &str, kind: Option<&str>, dispatched: bool) -> String {
        self.write_then(response, kind, dispatched, &[])
    }

    /// [`StreamStyle::write`], with an event for each of `then` right after the response's.
    fn write_then(
        &self,
        response: &str,
        kind: Option<&str>,
        dispatched: bool,
        then: &[String],
    ) -> String {
        let mut lines = Vec::new();
        for extra in &self.before {
            match extra {
                Extra::Notification(style) => {
                    lines.extend(style.lines(&json_text(&notification(), style.json), None))
                }
                Extra::ServerRequest(style) => {
                    lines.extend(style.lines(&json_text(&server_request(), style.json), None))
                }
                Extra::Priming => lines.extend(["id: 0".to_owned(), "retry: 3000".to_owned()]),
                Extra::Comment => lines.push(":".to_owned()),
            }
            lines.push(String::new());
        }
        lines.extend(self.response.lines(response, kind));
        if dispatched {
            lines.push(String::new());
            for message in then {
                lines.extend(self.response.lines(message, None));
                lines.push(String::new());
            }
            for comment in &self.after {
                lines.push(if *comment { ": done" } else { "id: 9" }.to_owned());
                lines.push(String::new());
            }
        }
        join_lines(&lines, &self.endings, self.bom)
    }

    /// The messages of the extras before the response, in order.
    fn messages_before(&self) -> Vec<Value> {
        self.before
            .iter()
            .filter_map(|extra| match extra {
                Extra::Notification(_) => Some(notification()),
                Extra::ServerRequest(_) => Some(server_request()),
                _ => None,
            })
            .collect()
    }
}

// ---------------------------------------------------------------------------------------------
// Reading what the client got: a reference reader of the WHATWG event-stream grammar.
// ---------------------------------------------------------------------------------------------

/// One dispatched event.
#[derive(Debug, PartialEq)]
struct Event {
    kind: String,
    data: String,
}

/// The events of `text` as the WHATWG "interpreting an event stream" algorithm dispatches
/// them: a leading BOM skipped; lines ended by CRLF, LF or CR; comments skipped; a field
/// without a colon has an empty value; one space after the colon removed; `data` lines joined
/// with LF; an event dispatched at a blank line when its data is not empty; the incomplete
/// event at the end discarded.
fn read_event_stream(text: &str) -> Vec<Event> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut events = Vec::new();
    let (mut data, mut kind) = (String::new(), String::new());
    let mut rest = text;
    while let Some(end) = rest.find(['\r', '\n']) {
        let line = &rest[..end];
        let skip = if rest[end..].starts_with("\r\n") {
            2
        } else {
            1
        };
        rest = &rest[end + skip..];
        if line.is_empty() {
            if !data.is_empty() {
                if data.ends_with('\n') {
                    data.pop();
                }
                let kind = if kind.is_empty() { "message" } else { &kind };
                events.push(Event {
                    kind: kind.to_owned(),
                    data: std::mem::take(&mut data),
                });
            }
            data.clear();
            kind.clear();
            continue;
        }
        if line.starts_with(':') {
            continue;
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "data" => {
                data.push_str(value);
                data.push('\n');
            }
            "event" => kind = value.to_owned(),
            _ => {}
        }
    }
    events
}

/// The JSON-RPC messages the client got: the JSON body, or the data of each event (each of
/// type `message`), every one strict JSON.
fn client_messages(reply: &Reply) -> Result<Vec<Value>, String> {
    let content_type = reply
        .headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let strict = |text: &str| -> Result<Value, String> {
        serde_json::from_str::<Value>(text).map_err(|e| format!("not JSON ({e}): {text:?}"))
    };
    if content_type.starts_with("application/json") {
        return Ok(vec![strict(&reply.text)?]);
    }
    if !content_type.starts_with("text/event-stream") {
        return Err(format!("content type {content_type:?}"));
    }
    read_event_stream(&reply.text)
        .into_iter()
        .map(|event| {
            if event.kind != "message" {
                return Err(format!("an event of type {:?}", event.kind));
            }
            strict(&event.data)
        })
        .collect()
}

/// Whether an event stream is written as the layer writes one: `event: message`, one `data`
/// line of JSON, a blank line, per message, and nothing else.
fn is_layer_framing(text: &str) -> bool {
    let events = read_event_stream(text);
    let written: String = events
        .iter()
        .map(|event| format!("event: message\ndata: {}\n\n", event.data))
        .collect();
    !events.is_empty() && written == text && events.iter().all(|e| !e.data.contains('\n'))
}

/// The raw bytes the client got hold none of `names`.
fn check_none_leaked(reply: &Reply, names: &[String]) -> Result<(), TestCaseError> {
    for name in names {
        prop_assert!(
            !reply.text.contains(name.as_str()),
            "the hidden {} reached the client: {:?}",
            name,
            reply
        );
    }
    Ok(())
}

/// The layer's refusal of an inner answer: HTTP 200, JSON, `-32603` for `id`, naming
/// `problem`.
fn check_refused(reply: &Reply, id: u64, problem: &str) -> Result<(), TestCaseError> {
    let body = &reply.body;
    let content_type = reply.headers.get("content-type");
    prop_assert_eq!(reply.status, 200, "{:?}", reply);
    prop_assert_eq!(
        content_type.and_then(|v| v.to_str().ok()),
        Some("application/json"),
        "{:?}",
        reply
    );
    prop_assert_eq!(&body["jsonrpc"], "2.0", "{:?}", reply);
    prop_assert_eq!(&body["id"], &json!(id), "{:?}", reply);
    prop_assert!(body.get("result").is_none(), "{:?}", reply);
    prop_assert_eq!(
        &body["error"]["code"],
        &json!(INTERNAL_ERROR),
        "{:?}",
        reply
    );
    prop_assert!(body["error"]["message"].is_string(), "{:?}", reply);
    let data = &body["error"]["data"];
    prop_assert_eq!(data, &json!({"problem": problem}), "{:?}", reply);
    Ok(())
}

/// [`check_none_leaked`], as a test's assertion about `case`.
fn assert_none_leaked(reply: &Reply, names: &[String], case: &str) {
    check_none_leaked(reply, names).unwrap_or_else(|e| panic!("{case}: {e}"));
}

/// [`check_refused`], as a test's assertion about `case`.
fn assert_refused(reply: &Reply, id: u64, problem: &str, case: &str) {
    check_refused(reply, id, problem).unwrap_or_else(|e| panic!("{case}: {e}"));
}

/// The one response in what the client got, after asserting it is for `id`.
fn response_of(reply: &Reply, id: u64, case: &str) -> Value {
    let messages = client_messages(reply).unwrap_or_else(|e| panic!("{case}: {e}: {reply:?}"));
    let response = messages
        .last()
        .unwrap_or_else(|| panic!("{case}: no message: {reply:?}"))
        .clone();
    assert_eq!(response["id"], id, "{case}: {reply:?}");
    response
}

// ---------------------------------------------------------------------------------------------
// 1. Each finding as its own test.
// ---------------------------------------------------------------------------------------------

/// The framings of the finding: valid event streams the reader of dfe74b4 does not parse.
const MISREAD: [&str; 2] = ["CR line endings", "a BOM before the data line"];

/// `response` in the framing `MISREAD[which]`: with CR line endings the old reader saw one
/// line and no data; with a BOM before `data:` it saw a field of another name.
fn misread_framing(which: usize, response: &str) -> String {
    let style = EventStyle {
        event_field: which == 0,
        space: true,
        ..EventStyle::default()
    };
    let mut lines = style.lines(response, None);
    lines.push(String::new());
    match which {
        0 => join_lines(&lines, &[Ending::Cr], false),
        _ => join_lines(&lines, &[Ending::Lf], true),
    }
}

/// Finding 1: a hidden entry reached the client through an event-stream framing the old
/// reader did not parse (it copied what it could not read byte for byte), for all six
/// listing methods in both eras. Every visible entry must arrive, in order, and no byte of a
/// hidden one.
#[tokio::test]
async fn hidden_entries_never_reach_the_client_in_framings_the_old_reader_misread() {
    let framing: Arc<Mutex<usize>> = Arc::default();
    let which = framing.clone();
    let gated = start(
        move |request: &Value| {
            let method = request["method"].as_str().unwrap_or_default();
            let listing = LISTINGS.iter().find(|l| l.method == method).unwrap();
            let (all, _, _) = page(listing, &[false, true, false, true], 7);
            let response = listing.response(&request["id"], all);
            let text = json_text(&response, JsonStyle::default());
            Script::event_stream(misread_framing(*which.lock().unwrap(), &text))
        },
        |b| b,
    )
    .await;
    let (mut id, mut leaked, mut misread) = (0, Vec::new(), Vec::new());
    for (f, label) in MISREAD.iter().enumerate() {
        *framing.lock().unwrap() = f;
        for listing in &LISTINGS {
            for era in ERAS {
                id += 1;
                let (_, visible, names) = page(listing, &[false, true, false, true], 7);
                let case = format!("{} ({era:?}, {label})", listing.method);
                let reply = list(&gated, era, id, listing).await;
                if names.iter().any(|name| reply.text.contains(name.as_str())) {
                    leaked.push(case);
                    continue;
                }
                let entries = client_messages(&reply)
                    .ok()
                    .and_then(|messages| messages.last().cloned())
                    .filter(|response| response["id"] == id && reply.status == 200)
                    .map(|response| response["result"][listing.entries].clone());
                if entries != Some(Value::Array(visible)) {
                    misread.push(format!("{case}: {reply:?}"));
                }
            }
        }
    }
    assert!(
        leaked.is_empty() && misread.is_empty(),
        "{} of {id} cases leaked a hidden entry: {leaked:#?}\nwithout the visible entries: {misread:#?}",
        leaked.len()
    );
}

/// Finding 2: an answer holding no response for this request's id (a notification alone, in
/// JSON or in an event stream) was passed on; it is refused as `no_response`.
#[tokio::test]
async fn an_answer_with_no_response_for_this_id_is_refused() {
    let stream = Arc::new(Mutex::new(false));
    let as_stream = stream.clone();
    let gated = start(
        move |_: &Value| {
            let only = notification().to_string();
            if *as_stream.lock().unwrap() {
                Script::event_stream(format!("event: message\ndata: {only}\n\n"))
            } else {
                Script::json(only)
            }
        },
        |b| b,
    )
    .await;
    for (id, framing) in [(1, false), (2, true)] {
        *stream.lock().unwrap() = framing;
        let reply = list(&gated, Era::Legacy, id, &LISTINGS[0]).await;
        let case = format!("stream: {framing}");
        assert_refused(&reply, id, "no_response", &case);
    }
}

/// Finding 3: a non-2xx answer carrying a `result` was passed as it was (the TypeScript SDK
/// puts its text in the error it raises, hidden names included); it is refused as
/// `result_on_error_status`. A non-2xx answer without a result keeps its status, with the
/// layer's own writing of its one JSON-RPC error, or no body when it holds anything else.
#[tokio::test]
async fn a_non_2xx_answer_carrying_a_result_is_refused() {
    let listing = LISTINGS[0];
    let status = Arc::new(Mutex::new((500u16, "result")));
    let chosen = status.clone();
    let gated = start(
        move |request: &Value| {
            let (code, kind) = *chosen.lock().unwrap();
            let (all, _, _) = page(&listing, &[true, false], 3);
            let body = match kind {
                "result" => json_text(&listing.response(&request["id"], all), JsonStyle::default()),
                "error" => json_text(
                    &json!({"jsonrpc": "2.0", "id": request["id"],
                            "error": {"code": -32000, "message": "busy"}}),
                    JsonStyle {
                        pretty: true,
                        reverse: true,
                    },
                ),
                _ => "<html>hidden_0_3 went away</html>".to_owned(),
            };
            Script::json(body)
                .header("mcp-session-id", "s-1")
                .with_status(code)
        },
        |b| b,
    )
    .await;
    let hidden = vec!["hidden_0_3".to_owned()];
    let mut id = 0;
    for code in [400, 404, 500, 503] {
        id += 1;
        *status.lock().unwrap() = (code, "result");
        let reply = list(&gated, Era::Legacy, id, &listing).await;
        let case = format!("{code} with a result");
        assert_none_leaked(&reply, &hidden, &case);
        assert_refused(&reply, id, "result_on_error_status", &case);
    }
    // Without a result, the status and headers pass; the one error is the layer's writing.
    id += 1;
    *status.lock().unwrap() = (503, "error");
    let reply = list(&gated, Era::Legacy, id, &listing).await;
    assert_eq!(reply.status, 503, "{reply:?}");
    assert_eq!(reply.headers["mcp-session-id"], "s-1", "{reply:?}");
    let expected = json!({"jsonrpc": "2.0", "id": id,
                          "error": {"code": -32000, "message": "busy"}});
    assert_eq!(reply.body, expected, "{reply:?}");
    assert!(
        !reply.text.contains('\n'),
        "the layer's own writing: {reply:?}"
    );
    // Anything else is dropped.
    id += 1;
    *status.lock().unwrap() = (502, "html");
    let reply = list(&gated, Era::Legacy, id, &listing).await;
    assert_eq!(reply.status, 502, "{reply:?}");
    assert_eq!(reply.text, "", "{reply:?}");
}

/// Finding 4: bytes the reader did not parse were written back: lines other than `data`
/// (comments, ids, unknown fields) were copied byte for byte, so whatever they held reached
/// the client; and of two `Content-Type` headers only the first was read. The layer writes
/// what it sends (`event: message`, one `data` line, a blank line) and refuses two content
/// types as `content_type`.
#[tokio::test]
async fn bytes_the_layer_did_not_read_never_reach_the_client() {
    let listing = LISTINGS[0];
    let case = Arc::new(Mutex::new("lines"));
    let chosen = case.clone();
    let gated = start(
        move |request: &Value| {
            let (all, _, _) = page(&listing, &[false, true], 5);
            let response = listing.response(&request["id"], all).to_string();
            // The entries are filtered, but what the other lines say is never read.
            let (all, _, _) = page(&listing, &[false], 5);
            let visible_only = listing.response(&request["id"], all).to_string();
            match *chosen.lock().unwrap() {
                "lines" => Script::event_stream(format!(
                    ": hidden_1_5\nid: hidden_1_5\nx-note: hidden_1_5\nretry: 10\nhidden_1_5\n\
                     event: message\ndata: {response}\n\n: hidden_1_5 again\n\n"
                )),
                "two types" => Script::json(visible_only).header("content-type", "text/html"),
                _ => Script::json(response).header("content-type", "application/json"),
            }
        },
        |b| b,
    )
    .await;
    let names = vec!["hidden_1_5".to_owned()];
    for era in ERAS {
        *case.lock().unwrap() = "lines";
        let reply = list(&gated, era, 1, &listing).await;
        assert_none_leaked(&reply, &names, "other lines");
        assert_eq!(
            reply.headers["content-type"], "text/event-stream",
            "{reply:?}"
        );
        assert!(is_layer_framing(&reply.text), "{era:?}: {reply:?}");
        let response = response_of(&reply, 1, "other lines");
        assert_eq!(
            response["result"]["tools"],
            json!([listing.entry("visible_0_5")]),
            "{reply:?}"
        );
        for kind in ["two types", "two of the same type"] {
            *case.lock().unwrap() = kind;
            let reply = list(&gated, era, 2, &listing).await;
            assert_none_leaked(&reply, &names, kind);
            assert_refused(&reply, 2, "content_type", kind);
        }
    }
}

/// Finding 5: conceal probes checked only the content type, and passed the body unread. A
/// probe's answer is read under the same rule as any other: one readable probe answer passes
/// (the made-up name put back), an unreadable one is refused with its `problem`.
#[tokio::test]
async fn conceal_probe_answers_are_read_under_the_same_rule() {
    let case = Arc::new(Mutex::new("readable"));
    let chosen = case.clone();
    let gated = start(
        move |request: &Value| {
            let name = request["params"]["name"].as_str().unwrap_or_default();
            let id = &request["id"];
            let missing = json!({"jsonrpc": "2.0", "id": id,
                                 "error": {"code": -32602, "message": format!("Unknown tool: {name}")}});
            match *chosen.lock().unwrap() {
                "readable" => Script::json(missing.to_string()),
                "not_json" => Script::json(format!("{missing} trailing")),
                "other_id" => Script::json(
                    json!({"jsonrpc": "2.0", "id": 999, "result": {"content": []}}).to_string(),
                ),
                "no_response" => Script::event_stream(format!(
                    "event: message\ndata: {}\n\n",
                    notification()
                )),
                "after_response" => Script::event_stream(format!(
                    "data: {missing}\n\ndata: {missing}\n\n"
                )),
                "not_jsonrpc" => Script::json(format!("[{missing}]")),
                other => panic!("no case {other}"),
            }
        },
        |b| b.conceal_refusals(),
    )
    .await;
    let call = |id| {
        gated.send(
            Era::Legacy,
            id,
            "tools/call",
            json!({"name": "hidden_tool", "arguments": {}}),
            Some("hidden_tool"),
        )
    };
    let reply = call(1).await;
    assert_eq!(reply.status, 200, "{reply:?}");
    assert_eq!(
        reply.body["error"]["message"], "Unknown tool: hidden_tool",
        "the probe's answer, about the name asked for: {reply:?}"
    );
    for (id, problem) in [
        (2, "not_json"),
        (3, "other_id"),
        (4, "no_response"),
        (5, "after_response"),
        (6, "not_jsonrpc"),
    ] {
        *case.lock().unwrap() = problem;
        let reply = call(id).await;
        assert_refused(&reply, id, problem, problem);
    }
}

/// A valid framing the old reader misread (CR line endings, an `event` field first, the JSON
/// over several `data` lines): the answer holds one response.
fn misread_stream(message: &Value) -> String {
    let style = EventStyle {
        event_field: true,
        json: JsonStyle {
            pretty: true,
            reverse: false,
        },
        space: true,
        ..EventStyle::default()
    };
    let mut lines = style.lines(&json_text(message, style.json), None);
    lines.push(String::new());
    join_lines(&lines, &[Ending::Cr], false)
}

/// Finding 6a: a valid answer the reader misparsed made an approved held call fail ("The
/// server gave no answer to the approved call"). The approved call completes with the inner
/// server's result.
#[tokio::test]
async fn an_approved_held_call_answered_in_a_valid_framing_completes() {
    let gated = start(
        |request: &Value| {
            let result = json!({"content": [{"type": "text", "text": "deployed"}],
                                "isError": false});
            let response = json!({"jsonrpc": "2.0", "id": request["id"], "result": result});
            Script::event_stream(misread_stream(&response))
        },
        |b| b,
    )
    .await;
    let held = gated
        .send(
            Era::Modern,
            1,
            "tools/call",
            json!({"name": "deploy", "arguments": {"env": "prod"}}),
            Some("deploy"),
        )
        .await;
    assert_eq!(held.body["result"]["resultType"], "task", "{held:?}");
    let task_id = held.body["result"]["taskId"].as_str().unwrap().to_owned();
    let approved = gated.server.gate.tasks().approve(&task_id, "ops").await;
    assert_eq!(approved.unwrap().status, TaskStatus::Approved);
    let poll = gated
        .send(
            Era::Modern,
            2,
            "tasks/get",
            json!({"taskId": task_id}),
            Some(&task_id),
        )
        .await;
    let task = &poll.body["result"];
    assert_eq!(task["status"], "completed", "{poll:?}");
    assert_eq!(task["result"]["content"][0]["text"], "deployed", "{poll:?}");
}

/// Finding 6b: in the same way, `server/discover` went out without the layer's extensions.
/// Read, it gains them beside the inner server's own.
#[tokio::test]
async fn server_discover_in_a_valid_framing_gains_the_layers_extensions() {
    let gated = start(
        |request: &Value| {
            let result = json!({
                "supportedVersions": ["2026-07-28"],
                "capabilities": {"tools": {}, "extensions": {"example.com/own": {}}},
                "serverInfo": {"name": "scripted", "version": "1.0.0"},
            });
            let response = json!({"jsonrpc": "2.0", "id": request["id"], "result": result});
            Script::event_stream(misread_stream(&response))
        },
        |b| b,
    )
    .await;
    let reply = gated
        .send(Era::Modern, 1, "server/discover", json!({}), None)
        .await;
    assert_eq!(reply.status, 200, "{reply:?}");
    let response = response_of(&reply, 1, "server/discover");
    let extensions = &response["result"]["capabilities"]["extensions"];
    assert_eq!(extensions["example.com/own"], json!({}), "{reply:?}");
    assert_eq!(extensions[DENIALS_EXTENSION], json!({}), "{reply:?}");
}

// ---------------------------------------------------------------------------------------------
// 2. The property test.
// ---------------------------------------------------------------------------------------------

/// How a readable answer is framed.
#[derive(Clone, Debug)]
enum Framing {
    /// JSON text with whitespace before and after.
    Json(JsonStyle, &'static str, &'static str),
    /// An event stream, its body cut where `cuts` says (every byte when `every_byte`).
    Stream(StreamStyle),
}

/// Where the body is cut into chunks.
#[derive(Clone, Debug)]
struct Cuts {
    every_byte: bool,
    at: Vec<Index>,
}

impl Cuts {
    fn apply(&self, script: Script) -> Script {
        let len: usize = script.chunks.iter().map(|c| c.len()).sum();
        if len == 0 {
            return script;
        }
        let cuts: Vec<usize> = if self.every_byte {
            (1..len).collect()
        } else {
            self.at.iter().map(|at| at.index(len)).collect()
        };
        script.split_at(&cuts)
    }
}

/// One readable case: a page of a listing in an era, framed, cut.
#[derive(Clone, Debug)]
struct Readable {
    listing: usize,
    era: Era,
    hidden: Vec<bool>,
    salt: u64,
    framing: Framing,
    cuts: Cuts,
    /// Headers a readable answer may have too: a `charset` parameter on its content type,
    /// `Content-Encoding: identity`, a session id.
    headers: Headers,
}

/// Headers a readable answer may carry.
#[derive(Clone, Copy, Debug)]
struct Headers {
    charset: bool,
    identity: bool,
    session: bool,
}

impl Headers {
    fn apply(self, mut script: Script) -> Script {
        if self.charset {
            for (name, value) in &mut script.headers {
                if name == "content-type" {
                    value.push_str("; charset=utf-8");
                }
            }
        }
        if self.identity {
            script = script.header("content-encoding", "identity");
        }
        if self.session {
            script = script.header("mcp-session-id", "s-42");
        }
        script
    }
}

/// What is wrong with an unreadable answer, and the problem the layer names.
#[derive(Clone, Copy, Debug)]
enum Fault {
    NoResponse,
    OtherId,
    TwoResponses,
    MessageAfter,
    TrailingBytes,
    ErrorStatusWithResult(u16),
    /// The same, the result in an event stream.
    ErrorStatusStreamWithResult(u16),
    TwoContentTypes,
    OtherContentType(&'static str),
    NoContentType,
    Batch,
    DuplicateKey,
    EventType,
    LastEventUndispatched,
    NotJsonRpc,
    ContentEncoding,
    NotUtf8,
    BadResult,
}

impl Fault {
    fn problem(self) -> &'static str {
        match self {
            Fault::NoResponse | Fault::LastEventUndispatched => "no_response",
            Fault::OtherId => "other_id",
            Fault::TwoResponses | Fault::MessageAfter => "after_response",
            Fault::TrailingBytes | Fault::DuplicateKey => "not_json",
            Fault::ErrorStatusWithResult(_) | Fault::ErrorStatusStreamWithResult(_) => {
                "result_on_error_status"
            }
            Fault::TwoContentTypes | Fault::OtherContentType(_) | Fault::NoContentType => {
                "content_type"
            }
            Fault::Batch | Fault::NotJsonRpc => "not_jsonrpc",
            Fault::EventType => "event_type",
            Fault::ContentEncoding => "content_encoding",
            Fault::NotUtf8 => "not_utf8",
            Fault::BadResult => "bad_result",
        }
    }
}

fn json_style() -> impl Strategy<Value = JsonStyle> {
    (any::<bool>(), any::<bool>()).prop_map(|(pretty, reverse)| JsonStyle { pretty, reverse })
}

fn event_style() -> impl Strategy<Value = EventStyle> {
    (
        (
            any::<bool>(),
            proptest::option::of(any::<u16>()),
            any::<bool>(),
        ),
        (any::<bool>(), any::<bool>(), any::<bool>(), any::<bool>()),
        json_style(),
        proptest::collection::vec(any::<bool>(), 0..40),
        proptest::option::of(any::<Index>()),
    )
        .prop_map(
            |((comment, id, event_field), (retry, unknown, colonless, space), json, breaks, at)| {
                EventStyle {
                    comment,
                    id,
                    event_field,
                    retry,
                    unknown,
                    colonless,
                    space,
                    json,
                    breaks,
                    empty_data_at: at,
                }
            },
        )
}

fn extra() -> impl Strategy<Value = Extra> {
    prop_oneof![
        event_style().prop_map(Extra::Notification),
        event_style().prop_map(Extra::ServerRequest),
        Just(Extra::Priming),
        Just(Extra::Comment),
    ]
}

fn ending() -> impl Strategy<Value = Ending> {
    prop_oneof![Just(Ending::Lf), Just(Ending::CrLf), Just(Ending::Cr)]
}

fn stream_style() -> impl Strategy<Value = StreamStyle> {
    (
        any::<bool>(),
        proptest::collection::vec(ending(), 1..5),
        proptest::collection::vec(extra(), 0..3),
        event_style(),
        proptest::collection::vec(any::<bool>(), 0..2),
    )
        .prop_map(|(bom, endings, before, response, after)| StreamStyle {
            bom,
            endings,
            before,
            response,
            after,
        })
}

fn whitespace() -> impl Strategy<Value = &'static str> {
    prop_oneof![Just(""), Just(" "), Just("\n"), Just("\r\n\t ")]
}

fn framing() -> impl Strategy<Value = Framing> {
    prop_oneof![
        (json_style(), whitespace(), whitespace()).prop_map(|(s, a, b)| Framing::Json(s, a, b)),
        stream_style().prop_map(Framing::Stream),
    ]
}

fn cuts() -> impl Strategy<Value = Cuts> {
    (
        proptest::bool::weighted(0.15),
        proptest::collection::vec(any::<Index>(), 0..8),
    )
        .prop_map(|(every_byte, at)| Cuts { every_byte, at })
}

fn readable() -> impl Strategy<Value = Readable> {
    (
        0..LISTINGS.len(),
        prop_oneof![Just(Era::Legacy), Just(Era::Modern)],
        proptest::collection::vec(any::<bool>(), 0..7),
        any::<u64>(),
        framing(),
        cuts(),
        (any::<bool>(), any::<bool>(), any::<bool>()),
    )
        .prop_map(
            |(listing, era, hidden, salt, framing, cuts, (charset, identity, session))| Readable {
                listing,
                era,
                hidden,
                salt,
                framing,
                cuts,
                headers: Headers {
                    charset,
                    identity,
                    session,
                },
            },
        )
}

fn fault() -> impl Strategy<Value = Fault> {
    prop_oneof![
        Just(Fault::NoResponse),
        Just(Fault::OtherId),
        Just(Fault::TwoResponses),
        Just(Fault::MessageAfter),
        Just(Fault::TrailingBytes),
        prop_oneof![Just(400u16), Just(403), Just(404), Just(500), Just(503)]
            .prop_map(Fault::ErrorStatusWithResult),
        prop_oneof![Just(400u16), Just(404), Just(500)]
            .prop_map(Fault::ErrorStatusStreamWithResult),
        Just(Fault::TwoContentTypes),
        prop_oneof![
            Just("text/plain"),
            Just("text/html"),
            Just("application/octet-stream"),
            Just("application/json-seq"),
        ]
        .prop_map(Fault::OtherContentType),
        Just(Fault::NoContentType),
        Just(Fault::Batch),
        Just(Fault::DuplicateKey),
        Just(Fault::EventType),
        Just(Fault::LastEventUndispatched),
        Just(Fault::NotJsonRpc),
        Just(Fault::ContentEncoding),
        Just(Fault::NotUtf8),
        Just(Fault::BadResult),
    ]
}

impl Readable {
    fn listing(&self) -> &'static Listing {
        &LISTINGS[self.listing]
    }

    /// The hidden names of the page, and the page's entries that the client must get.
    fn page(&self) -> (Vec<Value>, Vec<Value>, Vec<String>) {
        // Always at least one hidden entry: there is something to leak.
        let mut hidden = self.hidden.clone();
        hidden.push(true);
        page(self.listing(), &hidden, self.salt)
    }

    /// The stream style for faults that need an event stream (a JSON case gets a plain one).
    fn stream(&self) -> StreamStyle {
        match &self.framing {
            Framing::Stream(style) => style.clone(),
            Framing::Json(..) => StreamStyle {
                bom: false,
                endings: vec![Ending::Lf],
                before: Vec::new(),
                response: EventStyle::default(),
                after: Vec::new(),
            },
        }
    }

    fn json_style(&self) -> JsonStyle {
        match &self.framing {
            Framing::Json(style, ..) => *style,
            Framing::Stream(style) => style.response.json,
        }
    }

    /// The readable answer to request `id`, and the messages before the response.
    fn script(&self, id: u64) -> (Script, Vec<Value>) {
        let (all, _, _) = self.page();
        let response = self.listing().response(&json!(id), all);
        let (script, before) = match &self.framing {
            Framing::Json(style, lead, trail) => (
                Script::json(format!("{lead}{}{trail}", json_text(&response, *style))),
                Vec::new(),
            ),
            Framing::Stream(style) => {
                let text = json_text(&response, style.response.json);
                (
                    Script::event_stream(style.write(&text, None, true)),
                    style.messages_before(),
                )
            }
        };
        (self.cuts.apply(self.headers.apply(script)), before)
    }

    /// An answer to request `id` with `fault`.
    fn faulty(&self, id: u64, fault: Fault) -> Script {
        let (all, _, _) = self.page();
        let listing = self.listing();
        let response = listing.response(&json!(id), all.clone());
        let style = self.json_style();
        let text = json_text(&response, style);
        let stream = self.stream();
        let in_stream = |body: &str| Script::event_stream(stream.write(body, None, true));
        let script = match fault {
            Fault::NoResponse => {
                let mut only_before = stream.clone();
                only_before.before.push(Extra::Comment);
                let text = json_text(&notification(), style);
                Script::event_stream(only_before.write(&text, None, true))
            }
            Fault::OtherId => in_stream(&json_text(
                &listing.response(&json!(id + 1_000_000), all),
                style,
            )),
            Fault::TwoResponses => Script::event_stream(stream.write_then(
                &text,
                None,
                true,
                std::slice::from_ref(&text),
            )),
            Fault::MessageAfter => {
                let after = json_text(&notification(), style);
                Script::event_stream(stream.write_then(&text, None, true, &[after]))
            }
            Fault::TrailingBytes => Script::json(format!("{text} {{}}")),
            Fault::ErrorStatusWithResult(code) => Script::json(text).with_status(code),
            Fault::ErrorStatusStreamWithResult(code) => in_stream(&text).with_status(code),
            Fault::TwoContentTypes => Script::json(text).header("content-type", "application/json"),
            Fault::OtherContentType(kind) => {
                Script::status(200).header("content-type", kind).body(text)
            }
            Fault::NoContentType => Script::status(200).body(text),
            Fault::Batch => Script::json(format!("[{text}]")),
            Fault::DuplicateKey => {
                // The hidden entries first, a second `result` the layer might read instead.
                let visible = listing.response(&json!(id), Vec::new()).to_string();
                let inner = visible.trim_start_matches('{');
                let doubled = format!("{{\"result\":{},{inner}", response["result"]);
                Script::json(doubled)
            }
            Fault::EventType => Script::event_stream(stream.write(&text, Some("update"), true)),
            Fault::LastEventUndispatched => Script::event_stream(stream.write(&text, None, false)),
            Fault::NotJsonRpc => {
                let mut bare = response.clone();
                bare.as_object_mut().unwrap().remove("jsonrpc");
                Script::json(json_text(&bare, style))
            }
            Fault::ContentEncoding => Script::json(text).header("content-encoding", "gzip"),
            Fault::NotUtf8 => {
                let mut bytes = b": \xff\xfe\n\n".to_vec();
                bytes.extend_from_slice(stream.write(&text, None, true).as_bytes());
                Script::status(200)
                    .header("content-type", "text/event-stream")
                    .chunks(vec![bytes::Bytes::from(bytes)])
            }
            Fault::BadResult => {
                let names: Map<String, Value> = all
                    .iter()
                    .enumerate()
                    .map(|(i, entry)| (i.to_string(), entry.clone()))
                    .collect();
                let odd = json!({"jsonrpc": "2.0", "id": id,
                                 "result": {listing.entries: names}});
                Script::json(json_text(&odd, style))
            }
        };
        self.cuts.apply(script)
    }
}

/// The slot the property test's script answers from.
type Slot = Arc<Mutex<Option<Script>>>;

/// The client gets every visible entry, in order, and no byte of a hidden one, from every
/// valid framing of a page of every listing in both eras, written in the layer's own framing;
/// every unreadable answer is refused with its `problem` and leaks nothing. 256 cases of
/// each.
#[test]
fn answers_pass_only_what_the_layer_read() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let slot: Slot = Arc::default();
    let answer = slot.clone();
    let gated = runtime.block_on(start(
        move |_: &Value| answer.lock().unwrap().clone().expect("a scripted answer"),
        |b| b,
    ));
    let config = Config {
        cases: 256,
        max_shrink_iters: 256,
        failure_persistence: None,
        ..Config::default()
    };
    let ids = AtomicU64::new(0);
    let next_id = || ids.fetch_add(1, Ordering::Relaxed) + 1;

    let mut runner = TestRunner::new(config.clone());
    let readable_run = runner.run(&readable(), |case| {
        let id = next_id();
        let (script, before) = case.script(id);
        *slot.lock().unwrap() = Some(script);
        let reply = runtime.block_on(list(&gated, case.era, id, case.listing()));
        let (_, visible, names) = case.page();
        check_readable(&case, &reply, id, &before, &visible, &names)
    });

    // Apart, so that each run shrinks to its own simplest failure.
    let mut runner = TestRunner::new(config.clone());
    let framing_run = runner.run(&readable(), |case| {
        let id = next_id();
        let (script, _) = case.script(id);
        *slot.lock().unwrap() = Some(script);
        let reply = runtime.block_on(list(&gated, case.era, id, case.listing()));
        if matches!(case.framing, Framing::Stream(_)) {
            prop_assert!(
                is_layer_framing(&reply.text),
                "not the layer's: {:?}",
                reply
            );
        }
        Ok(())
    });

    let mut runner = TestRunner::new(config);
    let unreadable_run = runner.run(&(readable(), fault()), |(case, fault)| {
        let id = next_id();
        *slot.lock().unwrap() = Some(case.faulty(id, fault));
        let reply = runtime.block_on(list(&gated, case.era, id, case.listing()));
        let (_, _, names) = case.page();
        check_none_leaked(&reply, &names)?;
        check_refused(&reply, id, fault.problem())
    });
    let failures: Vec<String> = [
        readable_run.err().map(|f| format!("readable answers: {f}")),
        framing_run
            .err()
            .map(|f| format!("readable answers, the layer's framing: {f}")),
        unreadable_run
            .err()
            .map(|f| format!("unreadable answers: {f}")),
    ]
    .into_iter()
    .flatten()
    .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

fn check_readable(
    case: &Readable,
    reply: &Reply,
    id: u64,
    before: &[Value],
    visible: &[Value],
    names: &[String],
) -> Result<(), TestCaseError> {
    check_none_leaked(reply, names)?;
    prop_assert_eq!(reply.status, 200, "{:?}", reply);
    let content_type = reply
        .headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let expected = match case.framing {
        Framing::Json(..) => "application/json",
        Framing::Stream(_) => "text/event-stream",
    };
    prop_assert_eq!(content_type, expected, "{:?}", reply);
    if case.headers.session {
        let session = reply.headers.get("mcp-session-id");
        prop_assert_eq!(
            session.map(|v| v.as_bytes()),
            Some(&b"s-42"[..]),
            "{:?}",
            reply
        );
    }
    let messages = client_messages(reply).map_err(TestCaseError::fail)?;
    prop_assert_eq!(messages.len(), before.len() + 1, "{:?}", reply);
    prop_assert_eq!(&messages[..before.len()], before, "{:?}", reply);
    let response = &messages[before.len()];
    prop_assert_eq!(&response["id"], &json!(id), "{:?}", reply);
    prop_assert_eq!(
        &response["result"][case.listing().entries],
        &Value::Array(visible.to_vec()),
        "{:?}",
        reply
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The reference reader and the framings, checked against each other and the grammar.
// ---------------------------------------------------------------------------------------------

/// The reference reader follows the grammar on hand-written streams.
#[test]
fn the_reference_reader_follows_the_whatwg_grammar() {
    let read = |text: &str| -> Vec<(String, String)> {
        read_event_stream(text)
            .into_iter()
            .map(|e| (e.kind, e.data))
            .collect()
    };
    let one = |kind: &str, data: &str| vec![(kind.to_owned(), data.to_owned())];
    assert_eq!(read("data: a\n\n"), one("message", "a"));
    assert_eq!(read("\u{feff}data:a\r\n\r\n"), one("message", "a"));
    assert_eq!(read("data: a\rdata:  b\r\r"), one("message", "a\n b"));
    assert_eq!(
        read(": c\nid: 1\nretry: 5\nx\nevent: up\n\n"),
        Vec::new(),
        "no data"
    );
    assert_eq!(
        read("event: up\ndata\n\n"),
        one("up", ""),
        "a data line, empty"
    );
    assert_eq!(read("event: up\ndata: a\n\n"), one("up", "a"));
    assert_eq!(read("event\ndata: a\n\n"), one("message", "a"));
    assert_eq!(
        read("data: a\n"),
        Vec::new(),
        "no blank line: not dispatched"
    );
    assert_eq!(read("data\ndata\n\n"), one("message", "\n"));
    assert_eq!(
        read("\u{feff}\u{feff}data: a\n\n"),
        Vec::new(),
        "one BOM only"
    );
}

proptest! {
    #![proptest_config(Config { cases: 256, failure_persistence: None, ..Config::default() })]

    /// Every framing the property test writes reads back, by the reference reader, as the
    /// messages written: the generator makes only valid streams.
    #[test]
    fn the_framings_written_read_back_as_their_messages(style in stream_style(), salt in any::<u64>()) {
        let listing = &LISTINGS[(salt % 6) as usize];
        let (all, _, _) = page(listing, &[true, false], salt);
        let response = listing.response(&json!(1), all);
        let text = style.write(&json_text(&response, style.response.json), None, true);
        let events = read_event_stream(&text);
        let mut expected = style.messages_before();
        expected.push(response);
        let read: Vec<Value> = events
            .iter()
            .map(|e| serde_json::from_str(&e.data).unwrap())
            .collect();
        prop_assert!(events.iter().all(|e| e.kind == "message"));
        prop_assert_eq!(read, expected, "{:?}", text);
    }
}

/// A JSON value parsed with duplicate keys refused at every depth (the reference's strict
/// JSON; `serde_json::Value` keeps the last of two keys silently).
struct NoDuplicates(Value);

impl<'de> serde::Deserialize<'de> for NoDuplicates {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Strict;
        impl<'de> serde::de::Visitor<'de> for Strict {
            type Value = Value;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("JSON")
            }
            fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
                Ok(json!(v))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
                Ok(json!(v))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
                Ok(json!(v))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
                Ok(json!(v))
            }
            fn visit_str<E>(self, v: &str) -> Result<Value, E> {
                Ok(json!(v))
            }
            fn visit_unit<E>(self) -> Result<Value, E> {
                Ok(Value::Null)
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Value, A::Error> {
                let mut items = Vec::new();
                while let Some(NoDuplicates(item)) = seq.next_element()? {
                    items.push(item);
                }
                Ok(Value::Array(items))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Value, A::Error> {
                let mut members = Map::new();
                while let Some((key, NoDuplicates(value))) = map.next_entry::<String, _>()? {
                    if members.insert(key, value).is_some() {
                        return Err(serde::de::Error::custom("a duplicate key"));
                    }
                }
                Ok(Value::Object(members))
            }
        }
        deserializer.deserialize_any(Strict).map(NoDuplicates)
    }
}

/// The contract's rule, applied by the test to a script: the `problem` the layer must name
/// for the answer to request `id` of `listing`, or `None` when it must pass. Checks that the
/// property test's readable answers are readable and each faulty one has its fault.
fn reference_problem(script: &Script, id: u64, listing: &Listing) -> Option<&'static str> {
    let body: Vec<u8> = script.chunks.iter().flat_map(|c| c.to_vec()).collect();
    let header = |name: &str| -> Vec<&str> {
        script
            .headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .collect()
    };
    let strict = |text: &[u8]| serde_json::from_slice::<NoDuplicates>(text).map(|v| v.0);
    if !(200..300).contains(&script.status) {
        // Read as JSON, and as an event stream: a result in either is one.
        let text = String::from_utf8_lossy(&body);
        let mut messages = read_event_stream(&text)
            .into_iter()
            .filter_map(|event| strict(event.data.as_bytes()).ok())
            .chain(strict(&body).ok());
        let carries_result = messages.any(|m| m.get("result").is_some());
        return carries_result.then_some("result_on_error_status");
    }
    let types = header("content-type");
    let essence = |value: &str| value.split(';').next().unwrap_or("").trim().to_lowercase();
    let stream = match types.as_slice() {
        [one] if essence(one) == "application/json" => false,
        [one] if essence(one) == "text/event-stream" => true,
        _ => return Some("content_type"),
    };
    if header("content-encoding").iter().any(|e| *e != "identity") {
        return Some("content_encoding");
    }
    let mut messages = Vec::new();
    if stream {
        let Ok(text) = std::str::from_utf8(&body) else {
            return Some("not_utf8");
        };
        for event in read_event_stream(text) {
            if event.kind != "message" {
                return Some("event_type");
            }
            messages.push(strict(event.data.as_bytes()).ok()?);
        }
    } else {
        let Ok(message) = strict(&body) else {
            return Some("not_json");
        };
        messages.push(message);
    }
    let mut answered = false;
    for message in &messages {
        let is_jsonrpc = message.is_object() && message["jsonrpc"] == "2.0";
        if !is_jsonrpc {
            return Some("not_jsonrpc");
        }
        if answered {
            return Some("after_response");
        }
        if message.get("result").is_some() || message.get("error").is_some() {
            if message["id"] != id {
                return Some("other_id");
            }
            answered = true;
            if !message["result"][listing.entries].is_array() {
                return Some("bad_result");
            }
        }
    }
    (!answered).then_some("no_response")
}

proptest! {
    #![proptest_config(Config { cases: 512, failure_persistence: None, ..Config::default() })]

    /// The property test's answers are what it says they are, by the contract's rule applied
    /// here (no layer involved): a readable one passes, each faulty one has its problem.
    #[test]
    fn the_answers_written_have_the_fault_they_are_named_for(case in readable(), fault in fault()) {
        let listing = case.listing();
        prop_assert_eq!(reference_problem(&case.script(7).0, 7, listing), None);
        prop_assert_eq!(
            reference_problem(&case.faulty(7, fault), 7, listing),
            Some(fault.problem())
        );
    }
}
