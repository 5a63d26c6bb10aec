//! `authorization_reference`: a stable, opaque name for a set of authorization details.
//!
//! Clients use the reference to find a token they already hold for the same details, so equal
//! details must give equal references whatever their key order or whitespace. The reference is
//! derived from the details' canonical JSON (object keys sorted at every depth, no whitespace)
//! through SHA-256, and reveals nothing of the details themselves.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// Writes `value` as canonical JSON: sorted keys, no insignificant whitespace.
pub(crate) fn canonical_json(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                canonical_json(&map[key], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical_json(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

/// The derived reference of a list of authorization details: `ref_` and 22 base64url characters.
pub fn derive_reference(details: &[Value]) -> String {
    let mut canonical = String::new();
    canonical_json(&Value::Array(details.to_vec()), &mut canonical);
    let digest = Sha256::digest(canonical.as_bytes());
    format!("ref_{}", URL_SAFE_NO_PAD.encode(&digest[..16]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn key_order_does_not_change_the_reference() {
        let a: Value =
            serde_json::from_str(r#"[{"type":"p","amount":{"value":"40.00","currency":"EUR"}}]"#)
                .unwrap();
        let b: Value = serde_json::from_str(
            r#"[ { "amount" : { "currency":"EUR", "value":"40.00" }, "type":"p" } ]"#,
        )
        .unwrap();
        let (Value::Array(a), Value::Array(b)) = (a, b) else {
            unreachable!()
        };
        assert_eq!(derive_reference(&a), derive_reference(&b));
        assert_ne!(
            derive_reference(&a),
            derive_reference(&[json!({"type":"p","amount":{"value":"400.00","currency":"EUR"}})])
        );
        assert!(derive_reference(&a).starts_with("ref_"));
        assert_eq!(derive_reference(&a).len(), 26);
    }

    #[test]
    fn canonical_form_is_compact_and_sorted() {
        let mut out = String::new();
        canonical_json(
            &json!({"b": [1, {"d": null, "c": "x\"y"}], "a": true}),
            &mut out,
        );
        assert_eq!(out, r#"{"a":true,"b":[1,{"c":"x\"y","d":null}]}"#);
    }
}
