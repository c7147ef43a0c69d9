//! The tokenizer built from hand-made vocabularies ([`Tokenizer::from_parts`]) and from
//! small GGUF files written in memory ([`Tokenizer::from_gguf`]): merges, BOS, special
//! tokens, `ignore_merges`, decoding, streaming over invalid bytes, and every error.

use purebee_memory::gguf::{GgufFile, GgufWriter, MetaArray, MetaValue};
use purebee_runtime::tokenizer::{bytes, PreTokenizerKind, StreamDecoder, Tokenizer, TokenizerError, TokenizerParts};

/// The 256 byte tokens (id = byte), then `extra` normal tokens, then `<s>` and `</s>`
/// (control) and `<tool>` (user-defined).
fn parts(extra: &[&str], merges: &[&str], pre: &str) -> TokenizerParts {
    let mut tokens: Vec<String> = (0..=255u8).map(|b| bytes::byte_to_char(b).to_string()).collect();
    tokens.extend(extra.iter().map(|s| s.to_string()));
    let mut types = vec![1; tokens.len()];
    for (text, ty) in [("<s>", 3), ("</s>", 3), ("<tool>", 4)] {
        tokens.push(text.to_string());
        types.push(ty);
    }
    let n = tokens.len() as u32;
    TokenizerParts {
        tokens,
        merges: merges.iter().map(|s| s.to_string()).collect(),
        token_types: Some(types),
        pre: pre.to_string(),
        bos: Some(n - 3),
        eos: Some(n - 2),
        add_bos: true,
        eog: vec![],
    }
}

fn build(p: TokenizerParts) -> Tokenizer {
    Tokenizer::from_parts(p).unwrap_or_else(|e| panic!("{e}"))
}

fn error(p: TokenizerParts) -> String {
    match Tokenizer::from_parts(p) {
        Ok(t) => panic!("expected an error, built {t:?}"),
        Err(e) => e.to_string(),
    }
}

const WORDS: [&str; 7] = ["he", "ll", "hell", "hello", "Ġw", "or", "Ġwor"];
const WORD_MERGES: [&str; 7] = ["h e", "l l", "he ll", "hell o", "Ġ w", "o r", "Ġw or"];

fn hello() -> Tokenizer {
    build(parts(&WORDS, &WORD_MERGES, "llama-bpe"))
}

fn id(tok: &Tokenizer, text: &str) -> u32 {
    tok.token_id(text).unwrap_or_else(|| panic!("no token {text:?}"))
}

#[test]
fn merges_apply_and_bos_is_added_when_asked() {
    let tok = hello();
    let expected = vec![id(&tok, "hello"), id(&tok, "Ġwor"), u32::from(b'l'), u32::from(b'd')];
    assert_eq!(tok.encode("hello world", false, false), expected);
    let bos = tok.bos().unwrap_or_else(|| panic!("bos"));
    assert_eq!(tok.encode("hello world", true, false), [vec![bos], expected.clone()].concat());

    let mut p = parts(&WORDS, &WORD_MERGES, "llama-bpe");
    p.add_bos = false;
    assert_eq!(build(p).encode("hello world", true, false), expected);
    assert_eq!(tok.encode("", true, true), [bos]);
    assert!(tok.encode("", false, true).is_empty());
}

#[test]
fn special_tokens_parse_only_when_asked_but_user_defined_always() {
    let tok = hello();
    let (s, end, tool) = (id(&tok, "<s>"), id(&tok, "</s>"), id(&tok, "<tool>"));
    let text = "<s>hello<tool></s>";
    let parsed = tok.encode(text, false, true);
    assert_eq!(parsed, [s, id(&tok, "hello"), tool, end]);
    let plain = tok.encode(text, false, false);
    assert!(!plain.contains(&s) && !plain.contains(&end), "{plain:?}");
    assert!(plain.contains(&tool), "user-defined tokens are matched without parse_special: {plain:?}");
    assert_eq!(tok.decode(&parsed), text);
    assert_eq!(tok.decode(&plain), text);
}

#[test]
fn llama_bpe_maps_a_word_that_is_a_token_directly() {
    // "abc" is a token, but no merge reaches it: llama.cpp's ignore_merges (llama-bpe only).
    let llama = build(parts(&["ab", "abc"], &["a b"], "llama-bpe"));
    assert_eq!(llama.encode("abc", false, false), [id(&llama, "abc")]);
    for pre in ["smollm", "gpt2", "default"] {
        let other = build(parts(&["ab", "abc"], &["a b"], pre));
        assert_eq!(other.encode("abc", false, false), [id(&other, "ab"), u32::from(b'c')], "{pre}");
    }
}

