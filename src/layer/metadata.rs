//! The layer answers its own metadata paths, so that composition does not depend on order:
//! `.layer(gate.layer())` before or after `.merge(gate.metadata_router())`, or no metadata
//! router at all, and a client always finds the Protected Resource Metadata document (RFC
//! 9728) without a token. The answer is the router's own ([`crate::auth::metadata::answer`]).
//! Nothing else about the request is read.

use http::request::Parts;

use crate::enforce::reply::Reply;
use crate::settings::Settings;

/// The answer for a request to one of the gate's metadata paths; `None` for any other path.
pub(crate) fn metadata_answer(settings: &Settings, parts: &Parts) -> Option<Reply> {
    let resource = &settings.resource;
    if !resource
        .metadata_paths
        .iter()
        .any(|path| path == parts.uri.path())
    {
        return None;
    }
    Some(crate::auth::metadata::answer(
        &resource.metadata_bytes,
        &parts.method,
    ))
}
