//! [`GateService`]: the middleware itself.

use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Method, Request, Response};
use tower_service::Service;

use super::body::GateBody;
use super::future::ResponseFuture;
use super::pipeline::{BoxError, Identity, admit, after_authentication};
use crate::auth::authenticator::FirstStep;
use crate::gate::Gate;

/// Authenticates and authorizes each request, then forwards it to `S` or answers it.
#[derive(Clone, Debug)]
pub struct GateService<S> {
    inner: S,
    gate: Gate,
}

impl<S> GateService<S> {
    /// Wraps `inner` with `gate`.
    pub fn new(inner: S, gate: Gate) -> Self {
        Self { inner, gate }
    }

    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// Unwraps the inner service.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for GateService<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    ReqBody: http_body::Body + From<Bytes> + Send + 'static,
    ReqBody::Data: Send,
    ReqBody::Error: Into<BoxError>,
    ResBody: http_body::Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    type Response = Response<GateBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, ResBody, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let (mut parts, body) = request.into_parts();
        let step = self
            .gate
            .inner
            .authenticator
            .first_step(&parts.headers, &parts.uri);
        let identity = match step {
            FirstStep::Decided(Err(error)) => {
                return ResponseFuture::refused(self.gate.refuse(&error, &parts));
            }
            // A cached token on a request without a body to classify: no await at all.
            FirstStep::Decided(Ok(principal)) if parts.method != Method::POST => {
                admit(&mut parts, principal);
                return ResponseFuture::forwarded(
                    self.inner.call(Request::from_parts(parts, body)),
                );
            }
            FirstStep::Decided(Ok(principal)) => Identity::Known(principal),
            FirstStep::Verify { token, key } => {
                Identity::Unverified(Box::new((token.to_owned(), key)))
            }
        };
        // Boxed: the parts travel through two futures, and a pointer is cheaper to carry.
        let parts = Box::new(parts);
        let gate = self.gate.clone();
        // The ready service goes into the future; a fresh clone takes its place.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let future = after_authentication(gate, inner, parts, body, identity);
        ResponseFuture::pending(Box::pin(future))
    }
}
