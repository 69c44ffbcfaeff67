//! The form in which kube-apiserver stores a resource quantity written by a client: what a
//! `"0.5"` sent in a `Quantity` field reads back as (`"500m"`).
//!
//! The API server decodes every `Quantity` field and encodes it again when it stores the
//! object. The encoding keeps the text the client sent when the decoder judged it canonical
//! already (an integer mantissa without three trailing zeros, an exponent that is a multiple
//! of three, a binary mantissa that is not a multiple of 8) and otherwise prints the canonical
//! form: the largest suffix of the same family (decimal SI, binary SI, decimal exponent) that
//! leaves an integer mantissa. Values finer than a nano are rounded up to 1n; binary values
//! below 1024 or with a fraction print as decimal SI. Measured against kube-apiserver 1.28.7
//! (the table in the tests).

use std::fmt;

/// Why the API server refuses a quantity (its error texts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuantityError {
    /// Not a number followed by a suffix.
    Format,
    /// A suffix that names no unit.
    Suffix,
    /// A mantissa that does not parse as a number.
    Numeric,
}

impl fmt::Display for QuantityError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            QuantityError::Format => {
                "quantities must match the regular expression \
                 '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
            }
            QuantityError::Suffix => "unable to parse quantity's suffix",
            QuantityError::Numeric => "unable to parse numeric part of quantity",
        })
    }
}

impl std::error::Error for QuantityError {}

/// The suffix family a quantity was written in; it is kept when the value is printed again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    DecimalSi,
    BinarySi,
    DecimalExponent,
}

/// A written quantity split as the API server's parser splits it.
struct Parts<'a> {
    negative: bool,
    /// Integer digits without leading zeros (`"0"` when there are none).
    num: &'a str,
    /// Fraction digits.
    denom: &'a str,
    suffix: &'a str,
}

/// The stored form of a quantity written as `text` (a JSON string's content, or the text of a
/// JSON number). `Ok(None)` when the value is too large for this implementation to print
/// (more than 38 significant digits); the caller then knows nothing about the stored form.
pub fn server_form(text: &str) -> Result<Option<String>, QuantityError> {
    let text = text.trim();
    if text.is_empty() {
        return Err(QuantityError::Format);
    }
    if text == "0" {
        return Ok(Some(text.to_string()));
    }
    let parts = split(text)?;
    let (base2, exponent, format) = interpret(parts.suffix).ok_or(QuantityError::Suffix)?;
    if let Some(fast) = fast_path(text, &parts, base2, exponent, format)? {
        return Ok(Some(fast));
    }
    Ok(slow_path(&parts, base2, exponent, format).map(|(m, e, f)| canonical(m, e, f)))
}

/// The stored form of a JSON quantity value (a string, or a number as the client encodes it);
/// `None` for other values, quantities the server refuses and unprintable ones.
pub fn server_form_of(value: &serde_json::Value) -> Option<String> {
    match value {
        serde_json::Value::String(s) => server_form(s).ok().flatten(),
        serde_json::Value::Number(n) => server_form(&n.to_string()).ok().flatten(),
        _ => None,
    }
}

fn digits_end(s: &str, from: usize) -> usize {
    s.as_bytes()[from..]
        .iter()
        .position(|b| !b.is_ascii_digit())
        .map_or(s.len(), |p| from + p)
}

/// Sign, integer digits, fraction digits and suffix, with the parser's leniencies (`1.`,
/// `.5`, leading zeros and `+`).
fn split(s: &str) -> Result<Parts<'_>, QuantityError> {
    let bytes = s.as_bytes();
    let (negative, mut pos) = match bytes.first() {
        Some(b'-') => (true, 1),
        Some(b'+') => (false, 1),
        _ => (false, 0),
    };
    while bytes.get(pos) == Some(&b'0') {
        pos += 1;
    }
    if pos == s.len() {
        return Ok(Parts {
            negative,
            num: "0",
            denom: "",
            suffix: "",
        });
    }
    let num_end = digits_end(s, pos);
    let num = if num_end == pos {
        "0"
    } else {
        &s[pos..num_end]
    };
    pos = num_end;
    let mut denom = "";
    if bytes.get(pos) == Some(&b'.') {
        let end = digits_end(s, pos + 1);
        denom = &s[pos + 1..end];
        pos = end;
    }
    let suffix_start = pos;
    while bytes.get(pos).is_some_and(|b| b"eEinumkKMGTP".contains(b)) {
        pos += 1;
    }
    if matches!(bytes.get(pos), Some(b'-' | b'+')) {
        pos += 1;
    }
    if digits_end(s, pos) != s.len() {
        return Err(QuantityError::Format);
    }
    Ok(Parts {
        negative,
        num,
        denom,
        suffix: &s[suffix_start..],
    })
}

