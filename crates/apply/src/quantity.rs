//! Exact comparison of Kubernetes resource quantities (`500m`, `0.5`, `1Gi`, `1073741824`,
//! `1e3`): the API server canonicalises them, so a desired `1000m` comes back as `1`.

/// A quantity as `mantissa × 10^exp10 × 2^exp2`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Parsed {
    mantissa: i128,
    exp10: i32,
    exp2: i32,
}

fn parse(s: &str) -> Option<Parsed> {
    let s = s.trim();
    let (neg, rest) = match s.as_bytes().first()? {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let num_end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    let (num, suffix) = rest.split_at(num_end);
    if num.is_empty() || num == "." || num.matches('.').count() > 1 {
        return None;
    }
    let (int_part, frac_part) = num.split_once('.').unwrap_or((num, ""));
    let digits = format!("{int_part}{frac_part}");
    if digits.len() > 36 {
        return None;
    }
    let mut mantissa: i128 = digits.parse().ok()?;
    let mut exp10 = -(frac_part.len() as i32);
    let mut exp2 = 0;
    match suffix {
        "" => {}
        "n" => exp10 -= 9,
        "u" => exp10 -= 6,
        "m" => exp10 -= 3,
        "k" => exp10 += 3,
        "M" => exp10 += 6,
        "G" => exp10 += 9,
        "T" => exp10 += 12,
        "P" => exp10 += 15,
        "E" => exp10 += 18,
        "Ki" => exp2 = 10,
        "Mi" => exp2 = 20,
        "Gi" => exp2 = 30,
        "Ti" => exp2 = 40,
        "Pi" => exp2 = 50,
        "Ei" => exp2 = 60,
        other => {
            let exp = other.strip_prefix(['e', 'E'])?;
            let e: i32 = exp.parse().ok()?;
            if e.abs() > 100 {
                return None;
            }
            exp10 += e;
        }
    }
    if neg {
        mantissa = -mantissa;
    }
    // Normalise: strip factors of ten and two so equal values compare equal cheaply.
    if mantissa == 0 {
        return Some(Parsed {
            mantissa: 0,
            exp10: 0,
            exp2: 0,
        });
    }
    while mantissa % 10 == 0 {
        mantissa /= 10;
        exp10 += 1;
    }
    Some(Parsed {
        mantissa,
        exp10,
        exp2,
    })
}

/// Value as `m × 10^e` with `e` possibly negative and no factor 2^k left, or `None` on
/// overflow.
fn to_decimal(p: Parsed) -> Option<(i128, i32)> {
    let mut m = p.mantissa;
    for _ in 0..p.exp2 {
        m = m.checked_mul(2)?;
    }
    let mut e = p.exp10;
    if m != 0 {
        while m % 10 == 0 {
            m /= 10;
            e += 1;
        }
    }
    Some((m, e))
}

/// True when both strings are quantities of exactly the same value.
pub(crate) fn quantity_eq(a: &str, b: &str) -> bool {
    let (Some(pa), Some(pb)) = (parse(a), parse(b)) else {
        return false;
    };
    if pa == pb {
        return true;
    }
    match (to_decimal(pa), to_decimal(pb)) {
        (Some(x), Some(y)) => x == y,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::quantity_eq;

    #[test]
    fn equal_quantities() {
        for (a, b) in [
            ("1", "1000m"),
            ("0.5", "500m"),
            ("1Gi", "1073741824"),
            ("1Ki", "1024"),
            ("1k", "1000"),
            ("1e3", "1k"),
            ("100Mi", "104857600"),
            ("0", "0m"),
            ("1.5Gi", "1536Mi"),
            ("+1", "1"),
        ] {
            assert!(quantity_eq(a, b), "{a} == {b}");
            assert!(quantity_eq(b, a), "{b} == {a}");
        }
    }

    #[test]
    fn different_quantities() {
        for (a, b) in [
            ("1", "1001m"),
            ("1Gi", "1G"),
            ("1Mi", "1M"),
            ("abc", "abc"),
            ("1x", "1x"),
            ("", ""),
            ("-1", "1"),
            ("1.2.3", "1.2.3"),
        ] {
            assert!(!quantity_eq(a, b), "{a} != {b}");
        }
    }
}
