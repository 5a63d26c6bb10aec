//! The wire pages, `docs/wire/*.md`: for each kind of remedy, the exact exchanges stored in the
//! golden fixtures of the `current` SEP-2643 revision (`spec/<id>/fixtures/*.json`), and for
//! the layer's own round trips the legs that follow the first answer
//! (`spec/<id>/exchanges/*.json`: the retry, the polls).
//!
//! The pages are generated from those files, so they cannot drift from what the layer sends
//! (`tests/suite/golden.rs` checks both against the layer byte for byte). Without
//! `MCP_GATE_BLESS`, this test renders every page in memory and fails when a committed page
//! differs, is missing, or is stale. With `MCP_GATE_BLESS=1` it rewrites the pages and removes
//! stale ones:
//!
//! ```sh
//! MCP_GATE_BLESS=1 cargo test --test suite wire_pages::
//! git diff docs/wire     # read the change before keeping it
//! ```
//!
//! Rendering is deterministic: files are read in file-name order, and nothing depends on
//! the clock, the environment or randomness. No sockets, no layer: only files.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use serde_json::Value;

const BLESS_ENV: &str = "MCP_GATE_BLESS";
/// Where the pages live, relative to the crate root.
const OUT_DIR: &str = "docs/wire";
const ENVELOPE_KEY: &str = "io.modelcontextprotocol/authorization";
const REGENERATE: &str = "MCP_GATE_BLESS=1 cargo test --test suite wire_pages::";

/// One page: a kind of remedy, the case-name prefixes it covers, and the cases shown in full.
struct Kind {
    page: &'static str,
    title: &'static str,
    /// The `<remedy>` parts of the case names this page covers.
    remedies: &'static [&'static str],
    /// One line for the index: what the client receives.
    short: &'static str,
    /// Our own words, in Markdown.
    intro: &'static str,
    /// The cases shown with their full exchange, in this order.
    shown: &'static [&'static str],
}

