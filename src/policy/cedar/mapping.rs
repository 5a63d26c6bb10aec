//! From an [`Evaluation`] to a Cedar request: the one table the guide documents.
//!
//! | Cedar | from |
//! |---|---|
//! | principal | `NS::User::"<subject>"` (empty id when the token names no subject); attributes `issuer`, `subject`, `client_id` (empty strings when absent), `scopes` (a set), `claims` (the selected claims); parents from the entities file's entry for the same user (none for a token without a subject) |
//! | action | `NS::Action::"<tool name>"` for `tools/call` (cedar-for-agents' convention); `NS::Action::"<method>"` for every other guarded method (`prompts/get`, `resources/read`, `resources/subscribe`, `resources/unsubscribe`, `completion/complete`, `tasks/get`, …). A list entry is judged as what would use it: a tool as its tool action, a prompt as `prompts/get`, a resource or resource template as `resources/read`, a skill as `skills/get` |
//! | resource | `NS::McpServer::"<server>"` for tools and methods without a target; `NS::Resource::"<uri>"` for resources and skills; `NS::Prompt::"<name>"` for prompts; a completion's prompt or resource; `NS::Task::"<id>"` for tasks |
//! | `context.input` | a tool call's arguments, typed by the action's schema (invocation and approval only); JSON `number`s as exact `decimal`s |
//! | `context.gate` | `era` (`"modern"`, `"legacy"`), `phase` (`"invocation"`, `"discovery"`, `"approval"`), `protocol_version`, `elicitation_form`, `elicitation_url`, `tasks` (what the client declared), `approved_by` (the approver in phase approval, else empty) |
//! | `context.app` | what the context hook returned (an empty record without a hook) |
//!
//! In discovery (an entry of a list) there is no `context.input`, and the request is not typed
//! by the schema: a policy that reads `context.input` errors there, and Cedar skips a policy
//! whose condition errors. So an input-dependent `forbid` does not hide a tool (some input may
//! be allowed), and an input-dependent `permit` does not show one.

use cedar_policy::{EntityId, EntityTypeName, EntityUid};
use serde_json::{Map, Value, json};

use crate::mcp::{CompletionReference, Era, Target};
use crate::policy::{Evaluation, Phase};

/// The entity type names of one schema namespace.
#[derive(Debug, Clone)]
pub(super) struct Names {
    namespace: String,
    /// The types the mapping names ([`BASENAMES`]), parsed once: parsing a type name with
    /// Cedar's parser was half of a mapping's cost. A basename whose full name does not parse
    /// is absent, and a uid of it is refused as before.
    types: Vec<(&'static str, EntityTypeName)>,
}

/// Every entity type basename the mapping names.
const BASENAMES: [&str; 6] = ["User", "McpServer", "Resource", "Prompt", "Task", "Action"];

/// Why a request has no Cedar form.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(super) enum Unmapped {
    /// A tool name with `/`, which could be mistaken for a method's action.
    #[error("the tool name {0:?} contains '/', which the Cedar mapping reserves for methods")]
    SlashInToolName(String),
    /// An entity type or id Cedar does not accept.
    #[error("no Cedar name for {0:?}")]
    Name(String),
}

impl Unmapped {
    /// What is wrong, without the name the request carried.
    pub fn label(&self) -> &'static str {
        match self {
            Unmapped::SlashInToolName(_) => {
                "the tool name contains '/', which the Cedar mapping reserves for methods"
            }
            Unmapped::Name(_) => "an entity type or id Cedar does not accept",
        }
    }
}

impl Names {
    /// Names in `namespace` (empty for the root namespace).
    pub fn new(namespace: impl Into<String>) -> Self {
        let mut names = Self {
            namespace: namespace.into(),
            types: Vec::with_capacity(BASENAMES.len()),
        };
        for basename in BASENAMES {
            if let Ok(type_name) = names.type_name(basename).parse() {
                names.types.push((basename, type_name));
            }
        }
        names
    }

    /// The namespace (empty for the root namespace).
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The full name of `basename` in the namespace.
    pub fn type_name(&self, basename: &str) -> String {
        if self.namespace.is_empty() {
            basename.to_owned()
        } else {
            format!("{}::{basename}", self.namespace)
        }
    }

    /// The uid of `basename::"id"`.
    pub fn uid(&self, basename: &str, id: &str) -> Result<EntityUid, Unmapped> {
        let type_name = self
            .types
            .iter()
            .find(|(known, _)| *known == basename)
            .map(|(_, type_name)| type_name.clone())
            .ok_or_else(|| Unmapped::Name(basename.to_owned()))?;
        Ok(EntityUid::from_type_name_and_id(
            type_name,
            EntityId::new(id),
        ))
    }
}

/// The principal, action and resource of one request (the table's first three rows), and
/// whether the schema types it.
#[derive(Debug)]
pub(super) struct Uids {
    /// The principal's uid.
    pub principal: EntityUid,
    /// The action.
    pub action: EntityUid,
    /// The resource.
    pub resource: EntityUid,
    /// Whether the request is typed by the schema, and has `context.input` when it calls a
    /// tool: every phase but discovery.
    pub typed: bool,
}

