//! End-of-generation tokens known by their text: chat models end a turn with a token such
//! as `<|im_end|>` or `<|eot_id|>` that the GGUF does not always name as EOS, EOT or EOM
//! (SmolLM2 names `<|im_end|>` but also stops at `<|endoftext|>`). llama.cpp adds these
//! tokens to its end-of-generation set by text; so does this module.

use super::TokenType;

/// Texts of tokens that end generation (llama.cpp's list in `llama_vocab::impl::load`,
/// plus `</s>`, the EOS of SentencePiece vocabularies).
const END_OF_GENERATION_TEXTS: [&str; 12] = [
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<｜end▁of▁sentence｜>",
    "</s>",
];

/// The ids of the tokens whose text is an end-of-generation text. Only control and
/// user-defined tokens count: a normal token spelled `</s>` is text a model may write.
pub(crate) fn ids_by_text<'a>(
    texts: impl Iterator<Item = &'a str> + 'a,
    types: &'a [TokenType],
) -> impl Iterator<Item = u32> + 'a {
    texts.zip(types).zip(0u32..).filter_map(|((text, &ty), id)| {
        let special = matches!(ty, TokenType::Control | TokenType::UserDefined);
        (special && END_OF_GENERATION_TEXTS.contains(&text)).then_some(id)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_and_user_defined_tokens_with_an_end_text_end_generation() {
        let texts: Vec<String> =
            ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "</s>", "<|eot_id|>", "hello", "<end_of_turn>"]
                .map(String::from)
                .to_vec();
        let types = [
            TokenType::Control,
            TokenType::Control,
            TokenType::Control,
            TokenType::Normal,
            TokenType::UserDefined,
            TokenType::Normal,
            TokenType::Unknown,
        ];
        assert_eq!(ids_by_text(texts.iter().map(String::as_str), &types).collect::<Vec<_>>(), [0, 2, 4]);
    }
}
