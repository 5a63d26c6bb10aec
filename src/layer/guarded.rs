//! The guarded route: every request the method table guards, and unknown methods the builder
//! asked to judge. In order: a retry's continuation state is verified; a
//! `subscriptions/listen` is judged per URI; the tool's annotations are learned if the policy
//! reads them; `evaluate` decides; the [`Turn`] turns the decision into a [`Verdict`]; and
//! [`act`] forwards, answers, holds or conceals.

use std::sync::Arc;

use bytes::Bytes;
use http::request::Parts;
use http::{Response, header};

use super::advertise::{self, side_request};
use super::audit::DecisionEvent;
use super::bounds::Inner;
use super::conceal::{Named, conceal, concealable};
use super::interaction::{
    CONFIRM_KEY, INPUT_KEY_PREFIX, answered, app_round_trip, binding, can_elicit,
    check_approval_url, confirmation_request, forwarded_body, gateway_state, url_request,
};
use super::pipeline::{Call, Next, answer, scrubbed};
use super::refuse::{internal_error, state_refusal};
use super::tasks;
use super::whole::{self, Carry};
use crate::auth::Principal;
use crate::continuation::Payload;
use crate::denial::Family;
use crate::denial::new_context_id;
use crate::denial::render::{Denial, DenialContext};
use crate::gate::Gate;
use crate::mcp::annotations::ListedTool;
use crate::mcp::identity::name_result;
use crate::mcp::request::{McpRequest, listen_uris};
use crate::mcp::{Era, ProtocolContext, Target};
use crate::policy::{
    self, Answered, Decision, Evaluation, EvaluationData, Interaction, Phase, Remediation,
};

/// Judges a guarded request and acts on the verdict.
pub(super) async fn judge<S: Inner>(
    call: Call<'_>,
    inner: &mut S,
) -> Result<Next<S::Res>, S::Error> {
    // A retry of the layer's own round trip: the state must verify before anything else.
    let continuation = match verified_state(&call).await {
        Ok(continuation) => continuation,
        Err(response) => return Ok(answer(response)),
    };
    if call.request.method == "subscriptions/listen" {
        let (gate, principal) = (call.gate, &call.principal);
        let listen = judge_listen(
            gate,
            principal,
            &call.request,
            &call.protocol,
            continuation.as_deref(),
        );
        return Ok(match Box::pin(listen).await {
            None => call.forward(),
            Some(response) => answer(response),
        });
    }
    let answered = continuation
        .as_deref()
        .map(|payload| answered(payload, &call.request));
    let annotations = annotations_for(&call, inner).await;
    let evaluation = Evaluation::new(EvaluationData {
        principal: call.principal.clone(),
        method: call.request.method.clone(),
        target: call.request.target.clone(),
        protocol: call.protocol.clone(),
        phase: Phase::Invocation,
        answered: answered.clone(),
        listed: annotations,
        approval: None,
    });
    let settings = &call.gate.inner.policy;
    let decision = policy::run(&*settings.policy, evaluation, settings.evaluate_timeout).await;
    let turn = Turn {
        gate: call.gate,
        principal: &call.principal,
        request: &call.request,
        protocol: &call.protocol,
        continuation: continuation.as_deref(),
    };
    let verdict = turn.respond(decision, answered.as_ref());
    act(call, inner, verdict, continuation).await
}

/// The continuation state a retry carries, verified (`None` on a first round); the refusal
/// of a state that does not verify. Boxed: it is rare, and large.
async fn verified_state(call: &Call<'_>) -> Result<Option<Box<Payload>>, Response<Bytes>> {
    let Some(state) = gateway_state(&call.request) else {
        return Ok(None);
    };
    let resource = call.gate.inner.resource.uri.as_str();
    let binding = binding(&call.principal, resource, &call.protocol, &call.request);
    match Box::pin(call.gate.inner.continuation.state.verify(state, &binding)).await {
        Ok(payload) => Ok(Some(Box::new(payload))),
        Err(error) => Err(state_refusal(&error, &call.request)),
    }
}

/// The called tool's annotations, as listed. A process that has not seen the tool listed
/// lists the tools itself first when the policy reads annotations, so the decision does not
/// depend on which replica saw a list.
async fn annotations_for<S: Inner>(call: &Call<'_>, inner: &mut S) -> Option<Arc<ListedTool>> {
    let Target::Tool { name, .. } = &call.request.target else {
        return None;
    };
    let settings = &call.gate.inner.policy;
    let known = &settings.tool_annotations;
    if let Some(annotations) = known.get(name) {
        return Some(annotations);
    }
    if !settings.policy.needs_tool_annotations() {
        return None;
    }
    Box::pin(async {
        let _one_listing = known.learning.lock().await;
        // Another caller may have listed the tools while this one waited.
        if known.get(name).is_none() && known.may_learn() {
            learn_tools(call.gate, inner, &call.parts, &call.request).await;
        }
        known.get(name)
    })
    .await
}

