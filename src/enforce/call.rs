//! What every route is given and gives back: the classified request ([`Call`]), where it goes
//! next ([`Routed`]), and the small steps routes share (starting the inner call, the body to
//! forward).

use bytes::Bytes;
use http::request::Parts;
use http::{Request, Response, header};
use tower_service::Service;

use super::reply::{Reply, refusal};
use crate::auth::Principal;
use crate::enforce::body::GateBody;
use crate::enforce::interaction::{carries_layer_inputs, without_layer_inputs};
use crate::limit::InFlight;
use crate::mcp::request::McpRequest;
use crate::mcp::{ProtocolContext, ProtocolError, Target};
use crate::settings::Settings;
/// A reply of the layer's, as the response the service returns.
pub(crate) fn replied<B>(reply: Reply) -> Response<GateBody<B>> {
    reply.map(GateBody::reply)
}

/// The layer's refusal of a request it could not read, as the response the service returns.
pub(crate) fn protocol_error<B>(error: &ProtocolError) -> Response<GateBody<B>> {
    replied(refusal(error))
}

/// Starts the inner service's call. A plain function, so that the caller's future holds the
/// inner future alone, not the parts it was made from.
pub(crate) fn start<S, ReqBody>(inner: &mut S, parts: Parts, body: ReqBody) -> S::Future
where
    S: Service<Request<ReqBody>>,
{
    inner.call(Request::from_parts(parts, body))
}

/// The inner service's own answer, passed on as it streams (holding `place` until it ends).
pub(crate) fn forwarded<B, E>(
    response: Result<Response<B>, E>,
    place: Option<InFlight>,
) -> Result<Response<GateBody<B>>, E> {
    response.map(|response| match place {
        None => response.map(GateBody::inner),
        Some(place) => response.map(|body| GateBody::holding(body, place)),
    })
}

/// Where a route leaves a request: on to the inner service, or answered.
pub(crate) enum Routed<B> {
    /// Pass the request on to the inner service, with this body; its answer streams back,
    /// holding the call's place in flight (a concurrency limit) until it ends.
    Forward(Box<Parts>, Bytes, Option<InFlight>),
    /// The response: a reply of the layer's, or an inner answer the route read and wrote
    /// again (a filtered list, a read marked private, a concealed probe).
    Respond(Response<GateBody<B>>),
}

impl<B> Routed<B> {
    /// A reply of the layer's.
    pub fn reply(reply: Reply) -> Self {
        Self::Respond(replied(reply))
    }
}

/// A classified request on its way through the layer: what every route is given.
pub(crate) struct Call<'a> {
    pub settings: &'a Settings,
    pub principal: Principal,
    pub parts: Box<Parts>,
    pub bytes: Bytes,
    pub request: Box<McpRequest>,
    pub protocol: ProtocolContext,
}

impl Call<'_> {
    /// On to the inner service, with the body as sent less the layer's own inputs.
    pub fn forward<B>(mut self) -> Routed<B> {
        let body = scrubbed(&mut self.parts, &self.request, self.bytes);
        Routed::Forward(self.parts, body, None)
    }

    /// A method in no row, to be judged: `evaluate` sees it as [`Target::Other`].
    pub fn into_other(mut self) -> Self {
        let params = self.request.params_shared();
        self.request.target = Target::Other {
            method: self.request.method.to_string(),
            params,
        };
        self
    }
}

/// The body to forward for a request the layer did not answer with a round trip of its own:
/// as sent, unless it carries input responses under the layer's keys, which never reach the
/// inner service.
pub(crate) fn scrubbed(parts: &mut Parts, request: &McpRequest, bytes: Bytes) -> Bytes {
    if !carries_layer_inputs(request) {
        return bytes;
    }
    parts.headers.remove(header::CONTENT_LENGTH);
    without_layer_inputs(request)
}
