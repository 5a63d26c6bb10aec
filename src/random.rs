//! The operating system's random source (task ids, context ids), and the one error a caller
//! sees when it has none: [`RandomnessUnavailable`], so that no random-source crate's error
//! type is part of this crate's API.

/// The operating system's random source could not be read: no fresh id can be made. The
/// layer answers with an internal error rather than with a guessable id.
///
/// ```
/// use mcp_gate::tasks::TaskId;
///
/// let id: Result<TaskId, mcp_gate::RandomnessUnavailable> = TaskId::generate();
/// assert!(id.is_ok());
/// ```
#[derive(Debug, thiserror::Error)]
#[error("the operating system's random source is unavailable")]
pub struct RandomnessUnavailable {
    /// What the random source said (shown by `Error::source`).
    #[source]
    source: getrandom::Error,
}

/// Fills `bytes` from the operating system's random source.
pub(crate) fn fill(bytes: &mut [u8]) -> Result<(), RandomnessUnavailable> {
    getrandom::fill(bytes).map_err(|source| RandomnessUnavailable { source })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_error_keeps_its_source() {
        let error = RandomnessUnavailable {
            source: getrandom::Error::UNSUPPORTED,
        };
        let source = std::error::Error::source(&error).map(ToString::to_string);
        assert_eq!(source, Some(getrandom::Error::UNSUPPORTED.to_string()));
        assert_eq!(
            error.to_string(),
            "the operating system's random source is unavailable"
        );
    }

    #[test]
    fn fill_fills() {
        let mut bytes = [0u8; 32];
        fill(&mut bytes).expect("a random source");
        assert_ne!(bytes, [0u8; 32]);
    }
}
