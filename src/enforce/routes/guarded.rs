//! The guarded route: every request the method table guards, and unknown methods the builder
//! asked to judge. In order: a retry's continuation state is verified
//! ([`interaction`](crate::enforce::interaction)); a `subscriptions/listen` is judged per URI;
//! the tool's annotations are learned if the policy reads them; the [judge](crate::judge)
//! asks the policy, and the [`Invocation`] says the ruling as an [`Action`]; and [`act`]
//! forwards, replies, or conceals.

use std::borrow::Cow;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use http::header;
use http::request::Parts;

use crate::continuation::Payload;
use crate::denial::new_context_id;
use crate::denial::render::{Denial, Expressed};
use crate::enforce::bounds::Inner;
use crate::enforce::call::{Call, Routed, scrubbed};
use crate::enforce::conceal::{ConcealedField, conceal, concealable};
use crate::enforce::interaction::{self, Elicited, answered, forwarded_body};
use crate::enforce::limited::{limit_store_refusal, limited_answer};
use crate::enforce::reply::{Reply, internal_error};
use crate::enforce::routes::discover::{self, side_request};
use crate::enforce::routes::{listen, tasks};
use crate::enforce::whole::{self, Carry};
use crate::judge::{
    Case, DecisionKind, Express, Judged, Refusal, RemedyKind, RequestId, Ruling, Said,
};
use crate::limit::InFlight;
use crate::mcp::annotations::ListedTool;
use crate::mcp::identity::name_result;
use crate::mcp::request::{McpRequest, listen_uris};
use crate::mcp::{Era, Target};
use crate::policy::{Answered, Interaction, Phase, Remediation};
use crate::settings::Settings;

/// Judges a guarded request and acts on what was said.
#[allow(
    clippy::manual_async_fn,
    reason = "an async fn stores its arguments twice in its future"
)]
pub(crate) fn guard<S: Inner>(
    call: Call<'_>,
    inner: &mut S,
) -> impl Future<Output = Result<Routed<S::Res>, S::Error>> {
    async move {
        // A retry of the layer's own round trip: the state must verify before anything else.
        let continuation = match interaction::verified_state(&call).await {
            Ok(continuation) => continuation,
            Err(reply) => return Ok(Routed::reply(reply)),
        };
        if call.request.method == "subscriptions/listen" {
            let listen = judge_listen(&call, continuation.as_deref());
            if let Some(reply) = Box::pin(listen).await {
                return Ok(Routed::reply(reply));
            }
            // Out of the match: its scrutinee (a whole reply) is not kept across this await.
            return Ok(task_listen(call).await);
        }
        let answered = continuation
            .as_deref()
            .map(|payload| answered(payload, &call.request));
        let listed = annotations_for(&call, inner).await;
        let (case, invocation) = invocation(
            &call,
            &call.request,
            continuation.as_deref(),
            answered.as_ref(),
            listed,
        );
        // Boxed: the judgement (the evaluation, the policy's future, the containment) is the
        // largest part of a guarded call; inline, it would take every request's future past the
        // allocator's small-object cache.
        let action = Box::pin(
            call.settings
                .policy
                .judge(RequestId::next())
                .judge(case, invocation),
        )
        .await;
        act(call, inner, action, continuation).await
    }
}

/// An allowed listen: the layer's own when it asks only for the layer's task notifications
/// (and they are on), otherwise forwarded. Boxed here, outside the guarded route's future,
/// so that only listens pay for it.
fn task_listen<'a, B: 'a>(call: Call<'a>) -> Pin<Box<impl Future<Output = Routed<B>> + 'a>> {
    Box::pin(async move {
        let Some(listeners) = &call.settings.tasks.notifications else {
            return call.forward();
        };
        match listen::asked(&call.request) {
            listen::Asked::Forward => call.forward(),
            listen::Asked::Tasks(ids) => listen::serve(&call, listeners, ids).await,
            listen::Asked::Malformed(why) => {
                let error = crate::mcp::ProtocolError::invalid_params(why);
                Routed::reply(crate::enforce::reply::refusal(
                    &error.with_id(Some(&call.request.id)),
                ))
            }
        }
    })
}

/// The called tool's annotations, as listed. A process that has not seen the tool listed
/// lists the tools itself first when the policy reads annotations, so the decision does not
/// depend on which replica saw a list.
async fn annotations_for<S: Inner>(call: &Call<'_>, inner: &mut S) -> Option<Arc<ListedTool>> {
    let Target::Tool { name, .. } = &call.request.target else {
        return None;
    };
    let settings = &call.settings.policy;
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
            learn_tools(call.settings, inner, &call.parts, &call.request).await;
        }
        known.get(name)
    })
    .await
}

