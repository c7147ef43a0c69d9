//! The SentencePiece tokenizer (`tokenizer.ggml.model = "llama"`) against llama.cpp on
//! Llama's vocabulary: `fixtures/tokenizer/ggml-vocab-llama-spm.gguf` with llama.cpp's
//! own test vectors beside it (`.inp`: texts separated by `__ggml_vocab_test__` lines;
//! `.out`: the ids, one line per text, as its `test-tokenizer-0` checks them: no BOS, no
//! special-token parsing). Every case must encode to exactly those ids and decode back to
//! its text, as llama.cpp's `common_detokenize` gives it. Further cases of our own, the
//! streaming decoder and every error of a bad SentencePiece GGUF follow.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use proptest::prelude::*;

use purebee_memory::gguf::{GgufFile, GgufWriter, MetaArray, MetaValue};
use purebee_runtime::tokenizer::{SpmParts, Tokenizer, TokenizerError, TokenizerKind};

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/tokenizer/ggml-vocab-llama-spm.gguf")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// The fixture, read into memory with zero bytes appended up to GGUF's default alignment
/// (32). llama.cpp wrote it without the padding that would precede a data section, since it
/// has no tensors; llama.cpp's reader accepts that, purebee's GGUF reader does not.
fn open() -> GgufFile {
    let path = fixture();
    let mut bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    bytes.resize(bytes.len().next_multiple_of(32), 0);
    GgufFile::from_vec(path, bytes).unwrap_or_else(|e| panic!("{e}"))
}

fn llama() -> &'static Tokenizer {
    static TOK: OnceLock<Tokenizer> = OnceLock::new();
    TOK.get_or_init(|| Tokenizer::from_gguf(&open()).unwrap_or_else(|e| panic!("{e}")))
}

/// The `.inp` texts with the `.out` ids, read as `test-tokenizer-0` reads them: texts split
/// at "\n__ggml_vocab_test__\n", one stripped line of space-separated ids per text.
fn cases() -> Vec<(String, Vec<u32>)> {
    let inp = read(&with_suffix(&fixture(), ".inp"));
    let out = read(&with_suffix(&fixture(), ".out"));
    let sep = "\n__ggml_vocab_test__\n";
    let mut texts = Vec::new();
    let mut rest = inp.as_str();
    while !rest.is_empty() {
        match rest.find(sep) {
            Some(at) => {
                texts.push(rest[..at].to_string());
                rest = &rest[at + sep.len()..];
            }
            None => {
                texts.push(rest.to_string());
                rest = "";
            }
        }
    }
    let ids: Vec<Vec<u32>> = out
        .lines()
        .map(|line| {
            line.split_whitespace().map(|t| t.parse().unwrap_or_else(|e| panic!("id {t:?} in .out: {e}"))).collect()
        })
        .collect();
    assert_eq!(texts.len(), ids.len(), ".inp and .out have different numbers of cases");
    texts.into_iter().zip(ids).collect()
}

/// The stored texts of `ids`, which show how each expectation below comes about.
fn texts(tok: &Tokenizer, ids: &[u32]) -> Vec<String> {
    ids.iter().map(|&id| tok.token_text(id).unwrap_or("<past the vocabulary>").to_string()).collect()
}

#[test]
fn the_vocabulary_loads_with_llama_cpp_settings() {
    let tok = llama();
    assert_eq!(tok.kind(), TokenizerKind::SentencePiece);
    assert_eq!(tok.token_count(), 32000);
    assert_eq!((tok.bos(), tok.eos()), (Some(1), Some(2)));
    assert!(tok.add_bos());
    assert!(tok.is_control(1) && tok.is_control(2) && !tok.is_control(0) && !tok.is_control(15043));
    assert!(tok.is_eog(2) && !tok.is_eog(1));
    assert_eq!(texts(tok, &[0, 1, 2, 3, 13, 29871]), ["<unk>", "<s>", "</s>", "<0x00>", "<0x0A>", "▁"]);
    let debug = format!("{tok:?}");
    assert!(debug.contains("SentencePiece") && debug.contains("add_space_prefix: true"), "{debug}");
}

