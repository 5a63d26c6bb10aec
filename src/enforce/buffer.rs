//! Reading a request body whole, with a size cap and a time limit.

use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use http::request::Parts;
use http::{HeaderMap, HeaderValue, Response, StatusCode, Version, header};
use http_body::Body;
use http_body_util::BodyExt;

use crate::mcp::{INVALID_REQUEST, ProtocolError};

/// Reads `body` up to `limit` bytes within `timeout`.
///
/// Refusals: a declared or actual length over the cap is 413; a body that stalls past the
/// timeout is 408; a body that fails to arrive is 400. None of them reaches the inner service.
pub(crate) async fn read_body<B>(
    headers: &HeaderMap,
    body: B,
    limit: usize,
    timeout: Duration,
) -> Result<Bytes, ProtocolError>
where
    B: Body,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let too_large = || {
        ProtocolError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            INVALID_REQUEST,
            format!("the request body is larger than {limit} bytes"),
        )
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|len| len > limit as u64) {
        return Err(too_large());
    }
    // The declared length (within the limit) sizes the buffer a body of several frames is
    // joined in, so that it is copied once, never regrown.
    let expected = declared.map_or(0, |len| len as usize);
    let read = crate::deadline::within(timeout, collect_sized(body, limit, expected)).await;
    match read {
        Err(_) => Err(ProtocolError::new(
            StatusCode::REQUEST_TIMEOUT,
            INVALID_REQUEST,
            "the request body did not arrive in time",
        )),
        Ok(Err(Unread::TooLarge)) => Err(too_large()),
        Ok(Err(Unread::Broken)) => Err(ProtocolError::new(
            StatusCode::BAD_REQUEST,
            INVALID_REQUEST,
            "the request body could not be read",
        )),
        Ok(Ok(bytes)) => Ok(bytes),
    }
}

