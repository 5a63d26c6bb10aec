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
}

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
        Self {
            namespace: namespace.into(),
        }
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
        let type_name: EntityTypeName = self
            .type_name(basename)
            .parse()
            .map_err(|_| Unmapped::Name(basename.to_owned()))?;
        Ok(EntityUid::from_type_name_and_id(
            type_name,
            EntityId::new(id),
        ))
    }
}

/// One request in Cedar's terms, before Cedar parses it.
#[derive(Debug)]
pub(super) struct Mapped {
    /// The principal's uid.
    pub principal: EntityUid,
    /// The principal entity as Cedar JSON (without parents; the loader adds them).
    pub principal_attrs: Value,
    /// The action.
    pub action: EntityUid,
    /// The resource.
    pub resource: EntityUid,
    /// The context, `app` not yet added.
    pub context: Map<String, Value>,
    /// Whether the request is typed by the schema (every phase but discovery).
    pub typed: bool,
}

impl Mapped {
    /// What templates may name: `{"context": …, "principal": …}`.
    pub fn scope(&self) -> Value {
        json!({"context": self.context, "principal": self.principal_attrs})
    }
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
fn principal_attrs(evaluation: &Evaluation, claims: &[String]) -> Value {
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

/// `context.gate`.
fn gate_context(evaluation: &Evaluation) -> Value {
    let capabilities = evaluation.capabilities();
    json!({
        "era": match evaluation.era() { Era::Modern => "modern", Era::Legacy => "legacy" },
        "phase": match evaluation.phase() {
            Phase::Invocation => "invocation",
            Phase::Discovery => "discovery",
            Phase::Approval => "approval",
        },
        "protocol_version": evaluation.protocol_version().unwrap_or(""),
        "elicitation_form": capabilities.form_elicitation(),
        "elicitation_url": capabilities.url_elicitation(),
        "tasks": capabilities.tasks_extension(),
        "approved_by": evaluation.approval().map_or("", |a| a.approved_by.as_str()),
    })
}

/// Maps one evaluation. `server` names the `McpServer` resource; `claims` are the claims
/// copied onto the principal.
pub(super) fn map(
    names: &Names,
    evaluation: &Evaluation,
    server: &str,
    claims: &[String],
) -> Result<Mapped, Unmapped> {
    let (action, resource) = action_and_resource(names, evaluation, server)?;
    let principal = names.uid("User", evaluation.principal().subject().unwrap_or(""))?;
    let typed = evaluation.phase() != Phase::Discovery;
    let mut context = Map::new();
    if let (Target::Tool { arguments, .. }, true) = (evaluation.target(), typed) {
        context.insert("input".into(), Value::Object((**arguments).clone()));
    }
    context.insert("gate".into(), gate_context(evaluation));
    Ok(Mapped {
        principal,
        principal_attrs: principal_attrs(evaluation, claims),
        action,
        resource,
        context,
        typed,
    })
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
        let mapped = map(
            &names,
            &evaluation(Phase::Invocation),
            "files",
            &["email".into()],
        )
        .expect("maps");
        assert_eq!(mapped.principal.to_string(), r#"Demo::User::"alice""#);
        assert_eq!(mapped.action.to_string(), r#"Demo::Action::"share_folder""#);
        assert_eq!(mapped.resource.to_string(), r#"Demo::McpServer::"files""#);
        assert_eq!(mapped.context["input"], json!({"folder": "q3"}));
        assert_eq!(mapped.context["gate"]["phase"], "invocation");
        assert_eq!(
            mapped.principal_attrs["claims"],
            json!({"email": "a@example.com"}),
            "selected claims only"
        );
        assert_eq!(mapped.principal_attrs["scopes"], json!(["mcp:tools"]));
        assert!(mapped.typed);
    }

    #[test]
    fn discovery_has_no_input_and_is_untyped() {
        let mapped = map(
            &Names::new("Demo"),
            &evaluation(Phase::Discovery),
            "files",
            &[],
        )
        .expect("maps");
        assert!(!mapped.context.contains_key("input"));
        assert!(!mapped.typed);
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
        let mapped = map(&Names::new(""), &evaluation, "s", &[]).expect("maps");
        assert_eq!(mapped.principal.id().unescaped(), r#"x"; permit"#);
        assert_eq!(mapped.resource.id().unescaped(), r#"demo://a"b"#);
        assert_eq!(mapped.action.to_string(), r#"Action::"resources/read""#);
        let listed = Evaluation::builder(evaluation.principal().clone())
            .method("prompts/list")
            .prompt("layoffs", Value::Null)
            .phase(Phase::Discovery)
            .build()
            .unwrap();
        let mapped = map(&Names::new(""), &listed, "s", &[]).expect("maps");
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
            map(&Names::new(""), &slash, "s", &[]).err(),
            Some(Unmapped::SlashInToolName("a/b".into()))
        );
    }
}
