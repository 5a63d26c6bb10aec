//! The response body of the layer: the inner service's body, the layer's own, or the inner
//! service's event stream watched and written again by the layer.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

use crate::enforce::answer::{ListenStream, Watch};
use crate::limit::InFlight;

pin_project! {
    /// Either the inner service's response body, streamed through untouched, or a complete
    /// body written by the layer.
    pub struct GateBody<B> {
        #[pin]
        kind: Kind<B>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<B> {
        Inner { #[pin] body: B },
        // The inner body of a call counted in flight: its place is given back when the body
        // ends, fails, or is dropped.
        Held { #[pin] body: B, place: Option<InFlight> },
        Reply { data: Option<Bytes> },
        Watched { #[pin] body: B, watch: Box<Watch>, ended: bool },
        // A task listen's stream, written by the layer (enforce/answer/listen.rs).
        Listen { stream: Box<ListenStream> },
    }
}

impl<B> GateBody<B> {
    pub(crate) fn inner(body: B) -> Self {
        Self {
            kind: Kind::Inner { body },
        }
    }

    /// The inner service's `body`, passed on as it streams, holding the call's `place` in
    /// flight until it ends (or is dropped).
    pub(crate) fn holding(body: B, place: InFlight) -> Self {
        Self {
            kind: Kind::Held {
                body,
                place: Some(place),
            },
        }
    }

    /// The inner event stream `body`, read and written again by `watch`, and ended at the
    /// first thing the stream may not carry.
    pub(crate) fn watched(body: B, watch: Watch) -> Self {
        Self {
            kind: Kind::Watched {
                body,
                watch: Box::new(watch),
                ended: false,
            },
        }
    }

    /// A task listen's stream, written by the layer as its tasks move.
    pub(crate) fn listen(stream: ListenStream) -> Self {
        Self {
            kind: Kind::Listen {
                stream: Box::new(stream),
            },
        }
    }

    pub(crate) fn reply(data: Bytes) -> Self {
        Self {
            kind: Kind::Reply {
                data: (!data.is_empty()).then_some(data),
            },
        }
    }
}

/// An empty body written by the layer. Layers that build answers of their own (tower-http's
/// CORS and timeout) need one.
impl<B> Default for GateBody<B> {
    fn default() -> Self {
        Self::reply(Bytes::new())
    }
}

impl<B> Body for GateBody<B>
where
    B: Body<Data = Bytes>,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        match self.project().kind.project() {
            KindProj::Inner { body } => body.poll_frame(cx),
            KindProj::Held { body, place } => {
                let frame = std::task::ready!(body.poll_frame(cx));
                if !matches!(frame, Some(Ok(_))) {
                    // The end, or an error (nothing follows it): the call is done.
                    drop(place.take());
                }
                Poll::Ready(frame)
            }
            KindProj::Reply { data } => Poll::Ready(data.take().map(|d| Ok(Frame::data(d)))),
            KindProj::Listen { stream } => stream
                .poll_frame(cx)
                .map(|frame| frame.map(|data| Ok(Frame::data(data)))),
            KindProj::Watched {
                mut body,
                watch,
                ended: stopped,
            } => loop {
                if *stopped {
                    return Poll::Ready(None);
                }
                let Some(frame) = std::task::ready!(body.as_mut().poll_frame(cx)) else {
                    return Poll::Ready(None);
                };
                // Trailers are not part of the stream.
                let Ok(data) = frame?.into_data() else {
                    continue;
                };
                let (written, ended) = watch.feed(&data);
                if let Some(problem) = ended {
                    tracing::error!(target: "mcp_gate::answer", answer = "GET stream", problem = problem.code(), "the GET stream ended by the layer: {}", problem.describe());
                    *stopped = true;
                }
                if !written.is_empty() {
                    return Poll::Ready(Some(Ok(Frame::data(written))));
                }
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Inner { body } | Kind::Held { body, .. } => body.is_end_stream(),
            Kind::Reply { data } => data.is_none(),
            Kind::Watched { body, ended, .. } => *ended || body.is_end_stream(),
            Kind::Listen { .. } => false,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Inner { body } | Kind::Held { body, .. } => body.size_hint(),
            Kind::Reply { data } => {
                SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64))
            }
            Kind::Watched { .. } | Kind::Listen { .. } => SizeHint::new(),
        }
    }
}
