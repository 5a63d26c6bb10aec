//! The rule, one case per problem and per passing shape.

use http::{Response, StatusCode, header};
use serde_json::{Value, json};

use super::*;

fn head(status: u16, headers: &[(&str, &str)]) -> http::response::Parts {
    let mut response = Response::builder().status(status);
    for (name, value) in headers {
        response = response.header(*name, *value);
    }
    response.body(()).unwrap().into_parts().0
}

/// Response headers, as name and value.
type Headers<'a> = &'a [(&'a str, &'a str)];

const JSON: Headers = &[("content-type", "application/json")];
const SSE: Headers = &[("content-type", "text/event-stream")];

fn id() -> Value {
    json!(7)
}

fn read_text(status: u16, headers: &[(&str, &str)], body: &str) -> Result<Read, Problem> {
    read(head(status, headers), body.as_bytes(), &id())
}

fn problem(status: u16, headers: &[(&str, &str)], body: &str) -> Problem {
    match read_text(status, headers, body) {
        Err(problem) => problem,
        Ok(read) => panic!("read {body:?} as {read:?}"),
    }
}

fn written(read: Read) -> (http::response::Parts, String) {
    let (head, body) = read.into_http().into_parts();
    (head, String::from_utf8(body.to_vec()).unwrap())
}

const RESULT: &str = r#"{"jsonrpc":"2.0","id":7,"result":{"tools":[]}}"#;

#[test]
fn a_json_answer_passes_rewritten() {
    let body = format!(" {RESULT}\n");
    let headers = [
        ("content-type", "Application/JSON; charset=utf-8"),
        ("content-length", "99"),
        ("etag", "\"x\""),
        ("mcp-session-id", "s1"),
    ];
    let (head, body) = written(read_text(200, &headers, &body).unwrap());
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap(),
        serde_json::from_str::<Value>(RESULT).unwrap()
    );
    assert!(!body.contains(char::is_whitespace), "{body}");
    assert_eq!(head.headers[header::CONTENT_TYPE], "application/json");
    assert!(head.headers.get(header::CONTENT_LENGTH).is_none());
    assert!(head.headers.get(header::ETAG).is_none());
    assert_eq!(head.headers["mcp-session-id"], "s1");
}

#[test]
fn an_event_stream_passes_in_the_canonical_form() {
    let text = "\u{FEFF}id: 0\r\nretry: 3000\r\n\r\n: hi\rdata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}\r\r\
                event: message\ndata: {\"jsonrpc\":\"2.0\",\ndata: \"id\":7,\"result\":{}}\n\n";
    let (head, body) = written(read_text(200, SSE, text).unwrap());
    assert_eq!(head.headers[header::CONTENT_TYPE], "text/event-stream");
    let progress = json!({"jsonrpc": "2.0", "method": "notifications/progress"});
    let result = json!({"jsonrpc": "2.0", "id": 7, "result": {}});
    assert_eq!(
        body,
        format!("event: message\ndata: {progress}\n\nevent: message\ndata: {result}\n\n")
    );
}