const KINDS: &[Kind] = &[
    Kind {
        page: "scope",
        title: "Scope step-up",
        remedies: &["scope"],
        short: "HTTP 403 `insufficient_scope` challenge naming every scope needed",
        intro: "\
The token is valid, but the operation needs a scope the token does not carry. The policy says so
with `Decision::scopes([...])`. The layer answers the way an OAuth resource server does: HTTP 403
with a `WWW-Authenticate: Bearer error=\"insufficient_scope\"` challenge whose `scope` parameter
lists the scopes the policy named plus every scope the endpoint requires (`mcp:read` here). It
lists all of them because some clients replace their scopes with the challenge's list instead of
adding to it.

The client's next step is a new token with those scopes (a step-up), then the same request
again. The answer has the same shape in every era and for every method: no JSON-RPC body, no
envelope, no context id.",
        shown: &[
            "scope--legacy--tools-call",
            "scope--modern-nocaps--tools-call",
            "scope--modern-allcaps--resources-read",
        ],
    },
    Kind {
        page: "credential",
        title: "Credential remedy (RFC 9396 authorization details)",
        remedies: &[
            "credential-derived",
            "credential-fixed",
            "credential-single-use",
        ],
        short: "HTTP 401 `insufficient_authorization` challenge with `authorization_remediation`, or the same remedy as a hint in the result",
        intro: "\
The operation needs a token that carries specific RFC 9396 `authorization_details`, for example
one payment of a given amount to a given account. The policy returns
`Remediation::credential(details)`, usually after checking the token with
`authorization_details_cover`.

By default (`CredentialDelivery::Challenge`) the layer answers with HTTP 401 (or 403 with
`credential_status(StatusCode::FORBIDDEN)`) and a challenge with
`error=\"insufficient_authorization\"`. Its `authorization_remediation` parameter is base64url
JSON: the `authorization_details` to ask the authorization server for and, unless the remedy is
single use, an `authorization_reference`. The reference is derived from the details unless the
policy fixed one. The pages decode the parameter below each response.

With `credential_delivery(CredentialDelivery::Result)`, a modern request gets the remedy inside
the MCP answer instead (HTTP 200, an envelope hint of type `authorization_remediation`); legacy
requests still get the challenge. With `CredentialDelivery::Both` (only under the `current`
revision) the challenge's body is that MCP answer.",
        shown: &[
            "credential-derived--challenge--legacy--tools-call",
            "credential-derived--challenge--modern-allcaps--tools-call",
            "credential-single-use--challenge--modern-allcaps--tools-call",
            "credential-derived--result--modern-allcaps--tools-call",
            "credential-derived--both--modern-allcaps--resources-read",
        ],
    },
    Kind {
        page: "url",
        title: "URL approval",
        remedies: &["url", "url-http"],
        short: "`InputRequiredResult` with a URL elicitation, or `undisclosed` with the URL in the text",
        intro: "\
The user has to do something on a web page first (approve a share, link an account). The
policy returns `Decision::url(url, message)`. When the request is modern, declared URL
elicitation (`elicitation.url`) and is a `tools/call`, `prompts/get` or `resources/read`, the
layer answers HTTP 200 with an `InputRequiredResult`: one `elicitation/create` request in URL
mode under a `mcp-gate/<key>` input key, an envelope with a `url` hint, and a signed
`requestState`. The client opens the page, then retries with the state and its answer. On the
retry the policy runs again and sees the answer through `Evaluation::answered()`; it must check
its own record of the approval. The first case below continues with its retries: allowed once
the application has recorded the approval, and asked again when the client retries before that.

Every other request (legacy, no URL elicitation, another method) gets `undisclosed`, with the
page named in the text. An approval URL the layer will not send (plain `http` outside
development mode on loopback, userinfo, another scheme) makes the request an internal error,
`-32603`.",
        shown: &[
            "url--modern-url-elicitation--tools-call",
            "url--modern-url-elicitation--resources-read",
            "url--legacy--tools-call",
            "url-http--modern-url-elicitation--tools-call",
        ],
    },
    Kind {
        page: "task",
        title: "Held task (out-of-band approval)",
        remedies: &["task"],
        short: "`CreateTaskResult` (status `working`), or `undisclosed` with the wait in the text",
        intro: "\
Someone else must decide before the call may run: a release manager, a ticket, a second factor.
The policy returns `Decision::task(message)`. For a modern `tools/call` that declared the Tasks
extension (`io.modelcontextprotocol/tasks`), the layer stores the held call, runs the start
hook, and answers HTTP 200 with a `CreateTaskResult`: a `tsk_` task id, status `working`, its
lifetime and poll interval, and an envelope with a `task` hint. The client polls with
`tasks/get`. Once the task is approved (`Gate::tasks().approve`), the next poll runs the call
once and returns its result; a refusal completes the task as `unavailable`.

Every other request (legacy, no Tasks extension, another method) makes no task and gets
`undisclosed`, with the wait described in the text. The first case below continues with the
owner's polls: while the task waits, after an approval, and after a refusal. Cancellation, expiry
and what other principals see are tested in `tests/suite/tasks.rs`.",
        shown: &[
            "task--modern-tasks-extension--tools-call",
            "task--modern-tasks-extension--resources-read",
            "task--legacy--tools-call",
        ],
    },
    Kind {
        page: "ask",
        title: "Confirmation (ask)",
        remedies: &["ask"],
        short: "`InputRequiredResult` with a form asking for `approve: true`, or `undisclosed`",
        intro: "\
The call may run, but only if the user confirms it. The policy returns `Decision::ask(message)`.
When the request is modern, declared form elicitation (`elicitation.form`, or an empty
`elicitation: {}`) and is a `tools/call`, `prompts/get` or `resources/read`, the layer answers
HTTP 200 with an `InputRequiredResult`: one `elicitation/create` request in form mode under the
input key `mcp-gate/confirm`, whose schema has one required boolean, `approve`, and a signed
`requestState`. A confirmation is not a denial, so there is no envelope. The retry carries the
state and the answer; only `accept` with `approve: true` lets the call through to the inner
server. The first case below continues with both retries, confirmed and declined.

Every other request (legacy, even in a session that declared elicitation at `initialize`; no
form elicitation; another method) gets `undisclosed`, with the question in the text.",
        shown: &[
            "ask--modern-form-elicitation--tools-call",
            "ask--modern-form-elicitation--prompts-get",
            "ask--legacy-session-form-elicitation--tools-call",
            "ask--modern-nocaps--tools-call",
        ],
    },
    Kind {
        page: "unavailable",
        title: "Unavailable",
        remedies: &["unavailable"],
        short: "`CallToolResult` with `isError: true`, or JSON-RPC error `-32003`; `remediation: unavailable`",
        intro: "\
Nothing the client can do will make this operation succeed: no scope, credential or approval
helps. The policy returns `Decision::unavailable(message)`. A `tools/call` gets HTTP 200 with a
tool result (`isError: true`, the message as text) whose `_meta` holds the envelope with
`remediation: \"unavailable\"` and a fresh `authorizationContextId`. Any other method gets a
JSON-RPC error, code `-32003` by default (`denial_error_code` changes it), with the envelope in
`error.data`. A client should stop retrying and show the message.",
        shown: &[
            "unavailable--legacy--tools-call",
            "unavailable--modern-allcaps--tools-call",
            "unavailable--modern-allcaps--prompts-get",
            "unavailable--code-4030--modern-allcaps--resources-read",
        ],
    },
    Kind {
        page: "undisclosed",
        title: "Undisclosed",
        remedies: &["undisclosed"],
        short: "`CallToolResult` with `isError: true`, or JSON-RPC error `-32003`; `remediation: undisclosed`",
        intro: "\
The request is refused and the server does not say whether anything would help. The policy
returns `Decision::undisclosed(message)`; the layer also falls back to it when a remedy cannot
be expressed to this client (see the URL, task and confirmation pages). The shape is that of
`unavailable`: a tool result with `isError: true` for `tools/call`, a JSON-RPC error (`-32003` by
default) for other methods, each with the envelope and `remediation: \"undisclosed\"`. With
`conceal_refusals()` the layer instead answers as the inner server answers a name it does not
have (not shown here: that answer is the inner server's).",
        shown: &[
            "undisclosed--legacy--tools-call",
            "undisclosed--modern-allcaps--tools-call",
            "undisclosed--modern-nocaps--resources-read",
            "undisclosed--modern-nocaps--completion-complete",
        ],
    },
];

// ---------------------------------------------------------------------------------------------
// Fixtures
// ---------------------------------------------------------------------------------------------

struct Fixture {
    case: String,
    description: String,
    config: Value,
    decision: Value,
    request_headers: Vec<(String, String)>,
    request_body: Value,
    initialize: Option<Value>,
    status: u16,
    response_headers: Vec<(String, String)>,
    /// Exactly as stored (and as the layer writes it, after normalisation).
    response_body: String,
}

impl Fixture {
    fn remedy(&self) -> &str {
        self.case.split("--").next().unwrap_or_default()
    }

    /// `(gate option, era)` from `<remedy>[--<option>]--<era>--<method>`.
    fn option_and_era(&self) -> (Option<&str>, &str) {
        let parts: Vec<&str> = self.case.split("--").collect();
        match parts.as_slice() {
            [_, era, _] => (None, era),
            [_, option, era, _] => (Some(option), era),
            _ => panic!("{}: a case name has 3 or 4 parts", self.case),
        }
    }

    fn method(&self) -> &str {
        self.request_body["method"].as_str().unwrap_or("?")
    }

    fn response_header(&self, name: &str) -> Option<&str> {
        self.response_headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn fixture_dir() -> PathBuf {
    root()
        .join("spec")
        .join(mcp_gate::Revision::current().id())
        .join("fixtures")
}

fn string_pairs(value: &Value, what: &str) -> Vec<(String, String)> {
    value
        .as_object()
        .unwrap_or_else(|| panic!("{what} must be an object"))
        .iter()
        .map(|(k, v)| {
            let v = v
                .as_str()
                .unwrap_or_else(|| panic!("{what}.{k} must be a string"));
            (k.clone(), v.to_owned())
        })
        .collect()
}

/// The field of `value` at `pointer`; a panic naming `at` (a file, or a leg of one) when it
/// is missing.
fn field_at<'v>(value: &'v Value, at: &str, pointer: &str) -> &'v Value {
    value
        .pointer(pointer)
        .unwrap_or_else(|| panic!("{at}: no {pointer}"))
}

/// The string at `pointer` in `value`; a panic naming `at` when it is missing or not a string.
fn text_at(value: &Value, at: &str, pointer: &str) -> String {
    field_at(value, at, pointer)
        .as_str()
        .unwrap_or_else(|| panic!("{at}: {pointer} must be a string"))
        .to_owned()
}

fn load(path: &Path) -> Fixture {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{name}: {e}"));
    let file: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
    let field = |pointer: &str| field_at(&file, &name, pointer);
    let text_of = |pointer: &str| text_at(&file, &name, pointer);
    let fixture = Fixture {
        case: text_of("/case"),
        description: text_of("/description"),
        config: field("/config").clone(),
        decision: field("/decision").clone(),
        request_headers: string_pairs(field("/request/headers"), "request.headers"),
        request_body: field("/request/body").clone(),
        initialize: file.pointer("/request/initialize").cloned(),
        status: field("/response/status")
            .as_u64()
            .and_then(|s| u16::try_from(s).ok())
            .unwrap_or_else(|| panic!("{name}: response.status must be a status code")),
        response_headers: string_pairs(field("/response/headers"), "response.headers"),
        response_body: text_of("/response/body"),
    };
    let stem = path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or_default();
    assert_eq!(
        fixture.case, stem,
        "{name}: `case` must equal the file name"
    );
    fixture
}

/// Every fixture of the `current` revision, in file-name order.
fn fixtures() -> Vec<Fixture> {
    let dir = fixture_dir();
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    paths.sort();
    assert!(!paths.is_empty(), "{}: no fixtures", dir.display());
    paths.iter().map(|p| load(p)).collect()
}

// ---------------------------------------------------------------------------------------------
// Exchanges: the legs after a fixture's first answer
// ---------------------------------------------------------------------------------------------

/// One leg of an exchange, as stored.
struct Leg {
    title: String,
    description: String,
    /// What happened off the wire before the leg (an approver's decision), in the file's DSL.
    before: Option<Value>,
    /// What the policy returned, and what it was shown; `None` when it was not asked.
    policy: Option<(Value, Value)>,
    request_headers: Vec<(String, String)>,
    request_body: Value,
    /// The body the inner server received, exactly as stored.
    forwarded: Option<String>,
    status: u16,
    response_headers: Vec<(String, String)>,
    response_body: String,
}

/// One stored exchange: a fixture's first leg and the legs that follow it.
struct Exchange {
    name: String,
    case: String,
    description: String,
    legs: Vec<Leg>,
}

impl Exchange {
    /// The part of the name after the case: `confirmed`, `retried-before-approval`, ...
    fn outcome(&self) -> &str {
        self.name
            .strip_prefix(&self.case)
            .and_then(|rest| rest.strip_prefix("--"))
            .unwrap_or(&self.name)
    }
}

fn revision_dir(revision: &str) -> PathBuf {
    root().join("spec").join(revision)
}

fn json_files(dir: &Path) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(entries) => entries
            .map(|entry| entry.expect("a directory entry").path())
            .filter(|p| p.extension().is_some_and(|e| e == "json"))
            .collect(),
        Err(_) => Vec::new(),
    };
    paths.sort();
    paths
}

