//! `tokenizer`: a selector byte and text → encode and decode with a fixed vocabulary.
//!
//! The first byte picks the vocabulary (see `purebee_fuzz::vocabularies`) and whether BOS
//! is added and special-token texts are parsed; the rest is the text (invalid UTF-8 is
//! replaced by U+FFFD first, so every text is valid). What must hold for every text:
//! every id is in the vocabulary, BOS comes first exactly when asked for and the vocabulary
//! adds it, decoding the other ids gives the text back byte for byte, and the stream decoder
//! fed one id at a time gives what `decode` gives.
//!
//! Except for one thing, by design: a byte that has no token of its own is dropped (as
//! llama.cpp drops it; see `MergeTable::encode_word`). SmolLM2's vocabulary, and so the tiny
//! fixtures', lacks 21 of the 256 byte tokens: the controls 0x04 0x06 0x13 0x14 0x16 0x1D, the
//! bytes 0xC0 0xC1 0xF5..=0xFF that valid UTF-8 never holds, and 0xF1 0xF2, the lead bytes
//! of planes 4 to 11 (U+40000..=U+BFFFF, unassigned). What holds exactly is: the decoded
//! bytes are the text's bytes with those bytes removed. So `decode(encode(text)) == text`
//! for every text without those six controls and without characters of planes 4 to 11; a
//! character of those planes comes back as its three continuation bytes, i.e. U+FFFD.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&selector, text)) = data.split_first() else { return };
    let vocabs = purebee_fuzz::vocabularies();
    let v = &vocabs[usize::from(selector >> 2) % vocabs.len()];
    let (add_special, parse_special) = (selector & 1 != 0, selector & 2 != 0);
    let text = String::from_utf8_lossy(text);
    let tok = &v.tokenizer;

    let ids = tok.encode(&text, add_special, parse_special);
    assert!(ids.iter().all(|&id| (id as usize) < tok.token_count()), "{}: an id past the vocabulary", v.name);
    let body = match tok.bos() {
        Some(bos) if add_special && tok.add_bos() => {
            assert_eq!(ids.first(), Some(&bos), "{}: BOS is not first", v.name);
            &ids[1..]
        }
        _ => &ids[..],
    };
    let decoded: Vec<u8> = body.iter().flat_map(|&id| tok.decode_token(id)).copied().collect();
    let kept: Vec<u8> = text.bytes().filter(|&b| v.byte_has_token[usize::from(b)]).collect();
    assert_eq!(decoded, kept, "{}: decode(encode(text)) is not the text less its tokenless bytes", v.name);
    if kept.len() == text.len() {
        assert_eq!(tok.decode(body), text);
    }

    let mut stream = tok.stream_decoder();
    let mut streamed: String = ids.iter().map(|&id| stream.push(id)).collect();
    streamed.push_str(&stream.finish());
    assert_eq!(streamed, tok.decode(&ids), "{}: the stream decoder differs from decode", v.name);
});