#[test]
fn each_problem_of_a_success() {
    let cases: &[(Headers, &str, Problem)] = &[
        (&[], RESULT, Problem::ContentType),
        (
            &[("content-type", "text/plain")],
            RESULT,
            Problem::ContentType,
        ),
        (
            &[
                ("content-type", "application/json"),
                ("content-type", "text/event-stream"),
            ],
            RESULT,
            Problem::ContentType,
        ),
        (
            &[
                ("content-type", "application/json"),
                ("content-encoding", "gzip"),
            ],
            RESULT,
            Problem::ContentEncoding,
        ),
        (
            JSON,
            r#"{"jsonrpc":"2.0","id":7,"result":{},"result":{}}"#,
            Problem::NotJson,
        ),
        (JSON, &format!("{RESULT}{RESULT}"), Problem::NotJson),
        (JSON, &format!("[{RESULT}]"), Problem::NotJsonRpc),
        (
            JSON,
            r#"{"jsonrpc":"2.0","method":"notifications/progress"}"#,
            Problem::NoResponse,
        ),
        (
            JSON,
            r#"{"jsonrpc":"2.0","id":8,"result":{}}"#,
            Problem::OtherId,
        ),
        (
            JSON,
            r#"{"jsonrpc":"2.0","id":"7","result":{}}"#,
            Problem::OtherId,
        ),
        (
            JSON,
            r#"{"jsonrpc":"2.0","id":7,"result":[]}"#,
            Problem::BadResult,
        ),
        (SSE, "event: other\ndata: {}\n\n", Problem::EventType),
        (SSE, "data: {\"a\":1}\n\n", Problem::NotJsonRpc),
        (SSE, "data: nope\n\n", Problem::NotJson),
        (SSE, "data:\n\n", Problem::NoResponse),
        (SSE, "data: \n\n", Problem::NoResponse),
        (SSE, "data:  \n\n", Problem::NotJson),
        (SSE, &format!("data: {RESULT}"), Problem::NoResponse),
        (SSE, &format!("data: {RESULT}\n"), Problem::NoResponse),
        (
            SSE,
            &format!("data: {RESULT}\n\ndata: {RESULT}\n\n"),
            Problem::AfterResponse,
        ),
        (
            SSE,
            &format!("data: {RESULT}\n\ndata: {{\"jsonrpc\":\"2.0\",\"method\":\"x\"}}\n\n"),
            Problem::AfterResponse,
        ),
        (
            SSE,
            &format!("data: {RESULT}\n\ndata: {{\"jsonrpc\""),
            Problem::AfterResponse,
        ),
        (SSE, "", Problem::NoResponse),
    ];
    for (headers, body, expected) in cases {
        assert_eq!(
            problem(200, headers, body),
            *expected,
            "{headers:?} {body:?}"
        );
    }
    let not_utf8 = read(head(200, SSE), b"data: \xff\n\n", &id());
    assert_eq!(not_utf8.unwrap_err(), Problem::NotUtf8);
}

#[test]
fn a_non_success_passes_only_without_a_result() {
    for (headers, body) in [
        (JSON, RESULT.to_owned()),
        (&[("content-type", "text/plain")][..], RESULT.to_owned()),
        (SSE, format!("data: {RESULT}\n\n")),
        (JSON, format!("[{RESULT}]")),
    ] {
        assert_eq!(
            problem(404, headers, &body),
            Problem::ResultOnErrorStatus,
            "{body}"
        );
    }
    let error =
        r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Session not found"}}"#;
    let (head, body) = written(read_text(404, JSON, error).unwrap());
    assert_eq!(head.status, StatusCode::NOT_FOUND);
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap(),
        serde_json::from_str::<Value>(error).unwrap()
    );
    // Text, or JSON that is not one JSON-RPC error, is not passed on.
    for (headers, body) in [
        (&[("content-type", "text/plain")][..], "Session not found"),
        (JSON, r#"{"detail":"x"}"#),
    ] {
        let (head, written) = written(read_text(404, headers, body).unwrap());
        assert_eq!(head.status, StatusCode::NOT_FOUND);
        assert_eq!(written, "");
        assert!(head.headers.get(header::CONTENT_TYPE).is_none());
    }
}

#[test]
fn every_problem_has_a_distinct_code() {
    let mut codes: Vec<&str> = Problem::ALL.iter().map(|p| p.code()).collect();
    codes.sort_unstable();
    codes.dedup();
    assert_eq!(codes.len(), Problem::ALL.len());
}

#[tokio::test]
async fn late_large_and_broken_answers() {
    use http_body_util::Full;
    let slow = async {
        tokio::time::sleep(Duration::from_secs(5)).await;
        Ok::<_, std::convert::Infallible>(Response::new(Full::new(Bytes::new())))
    };
    let late = fetch(slow, (1024, Some(Duration::from_millis(20))), &id()).await;
    assert_eq!(late.unwrap().unwrap_err(), Problem::Late);
    let big = async {
        Ok::<_, std::convert::Infallible>(Response::new(Full::new(Bytes::from(vec![b' '; 2048]))))
    };
    let large = fetch(big, (1024, None), &id()).await;
    assert_eq!(large.unwrap().unwrap_err(), Problem::TooLarge);
}