fn load_leg(leg: &Value, at: &str) -> Leg {
    let field = |pointer: &str| field_at(leg, at, pointer);
    let text_of = |pointer: &str| text_at(leg, at, pointer);
    let policy = match field("/policy") {
        Value::Null => None,
        _ => Some((
            field("/policy/decision").clone(),
            field("/policy/evaluation").clone(),
        )),
    };
    let forwarded = match field("/forwarded") {
        Value::Null => None,
        _ => Some(text_of("/forwarded/body")),
    };
    Leg {
        title: text_of("/title"),
        description: text_of("/description"),
        before: leg.get("before").cloned(),
        policy,
        request_headers: string_pairs(field("/request/headers"), "request.headers"),
        request_body: field("/request/body").clone(),
        forwarded,
        status: field("/response/status")
            .as_u64()
            .and_then(|s| u16::try_from(s).ok())
            .unwrap_or_else(|| panic!("{at}: response.status must be a status code")),
        response_headers: string_pairs(field("/response/headers"), "response.headers"),
        response_body: text_of("/response/body"),
    }
}

fn load_exchange(path: &Path) -> Exchange {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{name}: {e}"));
    let file: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
    let text_of = |member: &str| -> String {
        file.get(member)
            .and_then(Value::as_str)
            .unwrap_or_else(|| panic!("{name}: {member} must be a string"))
            .to_owned()
    };
    let legs = file
        .get("legs")
        .and_then(Value::as_array)
        .unwrap_or_else(|| panic!("{name}: legs must be an array"))
        .iter()
        .enumerate()
        .map(|(n, leg)| load_leg(leg, &format!("{name}, leg {}", n + 1)))
        .collect();
    Exchange {
        name: text_of("exchange"),
        case: text_of("case"),
        description: text_of("description"),
        legs,
    }
}

