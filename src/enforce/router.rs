//! Where a read request goes: the body read and classified, its era worked out, then one
//! [`Route`] per class of the method table, each a route of its own under [`super::routes`].

use http::request::Parts;
use tracing::Span;

use super::call::{Call, Routed, scrubbed};
use super::reply::{method_not_found, refusal};
use super::routes::discover;
use super::routes::guarded;
use super::routes::initialize as sessions;
use super::routes::listing::ListRequest;
use super::routes::tasks::{self, TaskRoute};
use crate::auth::Principal;
use crate::enforce::bounds::Inner;
use crate::enforce::buffer::{close_if_unread, read_body};
use crate::judge::RequestId;
use crate::mcp::era::protocol_context;
use crate::mcp::identity::stamp;
use crate::mcp::request::{McpRequest, Message, classify};
use crate::mcp::{Listing as ListingClass, MethodClass};
use crate::measure::traced::{Traced, traced};
use crate::settings::Settings;
use crate::telemetry::trace;

/// Reads the body, classifies it, works out its era, and sends it down its route. Routes that
/// are rare or call the inner service more than once (initialize, discovery, lists, tasks)
/// are boxed, so that they do not grow every request's future.
///
/// A JSON-RPC request gets its `mcp_gate::request` span here, once it is read (its `_meta`
/// may name the trace it continues): the route runs inside it, and a request it forwards
/// carries it to the caller in its extensions ([`trace::RequestSpan`], taken out before the
/// inner service sees them).
#[allow(
    clippy::manual_async_fn,
    reason = "an async fn stores its arguments twice in its future"
)]
pub(crate) fn route<S: Inner>(
    settings: &Settings,
    inner: &mut S,
    parts: Box<Parts>,
    body: S::Req,
    principal: Principal,
    session: Option<Box<sessions::BoundSession>>,
) -> impl Future<Output = Result<Routed<S::Res>, S::Error>> {
    async move {
        let limits = &settings.body;
        let bytes = match read_body(&parts.headers, body, limits.max_bytes, limits.timeout).await {
            Ok(bytes) => bytes,
            Err(error) => {
                // Too large, too slow or broken: the rest of the body stays unread.
                let mut response = refusal(&error);
                close_if_unread(&mut response, &parts);
                return Ok(Routed::reply(response));
            }
        };
        let route = match read(settings, inner, parts, bytes, principal, session) {
            Read::Routed(routed) => return Ok(routed),
            Read::Route(route) => route,
        };
        route.await
    }
}

/// What a read body comes to: answered or passed on at once, or a route to run.
enum Read<R, F> {
    /// Refused, or a notification or response passed on as it is.
    Routed(R),
    /// A JSON-RPC request's route, inside its span.
    Route(Traced<F>),
}

/// Classifies the read body and, for a request, makes its span and its route's future.
/// Synchronous, so that nothing it borrows (the bytes, the span) takes room in the request's
/// future beside the route.
#[allow(
    clippy::type_complexity,
    reason = "the route's future is unnameable; the type says it once"
)]
fn read<'a, S: Inner>(
    settings: &'a Settings,
    inner: &'a mut S,
    mut parts: Box<Parts>,
    bytes: bytes::Bytes,
    principal: Principal,
    session: Option<Box<sessions::BoundSession>>,
) -> Read<Routed<S::Res>, impl Future<Output = Result<Routed<S::Res>, S::Error>> + 'a> {
    let request = match classify(&bytes) {
        Err(error) => return Read::Routed(Routed::reply(refusal(&error))),
        Ok(Message::Notification | Message::Response) => {
            return Read::Routed(Routed::Forward(parts, bytes, None));
        }
        Ok(Message::Request(request)) => request,
    };
    let listed = |tool: &str| settings.policy.tool_annotations.contains(tool);
    let span = trace::request_span(&request, &parts.headers, listed);
    trace::RequestSpan::carry(&mut parts.extensions, &span);
    let route = routed(settings, inner, parts, bytes, request, principal, session);
    Read::Route(traced(route, span))
}

