//! What happens to an authenticated request, in order: read the body, classify it, work out
//! its era, ask the policy, then forward it or answer with a denial.

use bytes::Bytes;
use http::request::Parts;
use http::{Method, Request, Response, header};
use tower_service::Service;

use super::advertise;
use super::answer;
use super::body::GateBody;
use super::bounds::Inner;
use super::buffer::{close_if_unread, declares_body, read_body};
use super::discovery::ListRequest;
use super::guarded;
use super::interaction::{carries_layer_inputs, without_layer_inputs};
use super::refuse::{auth_refusal, bodyless_refusal, method_not_found, refusal};
use super::sessions;
use super::tasks::{self, TaskRoute};
use super::verbs::Verb;
use crate::auth::Principal;
use crate::auth::token_cache::TokenDigest;
use crate::gate::Gate;
use crate::mcp::era::{SESSION_HEADER, protocol_context};
use crate::mcp::identity::stamp;
use crate::mcp::request::{McpRequest, Message, classify};
use crate::mcp::{Listing as ListingClass, MethodClass, ProtocolContext, ProtocolError, Target};

/// The bound every request and response body error of the layer meets.
pub(crate) use crate::policy::BoxError;

/// Hands the request to the inner service: the principal goes in, the token goes out.
pub(crate) fn admit(parts: &mut Parts, principal: Principal) {
    parts.headers.remove(header::AUTHORIZATION);
    parts.extensions.insert(principal);
}

pub(super) fn local<B>(response: Response<Bytes>) -> Response<GateBody<B>> {
    response.map(GateBody::local)
}

