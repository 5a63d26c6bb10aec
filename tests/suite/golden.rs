//! Golden wire fixtures: every denial the layer writes, per pinned SEP-2643 revision.
//!
//! `spec/<revision-id>/fixtures/*.json` each hold one case: the gate options that differ from
//! the defaults, the decision the policy returns (a small DSL, see `spec/README.md`), the HTTP
//! request, and the exact response. [`every_fixture_matches_the_layer_byte_for_byte`] replays
//! every file found on disk through the real layer (an axum router behind `Gate::layer`, driven
//! with `tower::ServiceExt::oneshot`) and compares status, the listed headers and the body byte
//! for byte, after replacing the values that are random or time-dependent on every render:
//! continuation states, `actx_` context ids, `tsk_` task ids and RFC 3339 timestamps.
//!
//! `spec/<revision-id>/exchanges/*.json` continue the fixtures whose answer starts a round trip
//! of the layer's (URL approval, confirmation, held task) with the legs that follow: the retry
//! with the layer's `requestState`, the `tasks/get` polls, an approver's decision in between.
//! [`every_exchange_matches_the_layer_byte_for_byte`] replays every leg through one gate and
//! compares what the policy was shown, what reached the inner handler and the response.
//!
//! The files are generated from [`cases`] and [`exchange_cases`] by running the tests with
//! `MCP_GATE_BLESS=1`, then reviewed by hand. Without that variable the files are only read,
//! never written.

use crate::common::normalize;
use crate::common::tokens;

use std::collections::{BTreeMap, BTreeSet};
use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex, OnceLock};

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use http::{HeaderMap, HeaderName, HeaderValue, Request, StatusCode};
use mcp_gate::audit::JsonLines;
use mcp_gate::denial::{CURRENT, derive_reference};
use mcp_gate::mcp::SERVER_INFO_META;
use mcp_gate::policy::{CredentialReference, Decision, Evaluation, Remediation};
use mcp_gate::{ConfigError, CredentialDelivery, Gate, GateBuilder, Issuer, Revision, StaticKeys};
use normalize::*;
use serde_json::{Map, Value, json};
use tokens::{TestKey, claims};

// ---------------------------------------------------------------------------------------------
// Fixed harness settings (documented in spec/README.md)
// ---------------------------------------------------------------------------------------------

const ISSUER: &str = "https://as.example";
const RESOURCE: &str = "https://mcp.example.com/mcp";
/// Endpoint-wide scope every gate requires and every test token carries.
const ENDPOINT_SCOPE: &str = "mcp:read";
const MODERN_VERSION: &str = "2026-07-28";
const LEGACY_VERSION: &str = "2025-11-25";
/// The session id the inner handler hands out on `initialize`.
const SESSION_ID: &str = "golden-session";
/// Stands for a valid token in the fixtures' `authorization` header.
const TOKEN_PLACEHOLDER: &str = "<token>";
const BLESS_ENV: &str = "MCP_GATE_BLESS";
/// The identity the golden gate names on the modern results it writes.
const SERVER_NAME: &str = "files";
const SERVER_VERSION: &str = "1.4.0";
/// Response headers a fixture pins (present with this value, or absent).
const PINNED_HEADERS: [&str; 3] = ["content-type", "www-authenticate", "cache-control"];

const REV_CURRENT: &str = "c74b0c9321e89a904780d1024d895232fbb03820";
const REV_6BFF: &str = "6bff817cb884f7065fd5b3d37c4973d1f8b3fa87";
const REV_1C5B: &str = "1c5b0cec97691cb9db3d880474a71d604d6addee";
const REVISIONS: [&str; 3] = [REV_CURRENT, REV_6BFF, REV_1C5B];

static KEY: LazyLock<TestKey> = LazyLock::new(|| TestKey::es256("golden"));
static TOKEN: LazyLock<String> =
    LazyLock::new(|| KEY.mint(&claims(ISSUER, RESOURCE, ENDPOINT_SCOPE)));

fn spec_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("spec")
}

fn fixtures_dir(revision: &str) -> PathBuf {
    spec_dir().join(revision).join("fixtures")
}

// ---------------------------------------------------------------------------------------------
// The decision DSL and the config object
// ---------------------------------------------------------------------------------------------

fn only_keys(object: &Map<String, Value>, allowed: &[&str], what: &str) -> Result<(), String> {
    match object.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(key) => Err(format!(
            "{what}: unknown member {key:?} (allowed: {allowed:?})"
        )),
        None => Ok(()),
    }
}

fn string(value: &Value, what: &str) -> Result<String, String> {
    value
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| format!("{what} must be a string"))
}

/// Turns the fixture's `decision` into the [`Decision`] the policy returns.
fn parse_decision(dsl: &Value) -> Result<Decision, String> {
    let object = dsl
        .as_object()
        .filter(|o| o.len() == 1)
        .ok_or("decision must be an object with exactly one member")?;
    let (kind, body) = object.iter().next().expect("one member");
    match kind.as_str() {
        // Only in the later legs of an exchange: a fixture's request is always refused.
        "allow" if body.as_object().is_some_and(Map::is_empty) => Ok(Decision::allow()),
        "allow" => Err("allow takes no options: {\"allow\": {}}".into()),
        "ask" => Ok(Decision::ask(string(body, "ask")?)),
        "deny" => {
            let deny = body
                .as_object()
                .filter(|o| o.len() == 1)
                .ok_or("deny must be an object with exactly one member")?;
            let (remedy, value) = deny.iter().next().expect("one member");
            Ok(match remedy.as_str() {
                "scope" => {
                    let scopes = value
                        .as_array()
                        .ok_or("deny.scope must be an array of strings")?;
                    Decision::scopes(
                        scopes
                            .iter()
                            .map(|s| string(s, "deny.scope[]"))
                            .collect::<Result<Vec<_>, _>>()?,
                    )
                }
                "credential" => {
                    let credential = value
                        .as_object()
                        .ok_or("deny.credential must be an object")?;
                    only_keys(
                        credential,
                        &["authorization_details", "reference", "message"],
                        "deny.credential",
                    )?;
                    let details = credential
                        .get("authorization_details")
                        .and_then(Value::as_array)
                        .ok_or("deny.credential.authorization_details must be an array")?
                        .clone();
                    let reference = match credential.get("reference") {
                        None => CredentialReference::Derived,
                        Some(Value::String(s)) if s == "derived" => CredentialReference::Derived,
                        Some(Value::String(s)) if s == "single_use" => {
                            CredentialReference::SingleUse
                        }
                        Some(Value::Object(o))
                            if o.len() == 1 && o.get("fixed").is_some_and(Value::is_string) =>
                        {
                            CredentialReference::Fixed(string(&o["fixed"], "reference.fixed")?)
                        }
                        Some(other) => {
                            return Err(format!("deny.credential.reference: unknown form {other}"));
                        }
                    };
                    let mut remediation =
                        Remediation::credential(details).with_reference(reference);
                    if let Some(message) = credential.get("message") {
                        remediation =
                            remediation.message(string(message, "deny.credential.message")?);
                    }
                    Decision::from(remediation)
                }
                "unavailable" => Decision::unavailable(string(value, "deny.unavailable")?),
                "undisclosed" => Decision::undisclosed(string(value, "deny.undisclosed")?),
                "url" => {
                    let url = value.as_object().ok_or("deny.url must be an object")?;
                    only_keys(url, &["url", "message", "input_key"], "deny.url")?;
                    let remedy = Remediation::url(
                        string(url.get("url").unwrap_or(&Value::Null), "deny.url.url")?,
                        string(
                            url.get("message").unwrap_or(&Value::Null),
                            "deny.url.message",
                        )?,
                    );
                    match url.get("input_key") {
                        Some(key) => remedy.input_key(string(key, "deny.url.input_key")?).into(),
                        None => remedy.into(),
                    }
                }
                "task" => Decision::task(string(value, "deny.task")?),
                other => return Err(format!("deny: unknown remediation {other:?}")),
            })
        }
        other => Err(format!("decision: unknown kind {other:?}")),
    }
}

/// The gate options a fixture sets.
#[derive(Clone, Debug, Default, PartialEq)]
struct Config {
    credential_delivery: Option<CredentialDelivery>,
    credential_status: Option<StatusCode>,
    denial_error_code: Option<i64>,
    /// `GateBuilder::development_mode()`: plain-http approval URLs allowed on loopback.
    development_mode: bool,
    /// `GateBuilder::reusable_state()`: states may be presented more than once (tests only:
    /// the round-trip tests replay one state against many answers).
    reusable_state: bool,
}

fn parse_config(value: &Value) -> Result<Config, String> {
    let object = value.as_object().ok_or("config must be an object")?;
    only_keys(
        object,
        &[
            "credential_delivery",
            "credential_status",
            "denial_error_code",
            "development_mode",
        ],
        "config",
    )?;
    let mut config = Config::default();
    if let Some(delivery) = object.get("credential_delivery") {
        config.credential_delivery = Some(match delivery.as_str() {
            Some("challenge") => CredentialDelivery::Challenge,
            Some("result") => CredentialDelivery::Result,
            Some("both") => CredentialDelivery::Both,
            _ => {
                return Err(format!(
                    "config.credential_delivery: {delivery} is not challenge, result or both"
                ));
            }
        });
    }
    if let Some(status) = object.get("credential_status") {
        let status = status
            .as_u64()
            .and_then(|s| u16::try_from(s).ok())
            .ok_or("config.credential_status must be a number")?;
        config.credential_status = Some(StatusCode::from_u16(status).map_err(|e| e.to_string())?);
    }
    if let Some(code) = object.get("denial_error_code") {
        config.denial_error_code = Some(
            code.as_i64()
                .ok_or("config.denial_error_code must be an integer")?,
        );
    }
    if let Some(development) = object.get("development_mode") {
        config.development_mode = development
            .as_bool()
            .ok_or("config.development_mode must be true or false")?;
    }
    Ok(config)
}

fn apply(mut builder: GateBuilder, config: &Config) -> GateBuilder {
    if let Some(delivery) = config.credential_delivery {
        builder = builder.credential_delivery(delivery);
    }
    if let Some(status) = config.credential_status {
        builder = builder.credential_status(status);
    }
    if let Some(code) = config.denial_error_code {
        builder = builder.denial_error_code(code);
    }
    if config.development_mode {
        builder = builder.development_mode();
    }
    if config.reusable_state {
        builder = builder.reusable_state();
    }
    builder
}

// ---------------------------------------------------------------------------------------------
// Fixture files
// ---------------------------------------------------------------------------------------------

/// One parsed fixture file.
#[derive(Clone, Debug)]
struct Fixture {
    file: PathBuf,
    revision: String,
    case: String,
    config: Config,
    decision_dsl: Value,
    request: RequestSpec,
    response: Expected,
}

#[derive(Clone, Debug)]
struct RequestSpec {
    headers: BTreeMap<String, String>,
    body: Value,
    /// Params of an `initialize` sent first (legacy sessions); the inner handler answers it
    /// with `Mcp-Session-Id: golden-session`.
    initialize: Option<Value>,
}

#[derive(Clone, Debug, PartialEq)]
struct Expected {
    status: u16,
    headers: BTreeMap<String, String>,
    body: String,
}

fn string_map(value: &Value, what: &str) -> Result<BTreeMap<String, String>, String> {
    value
        .as_object()
        .ok_or(format!("{what} must be an object"))?
        .iter()
        .map(|(k, v)| Ok((k.clone(), string(v, &format!("{what}.{k}"))?)))
        .collect()
}

fn parse_request(value: &Value) -> Result<RequestSpec, String> {
    let object = value.as_object().ok_or("request must be an object")?;
    only_keys(object, &["headers", "body", "initialize"], "request")?;
    let headers = string_map(
        object.get("headers").ok_or("request.headers is missing")?,
        "request.headers",
    )?;
    if let Some(name) = headers.keys().find(|k| k.to_ascii_lowercase() != **k) {
        return Err(format!(
            "request.headers: header names are lowercase ({name:?})"
        ));
    }
    let body = object
        .get("body")
        .filter(|b| b.is_object())
        .ok_or("request.body must be a JSON-RPC object")?
        .clone();
    let initialize = object.get("initialize").cloned();
    if initialize.as_ref().is_some_and(|i| !i.is_object()) {
        return Err("request.initialize must be an object (the initialize params)".into());
    }
    Ok(RequestSpec {
        headers,
        body,
        initialize,
    })
}

fn parse_response(value: &Value) -> Result<Expected, String> {
    let object = value.as_object().ok_or("response must be an object")?;
    only_keys(
        object,
        &["status", "headers", "body", "body_json"],
        "response",
    )?;
    let status = object
        .get("status")
        .and_then(Value::as_u64)
        .and_then(|s| u16::try_from(s).ok())
        .ok_or("response.status must be a number")?;
    let headers = string_map(
        object.get("headers").ok_or("response.headers is missing")?,
        "response.headers",
    )?;
    if let Some(name) = headers
        .keys()
        .find(|k| !PINNED_HEADERS.contains(&k.as_str()))
    {
        return Err(format!(
            "response.headers: {name:?} is not one of the pinned headers {PINNED_HEADERS:?}"
        ));
    }
    let body = string(object.get("body").unwrap_or(&Value::Null), "response.body")?;
    let parsed: Value =
        serde_json::from_str(&body).map_err(|e| format!("response.body is not JSON: {e}"))?;
    if object.get("body_json") != Some(&parsed) {
        return Err("response.body_json is not response.body parsed".into());
    }
    Ok(Expected {
        status,
        headers,
        body,
    })
}

fn parse_fixture(file: &Path, revision: &str) -> Result<Fixture, String> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("unreadable: {e}"))?;
    let value: Value = serde_json::from_str(&text).map_err(|e| format!("not JSON: {e}"))?;
    let object = value.as_object().ok_or("a fixture is a JSON object")?;
    only_keys(
        object,
        &[
            "case",
            "description",
            "config",
            "decision",
            "request",
            "response",
        ],
        "fixture",
    )?;
    let case = string(object.get("case").unwrap_or(&Value::Null), "case")?;
    let stem = file
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or_default();
    if case != stem {
        return Err(format!(
            "case {case:?} does not match the file name {stem:?}"
        ));
    }
    let description = string(
        object.get("description").unwrap_or(&Value::Null),
        "description",
    )?;
    if description.trim().is_empty() {
        return Err("description is empty".into());
    }
    let config = parse_config(object.get("config").ok_or("config is missing")?)?;
    let decision_dsl = object.get("decision").ok_or("decision is missing")?.clone();
    parse_decision(&decision_dsl)?;
    let request = parse_request(object.get("request").ok_or("request is missing")?)?;
    let response = parse_response(object.get("response").ok_or("response is missing")?)?;
    Ok(Fixture {
        file: file.to_owned(),
        revision: revision.to_owned(),
        case,
        config,
        decision_dsl,
        request,
        response,
    })
}

/// With `MCP_GATE_BLESS` set, runs `bless` to rewrite the files before they are read. Blessing
/// drives the async layer, so it runs on a runtime of its own, outside the calling test's.
fn bless_if_asked<F: std::future::Future<Output = ()> + 'static>(bless: fn() -> F) {
    if !std::env::var_os(BLESS_ENV).is_some_and(|v| !v.is_empty() && v != "0") {
        return;
    }
    std::thread::spawn(move || {
        let runtime = crate::common::fixtures::runtime();
        runtime.block_on(bless());
    })
    .join()
    .expect("blessing failed");
}

/// Every fixture on disk, blessed first when `MCP_GATE_BLESS` is set. Panics (failing the
/// calling test) if a revision has no fixture directory, an empty one, or a file that does not
/// parse.
fn fixtures() -> &'static [Fixture] {
    static FIXTURES: OnceLock<Vec<Fixture>> = OnceLock::new();
    FIXTURES.get_or_init(|| {
        bless_if_asked(bless);
        load_fixtures().unwrap_or_else(|problems| panic!("fixtures:\n{}", problems.join("\n")))
    })
}

fn load_fixtures() -> Result<Vec<Fixture>, Vec<String>> {
    let mut problems = Vec::new();
    let mut fixtures = Vec::new();
    let mut revision_dirs = BTreeSet::new();
    for entry in std::fs::read_dir(spec_dir()).map_err(|e| vec![format!("spec/: {e}")])? {
        let path = entry.map_err(|e| vec![e.to_string()])?.path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_owned();
        if path.is_dir() && name.len() == 40 && name.bytes().all(|b| b.is_ascii_hexdigit()) {
            revision_dirs.insert(name);
        }
    }
    let supported: BTreeSet<String> = Revision::supported().map(str::to_owned).collect();
    if revision_dirs != supported {
        problems.push(format!("spec/ revision folders {revision_dirs:?} differ from the supported revisions {supported:?}"));
    }
    for revision in &revision_dirs {
        let dir = fixtures_dir(revision);
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) => {
                problems.push(format!("{}: {e}", dir.display()));
                continue;
            }
        };
        let mut files: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
        files.sort();
        let mut count = 0;
        for file in files {
            if file.extension().and_then(|e| e.to_str()) != Some("json") {
                problems.push(format!("{}: not a .json fixture", file.display()));
                continue;
            }
            count += 1;
            match parse_fixture(&file, revision) {
                Ok(fixture) => fixtures.push(fixture),
                Err(problem) => problems.push(format!("{}: {problem}", file.display())),
            }
        }
        if count == 0 {
            problems.push(format!("{}: no fixtures", dir.display()));
        }
    }
    if problems.is_empty() {
        Ok(fixtures)
    } else {
        Err(problems)
    }
}

// ---------------------------------------------------------------------------------------------
// The harness: one gate in front of a router whose handler counts its calls
// ---------------------------------------------------------------------------------------------

/// What reached the inner handler, one entry per request: the `Content-Length` header it saw,
/// and the body.
type Seen = Arc<Mutex<Vec<(Option<String>, String)>>>;

