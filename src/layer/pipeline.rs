//! What happens to an authenticated request, in order: read the body, classify it, work out
//! its era, ask the policy, then forward it or answer with a denial.

use std::time::Duration;

use bytes::Bytes;
use http::request::Parts;
use http::{Method, Request, Response, StatusCode, header};
use tower_service::Service;

use super::advertise::{self, side_request};
use super::body::GateBody;
use super::buffer::{close_if_unread, declares_body, read_body};
use super::conceal::{Named, concealable, probe, restore};
use super::discovery::{
    ListAnswer, entry_target, read_answer, read_raw, readable_type, result_of, write_sse,
};
use super::interaction::{
    CONFIRM_KEY, INPUT_KEY_PREFIX, answered, app_round_trip, binding, can_elicit,
    carries_layer_inputs, check_approval_url, confirmation_request, forwarded_body, gateway_state,
    url_request, without_layer_inputs,
};
use super::sessions;
use super::tasks::{self, TaskRoute};
use super::verbs::Verb;
use crate::auth::Principal;
use crate::auth::token_cache::TokenDigest;
use crate::continuation::{Payload, ReplayError, StateError};
use crate::denial::Family;
use crate::denial::new_context_id;
use crate::denial::render::{Denial, DenialContext, json_rpc};
use crate::gate::Gate;
use crate::mcp::era::{SESSION_HEADER, protocol_context};
use crate::mcp::identity::stamp;
use crate::mcp::request::{McpRequest, Message, classify, listen_uris};
use crate::mcp::{
    EntryKind, Era, INTERNAL_ERROR, Listing as ListingClass, METHOD_NOT_FOUND, MethodClass,
    ProtocolContext, ProtocolError, Target,
};
use crate::policy::{self, Answered, Decision, Evaluation, Interaction, Phase, Remediation};

/// The bounds every request and response body of the layer meets.
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Hands the request to the inner service: the principal goes in, the token goes out.
pub(crate) fn admit(parts: &mut Parts, principal: Principal) {
    parts.headers.remove(header::AUTHORIZATION);
    parts.extensions.insert(principal);
}

fn local<B>(response: Response<Bytes>) -> Response<GateBody<B>> {
    response.map(GateBody::local)
}

fn protocol_error<B>(error: &ProtocolError) -> Response<GateBody<B>> {
    local(refusal(error))
}

/// A request the layer refuses itself: one `mcp_gate::request` event, then the JSON-RPC error.
pub(crate) fn refusal(error: &ProtocolError) -> Response<Bytes> {
    tracing::info!(target: "mcp_gate::request", status = error.status.as_u16(), code = error.code, message = %error.message, "request refused");
    json_rpc(error.status, error.to_json(), false)
}

/// [`refusal`] of a bound that may free up (a store full or unreachable, a quota), with
/// `Retry-After: <seconds>`.
pub(crate) fn refusal_retry_after(error: &ProtocolError, seconds: &'static str) -> Response<Bytes> {
    let mut response = refusal(error);
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, http::HeaderValue::from_static(seconds));
    response
}

/// Who the caller is, as far as the synchronous part of the layer got.
pub(crate) enum Identity {
    /// A token found in the cache, or otherwise settled without waiting.
    Known(Principal),
    /// A token to verify, with its cache key. Boxed: it is the rarer case, and it keeps every
    /// request's future small.
    Unverified(Box<(String, TokenDigest)>),
}

