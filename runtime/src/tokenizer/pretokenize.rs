//! Pre-tokenizers: the regex splits that cut text into words before BPE, selected by
//! `tokenizer.ggml.pre`, exactly as llama.cpp (`llama-vocab.cpp`, `unicode.cpp`) applies them.
//!
//! A pre-tokenizer is a list of regexes applied in turn. Each regex runs separately on every
//! fragment left by the previous one, and the text between two matches is kept as a
//! fragment of its own (llama.cpp's `unicode_regex_split`). Consequently a look-ahead
//! cannot see past the end of its fragment.
//!
//! # The `\s+(?!\S)` look-ahead
//! The `regex` crate has no look-around, so the patterns below end in a plain `\s+` and
//! [`PreTokenizer::split`] corrects its matches afterwards. The correction is exact:
//! - In these patterns only the final whitespace branch can produce a match that consists of
//!   whitespace alone (for `llama-bpe`: whitespace without `\r`/`\n`; a run that holds a
//!   line break is taken by `\s*[\r\n]+`, which comes first). Greedy `\s+` matches the
//!   whole run of whitespace.
//! - `\s+(?!\S)` would match that run minus its last character when the run is followed by
//!   a non-space character and is at least two characters long, and the whole run
//!   otherwise (at the end of the fragment the look-ahead succeeds).
//! - For a single whitespace character followed by a non-space, `llama-bpe`'s final `\s+`
//!   matches it, and in the GPT-2 pattern (which lacks that final `\s+`) nothing matches,
//!   so it becomes an unmatched one-character fragment: the same piece either way.
//!
//! The llama-bpe contractions use llama.cpp's ASCII-only spelling
//! (`'[sS]|'[tT]|…`) rather than `(?i:'s|…)`, whose Unicode case folding would also
//! accept `'ſ` (U+017F); llama.cpp's own splitter lowercases with `tolower`, which does not.
//! `tests/tokenizer_pretokenize.rs` checks the emulation against the literal regexes
//! (with real look-ahead, via `fancy-regex`) on random text.

use regex::Regex;

use super::error::TokenizerError;

/// The Llama 3 pattern (`llama-bpe`), with its final `\s+(?!\S)|\s+` as a plain `\s+`.
const LLAMA3: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+";

/// The GPT-2 pattern, with its final `\s+(?!\S)` as a plain `\s+`.
const GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+";

/// Every numeric character on its own (SmolLM's first split).
const EACH_DIGIT: &str = r"\p{N}";

/// llama.cpp's `default` pre-tokenizer, first pass: runs of punctuation and ASCII symbols.
const DEFAULT_PUNCT: &str = r"[\p{P}\$\+<=>\^~\|]+";

/// llama.cpp's `default` pre-tokenizer, third pass.
const DEFAULT_NUMBERS: &str = r"\p{N}+";

/// llama.cpp's `default` pre-tokenizer, fourth pass.
const DEFAULT_THREE_DIGITS: &str = r"[0-9][0-9][0-9]";

/// Which pre-tokenizer a vocabulary uses (`tokenizer.ggml.pre`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PreTokenizerKind {
    /// `llama-bpe` (also `llama3`, `llama-v3`): Llama 3 and BitNet b1.58 2B-4T.
    LlamaBpe,
    /// `smollm`: every digit split off, then the GPT-2 pattern.
    Smollm,
    /// `gpt-2` (also `gpt2`): the GPT-2 pattern alone.
    Gpt2,
    /// `default`, and what llama.cpp uses when `tokenizer.ggml.pre` is absent: punctuation
    /// runs, the GPT-2 pattern, number runs, then groups of three ASCII digits.
    Default,
}

/// The names accepted for `tokenizer.ggml.pre`, with the kind each selects.
const NAMES: [(&str, PreTokenizerKind); 7] = [
    ("llama-bpe", PreTokenizerKind::LlamaBpe),
    ("llama3", PreTokenizerKind::LlamaBpe),
    ("llama-v3", PreTokenizerKind::LlamaBpe),
    ("smollm", PreTokenizerKind::Smollm),
    ("gpt-2", PreTokenizerKind::Gpt2),
    ("gpt2", PreTokenizerKind::Gpt2),
    ("default", PreTokenizerKind::Default),
];

