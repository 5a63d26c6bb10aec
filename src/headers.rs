//! Headers with fixed values, written from a table of `(name, value)` pairs: into a header
//! map, or onto a response the layer writes.

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Response, StatusCode};

/// Sets each of `fixed` in `headers`, in place of any value the name had.
pub(crate) fn insert_fixed(headers: &mut HeaderMap, fixed: &[(HeaderName, &'static str)]) {
    for (name, value) in fixed {
        headers.insert(name.clone(), HeaderValue::from_static(value));
    }
}

/// A response with `status`, `body` and the `fixed` headers.
pub(crate) fn fixed_response(
    status: StatusCode,
    body: Bytes,
    fixed: &[(HeaderName, &'static str)],
) -> Response<Bytes> {
    let mut response = Response::new(body);
    *response.status_mut() = status;
    insert_fixed(response.headers_mut(), fixed);
    response
}
