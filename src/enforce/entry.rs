//! The flow's front door: the caller verified if the shell could not settle it at once, the
//! principal admitted, a named session checked, and then either a bodyless verb passed on
//! (GET watched, DELETE unbinding) or the message read and routed ([`super::router`]).

use std::sync::Arc;

use bytes::Bytes;
use http::request::Parts;
use http::{Method, Response, header};
use tracing::Span;

use super::call::{Routed, forwarded, replied, start};
use super::reply::{auth_refusal, bodyless_refusal};
use super::router::route;
use super::routes::initialize as sessions;
use crate::auth::Principal;
use crate::auth::token_cache::TokenDigest;
use crate::enforce::answer;
use crate::enforce::body::GateBody;
use crate::enforce::bounds::Inner;
use crate::enforce::buffer::{close_if_unread, declares_body};
use crate::mcp::era::SESSION_HEADER;
use crate::measure::traced::{KeptSpan, traced};
use crate::settings::Settings;
use crate::telemetry::trace;

/// What a request carries once the shell let it in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Carries {
    /// A POST: one MCP message, read and judged.
    Message,
    /// GET, DELETE, OPTIONS: no operation, passed on without a body.
    Nothing,
}

/// Who the caller is, as far as the synchronous part of the layer got.
pub(crate) enum Identity {
    /// A token found in the cache, or otherwise settled without waiting.
    Known(Principal),
    /// A token to verify, with its cache key. Boxed: it is the rarer case, and it keeps every
    /// request's future small.
    Unverified(Box<(String, TokenDigest)>),
    /// A token presented with the DPoP scheme: verified unless cached, and its proof checked.
    Proving(Box<Proving>),
}

/// What a DPoP presentation carries into the flow.
pub(crate) struct Proving {
    pub token: String,
    pub key: TokenDigest,
    pub cached: Option<Principal>,
}

/// Hands the request to the inner service: the principal goes in, the token goes out.
pub(crate) fn admit(parts: &mut Parts, principal: Principal) {
    parts.headers.remove(header::AUTHORIZATION);
    if principal.dpop_jkt().is_some() {
        parts.headers.remove(crate::auth::dpop_bind::DPOP_HEADER);
    }
    parts.extensions.insert(principal);
}

/// Verifies the token if it has to be, then everything after authentication.
///
/// The work is split in two so that each request's future stays small (it is boxed once per
/// request, and a small box is a cheap allocation): [`decide`] reads and judges the request,
/// and only then is the inner service's future started, with nothing of the decision kept
/// alive beside it.
#[allow(
    clippy::manual_async_fn,
    reason = "an async fn stores its arguments twice in its future"
)]
pub(crate) fn after_authentication<S: Inner>(
    settings: Arc<Settings>,
    mut inner: S,
    mut parts: Box<Parts>,
    body: S::Req,
    identity: Identity,
    carries: Carries,
) -> impl Future<Output = Result<Response<GateBody<S::Res>>, S::Error>> {
    async move {
        let principal = match identity {
            Identity::Known(principal) => principal,
            Identity::Unverified(unverified) => {
                let (token, key) = *unverified;
                // Boxed: verification (signature, key refresh, introspection) is the rare path once
                // the token cache is warm, and its future is large.
                let span = KeptSpan::new(trace::verify_span(&Span::current(), "miss"));
                let verify = settings.authenticator.verify(&token, key);
                let verified = Box::pin(traced(verify, span.span())).await;
                if let Some(span) = span.get() {
                    trace::verified(span, verified.as_ref().err().map(|error| error.reason()));
                }
                match verified {
                    Ok(principal) => principal,
                    Err(error) => {
                        trace::refused(&Span::current(), error.reason());
                        return Ok(replied(auth_refusal(&settings, &error, &parts)));
                    }
                }
            }
            Identity::Proving(proving) => {
                let Proving { token, key, cached } = *proving;
                let proven = super::proof::prove(&settings, &parts, &token, key, cached);
                match Box::pin(proven).await {
                    Ok(principal) => principal,
                    Err(error) => {
                        trace::refused(&Span::current(), error.reason());
                        return Ok(replied(auth_refusal(&settings, &error, &parts)));
                    }
                }
            }
        };
        admit(&mut parts, principal.clone());
        // A request that names a session goes on only if the session is the caller's.
        let session = if parts.headers.contains_key(SESSION_HEADER) {
            match Box::pin(sessions::bound_session(&settings, &parts, &principal)).await {
                Ok(session) => session.map(Box::new),
                Err(mut response) => {
                    close_if_unread(&mut response, &parts);
                    return Ok(replied(response));
                }
            }
        } else {
            None
        };
        match carries {
            Carries::Message => {}
            Carries::Nothing => {
                return Box::pin(bodyless(&settings, inner, *parts, session.as_deref())).await;
            }
        }
        // Taken apart in a statement of its own: a `match` on the awaited route would keep
        // the routed value (and the `?`'s) alive across the inner call below, in every
        // request's future.
        let (mut parts, bytes, place) =
            match route(&settings, &mut inner, parts, body, principal, session).await? {
                Routed::Forward(parts, bytes, place) => (parts, bytes, place),
                Routed::Respond(response) => return Ok(response),
            };
        // Inside the JSON-RPC request's span, if `route` read one (none for a notification);
        // the empty span (no subscriber) is neither entered nor carried.
        let call = {
            let span = trace::RequestSpan::take(&mut parts.extensions);
            let call = if span.is_none() {
                start(&mut inner, *parts, S::Req::from(bytes))
            } else {
                span.in_scope(|| start(&mut inner, *parts, S::Req::from(bytes)))
            };
            traced(call, span)
        };
        forwarded(call.await, place)
    }
}

/// The header a client resumes an event stream with.
const LAST_EVENT_ID: http::HeaderName = http::HeaderName::from_static("last-event-id");

/// GET (the event stream), DELETE (the end of a legacy session) and OPTIONS: they carry no
/// operation, so they go on without a body; one that declares a body is refused, never
/// forwarded unread. A `DELETE` the inner server accepted unbinds the session.
///
/// A GET goes on without `Last-Event-ID`: a resumed stream replays the inner server's answers
/// to earlier requests, and among them are answers the layer read and rewrote (a filtered
/// list, a read marked private, a conceal probe, a side request of its own), which the replay
/// would carry unread. The layer's own answers carry no event ids; a client asks again.
async fn bodyless<S: Inner>(
    settings: &Settings,
    mut inner: S,
    mut parts: Parts,
    session: Option<&sessions::BoundSession>,
) -> Result<Response<GateBody<S::Res>>, S::Error> {
    if declares_body(&parts) {
        return Ok(replied(bodyless_refusal(&parts)));
    }
    let ends_session = parts.method == Method::DELETE;
    parts.headers.remove(LAST_EVENT_ID);
    let is_get = parts.method == Method::GET;
    let response = start(&mut inner, parts, S::Req::from(Bytes::new())).await?;
    if let Some(session) = session.filter(|_| ends_session && response.status().is_success()) {
        sessions::unbind(settings, session).await;
    }
    if is_get {
        let bounds = settings.answers.bounds();
        return Ok(Box::pin(answer::watch_get(response, bounds)).await);
    }
    Ok(response.map(GateBody::inner))
}
