//! A checkpoint's tokenizer (`tokenizer.json`, `tokenizer_config.json`) as GGUF's
//! `tokenizer.ggml.*` keys and `tokenizer.chat_template`.
//!
//! Byte-level BPE (`tokenizer.ggml.model = gpt2`: Llama 3, BitNet b1.58 2B-4T, SmolLM2):
//! the tokens in id order, their types (special added tokens are control tokens, other added
//! tokens user-defined), the merges, and the pre-tokenizer. llama.cpp's converter names the
//! pre-tokenizer by hashing how the tokenizer splits a test text, which needs the
//! `tokenizers` library; this one reads the pre-tokenizer's own description in
//! tokenizer.json instead and recognizes the splits the runtime implements (`llama-bpe`,
//! `smollm`, `gpt-2`).
//!
//! SentencePiece-style BPE (`tokenizer.ggml.model = llama`: Llama 2, 1bitLLM's models): a
//! tokenizer.json BPE with `byte_fallback`, whose normalizer or pre-tokenizer writes spaces
//! as `▁`. GGUF's `llama` tokenizer merges the pair whose joined piece scores highest, where
//! tokenizer.json merges by the merge list's rank; so each piece a merge makes scores minus
//! that merge's rank, and the two choose alike. `<0xXX>` pieces are byte tokens, the unknown
//! token is typed so, and special added tokens are control tokens.
//!
//! Without a tokenizer.json, a SentencePiece `tokenizer.model` is read instead
//! (`sentencepiece.rs`).
//!
//! Any other tokenizer is refused by name rather than carried wrongly.

use std::path::{Path, PathBuf};

use purebee_memory::gguf::{GgufWriteError, GgufWriter, MetaArray};
use serde_json::Value;

use crate::json::JsonFile;
use crate::ConvertError;

/// Llama 3's split pattern, as tokenizer.json spells it.
const LLAMA3_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// GGUF token types (llama.cpp's `llama_token_type`).
pub(crate) const NORMAL: i32 = 1;
pub(crate) const UNKNOWN: i32 = 2;
pub(crate) const CONTROL: i32 = 3;
pub(crate) const USER_DEFINED: i32 = 4;
pub(crate) const BYTE: i32 = 6;

/// The two tokenizers GGUF's runtime implements.
#[derive(Clone, Debug)]
pub enum Kind {
    /// `gpt2`: byte-level BPE with this pre-tokenizer (`tokenizer.ggml.pre`).
    ByteLevel {
        /// `tokenizer.ggml.pre`.
        pre: &'static str,
    },
    /// `llama`: SentencePiece-style.
    SentencePiece {
        /// Each token's score (minus the rank of the merge that makes it).
        scores: Vec<f32>,
        /// Whether a `▁` goes before the text.
        add_space_prefix: bool,
        /// The unknown token's id.
        unknown: Option<u32>,
    },
}

/// The tokenizer, ready to be written.
#[derive(Clone, Debug)]
pub struct GgufTokenizer {
    /// Byte-level BPE or SentencePiece-style, and what each needs.
    pub kind: Kind,
    /// The tokens in id order, padded to the embedding's rows.
    pub tokens: Vec<String>,
    /// Their GGUF types.
    pub types: Vec<i32>,
    /// The merges, "a b", by rank.
    pub merges: Vec<String>,
    /// BOS id.
    pub bos: Option<u32>,
    /// EOS id.
    pub eos: Option<u32>,
    /// End-of-turn id (`<|eot_id|>` or `<|im_end|>`), when the vocabulary has one.
    pub eot: Option<u32>,
    /// Padding id.
    pub pad: Option<u32>,
    /// Whether encoding starts with BOS.
    pub add_bos: bool,
    /// The chat template (Jinja).
    pub chat_template: Option<String>,
}

