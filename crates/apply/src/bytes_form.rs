//! The form in which kube-apiserver stores a `[]byte` field (Secret `data`, ConfigMap
//! `binaryData`, webhook `caBundle`): the client's base64 is decoded and encoded again, so
//! line breaks disappear (`base64` wraps at 76 columns) and unused trailing bits are cleared
//! (`QR==` reads back as `QQ==`). Padding is required; other characters are refused.

use base64::alphabet::STANDARD;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig};
use base64::engine::DecodePaddingMode;
use base64::Engine;

/// Go's standard decoder: padded, trailing bits ignored.
const LENIENT: GeneralPurpose = GeneralPurpose::new(
    &STANDARD,
    GeneralPurposeConfig::new()
        .with_decode_allow_trailing_bits(true)
        .with_decode_padding_mode(DecodePaddingMode::RequireCanonical),
);

/// The stored form of base64 `text`, or the offset (in `text`) of the first byte the server
/// refuses (`illegal base64 data at input byte N`).
pub fn base64_server_form(text: &str) -> Result<String, usize> {
    let kept: Vec<(usize, u8)> = text
        .bytes()
        .enumerate()
        .filter(|(_, b)| *b != b'\r' && *b != b'\n')
        .collect();
    let compact: Vec<u8> = kept.iter().map(|(_, b)| *b).collect();
    let original = |i: usize| kept.get(i).map_or(text.len(), |(at, _)| *at);
    match LENIENT.decode(&compact) {
        Ok(bytes) => Ok(base64::engine::general_purpose::STANDARD.encode(bytes)),
        Err(
            base64::DecodeError::InvalidByte(i, _) | base64::DecodeError::InvalidLastSymbol(i, _),
        ) => Err(original(i)),
        Err(_) => Err(original(compact.len() - compact.len() % 4)),
    }
}

#[cfg(test)]
mod tests {
    use super::base64_server_form;

    #[test]
    fn stored_forms_match_kube_apiserver() {
        // Sent → stored, as kube-apiserver 1.28.7 answered (ConfigMap binaryData, dry run).
        for (sent, stored) in [
            ("QR==", "QQ=="),
            ("QUJD\r\nREVG", "QUJDREVG"),
            ("QQ==\n", "QQ=="),
            ("\nQQ==", "QQ=="),
            ("QQ=\n=", "QQ=="),
            ("", ""),
            ("AAEC\nAw==", "AAECAw=="),
        ] {
            assert_eq!(base64_server_form(sent).as_deref(), Ok(stored), "{sent:?}");
        }
    }

    #[test]
    fn refused_like_kube_apiserver() {
        for bad in ["QQ", "Q Q==", "-_8=", "QUJDRA", "QUJDRA=", "QUJD===="] {
            assert!(base64_server_form(bad).is_err(), "{bad:?}");
        }
    }
}