/// Every exchange of `revision`, in file-name order.
fn exchanges(revision: &str) -> Vec<Exchange> {
    json_files(&revision_dir(revision).join("exchanges"))
        .iter()
        .map(|p| load_exchange(p))
        .collect()
}

/// The other pinned revisions, each with its fixtures and the names of its exchanges, to say
/// on the pages where an exchange exists and where it does not.
struct OtherRevision {
    id: &'static str,
    fixtures: Vec<Fixture>,
    exchanges: BTreeSet<String>,
}

fn other_revisions() -> Vec<OtherRevision> {
    let current = mcp_gate::Revision::current().id();
    mcp_gate::Revision::supported()
        .filter(|id| *id != current)
        .map(|id| OtherRevision {
            id,
            fixtures: json_files(&revision_dir(id).join("fixtures"))
                .iter()
                .map(|p| load(p))
                .collect(),
            exchanges: exchanges(id).into_iter().map(|e| e.name).collect(),
        })
        .collect()
}

/// `c74b0c9…`, as the pages name a revision.
fn short(revision: &str) -> String {
    format!("`{}…`", &revision[..7])
}

// ---------------------------------------------------------------------------------------------
// Formatting helpers
// ---------------------------------------------------------------------------------------------

/// Re-indents compact JSON without reordering anything: removing the whitespace it adds outside
/// strings gives back the input byte for byte (checked by `reindent_only_adds_whitespace`).
fn reindent(compact: &str) -> String {
    let mut out = String::with_capacity(compact.len() * 2);
    let mut depth = 0usize;
    let mut strings = JsonStrings::default();
    let chars: Vec<char> = compact.chars().collect();
    let newline = |out: &mut String, depth: usize| {
        out.push('\n');
        for _ in 0..depth {
            out.push_str("  ");
        }
    };
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if strings.inside(c) {
            out.push(c);
        } else {
            match c {
                '{' | '[' => {
                    let close = if c == '{' { '}' } else { ']' };
                    out.push(c);
                    if chars.get(i + 1) == Some(&close) {
                        out.push(close);
                        i += 1;
                    } else {
                        depth += 1;
                        newline(&mut out, depth);
                    }
                }
                '}' | ']' => {
                    depth = depth.saturating_sub(1);
                    newline(&mut out, depth);
                    out.push(c);
                }
                ',' => {
                    out.push(c);
                    newline(&mut out, depth);
                }
                ':' => out.push_str(": "),
                _ => out.push(c),
            }
        }
        i += 1;
    }
    out
}

/// Removes whitespace outside JSON strings.
fn strip_insignificant_whitespace(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    let mut strings = JsonStrings::default();
    for c in json.chars() {
        if strings.inside(c) || !c.is_whitespace() {
            out.push(c);
        }
    }
    out
}

/// Follows a JSON text character by character: which characters stand in a string.
#[derive(Default)]
struct JsonStrings {
    in_string: bool,
    escaped: bool,
}

impl JsonStrings {
    /// Takes the next character; true when it belongs to a string, its quotes included.
    fn inside(&mut self, c: char) -> bool {
        if self.in_string {
            if self.escaped {
                self.escaped = false;
            } else if c == '\\' {
                self.escaped = true;
            } else if c == '"' {
                self.in_string = false;
            }
            true
        } else if c == '"' {
            self.in_string = true;
            true
        } else {
            false
        }
    }
}

/// The parameters of a `Bearer` challenge, in order (quoted values unescaped).
fn challenge_params(header: &str) -> Vec<(String, String)> {
    let rest = header.strip_prefix("Bearer").unwrap_or(header);
    let chars: Vec<char> = rest.chars().collect();
    let mut params = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        while i < chars.len() && (chars[i] == ' ' || chars[i] == ',') {
            i += 1;
        }
        let start = i;
        while i < chars.len() && chars[i] != '=' {
            i += 1;
        }
        let name: String = chars[start..i].iter().collect();
        i += 1; // '='
        let mut value = String::new();
        if chars.get(i) == Some(&'"') {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    i += 1;
                }
                if let Some(&c) = chars.get(i) {
                    value.push(c);
                }
                i += 1;
            }
            i += 1; // closing quote
        } else {
            while i < chars.len() && chars[i] != ',' {
                value.push(chars[i]);
                i += 1;
            }
        }
        if !name.trim().is_empty() {
            params.push((name.trim().to_owned(), value));
        }
    }
    params
}

fn envelope(body: &Value) -> Option<&Value> {
    body.pointer("/result/_meta")
        .or_else(|| body.pointer("/error/data"))
        .and_then(|holder| holder.get(ENVELOPE_KEY))
}

/// One line saying what the response is, derived from the stored response only.
fn summary(fixture: &Fixture) -> String {
    let body: Value = serde_json::from_str(&fixture.response_body)
        .unwrap_or_else(|e| panic!("{}: response.body: {e}", fixture.case));
    let remediation = envelope(&body)
        .and_then(|e| e.get("remediation"))
        .and_then(Value::as_str)
        .map(|r| format!(", `remediation: {r}`"))
        .unwrap_or_default();
    let mcp_answer = || -> String {
        if let Some(result) = body.get("result") {
            match result.get("resultType").and_then(Value::as_str) {
                Some("input_required") => {
                    let mode = result
                        .get("inputRequests")
                        .and_then(Value::as_object)
                        .and_then(|requests| requests.values().next())
                        .and_then(|r| r.pointer("/params/mode"))
                        .and_then(Value::as_str)
                        .unwrap_or("?");
                    format!("`InputRequiredResult` ({mode} elicitation){remediation}")
                }
                Some("task") => format!("`CreateTaskResult`{remediation}"),
                _ if result.get("isError") == Some(&Value::Bool(true)) => {
                    format!("tool result, `isError: true`{remediation}")
                }
                _ => format!("result{remediation}"),
            }
        } else if let Some(code) = body.pointer("/error/code") {
            format!("JSON-RPC error `{code}`{remediation}")
        } else {
            "OAuth error body".to_owned()
        }
    };
    match fixture.response_header("www-authenticate") {
        Some(challenge) => {
            let error = challenge_params(challenge)
                .into_iter()
                .find(|(n, _)| n == "error")
                .map(|(_, v)| v)
                .unwrap_or_else(|| "none".to_owned());
            if body.get("jsonrpc").is_some() {
                format!("challenge `{error}`; body: {}", mcp_answer())
            } else {
                format!("challenge `{error}`")
            }
        }
        None => mcp_answer(),
    }
}

