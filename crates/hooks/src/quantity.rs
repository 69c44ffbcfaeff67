//! Byte limits in messages as Kubernetes quantities (`16Mi`), the unit users set them in
//! (`wasm.memoryLimit: 64Mi`), instead of a raw byte count.

/// `bytes` as the largest binary suffix that divides it exactly (`16Mi`, `1536Ki`), or a
/// plain number (`1000`) when none does.
pub fn quantity(bytes: u64) -> String {
    const SUFFIXES: [&str; 6] = ["Ei", "Pi", "Ti", "Gi", "Mi", "Ki"];
    for (i, suffix) in SUFFIXES.iter().enumerate() {
        let unit = 1u64 << (10 * (SUFFIXES.len() - i));
        if bytes >= unit && bytes.is_multiple_of(unit) {
            return format!("{}{suffix}", bytes / unit);
        }
    }
    bytes.to_string()
}

#[cfg(test)]
mod tests {
    use super::quantity;

    #[test]
    fn binary_suffixes_when_exact() {
        assert_eq!(quantity(16 * 1024 * 1024), "16Mi");
        assert_eq!(quantity(64 << 20), "64Mi");
        assert_eq!(quantity(1536 * 1024), "1536Ki");
        assert_eq!(quantity(3 << 30), "3Gi");
        assert_eq!(quantity(1000), "1000");
        assert_eq!(quantity(0), "0");
    }
}
