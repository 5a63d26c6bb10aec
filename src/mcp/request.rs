//! JSON-RPC classification of one MCP message, failing closed.
//!
//! The layer reads the body once, strictly (see [`json`](super::json)), and extracts what the
//! policy needs: method, id, the operation's target, `_meta`, `requestState` and
//! `inputResponses`. Anything it cannot read with certainty is refused with a JSON-RPC error,
//! never guessed: a batch, a non-object, a wrong `jsonrpc`, a missing or non-string method, an
//! id that is not a string or an integer, params that are not an object, a target of the wrong
//! type. Responses and notifications invoke nothing and are recognised as such.

use std::borrow::Cow;
use std::sync::Arc;

use bytes::Bytes;
use http::StatusCode;
use serde_json::{Map, Value};

use super::json::{Envelope, Field, Kind, ParamsSeen, Shape, parse_envelope};
use super::methods::MethodClass;
use super::params::{Params, WholeParams};

/// JSON-RPC: invalid JSON.
pub const PARSE_ERROR: i64 = -32700;
/// JSON-RPC: not a valid request object.
pub const INVALID_REQUEST: i64 = -32600;
/// JSON-RPC: invalid method parameters.
pub const INVALID_PARAMS: i64 = -32602;
/// JSON-RPC: internal error.
pub const INTERNAL_ERROR: i64 = -32603;
/// JSON-RPC: the method does not exist.
pub const METHOD_NOT_FOUND: i64 = -32601;
/// MCP 2026-07-28: an `Mcp-*` / `MCP-Protocol-Version` header disagrees with the body.
pub const HEADER_MISMATCH: i64 = -32020;
/// MCP 2026-07-28: a capability the request needs was not declared.
pub const MISSING_CAPABILITY: i64 = -32021;
/// MCP 2026-07-28: the protocol version is not supported.
pub const UNSUPPORTED_VERSION: i64 = -32022;

/// A request the layer refuses before any policy runs, as a JSON-RPC error.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ProtocolError {
    /// HTTP status of the answer.
    pub status: StatusCode,
    /// JSON-RPC error code.
    pub code: i64,
    /// Human-readable message (fixed text; never echoes the body).
    pub message: String,
    /// The request id, when it could be read.
    pub id: Option<Value>,
    /// Extra `error.data` (boxed: rare, and a `Value` is large when serde_json keeps key
    /// order, which the `cedar` feature turns on).
    pub data: Option<Box<Value>>,
}

impl ProtocolError {
    pub(crate) fn new(status: StatusCode, code: i64, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            id: None,
            data: None,
        }
    }

    pub(crate) fn invalid_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, INVALID_REQUEST, message)
    }

    pub(crate) fn invalid_params(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, INVALID_PARAMS, message)
    }

    pub(crate) fn with_id(mut self, id: Option<&Value>) -> Self {
        self.id = id.cloned();
        self
    }

    pub(crate) fn with_data(mut self, data: Value) -> Self {
        self.data = Some(Box::new(data));
        self
    }

    /// The JSON-RPC error document.
    pub fn to_json(&self) -> Value {
        let mut error = Map::new();
        error.insert("code".into(), self.code.into());
        error.insert("message".into(), self.message.clone().into());
        if let Some(data) = &self.data {
            error.insert("data".into(), (**data).clone());
        }
        serde_json::json!({
            "jsonrpc": "2.0",
            "id": self.id.clone().unwrap_or(Value::Null),
            "error": error,
        })
    }
}

