//! [`RateLimit`]: how many calls, in how long, with how large a burst; and its text form.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// A rate: at most `count` calls per `period` sustained, with up to `burst` of them at once.
///
/// Enforced with GCRA (the generic cell rate algorithm): each call is due one *interval*
/// (`period / count`) after the one before it, and a call may come early by up to
/// `burst - 1` intervals. A burst of 1 (the default) spaces calls evenly; a burst of `count`
/// lets a whole period's calls come at once, after which they are spaced again. A call
/// refused by the limit is not counted: a caller held at its limit gets exactly its rate.
///
/// ```
/// use std::time::Duration;
/// use mcp_gate::limit::RateLimit;
///
/// let transfer: RateLimit = "10/minute".parse().unwrap();
/// assert_eq!(transfer, RateLimit::per_minute(10).unwrap());
/// assert_eq!(transfer.interval(), Duration::from_secs(6));
/// let burst: RateLimit = "100/s burst 20".parse().unwrap();
/// assert_eq!(burst.burst(), 20);
/// assert!("0/minute".parse::<RateLimit>().is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RateLimit {
    count: u32,
    period: Duration,
    burst: u32,
}

/// Why a rate cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RateError {
    /// The count is zero: no call could ever pass (deny the call in the policy instead).
    #[error("a rate limit allows at least one call per period")]
    ZeroCount,
    /// The period is under a millisecond or over a day.
    #[error("a rate limit's period is 1 ms to 24 hours")]
    Period,
    /// The burst is zero or larger than the count.
    #[error("a rate limit's burst is 1 to its count")]
    Burst,
    /// The text is not `<count>/<unit>` with an optional `burst <n>`.
    #[error(
        "a rate limit is written `<count>/<unit>` (second, minute, hour, day, or s, m, h, d), optionally followed by `burst <n>`: {0}"
    )]
    Syntax(&'static str),
}

const DAY: Duration = Duration::from_secs(86_400);

impl RateLimit {
    /// `count` calls per `period`, a burst of 1.
    pub fn new(count: u32, period: Duration) -> Result<Self, RateError> {
        if count == 0 {
            return Err(RateError::ZeroCount);
        }
        if period < Duration::from_millis(1) || period > DAY {
            return Err(RateError::Period);
        }
        Ok(Self {
            count,
            period,
            burst: 1,
        })
    }

    /// `count` calls a second.
    pub fn per_second(count: u32) -> Result<Self, RateError> {
        Self::new(count, Duration::from_secs(1))
    }

    /// `count` calls a minute.
    pub fn per_minute(count: u32) -> Result<Self, RateError> {
        Self::new(count, Duration::from_secs(60))
    }

    /// `count` calls an hour.
    pub fn per_hour(count: u32) -> Result<Self, RateError> {
        Self::new(count, Duration::from_secs(3_600))
    }

    /// The same rate, letting up to `burst` calls (1 to the count) come at once.
    pub fn with_burst(self, burst: u32) -> Result<Self, RateError> {
        if burst == 0 || burst > self.count {
            return Err(RateError::Burst);
        }
        Ok(Self { burst, ..self })
    }

    /// Calls per period.
    pub fn count(&self) -> u32 {
        self.count
    }

    /// The period.
    pub fn period(&self) -> Duration {
        self.period
    }

    /// Calls that may come at once.
    pub fn burst(&self) -> u32 {
        self.burst
    }

    /// The time between two calls at the sustained rate: `period / count`, at least 1 µs.
    pub fn interval(&self) -> Duration {
        (self.period / self.count).max(Duration::from_micros(1))
    }

    /// The interval in whole microseconds (what the stores count in).
    pub(crate) fn interval_micros(&self) -> u64 {
        u64::try_from(self.interval().as_micros()).unwrap_or(u64::MAX)
    }
}

impl fmt::Display for RateLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let unit = match self.period.as_secs() {
            1 if self.period.subsec_nanos() == 0 => "second".to_owned(),
            60 if self.period.subsec_nanos() == 0 => "minute".to_owned(),
            3_600 if self.period.subsec_nanos() == 0 => "hour".to_owned(),
            86_400 if self.period.subsec_nanos() == 0 => "day".to_owned(),
            _ => format!("{}ms", self.period.as_millis()),
        };
        write!(f, "{}/{unit}", self.count)?;
        if self.burst > 1 {
            write!(f, " burst {}", self.burst)?;
        }
        Ok(())
    }
}

impl FromStr for RateLimit {
    type Err = RateError;

    /// `<count>/<unit>`, the unit `second`, `minute`, `hour` or `day` (or `s`, `m`, `h`,
    /// `d`), then optionally `burst <n>`; spaces around the parts are allowed.
    fn from_str(text: &str) -> Result<Self, RateError> {
        let mut words = text.split_whitespace();
        let rate = words.next().ok_or(RateError::Syntax("empty"))?;
        let (count, unit) = rate
            .split_once('/')
            .ok_or(RateError::Syntax("no `/` between the count and the unit"))?;
        let count: u32 = count
            .parse()
            .map_err(|_| RateError::Syntax("the count is not a whole number"))?;
        let period = match unit {
            "second" | "s" => Duration::from_secs(1),
            "minute" | "m" => Duration::from_secs(60),
            "hour" | "h" => Duration::from_secs(3_600),
            "day" | "d" => DAY,
            _ => return Err(RateError::Syntax("an unknown unit")),
        };
        let limit = Self::new(count, period)?;
        match (words.next(), words.next(), words.next()) {
            (None, _, _) => Ok(limit),
            (Some("burst"), Some(burst), None) => {
                let burst = burst
                    .parse()
                    .map_err(|_| RateError::Syntax("the burst is not a whole number"))?;
                limit.with_burst(burst)
            }
            _ => Err(RateError::Syntax("only `burst <n>` may follow the rate")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_forms_parse_and_print_back() {
        for (text, count, secs, burst) in [
            ("10/minute", 10, 60, 1),
            ("5/s", 5, 1, 1),
            (" 100/h  burst 50 ", 100, 3_600, 50),
            ("1/day", 1, 86_400, 1),
        ] {
            let rate: RateLimit = text.parse().expect(text);
            assert_eq!(
                (rate.count(), rate.period(), rate.burst()),
                (count, Duration::from_secs(secs), burst)
            );
            assert_eq!(rate.to_string().parse::<RateLimit>(), Ok(rate));
        }
    }

    #[test]
    fn bad_rates_are_refused_with_their_reason() {
        assert_eq!("0/s".parse::<RateLimit>(), Err(RateError::ZeroCount));
        assert_eq!("5/s burst 6".parse::<RateLimit>(), Err(RateError::Burst));
        assert_eq!("5/s burst 0".parse::<RateLimit>(), Err(RateError::Burst));
        for bad in [
            "",
            "10",
            "10/fortnight",
            "-1/s",
            "1.5/s",
            "5/s burst",
            "5/s x 2",
        ] {
            assert!(
                matches!(bad.parse::<RateLimit>(), Err(RateError::Syntax(_))),
                "{bad:?}"
            );
        }
        assert_eq!(
            RateLimit::new(1, Duration::from_micros(10)),
            Err(RateError::Period)
        );
        assert_eq!(
            RateLimit::new(1, DAY + Duration::from_secs(1)),
            Err(RateError::Period)
        );
    }
}