pub(super) fn protocol_error<B>(error: &ProtocolError) -> Response<GateBody<B>> {
    local(refusal(error))
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
pub(crate) async fn after_authentication<S: Inner>(
    gate: Gate,
    mut inner: S,
    mut parts: Box<Parts>,
    body: S::Req,
    identity: Identity,
    verb: Verb,
) -> Result<Response<GateBody<S::Res>>, S::Error> {
    let principal = match identity {
        Identity::Known(principal) => principal,
        Identity::Unverified(unverified) => {
            let (token, key) = *unverified;
            // Boxed: verification (signature, key refresh, introspection) is the rare path once
            // the token cache is warm, and its future is large.
            let verify = Box::pin(gate.inner.authenticator.verify(&token, key));
            match verify.await {
                Ok(principal) => principal,
                Err(error) => return Ok(local(auth_refusal(&gate, &error, &parts))),
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
            forwarded(start(&mut inner, *parts, S::Req::from(bytes)).await)
        }
        Next::Done(response) => Ok(response),
    }
}

/// The header a client resumes an event stream with.
const LAST_EVENT_ID: &str = "last-event-id";

/// GET (the event stream), DELETE (the end of a legacy session) and OPTIONS: they carry no
/// operation, so they go on without a body; one that declares a body is refused, never
/// forwarded unread. A `DELETE` the inner server accepted unbinds the session.
///
/// A GET goes on without `Last-Event-ID`: a resumed stream replays the inner server's answers
/// to earlier requests, and among them are answers the layer read and rewrote (a filtered
/// list, a read marked private, a conceal probe, a side request of its own), which the replay
/// would carry unread. The layer's own answers carry no event ids; a client asks again.
async fn bodyless<S: Inner>(
    gate: &Gate,
    mut inner: S,
    mut parts: Parts,
    session: Option<&sessions::BoundSession>,
) -> Result<Response<GateBody<S::Res>>, S::Error> {
    if declares_body(&parts) {
        return Ok(local(bodyless_refusal(&parts)));
    }
    let ends_session = parts.method == Method::DELETE;
    parts.headers.remove(LAST_EVENT_ID);
    let is_get = parts.method == Method::GET;
    let response = start(&mut inner, parts, S::Req::from(Bytes::new())).await?;
    if let Some(session) = session.filter(|_| ends_session && response.status().is_success()) {
        sessions::unbind(gate, session).await;
    }
    if is_get {
        let bounds = gate.inner.requests.answer_bounds();
        return Ok(Box::pin(answer::watch_get(response, bounds)).await);
    }
    Ok(response.map(GateBody::inner))
}

/// Starts the inner service's call. A plain function, so that the caller's future holds the
/// inner future alone, not the parts it was made from.
pub(super) fn start<S, ReqBody>(inner: &mut S, parts: Parts, body: ReqBody) -> S::Future
where
    S: Service<Request<ReqBody>>,
{
    inner.call(Request::from_parts(parts, body))
}

fn forwarded<B, E>(response: Result<Response<B>, E>) -> Result<Response<GateBody<B>>, E> {
    response.map(|response| response.map(GateBody::inner))
}

/// What [`decide`] leaves to [`after_authentication`].
pub(super) enum Next<B> {
    /// Pass the request on to the inner service, with this body.
    Forward(Box<Parts>, Bytes),
    /// The answer, made by the layer or by a rare path that called the inner service itself.
    Done(Response<GateBody<B>>),
}

/// Reads the body, classifies it, works out its era, and sends it down its route. Routes that
/// are rare or call the inner service more than once (initialize, discovery, lists, tasks)
/// are boxed, so that they do not grow every request's future.
async fn decide<S: Inner>(
    gate: &Gate,
    inner: &mut S,
    parts: Box<Parts>,
    body: S::Req,
    principal: Principal,
    session: Option<Box<sessions::BoundSession>>,
) -> Result<Next<S::Res>, S::Error> {
    let limits = &gate.inner.requests;
    let bytes = match read_body(
        &parts.headers,
        body,
        limits.max_body_bytes,
        limits.body_timeout,
    )
    .await
    {
        Ok(bytes) => bytes,
        Err(error) => {
            // Too large, too slow or broken: the rest of the body stays unread.
            let mut response = refusal(&error);
            close_if_unread(&mut response, &parts);
            return Ok(answer(response));
        }
    };
    let request = match classify(&bytes) {
        Err(error) => return Ok(answer(refusal(&error))),
        Ok(Message::Notification | Message::Response) => return Ok(Next::Forward(parts, bytes)),
        // Boxed: it lives across every await below, and a pointer keeps the future small.
        Ok(Message::Request(request)) => Box::new(request),
    };
    let known_session = session.as_deref().map(|s| &s.record);
    let protocol = match protocol_context(&request, &parts.headers, known_session) {
        Ok(protocol) => protocol,
        Err(error) => return Ok(answer(refusal(&error))),
    };
    let route = Route::of(&request, limits.evaluate_unknown_methods);
    let call = Call {
        gate,
        principal,
        parts,
        bytes,
        request,
        protocol,
    };
    match route {
        Route::Initialize => Box::pin(call.initialize(inner)).await,
        Route::Discover => Box::pin(call.discover(inner)).await,
        Route::Lifecycle => Ok(call.forward()),
        Route::Listing(class) => Box::pin(call.listing(inner, class)).await,
        Route::Tasks => Box::pin(call.tasks(inner)).await,
        Route::Guarded => guarded::judge(call, inner).await,
        Route::JudgedUnknown => guarded::judge(call.into_other(), inner).await,
        // Answered as a server answers a method it does not have: never forwarded, and never
        // shown to a policy that might allow by default.
        Route::Unknown => Ok(answer(method_not_found(&call.request, &call.protocol))),
    }
}

/// Where a classified request goes: one route per class of the
/// [method table](crate::mcp::METHODS), lifecycle split by what the layer adds to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Route {
    /// `initialize`: forwarded; the session it opens is bound to the caller.
    Initialize,
    /// `server/discover`: forwarded; the layer's extensions are added to the answer.
    Discover,
    /// Every other lifecycle message (`ping`, ...): forwarded as it is.
    Lifecycle,
    /// A listing: its entries filtered per caller.
    Listing(ListingClass),
    /// `tasks/*`: the layer's own tasks answered from its store, the others guarded.
    Tasks,
    /// Judged by `evaluate` before anything runs.
    Guarded,
    /// A method in no row, judged as [`Target::Other`] because the builder asked for it.
    JudgedUnknown,
    /// A method in no row: `-32601`.
    Unknown,
}

impl Route {
    fn of(request: &McpRequest, judge_unknown: bool) -> Self {
        match request.class {
            MethodClass::Lifecycle if request.method == "initialize" => Self::Initialize,
            MethodClass::Lifecycle if request.method == "server/discover" => Self::Discover,
            MethodClass::Lifecycle => Self::Lifecycle,
            MethodClass::Listing(class) => Self::Listing(class),
            MethodClass::Tasks => Self::Tasks,
            MethodClass::Guarded => Self::Guarded,
            MethodClass::Unknown if judge_unknown => Self::JudgedUnknown,
            MethodClass::Unknown => Self::Unknown,
        }
    }
}

/// A classified request on its way through the layer: what every route is given.
pub(super) struct Call<'a> {
    pub gate: &'a Gate,
    pub principal: Principal,
    pub parts: Box<Parts>,
    pub bytes: Bytes,
    pub request: Box<McpRequest>,
    pub protocol: ProtocolContext,
}

