//! A listing's response message written once, from the bytes it came in.
//!
//! The message was read whole and strictly first ([`super::list_json`]); this pass walks it
//! again without building anything and copies every member as it came, except what the layer
//! changes in the result: the entries the policy hid are left out (the kept ones copied
//! byte for byte, never serialised again), the next cursor is the layer's sealed one, and a
//! result marked private gets `cacheScope: "private"` and its `ttlMs` capped.

use std::fmt;
use std::ops::Range;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

use super::cache::capped_ttl;
use crate::mcp::reading::{Read, Text};

pub(crate) use crate::mcp::listings::Edit;

/// Writes `text`, one message already read by [`super::list_json::read`], into `out` with
/// `edit` applied to its result, whose entries are its `entries` member; returns where the
/// value of the message's top-level `id` stands in `out`, when it has one.
pub(crate) fn write(
    text: &str,
    entries: &str,
    edit: &Edit,
    out: &mut Vec<u8>,
) -> Result<Option<Range<usize>>, serde_json::Error> {
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let id = Writer {
        out,
        part: Part::Message { entries, edit },
    }
    .deserialize(&mut deserializer)?;
    deserializer.end()?;
    Ok(id)
}

/// The part of the message a [`Writer`] is at.
#[derive(Clone, Copy)]
enum Part<'e> {
    /// The message object: every member copied, the result edited.
    Message { entries: &'e str, edit: &'e Edit },
    /// The result object.
    Result { entries: &'e str, edit: &'e Edit },
    /// The entries array: the kept ones copied.
    Entries(&'e [bool]),
}

/// Copies the part of the message it is at into `out`, edited.
struct Writer<'o, 'e> {
    out: &'o mut Vec<u8>,
    part: Part<'e>,
}

/// What a [`Writer`] says of the part it wrote: for the message, where its `id`'s value stands
/// in the output.
type IdSpan = Option<Range<usize>>;

impl<'de> DeserializeSeed<'de> for Writer<'_, '_> {
    type Value = IdSpan;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<IdSpan, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Writer<'_, '_> {
    type Value = IdSpan;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a listing's response, already read")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<IdSpan, A::Error> {
        let Writer { out, part } = self;
        if let Part::Entries(_) = part {
            return Err(de::Error::custom(
                "an object where the layer reads an array",
            ));
        }
        out.push(b'{');
        let mut first = true;
        let mut scope_written = false;
        let mut id = None;
        while let Some(key) = map.next_key_seed(Read(Text))? {
            let key = key.unwrap_or_default();
            name(out, &mut first, &key);
            match part {
                Part::Message { entries, edit } if key == "result" => {
                    let part = Part::Result { entries, edit };
                    map.next_value_seed(Writer { out, part })?;
                }
                Part::Message { .. } if key == "id" => {
                    let start = out.len();
                    copy(&mut map, out)?;
                    id = Some(start..out.len());
                }
                Part::Result { entries, edit } => {
                    scope_written |= edit.private.is_some() && key == "cacheScope";
                    result_member(&mut map, out, &key, entries, edit)?;
                }
                _ => copy(&mut map, out)?,
            }
        }
        if let Part::Result { edit, .. } = part
            && edit.private.is_some()
            && !scope_written
        {
            name(out, &mut first, "cacheScope");
            out.extend_from_slice(b"\"private\"");
        }
        out.push(b'}');
        Ok(id)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<IdSpan, A::Error> {
        let Part::Entries(kept) = self.part else {
            return Err(de::Error::custom("an array where the layer reads none"));
        };
        let out = self.out;
        out.push(b'[');
        let mut index = 0;
        let mut first = true;
        while let Some(entry) = seq.next_element::<&RawValue>()? {
            // An entry past the judged ones (there is none: both passes read the same text)
            // would be left out.
            if kept.get(index) == Some(&true) {
                if !first {
                    out.push(b',');
                }
                first = false;
                out.extend_from_slice(entry.get().as_bytes());
            }
            index += 1;
        }
        out.push(b']');
        Ok(None)
    }
}

/// One member of the result, edited as `edit` says.
fn result_member<'de, A: MapAccess<'de>>(
    map: &mut A,
    out: &mut Vec<u8>,
    key: &str,
    entries: &str,
    edit: &Edit,
) -> Result<(), A::Error> {
    if key == entries
        && let Some(kept) = &edit.kept
    {
        map.next_value_seed(Writer {
            out,
            part: Part::Entries(kept),
        })?;
        return Ok(());
    }
    if key == "nextCursor"
        && let Some(sealed) = &edit.next_cursor
    {
        map.next_value::<IgnoredAny>()?;
        string(out, sealed);
        return Ok(());
    }
    match (key, edit.private) {
        ("cacheScope", Some(_)) => {
            map.next_value::<IgnoredAny>()?;
            out.extend_from_slice(b"\"private\"");
        }
        ("ttlMs", Some(cap)) => {
            let ttl = map.next_value::<&RawValue>()?;
            let ttl = serde_json::from_str::<u64>(ttl.get()).ok();
            out.extend_from_slice(capped_ttl(ttl, cap).to_string().as_bytes());
        }
        _ => copy(map, out)?,
    }
    Ok(())
}

/// The next member's value, copied as it came.
fn copy<'de, A: MapAccess<'de>>(map: &mut A, out: &mut Vec<u8>) -> Result<(), A::Error> {
    let value = map.next_value::<&RawValue>()?;
    out.extend_from_slice(value.get().as_bytes());
    Ok(())
}

/// A member's name and colon, after a comma unless it is the object's first.
fn name(out: &mut Vec<u8>, first: &mut bool, key: &str) {
    if !std::mem::replace(first, false) {
        out.push(b',');
    }
    string(out, key);
    out.push(b':');
}

/// `text` as a JSON string.
fn string(out: &mut Vec<u8>, text: &str) {
    // Writing a string into a `Vec` cannot fail.
    let _ = serde_json::to_writer(&mut *out, text);
}

/// Makes `out[from..]`, JSON text, one line: a line ending can only be whitespace between
/// tokens there (inside a string it is escaped), so it becomes a space.
pub(crate) fn one_line(out: &mut [u8], from: usize) {
    let mut at = from;
    while let Some(found) = out
        .get(at..)
        .and_then(|rest| memchr::memchr2(b'\n', b'\r', rest))
    {
        out[at + found] = b' ';
        at += found + 1;
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::{Value, json};

    use super::*;

    fn edited(text: &str, edit: &Edit) -> String {
        let mut out = Vec::new();
        write(text, "tools", edit, &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    const PAGE: &str = r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"a", "x" : 1.50},{"name":"b"},{"name":"c"}],"nextCursor":"inner","ttlMs":600000,"cacheScope":"public","_meta":{"k":"v\n"}},"extra":[1]}"#;