#[tokio::test]
async fn one_time_limit_bounds_the_head_and_the_body_together() {
    use http_body_util::StreamBody;
    // A head after `head` and a body of one frame after `body` more.
    let answer = |head: u64, body: u64| async move {
        tokio::time::sleep(Duration::from_millis(head)).await;
        let frame = futures_util::stream::once(async move {
            tokio::time::sleep(Duration::from_millis(body)).await;
            Ok::<_, std::convert::Infallible>(http_body::Frame::data(Bytes::from_static(b"{}")))
        });
        Ok::<_, std::convert::Infallible>(Response::new(StreamBody::new(frame)))
    };
    let limit = (1024, Some(Duration::from_millis(300)));
    // Each step within the limit, both together past it: late.
    let late = fetch_whole(answer(200, 200), limit).await.unwrap();
    assert_eq!(late.unwrap_err(), Problem::Late);
    // A body that never ends is late too, once the head came in time.
    let late = fetch_whole(answer(10, 60_000), limit).await.unwrap();
    assert_eq!(late.unwrap_err(), Problem::Late);
    // Both within it: read whole.
    let (_, bytes) = fetch_whole(answer(10, 10), limit).await.unwrap().unwrap();
    assert_eq!(&bytes[..], b"{}");
    // No limit: nothing is timed.
    let (_, bytes) = fetch_whole(answer(0, 0), (1024, None))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&bytes[..], b"{}");
}

/// A future ready once the runtime has run its queue `rounds` times.
async fn ready_after(rounds: usize) -> &'static str {
    for _ in 0..rounds {
        tokio::task::yield_now().await;
    }
    "answer"
}

#[tokio::test]
async fn an_answer_that_comes_while_the_runtime_runs_its_queue_arms_no_timer() {
    // A deadline already past is the probe: an armed timer says "late" at its first poll.
    let past = Some(tokio::time::Instant::now() - Duration::from_millis(1));
    let mut timer = std::pin::pin!(None);
    let answer = before(past, timer.as_mut(), ready_after(1)).await;
    assert_eq!(answer, Some("answer"), "timed although it came in time");
    assert!(timer.is_none(), "a timer was armed");
    // Still pending after the untimed rounds: the timer is armed, at the deadline given.
    let late = before(past, timer.as_mut(), ready_after(UNTIMED_ROUNDS + 1)).await;
    assert_eq!(late, None);
    assert!(timer.is_some());
    // A later step of the same answer is timed by that same timer at once.
    let mut never = std::pin::pin!(std::future::pending::<()>());
    assert_eq!(before(past, timer.as_mut(), never.as_mut()).await, None);
}

#[test]
fn the_security_model_lists_every_problem() {
    let security = include_str!("../../../docs/security.md");
    for problem in Problem::ALL {
        let row = format!("| `{}` |", problem.code());
        assert!(security.contains(&row), "docs/security.md has no row {row}");
    }
}

#[test]
fn the_framing_read_without_the_parser_is_the_parsers() {
    // Written as servers write them (any case): no parser; anything else goes through it.
    for (value, expected) in [
        ("application/json", Ok(Framing::Json)),
        ("APPLICATION/Json", Ok(Framing::Json)),
        ("text/event-stream", Ok(Framing::EventStream)),
        ("Text/Event-Stream", Ok(Framing::EventStream)),
        ("application/json; charset=utf-8", Ok(Framing::Json)),
        ("text/event-stream;charset=utf-8", Ok(Framing::EventStream)),
        ("application/jsonx", Err(Problem::ContentType)),
        ("application/json-seq", Err(Problem::ContentType)),
        ("text/event-streams", Err(Problem::ContentType)),
        ("application", Err(Problem::ContentType)),
        ("", Err(Problem::ContentType)),
    ] {
        let headers = head(200, &[("content-type", value)]).headers;
        assert_eq!(framing(&headers), expected, "{value:?}");
    }
}
