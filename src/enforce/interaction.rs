//! The layer's own round trips on modern MCP, URL approval and confirmation, in the order
//! they happen:
//!
//! 1. a ruling asks for one ([`Round::elicit`]): the client must be able to take it
//!    ([`can_elicit`]), the revision must allow it, and the call must have rounds left; the
//!    layer signs a state bound to this caller and request ([`binding`], `StateCodec` in
//!    [`crate::continuation`]) and answers `InputRequiredResult`;
//! 2. the retry carries the state back: it must verify before anything else
//!    ([`verified_state`]), and what the user answered is read from its input responses
//!    ([`answered`], the policy's [`Answered`]);
//! 3. the policy rules again, seeing the answer; an allowed retry is forwarded without the
//!    layer's keys and state, the application's own put back ([`forwarded_body`]). A request
//!    forwarded without a round trip of the layer's loses the layer's keys too
//!    ([`without_layer_inputs`]).

use crate::auth::Owner;
use crate::resource::{PlainHttp, TransportProblem, transport_rule};
use bytes::Bytes;
use serde_json::{Map, Value, json};
use url::Url;

use crate::auth::Principal;
use crate::continuation::{Binding, Payload, STATE_PREFIX};
use crate::denial::Family;
use crate::denial::new_context_id;
use crate::denial::render::{DenialContext, Expressed};
use crate::enforce::call::Call;
use crate::enforce::reply::{Reply, state_refusal};
use crate::mcp::request::McpRequest;
use crate::mcp::{Era, ProtocolContext};
use crate::policy::{Answered, InputAction, Interaction, Remediation};
use crate::settings::Settings;

/// Input keys the layer uses start with this; the application's never should.
pub(crate) const INPUT_KEY_PREFIX: &str = "mcp-gate/";
/// The input key of a confirmation.
pub(crate) const CONFIRM_KEY: &str = "mcp-gate/confirm";

/// What a state is bound to, for this request.
pub(crate) fn binding<'a>(
    principal: &'a Principal,
    resource: &'a str,
    protocol: &'a ProtocolContext,
    request: &'a McpRequest,
) -> Binding<'a> {
    Binding {
        owner: Owner::of(principal),
        resource,
        modern: protocol.era == Era::Modern,
        protocol_version: protocol.protocol_version.as_deref(),
        method: &request.method,
        params: request.params(),
    }
}

/// The request's own `requestState`, if it is the layer's.
pub(crate) fn gateway_state(request: &McpRequest) -> Option<&str> {
    request
        .param("requestState")
        .and_then(Value::as_str)
        .filter(|s| s.starts_with(STATE_PREFIX))
}

/// How the retry answered the layer's input request.
pub(crate) fn answered(payload: &Payload, request: &McpRequest) -> Answered {
    let response = request
        .param("inputResponses")
        .and_then(Value::as_object)
        .and_then(|responses| responses.get(&payload.key));
    let action = match response
        .and_then(|r| r.get("action"))
        .and_then(Value::as_str)
    {
        Some("accept") => InputAction::Accept,
        Some("decline") => InputAction::Decline,
        Some("cancel") => InputAction::Cancel,
        _ => InputAction::Missing,
    };
    let approve = response
        .and_then(|r| r.get("content"))
        .and_then(|c| c.get("approve"));
    Answered {
        interaction: payload.interaction,
        input_key: payload
            .key
            .strip_prefix(INPUT_KEY_PREFIX)
            .unwrap_or(&payload.key)
            .to_owned(),
        action,
        confirmed: payload.interaction == Interaction::Confirmation
            && action == InputAction::Accept
            && approve == Some(&Value::Bool(true)),
        round: payload.round,
    }
}

/// Whether this request may be answered with an `InputRequiredResult` of this kind: modern
/// MCP, one of the three methods multi-round-trip requests allow, and the matching declared
/// elicitation mode.
pub(crate) fn can_elicit(
    interaction: Interaction,
    protocol: &ProtocolContext,
    request: &McpRequest,
) -> bool {
    let method_allows = matches!(
        &*request.method,
        "tools/call" | "prompts/get" | "resources/read"
    );
    let declared = match interaction {
        Interaction::Url => protocol.capabilities.url_elicitation(),
        Interaction::Confirmation => protocol.capabilities.form_elicitation(),
    };
    protocol.era == Era::Modern && method_allows && declared
}

/// An approval URL must be HTTPS (plain http only on loopback in development mode) and carry
/// no userinfo. A bad one is the application's bug, reported as an internal error.
pub(crate) fn check_approval_url(url: &str, development: bool) -> Result<(), &'static str> {
    let parsed = Url::parse(url).map_err(|_| "the approval URL is not an absolute URL")?;
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err("the approval URL carries userinfo");
    }
    let plain = if development {
        PlainHttp::OnLoopback
    } else {
        PlainHttp::Never
    };
    transport_rule(&parsed, plain).map_err(|problem| match problem {
        TransportProblem::NoHost => "the approval URL has no host",
        TransportProblem::PlainHttp => {
            "the approval URL must be https (http only on loopback in development mode)"
        }
        TransportProblem::OtherScheme => "the approval URL must be https",
    })
}

