//! Conceal mode: a refused component is answered exactly as the inner server answers one that
//! does not exist.
//!
//! With `GateBuilder::conceal_refusals`, an `unavailable` or `undisclosed` refusal of a request
//! that names one component (`tools/call`, `prompts/get`, `resources/read`,
//! `resources/subscribe`, `resources/unsubscribe`, `skills/get`, and `completion/complete` for
//! a prompt or a resource template) is not rendered by the layer. Instead the layer asks the
//! inner server the same question about a component that cannot exist, and answers with the
//! inner server's reply, the made-up name put back to the one the client asked for. A prober
//! then cannot tell a hidden component from a missing one. The decision is still logged with
//! its context id.
//!
//! **The probe has the shape of the real request.** An inner server may route by the shape of
//! a name (resources by scheme or path, say) and answer differently for each route. So a
//! resource URI keeps everything up to its last `/` or `:` and only its last segment is made
//! up (`demo://secret` is probed as `demo://mcp-gate-absent-<random>`, the same route a missing
//! `demo://secrex` takes); a tool or prompt name, which has no route, is made up whole. The
//! made-up part is 24 random hex digits, so it names nothing that exists.

use std::time::Duration;

use bytes::Bytes;
use http::request::Parts;
use http::{Response, header};
use serde_json::{Map, Value, json};

use super::body::GateBody;
use super::bounds::Inner;
use super::discovery::{fetch_whole, readable_type};
use super::pipeline::{local, start};
use super::refuse::internal_error;

use crate::mcp::era::NAME_HEADER;
use crate::mcp::request::McpRequest;

/// Which part of a request names the component a refusal would hide.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Named {
    /// `params.name`: a tool or prompt.
    Name,
    /// `params.uri`: a resource or skill.
    Uri,
    /// `params.ref.name`: the prompt a completion belongs to.
    RefName,
    /// `params.ref.uri`: the resource template a completion belongs to.
    RefUri,
}

impl Named {
    fn is_uri(self) -> bool {
        matches!(self, Named::Uri | Named::RefUri)
    }
}

/// The methods whose refusals can be concealed, and the part that names the component.
pub(crate) fn concealable(request: &McpRequest) -> Option<Named> {
    match &*request.method {
        "tools/call" | "prompts/get" => Some(Named::Name),
        "resources/read" | "resources/subscribe" | "resources/unsubscribe" | "skills/get" => {
            Some(Named::Uri)
        }
        "completion/complete" => match request.param("ref")?.get("type")?.as_str()? {
            "ref/prompt" => Some(Named::RefName),
            "ref/resource" => Some(Named::RefUri),
            _ => None,
        },
        _ => None,
    }
}

/// A request about a component that cannot exist.
pub(crate) struct Probe {
    /// The request to send instead.
    pub body: Bytes,
    /// The made-up name or URI, whole (for a mirrored `Mcp-Name`).
    pub name: String,
    /// The part of it that was made up, and the part of the real name it stands for.
    made_up: String,
    original: String,
}

/// The probe for `request`, whose component is named where `named` says.
pub(crate) fn probe(request: &McpRequest, named: Named) -> Option<Probe> {
    let mut bytes = [0u8; 12];
    getrandom::fill(&mut bytes).ok()?;
    let suffix: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let mut params = request.params().into_owned();
    let (holder, key): (&mut Map<String, Value>, &str) = match named {
        Named::Name => (&mut params, "name"),
        Named::Uri => (&mut params, "uri"),
        Named::RefName => (params.get_mut("ref")?.as_object_mut()?, "name"),
        Named::RefUri => (params.get_mut("ref")?.as_object_mut()?, "uri"),
    };
    let real = holder.get(key)?.as_str()?.to_owned();
    let (kept, original) = if named.is_uri() {
        let cut = real.rfind(['/', ':']).map_or(0, |at| at + 1);
        real.split_at(cut)
    } else {
        ("", real.as_str())
    };
    let made_up = if named.is_uri() {
        format!("mcp-gate-absent-{suffix}")
    } else {
        format!("mcp_gate_absent_{suffix}")
    };
    let name = format!("{kept}{made_up}");
    holder.insert(key.to_owned(), Value::String(name.clone()));
    let message =
        json!({"jsonrpc": "2.0", "id": request.id, "method": request.method, "params": params});
    Some(Probe {
        body: Bytes::from(message.to_string()),
        name,
        made_up,
        original: original.to_owned(),
    })
}

/// The inner server's answer about the made-up component, speaking of the real one instead.
pub(crate) fn restore(answer: &[u8], probe: &Probe) -> Bytes {
    // Inside JSON text the original must be escaped like any JSON string content.
    let escaped = Value::String(probe.original.clone()).to_string();
    let escaped = &escaped[1..escaped.len() - 1];
    match std::str::from_utf8(answer) {
        Ok(text) => Bytes::from(text.replace(&probe.made_up, escaped)),
        Err(_) => Bytes::copy_from_slice(answer),
    }
}

