//! Go `time.Duration` string syntax, as used by `metav1.Duration` fields (hook
//! `timeout`) and by upstream's duration flags (`--discovery-interval=30s`).

use std::time::Duration;

/// Why a string is not a Go duration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid duration {input:?}: {reason} (expected a Go duration such as 500ms, 10s, 5m or 1h30m)"
)]
pub struct DurationParseError {
    input: String,
    reason: &'static str,
}

/// Parses Go's duration syntax: an optional sign, then one or more `<number><unit>`
/// pairs (units `ns`, `us`, `µs`, `ms`, `s`, `m`, `h`; numbers may have a fraction),
/// or the bare string `0`. Negative durations are rejected because no Metacontroller
/// setting has a meaning for them.
pub fn parse_go_duration(input: &str) -> Result<Duration, DurationParseError> {
    let err = |reason| DurationParseError {
        input: input.to_string(),
        reason,
    };
    let mut rest = input.strip_prefix('+').unwrap_or(input);
    if let Some(magnitude) = rest.strip_prefix('-') {
        if magnitude == "0" {
            return Ok(Duration::ZERO);
        }
        return Err(err("negative durations are not allowed"));
    }
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    if rest.is_empty() {
        return Err(err("empty string"));
    }
    let mut total_nanos: u128 = 0;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number = &rest[..num_len];
        if number.is_empty() || number == "." || number.matches('.').count() > 1 {
            return Err(err("expected a number"));
        }
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let unit = &rest[..unit_len];
        rest = &rest[unit_len..];
        let unit_nanos: u128 = match unit {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60 * 1_000_000_000,
            "h" => 3_600 * 1_000_000_000,
            "" => return Err(err("missing unit")),
            _ => return Err(err("unknown unit")),
        };
        let (whole, frac) = number.split_once('.').unwrap_or((number, ""));
        let whole: u128 = if whole.is_empty() {
            0
        } else {
            whole.parse().map_err(|_| err("number too large"))?
        };
        let mut nanos = whole
            .checked_mul(unit_nanos)
            .ok_or_else(|| err("number too large"))?;
        // Fractions are scaled digit by digit so that "1.5h" is exact.
        let mut scale = unit_nanos;
        for digit in frac.bytes() {
            scale /= 10;
            if scale == 0 {
                break;
            }
            nanos += u128::from(digit - b'0') * scale;
        }
        total_nanos = total_nanos
            .checked_add(nanos)
            .ok_or_else(|| err("number too large"))?;
    }
    // Go durations are int64 nanoseconds.
    if total_nanos > i64::MAX as u128 {
        return Err(err("number too large"));
    }
    Ok(Duration::from_nanos(total_nanos as u64))
}

/// Formats a duration the way Go's `Duration.String()` does (`1h30m0s`, `500ms`, `0s`),
/// so values round-trip through our types unchanged in meaning.
pub fn format_go_duration(d: Duration) -> String {
    let nanos = d.as_nanos();
    if nanos == 0 {
        return "0s".to_string();
    }
    if nanos < 1_000 {
        return format!("{nanos}ns");
    }
    if nanos < 1_000_000 {
        return format!("{}µs", trim_fraction(nanos, 1_000));
    }
    if nanos < 1_000_000_000 {
        return format!("{}ms", trim_fraction(nanos, 1_000_000));
    }
    let hours = nanos / 3_600_000_000_000;
    let minutes = (nanos / 60_000_000_000) % 60;
    let sec_nanos = nanos % 60_000_000_000;
    let seconds = trim_fraction(sec_nanos, 1_000_000_000);
    if hours > 0 {
        format!("{hours}h{minutes}m{seconds}s")
    } else if minutes > 0 {
        format!("{minutes}m{seconds}s")
    } else {
        format!("{seconds}s")
    }
}

fn trim_fraction(value: u128, unit: u128) -> String {
    let whole = value / unit;
    let frac = value % unit;
    if frac == 0 {
        return whole.to_string();
    }
    let width = unit.ilog10() as usize;
    let digits = format!("{frac:0width$}");
    format!("{whole}.{}", digits.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_go_forms() {
        let ms = Duration::from_millis;
        assert_eq!(parse_go_duration("10s"), Ok(ms(10_000)));
        assert_eq!(parse_go_duration("500ms"), Ok(ms(500)));
        assert_eq!(parse_go_duration("1m30s"), Ok(ms(90_000)));
        assert_eq!(parse_go_duration("1.5h"), Ok(ms(5_400_000)));
        assert_eq!(parse_go_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_go_duration("2h45m0.5s"), Ok(ms(9_900_500)));
        assert_eq!(parse_go_duration("100us"), Ok(Duration::from_micros(100)));
        assert_eq!(parse_go_duration("1µs"), Ok(Duration::from_micros(1)));
        assert_eq!(parse_go_duration(".5s"), Ok(ms(500)));
    }

    #[test]
    fn rejects_bad_input() {
        for bad in ["", "10", "s", "1x", "-1s", "1..5s", "abc", "1s2"] {
            assert!(parse_go_duration(bad).is_err(), "{bad} should be rejected");
        }
        let msg = parse_go_duration("10").unwrap_err().to_string();
        assert!(
            msg.contains("missing unit") && msg.contains("1h30m"),
            "{msg}"
        );
    }

    #[test]
    fn formats_like_go() {
        assert_eq!(format_go_duration(Duration::from_secs(10)), "10s");
        assert_eq!(format_go_duration(Duration::from_secs(5400)), "1h30m0s");
        assert_eq!(format_go_duration(Duration::from_millis(500)), "500ms");
        assert_eq!(format_go_duration(Duration::from_millis(1500)), "1.5s");
        assert_eq!(format_go_duration(Duration::ZERO), "0s");
        for s in ["10s", "1h30m0s", "500ms", "2m0.25s"] {
            let d = parse_go_duration(s).unwrap();
            assert_eq!(format_go_duration(d), s);
        }
    }
}
