//! Human-friendly durations ("250ms", "1h30m") and sizes ("10MiB") as written in weir.toml.

use std::time::Duration;

use thiserror::Error;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DurationError {
    #[error("\"{0}\" is not a duration (use e.g. 250ms, 30s, 15m)")]
    Invalid(String),
    #[error("\"{0}\" is too long a duration")]
    TooLarge(String),
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SizeError {
    #[error("\"{0}\" is not a size (use e.g. 65536, 64KiB, 10MiB)")]
    Invalid(String),
    #[error("\"{0}\" is too large a size")]
    TooLarge(String),
}

/// Parses `"0"`, `"250ms"`, `"30s"`, `"15m"`, `"1h"`, `"2d"`, `"500us"` and sums like `"1h30m"`.
/// A bare integer is milliseconds, as in Artemis's `redelivery-delay` and friends.
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    let invalid = || DurationError::Invalid(text.to_owned());
    let too_large = || DurationError::TooLarge(text.to_owned());
    let s = text.trim();
    if s.is_empty() {
        return Err(invalid());
    }
    if s.bytes().all(|b| b.is_ascii_digit()) {
        return s
            .parse::<u64>()
            .map(Duration::from_millis)
            .map_err(|_| too_large());
    }
    let mut total = Duration::ZERO;
    let mut rest = s;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        let unit_len = rest[digits..]
            .bytes()
            .take_while(u8::is_ascii_alphabetic)
            .count();
        if digits == 0 || unit_len == 0 {
            return Err(invalid());
        }
        let amount: u64 = rest[..digits].parse().map_err(|_| too_large())?;
        let unit = &rest[digits..digits + unit_len];
        let part = match unit {
            "us" => Some(Duration::from_micros(amount)),
            "ms" => Some(Duration::from_millis(amount)),
            "s" => Some(Duration::from_secs(amount)),
            "m" => amount.checked_mul(60).map(Duration::from_secs),
            "h" => amount.checked_mul(3_600).map(Duration::from_secs),
            "d" => amount.checked_mul(86_400).map(Duration::from_secs),
            _ => return Err(invalid()),
        };
        total = part
            .and_then(|p| total.checked_add(p))
            .ok_or_else(too_large)?;
        rest = &rest[digits + unit_len..];
    }
    Ok(total)
}

/// Parses a byte count: a bare integer, or a number with one of B, KB, MB, GB
/// (powers of 1000) or KiB, MiB, GiB (powers of 1024), optionally space-separated.
pub fn parse_size(text: &str) -> Result<u64, SizeError> {
    let invalid = || SizeError::Invalid(text.to_owned());
    let s = text.trim();
    let digits = s.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return Err(invalid());
    }
    let amount: u64 = s[..digits]
        .parse()
        .map_err(|_| SizeError::TooLarge(text.to_owned()))?;
    let multiplier: u64 = match s[digits..].trim_start() {
        "" | "B" => 1,
        "KB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        _ => return Err(invalid()),
    };
    amount
        .checked_mul(multiplier)
        .ok_or_else(|| SizeError::TooLarge(text.to_owned()))
}

/// The inverse of [`parse_duration`] for messages: the largest unit that divides exactly.
pub fn format_duration(d: Duration) -> String {
    if d.is_zero() {
        return "0".to_owned();
    }
    if d.subsec_nanos() == 0 {
        let secs = d.as_secs();
        for (unit, per) in [("d", 86_400), ("h", 3_600), ("m", 60)] {
            if secs.is_multiple_of(per) {
                return format!("{}{unit}", secs / per);
            }
        }
        return format!("{secs}s");
    }
    if d.subsec_nanos().is_multiple_of(1_000_000) {
        return format!("{}ms", d.as_millis());
    }
    format!("{}us", d.as_micros())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_in_every_unit() {
        let ok = [
            ("0", Duration::ZERO),
            ("0s", Duration::ZERO),
            ("250", Duration::from_millis(250)),
            ("250ms", Duration::from_millis(250)),
            ("500us", Duration::from_micros(500)),
            ("30s", Duration::from_secs(30)),
            ("15m", Duration::from_secs(900)),
            ("1h", Duration::from_secs(3_600)),
            ("2d", Duration::from_secs(172_800)),
            ("1h30m", Duration::from_secs(5_400)),
            (" 10s ", Duration::from_secs(10)),
        ];
        for (text, want) in ok {
            assert_eq!(parse_duration(text), Ok(want), "{text}");
        }
    }

    #[test]
    fn bad_durations_are_refused() {
        for text in [
            "", "15x", "s", "1.5s", "-1s", "10 s", "1h 30m", "ms10", "1S",
        ] {
            assert_eq!(
                parse_duration(text),
                Err(DurationError::Invalid(text.to_owned())),
                "{text}"
            );
        }
        assert!(matches!(
            parse_duration("99999999999999999999d"),
            Err(DurationError::TooLarge(_))
        ));
        assert!(matches!(
            parse_duration("999999999999999999d"),
            Err(DurationError::TooLarge(_))
        ));
    }

    #[test]
    fn sizes_in_every_unit() {
        let ok = [
            ("0", 0),
            ("1024", 1024),
            ("512B", 512),
            ("64KiB", 65_536),
            ("10MiB", 10 << 20),
            ("1GiB", 1 << 30),
            ("64KB", 64_000),
            ("10MB", 10_000_000),
            ("2GB", 2_000_000_000),
            ("10 MiB", 10 << 20),
        ];
        for (text, want) in ok {
            assert_eq!(parse_size(text), Ok(want), "{text}");
        }
    }

    #[test]
    fn bad_sizes_are_refused() {
        for text in ["", "MiB", "10XB", "1.5MiB", "-3", "10mib", "10 M"] {
            assert_eq!(
                parse_size(text),
                Err(SizeError::Invalid(text.to_owned())),
                "{text}"
            );
        }
        assert!(matches!(
            parse_size("99999999999GiB"),
            Err(SizeError::TooLarge(_))
        ));
    }

    #[test]
    fn formatting_round_trips() {
        for text in [
            "0", "250ms", "500us", "30s", "15m", "1h", "2d", "90s", "1500ms",
        ] {
            let d = parse_duration(text).unwrap_or_default();
            assert_eq!(parse_duration(&format_duration(d)), Ok(d), "{text}");
        }
        assert_eq!(format_duration(Duration::from_secs(900)), "15m");
        assert_eq!(format_duration(Duration::from_millis(1_500)), "1500ms");
    }
}
