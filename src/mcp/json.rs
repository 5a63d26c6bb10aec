//! Strict JSON reading: what the layer decides on must be exactly what the inner server reads.
//!
//! `serde_json::Value` keeps the *last* of two duplicate keys; another parser may keep the
//! first. A body like `{"name":"echo","name":"delete_everything"}` could then be judged as one
//! tool and run as another. The layer therefore refuses duplicate keys at every depth, besides
//! everything `serde_json` already refuses (invalid UTF-8, lone surrogates, trailing bytes,
//! nesting deeper than 128 levels, numbers out of range).

use std::fmt;

use serde::de::{self, Deserialize, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

/// A JSON value parsed with duplicate keys refused.
pub(crate) struct StrictValue(pub Value);

/// Parses `bytes` as one JSON value, refusing duplicate object keys.
#[cfg(test)]
pub(crate) fn parse_strict(bytes: &[u8]) -> Result<Value, serde_json::Error> {
    serde_json::from_slice::<StrictValue>(bytes).map(|v| v.0)
}

impl<'de> Deserialize<'de> for StrictValue {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(StrictVisitor).map(StrictValue)
    }
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom("number out of range"))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(StrictVisitor)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(64));
        while let Some(StrictValue(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Value, A::Error> {
        strict_object(map).map(Value::Object)
    }
}

/// An object read strictly, duplicate keys refused.
fn strict_object<'de, A: MapAccess<'de>>(mut map: A) -> Result<Map<String, Value>, A::Error> {
    let mut object = Map::new();
    while let Some(key) = map.next_key::<String>()? {
        if object.contains_key(&key) {
            return Err(de::Error::custom(format_args!("duplicate key {key:?}")));
        }
        let StrictValue(value) = map.next_value()?;
        object.insert(key, value);
    }
    Ok(object)
}

/// The visits of a visitor that keeps nothing of a scalar: booleans, integers, floats and
/// `null` all become `$other`, a float only once it is known to be in range (as
/// [`StrictVisitor`] checks it).
macro_rules! scalars_become {
    ($other:expr, $value:ty) => {
        fn visit_bool<E>(self, _: bool) -> Result<$value, E> {
            Ok($other)
        }

        fn visit_i64<E>(self, _: i64) -> Result<$value, E> {
            Ok($other)
        }

        fn visit_u64<E>(self, _: u64) -> Result<$value, E> {
            Ok($other)
        }

        fn visit_f64<E: de::Error>(self, v: f64) -> Result<$value, E> {
            StrictVisitor.visit_f64(v).map(|_| $other)
        }

        fn visit_unit<E>(self) -> Result<$value, E> {
            Ok($other)
        }
    };
}

/// The string visits of a visitor that keeps a string as a `Cow`: borrowed from the body when it
/// has no escapes, owned otherwise. `$wrap` turns the `Cow` into the visitor's value.
macro_rules! strings_become {
    ($wrap:expr, $value:ty) => {
        fn visit_borrowed_str<E>(self, v: &'de str) -> Result<$value, E> {
            Ok($wrap(v.into()))
        }

        fn visit_str<E>(self, v: &str) -> Result<$value, E> {
            Ok($wrap(v.to_owned().into()))
        }

        fn visit_string<E>(self, v: String) -> Result<$value, E> {
            Ok($wrap(v.into()))
        }
    };
}

/// The top level of a JSON-RPC message, read in the same strict pass as everything below it,
/// without building a tree for the envelope or for `params`: only `id`, `method` and the few
/// members of `params` the layer reads on every request are kept, and `jsonrpc`, `result` and
/// `error` are reduced to what classification asks of them. Everything else is checked in place
/// and kept nowhere (see [`Checked`]).
#[derive(Debug, Default)]
pub(crate) struct Envelope<'de> {
    /// `jsonrpc` is present and is exactly the string `"2.0"`.
    pub jsonrpc_is_2_0: bool,
    pub id: Option<Value>,
    /// `method`, borrowed from the body when it is a string without escapes.
    pub method: Option<Field<'de>>,
    /// What `params` held, when it was sent.
    pub params: Option<ParamsSeen<'de>>,
    pub has_result: bool,
    pub has_error: bool,
}

