//! Protocol eras, client capabilities and the legacy session store.
//!
//! MCP has two ways of saying what a client can do:
//! - **Modern** requests (2026-07-28 and later) carry `io.modelcontextprotocol/protocolVersion`
//!   and `io.modelcontextprotocol/clientCapabilities` in their own `params._meta`; nothing is
//!   remembered between requests. Over HTTP they also mirror the method, the target name and
//!   the version in `Mcp-Method`, `Mcp-Name` and `MCP-Protocol-Version`; the layer requires
//!   those headers to agree with the body, so that a proxy routing on headers and the server
//!   acting on the body can never disagree about what is being called.
//! - **Legacy** sessions (2025-11-25 and earlier) declare capabilities once, in `initialize`.
//!   The layer remembers them under the `Mcp-Session-Id` the inner server hands out, bound to
//!   the principal that initialised the session ([`sessions`](super::sessions)); a request
//!   bearing an id bound to someone else never gets this far. Mirrored headers on legacy
//!   requests are ignored: the body decides.

use std::sync::Arc;

use http::{HeaderMap, StatusCode};
use serde_json::{Map, Value, json};

use super::request::{HEADER_MISMATCH, McpRequest, ProtocolError, Target, UNSUPPORTED_VERSION};
use crate::store::sessions::SessionRecord;

/// `_meta` key of the protocol version on modern requests.
pub const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
/// `_meta` key of the client capabilities on modern requests.
pub const META_CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
/// Extension identifier of MCP Tasks (2026-07-28).
pub const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";
/// Modern protocol versions the layer understands.
pub const MODERN_VERSIONS: &[&str] = &["2026-07-28"];
/// Every protocol version the layer serves, newest first: the modern ones, then the legacy
/// `initialize` version. `-32022` lists these as supported.
pub const SUPPORTED_VERSIONS: &[&str] = &["2026-07-28", "2025-11-25"];

/// Which generation of MCP a request belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Era {
    /// Per-request versioning (2026-07-28 and later).
    Modern,
    /// The `initialize` handshake (2025-11-25 and earlier).
    Legacy,
}

/// What the client declared it can do, for this request.
#[derive(Clone, Debug, PartialEq)]
pub struct ClientCapabilities(Arc<Map<String, Value>>);

/// The capabilities of a client that declared none: one map, shared by every request.
static NONE_DECLARED: std::sync::LazyLock<Arc<Map<String, Value>>> =
    std::sync::LazyLock::new(Arc::default);

impl Default for ClientCapabilities {
    /// None declared.
    fn default() -> Self {
        Self(Arc::clone(&NONE_DECLARED))
    }
}

impl ClientCapabilities {
    /// The capabilities a client declared (the `capabilities` object of `initialize`, or
    /// `_meta["io.modelcontextprotocol/clientCapabilities"]` of a modern request).
    pub fn from_object(map: Map<String, Value>) -> Self {
        if map.is_empty() {
            return Self::default();
        }
        Self(Arc::new(map))
    }

    /// The declared capabilities object.
    pub fn as_map(&self) -> &Map<String, Value> {
        &self.0
    }

    /// Whether URL-mode elicitation was declared (`elicitation.url`).
    pub fn url_elicitation(&self) -> bool {
        self.0
            .get("elicitation")
            .and_then(Value::as_object)
            .is_some_and(|e| e.get("url").is_some_and(Value::is_object))
    }

    /// Whether form-mode elicitation was declared (`elicitation.form`, or an empty
    /// `elicitation` object, which means form only).
    pub fn form_elicitation(&self) -> bool {
        self.0
            .get("elicitation")
            .and_then(Value::as_object)
            .is_some_and(|e| e.is_empty() || e.get("form").is_some_and(Value::is_object))
    }

    /// Whether the Tasks extension was declared (`extensions["io.modelcontextprotocol/tasks"]`).
    pub fn tasks_extension(&self) -> bool {
        self.0
            .get("extensions")
            .and_then(Value::as_object)
            .is_some_and(|e| e.contains_key(TASKS_EXTENSION))
    }
}

/// The era, version and capabilities that apply to one request.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct ProtocolContext {
    /// Modern or legacy.
    pub era: Era,
    /// The protocol version, when known.
    pub protocol_version: Option<String>,
    /// The client's declared capabilities for this request.
    pub capabilities: ClientCapabilities,
}

/// The header that names a legacy session.
pub(crate) const SESSION_HEADER: http::HeaderName = http::HeaderName::from_static("mcp-session-id");
/// The headers a modern request mirrors its body in (2026-07-28 Streamable HTTP).
pub(crate) const METHOD_HEADER: http::HeaderName = http::HeaderName::from_static("mcp-method");
/// See [`METHOD_HEADER`].
pub(crate) const NAME_HEADER: http::HeaderName = http::HeaderName::from_static("mcp-name");
/// See [`METHOD_HEADER`].
pub(crate) const VERSION_HEADER: http::HeaderName =
    http::HeaderName::from_static("mcp-protocol-version");

