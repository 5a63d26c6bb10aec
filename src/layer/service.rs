//! [`GateService`]: the middleware itself.

use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response, header};
use tower_service::Service;

use super::future::ResponseFuture;
use super::metadata::metadata_answer;
use super::verbs::{Admission, admission, not_allowed};
use crate::auth::authenticator::FirstStep;
use crate::enforce::body::GateBody;
use crate::enforce::bounds::{BoxError, InnerService};
use crate::enforce::buffer::{close_if_unread, declares_body};
use crate::enforce::reply::{auth_refusal, bodyless_refusal};
use crate::enforce::{Carries, Identity, Proving, admit, after_authentication};
use crate::mcp::era::SESSION_HEADER;
use crate::settings::Settings;
use crate::telemetry::trace;

/// Authenticates and authorizes each request, then forwards it to `S` or answers it.
///
/// Each request is sent to its own clone of `S`, made and readied in `poll_ready` and moved
/// into the request's future by `call` (the layer reads the body and asks the policy before
/// the inner service sees the request, so it needs a service it owns for as long as that
/// takes). Cloning a `GateService` does not clone `S`: the service the layer was given is
/// shared. A router that clones its routes for every request (axum does) then pays for one
/// copy of `S` per request, not one per clone of the route.
///
/// Because the inner service is shared, `GateService<S>` is `Send` when `S` is `Send` and
/// `Sync`. Every service axum routes is both; a `tower::util::BoxCloneService` is not `Sync`,
/// and `tower::util::BoxCloneSyncService` is the one to box an inner service with.
pub struct GateService<S> {
    /// The inner service as it was given: never called, only cloned.
    shared: Arc<S>,
    /// The clone `poll_ready` readied, for the next `call`.
    ready: Option<S>,
    settings: Arc<Settings>,
}

impl<S> Clone for GateService<S> {
    /// Another handle on the same inner service; readiness is not cloned.
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
            ready: None,
            settings: self.settings.clone(),
        }
    }
}

impl<S: fmt::Debug> fmt::Debug for GateService<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GateService")
            .field("inner", &self.shared)
            .field("resource", &self.settings.resource.uri)
            .finish()
    }
}

impl<S> GateService<S> {
    /// Wraps `inner` with a gate's settings.
    pub(crate) fn with_settings(inner: S, settings: Arc<Settings>) -> Self {
        Self {
            shared: Arc::new(inner),
            ready: None,
            settings,
        }
    }

    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.shared
    }
}

impl<S: Clone> GateService<S> {
    /// The inner service, mutably. Other clones of this `GateService` keep the service as it
    /// was (it is copied if they share it), and a clone readied for the next call is dropped.
    pub fn get_mut(&mut self) -> &mut S {
        self.ready = None;
        Arc::make_mut(&mut self.shared)
    }

    /// Unwraps the inner service (a copy of it, if other clones still share it).
    pub fn into_inner(self) -> S {
        Arc::unwrap_or_clone(self.shared)
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
        let shared = &self.shared;
        self.ready
            .get_or_insert_with(|| S::clone(shared))
            .poll_ready(cx)
    }

    /// The request's `mcp_gate::http` span is made here, and everything the layer does for
    /// it, now and in the returned future, runs inside it.
    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let span = trace::http_span(request.method(), request.headers());
        let future = if span.is_none() {
            self.begin(request, &span)
        } else {
            span.in_scope(|| self.begin(request, &span))
        };
        future.in_span(span)
    }
}