/// What one strict pass over `params` keeps: the members the layer reads on every request.
/// The rest of the object is checked (see [`Checked`]) and read again, from the body, only by
/// the paths that need it whole; or, when the request's `method` came first and is not
/// `tools/call` (every other method's route reads its params whole), the whole object is built
/// in this same pass and nothing is read twice.
#[derive(Debug, Default)]
pub(crate) struct ParamsSeen<'de> {
    /// The whole object, when it was built in this pass (the members below are then not
    /// kept apart: read them with [`ParamsSeen::member`]).
    pub whole: Option<Map<String, Value>>,
    /// `params` is an object (anything else is refused by classification).
    pub is_object: bool,
    /// `name`, borrowed when it is a string without escapes.
    pub name: Option<Field<'de>>,
    /// What `arguments` is.
    pub arguments: Kind,
    /// `_meta`, `requestState`, `inputResponses`: read into values (small, and rare but on
    /// retries and modern requests).
    pub meta: Option<Value>,
    pub request_state: Option<Value>,
    pub input_responses: Option<Value>,
}

impl ParamsSeen<'_> {
    /// `_meta`, `requestState` or `inputResponses`, wherever this pass kept it.
    pub fn member(&self, key: &str) -> Option<&Value> {
        if let Some(whole) = &self.whole {
            return whole.get(key);
        }
        match key {
            "_meta" => self.meta.as_ref(),
            "requestState" => self.request_state.as_ref(),
            "inputResponses" => self.input_responses.as_ref(),
            _ => None,
        }
    }
}

/// The JSON type of a member the layer only needs to know the type of.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Not sent.
    #[default]
    Absent,
    Null,
    Object,
    /// A string, number, boolean or array.
    Other,
}

/// What a message body is at its top level.
#[derive(Debug)]
#[allow(
    clippy::large_enum_variant,
    reason = "made once per request on the stack and taken apart at once; a box would be an allocation per request"
)]
pub(crate) enum Shape<'de> {
    Object(Envelope<'de>),
    Array,
    Other,
}

/// Reads a message body strictly (see the module documentation) into its [`Shape`].
pub(crate) fn parse_envelope(bytes: &[u8]) -> Result<Shape<'_>, serde_json::Error> {
    serde_json::from_slice::<Shape>(bytes)
}

impl<'de> Deserialize<'de> for Shape<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ShapeVisitor)
    }
}

struct ShapeVisitor;

impl<'de> Visitor<'de> for ShapeVisitor {
    type Value = Shape<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    scalars_become!(Shape::Other, Shape<'de>);

    fn visit_str<E>(self, _: &str) -> Result<Shape<'de>, E> {
        Ok(Shape::Other)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Shape<'de>, A::Error> {
        // Refused as a batch, but only once it is known to be valid, strict JSON.
        CheckedVisitor.visit_seq(seq).map(|_| Shape::Array)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Shape<'de>, A::Error> {
        let mut envelope = Envelope::default();
        let mut keys = KeySet::default();
        while let Some(key) = map.next_key::<Key<'de>>()? {
            let member = TopMember::of(&key);
            keys.insert(key)?;
            match member {
                TopMember::Jsonrpc => {
                    let version: Field<'de> = map.next_value()?;
                    envelope.jsonrpc_is_2_0 = version.as_str() == Some("2.0");
                }
                TopMember::Method => envelope.method = Some(map.next_value()?),
                TopMember::Id => envelope.id = Some(map.next_value::<StrictValue>()?.0),
                TopMember::Params => {
                    // Built whole at once when the method already read is one whose route
                    // reads the whole object anyway.
                    let build =
                        matches!(&envelope.method, Some(Field::Str(m)) if m != "tools/call");
                    envelope.params = Some(map.next_value_seed(ParamsSeed { build })?);
                }
                TopMember::Result => {
                    map.next_value::<Checked>()?;
                    envelope.has_result = true;
                }
                TopMember::Error => {
                    map.next_value::<Checked>()?;
                    envelope.has_error = true;
                }
                TopMember::Other => {
                    map.next_value::<Checked>()?;
                }
            }
        }
        Ok(Shape::Object(envelope))
    }
}