/// The action and resource of a target.
fn action_and_resource(
    names: &Names,
    evaluation: &Evaluation,
    server: &str,
) -> Result<(EntityUid, EntityUid), Unmapped> {
    // A list entry is judged as what would use it, so one rule covers the entry and its use:
    // a prompt of `prompts/list` is asked about as `prompts/get`, and so on.
    let method = match (evaluation.phase(), evaluation.target()) {
        (Phase::Discovery, Target::Prompt { .. }) => "prompts/get",
        (Phase::Discovery, Target::Resource { .. }) => "resources/read",
        (Phase::Discovery, Target::Skill { .. }) => "skills/get",
        _ => evaluation.method(),
    };
    let action = |id: &str| names.uid("Action", id);
    Ok(match evaluation.target() {
        Target::Tool { name, .. } => {
            if name.contains('/') {
                return Err(Unmapped::SlashInToolName(name.clone()));
            }
            (action(name)?, names.uid("McpServer", server)?)
        }
        Target::Resource { uri } | Target::Skill { uri } => {
            (action(method)?, names.uid("Resource", uri)?)
        }
        Target::Prompt { name, .. } => (action(method)?, names.uid("Prompt", name)?),
        Target::Completion { reference, .. } => {
            let resource = match reference {
                CompletionReference::Prompt { name } => names.uid("Prompt", name)?,
                CompletionReference::Resource { uri } => names.uid("Resource", uri)?,
            };
            (action(method)?, resource)
        }
        Target::Task { task_id } => (action(method)?, names.uid("Task", task_id)?),
        _ => (action(method)?, names.uid("McpServer", server)?),
    })
}

/// The principal's attributes: the verified token's facts and the selected claims.
pub(super) fn principal_attrs(evaluation: &Evaluation, claims: &[String]) -> Value {
    let principal = evaluation.principal();
    let mut selected = Map::new();
    for name in claims {
        // Cedar has no null: a null claim is an absent one.
        if let Some(value) = principal.claims().get(name).filter(|v| !v.is_null()) {
            selected.insert(name.clone(), value.clone());
        }
    }
    json!({
        "issuer": principal.issuer(),
        "subject": principal.subject().unwrap_or(""),
        "client_id": principal.client_id().unwrap_or(""),
        "scopes": principal.scopes().iter().collect::<Vec<_>>(),
        "claims": selected,
    })
}

/// One field of `context.gate`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum GateField<'a> {
    /// A string.
    Text(&'a str),
    /// A boolean.
    Flag(bool),
}

/// `context.gate.era` as policies read it.
pub(super) const fn era_name(era: Era) -> &'static str {
    match era {
        Era::Modern => "modern",
        Era::Legacy => "legacy",
    }
}

/// `context.gate.phase` as policies read it.
pub(super) const fn phase_name(phase: Phase) -> &'static str {
    match phase {
        Phase::Invocation => "invocation",
        Phase::Discovery => "discovery",
        Phase::Approval => "approval",
    }
}

/// `context.gate`, field by field: the one list both its JSON (what templates read) and its
/// Cedar record (what policies read) are made from.
pub(super) fn gate_fields(evaluation: &Evaluation) -> [(&'static str, GateField<'_>); 7] {
    let capabilities = evaluation.capabilities();
    let era = era_name(evaluation.era());
    let phase = phase_name(evaluation.phase());
    let approved_by = evaluation.approval().map_or("", |a| a.approved_by.as_str());
    [
        ("era", GateField::Text(era)),
        ("phase", GateField::Text(phase)),
        (
            "protocol_version",
            GateField::Text(evaluation.protocol_version().unwrap_or("")),
        ),
        (
            "elicitation_form",
            GateField::Flag(capabilities.form_elicitation()),
        ),
        (
            "elicitation_url",
            GateField::Flag(capabilities.url_elicitation()),
        ),
        ("tasks", GateField::Flag(capabilities.tasks_extension())),
        ("approved_by", GateField::Text(approved_by)),
    ]
}

/// `context.gate` as JSON.
fn gate_context(evaluation: &Evaluation) -> Value {
    let fields = gate_fields(evaluation).map(|(key, field)| {
        let value = match field {
            GateField::Text(text) => Value::from(text),
            GateField::Flag(flag) => Value::from(flag),
        };
        (key.to_owned(), value)
    });
    Value::Object(fields.into_iter().collect())
}

/// The principal, action and resource of one evaluation. `server` names the `McpServer`
/// resource.
pub(super) fn uids(names: &Names, evaluation: &Evaluation, server: &str) -> Result<Uids, Unmapped> {
    let (action, resource) = action_and_resource(names, evaluation, server)?;
    let principal = names.uid("User", evaluation.principal().subject().unwrap_or(""))?;
    Ok(Uids {
        principal,
        action,
        resource,
        typed: typed(evaluation),
    })
}

