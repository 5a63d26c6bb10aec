//! A JSON number read from its text, exactly: never through a float.
//!
//! The text is split into a sign, its significant digits and a power of ten, so that
//! `100.0000000000000001` stays one part in 10^18 over 100 (an `f64` reads it as 100), and
//! `1e1`, `10.0` and `1.0e+1` are all the integer 10. From there a number becomes a Cedar
//! `Long` when it is an integer in the JSON Schema sense (its fractional part is zero) and
//! fits 64 bits, or a Cedar `decimal` when it has at most four decimal places and fits the
//! decimal's range (±922337203685477.5808, Cedar stores ten-thousandths in an `i64`).
//! Anything else has no exact Cedar form and is refused: never rounded.

/// The most significant digits a number can have and still fit 64 bits once scaled (19), with
/// room to spare; more is refused before any arithmetic.
const MAX_DIGITS: usize = 38;

/// Ten-thousandths: the unit of Cedar's `decimal`.
const DECIMAL_PLACES: i64 = 4;

/// `±digits × 10^exponent`, with no trailing zero in `digits` (zero is `0 × 10^0`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Exact {
    negative: bool,
    digits: u128,
    exponent: i64,
}

/// Whether `text` is one or more ASCII digits.
fn all_digits(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit())
}

/// Reads a JSON number's text (RFC 8259 grammar). `None` when it is not one, or when its
/// significant digits are too many to be anything Cedar holds.
fn read(text: &str) -> Option<Exact> {
    let (negative, unsigned) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (mantissa, power) = match unsigned.split_once(['e', 'E']) {
        Some((mantissa, power)) => (mantissa, Some(power)),
        None => (unsigned, None),
    };
    let (whole, fraction) = match mantissa.split_once('.') {
        Some((whole, fraction)) if all_digits(fraction) => (whole, fraction),
        Some(_) => return None,
        None => (mantissa, ""),
    };
    if !all_digits(whole) {
        return None;
    }
    let power = match power {
        None => Some(0),
        Some(power) => {
            let unsigned = power.strip_prefix(['+', '-']).unwrap_or(power);
            if !all_digits(unsigned) {
                return None;
            }
            // Too large for an i64: only zero survives such a power (checked below).
            power.parse::<i64>().ok()
        }
    };
    let digits = || whole.bytes().chain(fraction.bytes());
    let leading = digits().take_while(|&b| b == b'0').count();
    let total = whole.len() + fraction.len();
    if leading == total {
        return Some(Exact {
            negative,
            digits: 0,
            exponent: 0,
        });
    }
    let trailing = digits().rev().take_while(|&b| b == b'0').count();
    let significant = total - leading - trailing;
    if significant > MAX_DIGITS {
        return None;
    }
    let value = digits()
        .skip(leading)
        .take(significant)
        .fold(0u128, |value, b| value * 10 + u128::from(b - b'0'));
    let fraction_len = i64::try_from(fraction.len()).ok()?;
    let trailing = i64::try_from(trailing).ok()?;
    let exponent = power?.checked_sub(fraction_len)?.checked_add(trailing)?;
    Some(Exact {
        negative,
        digits: value,
        exponent,
    })
}

/// `digits × 10^power` as a signed 64-bit integer, if it is one.
fn scaled(exact: Exact, power: i64) -> Option<i64> {
    let power = u32::try_from(power).ok()?;
    let magnitude = exact.digits.checked_mul(10u128.checked_pow(power)?)?;
    let magnitude = i128::try_from(magnitude).ok()?;
    i64::try_from(if exact.negative {
        -magnitude
    } else {
        magnitude
    })
    .ok()
}

/// The integer `text` says, when it says one (a zero fractional part, in any spelling) that
/// fits 64 bits. `-0` is 0.
pub(super) fn integer(text: &str) -> Option<i64> {
    let exact = read(text)?;
    if exact.digits == 0 {
        return Some(0);
    }
    scaled(exact, exact.exponent)
}

/// The Cedar `decimal` text (`"-1.5000"`) of the number `text` says, when it has at most four
/// decimal places and is in the decimal's range. `-0` is `"0.0000"`.
pub(super) fn decimal(text: &str) -> Option<String> {
    let exact = read(text)?;
    let units = if exact.digits == 0 {
        0
    } else {
        scaled(exact, exact.exponent.checked_add(DECIMAL_PLACES)?)?
    };
    let sign = if units < 0 { "-" } else { "" };
    let magnitude = units.unsigned_abs();
    Some(format!(
        "{sign}{}.{:04}",
        magnitude / 10_000,
        magnitude % 10_000
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_in_the_json_schema_sense() {
        for (text, expected) in [
            ("10", Some(10)),
            ("10.0", Some(10)),
            ("1e1", Some(10)),
            ("1E1", Some(10)),
            ("1.0e+1", Some(10)),
            ("100e-1", Some(10)),
            ("0.1e2", Some(10)),
            ("-0", Some(0)),
            ("-0.0e-5", Some(0)),
            ("0e999999999999999999999", Some(0)),
            ("-9223372036854775808", Some(i64::MIN)),
            ("9223372036854775807", Some(i64::MAX)),
            (
                "9223372036854775807.000000000000000000000000000000000000000000",
                Some(i64::MAX),
            ),
            ("9.223372036854775807e18", Some(i64::MAX)),
            ("9223372036854775808", None),
            ("-9223372036854775809", None),
            ("1e19", None),
            ("1e400", None),
            ("1e999999999999999999999", None),
            ("1.5", None),
            ("1e-1", None),
            ("1e-400", None),
            ("100.0000000000000001", None),
            ("123456789012345678901234567890123456789012345", None),
        ] {
            assert_eq!(integer(text), expected, "{text}");
        }
    }

    #[test]
    fn decimals_exactly_or_not_at_all() {
        for (text, expected) in [
            ("100", Some("100.0000")),
            ("100.0000000000000000000", Some("100.0000")),
            ("1e2", Some("100.0000")),
            ("10000e-2", Some("100.0000")),
            ("1.5", Some("1.5000")),
            ("-0.25", Some("-0.2500")),
            ("0.0001", Some("0.0001")),
            ("1e-4", Some("0.0001")),
            ("-0", Some("0.0000")),
            ("-0.0", Some("0.0000")),
            ("922337203685477.5807", Some("922337203685477.5807")),
            ("-922337203685477.5808", Some("-922337203685477.5808")),
            ("922337203685477.5808", None),
            ("-922337203685477.5809", None),
            ("100.0000000000000001", None),
            ("99.99995", None),
            ("0.00001", None),
            ("1e-400", None),
            ("1e20", None),
            ("1e300", None),
        ] {
            assert_eq!(decimal(text).as_deref(), expected, "{text}");
        }
    }

    #[test]
    fn what_is_not_a_json_number_is_refused() {
        // The layer reads numbers only from text it has already parsed; these never reach it,
        // and are refused all the same.
        for text in [
            "", "-", "1.", ".5", "1e", "1e+", "+1", "0x10", "1.5.2", "1e1.5", "--1", " 1",
        ] {
            assert_eq!(integer(text), None, "{text:?}");
            assert_eq!(decimal(text), None, "{text:?}");
        }
    }
}
