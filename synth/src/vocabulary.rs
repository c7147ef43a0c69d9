//! The tokenizer of a synthetic model.

use purebee_memory::gguf::{GgufWriteError, GgufWriter, MetaArray};
use purebee_runtime::tokenizer::bytes::byte_to_char;

/// `tokenizer.ggml.token_type` of a normal token.
const TOKEN_NORMAL: i32 = 1;
/// `tokenizer.ggml.token_type` of a control token.
const TOKEN_CONTROL: i32 = 3;
/// The BOS token's id and text in [`Vocabulary::bytes`].
pub const BOS: (u32, &str) = (256, "<|begin_of_text|>");
/// The EOS token's id and text in [`Vocabulary::bytes`].
pub const EOS: (u32, &str) = (257, "<|end_of_text|>");

/// A `gpt2` (byte-level BPE) tokenizer as GGUF stores it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Vocabulary {
    /// Token texts, id = index.
    pub tokens: Vec<String>,
    /// Their `tokenizer.ggml.token_type` values.
    pub types: Vec<i32>,
    /// `tokenizer.ggml.merges`, highest priority first.
    pub merges: Vec<String>,
    /// `tokenizer.ggml.pre`.
    pub pre: String,
    /// The BOS token's id (also written as the unknown token).
    pub bos: u32,
    /// The EOS token's id (also written as the padding token).
    pub eos: u32,
    /// `tokenizer.chat_template`, if any.
    pub chat_template: Option<String>,
}

impl Vocabulary {
    /// `n_vocab` tokens (at least 258) and no merges, so text encodes to one token per byte:
    /// ids 0..=255 are the byte tokens, normal, spelled in GPT-2's byte-level alphabet (id =
    /// byte value, so `Ġ` is id 32); 256 is BOS and 257 EOS (control); every other id is the
    /// normal token `<synthetic_ID>`. Pre-tokenizer `default`, no chat template.
    pub fn bytes(n_vocab: usize) -> Vocabulary {
        let mut tokens: Vec<String> = (0..=255u8).map(|b| byte_to_char(b).to_string()).collect();
        let mut types = vec![TOKEN_NORMAL; 256];
        for (_, text) in [BOS, EOS] {
            tokens.push(text.to_string());
            types.push(TOKEN_CONTROL);
        }
        for id in tokens.len()..n_vocab {
            tokens.push(format!("<synthetic_{id}>"));
            types.push(TOKEN_NORMAL);
        }
        Vocabulary {
            tokens,
            types,
            merges: Vec::new(),
            pre: "default".to_string(),
            bos: BOS.0,
            eos: EOS.0,
            chat_template: None,
        }
    }

    /// Writes the `tokenizer.*` keys.
    pub(crate) fn write(&self, w: &mut GgufWriter) -> Result<(), GgufWriteError> {
        w.add_str("tokenizer.ggml.model", "gpt2")?;
        w.add_str("tokenizer.ggml.pre", &self.pre)?;
        w.add_str_array("tokenizer.ggml.tokens", self.tokens.iter())?;
        w.add("tokenizer.ggml.token_type", MetaArray::of_i32(self.types.iter().copied()))?;
        w.add_str_array("tokenizer.ggml.merges", self.merges.iter())?;
        w.add_u32("tokenizer.ggml.bos_token_id", self.bos)?;
        w.add_u32("tokenizer.ggml.eos_token_id", self.eos)?;
        w.add_u32("tokenizer.ggml.unknown_token_id", self.bos)?;
        w.add_u32("tokenizer.ggml.padding_token_id", self.eos)?;
        w.add_bool("tokenizer.ggml.add_bos_token", true)?;
        w.add_bool("tokenizer.ggml.add_eos_token", false)?;
        if let Some(template) = &self.chat_template {
            w.add_str("tokenizer.chat_template", template)?;
        }
        Ok(())
    }
}