#[test]
fn every_llama_cpp_case_encodes_to_its_ids_and_decodes_to_its_text() {
    let tok = llama();
    let cases = cases();
    assert_eq!(cases.len(), 46, "llama.cpp's ggml-vocab-llama-spm.gguf.inp has 46 texts");
    let mut failures = Vec::new();
    for (text, ids) in &cases {
        let got = tok.encode(text, false, false);
        if &got != ids {
            failures.push(format!("encode {text:?}\n  got      {got:?}\n  expected {ids:?}"));
        }
        // llama.cpp's detokenize gives back each of these texts exactly (checked with
        // libllama's llama_detokenize, remove_special off, unparse_special on).
        let decoded = tok.decode(ids);
        if &decoded != text {
            failures.push(format!("decode {ids:?}\n  got      {decoded:?}\n  expected {text:?}"));
        }
    }
    assert!(failures.is_empty(), "{} differences from llama.cpp:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn bos_is_added_when_asked_and_parsing_specials_changes_nothing_without_them() {
    let tok = llama();
    for (text, ids) in cases() {
        let with_bos = tok.encode(&text, true, false);
        assert_eq!(with_bos.first(), Some(&1), "{text:?}");
        assert_eq!(&with_bos[1..], &ids[..], "{text:?}");
        // None of llama.cpp's texts holds "<s>", "</s>" or "<unk>".
        assert_eq!(tok.encode(&text, false, true), ids, "{text:?}");
    }
}

/// Cases of our own. Each expectation follows from llama.cpp's SPM algorithm, as the
/// comments say (space prefix; spaces as `▁`; the highest-scored pair merges first, ties
/// to the left; missing characters as `<0xHH>` byte tokens, whose ids here are byte + 3),
/// and was confirmed with libllama's `llama_tokenize` / `llama_detokenize` on this file.
#[test]
fn our_own_cases_follow_llama_cpp() {
    let tok = llama();
    let enc = |text: &str, add_special: bool, parse_special: bool| tok.encode(text, add_special, parse_special);

    // Empty text: no fragment, so no space prefix either; BOS alone when asked.
    assert_eq!(enc("", false, false), Vec::<u32>::new());
    assert_eq!(enc("", true, false), [1]);

    // Only spaces: the prefix plus three spaces is "▁▁▁▁", a token.
    assert_eq!(texts(tok, &enc("   ", false, false)), ["▁▁▁▁"]);
    assert_eq!(enc("   ", false, false), [268]);

    // Leading and trailing spaces: "▁" scores -1e9 (as does "▁▁"), so the word takes its
    // own "▁" and the extra one stays alone.
    assert_eq!(enc(" leading", false, false), [29871, 8236]);
    assert_eq!(texts(tok, &[29871, 8236]), ["▁", "▁leading"]);
    assert_eq!(enc("trailing ", false, false), [25053, 29871]);
    assert_eq!(texts(tok, &[25053, 29871]), ["▁trailing", "▁"]);
    assert_eq!(enc("  both  ", false, false), [259, 1716, 259]);
    assert_eq!(texts(tok, &[259, 1716, 259]), ["▁▁", "▁both", "▁▁"]);

    // Newlines and tabs are not spaces: no "▁" joins them, and they exist only as byte
    // tokens <0x0A> (13) and <0x09> (12).
    assert_eq!(enc("\n", false, false), [29871, 13]);
    assert_eq!(enc("a\nb", false, false), [263, 13, 29890]);
    assert_eq!(texts(tok, &[263, 13, 29890]), ["▁a", "<0x0A>", "b"]);
    assert_eq!(enc("\t", false, false), [29871, 12]);
    assert_eq!(enc("a\tb", false, false), [263, 12, 29890]);

    // Characters outside the vocabulary fall back to their UTF-8 bytes: 😀 is F0 9F 98 80,
    // U+10FFFF is F4 8F BF BF.
    assert_eq!(enc("😀", false, false), [29871, 0xF0 + 3, 0x9F + 3, 0x98 + 3, 0x80 + 3]);
    assert_eq!(enc("Hi 🤗!", false, false), [6324, 29871, 243, 162, 167, 154, 29991]);
    assert_eq!(enc("\u{10FFFF}", false, false), [29871, 0xF4 + 3, 0x8F + 3, 0xBF + 3, 0xBF + 3]);

    // Special-token text: without parse_special "<s>" is text ("▁<", "s", ">"); with it,
    // the control token. Text after a special token gets a space prefix again.
    assert_eq!(enc("<s>", false, false), [529, 29879, 29958]);
    assert_eq!(texts(tok, &[529, 29879, 29958]), ["▁<", "s", ">"]);
    assert_eq!(enc("<s>", false, true), [1]);
    assert_eq!(enc("Hello<s>world", false, true), [15043, 1, 3186]);
    assert_eq!(texts(tok, &[15043, 1, 3186]), ["▁Hello", "<s>", "▁world"]);
    assert_eq!(enc("Hello<s>world", false, false), [15043, 29966, 29879, 29958, 11526]);
    assert_eq!(enc("<s> Hello", false, true), [1, 29871, 15043]);
    assert_eq!(enc("a</s>b</s>", false, true), [263, 2, 289, 2]);
    assert_eq!(enc("<unk>", false, true), [0]);
    assert_eq!(enc("<unk>", false, false), [529, 2960, 29958]);
    // A "▁" in the text is indistinguishable from an escaped space: "a▁b" encodes as
    // "a b" does, and decodes to it.
    assert_eq!(enc("a▁b", false, false), enc("a b", false, false));
    assert_eq!(texts(tok, &enc("a▁b", false, false)), ["▁a", "▁b"]);
    assert_eq!(tok.decode(&enc("a▁b", false, false)), "a b");
    // BOS from add_special and BOS from the text both stay, as in llama.cpp.
    assert_eq!(enc("<s>Hello", true, true), [1, 1, 15043]);
}

/// llama.cpp's `detokenize` (remove_special off, unparse_special on, as
/// `common_detokenize` calls it) strips one space from the first piece only.
#[test]
fn decode_strips_the_prefix_space_of_the_first_piece_only() {
    let tok = llama();
    // BOS is first: its text has no space, and "▁Hello" keeps its own.
    assert_eq!(tok.decode(&[1, 15043]), "<s> Hello");
    assert_eq!(tok.decode(&[15043, 1, 15043]), "Hello<s> Hello");
    assert_eq!(tok.decode(&[29871]), "");
    assert_eq!(tok.decode(&[259]), " ");
    assert_eq!(tok.decode(&[0, 2]), "<unk></s>");
    assert_eq!(tok.decode(&[243, 162, 155, 131]), "😀");
    assert_eq!(tok.decode(&[263, 2, 289, 2]), "a</s> b</s>");
    assert_eq!(tok.decode(&[]), "");
    // One piece alone keeps its space: it continues a text (generation).
    assert_eq!(tok.decode_token(15043), b" Hello");
    assert_eq!(tok.decode_token(13), b"\n");
    assert_eq!(tok.decode_token(1), b"<s>");
}

#[test]
fn the_stream_decoder_assembles_byte_tokens_and_keeps_every_space() {
    let tok = llama();
    let mut stream = tok.stream_decoder();
    let pieces: Vec<String> = tok.encode("Hi 🤗!", false, false).into_iter().map(|id| stream.push(id)).collect();
    assert_eq!(pieces, [" Hi", " ", "", "", "", "🤗", "!"]);
    assert_eq!(stream.finish(), "");
    let mut hidden = tok.stream_decoder().skip_control(true);
    let shown: String = [1, 15043, 2].into_iter().map(|id| hidden.push(id)).collect();
    assert_eq!(shown, " Hello");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Every text comes back (byte fallback covers every character) but for a `▁` written
    /// in it, which is a space once encoded (as in llama.cpp); with or without BOS; and
    /// streaming gives the same text with the prefix space left on.
    #[test]
    fn any_text_round_trips(text in "(\\PC|[ \t\n]|😀|<s>|▁){0,24}") {
        let tok = llama();
        let expected = text.replace('▁', " ");
        let ids = tok.encode(&text, false, false);
        prop_assert_eq!(tok.decode(&ids), expected.clone());
        let with_bos = tok.encode(&text, true, false);
        prop_assert_eq!(tok.decode(&with_bos[1..]), expected.clone());
        let mut stream = tok.stream_decoder();
        let streamed: String = ids.iter().map(|&id| stream.push(id)).collect::<String>() + &stream.finish();
        let spaced = if text.is_empty() { String::new() } else { format!(" {expected}") };
        prop_assert_eq!(streamed, spaced);
    }
}

/// The fixture's tokenizer keys as a new in-memory GGUF, with `change` applied to them.
fn rewritten(change: impl FnOnce(&mut Vec<(String, MetaValue)>)) -> GgufFile {
    let file = open();
    let mut keys: Vec<(String, MetaValue)> =
        file.metadata().iter().filter(|(k, _)| k.starts_with("tokenizer.")).cloned().collect();
    change(&mut keys);
    let mut w = GgufWriter::new();
    for (k, v) in keys {
        if let Err(e) = w.add(&k, v) {
            panic!("{k}: {e}");
        }
    }
    GgufFile::from_bytes("spm.gguf", &w.to_bytes()).unwrap_or_else(|e| panic!("{e}"))
}

fn set(keys: &mut Vec<(String, MetaValue)>, key: &str, value: MetaValue) {
    keys.retain(|(k, _)| k != key);
    keys.push((key.to_string(), value));
}

fn remove(keys: &mut Vec<(String, MetaValue)>, key: &str) {
    keys.retain(|(k, _)| k != key);
}

fn tokens_with(change: impl FnOnce(&mut Vec<String>)) -> MetaValue {
    let file = open();
    let mut tokens: Vec<String> = file
        .get_str_array("tokenizer.ggml.tokens")
        .unwrap_or_else(|e| panic!("{e}"))
        .into_iter()
        .map(String::from)
        .collect();
    change(&mut tokens);
    MetaValue::Array(MetaArray::of_strings(tokens))
}

fn error(file: &GgufFile) -> String {
    match Tokenizer::from_gguf(file) {
        Ok(t) => panic!("expected an error, built {t:?}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn the_rewritten_fixture_still_matches() {
    // The helper itself changes nothing when asked to change nothing.
    let tok = Tokenizer::from_gguf(&rewritten(|_| {})).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(tok.encode("Hello world", true, false), [1, 15043, 3186]);
}

#[test]
fn gguf_keys_and_llama_cpp_defaults() {
    // Without the optional keys: BOS 1, EOS 2, add_bos on, add_eos off, space prefix on.
    let bare = rewritten(|k| {
        for key in ["bos_token_id", "eos_token_id", "add_bos_token", "add_eos_token", "pre", "unknown_token_id"] {
            remove(k, &format!("tokenizer.ggml.{key}"));
        }
    });
    let tok = Tokenizer::from_gguf(&bare).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((tok.bos(), tok.eos(), tok.add_bos()), (Some(1), Some(2), true));
    assert_eq!(tok.encode("Hello", true, false), [1, 15043]);

    // add_space_prefix off: no "▁" in front, and decode leaves the first piece alone
    // (confirmed with libllama on the fixture rewritten with this key).
    let file = rewritten(|k| set(k, "tokenizer.ggml.add_space_prefix", MetaValue::Bool(false)));
    let tok = Tokenizer::from_gguf(&file).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(tok.encode("Hello world", false, false), [10994, 3186]);
    assert_eq!(texts(&tok, &[10994, 3186]), ["Hello", "▁world"]);
    assert_eq!(tok.decode(&[15043]), " Hello");

    // add_eos_token on: EOS last when special tokens are asked for (likewise confirmed).
    let file = rewritten(|k| set(k, "tokenizer.ggml.add_eos_token", MetaValue::Bool(true)));
    let tok = Tokenizer::from_gguf(&file).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(tok.encode("Hello", true, false), [1, 15043, 2]);
    assert_eq!(tok.encode("Hello", false, false), [15043]);

    // Integer scores are accepted, as llama.cpp accepts INT32 scores.
    let file =
        rewritten(|k| set(k, "tokenizer.ggml.scores", MetaValue::Array(MetaArray::of_i32((0..32000).map(|i| -i)))));
    let tok = Tokenizer::from_gguf(&file).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(tok.kind(), TokenizerKind::SentencePiece);
}

#[test]
fn bad_sentencepiece_ggufs_are_named_errors() {
    let msg = error(&rewritten(|k| remove(k, "tokenizer.ggml.scores")));
    assert!(msg.contains("tokenizer.ggml.scores") && msg.contains("spm.gguf"), "{msg}");

    let file = rewritten(|k| set(k, "tokenizer.ggml.scores", MetaValue::Array(MetaArray::of_strings(["x"]))));
    let msg = error(&file);
    assert!(msg.contains("tokenizer.ggml.scores") && msg.contains("string"), "{msg}");
    let file = rewritten(|k| set(k, "tokenizer.ggml.scores", MetaValue::F32(0.0)));
    assert!(error(&file).contains("tokenizer.ggml.scores"));

    let file = rewritten(|k| set(k, "tokenizer.ggml.scores", MetaValue::Array(MetaArray::of_f32([0.0; 3]))));
    assert_eq!(error(&file), "spm.gguf: tokenizer.ggml.scores has 3 entries but tokenizer.ggml.tokens has 32000");

    let file = rewritten(|k| {
        let mut scores = vec![0.0f32; 32000];
        scores[100] = f32::NAN;
        set(k, "tokenizer.ggml.scores", MetaValue::Array(MetaArray::of_f32(scores)))
    });
    let msg = error(&file);
    assert!(msg.contains("token 100") && msg.contains("not a number"), "{msg}");

    // The byte token of 0x80 (id 131) misspelt while still typed as a byte.
    let file = rewritten(|k| set(k, "tokenizer.ggml.tokens", tokens_with(|t| t[0x80 + 3] = "<0x80".into())));
    let msg = error(&file);
    assert!(msg.contains("token 131 ('<0x80')") && msg.contains("type 6 (byte)"), "{msg}");
    let err = Tokenizer::from_gguf(&file).err();
    assert!(matches!(
        err.as_ref().map(TokenizerError::cause),
        Some(TokenizerError::MalformedByteToken { id: 131, .. })
    ));
    // Renamed and typed as normal: byte fallback for 0x80 would have nothing to emit.
    let file = rewritten(|k| {
        set(k, "tokenizer.ggml.tokens", tokens_with(|t| t[0x80 + 3] = "nothing".into()));
        let mut types = vec![1i32; 32000];
        types[0] = 2;
        types[1] = 3;
        types[2] = 3;
        set(k, "tokenizer.ggml.token_type", MetaValue::Array(MetaArray::of_i32(types)));
    });
    let err = Tokenizer::from_gguf(&file).err();
    assert!(matches!(
        err.as_ref().map(TokenizerError::cause),
        Some(TokenizerError::MissingByteToken { byte: 0x80, .. })
    ));
    assert!(error(&file).ends_with("tokenizer.ggml.tokens has no token '<0x80>' for byte fallback of byte 0x80"));

    let file = rewritten(|k| set(k, "tokenizer.ggml.token_type", MetaValue::Array(MetaArray::of_f32([1.0]))));
    assert!(error(&file).contains("tokenizer.ggml.token_type"));
    let file = rewritten(|k| set(k, "tokenizer.ggml.add_space_prefix", MetaValue::U32(1)));
    assert!(error(&file).contains("tokenizer.ggml.add_space_prefix"));
    let file = rewritten(|k| set(k, "tokenizer.ggml.bos_token_id", MetaValue::U32(32000)));
    assert!(error(&file).contains("tokenizer.ggml.bos_token_id = 32000 is out of range"));

    let file = rewritten(|k| set(k, "tokenizer.ggml.model", MetaValue::String("bert".into())));
    assert_eq!(
        error(&file),
        "spm.gguf: tokenizer.ggml.model is 'bert', which is not supported (supported: gpt2, llama)"
    );
}

#[test]
fn from_spm_parts_builds_the_same_tokenizer() {
    let file = open();
    let parts = SpmParts {
        tokens: file
            .get_str_array("tokenizer.ggml.tokens")
            .unwrap_or_else(|e| panic!("{e}"))
            .into_iter()
            .map(String::from)
            .collect(),
        scores: file.get_f32_array("tokenizer.ggml.scores").unwrap_or_else(|e| panic!("{e}")),
        token_types: file.get_i32_array("tokenizer.ggml.token_type").ok(),
        bos: Some(1),
        eos: Some(2),
        add_bos: true,
        add_eos: false,
        add_space_prefix: true,
        eog: vec![],
    };
    let tok = Tokenizer::from_spm_parts(parts.clone()).unwrap_or_else(|e| panic!("{e}"));
    for (text, ids) in cases() {
        assert_eq!(tok.encode(&text, false, false), ids, "{text:?}");
    }
    let no_eos = SpmParts { eos: None, add_eos: true, ..parts.clone() };
    assert!(matches!(Tokenizer::from_spm_parts(no_eos), Err(TokenizerError::AddEosWithoutEos)));
    let empty = SpmParts::default();
    assert!(matches!(Tokenizer::from_spm_parts(empty), Err(TokenizerError::EmptyVocabulary)));
}