impl<S> GateService<S> {
    /// [`Service::call`]'s work, inside the request's `span`.
    fn begin<ReqBody, ResBody>(
        &mut self,
        request: Request<ReqBody>,
        span: &tracing::Span,
    ) -> ResponseFuture<S::Future, ResBody, S::Error>
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
        let (mut parts, body) = request.into_parts();
        // The metadata document, whatever the composition: open to every origin, no token.
        if let Some(mut document) = metadata_answer(&self.settings, &parts) {
            close_if_unread(&mut document, &parts);
            return ResponseFuture::replied(document);
        }
        // Before anything else: a browser page from an origin that may not call this endpoint.
        if let Some(mut refused) = self.settings.origins.refusal(&parts.headers) {
            close_if_unread(&mut refused, &parts);
            return ResponseFuture::replied(refused);
        }
        let carries = match admission(&parts.method, &parts.headers) {
            Admission::Authenticate(carries) => carries,
            Admission::NotAllowed => {
                let mut response = not_allowed(&parts.method);
                close_if_unread(&mut response, &parts);
                return ResponseFuture::replied(response);
            }
            Admission::Preflight => {
                if declares_body(&parts) {
                    return ResponseFuture::replied(bodyless_refusal(&parts));
                }
                parts.headers.remove(header::AUTHORIZATION);
                let mut inner = self.ready.take().unwrap_or_else(|| S::clone(&self.shared));
                let request = Request::from_parts(parts, ReqBody::from(Bytes::new()));
                return ResponseFuture::forwarded(trace::call_inner(&mut inner, request));
            }
        };
        let step = self
            .settings
            .authenticator
            .first_step(&parts.headers, &parts.uri);
        let identity = match step {
            FirstStep::Decided(Err(error)) => {
                // The readied clone stays for the next call.
                trace::refused(span, error.reason());
                return ResponseFuture::replied(auth_refusal(&self.settings, &error, &parts));
            }
            FirstStep::Decided(Ok(principal)) => {
                trace::verified(&trace::verify_span(span, "hit"), None);
                Identity::Known(principal)
            }
            FirstStep::Verify { token, key } => {
                Identity::Unverified(Box::new((token.to_owned(), key)))
            }
            FirstStep::Prove { token, key, cached } => Identity::Proving(Box::new(Proving {
                token: token.to_owned(),
                key,
                cached,
            })),
        };
        // The readied clone; a caller that skipped `poll_ready` gets one that was not readied,
        // and the inner service's own answer to that.
        let mut inner = self.ready.take().unwrap_or_else(|| S::clone(&self.shared));
        let identity = match identity {
            // A cached token on a request with no body and no session to check: no await. Not
            // a GET: its stream is watched, and its `Last-Event-ID` dropped (`bodyless`).
            Identity::Known(principal)
                if carries == Carries::Nothing
                    && parts.method != http::Method::GET
                    && !parts.headers.contains_key(SESSION_HEADER)
                    && !declares_body(&parts) =>
            {
                admit(&mut parts, principal);
                let request = Request::from_parts(parts, ReqBody::from(Bytes::new()));
                return ResponseFuture::forwarded(trace::call_inner(&mut inner, request));
            }
            identity => identity,
        };
        // Boxed: the parts travel through two futures, and a pointer is cheaper to carry.
        let parts = Box::new(parts);
        let settings = self.settings.clone();
        let inner = InnerService::new(inner);
        let future = after_authentication(settings, inner, parts, body, identity, carries);
        ResponseFuture::pending(Box::pin(future))
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use http_body_util::Full;

    use super::*;
    use crate::{Gate, Issuer, Principal, StaticKeys};

    /// The rule `docs/ARCHITECTURE.md` states: a request's future, boxed once per request,
    /// stays under 1,024 bytes, in debug and optimised builds alike, so that glibc's
    /// per-thread cache (allocations of up to 1,032 bytes) serves its box. Growth past it
    /// fails here first; move the new part into a box of its own where it is rare, or shrink
    /// it: an `async move` block rather than an `async fn` (which stores its arguments
    /// twice), a matched value taken apart before the next await, a span held as a
    /// `KeptSpan` and a future in a span as a `Traced` (`measure::traced`).
    const MAX_REQUEST_FUTURE_BYTES: usize = 1024;

    const JWKS: &str = r#"{"keys":[{"kty":"EC","crv":"P-256","kid":"k1",
        "x":"MKBCTNIcKUSDii11ySs3526iDZ8AiTo7Tu6KPAqv7D4",
        "y":"4Etl6SRW2YiLUrN5vfvVHuhp7x8PxltmWWlbbM4IFyM"}]}"#;

    #[test]
    fn a_requests_future_stays_under_1024_bytes() {
        let keys = StaticKeys::from_jwks_json(JWKS).expect("test keys");
        let gate = Gate::builder()
            .evaluate(crate::policy::allow_all())
            .resource("https://mcp.example.com/mcp")
            .issuer(Issuer::with_keys("https://auth.example.com", keys))
            .build()
            .expect("gate");
        // An inner service as small as a route can be: what is measured is the layer's part.
        let inner = tower::service_fn(|_: Request<Full<Bytes>>| async {
            Ok::<_, Infallible>(Response::new(Full::new(Bytes::new())))
        });
        let principal = Principal::builder()
            .issuer("https://auth.example.com")
            .subject("alice")
            .build()
            .expect("principal");
        let (parts, body) = Request::post("/mcp")
            .body(Full::new(Bytes::from_static(b"{}")))
            .expect("request")
            .into_parts();
        let settings = gate.layer().settings.clone();
        let future = after_authentication(
            settings,
            InnerService::new(inner),
            Box::new(parts),
            body,
            Identity::Known(principal),
            Carries::Message,
        );
        let size = std::mem::size_of_val(&future);
        println!("a request's future: {size} bytes (bound {MAX_REQUEST_FUTURE_BYTES})");
        assert!(
            size <= MAX_REQUEST_FUTURE_BYTES,
            "a request's future is {size} bytes, over {MAX_REQUEST_FUTURE_BYTES}"
        );
    }
}