struct Harness {
    app: Router,
    /// The gate in front of the router (exchanges decide its tasks through it).
    gate: Gate,
    /// Requests that reached the inner `/mcp` handler.
    hits: Arc<AtomicUsize>,
    /// What reached the inner handler: the `Content-Length` header it saw, and the body.
    seen: Seen,
    /// Calls of the policy.
    evaluations: Arc<AtomicUsize>,
    /// The gate's audit trail, through the crate's own JSON-lines writer.
    audit: AuditTrail,
}

/// A JSON-lines audit writer into memory, and the lines it wrote.
struct AuditTrail {
    writer: JsonLines,
    written: Arc<Mutex<Vec<u8>>>,
}

/// A `Write` into a shared buffer.
struct SharedBuffer(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for SharedBuffer {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The committed audit record schema, compiled once (formats checked too).
static AUDIT_SCHEMA: LazyLock<jsonschema::Validator> = LazyLock::new(|| {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("schemas/audit-record.v1.json");
    let text = std::fs::read_to_string(&path).expect("the committed schema");
    let schema: Value = serde_json::from_str(&text).expect("the schema is JSON");
    jsonschema::options()
        .should_validate_formats(true)
        .build(&schema)
        .expect("a valid JSON Schema")
});

impl AuditTrail {
    fn new() -> Self {
        let written = Arc::new(Mutex::new(Vec::new()));
        let writer = JsonLines::new(SharedBuffer(written.clone())).expect("a writer thread");
        Self { writer, written }
    }

    /// Every record written so far, each checked against the committed schema: the problems
    /// found, and the number of decision records.
    fn check(&self) -> (Vec<String>, usize) {
        self.writer.flush().expect("the audit writer flushes");
        let text = String::from_utf8(self.written.lock().unwrap().clone()).expect("UTF-8");
        let mut problems = Vec::new();
        let mut decisions = 0;
        for line in text.lines() {
            let record: Value = match serde_json::from_str(line) {
                Ok(record) => record,
                Err(error) => {
                    problems.push(format!("an audit line is not JSON ({error}): {line}"));
                    continue;
                }
            };
            for error in AUDIT_SCHEMA.iter_errors(&record) {
                problems.push(format!(
                    "audit record {line}: {error} at {}",
                    error.instance_path()
                ));
            }
            if record["type"] == "dev.mcp-gate.decision.v1" {
                decisions += 1;
            }
        }
        if !text.is_empty() && !text.ends_with('\n') {
            problems.push("the audit trail does not end with a line end".into());
        }
        (problems, decisions)
    }
}

/// The inner handler's state: how often it ran and what it received.
#[derive(Clone)]
struct InnerState {
    hits: Arc<AtomicUsize>,
    seen: Seen,
    /// Answer `tools/call` with a tool result (exchanges), instead of `{"reached": "inner"}`.
    tool_results: bool,
}

/// The inner MCP handler. It must never see a denied request; it answers `initialize` with a
/// session id so that legacy sessions can be set up.
async fn inner(State(state): State<InnerState>, headers: HeaderMap, body: String) -> Response {
    state.hits.fetch_add(1, Ordering::SeqCst);
    let length = headers
        .get(http::header::CONTENT_LENGTH)
        .map(|v| v.to_str().unwrap_or("<not ASCII>").to_owned());
    state.seen.lock().unwrap().push((length, body.clone()));
    let request: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    let answer = if state.tool_results && request["method"] == "tools/call" {
        tool_result(&request)
    } else {
        json!({"reached": "inner"})
    };
    let result = json!({"jsonrpc": "2.0", "id": request["id"], "result": answer});
    if request["method"] == "initialize" {
        ([("mcp-session-id", SESSION_ID)], axum::Json(result)).into_response()
    } else {
        axum::Json(result).into_response()
    }
}

/// The inner server's stand-in answer to a `tools/call` in an exchange: a modern
/// `CallToolResult` naming the tool it ran, and the server in `_meta`.
fn tool_result(request: &Value) -> Value {
    let tool = request.pointer("/params/name").and_then(Value::as_str);
    json!({
        "resultType": "complete",
        "content": [{"type": "text", "text": format!("The inner server ran {}.", tool.unwrap_or("?"))}],
        "isError": false,
        "_meta": {SERVER_INFO_META: {"name": SERVER_NAME, "version": SERVER_VERSION}},
    })
}

fn gate_builder(revision: &str, config: &Config) -> GateBuilder {
    let keys = StaticKeys::from_jwks_json(&KEY.jwks_json()).expect("an EC key set");
    apply(
        Gate::builder()
            .resource(RESOURCE)
            .issuer(Issuer::with_keys(ISSUER, keys))
            .required_scopes([ENDPOINT_SCOPE])
            .revision(revision)
            // Configured, so that the inner handler never sees a `server/discover` of the
            // layer's own (it counts its hits); every modern result the layer writes names it.
            .server_info(SERVER_NAME, SERVER_VERSION),
        config,
    )
}

impl Harness {
    fn new(revision: &str, config: &Config, decision: Decision) -> Result<Self, ConfigError> {
        Self::with_policy(revision, config, move |_: &Evaluation| decision.clone())
    }

    /// A harness whose policy is `decide`, called once per guarded request.
    fn with_policy(
        revision: &str,
        config: &Config,
        decide: impl Fn(&Evaluation) -> Decision + Send + Sync + 'static,
    ) -> Result<Self, ConfigError> {
        Self::assemble(revision, config, decide, false)
    }

    /// The gate with the policy `decide` in front of the counting inner handler, which
    /// answers `tools/call` with a tool result if `tool_results` is set.
    fn assemble(
        revision: &str,
        config: &Config,
        decide: impl Fn(&Evaluation) -> Decision + Send + Sync + 'static,
        tool_results: bool,
    ) -> Result<Self, ConfigError> {
        let evaluations = Arc::new(AtomicUsize::new(0));
        let counter = evaluations.clone();
        let policy = move |evaluation: Evaluation| {
            counter.fetch_add(1, Ordering::SeqCst);
            let decision = decide(&evaluation);
            async move { Ok::<_, Infallible>(decision) }
        };
        let audit = AuditTrail::new();
        let gate = gate_builder(revision, config)
            .evaluate(policy)
            .audit(audit.writer.clone())
            .build()?;
        assert_eq!(
            gate.revision().id(),
            revision,
            "the gate runs the selected revision"
        );
        let state = InnerState {
            hits: Arc::new(AtomicUsize::new(0)),
            seen: Arc::new(Mutex::new(Vec::new())),
            tool_results,
        };
        let app = Router::new()
            .route("/mcp", post(inner))
            .with_state(state.clone())
            .layer(gate.layer());
        Ok(Self {
            app,
            gate,
            hits: state.hits,
            seen: state.seen,
            evaluations,
            audit,
        })
    }

    /// The audit trail's problems: records that do not validate against the committed schema,
    /// and a count of decision records other than the policy's calls.
    fn audit_problems(&self) -> Vec<String> {
        let (mut problems, decisions) = self.audit.check();
        let evaluations = self.evaluations.load(Ordering::SeqCst);
        if decisions != evaluations {
            problems.push(format!(
                "{decisions} decision records for {evaluations} calls of the policy"
            ));
        }
        problems
    }

    fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }

    fn evaluations(&self) -> usize {
        self.evaluations.load(Ordering::SeqCst)
    }

    async fn send(&self, headers: &BTreeMap<String, String>, body: &Value) -> Captured {
        let mut request = Request::post("/mcp");
        for (name, value) in headers {
            let value = value.replace(TOKEN_PLACEHOLDER, &TOKEN);
            request = request.header(
                HeaderName::from_bytes(name.as_bytes()).expect("header name"),
                HeaderValue::from_str(&value).expect("header value"),
            );
        }
        // Like any HTTP client, the harness says how long the body is.
        let body = serde_json::to_string(body).expect("body");
        let request = request
            .header(http::header::CONTENT_LENGTH, body.len())
            .body(Body::from(body))
            .expect("request");
        let response = crate::common::fixtures::through(&self.app, request).await;
        let status = response.status().as_u16();
        let mut headers = BTreeMap::new();
        for name in PINNED_HEADERS {
            let mut values = response.headers().get_all(name).iter();
            if let Some(value) = values.next() {
                assert!(values.next().is_none(), "{name} sent twice");
                headers.insert(
                    name.to_owned(),
                    value.to_str().expect("visible ASCII header").to_owned(),
                );
            }
        }
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .expect("body");
        Captured {
            status,
            headers,
            body: String::from_utf8(bytes.to_vec()).expect("UTF-8 body"),
        }
    }

    /// Sets up the legacy session if asked, sends the request, and checks that the policy ran
    /// once and the inner handler was not reached.
    async fn deny(&self, request: &RequestSpec) -> Captured {
        if let Some(params) = &request.initialize {
            let mut headers = request.headers.clone();
            headers.retain(|name, _| name != "mcp-session-id" && !name.starts_with("mcp-"));
            let initialize =
                json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params});
            let reply = self.send(&headers, &initialize).await;
            assert_eq!(
                reply.status, 200,
                "initialize was not forwarded: {}",
                reply.body
            );
            assert_eq!(self.hits(), 1, "initialize reaches the inner handler");
        }
        let before = self.hits();
        let evaluated = self.evaluations.load(Ordering::SeqCst);
        let reply = self.send(&request.headers, &request.body).await;
        assert_eq!(
            self.hits(),
            before,
            "a denied request reached the inner handler: {}",
            reply.body
        );
        assert_eq!(
            self.evaluations.load(Ordering::SeqCst),
            evaluated + 1,
            "the policy ran once"
        );
        reply
    }
}

/// What the layer answered, before normalisation.
#[derive(Clone, Debug)]
struct Captured {
    status: u16,
    headers: BTreeMap<String, String>,
    body: String,
}

impl Captured {
    /// Continuation states, context ids, task ids and timestamps replaced by their
    /// placeholders.
    fn normalized(&self) -> Expected {
        Expected {
            status: self.status,
            headers: self
                .headers
                .iter()
                .map(|(k, v)| (k.clone(), normalize(v)))
                .collect(),
            body: normalize(&self.body),
        }
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }
}

/// The continuation state of an `InputRequiredResult`, if the body is one.
fn request_state(body: &Value) -> Option<&str> {
    body.pointer("/result/requestState").and_then(Value::as_str)
}

/// The error-based revision's body beside a challenge (1c5b0ce line 173 and Examples 1 and
/// 2): the JSON-RPC error with the configured code, whose envelope holds `reason` and the
/// context id and nothing else, since the challenge describes the remedy.
fn challenge_envelope(at: &str, body: &Value, id: &Value, config: &Config) {
    assert_eq!(body["jsonrpc"], "2.0", "{at}");
    assert_eq!(&body["id"], id, "{at}");
    assert!(body.get("result").is_none(), "{at}");
    assert_eq!(
        body.pointer("/error/code").and_then(Value::as_i64),
        Some(config.denial_error_code.unwrap_or(-32003)),
        "{at}"
    );
    assert!(
        body.pointer("/error/message").is_some_and(Value::is_string),
        "{at}"
    );
    assert_eq!(
        body.pointer("/error/data"),
        Some(&json!({"authorization": {
            "reason": "insufficient_authorization",
            "authorizationContextId": CONTEXT_ID_PLACEHOLDER,
        }})),
        "{at}"
    );
}

/// The envelope in a body, wherever the revision puts it.
fn envelope(body: &Value) -> Option<&Value> {
    body.pointer("/result/_meta/io.modelcontextprotocol~1authorization")
        .or_else(|| body.pointer("/error/data/io.modelcontextprotocol~1authorization"))
        .or_else(|| body.pointer("/error/data/authorization"))
}

// ---------------------------------------------------------------------------------------------
// The case table the fixtures are generated from
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Debug)]
enum EraSpec {
    /// No `_meta` version, no session: legacy without known capabilities.
    Legacy,
    /// Legacy, with a session whose `initialize` declared these capabilities.
    LegacySession(&'static str, Value),
    /// `_meta` version and these `clientCapabilities`.
    Modern(&'static str, Value),
}

impl EraSpec {
    fn label(&self) -> String {
        match self {
            EraSpec::Legacy => "legacy".into(),
            EraSpec::LegacySession(label, _) => format!("legacy-session-{label}"),
            EraSpec::Modern(label, _) => format!("modern-{label}"),
        }
    }

    fn prose(&self) -> String {
        match self {
            EraSpec::Legacy => {
                "is legacy (no protocol version in `_meta`, no known session)".into()
            }
            EraSpec::LegacySession(_, caps) => {
                format!("is legacy, in a session whose `initialize` declared capabilities {caps}")
            }
            EraSpec::Modern(_, caps) => {
                format!("is modern (2026-07-28) and declares clientCapabilities {caps}")
            }
        }
    }
}

fn legacy() -> EraSpec {
    EraSpec::Legacy
}
fn modern_nocaps() -> EraSpec {
    EraSpec::Modern("nocaps", json!({}))
}
fn modern_allcaps() -> EraSpec {
    EraSpec::Modern(
        "allcaps",
        json!({"elicitation": {"form": {}, "url": {}}, "extensions": {"io.modelcontextprotocol/tasks": {}}}),
    )
}
fn modern_url() -> EraSpec {
    EraSpec::Modern("url-elicitation", json!({"elicitation": {"url": {}}}))
}
fn modern_form() -> EraSpec {
    EraSpec::Modern("form-elicitation", json!({"elicitation": {"form": {}}}))
}
fn modern_form_empty() -> EraSpec {
    EraSpec::Modern("form-elicitation-only", json!({"elicitation": {}}))
}
fn modern_tasks() -> EraSpec {
    EraSpec::Modern(
        "tasks-extension",
        json!({"extensions": {"io.modelcontextprotocol/tasks": {}}}),
    )
}

/// An MCP operation: method, the name `Mcp-Name` mirrors, and params (without `_meta`).
#[derive(Clone, Debug)]
struct Op {
    label: &'static str,
    method: &'static str,
    name: &'static str,
    params: Value,
}

fn tool(name: &'static str, arguments: Value) -> Op {
    Op {
        label: "tools-call",
        method: "tools/call",
        name,
        params: json!({"name": name, "arguments": arguments}),
    }
}
fn pay() -> Op {
    tool(
        "payments.transfer",
        json!({"amount": "40.00", "currency": "EUR", "iban": "DE00TEST"}),
    )
}
fn admin_report() -> Op {
    tool("admin.report", json!({"period": "2026-Q3"}))
}
fn delete_workspace() -> Op {
    tool("workspace.delete", json!({"workspace": "ws_1"}))
}
fn list_folder() -> Op {
    tool("files.list_folder", json!({"folderId": "fld_77"}))
}
fn read_resource() -> Op {
    Op {
        label: "resources-read",
        method: "resources/read",
        name: "file:///finance/ledger.csv",
        params: json!({"uri": "file:///finance/ledger.csv"}),
    }
}
fn get_prompt() -> Op {
    Op {
        label: "prompts-get",
        method: "prompts/get",
        name: "incident_summary",
        params: json!({"name": "incident_summary", "arguments": {"incident": "inc_42"}}),
    }
}
fn complete() -> Op {
    Op {
        label: "completion-complete",
        method: "completion/complete",
        name: "incident_summary",
        params: json!({"ref": {"type": "ref/prompt", "name": "incident_summary"}, "argument": {"name": "incident", "value": "inc_"}}),
    }
}

fn payment_details() -> Value {
    json!([{
        "type": "payment_initiation",
        "actions": ["initiate"],
        "instructedAmount": {"currency": "EUR", "amount": "40.00"},
        "creditorAccount": {"iban": "DE00TEST"}
    }])
}

/// The fixture's `request`: headers (with the token placeholder) and the JSON-RPC body.
fn request_for(era: &EraSpec, op: &Op, id: Value) -> Value {
    let mut params = op.params.as_object().expect("params").clone();
    let mut headers = json!({
        "accept": "application/json, text/event-stream",
        "authorization": format!("Bearer {TOKEN_PLACEHOLDER}"),
        "content-type": "application/json",
    });
    let mut request = Map::new();
    match era {
        EraSpec::Legacy => {
            headers["mcp-protocol-version"] = LEGACY_VERSION.into();
        }
        EraSpec::LegacySession(_, caps) => {
            headers["mcp-protocol-version"] = LEGACY_VERSION.into();
            headers["mcp-session-id"] = SESSION_ID.into();
            request.insert(
                "initialize".into(),
                json!({"protocolVersion": LEGACY_VERSION, "capabilities": caps, "clientInfo": {"name": "golden-client", "version": "1.0.0"}}),
            );
        }
        EraSpec::Modern(_, caps) => {
            params.insert(
                "_meta".into(),
                json!({"io.modelcontextprotocol/protocolVersion": MODERN_VERSION, "io.modelcontextprotocol/clientCapabilities": caps}),
            );
            headers["mcp-protocol-version"] = MODERN_VERSION.into();
            headers["mcp-method"] = op.method.into();
            headers["mcp-name"] = op.name.into();
        }
    }
    request.insert("headers".into(), headers);
    request.insert(
        "body".into(),
        json!({"jsonrpc": "2.0", "id": id, "method": op.method, "params": params}),
    );
    Value::Object(request)
}

/// What the table expects a case to render, before the revision is known.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Expect {
    /// The decision's ordinary denial: a challenge, or a result or error with the envelope.
    Plain,
    /// The layer's own round trip: an `InputRequiredResult` where the request, the method and
    /// the revision allow it (see [`Case::shape`]).
    Elicits,
    /// The policy's remediation is unusable: an internal error, nothing sent.
    InternalError,
    /// A `task` remedy the layer holds as a durable task: a `CreateTaskResult` where the
    /// revision allows it (see [`Case::shape`]).
    Task,
}

/// What one case renders under one revision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shape {
    /// `WWW-Authenticate` challenge (scope, or credential delivered by challenge).
    Challenge,
    /// HTTP 200: a `CallToolResult` or a JSON-RPC error carrying the envelope.
    Denial,
    /// HTTP 200: `InputRequiredResult` with a URL elicitation and the envelope (hint `url`).
    UrlInput,
    /// HTTP 200: `InputRequiredResult` with the form confirmation, no envelope.
    Confirmation,
    /// HTTP 200: JSON-RPC error `-32603`, no envelope.
    InternalError,
    /// HTTP 200: `CreateTaskResult` (`resultType: "task"`, `status: "working"`) with the
    /// envelope (hint `task`), after the layer stored the held call.
    Task,
    /// HTTP 200: the 2025-11-25 `URLElicitationRequiredError` (`-32042`) with the envelope
    /// (hint `url`) and the elicitation in `data.elicitations`: the error-based revision's
    /// URL remedy for a legacy session that declared URL elicitation.
    UrlElicitationError,
}

