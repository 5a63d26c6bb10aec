//! Per action, what one evaluation needs: the policies that could apply to it (Cedar evaluates
//! every policy it is given, and most name one tool), and whether its context declares `app`.
//!
//! Leaving out a policy whose action scope cannot match changes nothing: such a policy is
//! never satisfied, never errors (its conditions are not evaluated) and never explains a
//! decision.

use std::collections::{HashMap, HashSet};

use cedar_policy::{ActionConstraint, Entities, EntityUid, PolicySet, Schema, SchemaFragment};
use serde_json::Value;

use super::mapping::Names;
use crate::error::CedarError;

/// What evaluating one action needs.
pub(super) struct ActionPolicies {
    /// The policies whose action scope can match this action.
    pub policies: PolicySet,
    /// Whether the action's context declares `app` (the context hook's attributes).
    pub declares_app: bool,
}

/// Whether `constraint` can match `action`, whose groups (ancestors) are `groups`.
fn can_match(
    constraint: &ActionConstraint,
    action: &EntityUid,
    groups: &HashSet<&EntityUid>,
) -> bool {
    match constraint {
        ActionConstraint::Any => true,
        ActionConstraint::Eq(only) => only == action,
        ActionConstraint::In(any_of) => any_of.iter().any(|g| g == action || groups.contains(g)),
    }
}

/// The actions of `names`' namespace whose context declares `app`, read from the schema text.
fn actions_declaring_app(schema_text: &str, names: &Names) -> Result<HashSet<EntityUid>, String> {
    let (fragment, _) =
        SchemaFragment::from_cedarschema_str(schema_text).map_err(|e| e.to_string())?;
    let json = fragment.to_json_value().map_err(|e| e.to_string())?;
    let namespace = json.get(names.namespace()).cloned().unwrap_or(Value::Null);
    let common = namespace.get("commonTypes");
    let mut declaring = HashSet::new();
    for (name, action) in namespace
        .get("actions")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        let mut context = action.pointer("/appliesTo/context");
        // A context given as a common type's name: look the type up.
        let type_name = context.and_then(|c| c.get("type")).and_then(Value::as_str);
        if let Some(type_name) = type_name.filter(|name| *name != "Record") {
            context = common.and_then(|c| c.get(type_name));
        }
        let has_app = context
            .and_then(|c| c.get("attributes"))
            .is_some_and(|attributes| attributes.get("app").is_some());
        if has_app {
            declaring.insert(names.uid("Action", name).map_err(|e| e.to_string())?);
        }
    }
    Ok(declaring)
}

/// Every action the schema declares, with its policies.
pub(super) fn by_action(
    schema: &Schema,
    schema_text: &str,
    schema_file: &str,
    names: &Names,
    policies: &PolicySet,
    entities: &Entities,
) -> Result<HashMap<EntityUid, ActionPolicies>, CedarError> {
    let declaring =
        actions_declaring_app(schema_text, names).map_err(|message| CedarError::Schema {
            file: schema_file.to_owned(),
            message,
        })?;
    let mut by_action = HashMap::new();
    for action in schema.actions() {
        let groups: HashSet<&EntityUid> =
            entities.ancestors(action).into_iter().flatten().collect();
        let mut slice = PolicySet::new();
        for policy in policies.policies() {
            if can_match(&policy.action_constraint(), action, &groups) {
                // Ids are unique in `policies`, so adding cannot fail.
                slice.add(policy.clone()).map_err(|e| CedarError::Schema {
                    file: schema_file.to_owned(),
                    message: e.to_string(),
                })?;
            }
        }
        let actions = ActionPolicies {
            policies: slice,
            declares_app: declaring.contains(action),
        };
        by_action.insert(action.clone(), actions);
    }
    Ok(by_action)
}