/// Carries out a verdict: forward (with the body a retry rewrites), answer, hold the call in
/// a task, or answer as the inner server answers for a component it does not have.
async fn act<S: Inner>(
    mut call: Call<'_>,
    inner: &mut S,
    verdict: Verdict,
    continuation: Option<Box<Payload>>,
) -> Result<Next<S::Res>, S::Error> {
    match verdict {
        Verdict::Forward => {
            let carry = whole::carry(call.gate, &call.request, &call.protocol);
            let body = outgoing(&mut call.parts, &call.request, call.bytes, continuation);
            match carry {
                Carry::Stream => Ok(Next::Forward(call.parts, body)),
                Carry::Whole { private } => {
                    let (gate, request) = (call.gate, &call.request);
                    let read = whole::forward(gate, inner, *call.parts, body, request, private);
                    Ok(Next::Done(Box::pin(read).await?))
                }
            }
        }
        Verdict::Answer(response) => {
            let named = Box::pin(named(&call, inner, response));
            Ok(answer(named.await))
        }
        Verdict::Hold(message) => {
            let (gate, principal) = (call.gate, &call.principal);
            let hold = tasks::hold(gate, principal, &call.request, &call.protocol, &message);
            let response = Box::pin(hold).await;
            let named = Box::pin(named(&call, inner, response));
            Ok(answer(named.await))
        }
        Verdict::Conceal(component) => {
            let private = whole::is_private(&call.request, &call.protocol);
            let (gate, request) = (call.gate, &call.request);
            let probe = conceal(gate, inner, *call.parts, request, component, private);
            Ok(Next::Done(Box::pin(probe).await?))
        }
    }
}

/// The body to forward: the one a retry's continuation rewrites, or the body as sent less the
/// layer's own inputs.
fn outgoing(
    parts: &mut Parts,
    request: &McpRequest,
    bytes: Bytes,
    continuation: Option<Box<Payload>>,
) -> Bytes {
    match continuation {
        Some(payload) => {
            // The body is rewritten: the client's length no longer describes it.
            parts.headers.remove(header::CONTENT_LENGTH);
            forwarded_body(request, &payload)
        }
        None => scrubbed(parts, request, bytes),
    }
}

/// A response the layer wrote: a result for a modern request names the inner server in its
/// `_meta` (see [`crate::mcp::identity`]); errors and legacy answers are left as they are.
pub(super) async fn named<S: Inner>(
    call: &Call<'_>,
    inner: &mut S,
    response: Response<Bytes>,
) -> Response<Bytes> {
    if call.protocol.era != Era::Modern {
        return response;
    }
    // Read once: the identity is only looked for when there is a result to name.
    let (mut parts, body) = response.into_parts();
    let Some(mut message) = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .filter(|message| message.get("result").is_some())
    else {
        return Response::from_parts(parts, body);
    };
    match advertise::server_identity(call.gate, inner, &call.parts, &call.request).await {
        Some(info) if name_result(&mut message, &info) => {
            parts.headers.remove(header::CONTENT_LENGTH);
            Response::from_parts(parts, Bytes::from(message.to_string()))
        }
        _ => Response::from_parts(parts, body),
    }
}

/// Pages of `tools/list` the layer reads when it lists the tools itself.
const LEARN_PAGES: usize = 10;

/// Lists the inner server's tools as this request's caller (same headers, session and
/// `_meta`), and remembers each listed tool's annotations (an empty object for a tool listed
/// without any). Best effort: an answer the layer cannot read ends the listing, and the
/// tools it did not learn stay unknown (which a policy reading annotations treats with
/// suspicion).
pub(super) async fn learn_tools<S: Inner>(
    gate: &Gate,
    inner: &mut S,
    parts: &Parts,
    request: &McpRequest,
) {
    let settings = &*gate.inner;
    let mut cursor: Option<String> = None;
    for page in 0..LEARN_PAGES {
        let id = serde_json::Value::String(format!("mcp-gate-tools-{page}"));
        let mut params = serde_json::Map::new();
        if let Some(cursor) = &cursor {
            params.insert("cursor".into(), cursor.clone().into());
        }
        let side = side_request(gate, inner, parts, request, "tools/list", &id, params);
        let Some(result) = side.await else {
            return;
        };
        for tool in result
            .get("tools")
            .and_then(serde_json::Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(name) = tool.get("name").and_then(serde_json::Value::as_str) {
                let listed = std::sync::Arc::new(ListedTool::from_entry(tool));
                settings.policy.tool_annotations.remember(name, listed);
            }
        }
        match result.get("nextCursor").and_then(serde_json::Value::as_str) {
            Some(next) => cursor = Some(next.to_owned()),
            None => return,
        }
    }
}