/// What an MCP operation acts on, as the policy sees it.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Target {
    /// `tools/call`: the tool and a snapshot of its arguments.
    Tool {
        /// Tool name.
        name: String,
        /// The arguments exactly as the inner server will receive them (read them as a
        /// [`Map`]; [`Arguments`] dereferences to one).
        arguments: Arguments,
    },
    /// `resources/read`, `resources/subscribe`, `resources/unsubscribe`.
    Resource {
        /// The resource URI.
        uri: String,
    },
    /// `prompts/get`: the prompt and its arguments.
    Prompt {
        /// Prompt name.
        name: String,
        /// The prompt arguments.
        arguments: Arc<Map<String, Value>>,
    },
    /// `completion/complete`: what is being completed.
    Completion {
        /// The prompt or resource template the completion belongs to.
        reference: CompletionReference,
        /// The argument being completed.
        argument: String,
    },
    /// `tasks/get`, `tasks/update`, `tasks/cancel`, `tasks/result`.
    Task {
        /// The task id.
        task_id: String,
    },
    /// `skills/get`, and each entry of `skills/list` (Skills extension).
    Skill {
        /// The URI of the skill's `SKILL.md`.
        uri: String,
    },
    /// A method in no row of the [method table](super::METHODS), shown to `evaluate` only
    /// when the application opted in (`GateBuilder::evaluate_unknown_methods`).
    Other {
        /// The method, as sent.
        method: String,
        /// Its params, as sent.
        params: Arc<Map<String, Value>>,
    },
    /// Methods without a target (`logging/setLevel`, `tasks/list`, a `subscriptions/listen`
    /// that names no resource).
    None,
}

impl Target {
    /// What kind of target this is (`tool`, `resource`, ...), as logs name it: a fixed word,
    /// never the name the request carried.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Target::Tool { .. } => "tool",
            Target::Resource { .. } => "resource",
            Target::Prompt { .. } => "prompt",
            Target::Completion { .. } => "completion",
            Target::Task { .. } => "task",
            Target::Skill { .. } => "skill",
            Target::Other { .. } => "other",
            Target::None => "",
        }
    }

    /// The name the `Mcp-Name` header mirrors, and logs use: tool or prompt name, resource URI,
    /// task id.
    pub fn name(&self) -> Option<&str> {
        match self {
            Target::Tool { name, .. } | Target::Prompt { name, .. } => Some(name),
            Target::Resource { uri } | Target::Skill { uri } => Some(uri),
            Target::Task { task_id } => Some(task_id),
            Target::Completion { reference, .. } => Some(reference.name()),
            Target::Other { .. } | Target::None => None,
        }
    }
}

/// The arguments of a tool call: the JSON object the inner server receives, and, when the layer
/// read them from a request, that request's own JSON text.
///
/// A JSON number is read into a [`Value`] as a 64-bit integer or a float, so
/// `100.0000000000000001` reads as 100. A policy that must judge a number exactly as the inner
/// server will read it (Cedar's `decimal`s do) reads it from the text instead. The layer keeps
/// the message body it already holds (a reference count, not a copy); the text is only looked
/// for when such a policy asks.
///
/// Dereferences to the [`Map`]. Two `Arguments` are equal when their maps are; where the text
/// came from is not compared. Built from a map (`From`, or
/// [`EvaluationBuilder::tool`](crate::policy::EvaluationBuilder::tool)), there is no text:
/// a policy then reads the numbers as `serde_json` writes them.
#[derive(Clone, Default)]
pub struct Arguments {
    values: ArgumentValues,
    /// The JSON-RPC message body the values were read from (holding `params.arguments`).
    message: Option<Bytes>,
}

/// Where the values of [`Arguments`] are kept.
#[derive(Clone, Default)]
enum ArgumentValues {
    /// None at all ([`Arguments::default`]: a listed tool's entry, say). Nothing is allocated
    /// for it, once per listed entry.
    #[default]
    Empty,
    /// A map of their own.
    Own(Arc<Map<String, Value>>),
    /// `params.arguments` of a classified request (an object: the classifier refuses any
    /// other type; absent or `null`, the map is empty), read from the message body the first
    /// time they are looked at.
    InParams(WholeParams),
}

/// The map of a call sent without arguments, and of [`ArgumentValues::Empty`].
static NO_ARGUMENTS: std::sync::LazyLock<Map<String, Value>> = std::sync::LazyLock::new(Map::new);

impl Arguments {
    /// The JSON-RPC message body these arguments were read from, if the layer read them from
    /// a request: `params.arguments` in it is their text.
    #[cfg_attr(
        not(feature = "cedar"),
        allow(dead_code, reason = "read by Cedar only")
    )]
    pub(crate) fn message(&self) -> Option<&[u8]> {
        self.message.as_deref()
    }

    /// The arguments of a classified `tools/call`: `params.arguments` of `message`, read when
    /// first looked at. `in_message`: the body has an object there (its text is then kept for
    /// [`Arguments::message`]).
    fn of_message(params: WholeParams, in_message: bool) -> Self {
        let message = in_message.then(|| params.message().cloned()).flatten();
        Self {
            values: ArgumentValues::InParams(params),
            message,
        }
    }
}

