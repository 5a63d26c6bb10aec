//! One evaluation: refuse what does not fit the schema, map, ask the hook, ask Cedar, and read
//! the remedy off the forbids that matched.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use cedar_policy::{Authorizer, Context, Decision as CedarDecision, Entities, Entity, Request};
use serde_json::Value;

use super::Settings;
use super::load::Loaded;
use super::mapping::{Mapped, map};
use super::values::to_cedar;
use crate::mcp::Target;
use crate::policy::{BoxError, Decision, Evaluation, Phase};

const GENERIC_DENIAL: &str = "You are not allowed to do this.";
const SCHEMA_DENIAL: &str = "The request does not match the authorization schema.";

/// A denial for a request that was not put to Cedar; logged with `why`.
fn refuse(evaluation: &Evaluation, why: &dyn std::fmt::Display, message: &str) -> Decision {
    tracing::warn!(
        target: "mcp_gate::cedar",
        method = evaluation.method(),
        tool = evaluation.tool(),
        reason = %why,
        "request denied before Cedar evaluation"
    );
    Decision::undisclosed(message)
}

/// Why the called tool is not the one the schema was generated for, if it is not.
fn drifted(loaded: &Loaded, evaluation: &Evaluation) -> Option<String> {
    let (Target::Tool { name, .. }, Some(tools)) = (evaluation.target(), &loaded.tools) else {
        return None;
    };
    let Some(expected) = tools.get(name) else {
        return Some(format!(
            "tool {name:?} is not in the tool list the schema was made from"
        ));
    };
    match evaluation.tool_input_schema() {
        // A held call passed this check when it was held; the process that runs the approval
        // may not have seen a list since it started.
        None if evaluation.phase() == Phase::Approval => None,
        None => Some(format!("tool {name:?} was not listed by the server")),
        Some(live) if live != expected => Some(format!(
            "tool {name:?} lists an input schema that differs from the one the Cedar schema was generated from; regenerate the schema"
        )),
        Some(_) => None,
    }
}

/// The JSON Schema of a tool's arguments: as listed, or as the tool list says.
fn input_schema<'a>(loaded: &'a Loaded, evaluation: &'a Evaluation) -> Option<&'a Value> {
    let Target::Tool { name, .. } = evaluation.target() else {
        return None;
    };
    let known = || loaded.tools.as_ref().and_then(|tools| tools.get(name));
    evaluation.tool_input_schema().or_else(known)
}

/// The mapped request in Cedar's types, with the user's parents from the entities file.
fn cedar_request(
    loaded: &Loaded,
    mapped: &Mapped,
    input_schema: Option<&Value>,
) -> Result<(Request, Arc<Entities>), String> {
    let schema = &loaded.schema;
    let typed = mapped.typed.then_some(schema);
    let pairs = mapped
        .context
        .iter()
        .map(|(key, value)| {
            let described = if key == "input" { input_schema } else { None };
            Ok((
                key.clone(),
                to_cedar(value, described).map_err(|e| e.within(key).within("context"))?,
            ))
        })
        .collect::<Result<Vec<_>, super::values::Unrepresentable>>()
        .map_err(|e| e.to_string())?;
    let context = Context::from_pairs(pairs).map_err(|e| e.to_string())?;
    let entities = principal_entities(loaded, mapped)?;
    let request = Request::new(
        mapped.principal.clone(),
        mapped.action.clone(),
        mapped.resource.clone(),
        context,
        typed,
    )
    .map_err(|e| format!("the request does not fit the schema: {}", chain(&e)))?;
    Ok((request, entities))
}

/// The entities file's entities plus this request's principal. The same principal (same
/// uid and attributes: the same token, in practice) gets the same store from a small cache
/// that lives and dies with the loaded set: Cedar recomputes its hierarchy on every insert,
/// which is most of an evaluation's cost.
fn principal_entities(loaded: &Loaded, mapped: &Mapped) -> Result<Arc<Entities>, String> {
    let key = format!("{}\n{}", mapped.principal, mapped.principal_attrs);
    if let Some(entities) = loaded.principals.get(&key) {
        return Ok(entities);
    }
    let attrs = match &mapped.principal_attrs {
        Value::Object(attrs) => attrs
            .iter()
            .map(|(key, value)| {
                Ok((
                    key.clone(),
                    to_cedar(value, None).map_err(|e| e.within(key).within("principal"))?,
                ))
            })
            .collect::<Result<HashMap<_, _>, super::values::Unrepresentable>>()
            .map_err(|e| e.to_string())?,
        _ => HashMap::new(),
    };
    // A token without a subject is nobody in particular: it takes no roles from the file.
    let known = (!mapped.principal.id().unescaped().is_empty())
        .then(|| loaded.entities.get(&mapped.principal))
        .flatten();
    let parents: HashSet<_> = known
        .map(|known| known.clone().into_inner().2)
        .unwrap_or_default();
    let user = Entity::new(mapped.principal.clone(), attrs, parents)
        .map_err(|e| format!("the principal has no Cedar form: {e}"))?;
    let entities = loaded
        .entities
        .clone()
        .upsert_entities([user], Some(&loaded.schema))
        .map_err(|e| {
            format!(
                "the principal does not fit the schema's User: {}",
                chain(&e)
            )
        })?;
    let entities = Arc::new(entities);
    loaded.principals.insert(key, Arc::clone(&entities));
    Ok(entities)
}

/// An error and its causes, one after the other.
pub(super) fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(inner) = cause {
        let more = inner.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        cause = inner.source();
    }
    text
}

/// Decides one evaluation on the set `loaded`.
pub(super) async fn decide(
    loaded: Arc<Loaded>,
    settings: Arc<Settings>,
    evaluation: Evaluation,
) -> Result<Decision, BoxError> {
    if let Some(why) = drifted(&loaded, &evaluation) {
        return Ok(refuse(&evaluation, &why, GENERIC_DENIAL));
    }
    let mapped = map(
        &loaded.names,
        &evaluation,
        &settings.server,
        &settings.claims,
    );
    let mut mapped = match mapped {
        Ok(mapped) => mapped,
        Err(why) => return Ok(refuse(&evaluation, &why, GENERIC_DENIAL)),
    };
    let Some(action) = loaded.actions.get(&mapped.action) else {
        let why = format!("the schema declares no action {}", mapped.action);
        return Ok(refuse(&evaluation, &why, GENERIC_DENIAL));
    };
    if action.declares_app {
        let app = match &settings.hook {
            Some(hook) => hook(evaluation.clone()).await?,
            None => Value::Object(Default::default()),
        };
        if !app.is_object() {
            return Err(
                "the Cedar context hook returned something other than a JSON object".into(),
            );
        }
        mapped.context.insert("app".into(), app);
    }
    let described = input_schema(&loaded, &evaluation);
    let (request, entities) = match cedar_request(&loaded, &mapped, described) {
        Ok(parts) => parts,
        Err(why) => return Ok(refuse(&evaluation, &why, SCHEMA_DENIAL)),
    };
    let response = Authorizer::new().is_authorized(&request, &action.policies, &entities);
    for error in response.diagnostics().errors() {
        tracing::debug!(target: "mcp_gate::cedar", %error, "a Cedar policy errored and was skipped");
    }
    if response.decision() == CedarDecision::Allow {
        return Ok(Decision::allow());
    }
    let (decision, note) = loaded
        .remedies
        .decide(response.diagnostics().reason(), &mapped.scope());
    if let Some(note) = note {
        tracing::warn!(target: "mcp_gate::cedar", tool = evaluation.tool(), note, "remedy not given");
    }
    Ok(decision)
}