impl GgufTokenizer {
    /// Reads `dir/tokenizer.json` (else `dir/tokenizer.model`) and `dir/tokenizer_config.json`
    /// (optional), with config.json's BOS/EOS ids as the last resort; `n_vocab` is
    /// the embedding's row count, which the tokens must not exceed (rows past the tokens are
    /// padded with unused tokens, as transformers pads embeddings).
    pub fn read(
        dir: &Path,
        n_vocab: usize,
        config_bos: Option<u32>,
        config_eos: Option<u32>,
    ) -> Result<GgufTokenizer, ConvertError> {
        let (json, model) = (dir.join("tokenizer.json"), dir.join("tokenizer.model"));
        let v = if json.exists() {
            from_json(&json, n_vocab)?
        } else if model.exists() {
            crate::sentencepiece::read(&model, n_vocab)?
        } else {
            return Err(ConvertError::Missing { path: json, why: "the tokenizer (or tokenizer.model)".to_string() });
        };
        let Vocabulary { kind, tokens, types, merges, add_bos, bos: model_bos, eos: model_eos, source } = v;
        let source_name = source.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();

        let config_path = dir.join("tokenizer_config.json");
        let config = if config_path.exists() { Some(JsonFile::open(&config_path)?) } else { None };
        let id_of = |text: &str| tokens.iter().position(|t| t == text).map(|i| i as u32);
        let special = |key: &str| -> Result<Option<u32>, ConvertError> {
            let Some(c) = &config else { return Ok(None) };
            let text = match c.get(key) {
                None => return Ok(None),
                Some(Value::String(s)) => s.clone(),
                Some(v) => match v.get("content").and_then(Value::as_str) {
                    Some(s) => s.to_string(),
                    None => return Err(c.error(key, format!("{v} is not a token"))),
                },
            };
            id_of(&text).map(Some).ok_or_else(|| c.error(key, format!("'{text}' is not a token of {source_name}")))
        };
        let bos = special("bos_token")?.or(model_bos).or(config_bos);
        let eos = special("eos_token")?.or(model_eos).or(config_eos);
        let pad = special("pad_token")?;
        let eot = id_of("<|eot_id|>").or_else(|| id_of("<|im_end|>"));
        let add_bos = match &config {
            Some(c) => c.opt_bool("add_bos_token")?.unwrap_or(add_bos),
            None => add_bos,
        };
        let chat_template = match &config {
            Some(c) => chat_template(c)?,
            None => None,
        };
        Ok(GgufTokenizer { kind, tokens, types, merges, bos, eos, eot, pad, add_bos, chat_template })
    }

    /// Adds the `tokenizer.*` keys to `w`.
    pub fn write(&self, w: &mut GgufWriter) -> Result<(), GgufWriteError> {
        match &self.kind {
            Kind::ByteLevel { pre } => {
                w.add_str("tokenizer.ggml.model", "gpt2")?;
                w.add_str("tokenizer.ggml.pre", pre)?;
            }
            Kind::SentencePiece { .. } => {
                w.add_str("tokenizer.ggml.model", "llama")?;
                w.add_str("tokenizer.ggml.pre", "default")?;
            }
        }
        w.add_str_array("tokenizer.ggml.tokens", self.tokens.iter().cloned())?;
        if let Kind::SentencePiece { scores, .. } = &self.kind {
            w.add("tokenizer.ggml.scores", MetaArray::of_f32(scores.iter().copied()))?;
        }
        w.add("tokenizer.ggml.token_type", MetaArray::of_i32(self.types.iter().copied()))?;
        match &self.kind {
            Kind::ByteLevel { .. } => {
                w.add_str_array("tokenizer.ggml.merges", self.merges.iter().cloned())?;
            }
            Kind::SentencePiece { add_space_prefix, unknown, .. } => {
                w.add_bool("tokenizer.ggml.add_space_prefix", *add_space_prefix)?;
                if let Some(u) = unknown {
                    w.add_u32("tokenizer.ggml.unknown_token_id", *u)?;
                }
            }
        }
        for (key, id) in [
            ("tokenizer.ggml.bos_token_id", self.bos),
            ("tokenizer.ggml.eos_token_id", self.eos),
            ("tokenizer.ggml.eot_token_id", self.eot),
            ("tokenizer.ggml.padding_token_id", self.pad),
        ] {
            if let Some(id) = id {
                w.add_u32(key, id)?;
            }
        }
        w.add_bool("tokenizer.ggml.add_bos_token", self.add_bos)?;
        w.add_bool("tokenizer.ggml.add_eos_token", false)?;
        if let Some(t) = &self.chat_template {
            w.add_str("tokenizer.chat_template", t)?;
        }
        Ok(())
    }
}