impl Shape {
    /// Whether this shape is byte-identical under every revision that renders it.
    fn same_in_every_revision(self) -> bool {
        matches!(self, Shape::Confirmation | Shape::InternalError)
    }
}

/// One case of the table.
#[derive(Clone, Debug)]
struct Case {
    name: String,
    description: String,
    config: Value,
    decision: Value,
    request: Value,
    expect: Expect,
    /// Revisions the case applies to.
    revisions: Vec<&'static str>,
}

impl Case {
    fn modern(&self) -> bool {
        self.request
            .pointer("/body/params/_meta/io.modelcontextprotocol~1protocolVersion")
            .is_some()
    }

    /// What this case renders under `revision`, as the revision pages document it.
    /// Whether the case runs in a legacy session whose `initialize` declared URL elicitation.
    fn legacy_session_declares_url(&self) -> bool {
        self.request
            .pointer("/initialize/capabilities/elicitation/url")
            .is_some_and(Value::is_object)
    }

    fn shape(&self, revision: &str) -> Shape {
        let deny = self.decision.get("deny");
        let url = deny.and_then(|d| d.get("url")).is_some();
        match self.expect {
            // 1c5b0ce line 115: a URL remedy composes with `URLElicitationRequiredError`.
            Expect::Plain if url && revision == REV_1C5B && self.legacy_session_declares_url() => {
                Shape::UrlElicitationError
            }
            Expect::InternalError => Shape::InternalError,
            Expect::Elicits if self.decision.get("ask").is_some() => Shape::Confirmation,
            // The error-based revision predates multi-round-trip requests: URL falls back.
            Expect::Elicits if revision == REV_1C5B => Shape::Denial,
            Expect::Elicits => Shape::UrlInput,
            // The error-based revision has no result to put a task in: it stays undisclosed.
            Expect::Task if revision == REV_1C5B => Shape::Denial,
            Expect::Task => Shape::Task,
            Expect::Plain => {
                let scope = deny.and_then(|d| d.get("scope")).is_some();
                let credential = deny.and_then(|d| d.get("credential")).is_some();
                let result_delivery =
                    self.config.get("credential_delivery") == Some(&json!("result"));
                if scope || (credential && (!result_delivery || !self.modern())) {
                    Shape::Challenge
                } else {
                    Shape::Denial
                }
            }
        }
    }
}

struct CaseBuilder {
    remedy: &'static str,
    what: String,
    decision: Value,
    config: Value,
    config_label: Option<String>,
    era: EraSpec,
    op: Op,
    id: Value,
    expect: Expect,
    note: Option<&'static str>,
    revisions: Vec<&'static str>,
}

fn case(
    remedy: &'static str,
    what: impl Into<String>,
    decision: Value,
    era: EraSpec,
    op: Op,
    id: impl Into<Value>,
) -> CaseBuilder {
    CaseBuilder {
        remedy,
        what: what.into(),
        decision,
        config: json!({}),
        config_label: None,
        era,
        op,
        id: id.into(),
        expect: Expect::Plain,
        note: None,
        revisions: REVISIONS.to_vec(),
    }
}

/// One kind of decision the table asks for: the remedy's name, what it is, and the decision.
struct Kind {
    remedy: &'static str,
    what: &'static str,
    decision: Value,
}

impl Kind {
    fn new(remedy: &'static str, what: &'static str, decision: &Value) -> Self {
        let decision = decision.clone();
        Self {
            remedy,
            what,
            decision,
        }
    }

    /// The case of this decision for `op` in `era`, with request id `id`.
    fn at(&self, era: EraSpec, op: Op, id: impl Into<Value>) -> CaseBuilder {
        case(self.remedy, self.what, self.decision.clone(), era, op, id)
    }
}

impl CaseBuilder {
    fn config(mut self, label: impl Into<String>, config: Value) -> Self {
        self.config_label = Some(label.into());
        self.config = config;
        self
    }

    /// A modern request on `tools/call`, `prompts/get` or `resources/read` that declared the
    /// elicitation mode the layer's own round trip needs (URL for `url`, form for `ask`).
    fn elicits(mut self) -> Self {
        self.expect = Expect::Elicits;
        self
    }

    /// A modern `tools/call` that declared the Tasks extension, denied with a `task` remedy:
    /// the layer holds the call as a task where the revision allows it.
    fn holds(mut self) -> Self {
        self.expect = Expect::Task;
        self
    }

    /// A remark appended to the description.
    fn note(mut self, note: &'static str) -> Self {
        self.note = Some(note);
        self
    }

    /// A remediation the layer refuses to send (an approval URL that is not acceptable).
    fn internal_error(mut self) -> Self {
        self.expect = Expect::InternalError;
        self
    }

