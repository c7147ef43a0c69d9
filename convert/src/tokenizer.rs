//! A checkpoint's tokenizer (`tokenizer.json`, `tokenizer_config.json`) as GGUF's
//! `tokenizer.ggml.*` keys and `tokenizer.chat_template`.
//!
//! Byte-level BPE (`tokenizer.ggml.model = gpt2`: Llama 3, BitNet b1.58 2B-4T, SmolLM2):
//! the tokens in id order, their types (special added tokens are control tokens, other added
//! tokens user-defined), the merges, and the pre-tokenizer. llama.cpp's converter names the
//! pre-tokenizer by hashing how the tokenizer splits a test text, which needs the
//! `tokenizers` library; this one reads the pre-tokenizer's own description in
//! tokenizer.json instead and recognizes the splits the runtime implements (`llama-bpe`,
//! `smollm`, `gpt-2`). Any other tokenizer is refused by name rather than carried wrongly.

use std::path::Path;

use purebee_memory::gguf::{GgufWriteError, GgufWriter, MetaArray};
use serde_json::Value;

use crate::json::JsonFile;
use crate::ConvertError;

/// Llama 3's split pattern, as tokenizer.json spells it.
const LLAMA3_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// GGUF token types (llama.cpp's `llama_token_type`).
const NORMAL: i32 = 1;
const CONTROL: i32 = 3;
const USER_DEFINED: i32 = 4;

/// The tokenizer, ready to be written.
#[derive(Clone, Debug)]
pub struct GgufTokenizer {
    /// `tokenizer.ggml.pre`.
    pub pre: &'static str,
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
    /// Reads `dir/tokenizer.json` and `dir/tokenizer_config.json` (optional); `n_vocab` is
    /// the embedding's row count, which the tokens must not exceed (rows past the tokens are
    /// padded with unused tokens, as transformers pads embeddings).
    pub fn read(
        dir: &Path,
        n_vocab: usize,
        config_bos: Option<u32>,
        config_eos: Option<u32>,
    ) -> Result<GgufTokenizer, ConvertError> {
        let path = dir.join("tokenizer.json");
        if !path.exists() {
            return Err(ConvertError::Missing { path, why: "the tokenizer (only tokenizer.json is read)".to_string() });
        }
        let t = JsonFile::open(&path)?;
        let bad = |reason: String| ConvertError::Tokenizer { path: path.clone(), reason };
        let model = t.get("model").ok_or_else(|| bad("no \"model\"".to_string()))?;
        let kind = model.get("type").and_then(Value::as_str).unwrap_or("?");
        if kind != "BPE" {
            return Err(bad(format!("model.type '{kind}' is not supported (a byte-level BPE)")));
        }
        if model.get("byte_fallback").and_then(Value::as_bool) == Some(true) {
            return Err(bad("a SentencePiece-style BPE (byte_fallback) is not supported yet".to_string()));
        }
        let pre = pre_tokenizer(t.get("pre_tokenizer")).map_err(bad)?;
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
            id_of(&text).map(Some).ok_or_else(|| c.error(key, format!("'{text}' is not a token of tokenizer.json")))
        };
        let bos = special("bos_token")?.or(config_bos);
        let eos = special("eos_token")?.or(config_eos);
        let pad = special("pad_token")?;
        let eot = id_of("<|eot_id|>").or_else(|| id_of("<|im_end|>"));
        let add_bos = match &config {
            Some(c) => c.opt_bool("add_bos_token")?.unwrap_or_else(|| post_processor_adds_bos(t.get("post_processor"))),
            None => post_processor_adds_bos(t.get("post_processor")),
        };
        let chat_template = match &config {
            Some(c) => chat_template(c)?,
            None => None,
        };
        Ok(GgufTokenizer { pre, tokens, types, merges, bos, eos, eot, pad, add_bos, chat_template })
    }

    /// Adds the `tokenizer.*` keys to `w`.
    pub fn write(&self, w: &mut GgufWriter) -> Result<(), GgufWriteError> {
        w.add_str("tokenizer.ggml.model", "gpt2")?;
        w.add_str("tokenizer.ggml.pre", self.pre)?;
        w.add_str_array("tokenizer.ggml.tokens", self.tokens.iter().cloned())?;
        w.add("tokenizer.ggml.token_type", MetaArray::of_i32(self.types.iter().copied()))?;
        w.add_str_array("tokenizer.ggml.merges", self.merges.iter().cloned())?;
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
