//! Strict JSON reading: what the layer decides on must be exactly what the inner server reads.
//!
//! `serde_json::Value` keeps the *last* of two duplicate keys; another parser may keep the
//! first. A body like `{"name":"echo","name":"delete_everything"}` could then be judged as one
//! tool and run as another. The layer therefore refuses duplicate keys at every depth, besides
//! everything `serde_json` already refuses (invalid UTF-8, lone surrogates, trailing bytes,
//! nesting deeper than 128 levels, numbers out of range).

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

/// A JSON value parsed with duplicate keys refused.
pub(crate) struct StrictValue(pub Value);

/// Parses `bytes` as one JSON value, refusing duplicate object keys.
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

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if object.contains_key(&key) {
                return Err(de::Error::custom(format_args!("duplicate key {key:?}")));
            }
            let StrictValue(value) = map.next_value()?;
            object.insert(key, value);
        }
        Ok(Value::Object(object))
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
}
