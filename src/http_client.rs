//! Bounded JSON fetches for discovery, key sets and introspection.

use std::time::Duration;

use serde::de::DeserializeOwned;
use url::Url;

/// Why a fetch from the authorization server failed. Never shown to clients.
#[derive(Debug, thiserror::Error)]
pub(crate) enum FetchError {
    #[error("request failed: {0}")]
    Transport(#[from] reqwest::Error),
    #[error("unexpected HTTP status {0}")]
    Status(u16),
    #[error("response larger than {0} bytes")]
    TooLarge(usize),
    #[error("response is not the expected JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("{0}")]
    Invalid(&'static str),
}

/// Reads a response body up to `max_bytes`.
pub(crate) async fn read_bounded(
    mut response: reqwest::Response,
    max_bytes: usize,
) -> Result<Vec<u8>, FetchError> {
    if response
        .content_length()
        .is_some_and(|len| len > max_bytes as u64)
    {
        return Err(FetchError::TooLarge(max_bytes));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        if body.len() + chunk.len() > max_bytes {
            return Err(FetchError::TooLarge(max_bytes));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// GETs `url` and parses a JSON body of at most `max_bytes`.
pub(crate) async fn get_json<T: DeserializeOwned>(
    client: &reqwest::Client,
    url: Url,
    timeout: Duration,
    max_bytes: usize,
) -> Result<T, FetchError> {
    let response = client
        .get(url)
        .header(http::header::ACCEPT, "application/json")
        .timeout(timeout)
        .send()
        .await?;
    if !response.status().is_success() {
        return Err(FetchError::Status(response.status().as_u16()));
    }
    let body = read_bounded(response, max_bytes).await?;
    Ok(serde_json::from_slice(&body)?)
}
