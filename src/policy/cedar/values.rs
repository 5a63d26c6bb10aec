//! JSON as Cedar values, built with Cedar's typed constructors (not its JSON parser, which
//! costs most of an evaluation): a string is a `String`, an integer a `Long`, a boolean a
//! `Bool`, an array a set, an object a record; a number the tool's JSON Schema types `number`
//! is an exact `decimal`. Whether the result fits the schema is Cedar's to check when the
//! request or the entity is validated.
//!
//! The conversion reads JSON *text* ([`to_cedar`]): a tool call's arguments are read from the
//! request's own bytes, so that a number is the value its text says (see [`super::number`]),
//! never the float `serde_json` made of it. The gate context is built field by field
//! ([`super::gate`]); the other values the layer builds itself (the principal, once per
//! principal, and the hook's `app`) are written out by `serde_json` first ([`value_to_cedar`]).

use cedar_policy::RestrictedExpression;
use serde_json::Value;

use super::json_text::{Reader, Start};
use super::number;
use super::shape::Shape;

/// As deep as the layer reads a body (serde_json's limit); deeper text is refused.
const MAX_DEPTH: usize = 128;

/// Why a value has no Cedar form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Unrepresentable {
    /// Where, from the outermost key in (`["input", "price"]`); built only on failure. A key
    /// the JSON Schema does not declare is written `*`: what a request carries is never shown.
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
    /// A record Cedar refused (a key twice: the layer refuses such a body before).
    Record,
    /// Nested deeper than [`MAX_DEPTH`].
    Depth,
    /// Text that does not follow the JSON grammar (the layer parsed it before: cannot happen).
    Malformed,
}

impl Unrepresentable {
    /// A record Cedar refused.
    pub(super) fn record() -> Self {
        Self::new(Problem::Record)
    }

    fn new(kind: Problem) -> Self {
        Self {
            path: Vec::new(),
            kind,
        }
    }

    /// The same error, one level out, under `key` (a name the layer or the schema chose).
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
            Problem::Depth => "is nested too deep",
            Problem::Malformed => "is not JSON the layer can read",
        };
        write!(f, "{} {what}", self.path.join("."))
    }
}

impl std::error::Error for Unrepresentable {}

impl From<super::json_text::Malformed> for Unrepresentable {
    fn from(_: super::json_text::Malformed) -> Self {
        Self::new(Problem::Malformed)
    }
}

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

/// The JSON text `text` as a Cedar value; `schema` is the JSON Schema describing it, when
/// known (a tool's `inputSchema`). An error names the place from `text` in; add outer keys
/// with [`Unrepresentable::within`].
pub(super) fn to_cedar(
    text: &str,
    schema: Option<&Value>,
) -> Result<RestrictedExpression, Unrepresentable> {
    to_cedar_shaped(text, schema, &mut Shape::default())
}

/// [`to_cedar`], the value's shape written to `shape` (see [`super::shape`]).
pub(super) fn to_cedar_shaped(
    text: &str,
    schema: Option<&Value>,
    shape: &mut Shape,
) -> Result<RestrictedExpression, Unrepresentable> {
    let mut reader = Reader::new(text);
    let expression = convert(&mut reader, schema, 0, shape)?;
    reader.finish()?;
    Ok(expression)
}

/// `value` as a Cedar value written to `shape`: an empty object (the context hook's absence)
/// directly, anything else through its `serde_json` text (see [`to_cedar`]).
pub(super) fn value_to_cedar_shaped(
    value: &Value,
    shape: &mut Shape,
) -> Result<RestrictedExpression, Unrepresentable> {
    match value {
        Value::Object(members) if members.is_empty() => {
            shape.open_record();
            shape.close_record();
            RestrictedExpression::new_record([]).map_err(|_| Unrepresentable::new(Problem::Record))
        }
        _ => to_cedar_shaped(&value.to_string(), None, shape),
    }
}

/// `value` as a Cedar value, through its `serde_json` text (see [`to_cedar`]).
pub(super) fn value_to_cedar(
    value: &Value,
    schema: Option<&Value>,
) -> Result<RestrictedExpression, Unrepresentable> {
    to_cedar(&value.to_string(), schema)
}