/// Marks a response sent before the request body was read whole: over HTTP/1.x, with
/// `Connection: close`. The server cannot keep the connection without first draining the rest
/// of the body, and hyper closes it when that is not at hand; a client told nothing would
/// reuse the connection for its next request (after a 401, the retry with a token) and race
/// the close. HTTP/2 streams are independent, and the header is not allowed there.
pub(crate) fn close_if_unread<B>(response: &mut Response<B>, request: &Parts) {
    let http1 = matches!(request.version, Version::HTTP_10 | Version::HTTP_11);
    if http1 && declares_body(request) {
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
}

/// Whether the request says a body follows: a `Transfer-Encoding`, or a `Content-Length`
/// other than `0`.
pub(crate) fn declares_body(request: &Parts) -> bool {
    request.headers.contains_key(header::TRANSFER_ENCODING)
        || request
            .headers
            .get(header::CONTENT_LENGTH)
            .is_some_and(|length| length.as_bytes() != b"0")
}

/// Why [`collect`] stopped.
pub(crate) enum Unread {
    TooLarge,
    Broken,
}

/// The body's data, at most `limit` bytes. The usual body, one frame, is kept as it came,
/// without a copy; trailers are not part of the message and are dropped.
pub(crate) async fn collect<B: Body>(body: B, limit: usize) -> Result<Bytes, Unread> {
    collect_sized(body, limit, 0).await
}

/// [`collect`], with the length the body is expected to have (at most `limit`; 0 when not
/// known): a body of several frames is joined into one buffer of that size, so that each
/// byte is copied once (a body longer than announced grows it).
async fn collect_sized<B: Body>(body: B, limit: usize, expected: usize) -> Result<Bytes, Unread> {
    let mut body = std::pin::pin!(body);
    let mut single: Option<Bytes> = None;
    let mut joined = BytesMut::new();
    let mut length = 0usize;
    while let Some(frame) = body.frame().await {
        let Ok(mut data) = frame.map_err(|_| Unread::Broken)?.into_data() else {
            continue;
        };
        length = length.saturating_add(data.remaining());
        if length > limit {
            return Err(Unread::TooLarge);
        }
        let chunk = data.copy_to_bytes(data.remaining());
        if single.is_none() && joined.is_empty() {
            single = Some(chunk);
            continue;
        }
        if let Some(first) = single.take() {
            joined.reserve(length.max(expected.min(limit)));
            joined.extend_from_slice(&first);
        }
        joined.extend_from_slice(&chunk);
    }
    Ok(single.unwrap_or_else(|| joined.freeze()))
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use http_body::Frame;
    use http_body_util::{Full, StreamBody};

    use super::*;

    #[tokio::test]
    async fn a_stalled_body_times_out_with_408() {
        let stalled = StreamBody::new(futures_util::stream::pending::<
            Result<Frame<Bytes>, Infallible>,
        >());
        let error = read_body(&HeaderMap::new(), stalled, 1024, Duration::from_millis(50))
            .await
            .unwrap_err();
        assert_eq!(error.status, StatusCode::REQUEST_TIMEOUT);
    }

    #[tokio::test]
    async fn declared_and_actual_lengths_are_capped() {
        let mut headers = HeaderMap::new();
        headers.insert(header::CONTENT_LENGTH, "2048".parse().unwrap());
        let error = read_body(
            &headers,
            Full::new(Bytes::from_static(b"{}")),
            1024,
            Duration::from_secs(1),
        )
        .await
        .unwrap_err();
        assert_eq!(error.status, StatusCode::PAYLOAD_TOO_LARGE);
        let big = Full::new(Bytes::from(vec![b' '; 2048]));
        let error = read_body(&HeaderMap::new(), big, 1024, Duration::from_secs(1))
            .await
            .unwrap_err();
        assert_eq!(error.status, StatusCode::PAYLOAD_TOO_LARGE);
        let fits = read_body(
            &HeaderMap::new(),
            Full::new(Bytes::from_static(b"{}")),
            1024,
            Duration::from_secs(1),
        )
        .await;
        assert_eq!(fits.unwrap(), Bytes::from_static(b"{}"));
    }

    type FrameResult = Result<Frame<Bytes>, std::io::Error>;

    fn frames(
        parts: Vec<FrameResult>,
    ) -> StreamBody<futures_util::stream::Iter<std::vec::IntoIter<FrameResult>>> {
        StreamBody::new(futures_util::stream::iter(parts))
    }

    #[tokio::test]
    async fn frames_are_joined_in_order_and_trailers_dropped() {
        let mut trailers = HeaderMap::new();
        trailers.insert("x-t", "1".parse().unwrap());
        let body = frames(vec![
            Ok(Frame::data(Bytes::from_static(b"{\"a\":"))),
            Ok(Frame::data(Bytes::from_static(b"[1,"))),
            Ok(Frame::trailers(trailers)),
            Ok(Frame::data(Bytes::from_static(b"2]}"))),
        ]);
        let read = read_body(&HeaderMap::new(), body, 1024, Duration::from_secs(1)).await;
        assert_eq!(read.unwrap(), Bytes::from_static(b"{\"a\":[1,2]}"));
    }

    #[tokio::test]
    async fn the_cap_counts_every_frame_and_a_broken_body_is_400() {
        let body = frames(vec![
            Ok(Frame::data(Bytes::from(vec![b' '; 600]))),
            Ok(Frame::data(Bytes::from(vec![b' '; 600]))),
        ]);
        let error = read_body(&HeaderMap::new(), body, 1024, Duration::from_secs(1))
            .await
            .unwrap_err();
        assert_eq!(error.status, StatusCode::PAYLOAD_TOO_LARGE);
        let body = frames(vec![
            Ok(Frame::data(Bytes::from_static(b"{"))),
            Err(std::io::Error::other("reset")),
        ]);
        let error = read_body(&HeaderMap::new(), body, 1024, Duration::from_secs(1))
            .await
            .unwrap_err();
        assert_eq!(error.status, StatusCode::BAD_REQUEST);
    }

    #[test]
    fn a_refusal_before_the_body_closes_an_http1_connection_only_when_there_is_a_body() {
        let close = |version: Version, headers: &[(&str, &str)]| {
            let mut request = http::Request::post("/mcp").version(version);
            for (name, value) in headers {
                request = request.header(*name, *value);
            }
            let (parts, ()) = request.body(()).unwrap().into_parts();
            let mut response = Response::new(());
            close_if_unread(&mut response, &parts);
            response.headers().get(header::CONNECTION).cloned()
        };
        let closed = Some(HeaderValue::from_static("close"));
        assert_eq!(close(Version::HTTP_11, &[("content-length", "12")]), closed);
        assert_eq!(close(Version::HTTP_10, &[("content-length", "12")]), closed);
        assert_eq!(
            close(Version::HTTP_11, &[("transfer-encoding", "chunked")]),
            closed
        );
        assert_eq!(close(Version::HTTP_11, &[("content-length", "0")]), None);
        assert_eq!(close(Version::HTTP_11, &[]), None);
        assert_eq!(close(Version::HTTP_2, &[("content-length", "12")]), None);
    }
}
