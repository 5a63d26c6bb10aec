//! The bounds the layer puts on the service it wraps and on the bodies it carries, named once
//! so that each step of the pipeline says `S: Inner<ReqBody, ResBody>` instead of repeating
//! them. [`GateService`](super::GateService)'s public `Service` impl spells them out in full.

use bytes::Bytes;
use http::{Request, Response};
use tower_service::Service;

pub(crate) use crate::policy::BoxError;

/// The wrapped service: cloneable, sendable, with a sendable future.
pub(crate) trait Inner<ReqBody, ResBody>:
    Service<Request<ReqBody>, Response = Response<ResBody>, Future: Send + 'static>
    + Clone
    + Send
    + 'static
{
}

impl<S, ReqBody, ResBody> Inner<ReqBody, ResBody> for S where
    S: Service<Request<ReqBody>, Response = Response<ResBody>, Future: Send + 'static>
        + Clone
        + Send
        + 'static
{
}

/// A request body: one the layer can read, and make from the bytes it read.
pub(crate) trait RequestBody:
    http_body::Body<Error: Into<BoxError>> + From<Bytes> + Send + 'static
{
}

impl<B> RequestBody for B where
    B: http_body::Body<Error: Into<BoxError>> + From<Bytes> + Send + 'static
{
}

/// A response body: bytes the layer can pass on, or read whole.
pub(crate) trait ResponseBody:
    http_body::Body<Data = Bytes, Error: Into<BoxError>> + Send + 'static
{
}

impl<B> ResponseBody for B where
    B: http_body::Body<Data = Bytes, Error: Into<BoxError>> + Send + 'static
{
}