/// What the vocabulary file says, before tokenizer_config.json's special tokens.
pub(crate) struct Vocabulary {
    pub kind: Kind,
    pub tokens: Vec<String>,
    pub types: Vec<i32>,
    pub merges: Vec<String>,
    /// Whether encoding starts with BOS unless tokenizer_config.json says otherwise.
    pub add_bos: bool,
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    /// The file it came from.
    pub source: PathBuf,
}

/// A tokenizer.json's vocabulary.
fn from_json(path: &Path, n_vocab: usize) -> Result<Vocabulary, ConvertError> {
    let t = JsonFile::open(path)?;
    let bad = |reason: String| ConvertError::Tokenizer { path: path.to_path_buf(), reason };
    let model = t.get("model").ok_or_else(|| bad("no \"model\"".to_string()))?;
    let kind = model.get("type").and_then(Value::as_str).unwrap_or("?");
    if kind != "BPE" {
        return Err(bad(format!("model.type '{kind}' is not supported (a byte-level BPE)")));
    }
    let sentencepiece = model.get("byte_fallback").and_then(Value::as_bool) == Some(true);
    let pre = if sentencepiece { None } else { Some(pre_tokenizer(t.get("pre_tokenizer")).map_err(&bad)?) };
    let vocab =
        model.get("vocab").and_then(Value::as_object).ok_or_else(|| bad("no model.vocab object".to_string()))?;
    let mut tokens: Vec<Option<String>> = Vec::new();
    let mut types: Vec<i32> = Vec::new();
    let mut put = |id: usize, text: &str, ty: i32| -> Result<(), String> {
        if id >= n_vocab {
            return Err(format!("token '{text}' has id {id}, past the embedding's {n_vocab} rows"));
        }
        if tokens.len() <= id {
            tokens.resize(id + 1, None);
            types.resize(id + 1, NORMAL);
        }
        tokens[id] = Some(text.to_string());
        types[id] = ty;
        Ok(())
    };
    for (text, id) in vocab {
        let id = id
            .as_u64()
            .and_then(|i| usize::try_from(i).ok())
            .ok_or_else(|| bad(format!("model.vocab.{text}: not an id")))?;
        put(id, text, NORMAL).map_err(&bad)?;
    }
    for added in t.get("added_tokens").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default() {
        let text = added
            .get("content")
            .and_then(Value::as_str)
            .ok_or_else(|| bad("an added token has no content".to_string()))?;
        let id = added.get("id").and_then(Value::as_u64).and_then(|i| usize::try_from(i).ok());
        let id = id.ok_or_else(|| bad(format!("added token '{text}' has no id")))?;
        let special = added.get("special").and_then(Value::as_bool).unwrap_or(false);
        put(id, text, if special { CONTROL } else { USER_DEFINED }).map_err(&bad)?;
    }
    // Holes and rows past the last token: unused tokens, as llama.cpp's converter pads.
    tokens.resize(n_vocab, None);
    types.resize(n_vocab, NORMAL);
    let tokens: Vec<String> = tokens
        .into_iter()
        .enumerate()
        .map(|(i, t)| {
            t.unwrap_or_else(|| {
                types[i] = USER_DEFINED;
                format!("[PAD{i}]")
            })
        })
        .collect();
    let mut seen = std::collections::HashSet::new();
    if let Some((i, t)) = tokens.iter().enumerate().find(|(_, t)| !seen.insert(t.as_str())) {
        return Err(bad(format!("token '{t}' (id {i}) appears twice")));
    }
    let merges = merges(model.get("merges")).map_err(&bad)?;
    let kind = match pre {
        Some(pre) => Kind::ByteLevel { pre },
        None => {
            let unk = model.get("unk_token").and_then(Value::as_str);
            let unknown = unk.and_then(|u| tokens.iter().position(|t| t == u)).map(|i| i as u32);
            for (i, t) in tokens.iter().enumerate() {
                if types[i] == NORMAL && is_byte_piece(t) {
                    types[i] = BYTE;
                }
            }
            if let Some(u) = unknown {
                types[u as usize] = UNKNOWN;
            }
            if let Some(b) = (0..=255u8).find(|b| !tokens.iter().any(|t| *t == format!("<0x{b:02X}>"))) {
                return Err(bad(format!("byte_fallback without a token for byte <0x{b:02X}>")));
            }
            let scores = merge_scores(&tokens, &merges);
            Kind::SentencePiece { scores, add_space_prefix: adds_space_prefix(&t), unknown }
        }
    };
    let add_bos = post_processor_adds_bos(t.get("post_processor"));
    Ok(Vocabulary { kind, tokens, types, merges, add_bos, bos: None, eos: None, source: path.to_path_buf() })
}