/// `subscriptions/listen`: every resource URI it asks updates for is shown to `evaluate` as a
/// resource subscription (or, naming none, the listen itself with no target). All allowed:
/// `None`, forward it. Any other answer refuses the whole listen, rendered for the first URI
/// not allowed: a stream that silently carried fewer subscriptions than asked for would look
/// like a server that never sends updates.
async fn judge_listen(
    gate: &Gate,
    principal: &Principal,
    request: &McpRequest,
    protocol: &ProtocolContext,
    continuation: Option<&Payload>,
) -> Option<Response<Bytes>> {
    let settings = &*gate.inner;
    let params = request.params();
    let targets: Vec<Target> = match listen_uris(&params) {
        Ok(uris) if uris.is_empty() => vec![Target::None],
        Ok(uris) => uris
            .into_iter()
            .map(|uri| Target::Resource {
                uri: uri.to_owned(),
            })
            .collect(),
        // Classification checked the shape; a request that changed since cannot go on.
        Err(_) => return Some(internal_error(request)),
    };
    for target in targets {
        let evaluation = Evaluation::new(EvaluationData {
            principal: principal.clone(),
            method: request.method.clone(),
            target: target.clone(),
            protocol: protocol.clone(),
            phase: Phase::Invocation,
            answered: None,
            listed: None,
            approval: None,
        });
        let decision = policy::run(
            &*settings.policy.policy,
            evaluation,
            settings.policy.evaluate_timeout,
        )
        .await;
        let mut one = request.clone();
        one.target = target;
        let turn = Turn {
            gate,
            principal,
            request: &one,
            protocol,
            continuation,
        };
        match turn.respond(decision, None) {
            Verdict::Forward => {}
            Verdict::Answer(response) => return Some(response),
            // Neither a held task nor concealment applies to a listen.
            Verdict::Hold(_) | Verdict::Conceal(_) => return Some(internal_error(request)),
        }
    }
    None
}

/// What happens to a guarded request once the policy has spoken.
enum Verdict {
    Forward,
    Answer(Response<Bytes>),
    /// Answer as the inner server answers for a component that does not exist; the field
    /// naming the component.
    Conceal(Named),
    /// Hold the call in a durable approval task; the policy's message.
    Hold(String),
}

/// One evaluated request and everything its answer depends on.
struct Turn<'a> {
    gate: &'a Gate,
    principal: &'a Principal,
    request: &'a McpRequest,
    protocol: &'a ProtocolContext,
    continuation: Option<&'a Payload>,
}

