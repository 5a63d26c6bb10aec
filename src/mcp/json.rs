//! Strict JSON reading: what the layer decides on must be exactly what the inner server reads.
//!
//! `serde_json::Value` keeps the *last* of two duplicate keys; another parser may keep the
//! first. A body like `{"name":"echo","name":"delete_everything"}` could then be judged as one
//! tool and run as another. The layer therefore refuses duplicate keys at every depth, besides
//! everything `serde_json` already refuses (invalid UTF-8, lone surrogates, trailing bytes,
//! nesting deeper than 128 levels, numbers out of range).

use std::fmt;

use serde::de::{self, Deserialize, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

use super::reading::{Checked, Keys, Read, Reading, Text, check_map, check_seq};
use serde_json::{Map, Number, Value};

/// A JSON value parsed with duplicate keys refused.
pub(crate) struct StrictValue(pub Value);

/// Parses `bytes` as one JSON value, refusing duplicate object keys. The bytes are checked as
/// UTF-8 once, whole ([`crate::utf8`]), as [`parse_envelope`] checks a request, and the
/// parser then checks no string again.
pub(crate) fn parse_strict(bytes: &[u8]) -> Result<Value, serde_json::Error> {
    let text = crate::utf8::text(bytes)
        .ok_or_else(|| <serde_json::Error as de::Error>::custom("the text is not UTF-8"))?;
    serde_json::from_str::<StrictValue>(text).map(|v| v.0)
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

/// The top level of a JSON-RPC message, read in the same strict pass as everything below it,
/// without building a tree for the envelope or for `params`: only `id`, `method` and the few
/// members of `params` the layer reads on every request are kept, and `jsonrpc`, `result` and
/// `error` are reduced to what classification asks of them. Everything else is checked in place
/// and kept nowhere (see [`super::reading`]).
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
/// The rest of the object is checked ([`super::reading`]) and read again, from the body, only by
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
///
/// The body is checked as UTF-8 once, whole, before it is parsed (JSON text is UTF-8, RFC 8259
/// §8.1): a byte that is not refuses the body wherever it stands, and the parser then checks no
/// string again, which a reader of bytes does for each string it reads.
pub(crate) fn parse_envelope(bytes: &[u8]) -> Result<Shape<'_>, serde_json::Error> {
    let text = crate::utf8::text(bytes)
        .ok_or_else(|| <serde_json::Error as de::Error>::custom("the body is not UTF-8"))?;
    serde_json::from_str::<Shape>(text)
}

impl<'de> Deserialize<'de> for Shape<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Read(ShapeReading).deserialize(deserializer)
    }
}

/// A message body's top level.
struct ShapeReading;

impl<'de> Reading<'de> for ShapeReading {
    type Value = Shape<'de>;

    fn other(self) -> Shape<'de> {
        Shape::Other
    }

    fn array<A: SeqAccess<'de>>(self, seq: A) -> Result<Shape<'de>, A::Error> {
        // Refused as a batch, but only once it is known to be valid, strict JSON.
        check_seq(seq)?;
        Ok(Shape::Array)
    }

    fn object<A: MapAccess<'de>>(self, mut map: A) -> Result<Shape<'de>, A::Error> {
        let mut envelope = Envelope::default();
        let mut keys = Keys::default();
        while let Some(key) = keys.next(&mut map)? {
            match &*key {
                "jsonrpc" => {
                    let version: Field<'de> = map.next_value()?;
                    envelope.jsonrpc_is_2_0 = version.as_str() == Some("2.0");
                }
                "method" => envelope.method = Some(map.next_value()?),
                "id" => envelope.id = Some(map.next_value::<StrictValue>()?.0),
                "params" => {
                    // Built whole at once when the method already read is one whose route
                    // reads the whole object anyway.
                    let build =
                        matches!(&envelope.method, Some(Field::Str(m)) if m != "tools/call");
                    envelope.params = Some(map.next_value_seed(Read(ParamsReading { build }))?);
                }
                "result" => {
                    map.next_value_seed(Read(Checked))?;
                    envelope.has_result = true;
                }
                "error" => {
                    map.next_value_seed(Read(Checked))?;
                    envelope.has_error = true;
                }
                _ => map.next_value_seed(Read(Checked))?,
            }
        }
        Ok(Shape::Object(envelope))
    }
}

/// `params`, read into a [`ParamsSeen`]: `build`, the whole object too.
struct ParamsReading {
    build: bool,
}

impl<'de> Reading<'de> for ParamsReading {
    type Value = ParamsSeen<'de>;

    fn other(self) -> ParamsSeen<'de> {
        ParamsSeen::default()
    }

    fn object<A: MapAccess<'de>>(self, mut map: A) -> Result<ParamsSeen<'de>, A::Error> {
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
        let mut keys = Keys::default();
        while let Some(key) = keys.next(&mut map)? {
            let kept = match &*key {
                "name" => {
                    seen.name = Some(map.next_value()?);
                    continue;
                }
                "arguments" => {
                    seen.arguments = map.next_value_seed(Read(KindOf))?;
                    continue;
                }
                "_meta" => &mut seen.meta,
                "requestState" => &mut seen.request_state,
                "inputResponses" => &mut seen.input_responses,
                _ => {
                    map.next_value_seed(Read(Checked))?;
                    continue;
                }
            };
            *kept = Some(map.next_value::<StrictValue>()?.0);
        }
        Ok(seen)
    }
}

/// A value read as strictly as [`StrictValue`] reads it, and kept nowhere but its [`Kind`].
pub(crate) struct KindOf;

impl<'de> Reading<'de> for KindOf {
    type Value = Kind;

    fn other(self) -> Kind {
        Kind::Other
    }

    fn null(self) -> Kind {
        Kind::Null
    }

    fn object<A: MapAccess<'de>>(self, map: A) -> Result<Kind, A::Error> {
        check_map(map)?;
        Ok(Kind::Object)
    }
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
        let text = Read(Text).deserialize(deserializer)?;
        Ok(text.map_or(Field::Other, Field::Str))
    }
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
            b"{\"a\":\"\xff\"}",
            b"{\"\xc3\":1}",
            b"{\"a\":[\"\xed\xa0\x80\"]}",
            b"{\"a\":\"\xc3\xa9\"}",
            b"{\"a\":1} \xff",
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