impl Call<'_> {
    /// On to the inner service, with the body as sent less the layer's own inputs.
    pub fn forward<B>(mut self) -> Next<B> {
        let body = scrubbed(&mut self.parts, &self.request, self.bytes);
        Next::Forward(self.parts, body)
    }

    /// A method in no row, to be judged: `evaluate` sees it as [`Target::Other`].
    fn into_other(mut self) -> Self {
        let params = std::sync::Arc::new(self.request.params().into_owned());
        self.request.target = Target::Other {
            method: self.request.method.to_string(),
            params,
        };
        self
    }

    async fn initialize<S: Inner>(mut self, inner: &mut S) -> Result<Next<S::Res>, S::Error> {
        let body = scrubbed(&mut self.parts, &self.request, self.bytes);
        let (gate, principal, request) = (self.gate, &self.principal, &self.request);
        let response = sessions::initialize(gate, inner, *self.parts, body, principal, request);
        Ok(Next::Done(response.await?))
    }

    async fn discover<S: Inner>(mut self, inner: &mut S) -> Result<Next<S::Res>, S::Error> {
        let body = scrubbed(&mut self.parts, &self.request, self.bytes);
        let response = advertise::discover(self.gate, inner, *self.parts, body, &self.request);
        Ok(Next::Done(response.await?))
    }

    async fn listing<S: Inner>(
        mut self,
        inner: &mut S,
        class: ListingClass,
    ) -> Result<Next<S::Res>, S::Error> {
        let body = scrubbed(&mut self.parts, &self.request, self.bytes);
        let listing = ListRequest {
            gate: self.gate,
            principal: &self.principal,
            request: &self.request,
            protocol: &self.protocol,
            class,
        };
        Ok(Next::Done(listing.run(inner, *self.parts, body).await?))
    }

    /// The layer's own tasks are answered from its store (and an approved one run once); the
    /// inner server's go through `evaluate` like any guarded method.
    async fn tasks<S: Inner>(self, inner: &mut S) -> Result<Next<S::Res>, S::Error> {
        let (gate, principal) = (self.gate, &self.principal);
        match tasks::route(gate, principal, &self.request, &self.protocol).await {
            TaskRoute::NotOurs => guarded::judge(self, inner).await,
            TaskRoute::Answer(response) => {
                let response = guarded::named(&self, inner, response).await;
                Ok(answer(response))
            }
            TaskRoute::Run(record) => {
                let identity =
                    advertise::server_identity(gate, inner, &self.parts, &self.request).await;
                // The readied service goes to the task; a clone stays behind, unused.
                let ready = std::mem::replace(inner, inner.clone());
                let run = tasks::run(gate, ready, *self.parts, principal, &self.request, *record);
                let response = run.await;
                Ok(answer(match identity {
                    Some(info) => stamp(response, &info),
                    None => response,
                }))
            }
        }
    }
}

/// An answer the layer wrote.
pub(super) fn answer<B>(response: Response<Bytes>) -> Next<B> {
    Next::Done(local(response))
}

/// The body to forward for a request the layer did not answer with a round trip of its own:
/// as sent, unless it carries input responses under the layer's keys, which never reach the
/// inner service.
pub(super) fn scrubbed(parts: &mut Parts, request: &McpRequest, bytes: Bytes) -> Bytes {
    if !carries_layer_inputs(request) {
        return bytes;
    }
    parts.headers.remove(header::CONTENT_LENGTH);
    without_layer_inputs(request)
}
