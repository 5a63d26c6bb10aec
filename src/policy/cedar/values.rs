//! JSON values as Cedar values, built with Cedar's typed constructors (not its JSON parser,
//! which costs most of an evaluation): a string is a `String`, an integer a `Long`, a boolean a
//! `Bool`, an array a set, an object a record; a number the tool's JSON Schema types `number`
//! is an exact `decimal`. Whether the result fits the schema is Cedar's to check when the
//! request or the entity is validated.

use cedar_policy::RestrictedExpression;
use serde_json::Value;

/// Why a value has no Cedar form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Unrepresentable {
    /// Where, from the outermost key in (`["input", "price"]`); built only on failure.
    path: Vec<String>,
    /// What.
    kind: Problem,
}

/// What has no Cedar form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Problem {
    /// JSON `null`: Cedar has no null.
    Null,
    /// A number that is neither a 64-bit integer nor, where the schema says `number`, a
    /// decimal Cedar can hold exactly (at most four decimal places).
    Number,
    /// A record Cedar refused (a key twice: cannot happen with serde_json's map).
    Record,
}

impl Unrepresentable {
    fn new(kind: Problem) -> Self {
        Self {
            path: Vec::new(),
            kind,
        }
    }

    /// The same error, one level out.
    pub fn within(mut self, key: impl Into<String>) -> Self {
        self.path.insert(0, key.into());
        self
    }
}

impl std::fmt::Display for Unrepresentable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = match self.kind {
            Problem::Null => "is null, which Cedar cannot hold",
            Problem::Number => "is a number Cedar cannot hold exactly",
            Problem::Record => "is a record Cedar cannot hold",
        };
        write!(f, "{} {what}", self.path.join("."))
    }
}

impl std::error::Error for Unrepresentable {}

/// Whether a JSON Schema says `number` (and not `integer`).
fn types_number(schema: Option<&Value>) -> bool {
    match schema.and_then(|s| s.get("type")) {
        Some(Value::String(t)) => t == "number",
        Some(Value::Array(types)) => {
            types.iter().any(|t| t == "number") && !types.iter().any(|t| t == "integer")
        }
        _ => false,
    }
}

/// `value` as a Cedar value; `schema` is the JSON Schema describing it, when known (a tool's
/// `inputSchema`). An error names the place from `value` in; add outer keys with
/// [`Unrepresentable::within`].
pub(super) fn to_cedar(
    value: &Value,
    schema: Option<&Value>,
) -> Result<RestrictedExpression, Unrepresentable> {
    Ok(match value {
        Value::Null => return Err(Unrepresentable::new(Problem::Null)),
        Value::Bool(flag) => RestrictedExpression::new_bool(*flag),
        Value::String(text) => RestrictedExpression::new_string(text.clone()),
        Value::Number(number) if types_number(schema) => {
            let text = decimal_text(number).ok_or(Unrepresentable::new(Problem::Number))?;
            RestrictedExpression::new_decimal(text)
        }
        Value::Number(number) => match number.as_i64() {
            Some(long) => RestrictedExpression::new_long(long),
            None => return Err(Unrepresentable::new(Problem::Number)),
        },
        Value::Array(items) => {
            let items_schema = schema.and_then(|s| s.get("items"));
            let members = items
                .iter()
                .enumerate()
                .map(|(index, item)| {
                    to_cedar(item, items_schema).map_err(|e| e.within(index.to_string()))
                })
                .collect::<Result<Vec<_>, _>>()?;
            RestrictedExpression::new_set(members)
        }
        Value::Object(map) => {
            let properties = schema.and_then(|s| s.get("properties"));
            let fields = map
                .iter()
                .map(|(key, field)| {
                    let field_schema = properties.and_then(|p| p.get(key));
                    let cedar = to_cedar(field, field_schema).map_err(|e| e.within(key))?;
                    Ok((key.clone(), cedar))
                })
                .collect::<Result<Vec<_>, Unrepresentable>>()?;
            RestrictedExpression::new_record(fields)
                .map_err(|_| Unrepresentable::new(Problem::Record))?
        }
    })
}

/// `number` as Cedar decimal text (`"1.5000"`), when exact and in range.
fn decimal_text(number: &serde_json::Number) -> Option<String> {
    // The JSON text itself, so that no float rounding happens on the way.
    let text = number.to_string();
    if text.contains(['e', 'E']) {
        return None;
    }
    let (whole, fraction) = text.split_once('.').unwrap_or((&text, ""));
    if fraction.len() > 4 {
        return None;
    }
    let digits = whole.trim_start_matches('-');
    // decimal's range: ±922337203685477.5807 (the edge itself is refused, to stay simple).
    if digits.len() > 15 || (digits.len() == 15 && digits >= "922337203685477") {
        return None;
    }
    Some(format!("{whole}.{fraction:0<4}"))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn cedar_text(value: &Value, schema: &Value) -> Result<String, Unrepresentable> {
        let expression = to_cedar(value, Some(schema)).map_err(|e| e.within("input"))?;
        let context = cedar_policy::Context::from_pairs([("input".to_owned(), expression)]);
        Ok(context.expect("a context").to_string())
    }

    #[test]
    fn numbers_become_exact_decimals_or_are_refused() {
        let schema = json!({"type": "object", "properties": {
            "price": {"type": "number"}, "count": {"type": "integer"},
            "list": {"type": "array", "items": {"type": ["number", "null"]}},
        }});
        let text = cedar_text(
            &json!({"price": 1.5, "count": 2, "list": [3, -0.25]}),
            &schema,
        )
        .unwrap();
        assert!(text.contains(r#"decimal("1.5000")"#), "{text}");
        assert!(
            text.contains(r#"decimal("3.0000")"#) && text.contains(r#"decimal("-0.2500")"#),
            "{text}"
        );
        assert!(text.contains("count: 2"), "integers stay Long: {text}");
        for inexact in [
            json!({"price": 0.12345}),
            json!({"price": 1e300}),
            json!({"price": 1e20}),
        ] {
            let error = cedar_text(&inexact, &schema).unwrap_err();
            assert_eq!(
                error.to_string(),
                "input.price is a number Cedar cannot hold exactly"
            );
        }
        assert_eq!(
            cedar_text(&json!({"count": 1.5}), &schema)
                .unwrap_err()
                .to_string(),
            "input.count is a number Cedar cannot hold exactly",
            "a fraction where no schema says number"
        );
        assert_eq!(
            cedar_text(&json!({"list": [1, null]}), &schema)
                .unwrap_err()
                .to_string(),
            "input.list.1 is null, which Cedar cannot hold"
        );
    }

    #[test]
    fn every_json_kind() {
        let text = cedar_text(
            &json!({"s": "a\"b", "b": true, "n": -3, "set": ["x"], "r": {"k": "v"}}),
            &json!({}),
        )
        .unwrap();
        for part in [
            r#"s: "a\"b""#,
            "b: true",
            "n: -3",
            r#"set: ["x"]"#,
            r#"r: {k: "v"}"#,
        ] {
            assert!(text.contains(part), "{part} in {text}");
        }
    }
}