impl std::ops::Deref for Arguments {
    type Target = Map<String, Value>;

    fn deref(&self) -> &Map<String, Value> {
        match &self.values {
            ArgumentValues::Empty => &NO_ARGUMENTS,
            ArgumentValues::Own(values) => values,
            ArgumentValues::InParams(params) => params
                .get()
                .get("arguments")
                .and_then(Value::as_object)
                .unwrap_or(&NO_ARGUMENTS),
        }
    }
}

impl From<Map<String, Value>> for Arguments {
    fn from(values: Map<String, Value>) -> Self {
        Arc::new(values).into()
    }
}

impl From<Arc<Map<String, Value>>> for Arguments {
    fn from(values: Arc<Map<String, Value>>) -> Self {
        Self {
            values: ArgumentValues::Own(values),
            message: None,
        }
    }
}

impl PartialEq for Arguments {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl std::fmt::Debug for Arguments {
    /// The values, as a map prints; never the message body.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        (**self).fmt(f)
    }
}

/// A message body the classifier reads: a shared buffer, whose parts a target keeps without
/// a copy, or plain bytes, copied when a part must be kept.
pub(crate) trait MessageBytes {
    /// The bytes.
    fn bytes(&self) -> &[u8];
    /// The whole body, kept.
    fn kept(&self) -> Bytes;
}

impl MessageBytes for Bytes {
    fn bytes(&self) -> &[u8] {
        self
    }

    fn kept(&self) -> Bytes {
        self.clone()
    }
}

impl MessageBytes for [u8] {
    fn bytes(&self) -> &[u8] {
        self
    }

    fn kept(&self) -> Bytes {
        Bytes::copy_from_slice(self)
    }
}

/// The `ref` of a `completion/complete` request.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CompletionReference {
    /// `ref/prompt`.
    Prompt {
        /// Prompt name.
        name: String,
    },
    /// `ref/resource`.
    Resource {
        /// Resource template URI.
        uri: String,
    },
}

impl CompletionReference {
    /// The prompt name or template URI.
    pub fn name(&self) -> &str {
        match self {
            CompletionReference::Prompt { name } => name,
            CompletionReference::Resource { uri } => uri,
        }
    }
}

/// One classified JSON-RPC request.
///
/// The params are kept whole, as the client sent them, and shared: the [`Target`] of a
/// `tools/call` reads its arguments from them (see [`Arguments`]) rather than from a copy, so
/// an allowed call pays for no deep copy of what may be large.
#[derive(Clone, Debug)]
pub(crate) struct McpRequest {
    pub id: Value,
    /// The method: a `'static` name for the methods MCP defines, so that it is neither
    /// allocated nor copied on the way to the policy.
    pub method: Cow<'static, str>,
    /// The method's class in the method table, looked up once.
    pub class: MethodClass,
    /// The params object (empty when the request sent none): the members read on every
    /// request, and the whole when a path asks.
    params: Params,
    /// What the params name, as the policy is shown it.
    pub target: Target,
}

impl McpRequest {
    /// A top-level param.
    pub fn param(&self, key: &str) -> Option<&Value> {
        self.params.get(key)
    }

    /// The whole params object, shared.
    pub fn params_shared(&self) -> Arc<Map<String, Value>> {
        self.params.whole_shared()
    }

    /// `params._meta`, when it is an object (classification refuses any other type).
    pub fn meta(&self) -> Option<&Map<String, Value>> {
        self.param("_meta").and_then(Value::as_object)
    }

    /// The whole params object, as the client sent it.
    pub fn params(&self) -> &Map<String, Value> {
        self.params.whole()
    }
}

/// A classified message.
#[derive(Debug)]
pub(crate) enum Message {
    /// A request, boxed: the router keeps it across every await of the request's future, and
    /// a pointer keeps that future small.
    Request(Box<McpRequest>),
    Notification,
    Response,
}

