//! The layer answers its own metadata paths, so that composition does not depend on order:
//! `.layer(gate.layer())` before or after `.merge(gate.metadata_router())`, or no metadata
//! router at all, and a client always finds the Protected Resource Metadata document (RFC
//! 9728) without a token. The answer is the router's: the document with
//! `Cache-Control: public, max-age=300` and CORS open to every origin (`GET`, `OPTIONS`);
//! another method gets `405`. Nothing else about the request is read.

use bytes::Bytes;
use http::request::Parts;
use http::{HeaderValue, Method, Response, StatusCode, header};

use crate::gate::Gate;

/// The answer for a request to one of the gate's metadata paths; `None` for any other path.
pub(crate) fn metadata_answer(gate: &Gate, parts: &Parts) -> Option<Response<Bytes>> {
    let resource = &gate.inner.resource;
    if !resource
        .metadata_paths
        .iter()
        .any(|path| path == parts.uri.path())
    {
        return None;
    }
    let mut response = Response::new(Bytes::new());
    let headers = response.headers_mut();
    headers.insert(
        header::ACCESS_CONTROL_ALLOW_ORIGIN,
        HeaderValue::from_static("*"),
    );
    match parts.method {
        Method::GET | Method::HEAD => {
            headers.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            headers.insert(
                header::CACHE_CONTROL,
                HeaderValue::from_static("public, max-age=300"),
            );
            *response.body_mut() = resource.metadata_bytes.clone();
        }
        Method::OPTIONS => {
            headers.insert(
                header::ACCESS_CONTROL_ALLOW_METHODS,
                HeaderValue::from_static("GET, OPTIONS"),
            );
            headers.insert(
                header::ACCESS_CONTROL_ALLOW_HEADERS,
                HeaderValue::from_static("*"),
            );
            *response.status_mut() = StatusCode::NO_CONTENT;
        }
        _ => {
            headers.insert(
                header::ALLOW,
                HeaderValue::from_static("GET, HEAD, OPTIONS"),
            );
            *response.status_mut() = StatusCode::METHOD_NOT_ALLOWED;
        }
    }
    Some(response)
}
