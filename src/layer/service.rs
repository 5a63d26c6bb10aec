//! [`GateService`]: the middleware itself.

use std::task::{Context, Poll};

use http::{Request, Response, header};
use tower_service::Service;

use super::body::GateBody;
use super::future::ResponseFuture;
use crate::auth::Principal;
use crate::auth::authenticator::FirstStep;
use crate::gate::Gate;

/// Authenticates each request, then forwards it to `S` or refuses it.
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

/// Hands the request to the inner service: the principal goes in, the token goes out.
fn admit(parts: &mut http::request::Parts, principal: Principal) {
    parts.headers.remove(header::AUTHORIZATION);
    parts.extensions.insert(principal);
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for GateService<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    ReqBody: Send + 'static,
    ResBody: Send + 'static,
{
    type Response = Response<GateBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, ResBody, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let (mut parts, body) = request.into_parts();
        let step = self.gate.inner.authenticator.first_step(&parts.headers, &parts.uri);
        match step {
            FirstStep::Decided(Ok(principal)) => {
                admit(&mut parts, principal);
                ResponseFuture::forwarded(self.inner.call(Request::from_parts(parts, body)))
            }
            FirstStep::Decided(Err(error)) => ResponseFuture::refused(self.gate.refuse(&error, &parts.method)),
            FirstStep::Verify { token, key } => {
                let token = token.to_owned();
                let gate = self.gate.clone();
                // The ready service goes into the future; a fresh clone takes its place.
                let clone = self.inner.clone();
                let mut inner = std::mem::replace(&mut self.inner, clone);
                ResponseFuture::verifying(Box::pin(async move {
                    match gate.inner.authenticator.verify(&token, key).await {
                        Ok(principal) => {
                            admit(&mut parts, principal);
                            let response = inner.call(Request::from_parts(parts, body)).await?;
                            Ok(response.map(GateBody::inner))
                        }
                        Err(error) => Ok(gate.refuse(&error, &parts.method).map(GateBody::local)),
                    }
                }))
            }
        }
    }
}