/// (base is 2, exponent, format) of a suffix.
fn interpret(suffix: &str) -> Option<(bool, i32, Format)> {
    let decimal = |e| Some((false, e, Format::DecimalSi));
    let binary = |e| Some((true, e, Format::BinarySi));
    match suffix {
        "n" => decimal(-9),
        "u" => decimal(-6),
        "m" => decimal(-3),
        "" => decimal(0),
        "k" => decimal(3),
        "M" => decimal(6),
        "G" => decimal(9),
        "T" => decimal(12),
        "P" => decimal(15),
        "E" => decimal(18),
        "Ki" => binary(10),
        "Mi" => binary(20),
        "Gi" => binary(30),
        "Ti" => binary(40),
        "Pi" => binary(50),
        "Ei" => binary(60),
        s if s.len() > 1 && s.starts_with(['e', 'E']) => {
            let e: i64 = s[1..].parse().ok()?;
            // The server keeps 32 bits of it; larger ones are nonsense either way.
            i32::try_from(e)
                .ok()
                .map(|e| (false, e, Format::DecimalExponent))
        }
        _ => None,
    }
}

/// The parser's 64-bit path: small enough mantissas keep the client's text when it looks
/// canonical, else print canonically. `None` when the slow path decides.
fn fast_path(
    text: &str,
    parts: &Parts<'_>,
    base2: bool,
    exponent: i32,
    format: Format,
) -> Result<Option<String>, QuantityError> {
    let digits = (parts.num.len() + parts.denom.len()) as i32;
    let (precision, mut scale, multiplier) = if !base2 {
        (18 - digits, exponent, 1i64)
    } else if parts.denom.is_empty() {
        // kube computes this in float32: exponent*3/10 is exact for multiples of ten.
        let precision = 15 - parts.num.len() as i32 - exponent * 3 / 10 - 1;
        (precision, 0, 1i64 << exponent.clamp(0, 62))
    } else {
        (-1, 0, 1)
    };
    if precision < 0 {
        return Ok(None);
    }
    scale -= parts.denom.len() as i32;
    if scale < -9 {
        return Ok(None);
    }
    let shifted = format!("{}{}", parts.num, parts.denom);
    let value: i64 = shifted.parse().map_err(|_| QuantityError::Numeric)?;
    let Some(mut result) = value.checked_mul(multiplier) else {
        return Ok(None);
    };
    if parts.negative {
        result = -result;
    }
    let keeps_text = if format == Format::BinarySi {
        exponent % 10 == 0 && value & 7 != 0
    } else {
        scale % 3 == 0 && !shifted.ends_with("000") && !shifted.starts_with('0')
    };
    Ok(Some(if keeps_text {
        text.to_string()
    } else {
        canonical(i128::from(result), scale, format)
    }))
}

/// The parser's arbitrary-precision path: the exact value as `mantissa × 10^exp`, rounded up
/// (away from zero) to whole nanos. `None` beyond 36 significant digits.
fn slow_path(
    parts: &Parts<'_>,
    base2: bool,
    exponent: i32,
    format: Format,
) -> Option<(i128, i32, Format)> {
    let digits = format!("{}{}", parts.num, parts.denom);
    let digits = digits.trim_start_matches('0');
    if digits.len() > 36 {
        return None;
    }
    let mut m: i128 = if digits.is_empty() {
        0
    } else {
        digits.parse().ok()?
    };
    let mut e = -(parts.denom.len() as i32);
    if base2 {
        for _ in 0..exponent {
            m = m.checked_mul(2)?;
        }
    } else {
        e = e.checked_add(exponent)?;
    }
    if m != 0 && e < -9 {
        let shift = (-9 - e) as u32;
        m = match 10i128.checked_pow(shift) {
            Some(p) => m / p + i128::from(m % p != 0),
            None => 1,
        };
        e = -9;
    }
    // A binary value below one prints as decimal SI (after rounding, e >= -9 when m != 0).
    let below_one = m != 0 && e < 0 && 10i128.checked_pow((-e) as u32).is_some_and(|p| m < p);
    let format = if format == Format::BinarySi && below_one {
        Format::DecimalSi
    } else {
        format
    };
    Some((if parts.negative { -m } else { m }, e, format))
}

