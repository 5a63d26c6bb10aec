//! The one wall clock: now as milliseconds since the Unix epoch, and such an instant as the
//! RFC 3339 text the wire carries. Deadlines, continuation states, replay memories and task
//! records all read the time here.

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch, by this machine's clock (0 if the clock is before 1970).
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// Renders milliseconds since the Unix epoch as RFC 3339 UTC with whole seconds:
/// `2026-09-01T10:00:00Z`. Milliseconds are truncated.
///
/// ```
/// assert_eq!(mcp_gate::tasks::rfc3339(1_788_256_800_000), "2026-09-01T10:00:00Z");
/// assert_eq!(mcp_gate::tasks::rfc3339(951_868_799_999), "2000-02-29T23:59:59Z");
/// ```
pub fn rfc3339(ms: u64) -> String {
    let secs = ms / 1000;
    let days = secs / 86_400;
    let in_day = secs % 86_400;
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        in_day / 3600,
        in_day % 3600 / 60,
        in_day % 60
    )
}

/// Renders milliseconds since the Unix epoch as RFC 3339 UTC with milliseconds:
/// `2026-09-01T10:00:00.250Z` (audit records, which order events within a second).
pub(crate) fn rfc3339_ms(ms: u64) -> String {
    let whole = rfc3339(ms);
    let stem = whole.strip_suffix('Z').unwrap_or(&whole);
    format!("{stem}.{:03}Z", ms % 1000)
}

/// The proleptic Gregorian date `days` days after 1970-01-01.
///
/// Counts in a calendar whose year starts on 1 March, so the leap day is the last day of its
/// year and every month but February has a fixed place. The calendar repeats every 400 years
/// (146 097 days); within such an era, a year has 365 days plus one every 4 years, less one
/// every 100, plus one every 400.
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    const ERA_DAYS: u64 = 146_097;
    // Days from 0000-03-01 to 1970-01-01.
    let day_number = days + 719_468;
    let era = day_number / ERA_DAYS;
    let day_of_era = day_number % ERA_DAYS; // 0..=146_096
    // Remove the leap days (every 4th year, not every 100th, every 400th) seen so far to find
    // the year of the era: the fixups line day_of_era up with a 365-day year.
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365; // 0..=399
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100); // 0..=365
    // Months from March have lengths 31 30 31 30 31 31 30 31 30 31 31 29|28, which
    // (153 * m + 2) / 5 reproduces as cumulative starts for m = 0 (March) ..= 11 (February).
    let march_month = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * march_month + 2) / 5 + 1;
    let month = if march_month < 10 {
        march_month + 3
    } else {
        march_month - 9
    };
    let year = era * 400 + year_of_era + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn is_leap(year: u64) -> bool {
        (year.is_multiple_of(4) && !year.is_multiple_of(100)) || year.is_multiple_of(400)
    }

    fn month_days(year: u64, month: u64) -> u64 {
        match month {
            2 if is_leap(year) => 29,
            2 => 28,
            4 | 6 | 9 | 11 => 30,
            _ => 31,
        }
    }

    /// The slow, obvious answer: walk years, then months.
    fn civil_by_counting(mut days: u64) -> (u64, u64, u64) {
        let mut year = 1970;
        loop {
            let len = if is_leap(year) { 366 } else { 365 };
            if days < len {
                break;
            }
            days -= len;
            year += 1;
        }
        let mut month = 1;
        while days >= month_days(year, month) {
            days -= month_days(year, month);
            month += 1;
        }
        (year, month, days + 1)
    }

    #[test]
    fn known_instants() {
        // Each checked against `date -u -d @<seconds>`.
        let cases = [
            (0, "1970-01-01T00:00:00Z"),
            (999, "1970-01-01T00:00:00Z"),
            (68_212_800_000, "1972-02-29T12:00:00Z"),
            (951_868_799_000, "2000-02-29T23:59:59Z"),
            (951_868_800_000, "2000-03-01T00:00:00Z"),
            (1_735_689_599_000, "2024-12-31T23:59:59Z"),
            (1_709_164_800_000, "2024-02-29T00:00:00Z"),
            (1_788_256_800_000, "2026-09-01T10:00:00Z"),
            (1_788_257_100_123, "2026-09-01T10:05:00Z"),
            (4_107_542_399_000, "2100-02-28T23:59:59Z"),
            (4_107_542_400_000, "2100-03-01T00:00:00Z"),
            (253_402_300_799_000, "9999-12-31T23:59:59Z"),
        ];
        for (ms, text) in cases {
            assert_eq!(rfc3339(ms), text, "{ms}");
        }
    }

    #[test]
    fn leap_years_follow_the_gregorian_rules() {
        // 2000 is a leap year (divisible by 400), 2100 is not (by 100), 2024 is (by 4).
        let day_after_feb_28 = |year: u64| {
            let mut days = 0;
            for y in 1970..year {
                days += if is_leap(y) { 366 } else { 365 };
            }
            civil_from_days(days + 31 + 28)
        };
        assert_eq!(day_after_feb_28(2000), (2000, 2, 29));
        assert_eq!(day_after_feb_28(2024), (2024, 2, 29));
        assert_eq!(day_after_feb_28(2100), (2100, 3, 1));
        assert_eq!(day_after_feb_28(2023), (2023, 3, 1));
        assert_eq!(day_after_feb_28(2400), (2400, 2, 29));
    }

    #[test]
    fn every_day_of_three_centuries_matches_counting() {
        let mut expected = (1970, 1, 1);
        for days in 0..(365 * 330) {
            assert_eq!(civil_from_days(days), expected, "day {days}");
            let (y, m, d) = expected;
            expected = if d < month_days(y, m) {
                (y, m, d + 1)
            } else if m < 12 {
                (y, m + 1, 1)
            } else {
                (y + 1, 1, 1)
            };
        }
    }

    proptest! {
        #[test]
        fn far_dates_match_counting(days in 0u64..3_000_000) {
            prop_assert_eq!(civil_from_days(days), civil_by_counting(days));
        }
    }
}
