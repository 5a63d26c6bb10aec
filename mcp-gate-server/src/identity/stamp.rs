//! The service between the gate and the proxy: it reads the principal the gate verified,
//! mints its identity token, and hands the request on with it. No principal, or no token,
//! and the request goes no further.

use std::convert::Infallible;
use std::future::{Ready, ready};
use std::task::{Context, Poll};

use axum::body::Body;
use futures_util::future::Either;
use http::{Request, Response, StatusCode};
use mcp_gate::Principal;
use tower_service::Service;

use super::Minter;
use crate::proxy::UpstreamIdentity;

/// `inner` (the proxy), with the caller's identity token added when a [`Minter`] is set;
/// without one, requests pass unchanged and the upstream gets no identity.
#[derive(Clone)]
pub struct Stamp<S> {
    minter: Option<Minter>,
    inner: S,
}

impl<S> Stamp<S> {
    /// Stamps requests to `inner` with tokens from `minter`, when there is one.
    pub fn new(minter: Option<Minter>, inner: S) -> Self {
        Self { minter, inner }
    }
}

/// The refusal of a request whose identity could not be stated: never forwarded without it.
fn refused() -> Response<Body> {
    let mut response = Response::new(Body::from(
        "the gateway could not state the caller's identity to the upstream\n",
    ));
    *response.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

impl<S> Service<Request<Body>> for Stamp<S>
where
    S: Service<Request<Body>, Response = Response<Body>, Error = Infallible>,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Either<S::Future, Ready<Result<Response<Body>, Infallible>>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<Body>) -> Self::Future {
        let Some(minter) = &self.minter else {
            return Either::Left(self.inner.call(request));
        };
        let Some(principal) = request.extensions().get::<Principal>() else {
            tracing::error!("a request reached the upstream without a verified caller; refused");
            return Either::Right(ready(Ok(refused())));
        };
        match minter.mint(principal) {
            Ok(value) => {
                request.extensions_mut().insert(UpstreamIdentity {
                    header: minter.header().clone(),
                    value,
                });
                Either::Left(self.inner.call(request))
            }
            Err(error) => {
                tracing::error!(%error, "no identity token for the upstream; request refused");
                Either::Right(ready(Ok(refused())))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use http::HeaderName;
    use tower::ServiceExt as _;

    use super::*;
    use crate::identity::SigningKey;

    /// The proxy's stand-in: answers with the identity it was handed, as the body.
    fn echo() -> impl Service<
        Request<Body>,
        Response = Response<Body>,
        Error = Infallible,
        Future = Ready<Result<Response<Body>, Infallible>>,
    > + Clone {
        tower::service_fn(|request: Request<Body>| {
            let seen = match request.extensions().get::<UpstreamIdentity>() {
                Some(identity) => format!(
                    "{}: {}",
                    identity.header,
                    identity.value.to_str().unwrap_or("?")
                ),
                None => "none".to_owned(),
            };
            ready(Ok(Response::new(Body::from(seen))))
        })
    }

    fn minter() -> Minter {
        Minter::new(
            SigningKey::generate().unwrap(),
            "http://up/mcp".to_owned(),
            "http://gw/mcp".to_owned(),
            Duration::from_secs(60),
            HeaderName::from_static("authorization"),
        )
    }

    async fn body(response: Response<Body>) -> (StatusCode, String) {
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 16)
            .await
            .unwrap();
        (status, String::from_utf8(bytes.to_vec()).unwrap())
    }

    fn with_principal() -> Request<Body> {
        let mut request = Request::new(Body::empty());
        request.extensions_mut().insert(
            Principal::builder()
                .issuer("http://as")
                .subject("alice")
                .build()
                .unwrap(),
        );
        request
    }

    #[tokio::test]
    async fn a_verified_caller_goes_on_with_its_token() {
        let answer = Stamp::new(Some(minter()), echo())
            .oneshot(with_principal())
            .await
            .unwrap();
        let (status, seen) = body(answer).await;
        assert_eq!(status, StatusCode::OK);
        assert!(seen.starts_with("authorization: Bearer ey"), "{seen}");
    }

    #[tokio::test]
    async fn without_a_principal_nothing_is_forwarded() {
        let answer = Stamp::new(Some(minter()), echo())
            .oneshot(Request::new(Body::empty()))
            .await
            .unwrap();
        let (status, seen) = body(answer).await;
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
        assert!(
            seen.contains("could not state the caller's identity"),
            "{seen}"
        );
    }

    #[tokio::test]
    async fn without_identity_configured_no_identity_is_sent() {
        let answer = Stamp::new(None, echo())
            .oneshot(with_principal())
            .await
            .unwrap();
        assert_eq!(body(answer).await, (StatusCode::OK, "none".to_owned()));
    }
}
