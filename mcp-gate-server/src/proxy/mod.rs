//! The inner service of the gate: forwards what the gate allowed to the upstream MCP server
//! and streams its answer back.
//!
//! Threat: the gateway is the upstream's only door, so it must not become a way around it.
//! What reaches the upstream is written here: the same method, the request's body as the gate
//! read it, a closed list of headers ([`headers`]), never the client's token. Connections to
//! the upstream are pooled (one `reqwest` client for the process), each bounded by a connect
//! and a response-start timeout; an answer's body is streamed as it arrives, never buffered
//! here (the gate itself reads whole only the answers it must judge: listings). An upstream
//! that cannot be reached is a `502`, one that does not start answering in time a `504`, one
//! that refuses the gateway itself (`401`, `403`) or redirects a `502`, without its challenge or
//! its `Location`.

pub mod bridge;
pub mod headers;

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::Body;
use futures_util::StreamExt;
use http::{Method, Request, Response, StatusCode};

use crate::config::Upstream as UpstreamConfig;

/// Why the gateway's HTTP client to the upstream could not be made.
#[derive(Debug, thiserror::Error)]
#[error("cannot build the upstream HTTP client: {0}")]
pub struct ClientError(#[from] reqwest::Error);

/// The upstream MCP server, as a Tower service the gate wraps. Cloning shares the pool.
#[derive(Clone)]
pub struct Upstream {
    shared: Arc<Shared>,
}

struct Shared {
    client: reqwest::Client,
    url: url::Url,
    response_timeout: std::time::Duration,
    /// `[upstream] legacy-only`: modern requests go through [`bridge`].
    legacy_only: bool,
}

impl Upstream {
    /// The upstream at `config.url`, with its pool and timeouts.
    pub fn new(config: &UpstreamConfig) -> Result<Self, ClientError> {
        let client = reqwest::Client::builder()
            .connect_timeout(config.connect_timeout.0)
            .pool_idle_timeout(config.idle_timeout.0)
            .pool_max_idle_per_host(config.max_idle_connections)
            // A redirect would send the call somewhere the operator did not name.
            .redirect(reqwest::redirect::Policy::none())
            .build()?;
        Ok(Self {
            shared: Arc::new(Shared {
                client,
                url: config.url.url.clone(),
                response_timeout: config.response_timeout.0,
                legacy_only: config.legacy_only,
            }),
        })
    }

    /// Where calls go.
    pub fn url(&self) -> &url::Url {
        &self.shared.url
    }
}

/// What the gateway answers when the upstream could not be asked.
fn upstream_failure(status: StatusCode, what: &'static str) -> Response<Body> {
    let mut response = Response::new(Body::from(what));
    *response.status_mut() = status;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

impl Shared {
    async fn forward(self: Arc<Self>, request: Request<Body>) -> Response<Body> {
        let (parts, body) = request.into_parts();
        match parts.method {
            Method::POST if self.legacy_only => bridge::forward(self, parts, body).await,
            Method::POST => {
                let body = reqwest::Body::wrap_stream(body.into_data_stream());
                self.relay(&parts, Some(body)).await
            }
            Method::GET | Method::DELETE => self.relay(&parts, None).await,
            // The gate admits only these three to the inner service; anything else is not
            // forwarded whatever happens before.
            _ => upstream_failure(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n"),
        }
    }

    /// The request as it came (the forwarded headers, the identity, `body` when a POST), and
    /// the upstream's answer streamed back.
    async fn relay(
        &self,
        parts: &http::request::Parts,
        body: Option<reqwest::Body>,
    ) -> Response<Body> {
        let mut url = self.url.clone();
        if let Some(query) = parts.uri.query() {
            url.set_query(Some(query));
        }
        let mut headers = headers::upstream_request_headers(&parts.headers);
        if let Some(identity) = parts.extensions.get::<UpstreamIdentity>() {
            headers.insert(identity.header.clone(), identity.value.clone());
        }
        let mut outgoing = self
            .client
            .request(parts.method.clone(), url)
            .headers(headers);
        if let Some(body) = body {
            outgoing = outgoing.body(body);
        }
        match self.send(outgoing).await {
            Ok(answer) => {
                let returned = headers::client_response_headers(answer.headers());
                streamed(answer, returned, ())
            }
            Err(failure) => failure,
        }
    }

    /// Sends `outgoing` and waits for the head of its answer, within the response timeout:
    /// the answer, or what the client gets instead (see [`refused_answer`]).
    async fn send(
        &self,
        outgoing: reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, Response<Body>> {
        let answer = match tokio::time::timeout(self.response_timeout, outgoing.send()).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(error)) => {
                tracing::warn!(error = %error.without_url(), "the upstream could not be reached");
                return Err(upstream_failure(
                    StatusCode::BAD_GATEWAY,
                    "the upstream MCP server could not be reached\n",
                ));
            }
            Err(_) => {
                tracing::warn!("the upstream did not start answering in time");
                return Err(upstream_failure(
                    StatusCode::GATEWAY_TIMEOUT,
                    "the upstream MCP server did not answer in time\n",
                ));
            }
        };
        match refused_answer(&answer) {
            Some(refusal) => Err(refusal),
            None => Ok(answer),
        }
    }
}

/// The upstream's answer for the client: its status, `headers`, and its body streamed as it
/// arrives; `held` lives as long as the stream (a bridged session's closer).
fn streamed<H: Send + 'static>(
    answer: reqwest::Response,
    headers: http::HeaderMap,
    held: H,
) -> Response<Body> {
    let status = answer.status();
    let stream = answer.bytes_stream().map(move |chunk| {
        let _held = &held;
        chunk
    });
    let mut response = Response::new(Body::from_stream(stream));
    *response.status_mut() = status;
    *response.headers_mut() = headers;
    response
}

/// An upstream answer the client must not get as it is, and what it gets instead.
///
/// - A redirect: the operator named the upstream's URL; another is not followed, and a `3xx`
///   passed on (without its `Location`, which is not a returned header) would mean nothing.
/// - A `401` or `403`: the upstream refused the gateway itself (an `[identity]` it does not
///   trust, or none when it wants one). Its challenge would send the client's OAuth flow to the
///   upstream's own authorization server and metadata, as if the gateway had asked for them:
///   the client gets a `502` and the challenge stays here (logged with the status only).
/// - A body in a content coding the gateway never asked for (it sends no `Accept-Encoding`):
///   neither the gate, which reads some answers whole, nor a client told nothing of it could
///   read it. A `502`.
fn refused_answer(answer: &reqwest::Response) -> Option<Response<Body>> {
    let status = answer.status();
    if status.is_redirection() {
        tracing::warn!(
            status = status.as_u16(),
            "the upstream answered with a redirect, which the gateway does not follow or pass on; the client gets 502"
        );
        return Some(upstream_failure(
            StatusCode::BAD_GATEWAY,
            "the upstream MCP server answered with a redirect\n",
        ));
    }
    if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
        tracing::warn!(
            status = status.as_u16(),
            "the upstream refused the gateway's request (check [identity] and what the upstream trusts); the client gets 502"
        );
        return Some(upstream_failure(
            StatusCode::BAD_GATEWAY,
            "the upstream MCP server refused the gateway\n",
        ));
    }
    let coded = answer
        .headers()
        .get_all(http::header::CONTENT_ENCODING)
        .iter()
        .any(|coding| !coding.as_bytes().eq_ignore_ascii_case(b"identity"));
    if coded {
        tracing::warn!("the upstream answered in a content coding the gateway did not ask for");
        return Some(upstream_failure(
            StatusCode::BAD_GATEWAY,
            "the upstream MCP server answered in an encoding the gateway did not ask for\n",
        ));
    }
    None
}