/// Classifies one JSON-RPC message body.
pub(crate) fn classify<B: MessageBytes + ?Sized>(body: &B) -> Result<Message, ProtocolError> {
    let mut envelope = envelope_of(body.bytes())?;
    let id = id_of(envelope.id.take())?;
    if !envelope.jsonrpc_is_2_0 {
        return Err(ProtocolError::invalid_request("jsonrpc must be \"2.0\"").with_id(id.as_ref()));
    }
    let Some(method) = method_of(&envelope, id.as_ref())? else {
        return Ok(Message::Response);
    };
    let Some(id) = id else {
        // Every MCP notification is named `notifications/...`. Anything else without an id is
        // a request the policy would never see; a JSON-RPC server still runs it (it only does
        // not answer), so it is refused rather than passed.
        if method.starts_with("notifications/") {
            return Ok(Message::Notification);
        }
        return Err(ProtocolError::invalid_request(
            "a request needs an id: only notifications/* methods may omit it",
        ));
    };
    let refuse = |message: &str| ProtocolError::invalid_params(message).with_id(Some(&id));
    let (method, class) = known_method(method);
    // No params: the whole object is known to be empty, and the body is not read again for it.
    let mut seen = envelope.params.take().unwrap_or(ParamsSeen {
        is_object: true,
        whole: Some(Map::new()),
        ..ParamsSeen::default()
    });
    check_params(&seen).map_err(|problem| refuse(&problem))?;
    let (params, target) = if method == "tools/call" {
        // The hot path: nothing of params is built but the tool's name.
        let name = match seen.name.take() {
            Some(Field::Str(name)) => name.into_owned(),
            _ => return Err(refuse("tools/call needs a string params.name")),
        };
        let in_message = match seen.arguments {
            Kind::Absent | Kind::Null => false,
            Kind::Object => true,
            Kind::Other => return Err(refuse("params.arguments must be an object")),
        };
        let params = Params::seen(&mut seen, body.kept());
        let arguments = Arguments::of_message(params.lazy(), in_message);
        (params, Target::Tool { name, arguments })
    } else {
        let params = Params::seen(&mut seen, body.kept());
        let whole = params.whole_shared();
        let target = match &*method {
            "prompts/get" => prompt_target(&whole),
            _ => target_of(&method, &whole),
        }
        .map_err(refuse)?;
        (params, target)
    };
    Ok(Message::Request(Box::new(McpRequest {
        id,
        method,
        class,
        params,
        target,
    })))
}

/// The body read strictly as one JSON-RPC object (no batch, no duplicate key).
fn envelope_of(body: &[u8]) -> Result<Envelope<'_>, ProtocolError> {
    let shape = parse_envelope(body).map_err(|e| {
        let message = if e.to_string().starts_with("duplicate key") {
            "duplicate keys in JSON object"
        } else {
            "the body is not valid JSON"
        };
        ProtocolError::new(StatusCode::BAD_REQUEST, PARSE_ERROR, message)
    })?;
    match shape {
        Shape::Object(envelope) => Ok(envelope),
        Shape::Array => Err(ProtocolError::invalid_request(
            "JSON-RPC batches are not supported",
        )),
        Shape::Other => Err(ProtocolError::invalid_request(
            "a JSON-RPC message must be an object",
        )),
    }
}

/// The message id: absent, a string or an integer.
fn id_of(id: Option<Value>) -> Result<Option<Value>, ProtocolError> {
    match id {
        None => Ok(None),
        Some(id @ Value::String(_)) => Ok(Some(id)),
        Some(Value::Number(n)) if n.is_i64() || n.is_u64() => Ok(Some(Value::Number(n))),
        Some(_) => Err(ProtocolError::invalid_request(
            "the id must be a string or an integer",
        )),
    }
}

