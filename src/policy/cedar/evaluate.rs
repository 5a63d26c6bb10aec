//! One evaluation: refuse what does not fit the schema, map, ask the hook, ask Cedar, and read
//! the remedy off the forbids that matched.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use cedar_policy::{
    AuthorizationError, Authorizer, Context, Decision as CedarDecision, Entities, Entity,
    EntityUid, Request, RequestValidationError, validate_scope_variables,
};
use serde_json::Value;

use super::Settings;
use super::gate::gate_record;
use super::json_text::{Malformed, arguments_text};
use super::load::Loaded;
use super::mapping::{Uids, gate_fields, principal_attrs, template_scope, uids};
use super::shape::Shape;
use super::values::{Unrepresentable, to_cedar_shaped, value_to_cedar, value_to_cedar_shaped};
use crate::Principal;
use crate::mcp::{Arguments, Target};
use crate::policy::{BoxError, Decision, Evaluation, Explanation, Phase};

const GENERIC_DENIAL: &str = "You are not allowed to do this.";
const SCHEMA_DENIAL: &str = "The request does not match the authorization schema.";

/// Why a request was not put to Cedar, as logged: fixed words, and paths only through names
/// the schema declares. Cedar's own error text is never logged for a request, because it
/// quotes the values it refused (an argument, a claim).
#[derive(Debug, thiserror::Error)]
enum Misfit {
    #[error("the tool is not in the tool list the schema was made from")]
    UnknownTool,
    #[error("the tool was not listed by the server")]
    Unlisted,
    #[error(
        "the tool lists an input schema that differs from the one the Cedar schema was generated from; regenerate the schema"
    )]
    Drifted,
    #[error("the request has no Cedar name: {0}")]
    Unmapped(&'static str),
    #[error("the schema declares no action for this request")]
    UndeclaredAction,
    #[error("{0}")]
    Value(#[from] Unrepresentable),
    #[error("the context has no Cedar form")]
    Context,
    #[error("the request does not fit the schema: {0}")]
    Request(&'static str),
    #[error("the principal does not fit the schema's User")]
    Principal,
}

impl From<Malformed> for Misfit {
    fn from(malformed: Malformed) -> Self {
        Misfit::Value(
            Unrepresentable::from(malformed)
                .within("input")
                .within("context"),
        )
    }
}

/// What a request validation error is about, without the values it quotes.
fn request_misfit(error: &RequestValidationError) -> &'static str {
    match error {
        RequestValidationError::UndeclaredAction(_) => "undeclared action",
        RequestValidationError::ExternalAction(_) => "the action is external",
        RequestValidationError::UndeclaredPrincipalType(_) => "undeclared principal type",
        RequestValidationError::UndeclaredResourceType(_) => "undeclared resource type",
        RequestValidationError::InvalidPrincipalType(_) => {
            "the action does not apply to this principal type"
        }
        RequestValidationError::InvalidResourceType(_) => {
            "the action does not apply to this resource type"
        }
        RequestValidationError::InvalidContext(_) => {
            "the context (the arguments, the gate context or the app context) does not fit the action's context type"
        }
        RequestValidationError::TypeOfContext(_) => "the context's type cannot be computed",
        RequestValidationError::InvalidEnumEntity(_) => "an entity is not one of its enum's ids",
        _ => "another mismatch",
    }
}

/// A denial for a request that was not put to Cedar; logged with `why`. The method is named
/// only when the method table has it, the tool only when the schema knows it (`tool_known`):
/// anything else is a name the caller chose.
fn refuse(evaluation: &Evaluation, tool_known: bool, why: &Misfit, message: &str) -> Decision {
    tracing::warn!(target: "mcp_gate::cedar", method = crate::mcp::method_label(evaluation.method()), tool = evaluation.tool().filter(|_| tool_known), reason = %why, "request denied before Cedar evaluation");
    Decision::undisclosed(message)
}

/// Why the called tool is not the one the schema was generated for, if it is not.
fn drifted(loaded: &Loaded, evaluation: &Evaluation) -> Option<Misfit> {
    let (Target::Tool { name, .. }, Some(tools)) = (evaluation.target(), &loaded.tools) else {
        return None;
    };
    let Some(expected) = tools.get(name) else {
        return Some(Misfit::UnknownTool);
    };
    match evaluation.tool_input_schema() {
        // A held call passed this check when it was held; the process that runs the approval
        // may not have seen a list since it started.
        None if evaluation.phase() == Phase::Approval => None,
        None => Some(Misfit::Unlisted),
        Some(live) if live != expected => Some(Misfit::Drifted),
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

/// The JSON text of a tool call's arguments: the request's own (`params.arguments` of the
/// message the layer read), or, for arguments built from a map, the map as serde_json writes
/// it.
fn input_text(arguments: &Arguments) -> Result<Cow<'_, str>, Malformed> {
    let Some(message) = arguments.message() else {
        let text = serde_json::to_string(&**arguments).map_err(|_| Malformed)?;
        return Ok(Cow::Owned(text));
    };
    let message = crate::utf8::text(message).ok_or(Malformed)?;
    Ok(Cow::Borrowed(arguments_text(message)?.unwrap_or("{}")))
}

/// The request in Cedar's types, with the user's parents from the entities file; `app` is
/// the hook's value when the action's context declares it.
fn cedar_request(
    loaded: &Loaded,
    settings: &Settings,
    uids: Uids,
    evaluation: &Evaluation,
    app: Option<&Value>,
) -> Result<(Request, Arc<Entities>), Misfit> {
    let within = |key: &'static str| move |e: Unrepresentable| e.within(key).within("context");
    let mut pairs = Vec::with_capacity(3);
    let mut shape = Shape::new();
    shape.open_record();
    if let (Target::Tool { arguments, .. }, true) = (evaluation.target(), uids.typed) {
        shape.key("input");
        let schema = input_schema(loaded, evaluation);
        let input = to_cedar_shaped(&input_text(arguments)?, schema, &mut shape);
        pairs.push(("input".to_owned(), input.map_err(within("input"))?));
    }
    shape.key("gate");
    let gate = gate_record(gate_fields(evaluation), &mut shape).map_err(within("gate"))?;
    pairs.push(("gate".to_owned(), gate));
    if let Some(app) = app {
        shape.key("app");
        let app = value_to_cedar_shaped(app, &mut shape).map_err(within("app"))?;
        pairs.push(("app".to_owned(), app));
    }
    shape.close_record();
    let context = Context::from_pairs(pairs).map_err(|_| Misfit::Context)?;
    let entities = principal_entities(loaded, evaluation, &uids.principal, &settings.claims)?;
    let request = if uids.typed {
        typed_request(loaded, uids, context, &shape)?
    } else {
        Request::new(uids.principal, uids.action, uids.resource, context, None)
            .map_err(|e| Misfit::Request(request_misfit(&e)))?
    };
    Ok((request, entities))
}

/// A request the schema types, checked as `Request::new` with the schema checks it: its
/// principal, action and resource by Cedar on every request, its context by Cedar once per
/// shape and action (see [`super::shape`] for why a shape's verdict holds for every context
/// of that shape).
fn typed_request(
    loaded: &Loaded,
    uids: Uids,
    context: Context,
    shape: &Shape,
) -> Result<Request, Misfit> {
    let schema = &loaded.schema;
    let misfit = |e: RequestValidationError| Misfit::Request(request_misfit(&e));
    validate_scope_variables(&uids.principal, &uids.action, &uids.resource, schema)
        .map_err(misfit)?;
    let action = uids.action.id().unescaped();
    if !loaded.shapes.accepted(action, shape) {
        context.validate(schema, &uids.action).map_err(misfit)?;
        loaded.shapes.accept(action, shape);
    }
    Request::new(uids.principal, uids.action, uids.resource, context, None).map_err(misfit)
}

/// The principal cache's key: every fact the principal entity is made of (its uid is made
/// from the subject), each part prefixed with its length, so that two principals share a key
/// only when they make the same entity. Written straight from the principal: no JSON.
fn principal_key(principal: &Principal, claims: &[String]) -> Vec<u8> {
    let mut key = Vec::with_capacity(128);
    let mut part = |bytes: &[u8]| {
        key.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
        key.extend_from_slice(bytes);
    };
    part(principal.subject().unwrap_or("").as_bytes());
    part(principal.issuer().as_bytes());
    part(principal.client_id().unwrap_or("").as_bytes());
    part(&(principal.scopes().len() as u64).to_le_bytes());
    for scope in principal.scopes() {
        part(scope.as_bytes());
    }
    for name in claims {
        // As `principal_attrs` selects them: a null claim is an absent one.
        if let Some(value) = principal.claims().get(name).filter(|v| !v.is_null()) {
            part(name.as_bytes());
            part(value.to_string().as_bytes());
        }
    }
    key
}

/// The entities file's entities plus this request's principal (`uid`). The same principal
/// (the same facts: the same token, in practice) gets the same store from a small cache that
/// lives and dies with the loaded set: Cedar recomputes its hierarchy on every insert, which
/// is most of an evaluation's cost.
fn principal_entities(
    loaded: &Loaded,
    evaluation: &Evaluation,
    uid: &EntityUid,
    claims: &[String],
) -> Result<Arc<Entities>, Misfit> {
    let key = principal_key(evaluation.principal(), claims);
    if let Some(entities) = loaded.principals.get(&key) {
        return Ok(entities);
    }
    let attrs = match principal_attrs(evaluation, claims) {
        Value::Object(attrs) => attrs
            .iter()
            .map(|(key, value)| {
                let cedar = value_to_cedar(value, None)
                    .map_err(|e| e.within(key.as_str()).within("principal"))?;
                Ok((key.clone(), cedar))
            })
            .collect::<Result<HashMap<_, _>, Unrepresentable>>()?,
        _ => HashMap::new(),
    };
    // A token without a subject is nobody in particular: it takes no roles from the file.
    let known = (!uid.id().unescaped().is_empty())
        .then(|| loaded.entities.get(uid))
        .flatten();
    let parents: HashSet<_> = known
        .map(|known| known.clone().into_inner().2)
        .unwrap_or_default();
    let user = Entity::new(uid.clone(), attrs, parents).map_err(|_| Misfit::Principal)?;
    let entities = loaded
        .entities
        .clone()
        .upsert_entities([user], Some(&loaded.schema))
        .map_err(|_| Misfit::Principal)?;
    let entities = Arc::new(entities);
    loaded.principals.insert(key, Arc::clone(&entities));
    Ok(entities)
}

/// An error and its causes, one after the other (for errors in the operator's own files,
/// never for a request's).
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

/// Decides one evaluation on the set `loaded`, and explains it: the set's version and the
/// policies that determined the answer (none for a refusal before Cedar, or a default deny).
pub(super) async fn decide(
    loaded: Arc<Loaded>,
    settings: Arc<Settings>,
    evaluation: Evaluation,
) -> Result<Decision, BoxError> {
    let version = Arc::clone(&loaded.version);
    let explained = evaluation.clone();
    let mut determining = Vec::new();
    let decision = decide_on(loaded, settings, evaluation, &mut determining).await;
    explained.explain(Explanation::new(determining).version(version));
    decision
}

/// [`decide`], the ids of the determining policies put in `determining`.
async fn decide_on(
    loaded: Arc<Loaded>,
    settings: Arc<Settings>,
    evaluation: Evaluation,
    determining: &mut Vec<String>,
) -> Result<Decision, BoxError> {
    if let Some(why) = drifted(&loaded, &evaluation) {
        // Only a tool the list has is named (an unlisted one may still be in the list).
        let listed = !matches!(why, Misfit::UnknownTool);
        return Ok(refuse(&evaluation, listed, &why, GENERIC_DENIAL));
    }
    let uids = match uids(&loaded.names, &evaluation, &settings.server) {
        Ok(uids) => uids,
        Err(why) => {
            let why = Misfit::Unmapped(why.label());
            return Ok(refuse(&evaluation, false, &why, GENERIC_DENIAL));
        }
    };
    let Some(action) = loaded.actions.get(&uids.action) else {
        let why = Misfit::UndeclaredAction;
        return Ok(refuse(&evaluation, false, &why, GENERIC_DENIAL));
    };
    let mut app = None;
    if action.declares_app {
        let value = match &settings.hook {
            Some(hook) => hook(evaluation.clone()).await?,
            None => Value::Object(Default::default()),
        };
        if !value.is_object() {
            return Err(
                "the Cedar context hook returned something other than a JSON object".into(),
            );
        }
        app = Some(value);
    }
    let (request, entities) =
        match cedar_request(&loaded, &settings, uids, &evaluation, app.as_ref()) {
            Ok(parts) => parts,
            Err(why) => return Ok(refuse(&evaluation, true, &why, SCHEMA_DENIAL)),
        };
    let response = Authorizer::new().is_authorized(&request, &action.policies, &entities);
    for error in response.diagnostics().errors() {
        // The policy's id only: Cedar's text quotes the values the policy was evaluated on.
        let AuthorizationError::PolicyEvaluationError(error) = error;
        tracing::warn!(target: "mcp_gate::cedar", policy = %error.policy_id(), "a Cedar policy errored and was skipped");
    }
    determining.extend(response.diagnostics().reason().map(ToString::to_string));
    if response.decision() == CedarDecision::Allow {
        loaded
            .limits
            .name(response.diagnostics().reason(), &evaluation);
        return Ok(Decision::allow());
    }
    let scope = template_scope(&evaluation, &settings.claims, app);
    let (decision, note) = loaded
        .remedies
        .decide(response.diagnostics().reason(), &scope);
    if let Some(note) = note {
        tracing::warn!(target: "mcp_gate::cedar", tool = evaluation.tool(), note, "remedy not given");
    }
    Ok(decision)
}
