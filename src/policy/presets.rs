//! Ready-made policies.

use std::convert::Infallible;
use std::future::{Ready, ready};

use super::{Decision, Evaluation};

/// Allows everything that passes authentication. An open server: name it on purpose.
pub fn allow_all()
-> impl Fn(Evaluation) -> Ready<Result<Decision, Infallible>> + Send + Sync + 'static {
    |_| ready(Ok(Decision::Allow))
}

/// Denies every guarded operation as `unavailable`, with `message`.
pub fn deny_all(
    message: impl Into<String>,
) -> impl Fn(Evaluation) -> Ready<Result<Decision, Infallible>> + Send + Sync + 'static {
    let message = message.into();
    move |_| ready(Ok(Decision::unavailable(message.clone())))
}