/// The method of a request or notification; `None` for a well-formed response (an id and
/// exactly one of `result` and `error`, no method).
fn method_of<'a>(
    envelope: &Envelope<'a>,
    id: Option<&Value>,
) -> Result<Option<Cow<'a, str>>, ProtocolError> {
    let is_response = envelope.has_result || envelope.has_error;
    let refuse = |message: &str| Err(ProtocolError::invalid_request(message).with_id(id));
    match &envelope.method {
        None if is_response && id.is_some() && !(envelope.has_result && envelope.has_error) => {
            Ok(None)
        }
        None => refuse("the method is missing"),
        Some(Field::Str(method)) if !is_response => Ok(Some(method.clone())),
        Some(Field::Str(_)) => refuse("a request cannot carry a result or an error"),
        Some(_) => refuse("the method must be a string"),
    }
}

/// A request's params: an object (absent: an empty one) whose members the layer reads itself
/// have the type the protocol gives them.
fn check_params(params: &ParamsSeen<'_>) -> Result<(), String> {
    if !params.is_object {
        return Err("params must be an object".to_owned());
    }
    for (key, expected) in [
        ("_meta", "object"),
        ("inputResponses", "object"),
        ("requestState", "string"),
    ] {
        let ok = match params.member(key) {
            None => true,
            Some(Value::Object(_)) => expected == "object",
            Some(Value::String(_)) => expected == "string",
            Some(_) => false,
        };
        if !ok {
            let article = if expected == "object" { "an" } else { "a" };
            return Err(format!("params.{key} must be {article} {expected}"));
        }
    }
    Ok(())
}

/// `method` as logs may name it: the method table's name for it, or `other` for a method no
/// row has (a name the caller chose).
pub(crate) fn method_label(method: &str) -> &'static str {
    super::methods::row_of(method).map_or("other", |row| row.method)
}

/// An HTTP method as logs may name it: one RFC 9110 defines, or `other` (an extension
/// method is a name the caller chose).
pub(crate) fn http_method_label(method: &http::Method) -> &'static str {
    static KNOWN: [http::Method; 9] = [
        http::Method::GET,
        http::Method::POST,
        http::Method::DELETE,
        http::Method::OPTIONS,
        http::Method::PUT,
        http::Method::PATCH,
        http::Method::HEAD,
        http::Method::CONNECT,
        http::Method::TRACE,
    ];
    KNOWN
        .iter()
        .find(|known| *known == method)
        .map_or("other", http::Method::as_str)
}

/// `method` as a `'static` name when the method table has it, or as sent; and its class.
fn known_method(method: Cow<'_, str>) -> (Cow<'static, str>, MethodClass) {
    match super::methods::row_of(&method) {
        Some(row) => (Cow::Borrowed(row.method), row.class),
        None => (Cow::Owned(method.into_owned()), MethodClass::Unknown),
    }
}

/// The target of a `prompts/get`: its `name`, and its `arguments` copied (a few strings). An
/// absent or `null` `arguments` is an empty map.
fn prompt_target(params: &Map<String, Value>) -> Result<Target, &'static str> {
    let name = string_param(params, "name", "prompts/get needs a string params.name")?.to_owned();
    let arguments = match params.get("arguments") {
        None | Some(Value::Null) => None,
        Some(Value::Object(arguments)) => Some(arguments),
        Some(_) => return Err("params.arguments must be an object"),
    };
    if !arguments.is_none_or(|a| a.values().all(Value::is_string)) {
        return Err("prompt arguments must be strings");
    }
    let arguments = Arc::new(arguments.cloned().unwrap_or_default());
    Ok(Target::Prompt { name, arguments })
}

fn string_param<'a>(
    params: &'a Map<String, Value>,
    key: &str,
    message: &'static str,
) -> Result<&'a str, &'static str> {
    params.get(key).and_then(Value::as_str).ok_or(message)
}