/// The members of the envelope, as [`ShapeVisitor`] tells them apart.
enum TopMember {
    Jsonrpc,
    Method,
    Id,
    Params,
    Result,
    Error,
    Other,
}

impl TopMember {
    fn of(key: &Key<'_>) -> Self {
        match &*key.0 {
            "jsonrpc" => Self::Jsonrpc,
            "method" => Self::Method,
            "id" => Self::Id,
            "params" => Self::Params,
            "result" => Self::Result,
            "error" => Self::Error,
            _ => Self::Other,
        }
    }
}

/// Reads `params` into a [`ParamsSeen`]: `build`, the whole object too.
struct ParamsSeed {
    build: bool,
}

impl<'de> DeserializeSeed<'de> for ParamsSeed {
    type Value = ParamsSeen<'de>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(ParamsVisitor { build: self.build })
    }
}

struct ParamsVisitor {
    build: bool,
}

impl<'de> Visitor<'de> for ParamsVisitor {
    type Value = ParamsSeen<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    scalars_become!(ParamsSeen::default(), ParamsSeen<'de>);

    fn visit_str<E>(self, _: &str) -> Result<ParamsSeen<'de>, E> {
        Ok(ParamsSeen::default())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<ParamsSeen<'de>, A::Error> {
        CheckedVisitor.visit_seq(seq).map(|_| ParamsSeen::default())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ParamsSeen<'de>, A::Error> {
        if self.build {
            return Ok(ParamsSeen {
                is_object: true,
                whole: Some(strict_object(map)?),
                ..ParamsSeen::default()
            });
        }
        let mut seen = ParamsSeen {
            is_object: true,
            ..ParamsSeen::default()
        };
        let mut keys = KeySet::default();
        while let Some(key) = map.next_key::<Key<'de>>()? {
            let slot = match &*key.0 {
                "name" => {
                    keys.insert(key)?;
                    seen.name = Some(map.next_value()?);
                    continue;
                }
                "arguments" => {
                    keys.insert(key)?;
                    seen.arguments = map.next_value::<Checked>()?.0;
                    continue;
                }
                "_meta" => &mut seen.meta,
                "requestState" => &mut seen.request_state,
                "inputResponses" => &mut seen.input_responses,
                _ => {
                    keys.insert(key)?;
                    map.next_value::<Checked>()?;
                    continue;
                }
            };
            keys.insert(key)?;
            *slot = Some(map.next_value::<StrictValue>()?.0);
        }
        Ok(seen)
    }
}

/// A value read as strictly as [`StrictValue`] reads it, and kept nowhere: only its [`Kind`]
/// is. Nothing is allocated but for an object key with escapes, or the key set of an object
/// with many members.
pub(crate) struct Checked(pub Kind);

impl<'de> Deserialize<'de> for Checked {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(CheckedVisitor)
    }
}

struct CheckedVisitor;

impl<'de> Visitor<'de> for CheckedVisitor {
    type Value = Checked;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<Checked, E> {
        Ok(Checked(Kind::Other))
    }

    fn visit_i64<E>(self, _: i64) -> Result<Checked, E> {
        Ok(Checked(Kind::Other))
    }