impl Turn<'_> {
    fn respond(
        &self,
        decision: Result<Decision, policy::PolicyFailure>,
        answer: Option<&Answered>,
    ) -> Verdict {
        let settings = &*self.gate.inner;
        match decision {
            Ok(Decision::Allow) => {
                self.log("allow", None, None, None);
                Verdict::Forward
            }
            // No policy had an opinion: never an allow.
            Ok(Decision::Abstain) => {
                let undecided = Remediation::Undisclosed {
                    message: "No policy allows this request.".to_owned(),
                };
                self.deny(Denial::Deny(&undecided), "abstain")
            }
            Ok(Decision::Ask { message }) => {
                match answer.filter(|a| a.interaction() == Interaction::Confirmation) {
                    Some(answer) if answer.confirmed() => {
                        self.log("allow", None, Some("confirmed"), None);
                        Verdict::Forward
                    }
                    Some(_) => self.deny(Denial::Unconfirmed(&message), "ask"),
                    None => self
                        .elicit(
                            Interaction::Confirmation,
                            CONFIRM_KEY,
                            confirmation_request(&message),
                            "ask",
                        )
                        .unwrap_or_else(|| self.deny(Denial::Ask(&message), "ask")),
                }
            }
            Ok(Decision::Deny(remediation)) => {
                if let Err(problem) =
                    check_remediation(&remediation, settings.continuation.development_mode)
                {
                    tracing::error!(target: "mcp_gate::decision", method = crate::mcp::method_label(&self.request.method), problem, "the policy returned an unusable remediation");
                    return Verdict::Answer(internal_error(self.request));
                }
                if let Remediation::Url {
                    url,
                    message,
                    input_key,
                } = &remediation
                {
                    let key = format!("{INPUT_KEY_PREFIX}{input_key}");
                    if let Some(verdict) =
                        self.elicit(Interaction::Url, &key, url_request(url, message), "deny")
                    {
                        return verdict;
                    }
                }
                if let Remediation::Task { message } = &remediation
                    && tasks::can_hold(self.request, self.protocol, settings.denial.revision)
                {
                    return Verdict::Hold(message.clone());
                }
                self.deny(Denial::Deny(&remediation), "deny")
            }
            Err(failure) => {
                tracing::error!(target: "mcp_gate::decision", method = crate::mcp::method_label(&self.request.method), failure = failure.kind(), error = %failure, "the policy failed; refusing");
                Verdict::Answer(internal_error(self.request))
            }
        }
    }

    /// An `InputRequiredResult` with a fresh signed state, if the client can take one, the
    /// revision allows it and the call has rounds left; `None` otherwise.
    fn elicit(
        &self,
        interaction: Interaction,
        key: &str,
        input: serde_json::Value,
        decision: &'static str,
    ) -> Option<Verdict> {
        let settings = &*self.gate.inner;
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
        let resource = self.gate.inner.resource.uri.as_str();
        let binding = binding(self.principal, resource, self.protocol, self.request);
        let (Ok(state), Ok(context_id)) = (
            settings.continuation.state.issue(
                &binding,
                interaction,
                key,
                round,
                app_state,
                app_inputs,
            ),
            new_context_id(),
        ) else {
            tracing::error!(target: "mcp_gate::decision", "no random source for state or context id; refusing");
            return Some(Verdict::Answer(internal_error(self.request)));
        };
        let rendered = self.context(&context_id).input_required(
            key,
            input,
            &state,
            interaction == Interaction::Url,
        );
        let remediation = (interaction == Interaction::Url).then_some("url");
        self.log(
            decision,
            remediation,
            Some(rendered.expressed_as),
            Some(&context_id),
        );
        Some(Verdict::Answer(rendered.response))
    }

    fn context<'c>(&'c self, context_id: &'c str) -> DenialContext<'c> {
        DenialContext {
            settings: &self.gate.inner.denial,
            request: self.request,
            protocol: self.protocol,
            resource_metadata: &self.gate.inner.resource.metadata_url,
            endpoint_scopes: &self.gate.inner.authenticator.required_scopes,
            context_id,
        }
    }

    fn deny(&self, denial: Denial<'_>, decision: &'static str) -> Verdict {
        let Ok(context_id) = new_context_id() else {
            tracing::error!(target: "mcp_gate::decision", method = crate::mcp::method_label(&self.request.method), "no random source for a context id; refusing");
            return Verdict::Answer(internal_error(self.request));
        };
        let remediation = match &denial {
            Denial::Deny(r) => Some(r.kind()),
            Denial::Ask(_) | Denial::Unconfirmed(_) => None,
        };
        let rendered = self.context(&context_id).render(denial);
        let concealed = self.gate.inner.discovery.conceal
            && matches!(rendered.expressed_as, "unavailable" | "undisclosed")
            && concealable(self.request).is_some();
        self.log(
            decision,
            remediation,
            Some(if concealed {
                "concealed"
            } else {
                rendered.expressed_as
            }),
            Some(&context_id),
        );
        match concealable(self.request).filter(|_| concealed) {
            Some(named) => Verdict::Conceal(named),
            None => Verdict::Answer(rendered.response),
        }
    }

    /// One decision event (see [`super::audit`]).
    fn log(
        &self,
        decision: &'static str,
        remediation: Option<&'static str>,
        expressed_as: Option<&'static str>,
        context_id: Option<&str>,
    ) {
        DecisionEvent {
            principal: self.principal,
            method: &self.request.method,
            target: &self.request.target,
            approval: false,
            decision,
            context_id,
            remediation,
            expressed_as,
            task_id: None,
        }
        .emit();
    }
}

/// Remediations the application built wrongly are internal errors, never sent half-formed.
fn check_remediation(remediation: &Remediation, development: bool) -> Result<(), &'static str> {
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