/// Verifies the token if it has to be, then everything after authentication.
///
/// The work is split in two so that each request's future stays small (it is boxed once per
/// request, and a small box is a cheap allocation): [`decide`] reads and judges the request,
/// and only then is the inner service's future started, with nothing of the decision kept
/// alive beside it.
pub(crate) async fn after_authentication<S, ReqBody, ResBody>(
    gate: Gate,
    mut inner: S,
    mut parts: Box<Parts>,
    body: ReqBody,
    identity: Identity,
    verb: Verb,
) -> Result<Response<GateBody<ResBody>>, S::Error>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    ReqBody: http_body::Body + From<Bytes> + Send + 'static,
    ReqBody::Error: Into<BoxError>,
    ResBody: http_body::Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    let principal = match identity {
        Identity::Known(principal) => principal,
        Identity::Unverified(unverified) => {
            let (token, key) = *unverified;
            // Boxed: verification (signature, key refresh, introspection) is the rare path once
            // the token cache is warm, and its future is large.
            let verify = Box::pin(gate.inner.authenticator.verify(&token, key));
            match verify.await {
                Ok(principal) => principal,
                Err(error) => return Ok(gate.refuse(&error, &parts).map(GateBody::local)),
            }
        }
    };
    admit(&mut parts, principal.clone());
    // A request that names a session goes on only if the session is the caller's.
    let session = if parts.headers.contains_key(SESSION_HEADER) {
        match Box::pin(sessions::bound_session(&gate, &parts, &principal)).await {
            Ok(session) => session.map(Box::new),
            Err(mut response) => {
                close_if_unread(&mut response, &parts);
                return Ok(local(response));
            }
        }
    } else {
        None
    };
    match verb {
        Verb::Post => {}
        Verb::Bodyless => {
            return Box::pin(bodyless(&gate, inner, *parts, session.as_deref())).await;
        }
    }
    match decide(&gate, &mut inner, parts, body, principal, session).await? {
        Next::Forward(parts, bytes) => {
            forwarded(start(&mut inner, *parts, ReqBody::from(bytes)).await)
        }
        Next::Done(response) => Ok(response),
    }
}

/// GET (the event stream), DELETE (the end of a legacy session) and OPTIONS: they carry no
/// operation, so they go on without a body; one that declares a body is refused, never
/// forwarded unread. A `DELETE` the inner server accepted unbinds the session.
async fn bodyless<S, ReqBody, ResBody>(
    gate: &Gate,
    mut inner: S,
    parts: Parts,
    session: Option<&sessions::BoundSession>,
) -> Result<Response<GateBody<ResBody>>, S::Error>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    ReqBody: From<Bytes>,
{
    if declares_body(&parts) {
        return Ok(local(bodyless_refusal(&parts)));
    }
    let ends_session = parts.method == Method::DELETE;
    let response = start(&mut inner, parts, ReqBody::from(Bytes::new())).await?;
    if let Some(session) = session.filter(|_| ends_session && response.status().is_success()) {
        sessions::unbind(gate, session).await;
    }
    Ok(response.map(GateBody::inner))
}

/// The answer to a GET, DELETE or OPTIONS that declares a body.
pub(crate) fn bodyless_refusal(parts: &Parts) -> Response<Bytes> {
    let mut response = refusal(&ProtocolError::invalid_request(
        "GET, DELETE and OPTIONS requests carry no body; operations are POSTed",
    ));
    close_if_unread(&mut response, parts);
    response
}

/// Starts the inner service's call. A plain function, so that the caller's future holds the
/// inner future alone, not the parts it was made from.
fn start<S, ReqBody>(inner: &mut S, parts: Parts, body: ReqBody) -> S::Future
where
    S: Service<Request<ReqBody>>,
{
    inner.call(Request::from_parts(parts, body))
}

fn forwarded<B, E>(response: Result<Response<B>, E>) -> Result<Response<GateBody<B>>, E> {
    response.map(|response| response.map(GateBody::inner))
}

/// What [`decide`] leaves to [`after_authentication`].
enum Next<B> {
    /// Pass the request on to the inner service, with this body.
    Forward(Box<Parts>, Bytes),
    /// The answer, made by the layer or by a rare path that called the inner service itself.
    Done(Response<GateBody<B>>),
}

