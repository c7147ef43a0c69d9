//! # purebee-fuzz: libFuzzer targets for everything a model file or a user controls
//!
//! A GGUF file is untrusted input. Rust rules out memory corruption in the reader, but not a
//! panic, an abort on a huge allocation, an endless loop or a stack overflow; these targets
//! look for them (run them with `scripts/fuzz.sh`, which CI calls):
//!
//! | target | input | checks |
//! |---|---|---|
//! | `gguf` | bytes of a GGUF file | parse from memory; walk every metadata value through every typed getter; every tensor as a host tensor, rows 0 and last dequantized (and as trits); the registry load; the writer round trip (what it accepts parses back to the same values); every error names the file |
//! | `model_load` | bytes of a GGUF file | tokenizer and chat template from the file (encode, decode, render); model config and weight binding on the reference engine with a 4-position context; when the tensors are small (at most [`MODEL_ELEMENTS_LIMIT`] elements), a two-token prefill and a decode step |
//! | `tokenizer` | a selector byte and text | encode and decode with the tiny fixtures' vocabulary (SmolLM2's first 8192 tokens) under every pre-tokenizer, and SmolLM2's full vocabulary when `PUREBEE_SMOLLM2_GGUF` names it: ids inside the vocabulary, `decode(encode(text)) == text`, the stream decoder agrees with `decode` |
//! | `chat_template` | structured (`arbitrary`) | random conversations through real templates (SmolLM2's, Llama 3's, Llama 2's), and random template text with random conversations through the runtime's own renderer |
//! | `program` | structured (`arbitrary`) | random tensors and instruction lists: building never panics, and every program that builds runs on the reference engine without a panic |
//!
//! The seed corpora under `corpus/<target>/` are small and committed; `examples/make_corpus.rs`
//! writes them from the fixtures (`cargo run --example make_corpus` in this folder).
//! `gguf.dict` holds GGUF keys and type ids for the byte-level targets.
//!
//! This crate is not a member of the main workspace: it needs libFuzzer's instrumentation
//! (nightly flags, which `scripts/fuzz.sh` enables on the stable toolchain) and its own
//! lock file.

#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::sync::OnceLock;

use purebee_memory::gguf::GgufFile;
use purebee_runtime::tokenizer::{bytes, Tokenizer, TokenizerParts};

/// The most tensor elements a `model_load` input may have for its forward step to run;
/// larger files are still parsed, configured and bound.
pub const MODEL_ELEMENTS_LIMIT: usize = 1 << 20;

/// The repository's `fixtures/` folder.
pub fn fixtures_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures")
}

/// The smallest tiny BitNet fixture: SmolLM2's first 8192 tokens, `llama-bpe`, ChatML.
pub fn tiny_fixture() -> PathBuf {
    fixtures_dir().join("bitnet-tiny/tiny_b158_tq1_0.gguf")
}

/// Opens a GGUF file the fuzz targets rely on, or stops the fuzzer with a message.
pub fn open_required(path: &std::path::Path) -> GgufFile {
    GgufFile::open(path).unwrap_or_else(|e| panic!("fuzz setup: cannot open {}: {e}", path.display()))
}

/// A named vocabulary to fuzz the tokenizer with.
pub struct Vocabulary {
    /// What it is, for messages.
    pub name: String,
    /// The tokenizer.
    pub tokenizer: Tokenizer,
    /// Whether each byte has a token of its own (one whose text is its byte-level spelling).
    pub byte_has_token: [bool; 256],
}

impl Vocabulary {
    fn new(name: String, tokenizer: Tokenizer) -> Vocabulary {
        let byte_has_token =
            std::array::from_fn(|b| tokenizer.token_id(&bytes::byte_to_char(b as u8).to_string()).is_some());
        Vocabulary { name, tokenizer, byte_has_token }
    }
}

/// The vocabularies of the `tokenizer` target, built once: the tiny fixture's as stored
/// (`llama-bpe`), the same tokens under the `smollm`, `gpt-2` and `default` pre-tokenizers,
/// and SmolLM2-135M-Instruct's full vocabulary (`smollm`) when `PUREBEE_SMOLLM2_GGUF`
/// names its GGUF (`scripts/fuzz.sh` sets it when the model is cached or can be fetched).
pub fn vocabularies() -> &'static [Vocabulary] {
    static VOCABS: OnceLock<Vec<Vocabulary>> = OnceLock::new();
    VOCABS.get_or_init(|| {
        let tiny = open_required(&tiny_fixture());
        let tok = Tokenizer::from_gguf(&tiny).unwrap_or_else(|e| panic!("fuzz setup: tiny tokenizer: {e}"));
        let parts = |pre: &str| TokenizerParts {
            tokens: tiny.get_str_array("tokenizer.ggml.tokens").unwrap_or_default().into_iter().map(String::from).collect(),
            merges: tiny.get_str_array("tokenizer.ggml.merges").unwrap_or_default().into_iter().map(String::from).collect(),
            token_types: tiny.get_i32_array("tokenizer.ggml.token_type").ok(),
            pre: pre.to_string(),
            bos: tok.bos(),
            eos: tok.eos(),
            add_bos: tok.add_bos(),
            eog: Vec::new(),
        };
        let mut v = vec![Vocabulary::new("tiny (llama-bpe)".into(), tok.clone())];
        for pre in ["smollm", "gpt-2", "default"] {
            let tokenizer = Tokenizer::from_parts(parts(pre)).unwrap_or_else(|e| panic!("fuzz setup: tiny/{pre}: {e}"));
            v.push(Vocabulary::new(format!("tiny ({pre})"), tokenizer));
        }
        if let Some(path) = std::env::var_os("PUREBEE_SMOLLM2_GGUF").filter(|p| !p.is_empty()) {
            let f = open_required(path.as_ref());
            let tokenizer = Tokenizer::from_gguf(&f).unwrap_or_else(|e| panic!("fuzz setup: SmolLM2 tokenizer: {e}"));
            v.push(Vocabulary::new("SmolLM2-135M-Instruct".into(), tokenizer));
        } else {
            eprintln!("fuzz: PUREBEE_SMOLLM2_GGUF is not set; fuzzing the tiny fixture's vocabulary only");
        }
        v
    })
}
