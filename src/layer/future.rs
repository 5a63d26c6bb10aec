//! The response future of [`GateService`](super::GateService).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use http::Response;
use pin_project_lite::pin_project;
use tracing::Span;

use crate::enforce::body::GateBody;
use crate::enforce::reply::Reply;
use crate::measure::traced::{KeptSpan, Traced, traced};

type Pending<B, E> = Pin<Box<dyn Future<Output = Result<Response<GateBody<B>>, E>> + Send>>;

pin_project! {
    /// Resolves to the inner service's response, or to the layer's refusal.
    ///
    /// Polled inside the request's `mcp_gate::http` span, which is given the response's
    /// status when it is ready.
    pub struct ResponseFuture<F, B, E> {
        #[pin]
        kind: Kind<F, B, E>,
        span: KeptSpan,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<F, B, E> {
        // The token was cached: the inner call is under way, in its own span.
        Forwarded { #[pin] future: Traced<F> },
        // The layer replied without awaiting anything (a refusal, the metadata document).
        Replied { reply: Option<Reply> },
        // Verification, classification or evaluation is under way; the inner call follows inside.
        Pending { future: Pending<B, E> },
    }
}

impl<F, B, E> ResponseFuture<F, B, E> {
    /// The inner call under way (`future`), made inside the `inner` span.
    pub(crate) fn forwarded((future, inner): (F, Span)) -> Self {
        Self::of(Kind::Forwarded {
            future: traced(future, inner),
        })
    }

    /// A reply the layer wrote itself (a refusal, the metadata document).
    pub(crate) fn replied(reply: Reply) -> Self {
        Self::of(Kind::Replied { reply: Some(reply) })
    }

    /// Verification, classification or evaluation under way.
    pub(crate) fn pending(future: Pending<B, E>) -> Self {
        Self::of(Kind::Pending { future })
    }

    fn of(kind: Kind<F, B, E>) -> Self {
        Self {
            kind,
            span: KeptSpan::default(),
        }
    }

    /// The same future, polled inside the request's `span`.
    pub(crate) fn in_span(mut self, span: Span) -> Self {
        self.span = KeptSpan::new(span);
        self
    }
}

impl<F, B, E> Future for ResponseFuture<F, B, E>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<GateBody<B>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        // The empty span (no subscriber) is neither kept nor entered: nothing would see it.
        let _entered = this.span.get().map(Span::enter);
        let response = match this.kind.project() {
            KindProj::Forwarded { future } => {
                let response = ready!(future.poll(cx))?;
                response.map(GateBody::inner)
            }
            KindProj::Replied { reply } => match reply.take() {
                Some(reply) => reply.map(GateBody::reply),
                None => panic!("ResponseFuture polled after completion"),
            },
            KindProj::Pending { future } => ready!(future.as_mut().poll(cx))?,
        };
        if let Some(span) = this.span.get() {
            crate::telemetry::trace::responded(span, response.status());
        }
        Poll::Ready(Ok(response))
    }
}
