//! GPT-2's byte-level alphabet: the bijection between the 256 byte values and 256
//! printable Unicode characters that byte-level BPE vocabularies are written in.
//!
//! The mapping is OpenAI's `bytes_to_unicode()` (GPT-2 `encoder.py`; llama.cpp's
//! `unicode_byte_to_utf8_map`): the bytes `!`..=`~` (0x21–0x7E), `¡`..=`¬` (0xA1–0xAC) and
//! `®`..=`ÿ` (0xAE–0xFF) stand for themselves; the 68 others (controls, space, DEL,
//! 0x80–0xA0 and the soft hyphen 0xAD), in increasing byte order, become U+0100, U+0101, …,
//! U+0143. So a space is `Ġ` (U+0120) and a newline `Ċ` (U+010A) in the vocabulary.

/// How many bytes are not printable and are shifted to U+0100 and above.
const SHIFTED: usize = 68;

/// Whether a byte is one of the 188 that stand for themselves.
const fn is_direct(b: u32) -> bool {
    (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)
}

/// The code point of each byte.
const BYTE_TO_CP: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut shifted = 0u32;
    let mut b = 0u32;
    while b < 256 {
        table[b as usize] = if is_direct(b) {
            b
        } else {
            shifted += 1;
            255 + shifted
        };
        b += 1;
    }
    table
};

/// The byte of each shifted code point U+0100 + i.
const SHIFTED_TO_BYTE: [u8; SHIFTED] = {
    let mut table = [0u8; SHIFTED];
    let mut b = 0usize;
    while b < 256 {
        let cp = BYTE_TO_CP[b];
        if cp >= 256 {
            table[(cp - 256) as usize] = b as u8;
        }
        b += 1;
    }
    table
};

/// The printable character that stands for byte `b` in a byte-level vocabulary.
pub fn byte_to_char(b: u8) -> char {
    // Every entry of the table is below U+0144, so always a valid scalar value.
    char::from_u32(BYTE_TO_CP[usize::from(b)]).unwrap_or(char::REPLACEMENT_CHARACTER)
}

/// The byte that character `c` stands for, or `None` when `c` is not one of the 256
/// characters of the byte-level alphabet.
pub fn char_to_byte(c: char) -> Option<u8> {
    let cp = u32::from(c);
    if is_direct(cp) {
        u8::try_from(cp).ok()
    } else {
        let i = usize::try_from(cp.checked_sub(256)?).ok()?;
        SHIFTED_TO_BYTE.get(i).copied()
    }
}

/// Appends the byte-level spelling of `bytes` (one character per byte) to `out`.
pub fn encode_into(bytes: &[u8], out: &mut String) {
    out.extend(bytes.iter().map(|&b| byte_to_char(b)));
}

/// The bytes that a byte-level token text stands for. A character outside the alphabet
/// (which a well-formed vocabulary does not contain) is kept as its own UTF-8 bytes, where
/// llama.cpp would print an `[UNK_BYTE_…]` marker instead.
pub fn decode_text(text: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    for c in text.chars() {
        match char_to_byte(c) {
            Some(b) => out.push(b),
            None => {
                let mut buf = [0u8; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mapping_is_a_bijection_onto_256_characters() {
        let mut seen = std::collections::HashSet::new();
        for b in 0..=255u8 {
            let c = byte_to_char(b);
            assert_ne!(c, char::REPLACEMENT_CHARACTER, "byte {b:#04x}");
            assert!(seen.insert(c), "byte {b:#04x} maps to {c:?}, already taken");
            assert_eq!(char_to_byte(c), Some(b), "round trip of byte {b:#04x} via {c:?}");
        }
        assert_eq!(seen.len(), 256);
    }

    #[test]
    fn known_characters_match_gpt2() {
        // Values from GPT-2's encoder.py / every byte-level vocabulary.
        assert_eq!(byte_to_char(b' '), 'Ġ');
        assert_eq!(byte_to_char(b'\n'), 'Ċ');
        assert_eq!(byte_to_char(b'\t'), 'ĉ');
        assert_eq!(byte_to_char(0x00), 'Ā');
        assert_eq!(byte_to_char(0x7F), '\u{121}');
        assert_eq!(byte_to_char(0xA0), '\u{142}');
        assert_eq!(byte_to_char(0xAD), '\u{143}');
        assert_eq!(byte_to_char(b'A'), 'A');
        assert_eq!(byte_to_char(0xE9), 'é');
        assert_eq!(byte_to_char(0xFF), 'ÿ');
    }

    #[test]
    fn characters_outside_the_alphabet_have_no_byte() {
        for c in [' ', '\n', '\u{7F}', '\u{A0}', '\u{AD}', '\u{144}', '東', '😀'] {
            assert_eq!(char_to_byte(c), None, "{c:?}");
        }
    }

    #[test]
    fn encode_then_decode_restores_any_bytes() {
        let bytes: Vec<u8> = (0..=255u8).chain("héllo 東京 😀\n".bytes()).collect();
        let mut text = String::new();
        encode_into(&bytes, &mut text);
        assert_eq!(text.chars().count(), bytes.len());
        assert_eq!(decode_text(&text), bytes);
    }

    #[test]
    fn decode_keeps_foreign_characters_as_utf8() {
        assert_eq!(decode_text("ĠhiĠ東"), b" hi \xe6\x9d\xb1".to_vec());
    }
}