fn reason_phrase(status: u16) -> &'static str {
    http::StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("")
}

fn inline_or_block(out: &mut String, label: &str, value: &Value) {
    let compact = serde_json::to_string(value).expect("JSON serialises");
    if compact.len() <= 90 {
        writeln!(out, "{label} `{compact}`").unwrap();
        out.push('\n');
    } else {
        writeln!(out, "{label}\n\n```json\n{}\n```\n", reindent(&compact)).unwrap();
    }
}

// ---------------------------------------------------------------------------------------------
// Pages
// ---------------------------------------------------------------------------------------------

fn generated_notice() -> String {
    format!(
        "<!-- Generated by tests/suite/wire_pages.rs from spec/{0}/fixtures/ and \
         spec/{0}/exchanges/. Do not edit by hand: run `{REGENERATE}`. -->\n",
        mcp_gate::Revision::current().id()
    )
}

fn render_exchange(out: &mut String, fixture: &Fixture) {
    let case = &fixture.case;
    writeln!(out, "### `{case}`\n").unwrap();
    writeln!(out, "{}\n", fixture.description).unwrap();
    inline_or_block(
        out,
        "Policy decision ([DSL](../../spec/README.md#decision-dsl)):",
        &fixture.decision,
    );
    if fixture.config.as_object().is_some_and(|c| c.is_empty()) {
        out.push_str("Gate options: the defaults.\n\n");
    } else {
        inline_or_block(
            out,
            "Gate options ([`config`](../../spec/README.md#config)):",
            &fixture.config,
        );
    }
    if let Some(initialize) = &fixture.initialize {
        out.push_str(
            "Earlier in the session, the same token sent `initialize` with these params (the \
             inner server answered with `Mcp-Session-Id: golden-session`):\n\n",
        );
        let compact = serde_json::to_string(initialize).expect("JSON serialises");
        writeln!(out, "```json\n{}\n```\n", reindent(&compact)).unwrap();
    }

    render_request(
        out,
        "Request:",
        &fixture.request_headers,
        &fixture.request_body,
    );
    render_response(
        out,
        case,
        fixture.status,
        &fixture.response_headers,
        &fixture.response_body,
    );
}

fn render_request(out: &mut String, label: &str, headers: &[(String, String)], body: &Value) {
    writeln!(out, "{label}\n\n```http\nPOST /mcp HTTP/1.1").unwrap();
    for (name, value) in headers {
        writeln!(out, "{name}: {value}").unwrap();
    }
    let body = serde_json::to_string(body).expect("JSON serialises");
    writeln!(out, "\n{}\n```\n", reindent(&body)).unwrap();
}

/// The status, the pinned headers and the stored body; a challenge's
/// `authorization_remediation` decoded below it.
fn render_response(
    out: &mut String,
    case: &str,
    status: u16,
    headers: &[(String, String)],
    body: &str,
) {
    writeln!(
        out,
        "Response:\n\n```http\nHTTP/1.1 {status} {}",
        reason_phrase(status)
    )
    .unwrap();
    for (name, value) in headers {
        writeln!(out, "{name}: {value}").unwrap();
    }
    let pretty = reindent(body);
    assert_eq!(
        strip_insignificant_whitespace(&pretty),
        body,
        "{case}: re-indenting the response body changed it"
    );
    writeln!(out, "\n{pretty}\n```\n").unwrap();

    if let Some(encoded) = headers
        .iter()
        .find(|(n, _)| n == "www-authenticate")
        .map(|(_, v)| challenge_params(v))
        .and_then(|params| {
            params
                .into_iter()
                .find(|(n, _)| n == "authorization_remediation")
                .map(|(_, v)| v)
        })
    {
        let decoded = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(encoded.as_bytes())
            .unwrap_or_else(|e| panic!("{case}: authorization_remediation is not base64url: {e}"));
        let decoded = String::from_utf8(decoded)
            .unwrap_or_else(|e| panic!("{case}: authorization_remediation is not UTF-8: {e}"));
        writeln!(
            out,
            "The challenge's `authorization_remediation`, base64url-decoded:\n\n```json\n{}\n```\n",
            reindent(&decoded)
        )
        .unwrap();
    }
}