/// `mantissa × 10^exp` printed canonically in `format` (the encoder's rules).
fn canonical(mantissa: i128, exp: i32, format: Format) -> String {
    if mantissa == 0 {
        return "0".to_string();
    }
    let (mut m, mut e) = (mantissa, exp);
    while m % 10 == 0 {
        m /= 10;
        e += 1;
    }
    if format == Format::BinarySi {
        if let Some(text) = binary(m, e) {
            return text;
        }
    }
    while e.rem_euclid(3) != 0 {
        // At most two steps on at most 38 digits: fits.
        m = m.saturating_mul(10);
        e -= 1;
    }
    let suffix = match (format, e) {
        (Format::DecimalExponent, 0) => String::new(),
        (Format::DecimalExponent, e) => format!("e{e}"),
        (_, -9) => "n".into(),
        (_, -6) => "u".into(),
        (_, -3) => "m".into(),
        (_, 0) => String::new(),
        (_, 3) => "k".into(),
        (_, 6) => "M".into(),
        (_, 9) => "G".into(),
        (_, 12) => "T".into(),
        (_, 15) => "P".into(),
        (_, 18) => "E".into(),
        // Outside the SI table kube prints the mantissa without a suffix.
        _ => String::new(),
    };
    format!("{m}{suffix}")
}

/// Binary SI print of `m × 10^e` (no factor ten left in `m`): only for integers of magnitude
/// 1024 or more, else `None` (printed as decimal SI).
fn binary(m: i128, e: i32) -> Option<String> {
    if e < 0 {
        return None;
    }
    let mut v = m.checked_mul(10i128.checked_pow(e as u32)?)?;
    if v.abs() < 1024 {
        return None;
    }
    if v > i128::from(i64::MAX) {
        // Measured: a binary value beyond 64 bits is stored as the largest one.
        return Some(i64::MAX.to_string());
    }
    let mut power = 0;
    while v.abs() >= 1024 && v % 1024 == 0 && power < 6 {
        v /= 1024;
        power += 1;
    }
    let suffix = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"][power];
    Some(format!("{v}{suffix}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sent → stored, as kube-apiserver 1.28.7 answered (HPA external metric targets, dry run).
    const MEASURED: [(&str, &str); 48] = [
        ("1000E", "1"),
        ("2048Ei", "9223372036854775807"),
        ("0.5Gi", "512Mi"),
        ("1.5k", "1500"),
        ("2e1", "20"),
        ("1e2", "100"),
        ("10000m", "10"),
        ("0.1m", "100u"),
        ("1n", "1n"),
        ("0.5n", "1n"),
        ("0.0000000001", "1n"),
        ("1.5", "1500m"),
        ("1.5Gi", "1536Mi"),
        ("0.5Ki", "512"),
        ("1.1Gi", "1181116006400m"),
        ("1024", "1024"),
        ("1023", "1023"),
        ("1e3", "1e3"),
        ("1.5e3", "1500"),
        ("12e-1", "1200e-3"),
        ("1E3", "1E3"),
        ("1E", "1E"),
        ("10E", "10E"),
        ("1.", "1."),
        ("0.25Gi", "256Mi"),
        ("2048Mi", "2Gi"),
        ("1000000Ki", "1000000Ki"),
        ("1k", "1k"),
        ("1000m", "1"),
        ("100m", "100m"),
        ("0.001", "1m"),
        ("1.000", "1"),
        ("+5", "+5"),
        ("007", "007"),
        ("1e-9", "1e-9"),
        ("3e-10", "1e-9"),
        ("1.5Mi", "1536Ki"),
        ("1536", "1536"),
        ("0.5Mi", "512Ki"),
        ("1Gi", "1Gi"),
        ("3Ki", "3Ki"),
        ("1.2345", "1234500u"),
        ("12345678901234567890", "12345678901234567890"),
        ("9223372036854775807", "9223372036854775807"),
        ("1e18", "1e18"),
        ("5e-3", "5e-3"),
        ("1Ei", "1Ei"),
        ("0.1", "100m"),
    ];

    #[test]
    fn stored_forms_match_kube_apiserver() {
        for (sent, stored) in MEASURED {
            assert_eq!(
                server_form(sent),
                Ok(Some(stored.to_string())),
                "{sent} is stored as {stored}"
            );
        }
    }

    #[test]
    fn numbers_and_space() {
        assert_eq!(server_form(" 1 "), Ok(Some("1".into())));
        assert_eq!(
            server_form_of(&serde_json::json!(0.5)).as_deref(),
            Some("500m")
        );
        assert_eq!(server_form_of(&serde_json::json!(2)).as_deref(), Some("2"));
        assert_eq!(server_form_of(&serde_json::json!(true)), None);
    }

    #[test]
    fn refusals_match_kube_apiserver() {
        for bad in ["abc", "1x", "", "1.5.5"] {
            assert_eq!(server_form(bad), Err(QuantityError::Format), "{bad}");
        }
        for bad in ["1Kii", "--1", "1e+"] {
            assert_eq!(server_form(bad), Err(QuantityError::Suffix), "{bad}");
        }
    }
}
