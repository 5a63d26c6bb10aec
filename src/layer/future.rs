//! The response future of [`GateService`](super::GateService).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use http::Response;
use pin_project_lite::pin_project;

use crate::enforce::body::GateBody;
use crate::enforce::reply::Reply;

type Pending<B, E> = Pin<Box<dyn Future<Output = Result<Response<GateBody<B>>, E>> + Send>>;

pin_project! {
    /// Resolves to the inner service's response, or to the layer's refusal.
    pub struct ResponseFuture<F, B, E> {
        #[pin]
        kind: Kind<F, B, E>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<F, B, E> {
        // The token was cached: the inner call is under way.
        Forwarded { #[pin] future: F },
        // The layer replied without awaiting anything (a refusal, the metadata document).
        Replied { reply: Option<Reply> },
        // Verification, classification or evaluation is under way; the inner call follows inside.
        Pending { future: Pending<B, E> },
    }
}

impl<F, B, E> ResponseFuture<F, B, E> {
    pub(crate) fn forwarded(future: F) -> Self {
        Self {
            kind: Kind::Forwarded { future },
        }
    }

    /// A reply the layer wrote itself (a refusal, the metadata document).
    pub(crate) fn replied(reply: Reply) -> Self {
        Self {
            kind: Kind::Replied { reply: Some(reply) },
        }
    }

    pub(crate) fn pending(future: Pending<B, E>) -> Self {
        Self {
            kind: Kind::Pending { future },
        }
    }
}

impl<F, B, E> Future for ResponseFuture<F, B, E>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<GateBody<B>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            KindProj::Forwarded { future } => {
                let response = ready!(future.poll(cx))?;
                Poll::Ready(Ok(response.map(GateBody::inner)))
            }
            KindProj::Replied { reply } => match reply.take() {
                Some(reply) => Poll::Ready(Ok(reply.map(GateBody::reply))),
                None => panic!("ResponseFuture polled after completion"),
            },
            KindProj::Pending { future } => future.as_mut().poll(cx),
        }
    }
}