/// Reads the body, classifies it, works out its era, asks the policy, and says what to do.
/// Rare paths that need more than one call to the inner service (initialize, lists, tasks,
/// concealment) run here, each boxed, so that they do not grow every request's future.
async fn decide<S, ReqBody, ResBody>(
    gate: &Gate,
    inner: &mut S,
    mut parts: Box<Parts>,
    body: ReqBody,
    principal: Principal,
    session: Option<Box<sessions::BoundSession>>,
) -> Result<Next<ResBody>, S::Error>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    ReqBody: http_body::Body + From<Bytes> + Send + 'static,
    ReqBody::Error: Into<BoxError>,
    ResBody: http_body::Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    let done = |response: Response<Bytes>| Ok(Next::Done(local(response)));
    let settings = &gate.inner.mcp;
    let bytes = match read_body(
        &parts.headers,
        body,
        settings.max_body_bytes,
        settings.body_timeout,
    )
    .await
    {
        Ok(bytes) => bytes,
        Err(error) => {
            // Too large, too slow or broken: the rest of the body stays unread.
            let mut response = refusal(&error);
            close_if_unread(&mut response, &parts);
            return done(response);
        }
    };
    let request = match classify(&bytes) {
        Err(error) => return done(refusal(&error)),
        Ok(Message::Notification | Message::Response) => return Ok(Next::Forward(parts, bytes)),
        // Boxed: it lives across every await below, and a pointer keeps the future small.
        Ok(Message::Request(request)) => Box::new(request),
    };
    let protocol = match protocol_context(
        &request,
        &parts.headers,
        session.as_deref().map(|s| &s.record),
    ) {
        Ok(protocol) => protocol,
        Err(error) => return done(refusal(&error)),
    };
    let mut request = request;
    match request.class {
        MethodClass::Lifecycle if request.method == "initialize" => {
            let body = scrubbed(&mut parts, &request, bytes);
            let run = Box::pin(initialize(gate, inner, *parts, body, &principal, &request));
            return Ok(Next::Done(run.await?));
        }
        MethodClass::Lifecycle if request.method == "server/discover" => {
            let body = scrubbed(&mut parts, &request, bytes);
            let run = Box::pin(advertise::discover(gate, inner, *parts, body, &request));
            return Ok(Next::Done(run.await?));
        }
        MethodClass::Lifecycle => {
            let body = scrubbed(&mut parts, &request, bytes);
            return Ok(Next::Forward(parts, body));
        }
        MethodClass::Listing(class) => {
            let listing = Listing {
                gate,
                principal: &principal,
                request: &request,
                protocol: &protocol,
                class,
            };
            let body = scrubbed(&mut parts, &request, bytes);
            let run = Box::pin(listing.run(inner, *parts, body));
            return Ok(Next::Done(run.await?));
        }
        MethodClass::Tasks => {
            let route = Box::pin(tasks::route(gate, &principal, &request, &protocol));
            match route.await {
                TaskRoute::NotOurs => {}
                TaskRoute::Answer(response) => {
                    let named = Box::pin(named(gate, inner, &parts, &request, &protocol, response));
                    return done(named.await);
                }
                TaskRoute::Run(record) => {
                    let identity =
                        Box::pin(advertise::server_identity(gate, inner, &parts, &request)).await;
                    // The readied service goes to the task; a clone stays behind, unused.
                    let ready = std::mem::replace(inner, inner.clone());
                    let run = Box::pin(tasks::run(
                        gate, ready, *parts, &principal, &request, *record,
                    ));
                    let response = run.await;
                    return done(match identity {
                        Some(info) => stamp(response, &info),
                        None => response,
                    });
                }
            }
        }
        MethodClass::Guarded => {}
        MethodClass::Unknown if settings.evaluate_unknown_methods => {
            let params = std::sync::Arc::new(request.params().into_owned());
            request.target = Target::Other {
                method: request.method.to_string(),
                params,
            };
        }
        // Unknown, and nobody asked to judge it: answered as a server answers a method it does
        // not have, never forwarded and never shown to a policy that might allow by default.
        MethodClass::Unknown => return done(method_not_found(&request, &protocol)),
    }
    let resource = gate.inner.resource.as_str();
    // A retry of the layer's own round trip: the state must verify before anything else.
    // Boxed: it is rare, and large.
    let continuation: Option<Box<Payload>> = match gateway_state(&request) {
        Some(state) => {
            let binding = binding(&principal, resource, &protocol, &request);
            match Box::pin(settings.state.verify(state, &binding)).await {
                Ok(payload) => Some(Box::new(payload)),
                Err(error) => return done(state_refusal(&error, &request)),
            }
        }
        None => None,
    };
    if request.method == "subscriptions/listen" {
        let listen = Box::pin(judge_listen(
            gate,
            &principal,
            &request,
            &protocol,
            continuation.as_deref(),
        ));
        return match listen.await {
            None => {
                let body = scrubbed(&mut parts, &request, bytes);
                Ok(Next::Forward(parts, body))
            }
            Some(response) => done(response),
        };
    }
    let answer = continuation
        .as_deref()
        .map(|payload| answered(payload, &request));
    let annotations = match &request.target {
        Target::Tool { name, .. } => match settings.tool_annotations.get(name) {
            Some(known) => Some(known),
            // A process that has not seen this tool listed lists the tools itself first, when
            // the policy reads annotations: the decision does not depend on which replica saw
            // a list.
            None if settings.policy.needs_tool_annotations() => {
                Box::pin(async {
                    let known = &settings.tool_annotations;
                    let _one_listing = known.learning.lock().await;
                    // Another caller may have listed the tools while this one waited.
                    if known.get(name).is_none() && known.may_learn() {
                        learn_tools(gate, inner, &parts, &request).await;
                    }
                    known.get(name)
                })
                .await
            }
            None => None,
        },
        _ => None,
    };
    let evaluation = Evaluation::new(
        principal.clone(),
        request.method.clone(),
        request.target.clone(),
        protocol.clone(),
        Phase::Invocation,
        answer.clone(),
        annotations,
    );
    let decision = policy::run(&*settings.policy, evaluation, settings.evaluate_timeout).await;
    let turn = Turn {
        gate,
        principal: &principal,
        request: &request,
        protocol: &protocol,
        continuation: continuation.as_deref(),
    };
    match turn.respond(decision, answer.as_ref()) {
        Verdict::Forward => {
            let body = match &continuation {
                Some(payload) => {
                    // The body is rewritten: the client's length no longer describes it.
                    parts.headers.remove(header::CONTENT_LENGTH);
                    forwarded_body(&request, payload)
                }
                None => scrubbed(&mut parts, &request, bytes),
            };
            Ok(Next::Forward(parts, body))
        }
        Verdict::Answer(response) => {
            let named = Box::pin(named(gate, inner, &parts, &request, &protocol, response));
            done(named.await)
        }
        Verdict::Hold(message) => {
            let hold = Box::pin(tasks::hold(gate, &principal, &request, &protocol, &message));
            let response = hold.await;
            let named = Box::pin(named(gate, inner, &parts, &request, &protocol, response));
            done(named.await)
        }
        Verdict::Conceal(named) => {
            let answer = Box::pin(conceal(
                inner,
                *parts,
                &request,
                named,
                (settings.max_list_bytes, settings.inner_read_timeout),
            ));
            Ok(Next::Done(answer.await?))
        }
    }
}