/// The inner application's own state and responses, carried through a gateway round: from
/// the verified gateway state on a retry, or from the request itself on a first round.
pub(crate) fn app_round_trip(
    request: &McpRequest,
    continuation: Option<&Payload>,
) -> (Option<String>, Option<Map<String, Value>>) {
    match continuation {
        Some(payload) => (payload.app_state.clone(), payload.app_inputs.clone()),
        None => (
            request
                .param("requestState")
                .and_then(Value::as_str)
                .map(str::to_owned),
            request
                .param("inputResponses")
                .and_then(Value::as_object)
                .map(|responses| {
                    let mut own = responses.clone();
                    own.retain(|key, _| !key.starts_with(INPUT_KEY_PREFIX));
                    own
                })
                .filter(|own| !own.is_empty()),
        ),
    }
}

/// Whether the request carries an input response under one of the layer's own keys, which
/// only the layer may read.
pub(crate) fn carries_layer_inputs(request: &McpRequest) -> bool {
    request
        .param("inputResponses")
        .and_then(Value::as_object)
        .is_some_and(|responses| responses.keys().any(|k| k.starts_with(INPUT_KEY_PREFIX)))
}

/// The request's body without the layer's own input responses (and without `inputResponses`
/// when nothing else is left in it), for a request that is forwarded without a round trip of
/// the layer's.
pub(crate) fn without_layer_inputs(request: &McpRequest) -> Bytes {
    let mut params = request.params().clone();
    if let Some(Value::Object(responses)) = params.get_mut("inputResponses") {
        responses.retain(|key, _| !key.starts_with(INPUT_KEY_PREFIX));
        if responses.is_empty() {
            params.remove("inputResponses");
        }
    }
    let message =
        json!({"jsonrpc": "2.0", "id": request.id, "method": request.method, "params": params});
    Bytes::from(message.to_string())
}

/// The body an allowed retry is forwarded with: the layer's state and input keys removed, the
/// application's own state and responses put back.
pub(crate) fn forwarded_body(request: &McpRequest, payload: &Payload) -> Bytes {
    let mut params = request.params().clone();
    params.remove("requestState");
    let mut responses: Map<String, Value> = params
        .remove("inputResponses")
        .and_then(|v| match v {
            Value::Object(map) => Some(map),
            _ => None,
        })
        .unwrap_or_default();
    responses.retain(|key, _| !key.starts_with(INPUT_KEY_PREFIX));
    if let Some(app_inputs) = &payload.app_inputs {
        responses.extend(app_inputs.clone());
    }
    if !responses.is_empty() {
        params.insert("inputResponses".into(), Value::Object(responses));
    }
    if let Some(app_state) = &payload.app_state {
        params.insert("requestState".into(), Value::String(app_state.clone()));
    }
    let message =
        json!({"jsonrpc": "2.0", "id": request.id, "method": request.method, "params": params});
    Bytes::from(message.to_string())
}

/// The continuation state a retry carries, verified (`None` on a first round); the refusal
/// of a state that does not verify. Boxed: it is rare, and large.
pub(crate) async fn verified_state(call: &Call<'_>) -> Result<Option<Box<Payload>>, Reply> {
    let Some(state) = gateway_state(&call.request) else {
        return Ok(None);
    };
    let resource = call.settings.resource.uri.as_str();
    let binding = binding(&call.principal, resource, &call.protocol, &call.request);
    match Box::pin(call.settings.continuation.state.verify(state, &binding)).await {
        Ok(payload) if owner_revoked(call, &payload) => Err(state_refusal(
            &crate::continuation::StateError::OwnerRevoked,
            &call.request,
        )),
        Ok(payload) => Ok(Some(Box::new(payload))),
        Err(error) => Err(state_refusal(&error, &call.request)),
    }
}

/// Whether the state's owner (the caller) was revoked after the state was issued: the
/// caller's token passed the revocation check (a grant given again), but what it was asked to
/// confirm before the revocation is not carried over. Nothing when revocation is off.
fn owner_revoked(call: &Call<'_>, payload: &Payload) -> bool {
    call.settings.revocations.as_ref().is_some_and(|set| {
        set.owner_revoked(&crate::auth::Owner::of(&call.principal), payload.iat_ms)
    })
}

/// Remediations the application built wrongly are internal errors, never sent half-formed.
pub(crate) fn check_remediation(
    remediation: &Remediation,
    development: bool,
) -> Result<(), &'static str> {
    match remediation {
        Remediation::Scope { scopes } => {
            if scopes
                .iter()
                .all(|s| crate::auth::scope::is_valid_scope_token(s))
            {
                Ok(())
            } else {
                Err("a scope remediation names an invalid scope")
            }
        }
        Remediation::Credential {
            authorization_details,
            ..
        } => {
            let typed =
                |d: &serde_json::Value| d.get("type").is_some_and(serde_json::Value::is_string);
            if authorization_details.is_empty() || !authorization_details.iter().all(typed) {
                Err(
                    "a credential remediation needs authorization details, each an object with a string type",
                )
            } else {
                Ok(())
            }
        }
        Remediation::Url { url, input_key, .. } => {
            if input_key.is_empty() || input_key.starts_with(INPUT_KEY_PREFIX) {
                return Err(
                    "a URL remediation needs a non-empty input key outside the layer's prefix",
                );
            }
            check_approval_url(url, development)
        }
        _ => Ok(()),
    }
}