    fn visit_u64<E>(self, _: u64) -> Result<Checked, E> {
        Ok(Checked(Kind::Other))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Checked, E> {
        StrictVisitor.visit_f64(v).map(|_| Checked(Kind::Other))
    }

    fn visit_unit<E>(self) -> Result<Checked, E> {
        Ok(Checked(Kind::Null))
    }

    fn visit_none<E>(self) -> Result<Checked, E> {
        Ok(Checked(Kind::Null))
    }

    fn visit_borrowed_str<E>(self, _: &'de str) -> Result<Checked, E> {
        Ok(Checked(Kind::Other))
    }

    fn visit_str<E>(self, _: &str) -> Result<Checked, E> {
        Ok(Checked(Kind::Other))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Checked, A::Error> {
        while seq.next_element::<Checked>()?.is_some() {}
        Ok(Checked(Kind::Other))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Checked, A::Error> {
        let mut keys = KeySet::default();
        while let Some(key) = map.next_key::<Key<'de>>()? {
            keys.insert(key)?;
            map.next_value::<Checked>()?;
        }
        Ok(Checked(Kind::Object))
    }
}

/// The keys of one object seen so far, to refuse a duplicate: a few kept inline (every
/// message the layer reads has a few members per object), a set once there are many, so that
/// a wide object costs a lookup per key, not a scan.
#[derive(Default)]
struct KeySet<'de> {
    few: smallvec::SmallVec<[Key<'de>; KeySet::INLINE]>,
    many: std::collections::BTreeSet<Key<'de>>,
}

impl<'de> KeySet<'de> {
    const INLINE: usize = 8;

    /// Adds `key`, refusing it if the object already had it.
    fn insert<E: de::Error>(&mut self, key: Key<'de>) -> Result<(), E> {
        if self.many.is_empty() && self.few.len() < Self::INLINE {
            if self.few.contains(&key) {
                return Err(duplicate(&key));
            }
            self.few.push(key);
            return Ok(());
        }
        self.many.extend(self.few.drain(..));
        if self.many.contains(&key) {
            return Err(duplicate(&key));
        }
        self.many.insert(key);
        Ok(())
    }
}

/// The error for a key an object already had (the words classification looks for).
fn duplicate<E: de::Error>(key: &Key<'_>) -> E {
    E::custom(format_args!("duplicate key {:?}", key.0))
}

/// A member of the envelope that only matters when it is a string: the string, borrowed from
/// the body when it has no escapes, or `Other` for any other value (read as strictly as the
/// rest of the body).
#[derive(Debug, PartialEq)]
pub(crate) enum Field<'de> {
    Str(std::borrow::Cow<'de, str>),
    Other,
}

impl Field<'_> {
    /// The string, if the member is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Field::Str(text) => Some(text),
            Field::Other => None,
        }
    }
}

impl<'de> Deserialize<'de> for Field<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(FieldVisitor)
    }
}

struct FieldVisitor;

impl<'de> Visitor<'de> for FieldVisitor {
    type Value = Field<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    strings_become!(Field::Str, Field<'de>);

    scalars_become!(Field::Other, Field<'de>);

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Field<'de>, A::Error> {
        CheckedVisitor.visit_seq(seq).map(|_| Field::Other)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Field<'de>, A::Error> {
        CheckedVisitor.visit_map(map).map(|_| Field::Other)
    }
}

/// An object key, borrowed from the body when it has no escapes.
#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct Key<'de>(std::borrow::Cow<'de, str>);

impl std::borrow::Borrow<str> for Key<'_> {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_str(KeyVisitor)
    }
}

struct KeyVisitor;