/// Where the first leg's exchanges are stored, and why a revision has none.
fn render_revisions_note(
    out: &mut String,
    fixture: &Fixture,
    exchanges: &[&Exchange],
    others: &[OtherRevision],
) {
    let current = mcp_gate::Revision::current().id();
    let mut with = vec![format!("{} (`current`)", short(current))];
    let mut without = Vec::new();
    for other in others {
        if exchanges.iter().all(|e| other.exchanges.contains(&e.name)) {
            with.push(short(other.id));
        } else if let Some(theirs) = other.fixtures.iter().find(|f| f.case == fixture.case) {
            assert!(
                exchanges.iter().all(|e| !other.exchanges.contains(&e.name)),
                "{}: {} has some of this case's exchanges but not all",
                fixture.case,
                other.id
            );
            let error_based = matches!(
                mcp_gate::Revision::select(other.id).map(|r| r.family()),
                Ok(mcp_gate::denial::Family::ErrorBased)
            );
            without.push(format!(
                "Under {}{}, there is no second leg: it answers this request with a {}, which \
                 ends the exchange (the fixture [`{}`](../../spec/{}/fixtures/{}.json)).",
                short(other.id),
                if error_based {
                    ", the error-based revision"
                } else {
                    ""
                },
                summary(theirs),
                theirs.case,
                other.id,
                theirs.case
            ));
        }
    }
    let count = match exchanges.len() {
        1 => "One continuation of this first leg is".to_owned(),
        2 => "Two continuations of this first leg are".to_owned(),
        3 => "Three continuations of this first leg are".to_owned(),
        n => format!("{n} continuations of this first leg are"),
    };
    let mut note = format!(
        "{count} stored as exchanges (`spec/<revision>/exchanges/`, \
         [format](../../spec/README.md#exchange-format)) under {}; shown here for the \
         `current` one.",
        join_and(&with)
    );
    for sentence in without {
        note.push(' ');
        note.push_str(&sentence);
    }
    writeln!(out, "{note}\n").unwrap();
}

fn join_and(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
    }
}

/// The legs after the first of one exchange.
fn render_continuation(out: &mut String, exchange: &Exchange) {
    writeln!(
        out,
        "#### Then: {} (`{}`)\n",
        exchange.outcome().replace('-', " "),
        exchange.name
    )
    .unwrap();
    writeln!(out, "{}\n", exchange.description).unwrap();
    for (n, leg) in exchange.legs.iter().enumerate().skip(1) {
        let at = format!("{}, leg {}", exchange.name, n + 1);
        writeln!(out, "##### {}. {}\n", n + 1, leg.title).unwrap();
        writeln!(out, "{}\n", leg.description).unwrap();
        if let Some(before) = &leg.before {
            inline_or_block(
                out,
                "Before it, off the wire ([`before`](../../spec/README.md#exchange-format)):",
                before,
            );
        }
        match &leg.policy {
            None => out.push_str("The policy is not asked.\n\n"),
            Some((decision, evaluation)) => {
                let phase = evaluation
                    .get("phase")
                    .and_then(Value::as_str)
                    .unwrap_or_else(|| panic!("{at}: the evaluation has no phase"));
                write!(out, "The policy is asked in the `{phase}` phase.").unwrap();
                for (member, accessor) in [
                    ("answered", "Evaluation::answered()"),
                    ("approval", "Evaluation::approval()"),
                ] {
                    if let Some(shown) = evaluation.get(member) {
                        let compact = serde_json::to_string(shown).expect("JSON serialises");
                        write!(out, " `{accessor}` shows `{compact}`.").unwrap();
                    }
                }
                let decision = serde_json::to_string(decision).expect("JSON serialises");
                writeln!(
                    out,
                    " It returns `{decision}` ([DSL](../../spec/README.md#decision-dsl)).\n"
                )
                .unwrap();
            }
        }
        let request = format!(
            "{} {}",
            serde_json::to_string(&leg.request_body).expect("JSON serialises"),
            leg.request_headers
                .iter()
                .map(|(_, v)| v.as_str())
                .collect::<Vec<_>>()
                .join(" ")
        );
        let stands_for: Vec<&str> = [
            (
                "mcpgate1.<state>",
                "`mcpgate1.<state>` is the `requestState` of the previous answer, sent back unchanged",
            ),
            (
                "tsk_<random>",
                "`tsk_<random>` is the task id of the `CreateTaskResult`",
            ),
        ]
        .into_iter()
        .filter(|(placeholder, _)| request.contains(placeholder))
        .map(|(_, meaning)| meaning)
        .collect();
        let label = if stands_for.is_empty() {
            "Request:".to_owned()
        } else {
            format!("Request ({}):", stands_for.join("; "))
        };
        render_request(out, &label, &leg.request_headers, &leg.request_body);
        match &leg.forwarded {
            None => out.push_str("The inner server is not reached.\n\n"),
            Some(body) => {
                let pretty = reindent(body);
                assert_eq!(
                    strip_insignificant_whitespace(&pretty),
                    *body,
                    "{at}: re-indenting the forwarded body changed it"
                );
                writeln!(
                    out,
                    "The inner server receives, as the layer forwards it:\n\n```json\n{pretty}\n```\n"
                )
                .unwrap();
            }
        }
        render_response(
            out,
            &at,
            leg.status,
            &leg.response_headers,
            &leg.response_body,
        );
    }
}

fn render_page(
    kind: &Kind,
    cases: &[&Fixture],
    exchanges: &[Exchange],
    others: &[OtherRevision],
) -> String {
    let mut out = generated_notice();
    writeln!(out, "\n# {}\n", kind.title).unwrap();
    writeln!(out, "{}\n", kind.intro).unwrap();
    writeln!(
        out,
        "Below: every stored case of this kind under the `current` revision, then the full \
         exchange of a few of them. How to read them (placeholders, fixed settings): \
         [the index](README.md).\n"
    )
    .unwrap();
    out.push_str("## Every case\n\n");
    out.push_str("| case | era | method | gate option | status | answer |\n");
    out.push_str("|---|---|---|---|---|---|\n");
    for fixture in cases {
        let (option, era) = fixture.option_and_era();
        let name = if kind.shown.contains(&fixture.case.as_str()) {
            format!("[`{0}`](#{0})", fixture.case)
        } else {
            format!("`{}`", fixture.case)
        };
        writeln!(
            out,
            "| {name} | `{era}` | `{}` | {} | {} | {} |",
            fixture.method(),
            option.map(|o| format!("`{o}`")).unwrap_or_default(),
            fixture.status,
            summary(fixture)
        )
        .unwrap();
    }
    out.push_str("\n## Exchanges\n\n");
    for wanted in kind.shown {
        let fixture = cases.iter().find(|f| f.case == *wanted).unwrap_or_else(|| {
            panic!(
                "docs/wire/{}.md shows {wanted}, which is not a fixture of this kind: update \
                     KINDS in tests/suite/wire_pages.rs",
                kind.page
            )
        });
        render_exchange(&mut out, fixture);
        let continued: Vec<&Exchange> = exchanges.iter().filter(|e| e.case == *wanted).collect();
        if !continued.is_empty() {
            render_revisions_note(&mut out, fixture, &continued, others);
            for exchange in continued {
                render_continuation(&mut out, exchange);
            }
        }
    }
    while out.ends_with("\n\n") {
        out.pop();
    }
    out
}