/// The answer to a state the layer cannot accept: `-32602` for a state that is wrong, and
/// `-32603` with 429 or 503 when the replay store could not record its use (the state may be
/// fine; its single use cannot be guaranteed now).
fn state_refusal(error: &StateError, request: &McpRequest) -> Response<Bytes> {
    let error = match error {
        StateError::ReplayStore(store) => {
            tracing::warn!(target: "mcp_gate::decision", error = %store, "replay store refused a state");
            let status = match store {
                ReplayError::OwnerQuota { .. } => StatusCode::TOO_MANY_REQUESTS,
                _ => StatusCode::SERVICE_UNAVAILABLE,
            };
            ProtocolError::new(status, INTERNAL_ERROR, error.to_string())
        }
        other => ProtocolError::invalid_params(other.to_string()),
    };
    refusal(&error.with_id(Some(&request.id)))
}

/// The body to forward for a request the layer did not answer with a round trip of its own:
/// as sent, unless it carries input responses under the layer's keys, which never reach the
/// inner service.
fn scrubbed(parts: &mut Parts, request: &McpRequest, bytes: Bytes) -> Bytes {
    if !carries_layer_inputs(request) {
        return bytes;
    }
    parts.headers.remove(header::CONTENT_LENGTH);
    without_layer_inputs(request)
}

/// A response the layer wrote: a result for a modern request names the inner server in its
/// `_meta` (see [`crate::mcp::identity`]); errors and legacy answers are left as they are.
async fn named<S, ReqBody, ResBody>(
    gate: &Gate,
    inner: &mut S,
    parts: &Parts,
    request: &McpRequest,
    protocol: &ProtocolContext,
    response: Response<Bytes>,
) -> Response<Bytes>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone,
    ReqBody: From<Bytes>,
    ResBody: http_body::Body<Data = Bytes>,
    ResBody::Error: Into<BoxError>,
{
    let is_result = || {
        serde_json::from_slice::<serde_json::Value>(response.body())
            .is_ok_and(|message| message.get("result").is_some())
    };
    if protocol.era != Era::Modern || !is_result() {
        return response;
    }
    match advertise::server_identity(gate, inner, parts, request).await {
        Some(info) => stamp(response, &info),
        None => response,
    }
}

