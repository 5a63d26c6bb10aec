//! Allowed requests whose answers the layer reads whole instead of streaming them.
//!
//! Two kinds of allowed request are not streamed untouched:
//!
//! - **A cacheable read the policy judged, on 2026-07-28** (`resources/read`, `skills/get`):
//!   its result leaves marked `cacheScope: "private"` with a capped `ttlMs`
//!   ([`answer::mark_private`]), so that no cache serves one caller's judged read to another.
//! - **Every request whose refusal conceal mode could hide**, when conceal mode is on. A
//!   concealed refusal is the inner server's answer about a made-up component, read and written
//!   by the layer; the answer about a component that really is missing must come out of the
//!   same writer, or the two would differ in their framing and a prober could tell them apart.
//!
//! Both go through the one rule of [`answer`]. A `tools/call` read whole has no time limit
//! (a tool may run long), only the size bound; every other read has the answer time limit.

use std::time::Duration;

use bytes::Bytes;
use http::Response;
use http::request::Parts;

use crate::enforce::answer::{self, Read};
use crate::enforce::body::GateBody;
use crate::enforce::bounds::Inner;
use crate::enforce::call::{replied, start};
use crate::enforce::conceal::concealable;
use crate::mcp::request::McpRequest;
use crate::mcp::{Era, ProtocolContext};
use crate::settings::Settings;

/// How the layer carries the answer to an allowed request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Carry {
    /// Streamed untouched.
    Stream,
    /// Read whole and written by the layer; `private` when the result is to be marked private.
    Whole { private: bool },
}

/// How the answer to `request`, allowed, is carried.
pub(crate) fn carry(
    settings: &Settings,
    request: &McpRequest,
    protocol: &ProtocolContext,
) -> Carry {
    let private = is_private(request, protocol);
    if private || (settings.discovery.conceal && concealable(request).is_some()) {
        Carry::Whole { private }
    } else {
        Carry::Stream
    }
}

/// Whether the result of `request` leaves marked private: a modern request whose cacheable
/// result depends on the caller.
pub(crate) fn is_private(request: &McpRequest, protocol: &ProtocolContext) -> bool {
    protocol.era == Era::Modern && answer::judged_per_caller(&request.method)
}

/// The size and time bounds for reading the answer to `request` whole.
pub(crate) fn bounds(settings: &Settings, request: &McpRequest) -> (usize, Option<Duration>) {
    let limits = &settings.answers;
    if request.method == "tools/call" {
        (limits.max_bytes, None)
    } else {
        limits.bounds()
    }
}

/// What every answer read whole gets before the layer writes it: a result judged per caller is
/// marked private.
pub(crate) fn finish(settings: &Settings, read: &mut Read, private: bool) {
    if private && let Some(result) = read.result_mut() {
        answer::mark_private(result, settings.discovery.cache_ttl_cap);
    }
}

/// Forwards an allowed request and reads its answer whole (see the module documentation).
pub(crate) async fn forward<S: Inner>(
    settings: &Settings,
    inner: &mut S,
    parts: Parts,
    body: Bytes,
    request: &McpRequest,
    private: bool,
) -> Result<Response<GateBody<S::Res>>, S::Error> {
    let call = start(inner, parts, S::Req::from(body));
    let mut read = match answer::fetch(call, bounds(settings, request), &request.id).await? {
        Ok(read) => read,
        Err(problem) => return Ok(replied(answer::refusal(request, problem, "judged"))),
    };
    finish(settings, &mut read, private);
    Ok(replied(read.into_http()))
}
