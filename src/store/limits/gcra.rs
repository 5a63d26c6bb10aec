//! The generic cell rate algorithm, as the memory store runs it and the Redis store's script
//! repeats it: one number per counter, the *theoretical arrival time* (TAT) of the next call
//! at the sustained rate, in microseconds.
//!
//! A call at `now` is due at `max(tat, now)`; it may come up to `(burst - 1) * interval`
//! early. If it is not too early the counter moves to `max(tat, now) + interval`; otherwise it
//! is refused, the counter unchanged, and told to come back when it would no longer be early.
//! A counter whose TAT has passed is the same as none, so it may be forgotten then.

use super::RateLimit;

/// What one counter says about one call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// Admitted: the counter's new TAT.
    Admit { tat: u64 },
    /// Too early: come back in this many microseconds (at least 1).
    Wait { micros: u64 },
}

/// The step for a call at `now` on a counter at `tat` (`None`: no counter, or a forgotten
/// one). Saturating: no input overflows.
pub(crate) fn step(tat: Option<u64>, now: u64, rate: &RateLimit) -> Step {
    let interval = rate.interval_micros();
    let early = interval.saturating_mul(u64::from(rate.burst().saturating_sub(1)));
    let due = tat.unwrap_or(now).max(now);
    let allowed_from = due.saturating_sub(early);
    if now >= allowed_from {
        Step::Admit {
            tat: due.saturating_add(interval),
        }
    } else {
        Step::Wait {
            micros: (allowed_from - now).max(1),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// Runs calls at the given times through one counter; the admitted ones.
    fn admitted(rate: &RateLimit, times: impl IntoIterator<Item = u64>) -> Vec<u64> {
        let mut tat = None;
        let mut passed = Vec::new();
        for now in times {
            if let Step::Admit { tat: next } = step(tat, now, rate) {
                tat = Some(next);
                passed.push(now);
            }
        }
        passed
    }

    #[test]
    fn a_burst_of_one_spaces_calls_by_the_interval() {
        let rate = RateLimit::per_second(10).expect("rate");
        // A call every 10 ms for one second: one in ten passes, every 100 ms.
        let passed = admitted(&rate, (0..100).map(|i| i * 10_000));
        assert_eq!(passed, (0..10).map(|i| i * 100_000).collect::<Vec<_>>());
        assert_eq!(
            step(Some(100_000), 40_000, &rate),
            Step::Wait { micros: 60_000 }
        );
    }

    #[test]
    fn a_burst_lets_that_many_through_at_once_then_the_rate() {
        let rate = RateLimit::per_second(10)
            .and_then(|r| r.with_burst(5))
            .expect("rate");
        // 20 calls at once: 5 pass.
        assert_eq!(admitted(&rate, [0; 20]).len(), 5);
        // A flood at ten times the rate for ten seconds: 5 at first, then 10 a second.
        let flood = admitted(&rate, (0..1_000).map(|i| i * 10_000));
        assert_eq!(flood.len(), 5 + 100 - 1);
    }

    #[test]
    fn a_refused_call_is_not_counted() {
        let rate = RateLimit::per_minute(1).expect("rate");
        let Step::Admit { tat } = step(None, 0, &rate) else {
            panic!("the first call passes");
        };
        assert_eq!(tat, 60_000_000);
        // Refused many times: the next is still due a minute after the first.
        for now in [1, 10_000_000, 59_999_999] {
            assert!(matches!(step(Some(tat), now, &rate), Step::Wait { .. }));
        }
        assert!(matches!(
            step(Some(tat), 60_000_000, &rate),
            Step::Admit { .. }
        ));
    }

    #[test]
    fn retry_after_is_exactly_when_the_call_would_pass() {
        let rate = RateLimit::new(3, Duration::from_secs(1))
            .and_then(|r| r.with_burst(2))
            .expect("rate");
        let mut tat = None;
        let mut now = 0;
        for _ in 0..50 {
            match step(tat, now, &rate) {
                Step::Admit { tat: next } => tat = Some(next),
                Step::Wait { micros } => {
                    assert!(matches!(
                        step(tat, now + micros - 1, &rate),
                        Step::Wait { .. }
                    ));
                    assert!(matches!(step(tat, now + micros, &rate), Step::Admit { .. }));
                    now += micros;
                }
            }
        }
    }

    #[test]
    fn extreme_inputs_saturate() {
        let rate = RateLimit::new(1, Duration::from_secs(86_400))
            .and_then(|r| r.with_burst(1))
            .expect("rate");
        assert!(matches!(step(Some(u64::MAX), 0, &rate), Step::Wait { .. }));
        assert!(matches!(step(None, u64::MAX, &rate), Step::Admit { .. }));
    }
}