/// The target of any other method, read from `params` (nothing is moved).
fn target_of(method: &str, params: &Map<String, Value>) -> Result<Target, &'static str> {
    Ok(match method {
        "resources/read" | "resources/subscribe" | "resources/unsubscribe" => Target::Resource {
            uri: string_param(params, "uri", "this method needs a string params.uri")?.to_owned(),
        },
        "completion/complete" => {
            let reference = params
                .get("ref")
                .and_then(Value::as_object)
                .ok_or("completion/complete needs an object params.ref")?;
            let reference = match reference.get("type").and_then(Value::as_str) {
                Some("ref/prompt") => CompletionReference::Prompt {
                    name: string_param(reference, "name", "ref/prompt needs a string name")?
                        .to_owned(),
                },
                Some("ref/resource") => CompletionReference::Resource {
                    uri: string_param(reference, "uri", "ref/resource needs a string uri")?
                        .to_owned(),
                },
                _ => return Err("params.ref.type must be ref/prompt or ref/resource"),
            };
            let argument = params
                .get("argument")
                .and_then(Value::as_object)
                .and_then(|a| a.get("name"))
                .and_then(Value::as_str)
                .ok_or("completion/complete needs a string params.argument.name")?;
            Target::Completion {
                reference,
                argument: argument.to_owned(),
            }
        }
        "tasks/get" | "tasks/update" | "tasks/cancel" | "tasks/result" => Target::Task {
            task_id: string_param(params, "taskId", "task methods need a string params.taskId")?
                .to_owned(),
        },
        "skills/get" => Target::Skill {
            uri: string_param(params, "uri", "skills/get needs a string params.uri")?.to_owned(),
        },
        "resources/directory/read" => {
            string_param(params, "uri", "this method needs a string params.uri")?;
            Target::None
        }
        "subscriptions/listen" => {
            listen_uris(params)?;
            Target::None
        }
        _ => Target::None,
    })
}

