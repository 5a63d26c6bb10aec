//! Spans that cost a request's future nothing when no subscriber wants them.
//!
//! A `tracing::Span` is 40 bytes, and `Instrumented<F>` is `F` and a span. Held in an async
//! function's state across an await, each one grows the future every request boxes, with or
//! without a subscriber; a box past the allocator's small-object cache (1,032 bytes for glibc)
//! is a slower allocation, and every move of the future copies the span's bytes. So a span the
//! gate keeps across an await is kept here: [`KeptSpan`] is one pointer, empty when nothing
//! wants the span, and [`Traced`] is the future itself when nothing wants it, else the future
//! instrumented in a box of its own (the boxing is paid only while spans are recorded).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;
use tracing::Instrument;
use tracing::Span;
use tracing::instrument::Instrumented;

/// Whether a subscriber may want the gate's spans (all at INFO): one load of tracing's
/// global level hint, which is `OFF` while no subscriber is installed. Where it says no, the
/// span macro would make a disabled span, so the empty one is made straight away.
pub(crate) fn wanted() -> bool {
    tracing::level_enabled!(tracing::Level::INFO)
}

/// `span`, or [`Span::none`] when no subscriber wants it. A disabled span still keeps its
/// metadata, and with `tracing`'s `log` feature on (axum's defaults turn it on) each of its
/// entries, exits, records and its drop asks the `log` crate whether to write a line; the
/// empty span asks nothing.
pub(crate) fn or_none(span: Span) -> Span {
    if span.is_disabled() {
        Span::none()
    } else {
        span
    }
}

/// A span held across awaits: nothing for the empty span, else a pointer to it.
#[derive(Default)]
pub(crate) struct KeptSpan(Option<Box<Span>>);

impl KeptSpan {
    /// Keeps `span`, unless it is the empty span (no subscriber wanted it).
    pub(crate) fn new(span: Span) -> Self {
        Self((!span.is_none()).then(|| Box::new(span)))
    }

    /// The span, if one was kept.
    pub(crate) fn get(&self) -> Option<&Span> {
        self.0.as_deref()
    }

    /// The span kept, or the empty span.
    pub(crate) fn span(&self) -> Span {
        self.get().cloned().unwrap_or_else(Span::none)
    }
}

pin_project! {
    /// `F`, polled inside a span when one is recorded.
    #[project = TracedProj]
    pub(crate) enum Traced<F> {
        /// No span: the future as it is.
        Plain { #[pin] future: F },
        /// The future and its span, boxed so that a span costs no room where there is none.
        Spanned { future: Pin<Box<Instrumented<F>>> },
    }
}

/// `future`, polled inside `span` unless `span` is the empty span. Always inlined: the
/// future is then written where it is kept, not copied there through a call.
#[inline(always)]
pub(crate) fn traced<F>(future: F, span: Span) -> Traced<F> {
    if span.is_none() {
        Traced::Plain { future }
    } else {
        Traced::Spanned {
            future: Box::pin(future.instrument(span)),
        }
    }
}

impl<F: Future> Future for Traced<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        match self.project() {
            TracedProj::Plain { future } => future.poll(cx),
            TracedProj::Spanned { future } => future.as_mut().poll(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The size of `future`, and of it traced with the empty span.
    fn sizes<F>(future: F) -> (usize, usize) {
        let alone = std::mem::size_of::<F>();
        let plain = traced(future, Span::none());
        assert!(matches!(plain, Traced::Plain { .. }));
        (alone, std::mem::size_of_val(&plain))
    }

    #[test]
    fn no_span_costs_at_most_a_word_beside_the_future() {
        let (alone, plain) = sizes(async {
            let held = [1u8; 256];
            tokio::task::yield_now().await;
            held[0]
        });
        assert!(alone >= 256, "the future holds its array across the await");
        assert!(plain <= alone + 8, "{plain} bytes traced, {alone} alone");
        assert_eq!(std::mem::size_of::<KeptSpan>(), 8);
        assert!(KeptSpan::new(Span::none()).get().is_none());
    }

    #[tokio::test]
    async fn a_recorded_span_is_current_while_the_future_runs() {
        let subscriber = tracing_subscriber::registry();
        let _default = tracing::subscriber::set_default(subscriber);
        let span = tracing::info_span!("outer");
        let id = span.id();
        assert!(id.is_some(), "the registry records the span");
        let seen = traced(async { Span::current().id() }, span).await;
        assert_eq!(seen, id);
    }
}
