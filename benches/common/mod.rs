//! Helpers shared by the benchmarks.

use std::str::FromStr;

/// A numeric setting from the environment: `default` when unset; the process exits with
/// status 2 and a message when it is set to something outside `min..=max`.
pub fn env_or<T: FromStr + PartialOrd + Copy + std::fmt::Display>(
    name: &str,
    default: T,
    min: T,
    max: T,
) -> T {
    let Ok(raw) = std::env::var(name) else {
        return default;
    };
    match raw.trim().parse::<T>() {
        Ok(value) if value >= min && value <= max => value,
        _ => {
            eprintln!("{name}={raw:?} is not a number in {min}..={max}");
            std::process::exit(2);
        }
    }
}

/// Sends `request` to `app` in process and reads the answer whole: its status and body.
#[allow(dead_code, reason = "not every bench sends requests")]
pub async fn send(
    app: &axum::Router,
    request: http::Request<axum::body::Body>,
) -> (http::StatusCode, bytes::Bytes) {
    use http_body_util::BodyExt;
    use tower::ServiceExt;
    let response = app.clone().oneshot(request).await.expect("infallible");
    let status = response.status();
    let bytes = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    (status, bytes)
}