/// Whether `piece` is a byte token, `<0xXX>`.
fn is_byte_piece(piece: &str) -> bool {
    piece.len() == 6
        && piece.starts_with("<0x")
        && piece.ends_with('>')
        && piece[3..5].chars().all(|c| c.is_ascii_hexdigit())
}

/// Each token's SentencePiece score: minus the rank of the first merge that makes it (so
/// the best-ranked merge scores highest), and below every merge for the rest.
fn merge_scores(tokens: &[String], merges: &[String]) -> Vec<f32> {
    let mut rank = std::collections::HashMap::with_capacity(merges.len());
    for (r, m) in merges.iter().enumerate() {
        rank.entry(m.replacen(' ', "", 1)).or_insert(r);
    }
    let below = merges.len() as f32;
    tokens.iter().map(|t| rank.get(t).map_or(-below - 1.0, |&r| -(r as f32))).collect()
}

/// Whether the normalizer or pre-tokenizer puts a `▁` before the text (Llama 2's `Prepend`,
/// or a `Metaspace` whose scheme prepends).
fn adds_space_prefix(t: &JsonFile) -> bool {
    fn any_step(v: Option<&Value>, list_key: &str, is: &dyn Fn(&Value) -> bool) -> bool {
        match v {
            Some(v) if v.get("type").and_then(Value::as_str) == Some("Sequence") => {
                v.get(list_key).and_then(Value::as_array).is_some_and(|a| a.iter().any(is))
            }
            Some(v) => is(v),
            None => false,
        }
    }
    let prepend = |v: &Value| {
        v.get("type").and_then(Value::as_str) == Some("Prepend")
            && v.get("prepend").and_then(Value::as_str) == Some("\u{2581}")
    };
    let metaspace = |v: &Value| {
        v.get("type").and_then(Value::as_str) == Some("Metaspace")
            && v.get("prepend_scheme").and_then(Value::as_str).unwrap_or("always") != "never"
            && v.get("add_prefix_space").and_then(Value::as_bool) != Some(false)
    };
    any_step(t.get("normalizer"), "normalizers", &prepend)
        || any_step(t.get("pre_tokenizer"), "pretokenizers", &metaspace)
}

