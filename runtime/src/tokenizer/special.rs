//! Special-token parsing: texts of control and user-defined tokens (such as
//! `<|im_start|>`) written literally in the input are cut out as whole tokens before the
//! pre-tokenizer and BPE see the text around them.
//!
//! This is llama.cpp's `tokenizer_st_partition`: special tokens are tried longest text
//! first (ties by lower id); each one splits every remaining text fragment at all of its
//! non-overlapping occurrences, left to right. Control and unknown tokens are matched only
//! when the caller asks for special-token parsing; user-defined tokens are matched always
//! (as in llama.cpp and Hugging Face `tokenizers`, where non-special added tokens are
//! always split out).

/// A special token that the partition can match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SpecialToken {
    /// The token id.
    pub(crate) id: u32,
    /// Its text, matched literally.
    pub(crate) text: String,
    /// Whether it is matched even when special-token parsing is off (user-defined tokens).
    pub(crate) always: bool,
}

/// Sorts special tokens into matching order: longest text first, then lowest id.
pub(crate) fn sort_for_matching(tokens: &mut [SpecialToken]) {
    tokens.sort_by(|a, b| b.text.len().cmp(&a.text.len()).then(a.id.cmp(&b.id)));
}

/// A piece of input after special-token parsing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fragment<'t> {
    /// Text still to be pre-tokenized and encoded.
    Text(&'t str),
    /// A special token matched literally.
    Token(u32),
}

/// Cuts `text` at every occurrence of the special tokens in `specials` (already in
/// matching order); with `parse_special` off only the `always` tokens are matched.
pub(crate) fn partition<'t>(text: &'t str, specials: &[SpecialToken], parse_special: bool) -> Vec<Fragment<'t>> {
    let mut fragments = if text.is_empty() { Vec::new() } else { vec![Fragment::Text(text)] };
    for special in specials.iter().filter(|s| (parse_special || s.always) && !s.text.is_empty()) {
        if !fragments.iter().any(|f| matches!(f, Fragment::Text(t) if t.contains(special.text.as_str()))) {
            continue;
        }
        let mut next = Vec::with_capacity(fragments.len() + 2);
        for fragment in fragments {
            let Fragment::Text(t) = fragment else {
                next.push(fragment);
                continue;
            };
            let mut pos = 0;
            for (at, matched) in t.match_indices(special.text.as_str()) {
                if at > pos {
                    next.push(Fragment::Text(&t[pos..at]));
                }
                next.push(Fragment::Token(special.id));
                pos = at + matched.len();
            }
            if pos < t.len() {
                next.push(Fragment::Text(&t[pos..]));
            }
        }
        fragments = next;
    }
    fragments
}

#[cfg(test)]
mod tests {
    use super::*;

    fn specials() -> Vec<SpecialToken> {
        let mut v = vec![
            SpecialToken { id: 1, text: "<|im_start|>".into(), always: false },
            SpecialToken { id: 2, text: "<|im_end|>".into(), always: false },
            SpecialToken { id: 3, text: "<|im".into(), always: false },
            SpecialToken { id: 9, text: "@@".into(), always: true },
        ];
        sort_for_matching(&mut v);
        v
    }

    #[test]
    fn longest_token_wins_and_text_between_is_kept() {
        use Fragment::*;
        assert_eq!(
            partition("<|im_start|>user\nHi<|im_end|>\n", &specials(), true),
            [Token(1), Text("user\nHi"), Token(2), Text("\n")]
        );
        assert_eq!(partition("a<|imb", &specials(), true), [Text("a"), Token(3), Text("b")]);
    }

    #[test]
    fn control_tokens_need_parse_special_but_user_defined_do_not() {
        use Fragment::*;
        assert_eq!(partition("x<|im_end|>@@y", &specials(), false), [Text("x<|im_end|>"), Token(9), Text("y")]);
        assert_eq!(partition("@@@@@", &specials(), false), [Token(9), Token(9), Text("@")]);
    }

    #[test]
    fn empty_text_has_no_fragments() {
        assert!(partition("", &specials(), true).is_empty());
    }
}