    fn only(mut self, revisions: &[&'static str]) -> Self {
        self.revisions = revisions.to_vec();
        self
    }

    fn build(self) -> Case {
        let mut name = self.remedy.to_owned();
        if let Some(label) = &self.config_label {
            name.push_str("--");
            name.push_str(label);
        }
        name.push_str("--");
        name.push_str(&self.era.label());
        name.push_str("--");
        name.push_str(self.op.label);
        let mut description = format!(
            "{}, answering a `{}` request that {}",
            self.what,
            self.op.method,
            self.era.prose()
        );
        if self.config.as_object().is_some_and(|c| !c.is_empty()) {
            description.push_str(&format!(", with gate options {}", self.config));
        }
        if let Some(note) = self.note {
            description.push_str("; ");
            description.push_str(note);
        }
        match self.expect {
            Expect::Plain => {}
            Expect::Elicits if self.decision.get("ask").is_some() => description.push_str(
                "; every revision answers with an InputRequiredResult asking for a form confirmation under `mcp-gate/confirm` (a required boolean `approve`), with the layer's signed `requestState` and no envelope",
            ),
            Expect::Elicits => description.push_str(
                "; the result-based revisions answer with an InputRequiredResult asking for URL elicitation under `mcp-gate/<input key>`, with the layer's signed `requestState` and the envelope (`remediation: available`, hint `url`); the error-based 1c5b0ce, which predates multi-round-trip requests, answers undisclosed with the URL in the text",
            ),
            Expect::InternalError => description.push_str(
                "; the approval URL is plain http and development mode is off, so the layer sends no remedy: the request fails with an internal error (-32603) in every revision",
            ),
            Expect::Task => description.push_str(
                "; the result-based revisions store the held call as a task and answer with a CreateTaskResult (`resultType: task`, `status: working`, the task id, its timestamps, lifetime and poll interval) carrying the envelope (`remediation: available`, hint `task`); the error-based 1c5b0ce, which has no result to carry a task, answers undisclosed with the remedy in the text",
            ),
        }
        description.push('.');
        Case {
            name,
            description,
            request: request_for(&self.era, &self.op, self.id),
            config: self.config,
            decision: self.decision,
            expect: self.expect,
            revisions: self.revisions,
        }
    }
}

/// Why a request that declared the elicitation mode still gets the plain denial.
const NOT_A_ROUND_TRIP_METHOD: &str = "an InputRequiredResult may only answer tools/call, prompts/get and resources/read, so this stays undisclosed although the client declared the elicitation mode";

fn cases() -> Vec<Case> {
    let scope = json!({"deny": {"scope": ["mcp:admin"]}});
    let derived = json!({"deny": {"credential": {
        "authorization_details": payment_details(),
        "reference": "derived",
        "message": "This transfer needs a payment-specific authorization."
    }}});
    let derived_no_message =
        json!({"deny": {"credential": {"authorization_details": payment_details()}}});
    let fixed = json!({"deny": {"credential": {
        "authorization_details": payment_details(),
        "reference": {"fixed": "ref_payment_40eur"},
        "message": "This transfer needs a payment-specific authorization."
    }}});
    let single_use = json!({"deny": {"credential": {
        "authorization_details": payment_details(),
        "reference": "single_use",
        "message": "This transfer needs a one-time authorization."
    }}});
    let unavailable = json!({"deny": {"unavailable": "You do not have access to this workspace."}});
    let undisclosed =
        json!({"deny": {"undisclosed": "This operation is not available to you right now."}});
    let url = json!({"deny": {"url": {
        "url": "https://mcp.example.com/approve/fld_77",
        "message": "Approve access to this folder, then retry.",
        "input_key": "approve_folder"
    }}});
    let url_http = json!({"deny": {"url": {
        "url": "http://127.0.0.1:8080/approve/fld_77",
        "message": "Approve access to this folder, then retry.",
        "input_key": "approve_folder"
    }}});
    let task = json!({"deny": {"task": "A finance approver must confirm this transfer."}});
    let ask = json!({"ask": "Delete workspace ws_1 and everything in it?"});
    let result = || json!({"credential_delivery": "result"});
    let both = || json!({"credential_delivery": "both"});

    let scope_what = "A scope denial (mcp:admin needed beyond the endpoint-wide mcp:read)";
    let derived_what = "A credential denial with a reference derived from the details";
    let fixed_what = "A credential denial with a fixed reference chosen by the application";
    let single_what = "A credential denial for a single-use credential (no reference)";
    let unavailable_what = "A final denial (unavailable)";
    let undisclosed_what = "A denial whose remedy is not disclosed";
    let url_what = "A denial whose remedy is approval at a URL";
    let url_http_what = "A denial whose remedy is approval at a plain-http loopback URL";
    let task_what = "A denial whose remedy is an out-of-band decision held as a task";
    let ask_what = "An ask decision (the user must confirm the call)";

    let scope_kind = Kind::new("scope", scope_what, &scope);
    let derived_kind = Kind::new("credential-derived", derived_what, &derived);
    let fixed_kind = Kind::new("credential-fixed", fixed_what, &fixed);
    let single_use_kind = Kind::new("credential-single-use", single_what, &single_use);
    let unavailable_kind = Kind::new("unavailable", unavailable_what, &unavailable);
    let undisclosed_kind = Kind::new("undisclosed", undisclosed_what, &undisclosed);
    let url_kind = Kind::new("url", url_what, &url);
    let url_http_kind = Kind::new("url-http", url_http_what, &url_http);
    let task_kind = Kind::new("task", task_what, &task);
    let ask_kind = Kind::new("ask", ask_what, &ask);

    let mut list = vec![
        // Scope: a 403 challenge, whatever the era or method.
        scope_kind.at(legacy(), admin_report(), 1),
        scope_kind.at(modern_nocaps(), admin_report(), 2),
        scope_kind.at(modern_allcaps(), read_resource(), 3),
        // Credential by challenge (the default delivery).
        case(
            "credential-derived",
            format!("{derived_what}, no message (the default text applies)"),
            derived_no_message,
            legacy(),
            pay(),
            10,
        )
        .config("challenge", json!({})),
        derived_kind
            .at(modern_allcaps(), pay(), 11)
            .config("challenge", json!({})),
        fixed_kind
            .at(modern_allcaps(), pay(), 12)
            .config("challenge", json!({})),
        single_use_kind
            .at(modern_allcaps(), pay(), 13)
            .config("challenge", json!({})),
        derived_kind
            .at(modern_allcaps(), pay(), 14)
            .config("challenge-403", json!({"credential_status": 403})),
        derived_kind
            .at(modern_allcaps(), read_resource(), 15)
            .config("challenge", json!({})),
        // Credential as a result (or, off tools/call, a JSON-RPC error).
        derived_kind
            .at(legacy(), pay(), 20)
            .config("result", result()),
        derived_kind
            .at(modern_allcaps(), pay(), 21)
            .config("result", result()),
        fixed_kind
            .at(modern_nocaps(), pay(), 22)
            .config("result", result()),
        single_use_kind
            .at(modern_allcaps(), pay(), 23)
            .config("result", result()),
        derived_kind
            .at(legacy(), read_resource(), 24)
            .config("result", result()),
        derived_kind
            .at(modern_allcaps(), read_resource(), 25)
            .config("result", result()),
        // Credential by challenge and result together: only where the revision allows it.
        derived_kind
            .at(legacy(), pay(), 30)
            .config("both", both())
            .only(&[REV_CURRENT]),
        derived_kind
            .at(modern_allcaps(), pay(), 31)
            .config("both", both())
            .only(&[REV_CURRENT]),
        single_use_kind
            .at(modern_allcaps(), pay(), 32)
            .config("both", both())
            .only(&[REV_CURRENT]),
        derived_kind
            .at(modern_allcaps(), read_resource(), 33)
            .config("both", both())
            .only(&[REV_CURRENT]),
        // Unavailable and undisclosed on tools/call, per era.
        unavailable_kind.at(legacy(), delete_workspace(), 40),
        unavailable_kind.at(modern_nocaps(), delete_workspace(), 41),
        unavailable_kind.at(modern_allcaps(), delete_workspace(), 42),
        undisclosed_kind.at(legacy(), delete_workspace(), 43),
        undisclosed_kind.at(modern_nocaps(), delete_workspace(), "req-44"),
        undisclosed_kind.at(modern_allcaps(), delete_workspace(), 45),
        // ... and on the other guarded methods, where they are JSON-RPC errors.
        unavailable_kind.at(legacy(), read_resource(), 50),
        unavailable_kind.at(modern_allcaps(), read_resource(), 51),
        undisclosed_kind.at(modern_nocaps(), read_resource(), 52),
        unavailable_kind.at(modern_allcaps(), get_prompt(), 53),
        undisclosed_kind.at(legacy(), get_prompt(), 54),
        undisclosed_kind.at(modern_allcaps(), get_prompt(), 55),
        undisclosed_kind.at(modern_nocaps(), complete(), 56),
        // The configurable error code: used by errors only.
        unavailable_kind
            .at(modern_allcaps(), read_resource(), 57)
            .config("code-4030", json!({"denial_error_code": 4030})),
        unavailable_kind
            .at(modern_allcaps(), delete_workspace(), 58)
            .config("code-4030", json!({"denial_error_code": 4030})),
        // URL remedies.
        url_kind.at(legacy(), list_folder(), 60),
        case(
            "url",
            url_what,
            url.clone(),
            EraSpec::LegacySession("url-elicitation", json!({"elicitation": {"url": {}}})),
            list_folder(),
            61,
        ),
        url_kind.at(modern_nocaps(), list_folder(), 62),
        url_kind.at(modern_form_empty(), list_folder(), 63),
        // ... the layer's own round trip where the request, method and revision allow it.
        url_kind.at(modern_url(), list_folder(), 64).elicits(),
        url_kind.at(modern_url(), read_resource(), 65).elicits(),
        url_kind.at(modern_url(), get_prompt(), 66).elicits(),
        url_kind.at(modern_allcaps(), list_folder(), 67).elicits(),
        url_kind
            .at(modern_url(), complete(), 68)
            .note(NOT_A_ROUND_TRIP_METHOD),
        // An approval URL the layer will not send: plain http, on loopback, accepted only in
        // development mode.
        url_http_kind
            .at(modern_url(), list_folder(), 90)
            .internal_error(),
        url_http_kind
            .at(legacy(), list_folder(), 91)
            .internal_error(),
        url_http_kind
            .at(modern_url(), list_folder(), 92)
            .config("development", json!({"development_mode": true}))
            .elicits(),
        // Task remedies.
        task_kind.at(legacy(), pay(), 70),
        task_kind.at(modern_nocaps(), pay(), 71),
        task_kind.at(modern_tasks(), pay(), 72).holds(),
        case(
            "task",
            format!("{task_what} (tasks only wrap tools/call, so this stays undisclosed)"),
            task,
            modern_tasks(),
            read_resource(),
            73,
        ),
        // Ask.
        ask_kind.at(legacy(), delete_workspace(), 80),
        case(
            "ask",
            ask_what,
            ask.clone(),
            EraSpec::LegacySession("form-elicitation", json!({"elicitation": {"form": {}}})),
            delete_workspace(),
            81,
        ),
        ask_kind.at(modern_nocaps(), delete_workspace(), 82),
        ask_kind.at(modern_url(), delete_workspace(), 83),
        ask_kind.at(modern_form(), delete_workspace(), 84).elicits(),
        ask_kind
            .at(modern_form_empty(), delete_workspace(), 85)
            .elicits(),
        ask_kind.at(modern_form(), get_prompt(), 86).elicits(),
        ask_kind
            .at(modern_form(), complete(), 87)
            .note(NOT_A_ROUND_TRIP_METHOD),
    ]
    .into_iter()
    .map(CaseBuilder::build)
    .collect::<Vec<_>>();
    list.sort_by(|a, b| a.name.cmp(&b.name));
    list
}

/// Renders one case under one revision through the layer.
async fn render(case: &Case, revision: &str) -> Captured {
    let config = parse_config(&case.config).expect("config");
    let decision = parse_decision(&case.decision).expect("decision");
    let request = parse_request(&case.request).expect("request");
    let harness = Harness::new(revision, &config, decision).expect("gate");
    harness.deny(&request).await
}

/// Regenerates every fixture file from [`cases`].
async fn bless() {
    for revision in REVISIONS {
        std::fs::create_dir_all(fixtures_dir(revision)).expect("fixtures dir");
    }
    for case in cases() {
        for revision in &case.revisions {
            let captured = render(&case, revision).await.normalized();
            let body_json: Value =
                serde_json::from_str(&captured.body).expect("the layer writes JSON");
            let fixture = json!({
                "case": case.name,
                "description": case.description,
                "config": case.config,
                "decision": case.decision,
                "request": case.request,
                "response": {
                    "status": captured.status,
                    "headers": captured.headers,
                    "body": captured.body,
                    "body_json": body_json,
                },
            });
            let path = fixtures_dir(revision).join(format!("{}.json", case.name));
            let text = serde_json::to_string_pretty(&fixture).expect("json") + "\n";
            let temp = path.with_extension("json.tmp");
            std::fs::write(&temp, text).expect("write fixture");
            std::fs::rename(&temp, &path).expect("rename fixture");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn every_fixture_matches_the_layer_byte_for_byte() {
    let fixtures = fixtures();
    let mut failures = Vec::new();
    for fixture in fixtures {
        let decision = parse_decision(&fixture.decision_dsl).expect("parsed at load");
        let harness = match Harness::new(&fixture.revision, &fixture.config, decision) {
            Ok(harness) => harness,
            Err(error) => {
                failures.push(format!(
                    "{}: the gate does not build: {error}",
                    fixture.file.display()
                ));
                continue;
            }
        };
        let captured = harness.deny(&fixture.request).await;
        if let Some(state) = request_state(&captured.json())
            && !is_request_state(state)
        {
            failures.push(format!(
                "{}: requestState {state:?} is not mcpgate1.<kid>.<base64url>.<base64url>",
                fixture.file.display()
            ));
        }
        if let Some(envelope) = envelope(&captured.json()) {
            let id = envelope["authorizationContextId"]
                .as_str()
                .unwrap_or_default();
            if !is_context_id(id) {
                failures.push(format!(
                    "{}: context id {id:?} is not actx_ + 22 base64url characters",
                    fixture.file.display()
                ));
            }
        }
        if let Some(task) = captured
            .json()
            .get("result")
            .filter(|r| r.get("taskId").is_some())
        {
            let id = task["taskId"].as_str().unwrap_or_default();
            if !is_task_id(id) {
                failures.push(format!(
                    "{}: task id {id:?} is not tsk_ + 22 base64url characters",
                    fixture.file.display()
                ));
            }
            for member in ["createdAt", "lastUpdatedAt"] {
                let stamp = task[member].as_str().unwrap_or_default();
                if !is_timestamp(stamp) {
                    failures.push(format!(
                        "{}: {member} {stamp:?} is not YYYY-MM-DDTHH:MM:SSZ",
                        fixture.file.display()
                    ));
                }
            }
            if task["createdAt"] != task["lastUpdatedAt"] {
                failures.push(format!(
                    "{}: a new task was last updated at {} but created at {}",
                    fixture.file.display(),
                    task["lastUpdatedAt"],
                    task["createdAt"]
                ));
            }
        }
        for problem in harness.audit_problems() {
            failures.push(format!("{}: {problem}", fixture.file.display()));
        }
        let actual = captured.normalized();
        if actual != fixture.response {
            failures.push(format!(
                "{}:\n  expected status {} headers {:?}\n  body {}\n  actual   status {} headers {:?}\n  body {}",
                fixture.file.display(),
                fixture.response.status,
                fixture.response.headers,
                fixture.response.body,
                actual.status,
                actual.headers,
                actual.body
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} fixtures differ (if the change is intended, rerun with {BLESS_ENV}=1 and review the diff):\n{}",
        failures.len(),
        fixtures.len(),
        failures.join("\n")
    );
}

#[test]
fn fixture_files_and_the_case_table_agree() {
    let on_disk: BTreeSet<(String, String)> = fixtures()
        .iter()
        .map(|f| (f.revision.clone(), f.case.clone()))
        .collect();
    let table: BTreeSet<(String, String)> = cases()
        .iter()
        .flat_map(|c| c.revisions.iter().map(|r| (r.to_string(), c.name.clone())))
        .collect();
    let missing: Vec<_> = table.difference(&on_disk).collect();
    let stale: Vec<_> = on_disk.difference(&table).collect();
    assert!(
        missing.is_empty(),
        "cases without a fixture file (run with {BLESS_ENV}=1): {missing:?}"
    );
    assert!(
        stale.is_empty(),
        "fixture files no case generates (delete them, or add the case): {stale:?}"
    );
    // Each fixture's request and decision are the table's, so a hand edit cannot drift.
    let by_name: BTreeMap<String, Case> =
        cases().into_iter().map(|c| (c.name.clone(), c)).collect();
    for fixture in fixtures() {
        let case = &by_name[&fixture.case];
        assert_eq!(
            fixture.decision_dsl,
            case.decision,
            "{}",
            fixture.file.display()
        );
        assert_eq!(
            parse_config(&case.config).unwrap(),
            fixture.config,
            "{}",
            fixture.file.display()
        );
        assert_eq!(
            fixture.request.body,
            case.request["body"],
            "{}",
            fixture.file.display()
        );
    }
    for revision in REVISIONS {
        let count = fixtures().iter().filter(|f| f.revision == revision).count();
        assert!(count >= 40, "{revision}: only {count} fixtures");
    }
}

/// Checks every stored response against the wire contract of research §2 (the automated half
/// of the hand review in the report).
#[test]
fn every_fixture_obeys_the_wire_contract() {
    let table: BTreeMap<String, Case> = cases().into_iter().map(|c| (c.name.clone(), c)).collect();
    let mut shapes_seen = BTreeSet::new();
    for fixture in fixtures() {
        let at = fixture.file.display().to_string();
        let mut body: Value = serde_json::from_str(&fixture.response.body).unwrap();
        let request = &fixture.request.body;
        let method = request["method"].as_str().unwrap();
        let modern = request
            .pointer("/params/_meta/io.modelcontextprotocol~1protocolVersion")
            .is_some();
        // MCP 2026-07-28: a result names the server in `_meta`, the layer's own results
        // included; a legacy result never does. Taken out here, so that the checks below see
        // the rest.
        if let Some(result) = body.get_mut("result").and_then(Value::as_object_mut) {
            let named = result
                .get_mut("_meta")
                .and_then(Value::as_object_mut)
                .and_then(|meta| meta.remove(SERVER_INFO_META));
            if modern {
                assert_eq!(
                    named,
                    Some(json!({"name": SERVER_NAME, "version": SERVER_VERSION})),
                    "{at}: a modern result names the server"
                );
            } else {
                assert_eq!(named, None, "{at}: no serverInfo on a legacy result");
            }
            if result
                .get("_meta")
                .is_some_and(|meta| meta.as_object().is_some_and(Map::is_empty))
            {
                result.remove("_meta");
            }
        }
        let error_based = fixture.revision == REV_1C5B;
        let status = fixture.response.status;
        let headers = &fixture.response.headers;
        let remedy = fixture
            .decision_dsl
            .get("deny")
            .and_then(|d| d.as_object())
            .and_then(|d| d.keys().next().cloned());
        let remedy = remedy.as_deref().unwrap_or("ask");
        let delivery = fixture.config.credential_delivery.unwrap_or_default();
        let text = &fixture.response.body;

        assert_eq!(
            headers.get("content-type").map(String::as_str),
            Some("application/json"),
            "{at}"
        );
        // Never -32042, never a code in the range MCP reserves; no `elicitationId` (removed
        // from URL elicitation in 2026-07-28), except in the legacy form the error-based
        // revision composes URL remedies with (checked with its shape below).
        let legacy_url_declared = fixture
            .request
            .initialize
            .as_ref()
            .and_then(|i| i.pointer("/capabilities/elicitation/url"))
            .is_some_and(Value::is_object);
        let url_elicitation_error =
            remedy == "url" && !modern && legacy_url_declared && error_based;
        if let Some(code) = body.pointer("/error/code").and_then(Value::as_i64)
            && !url_elicitation_error
        {
            assert_ne!(code, -32042, "{at}");
            assert!(
                !(-32099..=-32020).contains(&code),
                "{at}: reserved code {code}"
            );
        }
        assert_eq!(
            text.contains("elicitationId"),
            url_elicitation_error,
            "{at}"
        );

        // The shape, derived here from the request, the decision and the revision alone, must
        // be the one the case table documents.
        let elicitation = request
            .pointer("/params/_meta/io.modelcontextprotocol~1clientCapabilities/elicitation")
            .and_then(Value::as_object);
        let url_declared = elicitation.is_some_and(|e| e.get("url").is_some_and(Value::is_object));
        let form_declared = elicitation
            .is_some_and(|e| e.is_empty() || e.get("form").is_some_and(Value::is_object));
        let round_trip_method = matches!(method, "tools/call" | "prompts/get" | "resources/read");
        let tasks_declared = request
            .pointer("/params/_meta/io.modelcontextprotocol~1clientCapabilities/extensions/io.modelcontextprotocol~1tasks")
            .is_some();
        let approval_url = fixture
            .decision_dsl
            .pointer("/deny/url/url")
            .and_then(Value::as_str);
        let url_refused = approval_url.is_some_and(|url| {
            let loopback = ["http://127.0.0.1", "http://localhost", "http://[::1]"]
                .iter()
                .any(|host| url.starts_with(host));
            !(url.starts_with("https://") || (fixture.config.development_mode && loopback))
        });
        let challenge = remedy == "scope"
            || (remedy == "credential" && (delivery != CredentialDelivery::Result || !modern));
        let shape = if url_refused {
            Shape::InternalError
        } else if url_elicitation_error {
            Shape::UrlElicitationError
        } else if remedy == "task"
            && modern
            && method == "tools/call"
            && tasks_declared
            && !error_based
        {
            Shape::Task
        } else if remedy == "url" && modern && round_trip_method && url_declared && !error_based {
            Shape::UrlInput
        } else if remedy == "ask" && modern && round_trip_method && form_declared {
            Shape::Confirmation
        } else if challenge {
            Shape::Challenge
        } else {
            Shape::Denial
        };
        assert_eq!(
            table[&fixture.case].shape(&fixture.revision),
            shape,
            "{at}: the case table and the rules disagree"
        );
        shapes_seen.insert(format!("{shape:?}"));

        // `input_required` exactly where the rules allow it: modern requests only, on the
        // three methods multi-round-trip results answer, with the declared elicitation mode.
        let input_required = body.pointer("/result/resultType") == Some(&json!("input_required"));
        assert_eq!(
            input_required,
            matches!(shape, Shape::UrlInput | Shape::Confirmation),
            "{at}: input_required"
        );
        if !modern {
            assert!(
                !text.contains("resultType"),
                "{at}: resultType on a legacy request"
            );
            assert!(
                !text.contains("input_required"),
                "{at}: input_required on a legacy request"
            );
            assert!(
                !text.contains(STATE_PREFIX),
                "{at}: a continuation state on a legacy request"
            );
        }
        if shape != Shape::Task {
            assert!(
                !text.contains("\"taskId\""),
                "{at}: a task id outside a held task"
            );
        }

        match shape {
            Shape::InternalError => {
                // The layer refuses to send an unusable remedy: no challenge, no envelope.
                assert_eq!(status, 200, "{at}");
                assert!(!headers.contains_key("www-authenticate"), "{at}");
                assert_eq!(body["id"], request["id"], "{at}");
                assert_eq!(body["error"]["code"], -32603, "{at}");
                assert!(body.get("result").is_none(), "{at}");
                assert!(
                    envelope(&body).is_none(),
                    "{at}: no envelope on an internal error"
                );
                assert!(
                    !text.contains("approve/fld_77"),
                    "{at}: the URL is not sent"
                );
                continue;
            }
            Shape::UrlInput | Shape::Confirmation => {
                assert!(modern && round_trip_method, "{at}");
                assert_eq!(status, 200, "{at}");
                assert!(!headers.contains_key("www-authenticate"), "{at}");
                assert_eq!(body["jsonrpc"], "2.0", "{at}");
                assert_eq!(body["id"], request["id"], "{at}: the request id");
                assert!(body.get("error").is_none(), "{at}");
                let result = body["result"].as_object().unwrap();
                let members: BTreeSet<&str> = result.keys().map(String::as_str).collect();
                let mut expected = BTreeSet::from(["inputRequests", "requestState", "resultType"]);
                if shape == Shape::UrlInput {
                    expected.insert("_meta");
                }
                assert_eq!(members, expected, "{at}: InputRequiredResult members");
                assert_eq!(result["requestState"], STATE_PLACEHOLDER, "{at}");
                let requests = result["inputRequests"].as_object().unwrap();
                assert_eq!(requests.len(), 1, "{at}: one input request");
                let (key, input) = requests.iter().next().unwrap();
                assert!(key.starts_with("mcp-gate/"), "{at}: the layer's key {key}");
                assert_eq!(input["method"], "elicitation/create", "{at}");
                let params = input["params"].as_object().unwrap();
                if shape == Shape::UrlInput {
                    assert!(url_declared, "{at}");
                    let url = &fixture.decision_dsl["deny"]["url"];
                    assert_eq!(
                        key,
                        &format!("mcp-gate/{}", url["input_key"].as_str().unwrap()),
                        "{at}"
                    );
                    assert_eq!(
                        Value::Object(params.clone()),
                        json!({"mode": "url", "url": url["url"], "message": url["message"]}),
                        "{at}: URL elicitation params are exactly mode, url, message"
                    );
                    // The envelope: a URL remedy is available, its hint carries no pointer.
                    let meta = result["_meta"].as_object().unwrap();
                    assert_eq!(meta.len(), 1, "{at}");
                    assert_eq!(
                        meta.get("io.modelcontextprotocol/authorization"),
                        Some(&json!({
                            "reason": "insufficient_authorization",
                            "remediation": "available",
                            "authorizationContextId": CONTEXT_ID_PLACEHOLDER,
                            "remediationHints": [{"type": "url"}]
                        })),
                        "{at}: the URL envelope"
                    );
                } else {
                    assert!(form_declared, "{at}");
                    assert_eq!(key, "mcp-gate/confirm", "{at}");
                    assert_eq!(params["mode"], "form", "{at}");
                    assert_eq!(params["message"], fixture.decision_dsl["ask"], "{at}");
                    let schema = &params["requestedSchema"];
                    assert_eq!(schema["type"], "object", "{at}");
                    assert_eq!(schema["properties"]["approve"]["type"], "boolean", "{at}");
                    assert!(
                        schema["required"]
                            .as_array()
                            .is_some_and(|r| r.contains(&json!("approve"))),
                        "{at}: approve is required"
                    );
                    // A confirmation is not a denial: no envelope anywhere.
                    assert!(envelope(&body).is_none(), "{at}");
                    assert!(
                        !text.contains("io.modelcontextprotocol/authorization"),
                        "{at}"
                    );
                    assert!(!text.contains("actx_"), "{at}");
                }
                continue;
            }
            Shape::UrlElicitationError => {
                assert_eq!(status, 200, "{at}");
                let message = fixture.decision_dsl["deny"]["url"]["message"].clone();
                assert_eq!(
                    body,
                    json!({"jsonrpc": "2.0", "id": request["id"], "error": {
                        "code": -32042,
                        "message": message,
                        "data": {
                            "authorization": {
                                "reason": "insufficient_authorization",
                                "authorizationContextId": CONTEXT_ID_PLACEHOLDER,
                                "remediationHints": [{"type": "url"}],
                            },
                            "elicitations": [{
                                "mode": "url",
                                "elicitationId": CONTEXT_ID_PLACEHOLDER,
                                "url": approval_url,
                                "message": message,
                            }],
                        },
                    }}),
                    "{at}: 1c5b0ce line 115 and the 2025-11-25 URLElicitationRequiredError"
                );
                continue;
            }
            Shape::Task => {
                // The held call: a CreateTaskResult, answered only once the task is stored.
                assert!(
                    modern && method == "tools/call" && tasks_declared && !error_based,
                    "{at}"
                );
                assert_eq!(status, 200, "{at}");
                assert!(!headers.contains_key("www-authenticate"), "{at}");
                assert_eq!(body["jsonrpc"], "2.0", "{at}");
                assert_eq!(body["id"], request["id"], "{at}: the request id");
                assert!(body.get("error").is_none(), "{at}");
                let result = body["result"]
                    .as_object()
                    .unwrap_or_else(|| panic!("{at}: no result"));
                let members: BTreeSet<&str> = result.keys().map(String::as_str).collect();
                assert_eq!(
                    members,
                    BTreeSet::from([
                        "resultType",
                        "taskId",
                        "status",
                        "createdAt",
                        "lastUpdatedAt",
                        "ttlMs",
                        "pollIntervalMs",
                        "_meta",
                    ]),
                    "{at}: CreateTaskResult members"
                );
                assert_eq!(result["resultType"], "task", "{at}");
                assert_eq!(result["status"], "working", "{at}");
                assert_eq!(result["taskId"], TASK_ID_PLACEHOLDER, "{at}");
                assert_eq!(result["createdAt"], TIMESTAMP_PLACEHOLDER, "{at}");
                assert_eq!(result["lastUpdatedAt"], TIMESTAMP_PLACEHOLDER, "{at}");
                for member in ["ttlMs", "pollIntervalMs"] {
                    assert!(
                        result[member].as_u64().is_some_and(|n| n > 0),
                        "{at}: {member} is a positive integer: {}",
                        result[member]
                    );
                }
                // The envelope: the task is the remedy, available; its hint carries nothing else.
                assert_eq!(
                    result["_meta"],
                    json!({"io.modelcontextprotocol/authorization": {
                        "reason": "insufficient_authorization",
                        "remediation": "available",
                        "authorizationContextId": CONTEXT_ID_PLACEHOLDER,
                        "remediationHints": [{"type": "task"}]
                    }}),
                    "{at}: the task envelope"
                );
                continue;
            }
            Shape::Challenge | Shape::Denial => {}
        }
        // Denials carried as JSON-RPC errors use the configured code.
        if let Some(code) = body.pointer("/error/code").and_then(Value::as_i64) {
            assert_eq!(
                code,
                fixture.config.denial_error_code.unwrap_or(-32003),
                "{at}: the configured code"
            );
        }

        // Credential remedies reach legacy clients by challenge whatever the delivery option.
        if challenge {
            let www = headers
                .get("www-authenticate")
                .unwrap_or_else(|| panic!("{at}: no challenge"));
            assert_eq!(
                headers.get("cache-control").map(String::as_str),
                Some("no-store"),
                "{at}"
            );
            assert!(
                www.contains("resource_metadata=\"https://mcp.example.com/.well-known/oauth-protected-resource/mcp\""),
                "{at}: {www}"
            );
            if remedy == "scope" {
                assert_eq!(status, 403, "{at}");
                assert!(
                    www.starts_with("Bearer error=\"insufficient_scope\""),
                    "{at}: {www}"
                );
                assert!(
                    www.contains("scope=\"mcp:admin mcp:read\""),
                    "{at}: the union of scopes: {www}"
                );
                if error_based {
                    challenge_envelope(&at, &body, &request["id"], &fixture.config);
                } else {
                    assert!(
                        envelope(&body).is_none(),
                        "{at}: no envelope beside a scope challenge"
                    );
                }
            } else {
                assert_eq!(
                    status,
                    fixture.config.credential_status.map_or(401, |s| s.as_u16()),
                    "{at}"
                );
                assert!(
                    www.starts_with("Bearer error=\"insufficient_authorization\""),
                    "{at}: {www}"
                );
                let encoded = www
                    .split("authorization_remediation=\"")
                    .nth(1)
                    .and_then(|s| s.split('"').next())
                    .unwrap();
                assert!(!encoded.contains('='), "{at}: base64url without padding");
                let remedy: Value =
                    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(encoded).unwrap()).unwrap();
                let members: BTreeSet<&str> = remedy
                    .as_object()
                    .unwrap()
                    .keys()
                    .map(String::as_str)
                    .collect();
                let single_use = fixture.decision_dsl.pointer("/deny/credential/reference")
                    == Some(&json!("single_use"));
                if single_use {
                    assert_eq!(members, BTreeSet::from(["authorization_details"]), "{at}");
                } else {
                    assert_eq!(
                        members,
                        BTreeSet::from(["authorization_details", "authorization_reference"]),
                        "{at}"
                    );
                }
                assert_eq!(
                    remedy["authorization_details"],
                    fixture.decision_dsl["deny"]["credential"]["authorization_details"],
                    "{at}"
                );
                if delivery == CredentialDelivery::Both {
                    assert_eq!(
                        fixture.revision, REV_CURRENT,
                        "{at}: Both only where an envelope may sit beside a challenge"
                    );
                    let hint = &envelope(&body)
                        .unwrap_or_else(|| panic!("{at}: Both carries an envelope"))["remediationHints"]
                        [0];
                    let mut hint = hint.clone();
                    assert_eq!(
                        hint.as_object_mut().unwrap().remove("type"),
                        Some(json!("authorization_remediation")),
                        "{at}"
                    );
                    assert_eq!(
                        hint, remedy,
                        "{at}: the hint and the challenge say the same"
                    );
                } else if error_based {
                    challenge_envelope(&at, &body, &request["id"], &fixture.config);
                } else {
                    assert!(
                        envelope(&body).is_none(),
                        "{at}: no envelope beside a plain challenge"
                    );
                }
            }
            continue;
        }

        // Everything else is a JSON-RPC answer with HTTP 200 and an envelope.
        assert_eq!(status, 200, "{at}");
        assert!(!headers.contains_key("www-authenticate"), "{at}");
        assert_eq!(body["jsonrpc"], "2.0", "{at}");
        assert_eq!(body["id"], request["id"], "{at}: the request id");
        let envelope = envelope(&body).unwrap_or_else(|| panic!("{at}: no envelope"));
        assert_eq!(envelope["reason"], "insufficient_authorization", "{at}");
        assert_eq!(
            envelope["authorizationContextId"], CONTEXT_ID_PLACEHOLDER,
            "{at}"
        );
        let hints = envelope.get("remediationHints");
        if error_based {
            // Error-based: a JSON-RPC error, the envelope under error.data.authorization, no
            // `remediation` member.
            assert!(body.get("result").is_none(), "{at}");
            assert!(body.pointer("/error/data/authorization").is_some(), "{at}");
            assert!(envelope.get("remediation").is_none(), "{at}");
        } else {
            let expected_state = match remedy {
                "credential" => "available",
                "unavailable" => "unavailable",
                _ => "undisclosed",
            };
            assert_eq!(envelope["remediation"], expected_state, "{at}");
            if method == "tools/call" {
                let result = &body["result"];
                assert_eq!(result["isError"], true, "{at}");
                assert_eq!(result["content"][0]["type"], "text", "{at}");
                assert_eq!(
                    result.get("resultType"),
                    modern.then(|| json!("complete")).as_ref(),
                    "{at}: resultType"
                );
            } else {
                assert!(
                    body.get("result").is_none(),
                    "{at}: non-tool methods are errors"
                );
                assert!(
                    body.pointer("/error/data/io.modelcontextprotocol~1authorization")
                        .is_some(),
                    "{at}"
                );
            }
            if expected_state != "available" {
                assert!(hints.is_none(), "{at}: hints without remediation available");
            }
        }
        if remedy == "credential" {
            let hint = &hints.unwrap_or_else(|| panic!("{at}: a credential hint"))[0];
            assert_eq!(hint["type"], "authorization_remediation", "{at}");
            assert_eq!(
                hint["authorization_details"],
                fixture.decision_dsl["deny"]["credential"]["authorization_details"],
                "{at}"
            );
            let single_use = fixture.decision_dsl.pointer("/deny/credential/reference")
                == Some(&json!("single_use"));
            assert_eq!(
                hint.get("authorization_reference").is_none(),
                single_use,
                "{at}"
            );
        } else {
            assert!(
                hints.is_none(),
                "{at}: only credential denials carry hints in this release"
            );
        }
        // url / task / ask: the remedy is described in text.
        let message = body
            .pointer("/result/content/0/text")
            .or_else(|| body.pointer("/error/message"))
            .unwrap();
        let message = message.as_str().unwrap();
        match remedy {
            "url" => assert!(message.contains(approval_url.unwrap()), "{at}: {message}"),
            "task" => assert!(message.contains("out-of-band approval"), "{at}: {message}"),
            "ask" => assert!(
                message.contains("confirmation") || message.contains("not confirmed"),
                "{at}: {message}"
            ),
            _ => {}
        }
    }
    assert_eq!(
        shapes_seen.len(),
        7,
        "every shape is pinned by some fixture: {shapes_seen:?}"
    );
}

/// Which responses a revision changes, as the revision pages list them: `c74b0c9` and
/// `6bff817` render identically except that only `c74b0c9` accepts credential delivery `Both`;
/// `1c5b0ce` renders scope and credential challenges, confirmations (`ask` as an
/// `InputRequiredResult`, which carries no envelope) and internal errors identically to both,
/// and every other denial differently: a JSON-RPC error under `error.data.authorization`
/// without `remediation`, including the URL remedies the result-based revisions answer with
/// an `InputRequiredResult` and the task remedies they answer with a `CreateTaskResult`.
#[tokio::test]
async fn changing_the_revision_changes_exactly_the_documented_responses() {
    let mut checked = 0;
    let mut url_round_trips = 0;
    let mut tasks_held = 0;
    for case in cases().iter().filter(|c| c.revisions.len() == 3) {
        let [current, six, one] = [
            render(case, REV_CURRENT).await.normalized(),
            render(case, REV_6BFF).await.normalized(),
            render(case, REV_1C5B).await.normalized(),
        ];
        assert_eq!(
            current, six,
            "{}: c74b0c9 and 6bff817 must agree",
            case.name
        );
        assert_eq!(
            case.shape(REV_CURRENT),
            case.shape(REV_6BFF),
            "{}",
            case.name
        );
        let (shape, error_shape) = (case.shape(REV_CURRENT), case.shape(REV_1C5B));
        if shape == error_shape && shape.same_in_every_revision() {
            assert_eq!(
                current, one,
                "{}: {shape:?} is the same in every revision",
                case.name
            );
            continue;
        }
        if shape == Shape::Challenge {
            // The same status and challenge; the error-based text adds the JSON-RPC error with
            // the envelope as the body (its Examples 1 and 2).
            assert_eq!(error_shape, Shape::Challenge, "{}", case.name);
            assert_eq!(current.status, one.status, "{}", case.name);
            assert_eq!(
                current.headers.get("www-authenticate"),
                one.headers.get("www-authenticate"),
                "{}",
                case.name
            );
            let body: Value = serde_json::from_str(&one.body).unwrap();
            assert!(
                body.pointer("/error/data/authorization").is_some(),
                "{}: {}",
                case.name,
                one.body
            );
            continue;
        }
        if error_shape == Shape::UrlElicitationError {
            // A legacy session that declared URL elicitation: the plain denial there, the
            // 2025-11-25 `-32042` error here.
            assert_eq!(shape, Shape::Denial, "{}", case.name);
            assert!(one.body.contains("-32042"), "{}", case.name);
            assert!(!current.body.contains("-32042"), "{}", case.name);
            continue;
        }
        assert_eq!(error_shape, Shape::Denial, "{}", case.name);
        assert_ne!(
            current.body, one.body,
            "{}: 1c5b0ce renders this differently",
            case.name
        );
        assert_eq!(
            current.status, one.status,
            "{}: both answer HTTP 200",
            case.name
        );
        let result_based: Value = serde_json::from_str(&current.body).unwrap();
        let error_based: Value = serde_json::from_str(&one.body).unwrap();
        let envelope_here = envelope(&result_based).unwrap();
        assert!(envelope_here.get("remediation").is_some(), "{}", case.name);
        if shape == Shape::UrlInput {
            // The URL remedy: an InputRequiredResult here, the undisclosed fallback there.
            assert_eq!(
                result_based["result"]["resultType"], "input_required",
                "{}",
                case.name
            );
            assert_eq!(envelope_here["remediation"], "available", "{}", case.name);
            url_round_trips += 1;
        } else if shape == Shape::Task {
            // The task remedy: a CreateTaskResult here, the undisclosed fallback there.
            assert_eq!(
                result_based["result"]["resultType"], "task",
                "{}",
                case.name
            );
            assert_eq!(result_based["result"]["status"], "working", "{}", case.name);
            assert_eq!(envelope_here["remediation"], "available", "{}", case.name);
            assert_eq!(
                envelope_here["remediationHints"],
                json!([{"type": "task"}]),
                "{}",
                case.name
            );
            assert!(!one.body.contains("\"taskId\""), "{}: no task", case.name);
            tasks_held += 1;
        } else {
            assert_eq!(shape, Shape::Denial, "{}", case.name);
        }
        assert!(
            error_based.pointer("/error/data/authorization").is_some(),
            "{}",
            case.name
        );
        assert!(
            envelope(&error_based).unwrap().get("remediation").is_none(),
            "{}",
            case.name
        );
        assert!(!one.body.contains("input_required"), "{}", case.name);
        checked += 1;
    }
    assert!(checked >= 30, "only {checked} cases compared");
    assert!(
        url_round_trips >= 4,
        "only {url_round_trips} URL round trips compared"
    );
    assert!(tasks_held >= 1, "no held task compared");

    // The stored fixtures say the same.
    let fixtures = fixtures();
    let stored = |revision: &str, case: &str| {
        fixtures
            .iter()
            .find(|f| f.revision == revision && f.case == case)
            .map(|f| &f.response)
    };
    for case in cases().iter().filter(|c| c.revisions.len() == 3) {
        let (Some(a), Some(b), Some(c)) = (
            stored(REV_CURRENT, &case.name),
            stored(REV_6BFF, &case.name),
            stored(REV_1C5B, &case.name),
        ) else {
            panic!("{}: a fixture is missing", case.name);
        };
        assert_eq!(a, b, "{}", case.name);
        let shape = case.shape(REV_CURRENT);
        let identical = shape == case.shape(REV_1C5B) && shape.same_in_every_revision();
        assert_eq!(a == c, identical, "{}", case.name);
        assert_eq!(
            shape == Shape::Challenge,
            a.headers.contains_key("www-authenticate"),
            "{}",
            case.name
        );
    }
}

#[test]
fn credential_delivery_both_is_refused_where_the_revision_does_not_allow_it() {
    let both = Config {
        credential_delivery: Some(CredentialDelivery::Both),
        ..Config::default()
    };
    for revision in [REV_6BFF, REV_1C5B] {
        let error = gate_builder(revision, &both)
            .evaluate(mcp_gate::policy::allow_all())
            .build()
            .unwrap_err();
        assert!(
            matches!(error, ConfigError::NotInRevision(_)),
            "{revision}: {error:?}"
        );
    }
    for revision in [REV_CURRENT, "current"] {
        let gate = gate_builder(revision, &both)
            .evaluate(mcp_gate::policy::allow_all())
            .build()
            .expect("Both under c74b0c9");
        assert_eq!(gate.revision().id(), REV_CURRENT);
    }
    // The other deliveries build under every revision.
    for revision in REVISIONS {
        for delivery in [CredentialDelivery::Challenge, CredentialDelivery::Result] {
            let config = Config {
                credential_delivery: Some(delivery),
                ..Config::default()
            };
            gate_builder(revision, &config)
                .evaluate(mcp_gate::policy::allow_all())
                .build()
                .expect("builds");
        }
    }
}

#[tokio::test]
async fn two_denials_of_the_same_request_get_different_context_ids() {
    let case = cases()
        .into_iter()
        .find(|c| c.name == "unavailable--modern-allcaps--tools-call")
        .expect("case");
    let both = cases()
        .into_iter()
        .find(|c| c.name == "credential-derived--both--modern-allcaps--tools-call")
        .expect("case");
    let held = cases()
        .into_iter()
        .find(|c| c.name == "task--modern-tasks-extension--tools-call")
        .expect("case");
    let mut task_ids = BTreeSet::new();
    for (case, revisions) in [
        (&case, &REVISIONS[..]),
        (&both, &[REV_CURRENT][..]),
        (&held, &[REV_CURRENT, REV_6BFF][..]),
    ] {
        for revision in revisions {
            let config = parse_config(&case.config).unwrap();
            let harness =
                Harness::new(revision, &config, parse_decision(&case.decision).unwrap()).unwrap();
            let request = parse_request(&case.request).unwrap();
            let mut seen = BTreeSet::new();
            for _ in 0..3 {
                let reply = harness.deny(&request).await;
                let id = envelope(&reply.json()).unwrap()["authorizationContextId"]
                    .as_str()
                    .unwrap()
                    .to_owned();
                assert!(is_context_id(&id), "{id}");
                // Derived from nothing in the request.
                for fragment in ["workspace", "delete", "payments", "user-1", "client-1"] {
                    assert!(!id.to_lowercase().contains(fragment), "{id}");
                }
                assert!(
                    seen.insert(id.clone()),
                    "{}: context id {id} repeated",
                    case.name
                );
                // A held call: a new task each time, its id as unguessable as the context id.
                if let Some(task_id) = reply.json().pointer("/result/taskId") {
                    let task_id = task_id.as_str().unwrap().to_owned();
                    assert!(is_task_id(&task_id), "{task_id}");
                    assert!(
                        task_ids.insert(task_id.clone()),
                        "task id {task_id} repeated"
                    );
                }
            }
        }
    }
}

#[tokio::test]
async fn derived_reference_ignores_the_order_of_keys() {
    let texts = [
        r#"[{"type":"payment_initiation","actions":["initiate"],"instructedAmount":{"currency":"EUR","amount":"40.00"},"creditorAccount":{"iban":"DE00TEST"}}]"#,
        r#"[{"creditorAccount":{"iban":"DE00TEST"},"instructedAmount":{"amount":"40.00","currency":"EUR"},"actions":["initiate"],"type":"payment_initiation"}]"#,
        r#"[ { "instructedAmount" : { "amount" : "40.00" , "currency" : "EUR" } , "type" : "payment_initiation" , "creditorAccount" : { "iban" : "DE00TEST" } , "actions" : [ "initiate" ] } ]"#,
    ];
    let mut references = BTreeSet::new();
    for text in texts {
        let details: Vec<Value> = serde_json::from_str(text).unwrap();
        for delivery in [CredentialDelivery::Challenge, CredentialDelivery::Result] {
            let config = Config {
                credential_delivery: Some(delivery),
                ..Config::default()
            };
            let harness =
                Harness::new(REV_CURRENT, &config, Decision::credential(details.clone())).unwrap();
            let request = parse_request(&request_for(&modern_allcaps(), &pay(), json!(1))).unwrap();
            let reply = harness.deny(&request).await;
            let reference = match delivery {
                CredentialDelivery::Challenge => {
                    let www = &reply.headers["www-authenticate"];
                    let encoded = www.split("authorization_remediation=\"").nth(1).unwrap().split('"').next().unwrap();
                    let remedy: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(encoded).unwrap()).unwrap();
                    remedy["authorization_reference"].as_str().unwrap().to_owned()
                }
                _ => envelope(&reply.json()).unwrap()["remediationHints"][0]["authorization_reference"]
                    .as_str()
                    .unwrap()
                    .to_owned(),
            };
            assert_eq!(reference, derive_reference(&details));
            references.insert(reference);
        }
    }
    assert_eq!(references.len(), 1, "{references:?}");
    let reference = references.into_iter().next().unwrap();
    assert!(
        reference.starts_with("ref_") && reference.len() == 26,
        "{reference}"
    );
    assert!(
        !reference.contains("EUR") && !reference.contains("DE00"),
        "the reference reveals nothing"
    );
    // Different details, different reference.
    let more: Vec<Value> = serde_json::from_str(&texts[0].replace("40.00", "400.00")).unwrap();
    assert_ne!(derive_reference(&more), reference);
}

/// The configurable denial code may not sit in the range JSON-RPC and MCP reserve.
#[test]
fn denial_error_codes_in_the_reserved_range_are_config_errors() {
    for code in [-32768, -32700, -32603, -32099, -32042, -32021, -32020] {
        let config = Config {
            denial_error_code: Some(code),
            ..Config::default()
        };
        for revision in REVISIONS {
            let error = gate_builder(revision, &config)
                .evaluate(mcp_gate::policy::allow_all())
                .build()
                .unwrap_err();
            assert!(
                matches!(
                    error,
                    ConfigError::InvalidOption {
                        field: "denial_error_code",
                        ..
                    }
                ),
                "{code}: {error:?}"
            );
        }
    }
    for code in [-32003, -32019, -32000, 4030, -31999] {
        let config = Config {
            denial_error_code: Some(code),
            ..Config::default()
        };
        gate_builder(REV_1C5B, &config)
            .evaluate(mcp_gate::policy::allow_all())
            .build()
            .unwrap_or_else(|e| panic!("{code}: {e}"));
    }
}

/// A credential remedy without details, or with a detail lacking a string `type`, is never
/// sent: the request fails with an internal error and reaches nothing.
#[tokio::test]
async fn half_formed_credential_remediations_are_internal_errors() {
    let request = parse_request(&request_for(&modern_allcaps(), &pay(), json!(5))).unwrap();
    for details in [
        vec![],
        vec![json!({"actions": ["initiate"]})],
        vec![json!({"type": 7})],
        vec![
            json!({"type": "payment_initiation"}),
            json!("not an object"),
        ],
    ] {
        for revision in REVISIONS {
            let harness = Harness::new(
                revision,
                &Config::default(),
                Decision::credential(details.clone()),
            )
            .unwrap();
            let reply = harness.deny(&request).await;
            assert_eq!(reply.status, 200, "{details:?}");
            assert!(
                !reply.headers.contains_key("www-authenticate"),
                "{details:?}"
            );
            let body = reply.json();
            assert_eq!(body["error"]["code"], -32603, "{details:?}: {body}");
            assert_eq!(body["id"], 5);
            assert!(envelope(&body).is_none(), "{details:?}: {body}");
        }
    }
}

#[test]
fn an_unknown_revision_is_a_config_error_naming_the_supported_ids() {
    for given in [
        "c74b0c9",
        "0000000000000000000000000000000000000000",
        "CURRENT",
        "latest",
        "",
    ] {
        let error = gate_builder(given, &Config::default())
            .evaluate(mcp_gate::policy::allow_all())
            .build()
            .unwrap_err();
        let message = error.to_string();
        match &error {
            ConfigError::UnknownRevision {
                given: named,
                supported,
            } => {
                assert_eq!(named, given);
                for revision in REVISIONS {
                    assert!(supported.contains(revision), "{supported}");
                    assert!(message.contains(revision), "{message}");
                }
            }
            other => panic!("{given:?}: {other:?}"),
        }
    }
}

#[test]
fn the_gate_reports_the_selected_revision() {
    let build = |name: &str| {
        gate_builder(name, &Config::default())
            .evaluate(mcp_gate::policy::allow_all())
            .build()
            .expect("gate")
            .revision()
    };
    assert_eq!(CURRENT, REV_CURRENT);
    let current = build("current");
    assert_eq!(current.id(), REV_CURRENT);
    assert!(current.is_current());
    assert_eq!(current, Revision::current());
    for revision in REVISIONS {
        let selected = build(revision);
        assert_eq!(selected.id(), revision);
        assert_eq!(selected.to_string(), revision);
        assert_eq!(selected.is_current(), revision == REV_CURRENT);
    }
    // The default is `current`.
    let default = Gate::builder()
        .resource(RESOURCE)
        .issuer(Issuer::with_keys(
            ISSUER,
            StaticKeys::from_jwks_json(&KEY.jwks_json()).unwrap(),
        ))
        .evaluate(mcp_gate::policy::allow_all())
        .build()
        .unwrap();
    assert_eq!(default.revision().id(), REV_CURRENT);
    let supported: BTreeSet<&str> = Revision::supported().collect();
    assert_eq!(supported, BTreeSet::from(REVISIONS));
}

#[test]
fn context_id_normalisation_is_exact() {
    let id = "actx_AAAAAAAAAAAAAAAAAAAAAA";
    assert_eq!(
        normalize_context_ids(&format!("\"{id}\"")),
        "\"actx_<random>\""
    );
    assert_eq!(normalize_context_ids("actx_short"), "actx_short");
    assert_eq!(
        normalize_context_ids("actx_AAAAAAAAAAAAAAAAAAAAAAA"),
        "actx_AAAAAAAAAAAAAAAAAAAAAAA",
        "23 characters"
    );
    assert_eq!(
        normalize_context_ids("actx_unavailable"),
        "actx_unavailable"
    );
    assert!(is_context_id(id) && !is_context_id("actx_unavailable"));
}

#[test]
fn task_id_normalisation_is_exact() {
    let id = "tsk_AAAAAAAAAAAAAAAAAAAA-_";
    assert_eq!(normalize_task_ids(&format!("\"{id}\"")), "\"tsk_<random>\"");
    assert_eq!(normalize_task_ids("tsk_short"), "tsk_short");
    assert_eq!(
        normalize_task_ids("tsk_AAAAAAAAAAAAAAAAAAAAA"),
        "tsk_AAAAAAAAAAAAAAAAAAAAA",
        "21 characters"
    );
    assert_eq!(
        normalize_task_ids("tsk_AAAAAAAAAAAAAAAAAAAAAAA"),
        "tsk_AAAAAAAAAAAAAAAAAAAAAAA",
        "23 characters"
    );
    assert_eq!(
        normalize_task_ids("tsk_AAAAAAAAAAAAAAAAAAAA+/"),
        "tsk_AAAAAAAAAAAAAAAAAAAA+/",
        "standard base64"
    );
    assert!(
        is_task_id(id) && !is_task_id("tsk_short") && !is_task_id("tsk_AAAAAAAAAAAAAAAAAAAA==")
    );
    // Context ids first: a `tsk_` inside a context id is part of the context id.
    assert_eq!(
        normalize("\"actx_tsk_AAAAAAAAAAAAAAAAAA\" \"tsk_AAAAAAAAAAAAAAAAAAAAAA\""),
        "\"actx_<random>\" \"tsk_<random>\""
    );
}

#[test]
fn timestamp_normalisation_is_exact() {
    for stamp in [
        "2026-11-30T05:53:22Z",
        "2000-02-29T23:59:59Z",
        "1970-01-01T00:00:00Z",
    ] {
        assert!(is_timestamp(stamp), "{stamp}");
        assert_eq!(
            normalize(&format!("{{\"createdAt\":\"{stamp}\"}}")),
            "{\"createdAt\":\"<timestamp>\"}"
        );
    }
    for other in [
        "2026-11-30T05:53:22.123Z",
        "2026-11-30T05:53:22+00:00",
        "2026-11-30T05:53:22z",
        "2026-11-30t05:53:22Z",
        "2026-11-30 05:53:22Z",
        "2026-11-30T05:53Z",
        "2026-13-01T00:00:00Z",
        "2026-02-29T00:00:00Z",
        "1900-02-29T00:00:00Z",
        "2026-04-31T00:00:00Z",
        "2026-11-00T00:00:00Z",
        "2026-11-30T24:00:00Z",
        "2026-11-30T05:60:00Z",
        "2026-11-30T05:53:60Z",
        "12026-11-30T05:53:22Z",
        "2026-11-30T05:53:22ZZ",
        "+026-11-30T05:53:22Z",
        "2026-11-30",
    ] {
        assert_eq!(normalize(other), other, "{other}");
    }
    assert!(!is_timestamp("2026-11-30T05:53:22.1Z"));
}

// ---------------------------------------------------------------------------------------------
// The layer's own round trips, end to end (not fixtures: the state differs on every render)
// ---------------------------------------------------------------------------------------------

/// `request` retried with a new id and `extra` added to (or replacing members of) its params.
fn retry_of(request: &RequestSpec, id: i64, extra: Value) -> RequestSpec {
    let mut retry = request.clone();
    retry.body["id"] = json!(id);
    let params = retry.body["params"].as_object_mut().expect("params");
    for (key, value) in extra.as_object().expect("extra params") {
        params.insert(key.clone(), value.clone());
    }
    retry
}

/// The same request presented with another bearer token.
fn with_token(request: &RequestSpec, token: &str) -> RequestSpec {
    let mut other = request.clone();
    other
        .headers
        .insert("authorization".into(), format!("Bearer {token}"));
    other
}

/// Flips the first character of a state's tag (the first character, so that the tag still
/// decodes: the last character of unpadded base64url carries spare bits a decoder may refuse).
fn tamper(state: &str) -> String {
    let at = state.rfind('.').expect("a tag") + 1;
    let flipped = if state.as_bytes()[at] == b'A' {
        "B"
    } else {
        "A"
    };
    format!("{}{flipped}{}", &state[..at], &state[at + 1..])
}

/// Sends `request`; the answer must be an `InputRequiredResult` with a well-formed state, which
/// is returned. The inner handler is not reached.
async fn expect_input_required(harness: &Harness, request: &RequestSpec, key: &str) -> String {
    let before = harness.hits();
    let reply = harness.send(&request.headers, &request.body).await;
    assert_eq!(harness.hits(), before, "{}", reply.body);
    assert_eq!(reply.status, 200, "{}", reply.body);
    let body = reply.json();
    assert_eq!(body["id"], request.body["id"], "{}", reply.body);
    assert_eq!(
        body["result"]["resultType"], "input_required",
        "{}",
        reply.body
    );
    assert!(
        body["result"]["inputRequests"].get(key).is_some(),
        "{key}: {}",
        reply.body
    );
    let state = request_state(&body).expect("a requestState").to_owned();
    assert!(is_request_state(&state), "{state}");
    state
}

/// Sends `request`; the layer must refuse the presented state with HTTP 400, `-32602` and
/// `message`, before the policy runs and without reaching the inner handler.
async fn expect_state_refused(harness: &Harness, request: &RequestSpec, message: &str) {
    let (hits, evaluations) = (harness.hits(), harness.evaluations());
    let reply = harness.send(&request.headers, &request.body).await;
    assert_eq!(reply.status, 400, "{message}: {}", reply.body);
    let body = reply.json();
    assert_eq!(body["error"]["code"], -32602, "{}", reply.body);
    assert_eq!(body["error"]["message"], message, "{}", reply.body);
    assert_eq!(body["id"], request.body["id"], "{}", reply.body);
    assert!(envelope(&body).is_none(), "{}", reply.body);
    assert_eq!(
        harness.hits(),
        hits,
        "{message}: the inner handler was reached"
    );
    assert_eq!(
        harness.evaluations(),
        evaluations,
        "{message}: the policy ran"
    );
}

/// What the inner handler received last, checked for the layer's leftovers: no `requestState`
/// unless `app_state` is given, no `mcp-gate/` input keys, and a `Content-Length` (if any)
/// that matches the body it came with.
fn forwarded(harness: &Harness, app_state: Option<&str>) -> Value {
    let seen = harness.seen.lock().unwrap();
    let (length, body) = seen.last().expect("the inner handler was reached").clone();
    if let Some(length) = length {
        assert_eq!(
            length,
            body.len().to_string(),
            "the forwarded Content-Length does not match the forwarded body: {body}"
        );
    }
    let body: Value = serde_json::from_str(&body).expect("JSON");
    let params = body["params"].as_object().expect("params");
    assert_eq!(
        params.get("requestState").and_then(Value::as_str),
        app_state,
        "{body}"
    );
    assert!(
        !body.to_string().contains(STATE_PREFIX),
        "the layer's state was forwarded: {body}"
    );
    if let Some(responses) = params.get("inputResponses") {
        let responses = responses.as_object().expect("inputResponses is an object");
        assert!(
            responses.keys().all(|k| !k.starts_with("mcp-gate/")),
            "the layer's input keys were forwarded: {body}"
        );
    }
    body
}

/// A confirmation answered with anything but `accept` + `approve: true` is the undisclosed
/// denial of the revision.
fn assert_unconfirmed(revision: &str, reply: &Captured, id: i64, what: &str) {
    assert_eq!(reply.status, 200, "{what}: {}", reply.body);
    let body = reply.json();
    assert_eq!(body["id"], id, "{what}");
    assert!(
        !reply.body.contains("input_required"),
        "{what}: {}",
        reply.body
    );
    let envelope = envelope(&body).unwrap_or_else(|| panic!("{what}: no envelope: {}", reply.body));
    assert_eq!(envelope["reason"], "insufficient_authorization", "{what}");
    assert!(envelope.get("remediationHints").is_none(), "{what}");
    if revision == REV_1C5B {
        assert!(
            body.pointer("/error/data/authorization").is_some(),
            "{what}"
        );
        assert!(envelope.get("remediation").is_none(), "{what}");
    } else {
        assert_eq!(
            envelope["remediation"], "undisclosed",
            "{what}: {}",
            reply.body
        );
        assert_eq!(body["result"]["isError"], true, "{what}");
        assert_eq!(body["result"]["resultType"], "complete", "{what}");
    }
    let text = body
        .pointer("/result/content/0/text")
        .or_else(|| body.pointer("/error/message"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    assert!(text.contains("not confirmed"), "{what}: {text}");
}

/// A modern `ask` on `tools/call`: confirmed, the call reaches the inner handler exactly once,
/// without the layer's state or keys; every other answer is the undisclosed denial; a
/// tampered state, a state for other arguments and a state presented by another principal
/// are refused before the policy runs.
#[tokio::test]
async fn a_confirmation_round_trip_through_the_layer() {
    let other_principal = KEY.mint(&{
        let mut claims = claims(ISSUER, RESOURCE, ENDPOINT_SCOPE);
        claims["sub"] = json!("user-2");
        claims
    });
    for revision in REVISIONS {
        // Single use (the default): a state answers once, then is refused.
        let strict = Harness::new(
            revision,
            &Config::default(),
            Decision::ask("Delete workspace ws_1 and everything in it?"),
        )
        .unwrap();
        let first =
            parse_request(&request_for(&modern_form(), &delete_workspace(), json!(84))).unwrap();
        let state = expect_input_required(&strict, &first, "mcp-gate/confirm").await;
        let decline = json!({"inputResponses": {"mcp-gate/confirm": {"action": "decline"}}, "requestState": state});
        let reply = strict.deny(&retry_of(&first, 90, decline.clone())).await;
        assert_unconfirmed(revision, &reply, 90, &format!("{revision}: first use"));
        expect_state_refused(
            &strict,
            &retry_of(&first, 91, decline),
            "the request state was already used",
        )
        .await;

        // The answers below replay one state, so this harness lets states be reused.
        let harness = Harness::new(
            revision,
            &Config {
                reusable_state: true,
                ..Config::default()
            },
            Decision::ask("Delete workspace ws_1 and everything in it?"),
        )
        .unwrap();
        let state = expect_input_required(&harness, &first, "mcp-gate/confirm").await;
        // The same request asked twice gets two different states (fresh nonce).
        let again = expect_input_required(&harness, &first, "mcp-gate/confirm").await;
        assert_ne!(state, again, "{revision}: states repeat");

        // Every answer but an explicit approval is a denial, and reaches nothing.
        let answers = [
            (
                "decline",
                json!({"inputResponses": {"mcp-gate/confirm": {"action": "decline"}}}),
            ),
            (
                "cancel",
                json!({"inputResponses": {"mcp-gate/confirm": {"action": "cancel"}}}),
            ),
            (
                "accept with approve false",
                json!({"inputResponses": {"mcp-gate/confirm": {"action": "accept", "content": {"approve": false}}}}),
            ),
            (
                "accept without approve",
                json!({"inputResponses": {"mcp-gate/confirm": {"action": "accept", "content": {}}}}),
            ),
            (
                "accept without content",
                json!({"inputResponses": {"mcp-gate/confirm": {"action": "accept"}}}),
            ),
            (
                "accept with approve \"true\" (a string)",
                json!({"inputResponses": {"mcp-gate/confirm": {"action": "accept", "content": {"approve": "true"}}}}),
            ),
            (
                "a response under another key",
                json!({"inputResponses": {"confirm": {"action": "accept", "content": {"approve": true}}}}),
            ),
            ("no inputResponses at all", json!({})),
        ];
        for (offset, (what, extra)) in answers.into_iter().enumerate() {
            let id = 100 + offset as i64;
            let mut extra = extra;
            extra["requestState"] = json!(state);
            let retry = retry_of(&first, id, extra);
            let reply = harness.deny(&retry).await;
            assert_unconfirmed(revision, &reply, id, &format!("{revision}: {what}"));
        }

        let accept = json!({
            "inputResponses": {"mcp-gate/confirm": {"action": "accept", "content": {"approve": true}}},
            "requestState": state,
        });
        // A tampered state: one character of the tag changed.
        let mut tampered = accept.clone();
        tampered["requestState"] = json!(tamper(&state));
        expect_state_refused(
            &harness,
            &retry_of(&first, 120, tampered),
            "the request state was tampered with",
        )
        .await;
        // The same state for other arguments.
        let mut other_call = accept.clone();
        other_call["arguments"] = json!({"workspace": "ws_2"});
        expect_state_refused(
            &harness,
            &retry_of(&first, 121, other_call),
            "the request state was issued for another request",
        )
        .await;
        // The same state presented by another principal.
        expect_state_refused(
            &harness,
            &with_token(&retry_of(&first, 122, accept.clone()), &other_principal),
            "the request state belongs to another principal",
        )
        .await;
        assert_eq!(
            harness.hits(),
            0,
            "{revision}: nothing reached the inner handler yet"
        );

        // The approval: the call goes through, once, without the layer's state or keys.
        let evaluations = harness.evaluations();
        let retry = retry_of(&first, 130, accept);
        let reply = harness.send(&retry.headers, &retry.body).await;
        assert_eq!(reply.status, 200, "{revision}: {}", reply.body);
        assert_eq!(
            reply.json(),
            json!({"jsonrpc": "2.0", "id": 130, "result": {"reached": "inner"}}),
            "{revision}"
        );
        assert_eq!(
            harness.hits(),
            1,
            "{revision}: the inner handler runs exactly once"
        );
        assert_eq!(
            harness.evaluations(),
            evaluations + 1,
            "{revision}: evaluated once"
        );
        let body = forwarded(&harness, None);
        assert!(
            body["params"].get("inputResponses").is_none(),
            "{revision}: {body}"
        );
        assert_eq!(body["id"], 130, "{revision}");
        assert_eq!(body["method"], "tools/call", "{revision}");
        assert_eq!(
            body["params"]["name"], first.body["params"]["name"],
            "{revision}"
        );
        assert_eq!(
            body["params"]["arguments"], first.body["params"]["arguments"],
            "{revision}"
        );
        assert_eq!(
            body["params"]["_meta"], first.body["params"]["_meta"],
            "{revision}"
        );
    }
}

/// The application's own `requestState` and `inputResponses`, present when the layer asked
/// for its confirmation, are handed to the inner handler after the confirmation, in place of
/// the layer's.
#[tokio::test]
async fn a_confirmation_carries_the_applications_own_state_through() {
    let harness = Harness::new(
        REV_CURRENT,
        &Config::default(),
        Decision::ask("Delete workspace ws_1 and everything in it?"),
    )
    .unwrap();
    let app_inputs = json!({"app/choice": {"action": "accept", "content": {"mode": "soft"}}});
    let base = parse_request(&request_for(&modern_form(), &delete_workspace(), json!(1))).unwrap();
    let first = retry_of(
        &base,
        1,
        json!({"requestState": "app-state-1", "inputResponses": app_inputs}),
    );
    let state = expect_input_required(&harness, &first, "mcp-gate/confirm").await;
    let retry = retry_of(
        &base,
        2,
        json!({
            "inputResponses": {"mcp-gate/confirm": {"action": "accept", "content": {"approve": true}}},
            "requestState": state,
        }),
    );
    let reply = harness.send(&retry.headers, &retry.body).await;
    assert_eq!(reply.json()["result"]["reached"], "inner", "{}", reply.body);
    assert_eq!(harness.hits(), 1);
    let body = forwarded(&harness, Some("app-state-1"));
    assert_eq!(body["params"]["inputResponses"], app_inputs, "{body}");
}

/// A modern URL remedy on `tools/call`: the policy sees the answer through
/// `Evaluation::answered` only on a retry carrying a verified state, and decides. A declined
/// URL is asked again, up to the round limit (3 by default), then the answer is undisclosed.
/// The error-based revision never starts the round trip.
#[tokio::test]
async fn a_url_round_trip_through_the_layer() {
    use mcp_gate::policy::{InputAction, Interaction};
    let policy = |evaluation: &Evaluation| match evaluation.answered() {
        Some(answered)
            if answered.interaction() == Interaction::Url
                && answered.input_key() == "approve_folder"
                && answered.action() == InputAction::Accept =>
        {
            // A real policy checks its own record of the approval here: `accept` only means
            // the user agreed to open the page.
            Decision::allow()
        }
        _ => Remediation::url(
            "https://mcp.example.com/approve/fld_77",
            "Approve access to this folder, then retry.",
        )
        .input_key("approve_folder")
        .into(),
    };
    let first = parse_request(&request_for(&modern_url(), &list_folder(), json!(64))).unwrap();
    for revision in [REV_CURRENT, REV_6BFF] {
        let harness = Harness::with_policy(revision, &Config::default(), policy).unwrap();
        let key = "mcp-gate/approve_folder";
        let mut state = expect_input_required(&harness, &first, key).await;
        // Declined twice: asked again each time (rounds 2 and 3), then undisclosed.
        for (round, id) in [(2, 65), (3, 66)] {
            let retry = retry_of(
                &first,
                id,
                json!({"inputResponses": {key: {"action": "decline"}}, "requestState": state}),
            );
            let next = expect_input_required(&harness, &retry, key).await;
            assert_ne!(
                next, state,
                "{revision}: round {round} has a state of its own"
            );
            state = next;
        }
        let retry = retry_of(
            &first,
            67,
            json!({"inputResponses": {key: {"action": "decline"}}, "requestState": state}),
        );
        let reply = harness.deny(&retry).await;
        let envelope = envelope(&reply.json()).cloned().expect("an envelope");
        assert_eq!(
            envelope["remediation"], "undisclosed",
            "{revision}: {}",
            reply.body
        );
        assert!(
            reply
                .body
                .contains("https://mcp.example.com/approve/fld_77"),
            "{}",
            reply.body
        );

        // A fresh call, accepted on its first retry: forwarded once, without the layer's parts.
        let state = expect_input_required(&harness, &first, key).await;
        let retry = retry_of(
            &first,
            68,
            json!({"inputResponses": {key: {"action": "accept"}}, "requestState": state}),
        );
        let reply = harness.send(&retry.headers, &retry.body).await;
        assert_eq!(
            reply.json()["result"]["reached"],
            "inner",
            "{revision}: {}",
            reply.body
        );
        assert_eq!(harness.hits(), 1, "{revision}");
        let body = forwarded(&harness, None);
        assert!(
            body["params"].get("inputResponses").is_none(),
            "{revision}: {body}"
        );
        assert_eq!(
            body["params"]["arguments"],
            first.body["params"]["arguments"]
        );
    }
    // Under the error-based revision there is no round trip to continue.
    let harness = Harness::with_policy(REV_1C5B, &Config::default(), policy).unwrap();
    let reply = harness.deny(&first).await;
    assert!(!reply.body.contains("input_required"), "{}", reply.body);
    assert!(
        reply.json().pointer("/error/data/authorization").is_some(),
        "{}",
        reply.body
    );
}

#[test]
fn state_normalisation_is_exact() {
    let payload = URL_SAFE_NO_PAD.encode(br#"{"exp":1}"#);
    let tag = URL_SAFE_NO_PAD.encode([7u8; 32]);
    let state = format!("mcpgate1.ephemeral.{payload}.{tag}");
    assert!(is_request_state(&state));
    assert_eq!(
        normalize(&format!("{{\"requestState\":\"{state}\"}}")),
        "{\"requestState\":\"mcpgate1.<state>\"}"
    );
    for malformed in [
        format!("mcpgate1.ephemeral.{payload}"),
        format!("mcpgate1.ephemeral.{payload}.{tag}.extra"),
        format!("mcpgate1..{payload}.{tag}"),
        format!(
            "mcpgate1.ephemeral.{payload}.{}",
            URL_SAFE_NO_PAD.encode([7u8; 31])
        ),
        format!(
            "mcpgate1.ephemeral.{}.{tag}",
            URL_SAFE_NO_PAD.encode(b"[1]")
        ),
        format!("mcpgate1.ephemeral.{payload}=.{tag}"),
    ] {
        assert!(!is_request_state(&malformed), "{malformed}");
        assert_ne!(normalize(&malformed), STATE_PLACEHOLDER, "{malformed}");
    }
    assert_eq!(normalize("mcpgate1."), "mcpgate1.");
}

// ---------------------------------------------------------------------------------------------
// Exchanges: the layer's own round trips, every leg stored and replayed like the fixtures
// ---------------------------------------------------------------------------------------------

/// What the first leg of every exchange says: it is the fixture of the same case.
const FIRST_LEG: &str =
    "The first leg: the request and the response of the fixture of the same case name.";

fn exchanges_dir(revision: &str) -> PathBuf {
    spec_dir().join(revision).join("exchanges")
}

/// One leg of an exchange, as the table defines it and the file stores it: what happens off
/// the wire before it, what the policy returns if the layer asks it during the leg (`None`:
/// the layer must not ask), and the request, where `mcpgate1.<state>` stands for the
/// `requestState` of the previous leg's response and `tsk_<random>` for the task id of the
/// exchange's `CreateTaskResult`.
#[derive(Clone, Debug, PartialEq)]
struct LegInput {
    title: String,
    description: String,
    before: Option<Value>,
    decision: Option<Value>,
    request: Value,
}

/// What the layer did in one leg, normalised like a fixture's response.
#[derive(Clone, Debug, PartialEq)]
struct LegOutput {
    /// What the policy saw (`phase`, and `answered` or `approval` when there is one); `None`
    /// when the layer did not ask it.
    evaluation: Option<Value>,
    /// The body the inner handler received, if the leg reached it.
    forwarded: Option<String>,
    response: Expected,
}

/// An exchange of the table: a fixture case continued by further legs.
#[derive(Clone, Debug)]
struct ExchangeCase {
    /// `<case>--<outcome>`.
    name: String,
    case: Case,
    description: String,
    /// The legs after the first (the first is the case's own request and decision).
    later: Vec<LegInput>,
    revisions: Vec<&'static str>,
}

impl ExchangeCase {
    fn legs(&self) -> Vec<LegInput> {
        let first = LegInput {
            title: "The call".into(),
            description: FIRST_LEG.into(),
            before: None,
            decision: Some(self.case.decision.clone()),
            request: self.case.request.clone(),
        };
        std::iter::once(first)
            .chain(self.later.iter().cloned())
            .collect()
    }
}

fn leg(
    title: &str,
    description: &str,
    before: Option<Value>,
    decision: Option<Value>,
    request: Value,
) -> LegInput {
    LegInput {
        title: title.into(),
        description: description.into(),
        before,
        decision,
        request,
    }
}

/// The case's request again with a new id and `extra` merged into its params.
fn retry_request(case: &Case, id: i64, extra: Value) -> Value {
    let mut request = case.request.clone();
    request["body"]["id"] = json!(id);
    let params = request["body"]["params"].as_object_mut().expect("params");
    for (key, value) in extra.as_object().expect("extra params") {
        params.insert(key.clone(), value.clone());
    }
    request
}

/// The retry's own params: the layer's state and one answer under the layer's key.
fn answering(key: &str, response: Value) -> Value {
    json!({"requestState": STATE_PLACEHOLDER, "inputResponses": {key: response}})
}

/// The owner's `tasks/get` for the exchange's task, declaring the Tasks extension.
fn poll_request(id: i64) -> Value {
    let op = Op {
        label: "tasks-get",
        method: "tasks/get",
        name: TASK_ID_PLACEHOLDER,
        params: json!({"taskId": TASK_ID_PLACEHOLDER}),
    };
    request_for(&modern_tasks(), &op, json!(id))
}

/// The exchange table: for each first leg that starts a round trip of the layer's, the legs
/// that follow it.
fn exchange_cases() -> Vec<ExchangeCase> {
    let table = cases();
    let case = |name: &str| {
        table
            .iter()
            .find(|c| c.name == name)
            .unwrap_or_else(|| panic!("no case {name}"))
            .clone()
    };
    let ask = case("ask--modern-form-elicitation--tools-call");
    let url = case("url--modern-url-elicitation--tools-call");
    let task = case("task--modern-tasks-extension--tools-call");
    let result_based = vec![REV_CURRENT, REV_6BFF];
    let confirm = "mcp-gate/confirm";
    let approval = "mcp-gate/approve_folder";
    let allow = || Some(json!({"allow": {}}));
    let approved_retry = leg(
        "The retry, after the approval",
        "The same call again, with a new JSON-RPC id, the `requestState` of the previous response and `accept` under `mcp-gate/approve_folder` (the decision's input key). The policy sees the answer (`Evaluation::answered()`), checks its own record of the approval (here it finds one) and returns `allow`. The layer forwards the call without its state and input key, and the inner server's result comes back untouched.",
        None,
        allow(),
        retry_request(&url, 164, answering(approval, json!({"action": "accept"}))),
    );
    let mut list = vec![
        ExchangeCase {
            name: format!("{}--confirmed", ask.name),
            description: "The confirmation round trip, confirmed: the user accepts with `approve: true`, and the call reaches the inner server once.".into(),
            later: vec![leg(
                "The retry, confirmed",
                "The same call again, with a new JSON-RPC id, the `requestState` of the previous response, and the user's answer under `mcp-gate/confirm`: `accept` with `content: {approve: true}`. The policy is asked again and returns the same `ask`; the layer sees the confirmation, removes its state and input key, and forwards the call. The inner server's result comes back untouched.",
                None,
                Some(ask.decision.clone()),
                retry_request(
                    &ask,
                    184,
                    answering(confirm, json!({"action": "accept", "content": {"approve": true}})),
                ),
            )],
            case: ask.clone(),
            revisions: REVISIONS.to_vec(),
        },
        ExchangeCase {
            name: format!("{}--declined", ask.name),
            description: "The confirmation round trip, declined: the user declines, and the call ends with the revision's `undisclosed` denial without reaching the inner server.".into(),
            later: vec![leg(
                "The retry, declined",
                "The same call again, with a new JSON-RPC id, the `requestState` of the previous response, and `decline` under `mcp-gate/confirm`. The policy is asked again and returns the same `ask`. Anything but `accept` with `approve: true` (`decline`, `cancel`, `approve: false`, no answer) gets the revision's `undisclosed` denial, and the inner server is not reached.",
                None,
                Some(ask.decision.clone()),
                retry_request(&ask, 184, answering(confirm, json!({"action": "decline"}))),
            )],
            case: ask.clone(),
            revisions: REVISIONS.to_vec(),
        },
        ExchangeCase {
            name: format!("{}--approved", url.name),
            description: "The URL round trip, approved: the user approves on the page, the application records it, and the retry reaches the inner server.".into(),
            later: vec![approved_retry.clone()],
            case: url.clone(),
            revisions: result_based.clone(),
        },
        ExchangeCase {
            name: format!("{}--retried-before-approval", url.name),
            description: "The URL round trip, retried before the application recorded the approval: the layer asks again with a new state, and the retry after the approval reaches the inner server.".into(),
            later: vec![
                leg(
                    "The retry, before the approval is recorded",
                    "The same call again with the `requestState` and `accept` under `mcp-gate/approve_folder`, sent before the user finished on the page. The policy sees the answer, finds no approval in its own record and returns the same `url` decision; the layer asks again with a new `requestState` (round 2). After the third round (the default limit) it answers `undisclosed` instead.",
                    None,
                    Some(url.decision.clone()),
                    retry_request(&url, 164, answering(approval, json!({"action": "accept"}))),
                ),
                LegInput {
                    description: "The call again, with the `requestState` of the latest response (each state answers one retry). This time the policy finds the approval and returns `allow`; the layer forwards the call without its state and input key, and the inner server's result comes back untouched.".into(),
                    request: retry_request(&url, 165, answering(approval, json!({"action": "accept"}))),
                    ..approved_retry
                },
            ],
            case: url.clone(),
            revisions: result_based.clone(),
        },
        ExchangeCase {
            name: format!("{}--approved", task.name),
            description: "The held task, approved: the owner polls while it waits, an approver approves it, and the next poll runs the call once and returns its result.".into(),
            later: vec![
                leg(
                    "The poll, while the task waits",
                    "The owner polls with `tasks/get`: the task id of the `CreateTaskResult` in `params.taskId` and in `Mcp-Name`, and `_meta` with the protocol version and client capabilities declaring the Tasks extension (without it the layer answers `-32021`; another principal, or an id the store does not know, gets `-32602` \"Unknown task\"). The layer answers from its task store: status `working`, with the envelope of the `CreateTaskResult`.",
                    None,
                    None,
                    poll_request(172),
                ),
                leg(
                    "The poll after the approval",
                    "Before this poll an approver approved the task out of band, with `gate.tasks().approve(task_id, \"release-manager\")`, which sends nothing. The poll claims the task, asks the policy again in the approval phase (`Evaluation::approval()` names the task and the approver; only `allow` runs the call), and runs the held call once through the inner server, as a `tools/call` whose JSON-RPC id is the task id and whose client capabilities are empty. The answer is the completed task, with the inner server's result in `result` and no envelope.",
                    Some(json!({"approve_task": {"by": "release-manager"}})),
                    allow(),
                    poll_request(173),
                ),
                leg(
                    "The poll after that",
                    "Every later poll returns the same completed task from the store: the call does not run again.",
                    None,
                    None,
                    poll_request(174),
                ),
            ],
            case: task.clone(),
            revisions: result_based.clone(),
        },
        ExchangeCase {
            name: format!("{}--refused", task.name),
            description: "The held task, refused: an approver refuses it, and the next poll returns the completed task with an `unavailable` result; the call never runs.".into(),
            later: vec![leg(
                "The poll after the refusal",
                "Before this poll an approver refused the task out of band, with `gate.tasks().refuse(task_id, \"change freeze\")`. The poll returns the completed task; its `result` is a tool result with `isError: true`, the reason in the text, and the envelope with `remediation: unavailable` and the task's context id. The call never runs.",
                Some(json!({"refuse_task": {"reason": "change freeze"}})),
                None,
                poll_request(172),
            )],
            case: task,
            revisions: result_based,
        },
    ];
    list.sort_by(|a, b| a.name.cmp(&b.name));
    list
}

/// What the exchange's policy returns during the current leg, and what it was shown.
#[derive(Default)]
struct Script {
    decision: Option<Decision>,
    evaluations: Vec<Value>,
}

/// What the policy was shown, as stored: the phase, and the retry's answer or the approval.
fn evaluation_seen(evaluation: &Evaluation) -> Value {
    use mcp_gate::policy::Phase;
    let phase = match evaluation.phase() {
        Phase::Invocation => "invocation",
        Phase::Discovery => "discovery",
        Phase::Approval => "approval",
        _ => "another phase",
    };
    let mut seen = json!({"phase": phase});
    if let Some(answered) = evaluation.answered() {
        seen["answered"] = json!({
            "interaction": serde_json::to_value(answered.interaction()).expect("serialises"),
            "input_key": answered.input_key(),
            "action": format!("{:?}", answered.action()).to_lowercase(),
            "confirmed": answered.confirmed(),
            "round": answered.round(),
        });
    }
    if let Some(approval) = evaluation.approval() {
        seen["approval"] =
            json!({"task_id": approval.task_id, "approved_by": approval.approved_by});
    }
    serde_json::from_str(&normalize(&seen.to_string())).expect("still JSON")
}

/// `value` with the placeholders of a leg's request replaced by the exchange's own values.
fn fill(value: &Value, state: Option<&str>, task: Option<&str>) -> Result<Value, String> {
    Ok(match value {
        Value::String(s) if s == STATE_PLACEHOLDER => json!(
            state.ok_or("the request uses the state, but the previous response carries none")?
        ),
        Value::String(s) if s == TASK_ID_PLACEHOLDER => {
            json!(task.ok_or("the request uses the task id, but no task was created")?)
        }
        Value::Array(items) => Value::Array(
            items
                .iter()
                .map(|item| fill(item, state, task))
                .collect::<Result<_, _>>()?,
        ),
        Value::Object(members) => Value::Object(
            members
                .iter()
                .map(|(k, v)| Ok((k.clone(), fill(v, state, task)?)))
                .collect::<Result<_, String>>()?,
        ),
        other => other.clone(),
    })
}

/// Decides the exchange's task out of band, as an approver would.
async fn decide_task(harness: &Harness, before: &Value, task: Option<&str>) -> Result<(), String> {
    let (action, options) = before
        .as_object()
        .filter(|o| o.len() == 1)
        .and_then(|o| o.iter().next())
        .ok_or("before must be an object with exactly one member")?;
    let task = task.ok_or("no task to decide")?;
    let option = |name: &str| {
        options
            .as_object()
            .filter(|o| o.len() == 1)
            .and_then(|o| o.get(name))
            .and_then(Value::as_str)
            .ok_or(format!(
                "before.{action} must be {{\"{name}\": \"<text>\"}}"
            ))
    };
    let decided = match action.as_str() {
        "approve_task" => harness.gate.tasks().approve(task, option("by")?).await,
        "refuse_task" => harness.gate.tasks().refuse(task, option("reason")?).await,
        other => return Err(format!("before: unknown action {other:?}")),
    };
    decided.map(drop).map_err(|e| e.to_string())
}

/// Problems with the random handles in a body before normalisation: every `requestState`,
/// `authorizationContextId`, `taskId`, `createdAt` and `lastUpdatedAt`, wherever it is, must
/// have the layer's form.
fn handle_problems(value: &Value, problems: &mut Vec<String>) {
    match value {
        Value::Object(members) => {
            for (key, member) in members {
                let text = member.as_str().unwrap_or_default();
                let well_formed = match key.as_str() {
                    "requestState" => is_request_state(text),
                    "authorizationContextId" => is_context_id(text),
                    "taskId" => is_task_id(text),
                    "createdAt" | "lastUpdatedAt" => is_timestamp(text),
                    _ => true,
                };
                if !well_formed {
                    problems.push(format!("{key} {member} is not of the layer's form"));
                }
                handle_problems(member, problems);
            }
        }
        Value::Array(items) => items
            .iter()
            .for_each(|item| handle_problems(item, problems)),
        _ => {}
    }
}

/// Runs every leg of an exchange through one gate, in order.
async fn run_exchange(
    revision: &str,
    config: &Config,
    legs: &[LegInput],
) -> Result<Vec<LegOutput>, String> {
    let script: Arc<Mutex<Script>> = Arc::default();
    let policy = script.clone();
    let harness = Harness::assemble(
        revision,
        config,
        move |evaluation: &Evaluation| {
            let mut script = policy.lock().unwrap();
            script.evaluations.push(evaluation_seen(evaluation));
            script
                .decision
                .clone()
                .unwrap_or_else(|| Decision::undisclosed("this leg does not expect the policy"))
        },
        true,
    )
    .map_err(|e| format!("the gate does not build: {e}"))?;
    let (mut state, mut task): (Option<String>, Option<String>) = (None, None);
    let mut outputs = Vec::new();
    for (n, leg) in legs.iter().enumerate() {
        let at = |problem: String| format!("leg {}: {problem}", n + 1);
        if let Some(before) = &leg.before {
            decide_task(&harness, before, task.as_deref())
                .await
                .map_err(|e| at(format!("before: {e}")))?;
        }
        let decision = leg.decision.as_ref().map(parse_decision).transpose();
        {
            let mut script = script.lock().unwrap();
            script.decision = decision.map_err(at)?;
            script.evaluations.clear();
        }
        let filled = fill(&leg.request, state.as_deref(), task.as_deref()).map_err(at)?;
        let request = parse_request(&filled).map_err(at)?;
        if request.initialize.is_some() {
            return Err(at("a leg cannot set up a legacy session".into()));
        }
        let reached = harness.seen.lock().unwrap().len();
        let reply = harness.send(&request.headers, &request.body).await;
        let asked = std::mem::take(&mut script.lock().unwrap().evaluations);
        let evaluation = match (asked.as_slice(), leg.decision.is_some()) {
            ([], false) => None,
            ([one], true) => Some(one.clone()),
            (asked, expected) => {
                return Err(at(format!(
                    "the policy was asked {} times; the leg expects {}",
                    asked.len(),
                    usize::from(expected)
                )));
            }
        };
        let forwarded = match &harness.seen.lock().unwrap()[reached..] {
            [] => None,
            [(length, body)] => {
                if length
                    .as_ref()
                    .is_some_and(|l| *l != body.len().to_string())
                {
                    return Err(at(format!("forwarded with a wrong Content-Length: {body}")));
                }
                if body.contains(STATE_PREFIX) || body.contains("\"mcp-gate/") {
                    return Err(at(format!(
                        "the layer's state or input keys were forwarded: {body}"
                    )));
                }
                Some(body.clone())
            }
            more => return Err(at(format!("the inner handler ran {} times", more.len()))),
        };
        let body = reply.json();
        if body.get("id") != request.body.get("id") {
            return Err(at(format!(
                "the response's id is not the request's: {}",
                reply.body
            )));
        }
        let mut problems = Vec::new();
        handle_problems(&body, &mut problems);
        if let Some(forwarded) = &forwarded {
            let forwarded = serde_json::from_str(forwarded).unwrap_or(Value::Null);
            handle_problems(&forwarded, &mut problems);
        }
        if !problems.is_empty() {
            return Err(at(problems.join("; ")));
        }
        state = request_state(&body).map(str::to_owned);
        if body.pointer("/result/resultType") == Some(&json!("task")) {
            task = body
                .pointer("/result/taskId")
                .and_then(Value::as_str)
                .map(str::to_owned);
        }
        outputs.push(LegOutput {
            evaluation,
            forwarded: forwarded.as_deref().map(normalize),
            response: reply.normalized(),
        });
    }
    let problems = harness.audit_problems();
    if !problems.is_empty() {
        return Err(problems.join("; "));
    }
    Ok(outputs)
}

/// One leg as the exchange file stores it.
fn leg_json(input: &LegInput, output: &LegOutput) -> Value {
    let parsed = |body: &str| serde_json::from_str::<Value>(body).expect("JSON");
    let mut leg = json!({
        "title": input.title,
        "description": input.description,
        "policy": match (&input.decision, &output.evaluation) {
            (Some(decision), Some(evaluation)) => {
                json!({"decision": decision, "evaluation": evaluation})
            }
            _ => Value::Null,
        },
        "request": input.request,
        "forwarded": output.forwarded.as_ref().map(|body| json!({
            "body": body,
            "body_json": parsed(body),
        })),
        "response": {
            "status": output.response.status,
            "headers": output.response.headers,
            "body": output.response.body,
            "body_json": parsed(&output.response.body),
        },
    });
    if let Some(before) = &input.before {
        leg["before"] = before.clone();
    }
    leg
}

/// Regenerates every exchange file from [`exchange_cases`].
async fn bless_exchanges() {
    for exchange in exchange_cases() {
        let legs = exchange.legs();
        let config = parse_config(&exchange.case.config).expect("config");
        for revision in &exchange.revisions {
            let outputs = run_exchange(revision, &config, &legs)
                .await
                .unwrap_or_else(|e| panic!("{revision}/{}: {e}", exchange.name));
            let stored: Vec<Value> = legs
                .iter()
                .zip(&outputs)
                .map(|(input, output)| leg_json(input, output))
                .collect();
            let file = json!({
                "exchange": exchange.name,
                "case": exchange.case.name,
                "description": exchange.description,
                "config": exchange.case.config,
                "legs": stored,
            });
            let dir = exchanges_dir(revision);
            std::fs::create_dir_all(&dir).expect("exchanges dir");
            let path = dir.join(format!("{}.json", exchange.name));
            let text = serde_json::to_string_pretty(&file).expect("json") + "\n";
            let temp = path.with_extension("json.tmp");
            std::fs::write(&temp, text).expect("write exchange");
            std::fs::rename(&temp, &path).expect("rename exchange");
        }
    }
}

/// One parsed exchange file.
#[derive(Clone, Debug)]
struct Exchange {
    file: PathBuf,
    revision: String,
    name: String,
    case: String,
    description: String,
    config_dsl: Value,
    config: Config,
    legs: Vec<(LegInput, LegOutput)>,
}

fn parse_leg(value: &Value) -> Result<(LegInput, LegOutput), String> {
    let object = value.as_object().ok_or("a leg is an object")?;
    only_keys(
        object,
        &[
            "title",
            "description",
            "before",
            "policy",
            "request",
            "forwarded",
            "response",
        ],
        "leg",
    )?;
    let text = |name: &str| string(object.get(name).unwrap_or(&Value::Null), name);
    let (decision, evaluation) = match object.get("policy") {
        Some(Value::Null) => (None, None),
        Some(Value::Object(policy)) => {
            only_keys(policy, &["decision", "evaluation"], "policy")?;
            let decision = policy.get("decision").ok_or("policy.decision is missing")?;
            parse_decision(decision)?;
            let evaluation = policy
                .get("evaluation")
                .filter(|e| e.is_object())
                .ok_or("policy.evaluation must be an object")?;
            (Some(decision.clone()), Some(evaluation.clone()))
        }
        _ => return Err("policy must be null or {decision, evaluation}".into()),
    };
    let request = object.get("request").ok_or("request is missing")?.clone();
    parse_request(&request)?;
    let forwarded = match object.get("forwarded") {
        Some(Value::Null) => None,
        Some(Value::Object(forwarded)) => {
            only_keys(forwarded, &["body", "body_json"], "forwarded")?;
            let body = string(
                forwarded.get("body").unwrap_or(&Value::Null),
                "forwarded.body",
            )?;
            let parsed: Value = serde_json::from_str(&body)
                .map_err(|e| format!("forwarded.body is not JSON: {e}"))?;
            if forwarded.get("body_json") != Some(&parsed) {
                return Err("forwarded.body_json is not forwarded.body parsed".into());
            }
            Some(body)
        }
        _ => return Err("forwarded must be null or {body, body_json}".into()),
    };
    let response = parse_response(object.get("response").ok_or("response is missing")?)?;
    Ok((
        LegInput {
            title: text("title")?,
            description: text("description")?,
            before: object.get("before").cloned(),
            decision,
            request,
        },
        LegOutput {
            evaluation,
            forwarded,
            response,
        },
    ))
}

fn parse_exchange(file: &Path, revision: &str) -> Result<Exchange, String> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("unreadable: {e}"))?;
    let value: Value = serde_json::from_str(&text).map_err(|e| format!("not JSON: {e}"))?;
    let object = value.as_object().ok_or("an exchange is a JSON object")?;
    only_keys(
        object,
        &["exchange", "case", "description", "config", "legs"],
        "exchange",
    )?;
    let text = |name: &str| string(object.get(name).unwrap_or(&Value::Null), name);
    let name = text("exchange")?;
    let stem = file
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or_default();
    if name != stem {
        return Err(format!(
            "exchange {name:?} does not match the file name {stem:?}"
        ));
    }
    let case = text("case")?;
    if !name.starts_with(&format!("{case}--")) {
        return Err(format!(
            "exchange {name:?} does not continue its case {case:?}"
        ));
    }
    let config_dsl = object.get("config").ok_or("config is missing")?.clone();
    let config = parse_config(&config_dsl)?;
    let legs = object
        .get("legs")
        .and_then(Value::as_array)
        .ok_or("legs must be an array")?
        .iter()
        .enumerate()
        .map(|(n, leg)| parse_leg(leg).map_err(|e| format!("leg {}: {e}", n + 1)))
        .collect::<Result<Vec<_>, _>>()?;
    if legs.len() < 2 {
        return Err("an exchange has at least two legs".into());
    }
    Ok(Exchange {
        file: file.to_owned(),
        revision: revision.to_owned(),
        name,
        case,
        description: text("description")?,
        config_dsl,
        config,
        legs,
    })
}

/// Every exchange on disk, blessed first when `MCP_GATE_BLESS` is set. A revision without an
/// `exchanges/` folder has none; the table test says whether it should.
fn exchanges() -> &'static [Exchange] {
    static EXCHANGES: OnceLock<Vec<Exchange>> = OnceLock::new();
    EXCHANGES.get_or_init(|| {
        bless_if_asked(bless_exchanges);
        let mut problems = Vec::new();
        let mut exchanges = Vec::new();
        for revision in REVISIONS {
            let dir = exchanges_dir(revision);
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            let mut files: Vec<PathBuf> =
                entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
            files.sort();
            for file in files {
                if file.extension().and_then(|e| e.to_str()) != Some("json") {
                    problems.push(format!("{}: not a .json exchange", file.display()));
                    continue;
                }
                match parse_exchange(&file, revision) {
                    Ok(exchange) => exchanges.push(exchange),
                    Err(problem) => problems.push(format!("{}: {problem}", file.display())),
                }
            }
        }
        assert!(problems.is_empty(), "exchanges:\n{}", problems.join("\n"));
        exchanges
    })
}

#[tokio::test]
async fn every_exchange_matches_the_layer_byte_for_byte() {
    let exchanges = exchanges();
    let mut failures = Vec::new();
    for exchange in exchanges {
        let at = exchange.file.display();
        let inputs: Vec<LegInput> = exchange.legs.iter().map(|(i, _)| i.clone()).collect();
        let actual = match run_exchange(&exchange.revision, &exchange.config, &inputs).await {
            Ok(actual) => actual,
            Err(problem) => {
                failures.push(format!("{at}: {problem}"));
                continue;
            }
        };
        let differences: Vec<String> = exchange
            .legs
            .iter()
            .zip(&actual)
            .enumerate()
            .filter(|(_, ((_, expected), actual))| expected != *actual)
            .map(|(n, ((_, expected), actual))| {
                format!(
                    "  leg {}:\n    expected {expected:?}\n    actual   {actual:?}",
                    n + 1
                )
            })
            .collect();
        if !differences.is_empty() {
            failures.push(format!("{at}:\n{}", differences.join("\n")));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} exchanges differ (if the change is intended, rerun with {BLESS_ENV}=1 and review the diff):\n{}",
        failures.len(),
        exchanges.len(),
        failures.join("\n")
    );
}

/// The files are the table's, each first leg is its fixture, and exchanges exist exactly
/// where the first leg starts a round trip of the layer's.
#[test]
fn exchange_files_and_the_exchange_table_agree() {
    let table = exchange_cases();
    let on_disk: BTreeSet<(String, String)> = exchanges()
        .iter()
        .map(|e| (e.revision.clone(), e.name.clone()))
        .collect();
    let wanted: BTreeSet<(String, String)> = table
        .iter()
        .flat_map(|e| e.revisions.iter().map(|r| (r.to_string(), e.name.clone())))
        .collect();
    let missing: Vec<_> = wanted.difference(&on_disk).collect();
    let stale: Vec<_> = on_disk.difference(&wanted).collect();
    assert!(
        missing.is_empty(),
        "exchanges without a file (run with {BLESS_ENV}=1): {missing:?}"
    );
    assert!(
        stale.is_empty(),
        "exchange files the table does not generate (delete them, or add the exchange): {stale:?}"
    );
    for exchange in &table {
        for revision in REVISIONS {
            let round_trip = matches!(
                exchange.case.shape(revision),
                Shape::Confirmation | Shape::UrlInput | Shape::Task
            );
            assert_eq!(
                exchange.revisions.contains(&revision),
                round_trip,
                "{revision}/{}: an exchange exists exactly where its first leg starts a round trip",
                exchange.name
            );
        }
    }
    let by_name: BTreeMap<&str, &ExchangeCase> =
        table.iter().map(|e| (e.name.as_str(), e)).collect();
    for exchange in exchanges() {
        let at = exchange.file.display();
        let case = by_name[exchange.name.as_str()];
        assert_eq!(exchange.case, case.case.name, "{at}");
        assert_eq!(exchange.description, case.description, "{at}");
        assert_eq!(exchange.config_dsl, case.case.config, "{at}");
        let inputs: Vec<LegInput> = exchange.legs.iter().map(|(i, _)| i.clone()).collect();
        assert_eq!(inputs, case.legs(), "{at}: the legs are not the table's");
        let fixture = fixtures()
            .iter()
            .find(|f| f.revision == exchange.revision && f.case == exchange.case)
            .unwrap_or_else(|| panic!("{at}: no fixture {}", exchange.case));
        let (first, answered) = &exchange.legs[0];
        assert_eq!(first.decision.as_ref(), Some(&fixture.decision_dsl), "{at}");
        assert_eq!(exchange.config, fixture.config, "{at}");
        let request = parse_request(&first.request).expect("parsed at load");
        assert_eq!(request.headers, fixture.request.headers, "{at}");
        assert_eq!(request.body, fixture.request.body, "{at}");
        assert_eq!(
            answered,
            &LegOutput {
                evaluation: Some(json!({"phase": "invocation"})),
                forwarded: None,
                response: fixture.response.clone(),
            },
            "{at}: the first leg is not its fixture"
        );
    }
}