/// Pages of `tools/list` the layer reads when it lists the tools itself.
const LEARN_PAGES: usize = 10;

/// Lists the inner server's tools as this request's caller (same headers, session and
/// `_meta`), and remembers each listed tool's annotations (an empty object for a tool listed
/// without any). Best effort: an answer the layer cannot read ends the listing, and the
/// tools it did not learn stay unknown (which a policy reading annotations treats with
/// suspicion).
async fn learn_tools<S, ReqBody, ResBody>(
    gate: &Gate,
    inner: &mut S,
    parts: &Parts,
    request: &McpRequest,
) where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone,
    ReqBody: From<Bytes>,
    ResBody: http_body::Body<Data = Bytes>,
    ResBody::Error: Into<BoxError>,
{
    let settings = &gate.inner.mcp;
    let mut cursor: Option<String> = None;
    for page in 0..LEARN_PAGES {
        let id = serde_json::Value::String(format!("mcp-gate-tools-{page}"));
        let mut params = serde_json::Map::new();
        if let Some(cursor) = &cursor {
            params.insert("cursor".into(), cursor.clone().into());
        }
        let messages = side_request(gate, inner, parts, request, "tools/list", &id, params).await;
        let Some(result) = messages
            .iter()
            .find(|message| message.get("id") == Some(&id))
            .and_then(|message| message.get("result"))
        else {
            return;
        };
        for tool in result
            .get("tools")
            .and_then(serde_json::Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(name) = tool.get("name").and_then(serde_json::Value::as_str) {
                let annotations = tool
                    .get("annotations")
                    .filter(|a| a.is_object())
                    .cloned()
                    .unwrap_or_else(|| serde_json::json!({}));
                settings
                    .tool_annotations
                    .remember(name, std::sync::Arc::new(annotations));
            }
        }
        match result.get("nextCursor").and_then(serde_json::Value::as_str) {
            Some(next) => cursor = Some(next.to_owned()),
            None => return,
        }
    }
}

/// `initialize`: forwarded, and the session the inner server opens is bound to the caller. A
/// session the layer cannot bind (the store is full, the owner is over quota, the store is
/// down) is refused, and ended at the inner server so that it does not linger.
async fn initialize<S, ReqBody, ResBody>(
    gate: &Gate,
    inner: &mut S,
    parts: Parts,
    bytes: Bytes,
    principal: &Principal,
    request: &McpRequest,
) -> Result<Response<GateBody<ResBody>>, S::Error>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone,
    ReqBody: From<Bytes>,
{
    let uri = parts.uri.clone();
    let response = start(inner, parts, ReqBody::from(bytes)).await?;
    let Some(session_id) = response
        .headers()
        .get(SESSION_HEADER)
        .filter(|_| response.status().is_success())
        .cloned()
    else {
        return Ok(response.map(GateBody::inner));
    };
    match sessions::bind(gate, &session_id, principal, request).await {
        Ok(()) => Ok(response.map(GateBody::inner)),
        Err(refused) => {
            drop(response);
            let mut end = Request::new(ReqBody::from(Bytes::new()));
            *end.method_mut() = Method::DELETE;
            *end.uri_mut() = uri;
            end.headers_mut().insert(SESSION_HEADER, session_id);
            end.extensions_mut().insert(principal.clone());
            let mut again = inner.clone();
            if std::future::poll_fn(|cx| again.poll_ready(cx))
                .await
                .is_ok()
            {
                // Best effort: the session is unusable through the layer either way.
                let _ = again.call(end).await;
            }
            Ok(local(refused))
        }
    }
}