/// Whether a request is typed by the schema, and has `context.input` when it calls a tool:
/// every phase but discovery.
fn typed(evaluation: &Evaluation) -> bool {
    evaluation.phase() != Phase::Discovery
}

/// What templates may name, as JSON: `{"context": …, "principal": …}`, the context with the
/// hook's `app` when the action's context declares it. Built for a denial only.
pub(super) fn template_scope(
    evaluation: &Evaluation,
    claims: &[String],
    app: Option<Value>,
) -> Value {
    let mut context = Map::new();
    if let (Target::Tool { arguments, .. }, true) = (evaluation.target(), typed(evaluation)) {
        context.insert("input".into(), Value::Object((**arguments).clone()));
    }
    context.insert("gate".into(), gate_context(evaluation));
    if let Some(app) = app {
        context.insert("app".into(), app);
    }
    json!({"context": context, "principal": principal_attrs(evaluation, claims)})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Principal;

    fn evaluation(phase: Phase) -> Evaluation {
        let principal = Principal::builder()
            .issuer("https://as.example")
            .subject("alice")
            .scopes(["mcp:tools"])
            .claims(json!({"email": "a@example.com", "secret": "x"}))
            .build()
            .expect("a principal");
        let arguments = match phase {
            Phase::Discovery => Value::Null,
            _ => json!({"folder": "q3"}),
        };
        Evaluation::builder(principal)
            .tool("share_folder", arguments)
            .phase(phase)
            .build()
            .expect("an evaluation")
    }

    #[test]
    fn a_tool_call() {
        let names = Names::new("Demo");
        let evaluation = evaluation(Phase::Invocation);
        let uids = uids(&names, &evaluation, "files").expect("maps");
        assert_eq!(uids.principal.to_string(), r#"Demo::User::"alice""#);
        assert_eq!(uids.action.to_string(), r#"Demo::Action::"share_folder""#);
        assert_eq!(uids.resource.to_string(), r#"Demo::McpServer::"files""#);
        assert!(uids.typed);
        let scope = template_scope(&evaluation, &["email".into()], None);
        assert_eq!(scope["context"]["input"], json!({"folder": "q3"}));
        assert_eq!(scope["context"]["gate"]["phase"], "invocation");
        assert_eq!(
            scope["principal"]["claims"],
            json!({"email": "a@example.com"}),
            "selected claims only"
        );
        assert_eq!(scope["principal"]["scopes"], json!(["mcp:tools"]));
    }

    #[test]
    fn discovery_has_no_input_and_is_untyped() {
        let evaluation = evaluation(Phase::Discovery);
        let scope = template_scope(&evaluation, &[], None);
        assert!(scope["context"].get("input").is_none());
        assert!(
            !uids(&Names::new("Demo"), &evaluation, "files")
                .expect("maps")
                .typed
        );
    }

    #[test]
    fn the_gate_context_is_one_list() {
        let evaluation = evaluation(Phase::Invocation);
        let scope = template_scope(&evaluation, &[], Some(json!({"on_call": true})));
        let gate = scope["context"]["gate"].as_object().expect("an object");
        let fields = gate_fields(&evaluation);
        assert_eq!(gate.len(), fields.len());
        for (key, field) in fields {
            let expected = match field {
                GateField::Text(text) => json!(text),
                GateField::Flag(flag) => json!(flag),
            };
            assert_eq!(gate[key], expected, "{key}");
        }
        assert_eq!(scope["context"]["app"], json!({"on_call": true}));
    }

    #[test]
    fn ids_are_never_parsed_as_cedar() {
        let principal = Principal::builder()
            .issuer("https://as.example")
            .subject(r#"x"; permit"#)
            .build()
            .unwrap();
        let evaluation = Evaluation::builder(principal)
            .resource(r#"demo://a"b"#)
            .build()
            .unwrap();
        let mapped = uids(&Names::new(""), &evaluation, "s").expect("maps");
        assert_eq!(mapped.principal.id().unescaped(), r#"x"; permit"#);
        assert_eq!(mapped.resource.id().unescaped(), r#"demo://a"b"#);
        assert_eq!(mapped.action.to_string(), r#"Action::"resources/read""#);
        let listed = Evaluation::builder(evaluation.principal().clone())
            .method("prompts/list")
            .prompt("layoffs", Value::Null)
            .phase(Phase::Discovery)
            .build()
            .unwrap();
        let mapped = uids(&Names::new(""), &listed, "s").expect("maps");
        assert_eq!(
            mapped.action.to_string(),
            r#"Action::"prompts/get""#,
            "an entry is judged as its use"
        );
        let slash = Evaluation::builder(evaluation.principal().clone())
            .tool("a/b", Value::Null)
            .build()
            .unwrap();
        assert_eq!(
            uids(&Names::new(""), &slash, "s").err(),
            Some(Unmapped::SlashInToolName("a/b".into()))
        );
    }
}