impl<'de> Visitor<'de> for KeyVisitor {
    type Value = Key<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object key")
    }

    strings_become!(Key, Key<'de>);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplicate_keys_are_refused_at_any_depth() {
        assert!(parse_strict(br#"{"a":1,"a":2}"#).is_err());
        assert!(parse_strict(br#"{"p":{"name":"x","name":"y"}}"#).is_err());
        assert!(parse_strict(br#"[{"k":1},{"k":1,"k":1}]"#).is_err());
        // Escapes that spell the same key are the same key.
        assert!(parse_strict(br#"{"name":1,"na\u006de":2}"#).is_err());
    }

    #[test]
    fn what_serde_json_refuses_stays_refused() {
        for bad in [
            &b"{\"a\":1} x"[..],
            b"\xff",
            b"{\"a\":\"\\ud800\"}",
            b"1e400",
            b"",
        ] {
            assert!(parse_strict(bad).is_err(), "{bad:?}");
        }
        let deep = "[".repeat(200) + &"]".repeat(200);
        assert!(parse_strict(deep.as_bytes()).is_err());
    }

    #[test]
    fn same_value_as_serde_json_otherwise() {
        let text = br#"{"a":[1,-2,3.5,"s",null,true,{"b":{}}],"u":18446744073709551615}"#;
        assert_eq!(
            parse_strict(text).unwrap(),
            serde_json::from_slice::<Value>(text).unwrap()
        );
    }

    #[test]
    fn the_envelope_refuses_duplicates_at_the_top_too() {
        for body in [
            &br#"{"jsonrpc":"2.0","id":1,"method":"a","method":"b"}"#[..],
            br#"{"jsonrpc":"2.0","id":1,"id":2,"method":"a"}"#,
            br#"{"jsonrpc":"2.0","jsonrpc":"2.0","id":1,"method":"a"}"#,
            br#"{"jsonrpc":"2.0","id":1,"method":"a","\u006dethod":"b"}"#,
            br#"{"jsonrpc":"2.0","id":1,"result":1,"result":2}"#,
            br#"{"jsonrpc":"2.0","id":1,"method":"a","x":1,"x":2}"#,
            br#"{"jsonrpc":"2.0","id":1,"method":"a","params":{"n":1,"n":2}}"#,
            br#"{"jsonrpc":"2.0","id":1,"method":"a","params":{},"params":{}}"#,
            br#"{"jsonrpc":"2.0","id":1,"method":"a","params":{},"\u0070arams":{}}"#,
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","\u006eame":"b"}}"#,
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"arguments":{},"arguments":{}}}"#,
            br#"{"jsonrpc":"2.0","id":1,"method":"a","params":{"_meta":{},"_meta":{}}}"#,
            br#"{"jsonrpc":"2.0","id":1,"method":"a","params":{"arguments":{"k":[{"x":1,"x":2}]}}}"#,
            br#"[{"a":1,"a":1}]"#,
        ] {
            let error = parse_envelope(body).unwrap_err();
            assert!(error.to_string().starts_with("duplicate key"), "{error}");
        }
    }

    #[test]
    fn a_duplicate_is_found_in_a_wide_object_too() {
        // Past the keys kept inline, the set is a tree: a duplicate before or after the switch
        // is still one.
        let wide: Vec<String> = (0..40).map(|i| format!(r#""k{i}":{i}"#)).collect();
        let body = |extra: &str| {
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"a","arguments":{{{}{extra}}}}}}}"#,
                wide.join(",")
            )
        };
        assert!(parse_envelope(body("").as_bytes()).is_ok());
        for again in [r#","k3":0"#, r#","k39":0"#, r#","k\u0032":0"#] {
            let error = parse_envelope(body(again).as_bytes()).unwrap_err();
            assert!(
                error.to_string().starts_with("duplicate key"),
                "{again}: {error}"
            );
        }
    }

    #[test]
    fn the_envelope_accepts_exactly_what_the_strict_tree_accepts() {
        for body in [
            &br#"{"jsonrpc":"2.0","id":1,"method":"a","params":{"x":[1,{"y":null}]}}"#[..],
            br#"{"jsonrpc":2,"id":1.5,"method":{"a":[]},"extra":"x"}"#,
            br#"{"jsonrpc":{"a":1,"a":2},"method":"m"}"#,
            br#"{"jsonrpc":"2.0","method":[{"a":1,"a":2}]}"#,
            br#"{"jsonrpc":"2.0","method":"m","method":"n"}"#,
            br#"{"jsonrpc":"2.0","method":1e400}"#,
            br#"{"jsonrpc":"2.0","id":1,"error":{"code":1},"result":[]}"#,
            br#"[1,2,3]"#,
            br#"true"#,
            br#""text""#,
            br#"{}"#,
            br#"{"a":1} x"#,
            br#"{"a":"\ud800"}"#,
            br#"{"a":1e400}"#,
            b"",
        ] {
            assert_eq!(
                parse_envelope(body).is_ok(),
                parse_strict(body).is_ok(),
                "{}",
                String::from_utf8_lossy(body)
            );
        }
        let Ok(Shape::Object(envelope)) =
            parse_envelope(br#"{"jsonrpc":"2.0","id":"7","method":"m","params":{"k":1}}"#)
        else {
            panic!("an object")
        };
        assert!(envelope.jsonrpc_is_2_0);
        assert_eq!(envelope.id, Some(Value::from("7")));
        assert_eq!(envelope.method, Some(Field::Str("m".into())));
        let params = envelope.params.expect("params");
        assert!(params.is_object && params.name.is_none());
        assert_eq!(params.arguments, Kind::Absent);
        assert!(!envelope.has_result && !envelope.has_error);
    }

    /// JSON-like text built from pieces that make duplicates, escapes, lone surrogates,
    /// numbers out of range, deep nesting and plain syntax errors likely.
    fn json_text() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just("1".to_owned()),
            Just("-2.5".to_owned()),
            Just("1e400".to_owned()),
            Just("null".to_owned()),
            Just("true".to_owned()),
            Just(r#""s""#.to_owned()),
            Just(r#""\ud800""#.to_owned()),
            Just(r#""\u00e9\n""#.to_owned()),
            Just("[".to_owned()),
            Just("".to_owned()),
        ];
        leaf.prop_recursive(6, 64, 5, |inner| {
            let key = prop_oneof![
                Just("a"),
                Just("b"),
                Just("name"),
                Just("na\\u006de"),
                Just("arguments"),
                Just("_meta"),
                Just("requestState"),
                Just("inputResponses"),
            ];
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..5)
                    .prop_map(|items| format!("[{}]", items.join(","))),
                proptest::collection::vec((key, inner), 0..12).prop_map(|members| {
                    let members: Vec<String> = members
                        .into_iter()
                        .map(|(k, v)| format!(r#""{k}":{v}"#))
                        .collect();
                    format!("{{{}}}", members.join(","))
                }),
            ]
        })
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(4000))]

        /// The pass that checks without building accepts exactly what the strict tree
        /// accepts, and the params it did not build read back, whole, as the tree has them.
        #[test]
        fn checking_accepts_exactly_what_building_accepts(params in json_text(), top in json_text()) {
            for body in [
                format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{params}}}"#),
                format!(r#"{{"params":{params},"x":{top},"method":"m"}}"#),
                format!(r#"{{"jsonrpc":"2.0","id":1,"method":"m","params":{params}}}"#),
                top.clone(),
            ] {
                let checked = parse_envelope(body.as_bytes());
                let built = parse_strict(body.as_bytes());
                proptest::prop_assert_eq!(checked.is_ok(), built.is_ok(), "{}", body);
                if let Ok(Value::Object(mut tree)) = built
                    && let Some(Value::Object(expected)) = tree.remove("params")
                {
                    let mut seen = match checked {
                        Ok(Shape::Object(envelope)) => envelope.params.expect("params"),
                        _ => panic!("an object"),
                    };
                    let params = crate::mcp::params::Params::seen(
                        &mut seen,
                        bytes::Bytes::from(body.clone()),
                    );
                    proptest::prop_assert_eq!(params.whole(), &expected);
                    for key in ["_meta", "requestState", "inputResponses", "name"] {
                        proptest::prop_assert_eq!(params.get(key), expected.get(key));
                    }
                }
            }
        }
    }
}