/// A method in no row of the method table, answered as a server answers a method it does not
/// have: `-32601`, with HTTP 404 on a 2026-07-28 request and 200 on a legacy one.
fn method_not_found(request: &McpRequest, protocol: &ProtocolContext) -> Response<Bytes> {
    let status = match protocol.era {
        Era::Modern => StatusCode::NOT_FOUND,
        Era::Legacy => StatusCode::OK,
    };
    refusal(
        &ProtocolError::new(status, METHOD_NOT_FOUND, "Method not found")
            .with_id(Some(&request.id)),
    )
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
    let settings = &gate.inner.mcp;
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
        let evaluation = Evaluation::new(
            principal.clone(),
            request.method.clone(),
            target.clone(),
            protocol.clone(),
            Phase::Invocation,
            None,
            None,
        );
        let decision = policy::run(&*settings.policy, evaluation, settings.evaluate_timeout).await;
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

/// Answers for a hidden component as the inner server answers for one that does not exist:
/// the call is replayed about a made-up component of the same shape, and the made-up part is
/// put back in the answer. An answer the layer cannot read whole (too large, too slow, of a
/// type it cannot read) is refused, never passed on.
async fn conceal<S, ReqBody, ResBody>(
    inner: &mut S,
    mut parts: Parts,
    request: &McpRequest,
    named: Named,
    (max_bytes, limit): (usize, Duration),
) -> Result<Response<GateBody<ResBody>>, S::Error>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    ReqBody: From<Bytes>,
    ResBody: http_body::Body<Data = Bytes>,
    ResBody::Error: Into<BoxError>,
{
    let Some(probe) = probe(request, named) else {
        return Ok(local(internal_error(request)));
    };
    parts.headers.remove(header::CONTENT_LENGTH);
    // Modern requests mirror the name in `Mcp-Name`: the probe must agree with itself.
    if parts.headers.contains_key("mcp-name")
        && let Ok(value) = http::HeaderValue::from_str(&probe.name)
    {
        parts.headers.insert("mcp-name", value);
    }
    let unreadable = |problem: &'static str| {
        tracing::error!(target: "mcp_gate::decision", method = %request.method, problem, "conceal probe unreadable; refusing");
        Ok(local(internal_error(request)))
    };
    // One time limit for the whole answer: its head, then its body.
    let started = std::time::Instant::now();
    let call = start(inner, parts, ReqBody::from(probe.body.clone()));
    let response = match crate::deadline::within(limit, call).await {
        Ok(response) => response?,
        Err(_) => return unreadable("the answer did not arrive in time"),
    };
    let left = limit.saturating_sub(started.elapsed());
    let (mut head, bytes) = match read_raw(response, max_bytes, Some(left)).await {
        Ok((head, _)) if head.status.is_success() && readable_type(&head).is_none() => {
            return unreadable("the answer has a content type the layer cannot read");
        }
        Ok(read) => read,
        Err(problem) => return unreadable(problem),
    };
    head.headers.remove(header::CONTENT_LENGTH);
    Ok(Response::from_parts(
        head,
        GateBody::local(restore(&bytes, &probe)),
    ))
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
        let settings = &self.gate.inner.mcp;
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
                if let Err(problem) = check_remediation(&remediation, settings.development_mode) {
                    tracing::error!(target: "mcp_gate::decision", method = %self.request.method, problem, "the policy returned an unusable remediation");
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
                tracing::error!(target: "mcp_gate::decision", method = %self.request.method, failure = failure.kind(), error = %failure, "the policy failed; refusing");
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
        let settings = &self.gate.inner.mcp;
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
        if round > settings.max_rounds {
            return None;
        }
        let (app_state, app_inputs) = app_round_trip(self.request, self.continuation);
        let resource = self.gate.inner.resource.as_str();
        let binding = binding(self.principal, resource, self.protocol, self.request);
        let (Ok(state), Ok(context_id)) = (
            settings
                .state
                .issue(&binding, interaction, key, round, app_state, app_inputs),
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
            settings: &self.gate.inner.mcp.denial,
            request: self.request,
            protocol: self.protocol,
            resource_metadata: &self.gate.inner.resource_metadata_url,
            endpoint_scopes: &self.gate.inner.authenticator.required_scopes,
            context_id,
        }
    }

    fn deny(&self, denial: Denial<'_>, decision: &'static str) -> Verdict {
        let Ok(context_id) = new_context_id() else {
            tracing::error!(target: "mcp_gate::decision", method = %self.request.method, "no random source for a context id; refusing");
            return Verdict::Answer(internal_error(self.request));
        };
        let remediation = match &denial {
            Denial::Deny(r) => Some(r.kind()),
            Denial::Ask(_) | Denial::Unconfirmed(_) => None,
        };
        let rendered = self.context(&context_id).render(denial);
        let concealed = self.gate.inner.mcp.conceal
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

    /// One structured event per decision. Never arguments, tokens or bodies.
    fn log(
        &self,
        decision: &'static str,
        remediation: Option<&'static str>,
        expressed_as: Option<&'static str>,
        context_id: Option<&str>,
    ) {
        tracing::info!(
            target: "mcp_gate::decision",
            context_id = context_id.unwrap_or(""),
            subject = self.principal.subject().unwrap_or(""),
            client_id = self.principal.client_id().unwrap_or(""),
            method = %self.request.method,
            target = self.request.target.name().unwrap_or(""),
            decision,
            remediation = remediation.unwrap_or(""),
            expressed_as = expressed_as.unwrap_or(""),
            "authorization decision"
        );
    }
}

/// A list request: its cursor opened, the inner answer filtered, the next cursor sealed.
struct Listing<'a> {
    gate: &'a Gate,
    principal: &'a Principal,
    request: &'a McpRequest,
    protocol: &'a ProtocolContext,
    class: ListingClass,
}