#[test]
fn decoding_undoes_the_byte_alphabet_and_renders_control_text() {
    let tok = hello();
    assert_eq!(tok.decode_token(id(&tok, "Ġwor")), b" wor");
    assert_eq!(tok.decode_token(u32::from(b'\n')), b"\n");
    assert_eq!(tok.decode_token(id(&tok, "<s>")), b"<s>");
    assert_eq!(tok.decode_token(id(&tok, "<tool>")), b"<tool>");
    assert_eq!(tok.decode_token(u32::MAX), b"");
    assert!(tok.is_control(id(&tok, "<s>")) && !tok.is_control(id(&tok, "<tool>")) && !tok.is_control(u32::MAX));
    // A lone continuation byte is invalid UTF-8: lossy.
    assert_eq!(tok.decode(&[u32::from(b'a'), 0x80, u32::from(b'b')]), "a\u{FFFD}b");
    assert_eq!(tok.token_count(), 256 + WORDS.len() + 3);
}

#[test]
fn end_of_generation_ids() {
    let mut p = parts(&[], &[], "llama-bpe");
    p.eog = vec![7, 7, 3];
    let tok = build(p);
    let eos = tok.eos().unwrap_or_else(|| panic!("eos"));
    assert!(tok.is_eog(eos) && tok.is_eog(7) && tok.is_eog(3));
    assert!(!tok.is_eog(4) && !tok.is_eog(tok.bos().unwrap_or(0)));
}

#[test]
fn the_stream_decoder_handles_split_and_invalid_bytes() {
    let tok = hello();
    let b = |x: u8| u32::from(x);
    let mut s = StreamDecoder::new(&tok);
    // "é" = C3 A9, then a stray continuation byte, then "東" = E6 9D B1 cut by the end.
    assert_eq!(s.push(b(b'x')), "x");
    assert_eq!(s.push(0xC3), "");
    assert!(s.has_pending());
    assert_eq!(s.push(0xA9), "é");
    assert!(!s.has_pending());
    assert_eq!(s.push(0xA9), "\u{FFFD}");
    assert_eq!(s.push(0xE6), "");
    assert_eq!(s.push(0x9D), "");
    assert_eq!(s.push(b(b'!')), "\u{FFFD}!", "an interrupted character is replaced once, at the interruption");
    assert_eq!(s.push(0xE6), "");
    assert_eq!(s.finish(), "\u{FFFD}");
    assert_eq!(s.finish(), "");
    // Control tokens: rendered, or skipped on request.
    let mut shown = tok.stream_decoder();
    assert_eq!(shown.push(id(&tok, "</s>")), "</s>");
    let mut hidden = tok.stream_decoder().skip_control(true);
    assert_eq!(hidden.push(id(&tok, "</s>")), "");
    assert_eq!(hidden.push(id(&tok, "<tool>")), "<tool>");
}

#[test]
fn every_bad_part_is_named() {
    let msg = error(parts(&[], &[], "qwen2"));
    assert!(msg.contains("tokenizer.ggml.pre") && msg.contains("'qwen2'"), "{msg}");
    assert!(msg.contains("llama-bpe") && msg.contains("smollm") && msg.contains("gpt-2"), "{msg}");

    let empty = TokenizerParts { pre: "gpt2".into(), ..TokenizerParts::default() };
    assert_eq!(error(empty), "tokenizer.ggml.tokens is empty");

    let mut p = parts(&[], &[], "gpt2");
    p.token_types = Some(vec![1; 3]);
    assert_eq!(error(p), "tokenizer.ggml.token_type has 3 entries but tokenizer.ggml.tokens has 259");

    let mut p = parts(&[], &[], "gpt2");
    if let Some(t) = p.token_types.as_mut() {
        t[65] = 9;
    }
    let msg = error(p);
    assert!(msg.contains("token 65 ('A') has type 9"), "{msg}");

    let mut p = parts(&[], &[], "gpt2");
    p.bos = Some(259);
    assert_eq!(error(p), "tokenizer.ggml.bos_token_id = 259 is out of range: the vocabulary has 259 tokens");
    let mut p = parts(&[], &[], "gpt2");
    p.eos = Some(1000);
    assert!(error(p).starts_with("tokenizer.ggml.eos_token_id = 1000 is out of range"));
    let mut p = parts(&[], &[], "gpt2");
    p.eog = vec![1, 300];
    assert!(error(p).contains("= 300 is out of range"));

    let mut p = parts(&[], &[], "gpt2");
    p.bos = None;
    assert_eq!(error(p), "tokenizer.ggml.add_bos_token is true but tokenizer.ggml.bos_token_id is not set");

    let msg = error(parts(&["he"], &["h e", "he l"], "gpt2"));
    assert_eq!(msg, "tokenizer.ggml.merges[1] = 'he l' names 'hel', which is not in tokenizer.ggml.tokens");
    let msg = error(parts(&["he"], &["h e", "Ġx y"], "gpt2"));
    assert!(msg.contains("merges[1]") && msg.contains("names 'Ġx'"), "{msg}");
    let msg = error(parts(&[], &["hello"], "gpt2"));
    assert_eq!(msg, "tokenizer.ggml.merges[0] = 'hello' is not of the form 'left right'");
}