fn render_index(counts: &[(&Kind, usize, usize)]) -> String {
    let revision = mcp_gate::Revision::current().id();
    let mut out = generated_notice();
    out.push_str("\n# On the wire: one page per kind of remedy\n\n");
    writeln!(
        out,
        "These pages show exactly what a client sends and what `mcp-gate` answers when the \
         policy refuses a request or asks for something first. Each page covers one kind of \
         remedy. They are generated from the golden fixtures of the `current` SEP-2643 revision \
         ([`spec/{revision}/fixtures/`](../../spec/{revision}/fixtures/)) and, for the \
         layer's own round trips, from the exchanges that continue them \
         ([`spec/{revision}/exchanges/`](../../spec/{revision}/exchanges/)): the retry or the \
         poll the client sends next and what it gets. `tests/suite/golden.rs` replays both through \
         the layer and compares them byte for byte with what it writes; \
         `tests/suite/wire_pages.rs` fails when a page no longer matches them, so the pages cannot \
         drift from the code.\n"
    )
    .unwrap();
    out.push_str("| page | policy returns | the client receives | cases | exchanges |\n");
    out.push_str("|---|---|---|---|---|\n");
    for (kind, count, continued) in counts {
        let remedies = kind
            .remedies
            .iter()
            .map(|r| format!("`{r}`"))
            .collect::<Vec<_>>()
            .join(", ");
        writeln!(
            out,
            "| [{}]({}.md) | {remedies} | {} | {count} | {continued} |",
            kind.title, kind.page, kind.short
        )
        .unwrap();
    }
    out.push_str(
        "\nThe \"policy returns\" column gives the remedy part of the case names \
         (`<remedy>[--<gate option>]--<era>--<method>`, see \
         [Case names](../../spec/README.md#case-names)). \"Exchanges\" counts the stored \
         continuations of the page's cases: what follows the first answer.\n\n",
    );
    out.push_str(
        "## How to read an exchange\n\n\
         - **Fixed settings.** Every case runs against one gate: resource \
         `https://mcp.example.com/mcp`, one trusted issuer, the endpoint-wide scope `mcp:read`, \
         and a token carrying exactly `mcp:read` for `sub` `user-1` and `client_id` `client-1`. \
         The gate options a case changes are listed with it.\n\
         - **Request.** The headers are the ones stored in the fixture. The client also sends \
         `Host` and `Content-Length`, which are not shown. The body is sent as compact JSON; it \
         is shown indented.\n\
         - **Response.** The status and the headers the fixtures pin (`content-type`, \
         `www-authenticate`, `cache-control`; one that is not listed is absent). The body is the \
         stored body, indented: only whitespace outside strings was added, and the key order is \
         the layer's.\n\
         - **Placeholders.** Some values change on every request. In the fixtures and on these \
         pages they are replaced: `Bearer <token>` (a freshly minted valid token), \
         `actx_<random>` (the `authorizationContextId`, `actx_` and 22 base64url characters), \
         `tsk_<random>` (a task id), `mcpgate1.<state>` (the layer's signed `requestState`) \
         and `<timestamp>` (`YYYY-MM-DDTHH:MM:SSZ`).\n\
         - **Eras.** `legacy` requests carry no protocol version in `_meta` (MCP 2025-11-25); \
         `modern` ones carry `io.modelcontextprotocol/protocolVersion: 2026-07-28` and their \
         client capabilities in `_meta`, and their `Mcp-Method` / `Mcp-Name` headers repeat the \
         body.\n\
         - **Later legs.** Where the first answer starts a round trip of the layer's (a URL \
         approval, a confirmation, a held task), the case continues with the legs that follow \
         it, each stored with its request and the exact answer: whether the policy is asked, \
         what `Evaluation` shows it and what it returns; what the inner server receives, if the \
         call reaches it; and what happens off the wire in between (an approver's decision). \
         In those requests `mcpgate1.<state>` stands for the `requestState` of the previous \
         answer, which the client sends back unchanged, and `tsk_<random>` for the task id of \
         the `CreateTaskResult`. The inner server is a stand-in that answers every `tools/call` \
         with a tool result naming the tool.\n\n",
    );
    writeln!(
        out,
        "Allowed requests have no page: the layer passes them to the inner server byte for \
         byte and returns its answer untouched (an allowed retry of the layer's own round trip \
         is forwarded without the layer's `requestState` and input keys, as its later leg \
         shows). Refusals that happen before the policy runs \
         (token, carrier, JSON-RPC errors) are listed in [Troubleshooting](../troubleshooting.md).\n\n\
         To regenerate after the fixtures changed (`MCP_GATE_BLESS=1 cargo test --test suite golden::`), \
         run `{REGENERATE}` and review `git diff docs/wire`."
    )
    .unwrap();
    out
}

