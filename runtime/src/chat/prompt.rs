//! A rendered chat prompt to token ids.

use crate::tokenizer::Tokenizer;

/// The ids of a rendered chat prompt: special-token text (`<|im_start|>`) becomes the
/// special tokens, and BOS comes first when the vocabulary adds it, unless the template
/// already wrote it (templates that write `{{ bos_token }}` would otherwise get two).
pub fn tokenize_prompt(tokenizer: &Tokenizer, rendered: &str) -> Vec<u32> {
    let bos_text = tokenizer.bos().and_then(|id| tokenizer.token_text(id)).filter(|t| !t.is_empty());
    let template_wrote_bos = bos_text.is_some_and(|t| rendered.starts_with(t));
    tokenizer.encode(rendered, !template_wrote_bos, true)
}