/// Works out the era, version and capabilities of a request.
pub(crate) fn protocol_context(
    request: &McpRequest,
    headers: &HeaderMap,
    session: Option<&SessionRecord>,
) -> Result<ProtocolContext, ProtocolError> {
    let id = Some(&request.id);
    let meta = request.meta();
    let Some(version) = meta.and_then(|m| m.get(META_PROTOCOL_VERSION)) else {
        return Ok(match session {
            Some(session) => ProtocolContext {
                era: Era::Legacy,
                protocol_version: session.protocol_version.clone(),
                capabilities: ClientCapabilities::from_object(session.capabilities.clone()),
            },
            // No session: nothing the client declared earlier applies, and a version named
            // in this request's own params is the client's word, not how the request was made.
            None => ProtocolContext {
                era: Era::Legacy,
                protocol_version: None,
                capabilities: ClientCapabilities::default(),
            },
        });
    };
    let Some(version) = version.as_str() else {
        return Err(ProtocolError::invalid_params(
            "the protocol version in _meta must be a string",
        )
        .with_id(id));
    };
    if !MODERN_VERSIONS.contains(&version) {
        return Err(ProtocolError::new(
            StatusCode::BAD_REQUEST,
            UNSUPPORTED_VERSION,
            "unsupported protocol version",
        )
        .with_id(id)
        .with_data(json!({"supported": SUPPORTED_VERSIONS, "requested": version})));
    }
    let capabilities = match meta.and_then(|m| m.get(META_CLIENT_CAPABILITIES)) {
        Some(Value::Object(caps)) => ClientCapabilities::from_object(caps.clone()),
        _ => {
            return Err(ProtocolError::invalid_params(
                "modern requests must declare clientCapabilities in _meta",
            )
            .with_id(id));
        }
    };
    check_mirrored_headers(request, headers, version)?;
    Ok(ProtocolContext {
        era: Era::Modern,
        protocol_version: Some(version.to_owned()),
        capabilities,
    })
}

/// One header value as text; two values or a non-text value is an error.
pub(crate) fn single_header<'a>(
    headers: &'a HeaderMap,
    name: &http::HeaderName,
) -> Result<Option<&'a str>, ()> {
    let mut values = headers.get_all(name).iter();
    let first = values.next();
    if values.next().is_some() {
        return Err(());
    }
    first.map(|v| v.to_str().map_err(|_| ())).transpose()
}

/// Modern requests: `MCP-Protocol-Version`, `Mcp-Method` and `Mcp-Name` must be present and
/// equal to the body's values.
fn check_mirrored_headers(
    request: &McpRequest,
    headers: &HeaderMap,
    version: &str,
) -> Result<(), ProtocolError> {
    let mismatch = |what: http::HeaderName| {
        ProtocolError::new(
            StatusCode::BAD_REQUEST,
            HEADER_MISMATCH,
            format!("the {what} header does not match the body"),
        )
        .with_id(Some(&request.id))
    };
    let expect = |name: http::HeaderName, value: &str| match single_header(headers, &name) {
        Ok(Some(found)) if found == value => Ok(()),
        _ => Err(mismatch(name)),
    };
    expect(VERSION_HEADER, version)?;
    expect(METHOD_HEADER, &request.method)?;
    let named = matches!(
        request.target,
        Target::Tool { .. } | Target::Prompt { .. } | Target::Resource { .. } | Target::Task { .. }
    );
    match request.target.name() {
        Some(name) if named => match single_header(headers, &NAME_HEADER) {
            Ok(Some(found)) if decode_header_text(found).as_deref() == Some(name) => Ok(()),
            _ => Err(mismatch(NAME_HEADER)),
        },
        _ => Ok(()),
    }
}

/// Where SEP-2243 wraps a header value that cannot travel as plain header text (non-ASCII,
/// leading or trailing whitespace, or text that itself looks like the wrapper).
const BASE64_OPEN: &str = "=?base64?";
const BASE64_CLOSE: &str = "?=";

