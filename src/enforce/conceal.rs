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

use bytes::Bytes;
use http::request::Parts;
use http::{Response, header};
use serde_json::{Map, Value, json};

use crate::enforce::answer::{self, Read};
use crate::enforce::body::GateBody;
use crate::enforce::bounds::Inner;
use crate::enforce::call::{replied, start};
use crate::enforce::reply::internal_error;
use crate::enforce::whole;
use crate::settings::Settings;

use crate::mcp::era::NAME_HEADER;
use crate::mcp::request::McpRequest;

/// Which part of a request names the component a refusal would hide.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ConcealedField {
    /// `params.name`: a tool or prompt.
    Name,
    /// `params.uri`: a resource or skill.
    Uri,
    /// `params.ref.name`: the prompt a completion belongs to.
    RefName,
    /// `params.ref.uri`: the resource template a completion belongs to.
    RefUri,
}

impl ConcealedField {
    fn is_uri(self) -> bool {
        matches!(self, ConcealedField::Uri | ConcealedField::RefUri)
    }
}

/// The methods whose refusals can be concealed, and the part that names the component.
pub(crate) fn concealable(request: &McpRequest) -> Option<ConcealedField> {
    match &*request.method {
        "tools/call" | "prompts/get" => Some(ConcealedField::Name),
        "resources/read" | "resources/subscribe" | "resources/unsubscribe" | "skills/get" => {
            Some(ConcealedField::Uri)
        }
        "completion/complete" => match request.param("ref")?.get("type")?.as_str()? {
            "ref/prompt" => Some(ConcealedField::RefName),
            "ref/resource" => Some(ConcealedField::RefUri),
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
pub(crate) fn probe(request: &McpRequest, named: ConcealedField) -> Option<Probe> {
    let mut bytes = [0u8; 12];
    getrandom::fill(&mut bytes).ok()?;
    let suffix: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let mut params = request.params().clone();
    let (holder, key): (&mut Map<String, Value>, &str) = match named {
        ConcealedField::Name => (&mut params, "name"),
        ConcealedField::Uri => (&mut params, "uri"),
        ConcealedField::RefName => (params.get_mut("ref")?.as_object_mut()?, "name"),
        ConcealedField::RefUri => (params.get_mut("ref")?.as_object_mut()?, "uri"),
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

/// The inner server's answer about the made-up component, speaking of the real one instead:
/// every string of every message (object keys too) with the made-up part put back.
pub(crate) fn restore(read: &mut Read, probe: &Probe) {
    for message in read.messages_mut() {
        restore_value(message, probe);
    }
}

fn restore_value(value: &mut Value, probe: &Probe) {
    match value {
        Value::String(text) if text.contains(&probe.made_up) => {
            *text = text.replace(&probe.made_up, &probe.original);
        }
        Value::Array(items) => items.iter_mut().for_each(|item| restore_value(item, probe)),
        Value::Object(object) => {
            let renamed: Vec<String> = object
                .keys()
                .filter(|key| key.contains(&probe.made_up))
                .cloned()
                .collect();
            for key in renamed {
                if let Some(field) = object.remove(&key) {
                    object.insert(key.replace(&probe.made_up, &probe.original), field);
                }
            }
            object
                .values_mut()
                .for_each(|field| restore_value(field, probe));
        }
        _ => {}
    }
}

/// Answers for a hidden component as the inner server answers for one that does not exist:
/// the call is replayed about a made-up component of the same shape, its answer read whole
/// under the one rule of [`answer`](super::answer) (anything else is refused, never passed
/// on), and the made-up part put back. The allowed answers of requests conceal mode could hide
/// are read and written the same way ([`whole`](super::whole)), so the two cannot be told
/// apart by their framing.
pub(crate) async fn conceal<S: Inner>(
    settings: &Settings,
    inner: &mut S,
    mut parts: Parts,
    request: &McpRequest,
    named: ConcealedField,
    private: bool,
) -> Result<Response<GateBody<S::Res>>, S::Error> {
    let Some(probe) = probe(request, named) else {
        return Ok(replied(internal_error(request)));
    };
    parts.headers.remove(header::CONTENT_LENGTH);
    // Modern requests mirror the name in `Mcp-Name`: the probe must agree with itself.
    if parts.headers.contains_key(NAME_HEADER)
        && let Ok(value) = http::HeaderValue::from_str(&probe.name)
    {
        parts.headers.insert(NAME_HEADER, value);
    }
    let call = start(inner, parts, S::Req::from(probe.body.clone()));
    let fetched = answer::fetch(call, whole::bounds(settings, request), &request.id);
    let mut read = match fetched.await? {
        Ok(read) => read,
        Err(problem) => return Ok(replied(answer::refusal(request, problem, "conceal probe"))),
    };
    restore(&mut read, &probe);
    whole::finish(settings, &mut read, private);
    Ok(replied(read.into_http()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcp::request::{Message, classify};

    fn request(body: &str) -> McpRequest {
        match classify(body.as_bytes()) {
            Ok(Message::Request(request)) => *request,
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
    fn restore_puts_back_the_real_part_in_every_string() {
        let restored = |probe: &Probe, message: Value| {
            let head = http::Response::builder()
                .header("content-type", "application/json")
                .body(())
                .unwrap()
                .into_parts()
                .0;
            let body = message.to_string();
            let mut read = answer::read(head, body.as_bytes(), &json!(1)).unwrap();
            restore(&mut read, probe);
            read.messages_mut()[0].clone()
        };
        let (probe, _) =
            probed(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a\"b"}}"#);
        let message = format!("Tool {} not found", probe.name);
        assert_eq!(
            restored(
                &probe,
                json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32602, "message": message}})
            ),
            json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32602, "message": "Tool a\"b not found"}})
        );
        let (probe, _) = probed(
            r#"{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"demo://secret"}}"#,
        );
        // A server that names only the last segment, or the whole URI, in a value or a key:
        // each reads as the real one.
        let message = format!("no {} here; {}", probe.made_up, probe.name);
        let data = json!({ probe.name.clone(): [probe.made_up.clone()] });
        assert_eq!(
            restored(
                &probe,
                json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32002, "message": message, "data": data}})
            ),
            json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32002, "message": "no secret here; demo://secret", "data": {"demo://secret": ["secret"]}}})
        );
    }
}