/// An in-memory GGUF holding the tokenizer of `hello()` with the given model and the
/// optional `pre` and `add_bos_token` keys, plus `extra` keys.
fn gguf(model: &str, pre: Option<&str>, add_bos: Option<bool>, extra: &[(&str, MetaValue)]) -> GgufFile {
    let p = parts(&WORDS, &WORD_MERGES, "llama-bpe");
    let mut w = GgufWriter::new();
    let step = |r: Result<&mut GgufWriter, _>| {
        if let Err(e) = r {
            panic!("{e}");
        }
    };
    step(w.add_str("tokenizer.ggml.model", model));
    step(w.add_str_array("tokenizer.ggml.tokens", p.tokens.clone()));
    step(w.add_str_array("tokenizer.ggml.merges", p.merges.clone()));
    step(w.add("tokenizer.ggml.token_type", MetaValue::Array(MetaArray::of_i32(p.token_types.unwrap_or_default()))));
    step(w.add_u32("tokenizer.ggml.bos_token_id", p.bos.unwrap_or(0)));
    step(w.add_u32("tokenizer.ggml.eos_token_id", p.eos.unwrap_or(0)));
    if let Some(pre) = pre {
        step(w.add_str("tokenizer.ggml.pre", pre));
    }
    if let Some(b) = add_bos {
        step(w.add_bool("tokenizer.ggml.add_bos_token", b));
    }
    for (k, v) in extra {
        step(w.add(k, v.clone()));
    }
    GgufFile::from_bytes("test.gguf", &w.to_bytes()).unwrap_or_else(|e| panic!("{e}"))
}

fn gguf_error(file: &GgufFile) -> String {
    match Tokenizer::from_gguf(file) {
        Ok(t) => panic!("expected an error, built {t:?}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn from_gguf_reads_every_key() {
    let tok = Tokenizer::from_gguf(&gguf(
        "gpt2",
        Some("smollm"),
        Some(false),
        &[("tokenizer.ggml.eot_token_id", MetaValue::U32(5)), ("tokenizer.ggml.eom_token_id", MetaValue::U32(6))],
    ))
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(tok.pre_tokenizer(), PreTokenizerKind::Smollm);
    assert!(!tok.add_bos());
    assert!(tok.is_eog(5) && tok.is_eog(6) && tok.is_eog(id(&tok, "</s>")) && !tok.is_eog(7));
    assert_eq!(tok.bos(), Some(id(&tok, "<s>")));
    assert_eq!(tok.encode("hello world", true, true), hello().encode("hello world", false, true));
}

#[test]
fn from_gguf_defaults_follow_llama_cpp() {
    // No add_bos_token: true for llama-bpe, false otherwise.
    assert!(Tokenizer::from_gguf(&gguf("gpt2", Some("llama-bpe"), None, &[])).is_ok_and(|t| t.add_bos()));
    assert!(Tokenizer::from_gguf(&gguf("gpt2", Some("smollm"), None, &[])).is_ok_and(|t| !t.add_bos()));
    // No pre: llama.cpp's "default".
    let tok = Tokenizer::from_gguf(&gguf("gpt2", None, None, &[])).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(tok.pre_tokenizer(), PreTokenizerKind::Default);
    assert!(!tok.add_bos());
}

#[test]
fn from_gguf_errors_name_the_key() {
    let msg = gguf_error(&gguf("bert", Some("llama-bpe"), None, &[]));
    assert_eq!(msg, "test.gguf: tokenizer.ggml.model is 'bert', which is not supported (supported: gpt2, llama)");
    // "llama" is SentencePiece, which needs scores that a BPE vocabulary lacks.
    let msg = gguf_error(&gguf("llama", Some("llama-bpe"), None, &[]));
    assert!(msg.contains("tokenizer.ggml.scores"), "{msg}");

    let msg = gguf_error(&gguf("gpt2", Some("falcon"), None, &[]));
    assert!(
        msg.starts_with("test.gguf: tokenizer.ggml.pre is 'falcon', which is not supported (supported: llama-bpe"),
        "{msg}"
    );

    let msg =
        gguf_error(&gguf("gpt2", Some("smollm"), None, &[("tokenizer.ggml.eot_token_id", MetaValue::U32(99999))]));
    assert!(msg.starts_with("test.gguf: ") && msg.contains("99999 is out of range"), "{msg}");

    let mut w = GgufWriter::new();
    if let Err(e) = w.add_str("tokenizer.ggml.model", "gpt2") {
        panic!("{e}");
    }
    let file = GgufFile::from_bytes("bare.gguf", &w.to_bytes()).unwrap_or_else(|e| panic!("{e}"));
    let msg = gguf_error(&file);
    assert!(msg.contains("tokenizer.ggml.tokens") && msg.contains("bare.gguf"), "{msg}");

    let file = GgufFile::from_bytes("empty.gguf", &GgufWriter::new().to_bytes()).unwrap_or_else(|e| panic!("{e}"));
    let msg = gguf_error(&file);
    assert!(msg.contains("tokenizer.ggml.model"), "{msg}");

    let file = gguf("gpt2", Some("llama-bpe"), None, &[("tokenizer.ggml.add_bos_token", MetaValue::U32(1))]);
    let msg = gguf_error(&file);
    assert!(msg.contains("tokenizer.ggml.add_bos_token"), "{msg}");
    assert!(matches!(Tokenizer::from_gguf(&file), Err(TokenizerError::Gguf(_))));
}