/// The route's work once the request is read and its span made. An `async move` block, so
/// that its arguments are stored once in the request's future.
#[allow(
    clippy::manual_async_fn,
    reason = "an async fn stores its arguments twice in its future"
)]
fn routed<'a, S: Inner>(
    settings: &'a Settings,
    inner: &'a mut S,
    parts: Box<Parts>,
    bytes: bytes::Bytes,
    request: Box<McpRequest>,
    principal: Principal,
    session: Option<Box<sessions::BoundSession>>,
) -> impl Future<Output = Result<Routed<S::Res>, S::Error>> + 'a {
    async move {
        let known_session = session.as_deref().map(|s| &s.record);
        let protocol = match protocol_context(&request, &parts.headers, known_session) {
            Ok(protocol) => protocol,
            Err(error) => return Ok(Routed::reply(refusal(&error))),
        };
        trace::protocol(&Span::current(), &protocol);
        let route = Route::of(&request, settings.policy.evaluate_unknown_methods);
        let call = Call {
            settings,
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
            Route::Guarded => guarded::guard(call, inner).await,
            Route::JudgedUnknown => guarded::guard(call.into_other(), inner).await,
            // Answered as a server answers a method it does not have: never forwarded, and never
            // shown to a policy that might allow by default.
            Route::Unknown => Ok(Routed::reply(method_not_found(
                &call.request,
                &call.protocol,
            ))),
        }
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

impl Call<'_> {
    async fn initialize<S: Inner>(mut self, inner: &mut S) -> Result<Routed<S::Res>, S::Error> {
        let body = scrubbed(&mut self.parts, &self.request, self.bytes);
        let (settings, principal, request) = (self.settings, &self.principal, &self.request);
        let response = sessions::initialize(settings, inner, *self.parts, body, principal, request);
        Ok(Routed::Respond(response.await?))
    }

    async fn discover<S: Inner>(mut self, inner: &mut S) -> Result<Routed<S::Res>, S::Error> {
        let body = scrubbed(&mut self.parts, &self.request, self.bytes);
        let response = discover::discover(self.settings, inner, *self.parts, body, &self.request);
        Ok(Routed::Respond(response.await?))
    }

    async fn listing<S: Inner>(
        mut self,
        inner: &mut S,
        class: ListingClass,
    ) -> Result<Routed<S::Res>, S::Error> {
        let body = scrubbed(&mut self.parts, &self.request, self.bytes);
        let listing = ListRequest {
            settings: self.settings,
            principal: &self.principal,
            request: &self.request,
            protocol: &self.protocol,
            class,
            id: RequestId::next(),
            seen: crate::policy::snapshot(
                &self.parts.extensions,
                &self.settings.policy.extension_copies,
            ),
        };
        Ok(Routed::Respond(
            listing.run(inner, *self.parts, body).await?,
        ))
    }

    /// The layer's own tasks are answered from its store (and an approved one run once); the
    /// inner server's go through `evaluate` like any guarded method.
    async fn tasks<S: Inner>(self, inner: &mut S) -> Result<Routed<S::Res>, S::Error> {
        let (settings, principal) = (self.settings, &self.principal);
        match tasks::route(settings, principal, &self.request, &self.protocol).await {
            TaskRoute::NotOurs => guarded::guard(self, inner).await,
            TaskRoute::Reply(response) => {
                let response = guarded::named(&self, inner, response).await;
                Ok(Routed::reply(response))
            }
            TaskRoute::Run(record) => {
                let identity =
                    discover::server_identity(settings, inner, &self.parts, &self.request).await;
                // The readied service goes to the task; a clone stays behind, unused.
                let ready = std::mem::replace(inner, inner.clone());
                let run = tasks::run(
                    settings,
                    ready,
                    *self.parts,
                    principal,
                    &self.request,
                    *record,
                    RequestId::next(),
                );
                let response = run.await;
                Ok(Routed::reply(match identity {
                    Some(info) => stamp(response, &info),
                    None => response,
                }))
            }
        }
    }
}