impl PreTokenizerKind {
    /// The kind for a `tokenizer.ggml.pre` value, or `None` when it is not supported.
    pub fn from_name(name: &str) -> Option<PreTokenizerKind> {
        NAMES.iter().find(|(n, _)| *n == name).map(|&(_, k)| k)
    }

    /// The supported `tokenizer.ggml.pre` values, comma separated (for error messages).
    pub fn supported_names() -> String {
        NAMES.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
    }

    /// The canonical name of this kind.
    pub fn name(self) -> &'static str {
        match self {
            PreTokenizerKind::LlamaBpe => "llama-bpe",
            PreTokenizerKind::Smollm => "smollm",
            PreTokenizerKind::Gpt2 => "gpt-2",
            PreTokenizerKind::Default => "default",
        }
    }

    /// Whether a word that is itself a token maps to it directly, skipping the merges
    /// (llama.cpp's `ignore_merges`, set for the Llama 3 pre-tokenizer only).
    pub fn ignores_merges(self) -> bool {
        self == PreTokenizerKind::LlamaBpe
    }

    /// Whether `tokenizer.ggml.add_bos_token` defaults to true when the key is absent
    /// (llama.cpp sets it for the Llama 3 pre-tokenizer).
    pub fn adds_bos_by_default(self) -> bool {
        self == PreTokenizerKind::LlamaBpe
    }

    /// The passes of this pre-tokenizer: each pattern and how its whitespace-only matches
    /// are corrected.
    fn passes(self) -> &'static [(&'static str, Lookahead)] {
        match self {
            PreTokenizerKind::LlamaBpe => &[(LLAMA3, Lookahead::WhitespaceWithoutNewline)],
            PreTokenizerKind::Smollm => &[(EACH_DIGIT, Lookahead::None), (GPT2, Lookahead::Whitespace)],
            PreTokenizerKind::Gpt2 => &[(GPT2, Lookahead::Whitespace)],
            PreTokenizerKind::Default => &[
                (DEFAULT_PUNCT, Lookahead::None),
                (GPT2, Lookahead::Whitespace),
                (DEFAULT_NUMBERS, Lookahead::None),
                (DEFAULT_THREE_DIGITS, Lookahead::None),
            ],
        }
    }
}

/// Which matches of a pass came from its final `\s+` branch and get the `(?!\S)`
/// correction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lookahead {
    /// The pattern has no look-ahead.
    None,
    /// Matches made only of whitespace.
    Whitespace,
    /// Matches made only of whitespace other than `\r` and `\n`.
    WhitespaceWithoutNewline,
}

impl Lookahead {
    fn applies_to(self, piece: &str) -> bool {
        match self {
            Lookahead::None => false,
            Lookahead::Whitespace => piece.chars().all(char::is_whitespace),
            Lookahead::WhitespaceWithoutNewline => piece.chars().all(|c| c.is_whitespace() && c != '\r' && c != '\n'),
        }
    }
}

/// A compiled pre-tokenizer.
#[derive(Debug, Clone)]
pub struct PreTokenizer {
    kind: PreTokenizerKind,
    passes: Vec<(Regex, Lookahead)>,
}

impl PreTokenizer {
    /// Compiles the patterns of `kind`.
    pub fn new(kind: PreTokenizerKind) -> Result<PreTokenizer, TokenizerError> {
        let passes = kind
            .passes()
            .iter()
            .map(|&(pattern, lookahead)| {
                Regex::new(pattern)
                    .map(|re| (re, lookahead))
                    .map_err(|e| TokenizerError::Regex { pattern, source: Box::new(e) })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(PreTokenizer { kind, passes })
    }

    /// Which pre-tokenizer this is.
    pub fn kind(&self) -> PreTokenizerKind {
        self.kind
    }

    /// Cuts `text` into the words that BPE then encodes one by one. The words are
    /// non-empty, in order, and concatenate to `text`.
    pub fn split<'t>(&self, text: &'t str) -> Vec<&'t str> {
        let mut fragments: Vec<&'t str> = if text.is_empty() { Vec::new() } else { vec![text] };
        for (re, lookahead) in &self.passes {
            let mut next = Vec::with_capacity(fragments.len() * 2);
            for fragment in fragments {
                split_fragment(re, *lookahead, fragment, &mut next);
            }
            fragments = next;
        }
        fragments
    }
}