/// The runtime's name for the pre-tokenizer tokenizer.json describes.
fn pre_tokenizer(pre: Option<&Value>) -> Result<&'static str, String> {
    let Some(pre) = pre else { return Err("no pre_tokenizer: not a byte-level BPE".to_string()) };
    let steps: Vec<&Value> = match pre.get("type").and_then(Value::as_str) {
        Some("Sequence") => {
            pre.get("pretokenizers").and_then(Value::as_array).map(|a| a.iter().collect()).unwrap_or_default()
        }
        _ => vec![pre],
    };
    let kind = |v: &Value| v.get("type").and_then(Value::as_str).unwrap_or("?").to_string();
    let byte_level = |v: &Value, regex: bool| {
        kind(v) == "ByteLevel" && v.get("use_regex").and_then(Value::as_bool).unwrap_or(true) == regex
    };
    let is_split_of = |v: &Value, pattern: &str| {
        kind(v) == "Split" && v.get("pattern").and_then(|p| p.get("Regex")).and_then(Value::as_str) == Some(pattern)
    };
    let individual_digits =
        |v: &Value| kind(v) == "Digits" && v.get("individual_digits").and_then(Value::as_bool) == Some(true);
    match steps.as_slice() {
        [split, bl] if is_split_of(split, LLAMA3_SPLIT) && byte_level(bl, false) => Ok("llama-bpe"),
        [digits, bl] if individual_digits(digits) && byte_level(bl, true) => Ok("smollm"),
        [bl] if byte_level(bl, true) => Ok("gpt-2"),
        _ => Err(format!(
            "pre_tokenizer [{}] is not one the runtime implements (Llama 3's split, SmolLM's digits + GPT-2, or GPT-2's)",
            steps.iter().map(|s| kind(s)).collect::<Vec<_>>().join(", ")
        )),
    }
}

/// The merges as "a b" strings (tokenizer.json has them as strings or as [a, b] pairs).
fn merges(merges: Option<&Value>) -> Result<Vec<String>, String> {
    let Some(Value::Array(list)) = merges else { return Err("no model.merges array".to_string()) };
    list.iter()
        .enumerate()
        .map(|(i, m)| match m {
            Value::String(s) if s.split(' ').count() == 2 => Ok(s.clone()),
            Value::Array(pair) => match pair.as_slice() {
                [Value::String(a), Value::String(b)] if !a.contains(' ') && !b.contains(' ') => Ok(format!("{a} {b}")),
                _ => Err(format!("model.merges[{i}] is not a pair of tokens")),
            },
            _ => Err(format!("model.merges[{i}] is not a merge")),
        })
        .collect()
}

/// Whether the post-processor's template starts with a BOS (`TemplateProcessing` whose
/// `single` begins with a special token).
fn post_processor_adds_bos(post: Option<&Value>) -> bool {
    let single = |v: &Value| {
        v.get("single").and_then(Value::as_array).and_then(|s| s.first()).map(|f| f.get("SpecialToken").is_some())
    };
    match post {
        Some(p) if p.get("type").and_then(Value::as_str) == Some("TemplateProcessing") => single(p).unwrap_or(false),
        Some(p) if p.get("type").and_then(Value::as_str) == Some("Sequence") => {
            p.get("processors").and_then(Value::as_array).is_some_and(|ps| {
                ps.iter().any(|q| {
                    q.get("type").and_then(Value::as_str) == Some("TemplateProcessing") && single(q).unwrap_or(false)
                })
            })
        }
        _ => false,
    }
}

/// `chat_template`: a string, or a list of named templates (the one named `default`).
fn chat_template(c: &JsonFile) -> Result<Option<String>, ConvertError> {
    match c.get("chat_template") {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(Value::Array(list)) => {
            let named = list.iter().find(|t| t.get("name").and_then(Value::as_str) == Some("default"));
            Ok(named.and_then(|t| t.get("template")).and_then(Value::as_str).map(str::to_string))
        }
        Some(v) => Err(c.error("chat_template", format!("{} is not a template", v))),
    }
}