/// The resource URIs a `subscriptions/listen` asks updates for
/// (`params.notifications.resourceSubscriptions`), checked for shape: `notifications` an
/// object, `resourceSubscriptions` absent or an array of strings.
pub(crate) fn listen_uris(params: &Map<String, Value>) -> Result<Vec<&str>, &'static str> {
    const SHAPE: &str = "subscriptions/listen needs params.notifications, an object whose resourceSubscriptions is an array of strings";
    let notifications = params
        .get("notifications")
        .and_then(Value::as_object)
        .ok_or(SHAPE)?;
    match notifications.get("resourceSubscriptions") {
        None => Ok(Vec::new()),
        Some(Value::Array(uris)) => uris.iter().map(|uri| uri.as_str().ok_or(SHAPE)).collect(),
        Some(_) => Err(SHAPE),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(body: &str) -> McpRequest {
        match classify(body.as_bytes()) {
            Ok(Message::Request(r)) => *r,
            other => panic!("{body}: {other:?}"),
        }
    }

    /// A request without `params` has the empty object, known in the first pass: the body is
    /// not kept to be read again for it.
    #[test]
    fn no_params_is_the_empty_object_without_a_second_read() {
        for body in [
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#,
        ] {
            let request = request(body);
            assert!(request.params.kept_body().is_none(), "{body}");
            assert!(request.params.whole().is_empty(), "{body}");
            assert_eq!(request.param("cursor"), None, "{body}");
        }
        let with =
            request(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"cursor":"c"}}"#);
        assert_eq!(with.param("cursor"), Some(&Value::from("c")));
    }

    /// No arguments at all (a listed tool's target) read as the empty map, equal to an empty
    /// map given, and to a call sent with `arguments: {}`; no message text.
    #[test]
    fn default_arguments_are_the_empty_map() {
        let none = Arguments::default();
        assert!(none.is_empty());
        assert!(none.message().is_none());
        assert_eq!(none, Arguments::from(Map::new()));
        let sent = request(
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{}}}"#,
        );
        let Target::Tool { arguments, .. } = &sent.target else {
            panic!("{sent:?}")
        };
        assert_eq!(arguments, &none);
        assert_eq!(none.clone(), none);
    }

    fn refused(body: &[u8]) -> ProtocolError {
        classify(body)
            .err()
            .unwrap_or_else(|| panic!("{:?} must be refused", String::from_utf8_lossy(body)))
    }

    #[test]
    fn tool_call_target() {
        let r = request(
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"}}}"#,
        );
        assert_eq!(r.id, 7);
        let Target::Tool { name, arguments } = &r.target else {
            panic!()
        };
        assert_eq!(name, "echo");
        assert_eq!(arguments["text"], "hi");
    }

    #[test]
    fn a_tool_call_keeps_the_text_its_arguments_were_read_from() {
        let body = Bytes::from_static(
            br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"buy","arguments":{"price":100.0000000000000001}}}"#,
        );
        let Ok(Message::Request(r)) = classify(&body) else {
            panic!("a request")
        };
        let Target::Tool { arguments, .. } = &r.target else {
            panic!("a tool call")
        };
        // The float has rounded; the text, the same buffer (not a copy), has not.
        assert_eq!(arguments["price"], 100.0);
        let message = arguments.message().expect("the message");
        assert_eq!(message, &body[..]);
        assert_eq!(message.as_ptr(), body.as_ptr(), "shared, not copied");
        assert_eq!(
            *arguments,
            Arguments::from(Map::clone(arguments)),
            "equal as values"
        );
        let no_arguments = classify(
            &br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"buy"}}"#[..],
        );
        let Ok(Message::Request(r)) = no_arguments else {
            panic!("a request")
        };
        let Target::Tool { arguments, .. } = &r.target else {
            panic!("a tool call")
        };
        assert!(arguments.is_empty() && arguments.message().is_none());
        assert_eq!(
            format!("{arguments:?}"),
            "{}",
            "Debug shows the values only"
        );
    }

    #[test]
    fn every_target_kind() {
        let r = request(
            r#"{"jsonrpc":"2.0","id":"a","method":"resources/read","params":{"uri":"file:///x"}}"#,
        );
        assert_eq!(
            r.target,
            Target::Resource {
                uri: "file:///x".into()
            }
        );
        let r = request(
            r#"{"jsonrpc":"2.0","id":1,"method":"completion/complete","params":{"ref":{"type":"ref/prompt","name":"p"},"argument":{"name":"a","value":"v"}}}"#,
        );
        assert_eq!(r.target.name(), Some("p"));
        let r =
            request(r#"{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"taskId":"t1"}}"#);
        assert_eq!(
            r.target,
            Target::Task {
                task_id: "t1".into()
            }
        );
        let r = request(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#);
        assert_eq!(r.target, Target::None);
    }

    #[test]
    fn notifications_and_responses() {
        assert!(matches!(
            classify(&br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#[..]),
            Ok(Message::Notification)
        ));
        assert!(matches!(
            classify(&br#"{"jsonrpc":"2.0","id":3,"result":{}}"#[..]),
            Ok(Message::Response)
        ));
    }

    #[test]
    fn unreadable_messages_are_refused_with_their_code() {
        let cases: &[(&[u8], i64)] = &[
            (b"not json", PARSE_ERROR),
            (b"\xff\xfe", PARSE_ERROR),
            (br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","name":"b"}}"#, PARSE_ERROR),
            (br#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#, INVALID_REQUEST),
            // Only notifications/* may omit the id: anything else would reach the inner
            // server (which runs notifications) without the policy.
            (br#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"a"}}"#, INVALID_REQUEST),
            (br#"{"jsonrpc":"2.0","method":"ping"}"#, INVALID_REQUEST),
            (br#""ping""#, INVALID_REQUEST),
            (br#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#, INVALID_REQUEST),
            (br#"{"id":1,"method":"ping"}"#, INVALID_REQUEST),
            (br#"{"jsonrpc":"2.0","id":1}"#, INVALID_REQUEST),
            (br#"{"jsonrpc":"2.0","id":1,"method":5}"#, INVALID_REQUEST),
            (br#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#, INVALID_REQUEST),
            (br#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#, INVALID_REQUEST),
            (br#"{"jsonrpc":"2.0","id":{},"method":"ping"}"#, INVALID_REQUEST),
            (br#"{"jsonrpc":"2.0","id":1,"method":"ping","result":{}}"#, INVALID_REQUEST),
            (br#"{"jsonrpc":"2.0","id":1,"result":{},"error":{}}"#, INVALID_REQUEST),
            (br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":[]}"#, INVALID_PARAMS),
            (br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{}}"#, INVALID_PARAMS),
            (br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":1}}"#, INVALID_PARAMS),
            (br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","arguments":[]}}"#, INVALID_PARAMS),
            (br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","_meta":"x"}}"#, INVALID_PARAMS),
            (br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","requestState":1}}"#, INVALID_PARAMS),
            (br#"{"jsonrpc":"2.0","id":1,"method":"prompts/get","params":{"name":"p","arguments":{"a":1}}}"#, INVALID_PARAMS),
            (br#"{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":null}}"#, INVALID_PARAMS),
            (br#"{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{}}"#, INVALID_PARAMS),
            (br#"{"jsonrpc":"2.0","id":1,"method":"completion/complete","params":{"ref":{"type":"x"}}}"#, INVALID_PARAMS),
        ];
        for (body, code) in cases {
            let error = refused(body);
            assert_eq!(error.code, *code, "{}", String::from_utf8_lossy(body));
            assert_eq!(error.status, StatusCode::BAD_REQUEST);
        }
    }

    #[test]
    fn errors_echo_the_id_when_known() {
        let error = refused(br#"{"jsonrpc":"2.0","id":"x9","method":"tools/call","params":{}}"#);
        assert_eq!(error.to_json()["id"], "x9");
        let error = refused(b"garbage");
        assert_eq!(error.to_json()["id"], Value::Null);
    }

    mod agreement {
        use proptest::prelude::*;
        use serde_json::json;

        use super::*;

        /// JSON-ish fragments that stress the parser: duplicates, escapes, odd numbers.
        fn fragment() -> impl Strategy<Value = String> {
            prop_oneof![
                Just(r#""name":"echo""#.to_owned()),
                Just(r#""name":"secret""#.to_owned()),
                Just(r#""na\u006de":"x""#.to_owned()),
                Just(r#""arguments":{"a":1}"#.to_owned()),
                Just(r#""arguments":{"a":1,"a":2}"#.to_owned()),
                Just(r#""arguments":[1]"#.to_owned()),
                Just(r#""arguments":null"#.to_owned()),
                Just(r#""arguments":{"q":"text"}"#.to_owned()),
                Just(r#""_meta":{}"#.to_owned()),
                Just(r#""n":1e400"#.to_owned()),
                Just(r#""n":-0.0"#.to_owned()),
                "[a-z]{1,3}".prop_map(|k| format!(r#""{k}":null"#)),
            ]
        }

        proptest! {
            #![proptest_config(ProptestConfig { cases: 10_000, ..ProptestConfig::default() })]

            /// Whenever the layer accepts a tools/call, a plain serde_json reading (what rmcp
            /// and most servers use) sees the same method, tool name and arguments.
            #[test]
            fn accepted_calls_read_the_same_everywhere(parts in proptest::collection::vec(fragment(), 0..5)) {
                let body = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{{}}}}}"#, parts.join(","));
                if let Ok(Message::Request(request)) = classify(body.as_bytes()) {
                    let plain: Value = serde_json::from_slice(body.as_bytes()).expect("plain parse");
                    prop_assert_eq!(&plain["method"], &json!(request.method));
                    let Target::Tool { name, arguments } = &request.target else { panic!() };
                    prop_assert_eq!(&plain["params"]["name"], &json!(name));
                    // An absent or null `arguments` is an empty one.
                    let plain_arguments = plain["params"].get("arguments").filter(|a| !a.is_null()).cloned().unwrap_or(json!({}));
                    prop_assert_eq!(plain_arguments, Value::Object((**arguments).clone()));
                }
            }

            /// The params a request keeps (for the continuation binding, a rewritten body, a
            /// held task) are exactly those sent, whatever its target reads of them.
            #[test]
            fn whole_params_are_given_back_exactly(
                parts in proptest::collection::vec(fragment(), 0..5),
                method in prop_oneof![Just("tools/call"), Just("prompts/get"), Just("resources/list")],
            ) {
                let body = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{method}","params":{{{}}}}}"#, parts.join(","));
                if let Ok(Message::Request(request)) = classify(body.as_bytes()) {
                    let plain: Value = serde_json::from_slice(body.as_bytes()).expect("plain parse");
                    prop_assert_eq!(Value::Object(request.params().clone()), plain["params"].clone());
                    prop_assert_eq!(request.param("_meta"), plain["params"].get("_meta"));
                }
            }

            /// Arbitrary bytes never panic the classifier.
            #[test]
            fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
                let _ = classify(&bytes[..]);
            }
        }
    }
}
