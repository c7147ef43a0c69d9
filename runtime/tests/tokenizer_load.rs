//! Loading a Llama-3-sized vocabulary (about 111k tokens and 327k merges, synthetic) must be
//! fast. Release builds take about 0.1 s here; the bound is a generous 2 s so that a busy
//! 2-core CI machine running the test profile (debug assertions on) does not flake, while
//! a quadratic merge table would still miss it by far. The time is printed for the record.

use std::time::Instant;

use purebee_runtime::tokenizer::{bytes, Tokenizer, TokenizerParts};

/// Every string of 1 to 4 letters over an 18-letter alphabet is a token (plus the 256 byte
/// tokens); every split of every such string into two tokens is a merge, shorter results
/// first.
fn synthetic() -> TokenizerParts {
    let letters: Vec<char> = "abcdefghijklmnopqr".chars().collect();
    let mut tokens: Vec<String> = (0..=255u8).map(|b| bytes::byte_to_char(b).to_string()).collect();
    let mut merges = Vec::new();
    let mut level: Vec<String> = letters.iter().map(|c| c.to_string()).collect();
    for _ in 2..=4 {
        let next: Vec<String> = level.iter().flat_map(|s| letters.iter().map(move |c| format!("{s}{c}"))).collect();
        for word in &next {
            for split in 1..word.len() {
                merges.push(format!("{} {}", &word[..split], &word[split..]));
            }
        }
        tokens.extend(next.iter().cloned());
        level = next;
    }
    TokenizerParts { tokens, merges, pre: "llama-bpe".into(), ..TokenizerParts::default() }
}

#[test]
fn a_llama3_sized_vocabulary_loads_quickly() {
    let parts = synthetic();
    let (n_tokens, n_merges) = (parts.tokens.len(), parts.merges.len());
    assert!(n_tokens > 110_000 && n_merges > 280_000, "{n_tokens} tokens, {n_merges} merges");
    let start = Instant::now();
    let tok = Tokenizer::from_parts(parts).unwrap_or_else(|e| panic!("{e}"));
    let elapsed = start.elapsed();
    eprintln!("from_parts: {n_tokens} tokens, {n_merges} merges in {elapsed:?}");
    assert_eq!(tok.token_count(), n_tokens);
    assert_eq!(tok.encode("abcd rqpo", false, false).len(), 3);
    assert!(elapsed.as_secs_f64() < 2.0, "loading took {elapsed:?}");
}