/// What happens to a guarded request once the judge has ruled.
pub(crate) enum Action {
    /// On to the inner service, holding the call's place in flight (a concurrency limit)
    /// until its answer is complete.
    Forward(Option<InFlight>),
    /// A reply of the layer's: a denial, an input request, a held task's `CreateTaskResult`,
    /// a refusal. Boxed: an action passes through every future between the policy and the
    /// route, and a response inline (144 bytes) was copied at each of them on every call,
    /// allowed ones too; a reply is rarer and costs an allocation more.
    Reply(Box<Reply>),
    /// Answer as the inner server answers for a component that does not exist; the field
    /// naming the component.
    Conceal(ConcealedField),
}

/// Carries out an action: forward (with the body a retry rewrites), reply, or answer as the
/// inner server answers for a component it does not have.
#[allow(
    clippy::manual_async_fn,
    reason = "an async fn stores its arguments twice in its future"
)]
fn act<S: Inner>(
    mut call: Call<'_>,
    inner: &mut S,
    action: Action,
    continuation: Option<Box<Payload>>,
) -> impl Future<Output = Result<Routed<S::Res>, S::Error>> {
    async move {
        match action {
            Action::Forward(place) => {
                let carry = whole::carry(call.settings, &call.request, &call.protocol);
                let body = outgoing(&mut call.parts, &call.request, call.bytes, continuation);
                match carry {
                    // The place goes with the answer's body, given back when it ends.
                    Carry::Stream => Ok(Routed::Forward(call.parts, body, place)),
                    Carry::Whole { private } => {
                        let (settings, request) = (call.settings, &call.request);
                        let read =
                            whole::forward(settings, inner, *call.parts, body, request, private);
                        let answer = Box::pin(read).await;
                        // The answer is read whole: the call is done.
                        drop(place);
                        Ok(Routed::Respond(answer?))
                    }
                }
            }
            Action::Reply(reply) => {
                let named = Box::pin(named(&call, inner, *reply));
                Ok(Routed::reply(named.await))
            }
            Action::Conceal(field) => {
                let private = whole::is_private(&call.request, &call.protocol);
                let (settings, request) = (call.settings, &call.request);
                let probe = conceal(settings, inner, *call.parts, request, field, private);
                Ok(Routed::Respond(Box::pin(probe).await?))
            }
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

/// A reply of the layer's: a result for a modern request names the inner server in its
/// `_meta` (see [`crate::mcp::identity`]); errors and legacy answers are left as they are.
pub(crate) async fn named<S: Inner>(call: &Call<'_>, inner: &mut S, reply: Reply) -> Reply {
    if call.protocol.era != Era::Modern {
        return reply;
    }
    // Read once: the identity is only looked for when there is a result to name.
    let (mut parts, body) = reply.into_parts();
    let Some(mut message) = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .filter(|message| message.get("result").is_some())
    else {
        return Reply::from_parts(parts, body);
    };
    match discover::server_identity(call.settings, inner, &call.parts, &call.request).await {
        Some(info) if name_result(&mut message, &info) => {
            parts.headers.remove(header::CONTENT_LENGTH);
            Reply::from_parts(parts, Bytes::from(message.to_string()))
        }
        _ => Reply::from_parts(parts, body),
    }
}

/// Pages of `tools/list` the layer reads when it lists the tools itself.
const LEARN_PAGES: usize = 10;

/// Lists the inner server's tools as this request's caller (same headers, session and
/// `_meta`), and remembers each listed tool's annotations (an empty object for a tool listed
/// without any). Best effort: an answer the layer cannot read ends the listing, and the
/// tools it did not learn stay unknown (which a policy reading annotations treats with
/// suspicion).
pub(crate) async fn learn_tools<S: Inner>(
    settings: &Settings,
    inner: &mut S,
    parts: &Parts,
    request: &McpRequest,
) {
    let mut cursor: Option<String> = None;
    for page in 0..LEARN_PAGES {
        let id = serde_json::Value::String(format!("mcp-gate-tools-{page}"));
        let mut params = serde_json::Map::new();
        if let Some(cursor) = &cursor {
            params.insert("cursor".into(), cursor.clone().into());
        }
        let side = side_request(settings, inner, parts, request, "tools/list", &id, params);
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
async fn judge_listen(call: &Call<'_>, continuation: Option<&Payload>) -> Option<Reply> {
    let request = &call.request;
    let params = request.params();
    let targets: Vec<Target> = match listen_uris(params) {
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
    // One id for every URI's decision: they are one request's.
    let judge = call.settings.policy.judge(RequestId::next());
    for target in targets {
        let mut one = McpRequest::clone(request);
        one.target = target;
        let (case, invocation) = invocation(call, &one, continuation, None, None);
        match judge.judge(case, invocation).await {
            // A listen takes no place in flight.
            Action::Forward(_) => {}
            Action::Reply(reply) => return Some(*reply),
            // Concealment does not apply to a listen.
            Action::Conceal(_) => return Some(internal_error(request)),
        }
    }
    None
}

/// What the judge is asked about `request` (the call's own, or one URI of a listen) in the
/// invocation phase, and how its ruling is said.
fn invocation<'a>(
    call: &'a Call<'_>,
    request: &'a McpRequest,
    continuation: Option<&'a Payload>,
    answered: Option<&'a Answered>,
    listed: Option<Arc<ListedTool>>,
) -> (Case<'a>, Invocation<'a>) {
    let case = Case {
        principal: &call.principal,
        method: &request.method,
        target: Cow::Borrowed(&request.target),
        protocol: &call.protocol,
        phase: Phase::Invocation,
        answered: answered.cloned(),
        listed,
        approval: None,
        extensions: Some(&call.parts.extensions),
    };
    let invocation = Invocation {
        round: interaction::Round {
            settings: call.settings,
            principal: &call.principal,
            request,
            protocol: &call.protocol,
            continuation,
        },
        answered,
        place: None,
    };
    (case, invocation)
}

/// One judged request and everything its answer depends on: how a ruling on an invocation
/// is said.
pub(crate) struct Invocation<'a> {
    /// The request, its caller and its verified state, if it is a retry.
    pub round: interaction::Round<'a>,
    /// What the retry answered.
    pub answered: Option<&'a Answered>,
    /// The call's place in flight, when a concurrency limit counts it: forwarded with an
    /// allowed call, let go with any other answer.
    pub place: Option<InFlight>,
}

impl Express for Invocation<'_> {
    type Then = Action;

    async fn express(mut self, ruling: Ruling) -> Judged<Action> {
        match ruling {
            Ruling::Allow => {
                let place = self.place.take();
                said(Said::plain(DecisionKind::Allow), Action::Forward(place))
            }
            // No policy had an opinion: never an allow.
            Ruling::Abstain => {
                let undecided = Remediation::Undisclosed {
                    message: "No policy allows this request.".to_owned(),
                };
                self.deny(Denial::Deny(&undecided), DecisionKind::Abstain)
            }
            Ruling::Ask { message } => self.ask(&message),
            // Boxed: a denial's work (a round trip's state, a held task) would otherwise size
            // every judgement's future, allowed calls' too, past the allocator's small-object
            // cache (see `guard`).
            Ruling::Deny(remediation) => Box::pin(self.denied(remediation)).await,
            Ruling::Failed(failure) => self.refuse(Refusal::PolicyFailed {
                kind: failure.kind(),
                error: failure.to_string(),
            }),
            Ruling::Limited(limited) => {
                let round = &self.round;
                let revision = round.settings.denial.revision;
                let answer = limited_answer(round.request, round.protocol, revision, &limited);
                let mut told = Said::plain(DecisionKind::Limited);
                told.limit = Some(limited.scope);
                said(told, Action::Reply(Box::new(answer)))
            }
            Ruling::LimitFailed(error) => said(
                Said::refused(Refusal::LimitStore(error.to_string())),
                Action::Reply(Box::new(limit_store_refusal(&error, self.round.request))),
            ),
            // Only a held call is judged withdrawn (an invocation's token was checked as it
            // came); were one, it would be refused.
            Ruling::Withdrawn => self.refuse(Refusal::OwnerRevoked),
        }
    }

    fn hold(&mut self, place: InFlight) {
        self.place = Some(place);
    }
}

/// A ruling said: what was said, and what to do.
fn said(said: Said, action: Action) -> Judged<Action> {
    Judged { said, then: action }
}

impl Invocation<'_> {
    /// `Ask`: allowed when this retry confirmed; otherwise a confirmation round trip when the
    /// client can take one, or the ask as a denial.
    fn ask(&mut self, message: &str) -> Judged<Action> {
        match self
            .answered
            .filter(|a| a.interaction() == Interaction::Confirmation)
        {
            Some(answer) if answer.confirmed() => said(
                Said::plain(DecisionKind::Allow).expressed(Expressed::Confirmed),
                Action::Forward(self.place.take()),
            ),
            Some(_) => self.deny(Denial::Unconfirmed(message), DecisionKind::Ask),
            None => self
                .elicit(interaction::confirmation(message), DecisionKind::Ask)
                .unwrap_or_else(|| self.deny(Denial::Ask(message), DecisionKind::Ask)),
        }
    }

    /// `Deny`: a URL approval round trip or a held task where they apply, otherwise the
    /// denial rendered.
    async fn denied(&self, remediation: Remediation) -> Judged<Action> {
        let development = self.round.settings.continuation.development_mode;
        if let Err(problem) = interaction::check_remediation(&remediation, development) {
            return self.refuse(Refusal::UnusableRemediation(problem));
        }
        if let Remediation::Url {
            url,
            message,
            input_key,
        } = &remediation
            && let Some(judged) = self.elicit(
                interaction::url_approval(url, message, input_key),
                DecisionKind::Deny,
            )
        {
            return judged;
        }
        if let Remediation::Task { message } = &remediation
            && tasks::can_hold(
                self.round.request,
                self.round.protocol,
                self.round.settings.denial.revision,
            )
        {
            return self.hold(message).await;
        }
        self.deny(Denial::Deny(&remediation), DecisionKind::Deny)
    }

    /// An `InputRequiredResult` with a fresh signed state, said as `decision`, if the client
    /// can take one, the revision allows it and the call has rounds left; `None` otherwise.
    fn elicit(
        &self,
        input: interaction::InputRequest,
        decision: DecisionKind,
    ) -> Option<Judged<Action>> {
        let remedy = (input.interaction == Interaction::Url).then_some(RemedyKind::Url);
        Some(match self.round.elicit(input)? {
            Elicited::Asked {
                context_id,
                reply,
                expressed_as,
            } => {
                let mut told = Said::plain(decision)
                    .expressed(expressed_as)
                    .context(&context_id);
                told.remediation = remedy;
                said(told, Action::Reply(Box::new(reply)))
            }
            Elicited::NoRandomness => self.refuse(Refusal::NoRandomness),
        })
    }

    /// Holds the call in a durable approval task: said as `task` once the task is stored.
    async fn hold(&self, message: &str) -> Judged<Action> {
        let (settings, principal, request) = (
            self.round.settings,
            self.round.principal,
            self.round.request,
        );
        let hold = tasks::hold(settings, principal, request, self.round.protocol, message);
        match Box::pin(hold).await {
            Ok(held) => {
                let mut told = Said::plain(DecisionKind::Deny)
                    .remedy(RemedyKind::Task)
                    .expressed(Expressed::Task)
                    .context(&held.context_id);
                told.task_id = Some(held.task_id);
                said(told, Action::Reply(Box::new(held.reply)))
            }
            Err(refused) => {
                let told = Said::plain(DecisionKind::Deny)
                    .remedy(RemedyKind::Task)
                    .expressed(Expressed::Refused);
                said(told, Action::Reply(Box::new(refused)))
            }
        }
    }

    /// The denial rendered, or concealed when conceal mode is on and the denial says nothing
    /// a client could act on.
    fn deny(&self, denial: Denial<'_>, decision: DecisionKind) -> Judged<Action> {
        let Ok(context_id) = new_context_id() else {
            return self.refuse(Refusal::NoRandomness);
        };
        let remediation = match &denial {
            Denial::Deny(r) => Some(RemedyKind::of(r)),
            Denial::Ask(_) | Denial::Unconfirmed(_) => None,
        };
        let rendered = self.round.denial_context(&context_id).render(denial);
        let concealed = concealable(self.round.request).filter(|_| {
            self.round.settings.discovery.conceal && rendered.expressed_as.is_plain_refusal()
        });
        let (expressed_as, action) = match concealed {
            Some(field) => (Expressed::Concealed, Action::Conceal(field)),
            None => (
                rendered.expressed_as,
                Action::Reply(Box::new(rendered.response)),
            ),
        };
        let mut told = Said::plain(decision)
            .expressed(expressed_as)
            .context(&context_id);
        told.remediation = remediation;
        said(told, action)
    }

    /// The layer's own refusal: an internal error, said with its reason.
    fn refuse(&self, refusal: Refusal) -> Judged<Action> {
        said(
            Said::refused(refusal),
            Action::Reply(Box::new(internal_error(self.round.request))),
        )
    }
}
