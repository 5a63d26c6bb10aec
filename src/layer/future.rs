//! The response future of [`GateService`](super::GateService).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http::Response;
use pin_project_lite::pin_project;

use super::body::GateBody;

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
        // The request was refused without awaiting anything.
        Refused { response: Option<Response<Bytes>> },
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

    /// An answer the layer wrote itself (a refusal, the metadata document).
    pub(crate) fn answered(response: Response<Bytes>) -> Self {
        Self {
            kind: Kind::Refused {
                response: Some(response),
            },
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
            KindProj::Refused { response } => match response.take() {
                Some(response) => Poll::Ready(Ok(response.map(GateBody::local))),
                None => panic!("ResponseFuture polled after completion"),
            },
            KindProj::Pending { future } => future.as_mut().poll(cx),
        }
    }
}