impl Listing<'_> {
    async fn run<S, ReqBody, ResBody>(
        &self,
        inner: &mut S,
        mut parts: Parts,
        bytes: Bytes,
    ) -> Result<Response<GateBody<ResBody>>, S::Error>
    where
        S: Service<Request<ReqBody>, Response = Response<ResBody>>,
        ReqBody: From<Bytes>,
        ResBody: http_body::Body<Data = Bytes>,
        ResBody::Error: Into<BoxError>,
    {
        let settings = &self.gate.inner.mcp;
        let resource = self.gate.inner.resource.as_str();
        let binding = binding(self.principal, resource, self.protocol, self.request);
        let mut body = bytes;
        match self.request.param("cursor") {
            None | Some(serde_json::Value::Null) => {}
            Some(serde_json::Value::String(cursor)) => {
                match settings.state.open_cursor(&binding, cursor) {
                    Ok(inner_cursor) => {
                        let mut params = self.request.params().into_owned();
                        params.insert("cursor".into(), inner_cursor.into());
                        let message = serde_json::json!({"jsonrpc": "2.0", "id": self.request.id, "method": self.request.method, "params": params});
                        body = Bytes::from(message.to_string());
                        parts.headers.remove(header::CONTENT_LENGTH);
                    }
                    Err(error) => {
                        let error = ProtocolError::invalid_params(error.to_string())
                            .with_id(Some(&self.request.id));
                        return Ok(protocol_error(&error));
                    }
                }
            }
            Some(_) => {
                let error = ProtocolError::invalid_params("the cursor must be a string")
                    .with_id(Some(&self.request.id));
                return Ok(protocol_error(&error));
            }
        }
        // One time limit for the whole answer: its head, then its body.
        let started = std::time::Instant::now();
        let call = start(inner, parts, ReqBody::from(body));
        let response = match crate::deadline::within(settings.inner_read_timeout, call).await {
            Ok(response) => response?,
            Err(_) => {
                tracing::error!(target: "mcp_gate::discovery", method = %self.request.method, problem = "the answer did not arrive in time", "list answer unreadable; refusing");
                return Ok(local(internal_error(self.request)));
            }
        };
        let limit = Some(
            settings
                .inner_read_timeout
                .saturating_sub(started.elapsed()),
        );
        let (mut head, answer) = match read_answer(response, settings.max_list_bytes, limit).await {
            Ok(read) => read,
            Err(problem) => {
                tracing::error!(target: "mcp_gate::discovery", method = %self.request.method, problem, "list answer unreadable; refusing");
                return Ok(local(internal_error(self.request)));
            }
        };
        let filtered = match answer {
            ListAnswer::Json(mut message) => match self.filter(&mut message, &binding).await {
                Ok(()) => Bytes::from(message.to_string()),
                Err(response) => return Ok(local(response)),
            },
            ListAnswer::Sse(mut events) => {
                for event in &mut events {
                    // `read_answer` checked that every event with data is one JSON object.
                    let Ok(mut message) = serde_json::from_str::<serde_json::Value>(&event.data)
                    else {
                        continue;
                    };
                    if let Err(response) = self.filter(&mut message, &binding).await {
                        return Ok(local(response));
                    }
                    event.data = message.to_string();
                }
                write_sse(&events)
            }
            ListAnswer::Other(bytes) => bytes,
        };
        head.headers.remove(header::CONTENT_LENGTH);
        Ok(Response::from_parts(head, GateBody::local(filtered)))
    }

    /// Filters the entries of one JSON-RPC list response in place.
    async fn filter(
        &self,
        message: &mut serde_json::Value,
        binding: &crate::continuation::Binding<'_>,
    ) -> Result<(), Response<Bytes>> {
        let settings = &self.gate.inner.mcp;
        let refuse = |problem: &'static str| {
            tracing::error!(target: "mcp_gate::discovery", method = %self.request.method, problem, "list answer unreadable; refusing");
            internal_error(self.request)
        };
        let result = match result_of(message, &self.request.id) {
            Ok(Some(result)) => result,
            // A message of the server's own, or an error: nothing to filter.
            Ok(None) => return Ok(()),
            Err(problem) => return Err(refuse(problem)),
        };
        let entries = match result.get_mut(self.class.entries) {
            Some(serde_json::Value::Array(entries)) => entries,
            // No entries: nothing is shown.
            None => return Ok(()),
            Some(_) => return Err(refuse("the entries of the result are not an array")),
        };
        let listed = entries.len();
        let mut kept = Vec::with_capacity(listed);
        for entry in entries.drain(..) {
            // A listed tool is known, with its annotations or none (an empty object).
            let annotations = (self.class.entry == EntryKind::Tool).then(|| {
                std::sync::Arc::new(
                    entry
                        .get("annotations")
                        .filter(|a| a.is_object())
                        .cloned()
                        .unwrap_or_else(|| serde_json::json!({})),
                )
            });
            if let (Some(name), Some(annotations)) = (
                entry.get("name").and_then(serde_json::Value::as_str),
                &annotations,
            ) {
                settings
                    .tool_annotations
                    .remember(name, annotations.clone());
            }
            // An entry the layer cannot name is hidden: it cannot be shown to the policy.
            let Some(target) = entry_target(self.class, &entry) else {
                continue;
            };
            let evaluation = Evaluation::new(
                self.principal.clone(),
                self.request.method.clone(),
                target,
                self.protocol.clone(),
                Phase::Discovery,
                None,
                annotations.filter(|_| self.class.entry == EntryKind::Tool),
            );
            match policy::run(&*settings.policy, evaluation, settings.evaluate_timeout).await {
                Ok(Decision::Allow) => kept.push(entry),
                Ok(_) => {}
                Err(failure) => {
                    tracing::error!(target: "mcp_gate::discovery", method = %self.request.method, failure = failure.kind(), error = %failure, "the policy failed on a list entry; refusing the list");
                    return Err(internal_error(self.request));
                }
            }
        }
        let shown = kept.len();
        *entries = kept;
        if let Some(next) = result.get("nextCursor").and_then(serde_json::Value::as_str) {
            let sealed = settings
                .state
                .seal_cursor(binding, next, settings.cursor_ttl);
            result.insert("nextCursor".into(), sealed.into());
        }
        tracing::info!(
            target: "mcp_gate::decision",
            subject = self.principal.subject().unwrap_or(""),
            client_id = self.principal.client_id().unwrap_or(""),
            method = %self.request.method,
            listed,
            shown,
            hidden = listed - shown,
            "discovery filtered"
        );
        Ok(())
    }
}

/// The answer when authorizing failed inside the layer (a policy, a store, a random source).
pub(crate) fn internal_error(request: &McpRequest) -> Response<Bytes> {
    let error = ProtocolError::new(
        StatusCode::OK,
        INTERNAL_ERROR,
        "internal error while authorizing the request",
    )
    .with_id(Some(&request.id));
    json_rpc(StatusCode::OK, error.to_json(), false)
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