    #[test]
    fn kept_entries_are_copied_byte_for_byte() {
        let edit = Edit {
            kept: Some(vec![true, false, true]),
            ..Edit::default()
        };
        let out = edited(PAGE, &edit);
        assert!(
            out.contains(r#"[{"name":"a", "x" : 1.50},{"name":"c"}]"#),
            "{out}"
        );
        let mut expected: Value = serde_json::from_str(PAGE).unwrap();
        expected["result"]["tools"]
            .as_array_mut()
            .unwrap()
            .remove(1);
        assert_eq!(serde_json::from_str::<Value>(&out).unwrap(), expected);
        let none = Edit {
            kept: Some(vec![false; 3]),
            ..Edit::default()
        };
        let out: Value = serde_json::from_str(&edited(PAGE, &none)).unwrap();
        assert_eq!(out["result"]["tools"], json!([]));
    }

    #[test]
    fn the_cursor_is_sealed_and_the_result_marked_private() {
        let edit = Edit {
            kept: None,
            next_cursor: Some("sealed\"".into()),
            private: Some(Duration::from_secs(60)),
        };
        let out: Value = serde_json::from_str(&edited(PAGE, &edit)).unwrap();
        let result = &out["result"];
        assert_eq!(result["nextCursor"], "sealed\"");
        assert_eq!(result["cacheScope"], "private");
        assert_eq!(result["ttlMs"], 60_000);
        assert_eq!(result["tools"].as_array().unwrap().len(), 3);
        assert_eq!(out["extra"], json!([1]));
        // Absent scope: added; odd ttl: zero; no members at all: still an object.
        let private = Edit {
            private: Some(Duration::from_secs(60)),
            ..Edit::default()
        };
        for (result, expected) in [
            (json!({}), json!({"cacheScope": "private"})),
            (
                json!({"ttlMs": 5, "tools": []}),
                json!({"ttlMs": 5, "tools": [], "cacheScope": "private"}),
            ),
            (
                json!({"ttlMs": -1}),
                json!({"ttlMs": 0, "cacheScope": "private"}),
            ),
            (
                json!({"ttlMs": "60"}),
                json!({"ttlMs": 0, "cacheScope": "private"}),
            ),
            (
                json!({"ttlMs": 1.5}),
                json!({"ttlMs": 0, "cacheScope": "private"}),
            ),
        ] {
            let text = json!({"jsonrpc": "2.0", "id": 1, "result": result}).to_string();
            let out: Value = serde_json::from_str(&edited(&text, &private)).unwrap();
            assert_eq!(out["result"], expected, "{text}");
        }
    }

    #[test]
    fn escaped_keys_are_written_again_escaped() {
        let text = r#"{"jsonrpc":"2.0","id":1,"result":{"to\u006fls":[1,2],"a\"b":0}}"#;
        let edit = Edit {
            kept: Some(vec![false, true]),
            ..Edit::default()
        };
        let out: Value = serde_json::from_str(&edited(text, &edit)).unwrap();
        assert_eq!(out["result"], json!({"tools": [2], "a\"b": 0}));
    }

    #[test]
    fn one_line_replaces_only_line_endings() {
        let mut text = b"{\"a\":\r\n 1,\n\"b\":\"x\\n\"}".to_vec();
        one_line(&mut text, 0);
        assert_eq!(text, b"{\"a\":   1, \"b\":\"x\\n\"}");
    }
}