/// The header the upstream gets for this request stating who is calling: the gateway's
/// signed identity token ([`crate::identity`]), set by [`crate::identity::Stamp`] in front
/// of the proxy. Without it the upstream gets no `Authorization` at all.
#[derive(Clone, Debug)]
pub struct UpstreamIdentity {
    /// The header (`authorization` unless `[identity] header` names another).
    pub header: http::HeaderName,
    /// Its value (`Bearer <jwt>` in `authorization`, the JWT alone elsewhere).
    pub value: http::HeaderValue,
}

impl tower_service::Service<Request<Body>> for Upstream {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let shared = Arc::clone(&self.shared);
        Box::pin(async move { Ok(shared.forward(request).await) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(status: u16, headers: &[(&str, &str)]) -> reqwest::Response {
        let mut builder = http::Response::builder().status(status);
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        reqwest::Response::from(builder.body(Vec::<u8>::new()).expect("a response"))
    }

    #[test]
    fn refusals_of_the_gateway_redirects_and_codings_never_reach_the_client() {
        for (status, headers) in [
            (
                401,
                vec![(
                    "www-authenticate",
                    "Bearer resource_metadata=\"http://upstream/x\"",
                )],
            ),
            (
                403,
                vec![("www-authenticate", "Bearer error=\"insufficient_scope\"")],
            ),
            (302, vec![("location", "http://elsewhere/mcp")]),
            (307, vec![("location", "http://elsewhere/mcp")]),
            (200, vec![("content-encoding", "gzip")]),
            (
                200,
                vec![("content-encoding", "identity"), ("content-encoding", "br")],
            ),
        ] {
            let refused = refused_answer(&answer(status, &headers))
                .unwrap_or_else(|| panic!("{status} {headers:?} was passed on"));
            assert_eq!(refused.status(), StatusCode::BAD_GATEWAY);
            assert!(refused.headers().get("www-authenticate").is_none());
            assert!(refused.headers().get("location").is_none());
        }
    }

    #[test]
    fn answers_the_client_can_read_pass() {
        for (status, headers) in [
            (200, vec![("content-type", "text/event-stream")]),
            (202, vec![]),
            (200, vec![("content-encoding", "identity")]),
            (400, vec![("content-type", "application/json")]),
            (404, vec![]),
            (500, vec![]),
        ] {
            assert!(
                refused_answer(&answer(status, &headers)).is_none(),
                "{status} {headers:?} was refused"
            );
        }
    }
}
