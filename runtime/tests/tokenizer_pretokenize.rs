//! The pre-tokenizers' look-ahead emulation against the literal patterns of docs/formats.md
//! (§ Tokenizer) and llama.cpp, run with real look-ahead by `fancy-regex`, on
//! random text dense in whitespace runs, line breaks, contractions, digits and non-ASCII
//! letters, numbers, spaces and marks.

use std::sync::OnceLock;

use fancy_regex::Regex as FancyRegex;
use proptest::prelude::*;
use purebee_runtime::tokenizer::{PreTokenizer, PreTokenizerKind};

/// docs/formats.md's `llama-bpe` pattern (§ Tokenizer), verbatim.
const LLAMA3: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// docs/formats.md's second `smollm` pattern (GPT-2's, § Tokenizer), verbatim.
const GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)";

/// The literal patterns of each kind (`default` as in llama.cpp's `llama-vocab.cpp`).
fn patterns(kind: PreTokenizerKind) -> &'static [&'static str] {
    match kind {
        PreTokenizerKind::LlamaBpe => &[LLAMA3],
        PreTokenizerKind::Smollm => &[r"\p{N}", GPT2],
        PreTokenizerKind::Gpt2 => &[GPT2],
        PreTokenizerKind::Default => &[r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", r"[0-9][0-9][0-9]"],
    }
}

const KINDS: [PreTokenizerKind; 4] =
    [PreTokenizerKind::LlamaBpe, PreTokenizerKind::Smollm, PreTokenizerKind::Gpt2, PreTokenizerKind::Default];

/// llama.cpp's `unicode_regex_split`: each pattern splits every fragment left by the
/// previous one; matches and the gaps between them are both fragments.
fn reference_split(kind: PreTokenizerKind, text: &str) -> Vec<&str> {
    static COMPILED: OnceLock<Vec<(PreTokenizerKind, Vec<FancyRegex>)>> = OnceLock::new();
    let compiled = COMPILED.get_or_init(|| {
        KINDS
            .iter()
            .map(|&k| {
                let res = patterns(k).iter().map(|p| FancyRegex::new(p).unwrap_or_else(|e| panic!("{p}: {e}")));
                (k, res.collect())
            })
            .collect()
    });
    let regexes = compiled.iter().find(|(k, _)| *k == kind).map(|(_, r)| r.as_slice()).unwrap_or_default();
    let mut fragments: Vec<&str> = if text.is_empty() { vec![] } else { vec![text] };
    for re in regexes {
        let pattern = re.as_str();
        let mut next = Vec::new();
        for fragment in fragments {
            let mut pos = 0;
            for m in re.find_iter(fragment) {
                let m = m.unwrap_or_else(|e| panic!("{pattern} on {fragment:?}: {e}"));
                if m.start() > pos {
                    next.push(&fragment[pos..m.start()]);
                }
                next.push(m.as_str());
                pos = m.end();
            }
            if pos < fragment.len() {
                next.push(&fragment[pos..]);
            }
        }
        fragments = next;
    }
    fragments
}

fn pre(kind: PreTokenizerKind) -> &'static PreTokenizer {
    static COMPILED: OnceLock<Vec<PreTokenizer>> = OnceLock::new();
    let all = COMPILED
        .get_or_init(|| KINDS.iter().map(|&k| PreTokenizer::new(k).unwrap_or_else(|e| panic!("{e}"))).collect());
    all.iter().find(|p| p.kind() == kind).unwrap_or_else(|| panic!("{kind:?} not compiled"))
}

/// Text made of pieces chosen to exercise every branch of the patterns.
fn dense_text() -> impl Strategy<Value = String> {
    let atoms = prop::sample::select(vec![
        " ", "  ", "   ", "\t", "\n", "\r\n", "\r", "\n\n", "\u{a0}", "\u{3000}", "\u{2028}", "\u{85}", "\u{b}", "a",
        "Z", "é", "東", "ß", "Ω", "1", "0", "42", "٣", "½", "²", "'", "'s", "'S", "'re", "'RE", "'Ll", "'d", "'t",
        "'M", "'ve", ".", ",", "!", "?", "$", "+", "<", "=", "|", "~", "^", "😀", "\u{301}", "-", "_", "@",
    ]);
    prop::collection::vec(atoms, 0..48).prop_map(|v| v.concat())
}

/// `(?i:'s)` also accepts `'ſ` (U+017F, which case-folds to `s`); llama.cpp's splitter
/// lowercases with `tolower` and does not, and neither does the emulation. Random text
/// avoids that one character; `long_s_is_not_a_contraction` pins the difference.
fn without_long_s(s: String) -> String {
    s.replace('ſ', "x")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn emulation_matches_the_lookahead_regexes_on_dense_text(text in dense_text()) {
        for kind in KINDS {
            prop_assert_eq!(pre(kind).split(&text), reference_split(kind, &text), "{:?} on {:?}", kind, text);
        }
    }

    #[test]
    fn emulation_matches_the_lookahead_regexes_on_any_text(text in any::<String>().prop_map(without_long_s)) {
        for kind in KINDS {
            prop_assert_eq!(pre(kind).split(&text), reference_split(kind, &text), "{:?} on {:?}", kind, text);
        }
    }
}

#[test]
fn long_s_is_not_a_contraction() {
    assert_eq!(pre(PreTokenizerKind::LlamaBpe).split("x'ſa"), ["x", "'ſa"]);
    assert_eq!(reference_split(PreTokenizerKind::LlamaBpe, "x'ſa"), ["x", "'ſ", "a"]);
}

#[test]
fn the_fixture_texts_split_alike() {
    let texts = [
        "tabs\tand\nnewlines\n\n  indented",
        "1234567890 and 3.14159",
        "don't you'll I'm WE'RE",
        " Hello  world",
        "    ",
        "Ünïcödé: café, naïve, 東京, 😀",
        "a \n\t b  \r\n  c   ",
    ];
    for kind in KINDS {
        for text in texts {
            assert_eq!(pre(kind).split(text), reference_split(kind, text), "{kind:?} on {text:?}");
        }
    }
}