/// Answers for a hidden component as the inner server answers for one that does not exist:
/// the call is replayed about a made-up component of the same shape, and the made-up part is
/// put back in the answer. An answer the layer cannot read whole (too large, too slow, of a
/// type it cannot read) is refused, never passed on.
pub(super) async fn conceal<S: Inner>(
    inner: &mut S,
    mut parts: Parts,
    request: &McpRequest,
    named: Named,
    bounds: (usize, Option<Duration>),
) -> Result<Response<GateBody<S::Res>>, S::Error> {
    let Some(probe) = probe(request, named) else {
        return Ok(local(internal_error(request)));
    };
    parts.headers.remove(header::CONTENT_LENGTH);
    // Modern requests mirror the name in `Mcp-Name`: the probe must agree with itself.
    if parts.headers.contains_key(NAME_HEADER)
        && let Ok(value) = http::HeaderValue::from_str(&probe.name)
    {
        parts.headers.insert(NAME_HEADER, value);
    }
    let unreadable = |problem: &'static str| {
        tracing::error!(target: "mcp_gate::decision", method = crate::mcp::method_label(&request.method), problem, "conceal probe unreadable; refusing");
        Ok(local(internal_error(request)))
    };
    let call = start(inner, parts, S::Req::from(probe.body.clone()));
    let (mut head, bytes) = match fetch_whole(call, bounds).await? {
        Ok((head, _)) if head.status.is_success() && readable_type(&head).is_none() => {
            return unreadable("the answer has a content type the layer cannot read");
        }
        Ok(read) => read,
        Err(problem) => return unreadable(problem),
    };
    head.headers.remove(header::CONTENT_LENGTH);
    Ok(Response::from_parts(
        head,
        GateBody::local(restore(&bytes, &probe)),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcp::request::{Message, classify};

    fn request(body: &str) -> McpRequest {
        match classify(body.as_bytes()) {
            Ok(Message::Request(request)) => request,
            other => panic!("{other:?}"),
        }
    }

    fn probed(body: &str) -> (Probe, Value) {
        let request = request(body);
        let named = concealable(&request).expect("concealable");
        let probe = probe(&request, named).expect("a probe");
        let sent: Value = serde_json::from_slice(&probe.body).unwrap();
        (probe, sent)
    }

    #[test]
    fn a_uri_keeps_its_route_and_a_name_is_made_up_whole() {
        let (probe, sent) = probed(
            r#"{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"demo://secret"}}"#,
        );
        let uri = sent["params"]["uri"].as_str().unwrap();
        assert!(uri.starts_with("demo://mcp-gate-absent-"), "{uri}");
        assert_eq!(uri, probe.name);
        let (_, sent) = probed(
            r#"{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"file:///srv/a/b.txt"}}"#,
        );
        assert!(
            sent["params"]["uri"]
                .as_str()
                .unwrap()
                .starts_with("file:///srv/a/mcp-gate-absent-")
        );
        let (_, sent) = probed(
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"delete","arguments":{"a":1}}}"#,
        );
        assert!(
            sent["params"]["name"]
                .as_str()
                .unwrap()
                .starts_with("mcp_gate_absent_")
        );
        assert_eq!(sent["params"]["arguments"]["a"], 1);
        let (_, sent) = probed(
            r#"{"jsonrpc":"2.0","id":1,"method":"completion/complete","params":{"ref":{"type":"ref/prompt","name":"secret_prompt"},"argument":{"name":"a","value":"x"}}}"#,
        );
        assert!(
            sent["params"]["ref"]["name"]
                .as_str()
                .unwrap()
                .starts_with("mcp_gate_absent_")
        );
        assert_eq!(sent["params"]["argument"]["value"], "x");
    }

    #[test]
    fn restore_puts_back_the_real_part_escaped() {
        let (probe, _) =
            probed(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a\"b"}}"#);
        let answer = format!(
            r#"{{"error":{{"message":"Tool {} not found"}}}}"#,
            probe.name
        );
        assert_eq!(
            &restore(answer.as_bytes(), &probe)[..],
            br#"{"error":{"message":"Tool a\"b not found"}}"#
        );
        let (probe, _) = probed(
            r#"{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"demo://secret"}}"#,
        );
        // A server that names only the last segment, or the whole URI: both read as the real one.
        let answer = format!("no {} here; {}", probe.made_up, probe.name);
        assert_eq!(
            &restore(answer.as_bytes(), &probe)[..],
            b"no secret here; demo://secret"
        );
    }
}
