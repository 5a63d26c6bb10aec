//! The bounds the layer puts on the service it wraps and on the bodies it carries, named once
//! so that each step of the pipeline says `S: Inner` (and names `S::Req`, `S::Res` and
//! `S::Error`) instead of repeating them. [`GateService`](super::GateService)'s public
//! `Service` impl spells them out in full, and hands each request's clone of the service to
//! the pipeline as an [`InnerService`].

use std::marker::PhantomData;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use tower_service::Service;

use crate::measure::traced::{Traced, traced};
pub(crate) use crate::policy::BoxError;
use crate::telemetry::trace;

/// The wrapped service, with the bodies it is called with and answers with: cloneable,
/// sendable, with a sendable future.
pub(crate) trait Inner:
    Bodies
    + Service<Request<Self::Req>, Response = Response<Self::Res>, Future: Send + 'static>
    + Clone
    + Send
    + 'static
{
}

impl<S> Inner for S where
    S: Bodies
        + Service<Request<S::Req>, Response = Response<S::Res>, Future: Send + 'static>
        + Clone
        + Send
        + 'static
{
}

/// The bodies a service is called with and answers with. A trait apart from [`Inner`], whose
/// `Service` bound names them: a trait naming its own bodies in its own `Service` bound cannot
/// be implemented (the compiler would need the bound to find the bodies, and the bodies to
/// prove the bound).
pub(crate) trait Bodies {
    /// The request body the service is called with.
    type Req: RequestBody;
    /// The response body it answers with.
    type Res: ResponseBody;
}

/// A service the layer wraps, with the request and response bodies of the `Service` impl the
/// layer calls it through: a service may be called with more than one body type, so the
/// bodies are named beside it. Calls pass straight through, each in its own `mcp_gate::inner`
/// span (which, with feature `opentelemetry`, the request's trace context headers name).
pub(crate) struct InnerService<S, ReqBody, ResBody> {
    service: S,
    bodies: PhantomData<fn(ReqBody) -> ResBody>,
}

impl<S, ReqBody, ResBody> InnerService<S, ReqBody, ResBody> {
    /// `service`, called with `ReqBody` and answering with `ResBody`.
    pub(crate) fn new(service: S) -> Self {
        Self {
            service,
            bodies: PhantomData,
        }
    }
}

impl<S: Clone, ReqBody, ResBody> Clone for InnerService<S, ReqBody, ResBody> {
    fn clone(&self) -> Self {
        Self::new(self.service.clone())
    }
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for InnerService<S, ReqBody, ResBody>
where
    S: Service<Request<ReqBody>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Traced<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.service.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let (future, span) = trace::call_inner(&mut self.service, request);
        traced(future, span)
    }
}

impl<S, ReqBody, ResBody> Bodies for InnerService<S, ReqBody, ResBody>
where
    ReqBody: RequestBody,
    ResBody: ResponseBody,
{
    type Req = ReqBody;
    type Res = ResBody;
}

/// A request body: one the layer can read, and make from the bytes it read.
pub(crate) trait RequestBody:
    http_body::Body<Error: Into<BoxError>> + From<Bytes> + Send + 'static
{
}

impl<B> RequestBody for B where
    B: http_body::Body<Error: Into<BoxError>> + From<Bytes> + Send + 'static
{
}

/// A response body: bytes the layer can pass on, or read whole.
pub(crate) trait ResponseBody:
    http_body::Body<Data = Bytes, Error: Into<BoxError>> + Send + 'static
{
}

impl<B> ResponseBody for B where
    B: http_body::Body<Data = Bytes, Error: Into<BoxError>> + Send + 'static
{
}
