//! `docs/audit.md` renders the committed audit record schema (`schemas/audit-record.v1.json`):
//! the table between its markers is the schema's every field, in order, with its type and
//! description, as [`render`] writes it from the schema. A field added to the schema without
//! the page fails here; `MCP_GATE_BLESS=1` rewrites the table.

use std::path::Path;

use serde_json::{Map, Value};

const BEGIN: &str = "<!-- schema table: generated from schemas/audit-record.v1.json -->\n";
const END: &str = "<!-- end of the schema table -->";

fn read(path: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(path))
        .unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Follows a local `$ref` (`#/$defs/name`).
fn resolve<'a>(schema: &'a Value, node: &'a Value) -> &'a Value {
    match node.get("$ref").and_then(Value::as_str) {
        Some(reference) => {
            let name = reference.trim_start_matches("#/$defs/");
            &schema["$defs"][name]
        }
        None => node,
    }
}

/// What a field holds, in a few words.
fn kind(schema: &Value, node: &Value) -> String {
    let node = resolve(schema, node);
    if let Some(value) = node.get("const") {
        return format!("`{value}`");
    }
    if let Some(Value::Array(values)) = node.get("enum") {
        let words: Vec<String> = values
            .iter()
            .map(|v| format!("`{}`", v.as_str().unwrap_or_default()))
            .collect();
        return words.join(", ");
    }
    let ty = node["type"].as_str().unwrap_or("any");
    match (ty, node.get("pattern").and_then(Value::as_str)) {
        ("string", Some(pattern)) => format!("string matching `{pattern}`"),
        ("array", _) => format!("array of {}", kind(schema, &node["items"])),
        _ => ty.to_owned(),
    }
}

/// One row per field of `object` (and of the objects inside it), under `prefix`.
fn rows(schema: &Value, object: &Value, prefix: &str, out: &mut Vec<String>) {
    let object = resolve(schema, object);
    let required: Vec<&str> = object["required"]
        .as_array()
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let empty = Map::new();
    let properties = object["properties"].as_object().unwrap_or(&empty);
    for (name, field) in properties {
        let path = format!("{prefix}{name}");
        let resolved = resolve(schema, field);
        let description = field
            .get("description")
            .or_else(|| resolved.get("description"))
            .and_then(Value::as_str)
            .unwrap_or("");
        let is_object = resolved["type"] == "object";
        let what = if is_object {
            "object".to_owned()
        } else {
            kind(schema, field)
        };
        let needed = if required.contains(&name.as_str()) {
            "yes"
        } else {
            "no"
        };
        out.push(format!("| `{path}` | {what} | {needed} | {description} |"));
        if is_object {
            rows(schema, resolved, &format!("{path}."), out);
        }
    }
}

/// The table the page shows.
fn render(schema: &Value) -> String {
    let mut out = vec![
        "| field | holds | always | what it says |".to_owned(),
        "|---|---|---|---|".to_owned(),
    ];
    rows(schema, schema, "", &mut out);
    out.join("\n") + "\n"
}

#[test]
fn the_audit_page_renders_the_schema() {
    let schema: Value =
        serde_json::from_str(&read("schemas/audit-record.v1.json")).expect("the schema is JSON");
    let table = render(&schema);
    let page = read("docs/audit.md");
    let start = page
        .find(BEGIN)
        .expect("the page has the table's start marker")
        + BEGIN.len();
    let end = page.find(END).expect("the page has the table's end marker");
    if std::env::var_os("MCP_GATE_BLESS").is_some_and(|v| !v.is_empty() && v != "0") {
        let blessed = format!("{}{table}{}", &page[..start], &page[end..]);
        std::fs::write(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/audit.md"),
            blessed,
        )
        .expect("the page is written");
        return;
    }
    assert_eq!(
        &page[start..end],
        table,
        "docs/audit.md's table is not the schema's (rerun with MCP_GATE_BLESS=1)"
    );
    // The example on the page is a record the schema accepts.
    let example = page
        .split("```json\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("the page shows an example record");
    let example: Value = serde_json::from_str(example).expect("the example is JSON");
    let validator = jsonschema::options()
        .should_validate_formats(true)
        .build(&schema)
        .expect("a valid schema");
    let problems: Vec<String> = validator
        .iter_errors(&example)
        .map(|e| e.to_string())
        .collect();
    assert!(problems.is_empty(), "the page's example: {problems:?}");
}