/// The value at `reader`, `depth` levels in; its shape is written to `shape`.
fn convert(
    reader: &mut Reader<'_>,
    schema: Option<&Value>,
    depth: usize,
    shape: &mut Shape,
) -> Result<RestrictedExpression, Unrepresentable> {
    if depth > MAX_DEPTH {
        return Err(Unrepresentable::new(Problem::Depth));
    }
    Ok(match reader.start()? {
        Start::Null => return Err(Unrepresentable::new(Problem::Null)),
        Start::Bool(flag) => {
            shape.bool(flag);
            RestrictedExpression::new_bool(flag)
        }
        Start::String(text) => {
            shape.string();
            RestrictedExpression::new_string(text.into_owned())
        }
        Start::Number(text) if types_number(schema) => {
            let decimal = number::decimal(text).ok_or(Unrepresentable::new(Problem::Number))?;
            shape.decimal();
            RestrictedExpression::new_decimal(decimal)
        }
        Start::Number(text) => match number::integer(text) {
            Some(long) => {
                shape.long();
                RestrictedExpression::new_long(long)
            }
            None => return Err(Unrepresentable::new(Problem::Number)),
        },
        Start::Array => {
            let items_schema = schema.and_then(|s| s.get("items"));
            let mut members = Vec::new();
            let mut shapes = shape.open_set();
            while reader.item(members.is_empty())? {
                let start = shape.mark();
                let member = convert(reader, items_schema, depth + 1, shape)
                    .map_err(|e| e.within(members.len().to_string()))?;
                shape.member(&mut shapes, start);
                members.push(member);
            }
            shape.close_set();
            RestrictedExpression::new_set(members)
        }
        Start::Object => {
            let properties = schema.and_then(|s| s.get("properties"));
            let mut fields = Vec::new();
            shape.open_record();
            while let Some(key) = reader.key(fields.is_empty())? {
                let field_schema = properties.and_then(|p| p.get(&*key));
                shape.key(&key);
                let field = convert(reader, field_schema, depth + 1, shape).map_err(|e| {
                    // Only a name the schema declares is shown; any other came from the request.
                    e.within(if field_schema.is_some() { &*key } else { "*" })
                })?;
                fields.push((key.into_owned(), field));
            }
            shape.close_record();
            RestrictedExpression::new_record(fields)
                .map_err(|_| Unrepresentable::new(Problem::Record))?
        }
    })
}

#[cfg(test)]
pub(super) mod tests {
    use serde_json::json;

    use super::*;

    /// A context holding `record` under `key`, as Cedar writes it.
    pub(in crate::policy::cedar) fn context_text(
        key: &str,
        record: RestrictedExpression,
    ) -> String {
        cedar_policy::Context::from_pairs([(key.to_owned(), record)])
            .expect("a context")
            .to_string()
    }

    #[test]
    fn an_empty_object_is_the_record_its_text_makes() {
        let context = |record| context_text("app", record);
        for value in [json!({}), json!({"tenant": "a", "n": 2})] {
            let (mut direct, mut through_text) = (Shape::new(), Shape::new());
            let made = value_to_cedar_shaped(&value, &mut direct).unwrap();
            let from_text = to_cedar_shaped(&value.to_string(), None, &mut through_text).unwrap();
            assert_eq!(context(made), context(from_text));
            assert_eq!(direct, through_text);
        }
    }

    fn cedar_text(value: &Value, schema: &Value) -> Result<String, Unrepresentable> {
        cedar_text_of(&value.to_string(), schema)
    }

    fn cedar_text_of(text: &str, schema: &Value) -> Result<String, Unrepresentable> {
        let expression = to_cedar(text, Some(schema)).map_err(|e| e.within("input"))?;
        Ok(context_text("input", expression))
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

    #[test]
    fn numbers_are_read_from_their_text() {
        let schema = json!({"type": "object", "properties": {
            "price": {"type": "number"}, "count": {"type": "integer"},
        }});
        let refused = |text: &str| cedar_text_of(text, &schema).unwrap_err().to_string();
        assert_eq!(
            refused(r#"{"price": 100.0000000000000001}"#),
            "input.price is a number Cedar cannot hold exactly",
            "an f64 reads it as 100"
        );
        assert_eq!(
            refused(r#"{"price": 1e-400}"#),
            "input.price is a number Cedar cannot hold exactly",
            "an f64 reads it as 0"
        );
        for (text, part) in [
            (
                r#"{"price": 100.00000000000000000000}"#,
                r#"decimal("100.0000")"#,
            ),
            (
                r#"{"price": -922337203685477.5808}"#,
                r#"decimal("-922337203685477.5808")"#,
            ),
            (
                r#"{"price": 922337203685477.5807}"#,
                r#"decimal("922337203685477.5807")"#,
            ),
            (r#"{"price": -0}"#, r#"decimal("0.0000")"#),
            (r#"{"count": 1.0e+1}"#, "count: 10"),
            (
                r#"{"count": -9223372036854775808.0}"#,
                "count: -9223372036854775808",
            ),
            (r#"{"count": -0}"#, "count: 0"),
        ] {
            // Context::from_pairs evaluates the decimal: Cedar accepts the text.
            let cedar = cedar_text_of(text, &schema).unwrap();
            assert!(cedar.contains(part), "{part} in {cedar}");
        }
        for text in [r#"{"count": 1.5}"#, r#"{"count": 9223372036854775808}"#] {
            assert_eq!(
                refused(text),
                "input.count is a number Cedar cannot hold exactly"
            );
        }
    }

    #[test]
    fn a_path_names_only_what_the_schema_declares() {
        let schema = json!({"type": "object", "properties": {
            "known": {"type": "object", "properties": {"list": {"type": "array"}}},
        }});
        let error = cedar_text_of(r#"{"known": {"list": [1, null]}}"#, &schema).unwrap_err();
        assert_eq!(
            error.to_string(),
            "input.known.list.1 is null, which Cedar cannot hold"
        );
        let error = cedar_text_of(r#"{"hunter2": {"x": 1.5}}"#, &schema).unwrap_err();
        assert_eq!(
            error.to_string(),
            "input.*.* is a number Cedar cannot hold exactly"
        );
        let deep = "[".repeat(MAX_DEPTH + 2) + &"]".repeat(MAX_DEPTH + 2);
        assert_eq!(
            to_cedar(&deep, None).unwrap_err().to_string(),
            format!("{} is nested too deep", vec!["0"; MAX_DEPTH + 1].join("."))
        );
    }
}