/// The input request of one round: which interaction, under which key, asking what.
pub(crate) struct InputRequest {
    pub interaction: Interaction,
    pub key: String,
    pub input: Value,
}

/// A confirmation of the call, under the layer's own key.
pub(crate) fn confirmation(message: &str) -> InputRequest {
    InputRequest {
        interaction: Interaction::Confirmation,
        key: CONFIRM_KEY.to_owned(),
        input: confirmation_request(message),
    }
}

/// A visit to the application's approval page, under the application's key (prefixed).
pub(crate) fn url_approval(url: &str, message: &str, input_key: &str) -> InputRequest {
    InputRequest {
        interaction: Interaction::Url,
        key: format!("{INPUT_KEY_PREFIX}{input_key}"),
        input: url_request(url, message),
    }
}

/// One judged request, as a round trip of the layer's or a denial is written for it.
#[derive(Clone, Copy)]
pub(crate) struct Round<'a> {
    pub settings: &'a Settings,
    pub principal: &'a Principal,
    pub request: &'a McpRequest,
    pub protocol: &'a ProtocolContext,
    /// The verified state of this request, when it is itself a retry.
    pub continuation: Option<&'a Payload>,
}

/// What [`Round::elicit`] made.
pub(crate) enum Elicited {
    /// The `InputRequiredResult`, its context id and how it was expressed.
    Asked {
        context_id: String,
        reply: Reply,
        expressed_as: Expressed,
    },
    /// No random source for the state or the context id: the layer refuses.
    NoRandomness,
}

impl Round<'_> {
    /// What a denial or an input request for this request is rendered with.
    pub fn denial_context<'c>(&'c self, context_id: &'c str) -> DenialContext<'c> {
        DenialContext {
            settings: &self.settings.denial,
            request: self.request,
            protocol: self.protocol,
            resource_metadata: &self.settings.resource.metadata_url,
            endpoint_scopes: &self.settings.authenticator.required_scopes,
            context_id,
            dpop_algs: self
                .settings
                .authenticator
                .dpop
                .as_ref()
                .filter(|_| self.principal.dpop_jkt().is_some())
                .map(|dpop| dpop.algs()),
        }
    }

    /// An `InputRequiredResult` with a fresh signed state, if the client can take one, the
    /// revision allows it and the call has rounds left; `None` otherwise.
    pub fn elicit(&self, input: InputRequest) -> Option<Elicited> {
        let settings = self.settings;
        let interaction = input.interaction;
        let result_based = matches!(
            settings.denial.revision.family(),
            Family::ResultBased { .. }
        );
        if !can_elicit(interaction, self.protocol, self.request)
            || (interaction == Interaction::Url && !result_based)
        {
            return None;
        }
        let round = self.continuation.map_or(0, |p| p.round) + 1;
        if round > settings.continuation.max_rounds {
            return None;
        }
        let (app_state, app_inputs) = app_round_trip(self.request, self.continuation);
        let resource = settings.resource.uri.as_str();
        let binding = binding(self.principal, resource, self.protocol, self.request);
        let (Ok(state), Ok(context_id)) = (
            settings.continuation.state.issue(
                &binding,
                interaction,
                &input.key,
                round,
                app_state,
                app_inputs,
            ),
            new_context_id(),
        ) else {
            return Some(Elicited::NoRandomness);
        };
        let rendered = self.denial_context(&context_id).input_required(
            &input.key,
            input.input,
            &state,
            interaction == Interaction::Url,
        );
        Some(Elicited::Asked {
            reply: rendered.response,
            expressed_as: rendered.expressed_as,
            context_id,
        })
    }
}

/// The elicitation asking the user to confirm a call.
fn confirmation_request(message: &str) -> Value {
    json!({
        "method": "elicitation/create",
        "params": {
            "mode": "form",
            "message": message,
            "requestedSchema": {
                "type": "object",
                "properties": {
                    "approve": {"type": "boolean", "title": "Approve", "description": "Run this call"}
                },
                "required": ["approve"]
            }
        }
    })
}

/// The elicitation sending the user to an approval page.
fn url_request(url: &str, message: &str) -> Value {
    json!({"method": "elicitation/create", "params": {"mode": "url", "url": url, "message": message}})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn approval_urls() {
        assert!(check_approval_url("https://app.example/approve/1", false).is_ok());
        assert!(check_approval_url("http://app.example/approve/1", true).is_err());
        assert!(check_approval_url("http://127.0.0.1:8080/approve/1", false).is_err());
        assert!(check_approval_url("http://127.0.0.1:8080/approve/1", true).is_ok());
        assert!(check_approval_url("https://user:pw@app.example/", false).is_err());
        assert!(check_approval_url("javascript:alert(1)", true).is_err());
        assert!(check_approval_url("/relative", true).is_err());
    }
}