/// A mirrored header value as SEP-2243 carries it: `=?base64?<standard base64 of UTF-8>?=`
/// is decoded, anything else is the value itself. A wrapper that does not decode to UTF-8 is
/// `None`, which matches no body value. A body value that looks like the wrapper therefore
/// matches only its own wrapped form, as the receiving server reads it.
pub(crate) fn decode_header_text(value: &str) -> Option<std::borrow::Cow<'_, str>> {
    use base64::Engine as _;
    match value
        .strip_prefix(BASE64_OPEN)
        .and_then(|rest| rest.strip_suffix(BASE64_CLOSE))
    {
        Some(encoded) => base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .ok()
            .and_then(|bytes| String::from_utf8(bytes).ok())
            .map(std::borrow::Cow::Owned),
        None => Some(std::borrow::Cow::Borrowed(value)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcp::request::{Message, classify};

    fn request(body: &str) -> McpRequest {
        match classify(body.as_bytes()).unwrap() {
            Message::Request(r) => *r,
            _ => panic!(),
        }
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.append(*k, v.parse().unwrap());
        }
        map
    }

    const MODERN: &str = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"elicitation":{"url":{}}}}}}"#;

    #[test]
    fn modern_request_with_matching_headers() {
        let h = headers(&[
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/call"),
            ("mcp-name", "echo"),
        ]);
        let ctx = protocol_context(&request(MODERN), &h, None).unwrap();
        assert_eq!(ctx.era, Era::Modern);
        assert!(ctx.capabilities.url_elicitation());
        assert!(!ctx.capabilities.form_elicitation());
    }

    #[test]
    fn modern_request_with_missing_or_wrong_headers_is_refused() {
        for h in [
            headers(&[]),
            headers(&[
                ("mcp-protocol-version", "2026-07-28"),
                ("mcp-method", "tools/call"),
                ("mcp-name", "other"),
            ]),
            headers(&[
                ("mcp-protocol-version", "2025-11-25"),
                ("mcp-method", "tools/call"),
                ("mcp-name", "echo"),
            ]),
            headers(&[
                ("mcp-protocol-version", "2026-07-28"),
                ("mcp-method", "tools/list"),
                ("mcp-name", "echo"),
            ]),
            headers(&[
                ("mcp-protocol-version", "2026-07-28"),
                ("mcp-method", "tools/call"),
                ("mcp-name", "echo"),
                ("mcp-name", "echo"),
            ]),
        ] {
            let error = protocol_context(&request(MODERN), &h, None).unwrap_err();
            assert_eq!(error.code, HEADER_MISMATCH, "{h:?}");
        }
    }

    #[test]
    fn wrapped_names_are_decoded_before_they_are_compared() {
        assert_eq!(decode_header_text("echo").as_deref(), Some("echo"));
        assert_eq!(
            decode_header_text("=?base64?Y2Fmw6k=?=").as_deref(),
            Some("caf\u{e9}")
        );
        assert_eq!(
            decode_header_text("=?base64?IGVjaG8=?=").as_deref(),
            Some(" echo")
        );
        // Not base64, not UTF-8, or unpadded: no value at all.
        for odd in ["=?base64?!!?=", "=?base64?/w==?=", "=?base64?Y2Fmw6k?="] {
            assert_eq!(decode_header_text(odd), None, "{odd}");
        }
        // A half wrapper is plain text.
        assert_eq!(
            decode_header_text("=?base64?abc").as_deref(),
            Some("=?base64?abc")
        );
        let body = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"caf\u00e9","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}"#;
        let wrapped = headers(&[
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/call"),
            ("mcp-name", "=?base64?Y2Fmw6k=?="),
        ]);
        assert!(protocol_context(&request(body), &wrapped, None).is_ok());
        // A body name that is itself a wrapper matches only its wrapped form.
        let body = body.replace("caf\\u00e9", "=?base64?ZWNobw==?=");
        let literal = headers(&[
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/call"),
            ("mcp-name", "=?base64?ZWNobw==?="),
        ]);
        assert!(body.contains(r#""name":"=?base64?ZWNobw==?=""#), "{body}");
        let error = protocol_context(&request(&body), &literal, None).unwrap_err();
        assert_eq!(error.code, HEADER_MISMATCH);
        let wrapped_wrapper = headers(&[
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/call"),
            ("mcp-name", "=?base64?PT9iYXNlNjQ/WldOb2J3PT0/PQ==?="),
        ]);
        assert!(protocol_context(&request(&body), &wrapped_wrapper, None).is_ok());
    }

    #[test]
    fn unknown_modern_version_is_refused_with_the_supported_list() {
        let body = MODERN.replace("2026-07-28", "2099-01-01");
        let error = protocol_context(&request(&body), &HeaderMap::new(), None).unwrap_err();
        assert_eq!(error.code, UNSUPPORTED_VERSION);
        assert_eq!(
            error.data.unwrap()["supported"],
            json!(["2026-07-28", "2025-11-25"])
        );
    }

    #[test]
    fn legacy_capabilities_come_from_the_session() {
        let mut capabilities = Map::new();
        capabilities.insert("elicitation".into(), json!({}));
        let session = SessionRecord::new(crate::auth::Owner::new("iss", None, None))
            .protocol_version("2025-11-25")
            .capabilities(capabilities);
        let call =
            request(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo"}}"#);
        let h = headers(&[("mcp-session-id", "s1"), ("mcp-name", "ignored-on-legacy")]);
        let ctx = protocol_context(&call, &h, Some(&session)).unwrap();
        assert_eq!(ctx.era, Era::Legacy);
        assert_eq!(ctx.protocol_version.as_deref(), Some("2025-11-25"));
        assert!(ctx.capabilities.form_elicitation());
        // Without a session: nothing declared.
        let ctx = protocol_context(&call, &h, None).unwrap();
        assert_eq!(ctx.capabilities, ClientCapabilities::default());
    }
}