/// Every page, by file name, rendered from the fixtures.
fn render_all() -> BTreeMap<String, String> {
    let fixtures = fixtures();
    let mut by_kind: BTreeMap<&str, Vec<&Fixture>> = BTreeMap::new();
    for fixture in &fixtures {
        let kind = KINDS
            .iter()
            .find(|k| k.remedies.contains(&fixture.remedy()))
            .unwrap_or_else(|| {
                panic!(
                    "fixture {} has the remedy `{}`, which no wire page covers: add it to KINDS \
                     in tests/suite/wire_pages.rs",
                    fixture.case,
                    fixture.remedy()
                )
            });
        by_kind.entry(kind.page).or_default().push(fixture);
    }
    let current = mcp_gate::Revision::current().id();
    let exchanges = exchanges(current);
    let others = other_revisions();
    for exchange in &exchanges {
        assert!(
            KINDS
                .iter()
                .any(|k| k.shown.contains(&exchange.case.as_str())),
            "the exchange {} continues {}, which no wire page shows in full: add it to KINDS in \
             tests/suite/wire_pages.rs",
            exchange.name,
            exchange.case
        );
    }
    let mut pages = BTreeMap::new();
    let mut counts = Vec::new();
    for kind in KINDS {
        let cases = by_kind.get(kind.page).cloned().unwrap_or_default();
        assert!(
            !cases.is_empty(),
            "no fixture for the wire page {}: the fixtures changed, update KINDS in \
             tests/suite/wire_pages.rs",
            kind.page
        );
        pages.insert(
            format!("{}.md", kind.page),
            render_page(kind, &cases, &exchanges, &others),
        );
        let continued = exchanges
            .iter()
            .filter(|e| kind.shown.contains(&e.case.as_str()))
            .count();
        counts.push((kind, cases.len(), continued));
    }
    pages.insert("README.md".to_owned(), render_index(&counts));
    for text in pages.values_mut() {
        if !text.ends_with('\n') {
            text.push('\n');
        }
    }
    pages
}

fn blessing() -> bool {
    std::env::var_os(BLESS_ENV).is_some_and(|v| !v.is_empty() && v != "0")
}

/// The first line where two texts differ, for the failure message.
fn first_difference(expected: &str, actual: &str) -> String {
    let mut expected_lines = expected.lines();
    let mut actual_lines = actual.lines();
    let mut line = 1;
    loop {
        match (expected_lines.next(), actual_lines.next()) {
            (None, None) => return "only in line endings or a trailing newline".to_owned(),
            (e, a) if e == a => line += 1,
            (e, a) => {
                return format!(
                    "line {line}:\n      generated: {}\n      committed: {}",
                    e.unwrap_or("<end of file>"),
                    a.unwrap_or("<end of file>")
                );
            }
        }
    }
}

#[test]
fn wire_pages_match_the_fixtures() {
    let pages = render_all();
    let dir = root().join(OUT_DIR);
    let committed: BTreeSet<String> = match std::fs::read_dir(&dir) {
        Ok(entries) => entries
            .map(|entry| entry.expect("a directory entry").path())
            .filter(|p| p.extension().is_some_and(|e| e == "md"))
            .filter_map(|p| p.file_name().and_then(|n| n.to_str()).map(str::to_owned))
            .collect(),
        Err(_) => BTreeSet::new(),
    };

    if blessing() {
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        for (name, text) in &pages {
            let path = dir.join(name);
            if std::fs::read_to_string(&path).ok().as_deref() != Some(text.as_str()) {
                std::fs::write(&path, text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                eprintln!("wrote {OUT_DIR}/{name}");
            }
        }
        for stale in committed.iter().filter(|name| !pages.contains_key(*name)) {
            let path = dir.join(stale);
            std::fs::remove_file(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            eprintln!("removed stale {OUT_DIR}/{stale}");
        }
        return;
    }

    let mut problems = Vec::new();
    for (name, text) in &pages {
        match std::fs::read_to_string(dir.join(name)) {
            Err(_) => problems.push(format!("{OUT_DIR}/{name} is missing")),
            Ok(on_disk) if on_disk != *text => problems.push(format!(
                "{OUT_DIR}/{name} differs from what the fixtures give, first at {}",
                first_difference(text, &on_disk)
            )),
            Ok(_) => {}
        }
    }
    for stale in committed.iter().filter(|name| !pages.contains_key(*name)) {
        problems.push(format!(
            "{OUT_DIR}/{stale} is stale: no wire page of that name is generated"
        ));
    }
    assert!(
        problems.is_empty(),
        "the wire pages are out of date:\n  - {}\n\nRegenerate them with `{REGENERATE}`, then \
         review `git diff {OUT_DIR}` (a change there is a change on the wire).",
        problems.join("\n  - ")
    );
}

#[test]
fn rendering_is_deterministic() {
    assert_eq!(render_all(), render_all());
}

#[test]
fn reindent_only_adds_whitespace() {
    let cases = [
        r#"{"a":1,"b":[],"c":{},"d":[1,{"e":"x,y:{z}"}],"f":"q\"u{o}te\\"}"#,
        r#"[]"#,
        r#"{"error":{"code":-32603,"message":"internal error"},"id":null,"jsonrpc":"2.0"}"#,
    ];
    for compact in cases {
        let pretty = reindent(compact);
        assert_eq!(strip_insignificant_whitespace(&pretty), compact);
        let reparsed: Value = serde_json::from_str(&pretty).expect("still JSON");
        assert_eq!(reparsed, serde_json::from_str::<Value>(compact).unwrap());
    }
    assert_eq!(reindent(r#"{"a":[]}"#), "{\n  \"a\": []\n}");
}

#[test]
fn challenge_parameters_are_read_with_escapes() {
    let params = challenge_params(
        r#"Bearer error="insufficient_scope", error_description="a \"quoted\", comma", scope="a b""#,
    );
    assert_eq!(
        params,
        vec![
            ("error".to_owned(), "insufficient_scope".to_owned()),
            (
                "error_description".to_owned(),
                "a \"quoted\", comma".to_owned()
            ),
            ("scope".to_owned(), "a b".to_owned()),
        ]
    );
}