/// Splits one fragment by one pass: every match is a piece, and so is the text between
/// two matches.
fn split_fragment<'t>(re: &Regex, lookahead: Lookahead, fragment: &'t str, out: &mut Vec<&'t str>) {
    let mut pos = 0;
    while let Some(m) = re.find_at(fragment, pos) {
        if m.is_empty() {
            // None of the patterns matches the empty string; stop rather than loop if one did.
            break;
        }
        if m.start() > pos {
            out.push(&fragment[pos..m.start()]);
        }
        let piece = m.as_str();
        let mut end = m.end();
        if end < fragment.len() && lookahead.applies_to(piece) {
            // `\s+(?!\S)`: a run of two or more characters followed by a non-space gives up
            // its last character (see the module documentation).
            if let Some((last, _)) = piece.char_indices().nth(1).and(piece.char_indices().next_back()) {
                end = m.start() + last;
            }
        }
        out.push(&fragment[m.start()..end]);
        pos = end;
    }
    if pos < fragment.len() {
        out.push(&fragment[pos..]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(kind: PreTokenizerKind, text: &str) -> Vec<&str> {
        match PreTokenizer::new(kind) {
            Ok(p) => p.split(text),
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn every_kind_compiles_and_round_trips() {
        let text = "Hello,  world!\n\n  123456 don't\t東京 😀 ½ ";
        for (_, kind) in NAMES {
            let words = split(kind, text);
            assert_eq!(words.concat(), text, "{kind:?}");
            assert!(words.iter().all(|w| !w.is_empty()), "{kind:?}: {words:?}");
        }
    }

    #[test]
    fn llama_bpe_splits_like_llama_cpp() {
        assert_eq!(
            split(PreTokenizerKind::LlamaBpe, "tabs\tand\nnewlines\n\n  indented"),
            ["tabs", "\tand", "\n", "newlines", "\n\n", " ", " indented"]
        );
        assert_eq!(
            split(PreTokenizerKind::LlamaBpe, "1234567 WE'RE x   "),
            ["123", "456", "7", " WE", "'RE", " x", "   "]
        );
        assert_eq!(split(PreTokenizerKind::LlamaBpe, "a  \n b"), ["a", "  \n", " b"]);
        assert_eq!(split(PreTokenizerKind::LlamaBpe, "a. \r\n"), ["a", ".", " \r\n"]);
        assert_eq!(split(PreTokenizerKind::LlamaBpe, "x ...\n\ny"), ["x", " ...\n\n", "y"]);
    }

    #[test]
    fn smollm_splits_digits_first() {
        assert_eq!(
            split(PreTokenizerKind::Smollm, "1234567890 and 3.14159"),
            ["1", "2", "3", "4", "5", "6", "7", "8", "9", "0", " and", " ", "3", ".", "1", "4", "1", "5", "9"]
        );
        assert_eq!(
            split(PreTokenizerKind::Smollm, "tabs\tand\nnewlines\n\n  indented"),
            ["tabs", "\t", "and", "\n", "newlines", "\n\n ", " indented"]
        );
        assert_eq!(split(PreTokenizerKind::Smollm, "WE'RE"), ["WE", "'", "RE"]);
    }

    #[test]
    fn gpt2_keeps_a_lone_whitespace_before_a_word_apart() {
        assert_eq!(split(PreTokenizerKind::Gpt2, "a\nb  c   "), ["a", "\n", "b", " ", " c", "   "]);
    }

    #[test]
    fn default_splits_punctuation_then_numbers() {
        assert_eq!(split(PreTokenizerKind::Default, "ab,cd 12345"), ["ab", ",", "cd", " ", "123", "45"]);
    }

    #[test]
    fn empty_text_has_no_words() {
        assert!(split(PreTokenizerKind::LlamaBpe, "").is_empty());
    }

    #[test]
    fn names_resolve() {
        assert_eq!(PreTokenizerKind::from_name("llama-bpe"), Some(PreTokenizerKind::LlamaBpe));
        assert_eq!(PreTokenizerKind::from_name("smollm"), Some(PreTokenizerKind::Smollm));
        assert_eq!(PreTokenizerKind::from_name("qwen2"), None);
        assert!(PreTokenizerKind::supported_names().contains("llama-bpe, "));
    }
}
