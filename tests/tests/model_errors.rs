//! A model file with unsupported, missing or inconsistent metadata, or a tensor of the wrong
//! shape or type for its role, is a clear error naming the file and the key or tensor, never
//! a panic; so is a model file truncated or rewritten after it was opened.
//!
//! The bad files are the I2_S tiny fixture rewritten by memory's `GgufWriter` with one key
//! or tensor edited (named `edited.gguf` in messages).

use std::path::PathBuf;

use purebee_engine_ref::RefEngine;
use purebee_memory::gguf::{GgufError, GgufFile, GgufWriter, MetaArray, MetaValue};
use purebee_memory::DType;
use purebee_runtime::tokenizer::{Tokenizer, TokenizerError};
use purebee_runtime::{LogitsRows, Model, ModelError};
use purebee_tests::tiny;

/// A copy of the I2_S tiny model with metadata and tensors edited: `meta` returns the new
/// value of a key (None drops it); `tensor` may change a tensor's dtype, ne and bytes (None
/// drops it).
fn edited(
    meta: impl Fn(&str, &MetaValue) -> Option<MetaValue>,
    tensor: impl Fn(&str, DType, Vec<u64>, Vec<u8>) -> Option<(DType, Vec<u64>, Vec<u8>)>,
) -> GgufFile {
    edited_with_extra(meta, tensor, None)
}

/// [`edited`], plus one extra F32 tensor `(name, ne)` (zeros) when given.
fn edited_with_extra(
    meta: impl Fn(&str, &MetaValue) -> Option<MetaValue>,
    tensor: impl Fn(&str, DType, Vec<u64>, Vec<u8>) -> Option<(DType, Vec<u64>, Vec<u8>)>,
    extra: Option<(&str, Vec<u64>)>,
) -> GgufFile {
    let src = GgufFile::open(tiny("tiny_b158_i2_s.gguf")).expect("fixture opens");
    let mut w = GgufWriter::new();
    for (k, v) in src.metadata() {
        if k == "general.alignment" {
            continue;
        }
        if let Some(v) = meta(k, v) {
            w.add(k, v).expect("valid key");
        }
    }
    for info in src.tensors() {
        if let Some((dtype, ne, bytes)) =
            tensor(&info.name, info.dtype, info.ne.clone(), src.tensor_bytes(info).to_vec())
        {
            w.add_tensor(&info.name, dtype, &ne, bytes).expect("valid tensor");
        }
    }
    if let Some((name, ne)) = extra {
        let bytes = vec![0u8; 4 * ne.iter().product::<u64>() as usize];
        w.add_tensor(name, DType::F32, &ne, bytes).expect("valid tensor");
    }
    GgufFile::from_bytes("edited.gguf", &w.to_bytes()).expect("edited file parses")
}

fn keep_tensor(_: &str, d: DType, ne: Vec<u64>, b: Vec<u8>) -> Option<(DType, Vec<u64>, Vec<u8>)> {
    Some((d, ne, b))
}

#[allow(clippy::result_large_err)] // returns the library's own error type, to match on it
fn load(f: &GgufFile) -> Result<Model<RefEngine>, ModelError> {
    let mut model = Model::load(RefEngine::new(), f)?;
    model.new_session(64)?;
    Ok(model)
}

fn set(key: &'static str, value: MetaValue) -> impl Fn(&str, &MetaValue) -> Option<MetaValue> {
    move |k, v| Some(if k == key { value.clone() } else { v.clone() })
}

#[test]
fn an_unsupported_architecture_is_named_with_the_supported_ones() {
    let f = edited(set("general.architecture", MetaValue::String("llama2".into())), keep_tensor);
    match load(&f) {
        Err(e @ ModelError::UnsupportedArchitecture { .. }) => {
            let m = e.to_string();
            assert!(
                m.contains("'llama2'") && m.contains("bitnet-b1.58, bitnet-25, bitnet") && m.contains("edited.gguf"),
                "{m}"
            );
        }
        other => panic!("expected UnsupportedArchitecture, got {:?}", other.err()),
    }
}

/// Bad-file checklist: a head count that does not divide the embedding size (and the other
/// inconsistent hyper-parameters), and a `vocab_size` other than the embedding's rows.
#[test]
fn inconsistent_head_counts_and_vocabulary_name_their_key() {
    for (key, value, needle) in [
        ("bitnet-b1.58.attention.head_count", MetaValue::U32(7), "do not divide embedding_length 256"),
        ("bitnet-b1.58.attention.head_count_kv", MetaValue::U32(3), "kv heads do not divide 8 heads"),
        ("bitnet-b1.58.vocab_size", MetaValue::U32(9000), "does not match the 8192 rows of token_embd.weight"),
        ("bitnet-b1.58.rope.dimension_count", MetaValue::U32(33), "must be even"),
    ] {
        let f = edited(set(key, value), keep_tensor);
        match load(&f) {
            Err(e @ ModelError::Inconsistent { .. }) => {
                let m = e.to_string();
                assert!(m.starts_with("edited.gguf: ") && m.contains(key) && m.contains(needle), "{key}: {m}");
            }
            other => panic!("{key}: expected Inconsistent, got {:?}", other.err()),
        }
    }
}

#[test]
fn a_missing_or_mistyped_key_is_named() {
    let f = edited(|k, v| if k == "bitnet-b1.58.block_count" { None } else { Some(v.clone()) }, keep_tensor);
    match load(&f) {
        Err(ModelError::Gguf(GgufError::MissingKey { key, .. })) => assert_eq!(key, "bitnet-b1.58.block_count"),
        other => panic!("expected MissingKey, got {:?}", other.err()),
    }
    let f = edited(set("bitnet-b1.58.embedding_length", MetaValue::String("256".into())), keep_tensor);
    match load(&f) {
        Err(ModelError::Gguf(e @ GgufError::WrongType { .. })) => {
            assert!(e.to_string().contains("bitnet-b1.58.embedding_length"), "{e}")
        }
        other => panic!("expected WrongType, got {:?}", other.err()),
    }
}

#[test]
fn a_tensor_with_the_wrong_shape_type_or_missing_is_named() {
    // attn_q stored as 256 → 128 instead of 256 → 256.
    let f = edited(
        |_, v| Some(v.clone()),
        |name, d, ne, b| {
            if name == "blk.2.attn_q.weight" {
                Some((d, vec![ne[0], 128], b[..128 * 256 / 4].iter().chain(&b[b.len() - 32..]).copied().collect()))
            } else {
                Some((d, ne, b))
            }
        },
    );
    match load(&f) {
        Err(ModelError::TensorShape { tensor, expected, got, .. }) => {
            assert_eq!((tensor.as_str(), expected, got), ("blk.2.attn_q.weight", vec![256, 256], vec![256, 128]));
        }
        other => panic!("expected TensorShape, got {:?}", other.err()),
    }
    // A norm stored as F16.
    let f = edited(
        |_, v| Some(v.clone()),
        |name, d, ne, b| {
            if name == "blk.1.ffn_norm.weight" {
                Some((DType::F16, ne, vec![0u8; b.len() / 2]))
            } else {
                Some((d, ne, b))
            }
        },
    );
    match load(&f) {
        Err(ModelError::TensorType { tensor, got: DType::F16, .. }) => assert_eq!(tensor, "blk.1.ffn_norm.weight"),
        other => panic!("expected TensorType, got {:?}", other.err()),
    }
    // A missing tensor.
    let f = edited(
        |_, v| Some(v.clone()),
        |name, d, ne, b| if name == "blk.3.ffn_down.weight" { None } else { Some((d, ne, b)) },
    );
    match load(&f) {
        Err(ModelError::Gguf(GgufError::UnknownTensor { tensor, .. })) => assert_eq!(tensor, "blk.3.ffn_down.weight"),
        other => panic!("expected UnknownTensor, got {:?}", other.err()),
    }
}

#[test]
fn a_tensor_without_a_role_is_named_rather_than_ignored() {
    // A bias the graph has no place for: loading it silently would compute another model.
    let f = edited_with_extra(|_, v| Some(v.clone()), keep_tensor, Some(("blk.0.attn_q.bias", vec![256])));
    match load(&f) {
        Err(ModelError::Inconsistent { key, reason, .. }) => {
            assert_eq!(key, "blk.0.attn_q.bias");
            assert!(reason.contains("no role in a bitnet-b1.58 model"), "{reason}");
        }
        other => panic!("expected Inconsistent, got {:?}", other.err()),
    }
}

/// `tokenizer.ggml.tokens` cut to or extended to `n` entries.
fn tokens_resized(n: usize) -> impl Fn(&str, &MetaValue) -> Option<MetaValue> {
    move |k, v| {
        if k != "tokenizer.ggml.tokens" {
            return Some(v.clone());
        }
        let MetaValue::Array(a) = v else { panic!("tokens is an array") };
        let mut texts: Vec<String> = a.strs().expect("strings").map(str::to_string).collect();
        let old = texts.len();
        texts.truncate(n);
        texts.extend((old..n).map(|i| format!("<extra_{i}>")));
        Some(MetaValue::Array(MetaArray::of_strings(texts)))
    }
}

/// Bad-file checklist: a vocabulary (`tokenizer.ggml.tokens`) with more or fewer tokens than
/// `token_embd.weight` has rows. Both ways the file is refused, naming it and the key: ids
/// the tokenizer makes that the model cannot embed, or rows the model can sample that no
/// token prints. (Checked in `ModelConfig::from_gguf`; new with this test.)
#[test]
fn a_vocabulary_that_differs_from_the_embedding_rows_is_named() {
    for n in [8000, 8200] {
        let f = edited(tokens_resized(n), keep_tensor);
        match load(&f) {
            Err(e @ ModelError::Inconsistent { .. }) => {
                let m = e.to_string();
                let want =
                    format!("edited.gguf: tokenizer.ggml.tokens: {n} tokens, but token_embd.weight has 8192 rows");
                assert!(m.starts_with(&want), "{m}");
            }
            other => panic!("{n} tokens: expected Inconsistent, got {:?}", other.err()),
        }
    }
}

/// What building the tokenizer of `f` fails with (its message, and the error without the
/// file around it).
fn tokenizer_error(f: &GgufFile) -> (String, TokenizerError) {
    match Tokenizer::from_gguf(f) {
        Ok(t) => panic!("expected a tokenizer error, built {t:?}"),
        Err(TokenizerError::InFile { file, source }) => {
            assert_eq!(file, "edited.gguf");
            (format!("{file}: {source}"), *source)
        }
        Err(e) => panic!("expected an error inside InFile, got {e:?}"),
    }
}

/// Bad-file checklist: BOS and EOS ids past the vocabulary (8192 tokens) are refused when
/// the tokenizer is built, naming the file, the key and the id. (The check existed in
/// `Tokenizer::from_parts`; the file name is new.)
#[test]
fn bos_and_eos_ids_past_the_vocabulary_are_named() {
    for key in ["tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"] {
        let f = edited(set(key, MetaValue::U32(8192)), keep_tensor);
        let (m, cause) = tokenizer_error(&f);
        assert!(matches!(cause, TokenizerError::SpecialIdOutOfRange { id: 8192, n_tokens: 8192, .. }), "{cause:?}");
        assert_eq!(m, format!("edited.gguf: {key} = 8192 is out of range: the vocabulary has 8192 tokens"));
    }
}

/// `tokenizer.ggml.merges` with entry `rank` replaced by `merge`.
fn merge_replaced(rank: usize, merge: &'static str) -> impl Fn(&str, &MetaValue) -> Option<MetaValue> {
    move |k, v| {
        if k != "tokenizer.ggml.merges" {
            return Some(v.clone());
        }
        let MetaValue::Array(a) = v else { panic!("merges is an array") };
        let mut merges: Vec<String> = a.strs().expect("strings").map(str::to_string).collect();
        merges[rank] = merge.to_string();
        Some(MetaValue::Array(MetaArray::of_strings(merges)))
    }
}

/// Bad-file checklist: malformed merges (no separator; a part, or the joined result, that is
/// not a token) are refused, naming the file, the merge's rank and text, and the missing
/// token. (The check existed in `Tokenizer::from_parts`; the file name is new.)
#[test]
fn malformed_merges_are_named() {
    let f = edited(merge_replaced(7, "nospace"), keep_tensor);
    let (m, cause) = tokenizer_error(&f);
    assert!(matches!(cause, TokenizerError::MalformedMerge { rank: 7, .. }), "{cause:?}");
    assert_eq!(m, "edited.gguf: tokenizer.ggml.merges[7] = 'nospace' is not of the form 'left right'");

    let f = edited(merge_replaced(3, "zzqx y"), keep_tensor);
    let (m, cause) = tokenizer_error(&f);
    assert!(matches!(cause, TokenizerError::MergeTokenNotInVocab { rank: 3, .. }), "{cause:?}");
    assert!(m.starts_with("edited.gguf: tokenizer.ggml.merges[3] = 'zzqx y' names 'zzqx'"), "{m}");
}

/// A copy of the I2_S fixture in a fresh temp folder, removed on drop.
struct TempCopy(PathBuf);

impl TempCopy {
    fn new(tag: &str) -> TempCopy {
        let dir = std::env::temp_dir().join(format!("purebee-model-errors-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join("model.gguf");
        std::fs::copy(tiny("tiny_b158_i2_s.gguf"), &path).expect("copy the fixture");
        TempCopy(path)
    }
}

impl Drop for TempCopy {
    fn drop(&mut self) {
        if let Some(dir) = self.0.parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// Opens `copy`, loads it and runs one forward pass; then `change` alters the file and the
/// next pass must be a typed error naming the file and `what` (checked before the engine
/// touches the mapped weights: without the check it dies of SIGBUS, exit status 135).
fn changed_after_open(tag: &str, what: &str, change: impl Fn(&std::path::Path)) {
    let copy = TempCopy::new(tag);
    let file = GgufFile::open(&copy.0).expect("opens");
    let mut model = Model::load(RefEngine::new(), &file).expect("loads");
    let mut session = model.new_session(16).expect("session allocates");
    model.forward(&mut session, &[0, 1, 2], 0, LogitsRows::Last).expect("the first pass runs");
    assert!(file.check_unchanged().is_ok());
    change(&copy.0);
    match model.forward(&mut session, &[3], 3, LogitsRows::Last) {
        Err(ModelError::Gguf(e @ GgufError::ChangedSinceOpen { .. })) => {
            let m = e.to_string();
            assert!(m.starts_with(&format!("{}: the file changed after it was opened", copy.0.display())), "{m}");
            assert!(m.contains(what), "{m}");
        }
        other => panic!("{tag}: expected ChangedSinceOpen, got {:?}", other.err()),
    }
    assert!(matches!(file.check_unchanged(), Err(GgufError::ChangedSinceOpen { .. })));
}

/// Bad-file checklist: a model file truncated after it was opened. Its weights are views of
/// the memory map, where a page past the new end raises SIGBUS; the model checks the file
/// before each pass and returns an error naming it instead. (New with this test.)
#[test]
fn a_model_file_truncated_after_it_was_opened_is_an_error_naming_it() {
    let len = std::fs::metadata(tiny("tiny_b158_i2_s.gguf")).expect("fixture").len();
    for (tag, to) in [("half", len / 2), ("empty", 0)] {
        let what = format!("truncated from {len} to {to} bytes");
        changed_after_open(tag, &what, |p| {
            std::fs::OpenOptions::new().write(true).open(p).and_then(|f| f.set_len(to)).expect("truncate");
        });
    }
}

/// Bad-file checklist: a model file rewritten in place after it was opened (same length,
/// other bytes, as `cp other.gguf model.gguf` leaves it), which the map would show as other
/// weights, is an error naming the file. Replacing it by a rename is not: the map keeps the
/// old file, which is what was loaded.
#[test]
fn a_model_file_rewritten_in_place_after_it_was_opened_is_an_error_naming_it() {
    changed_after_open("rewritten", "it was modified", |p| {
        let bytes = std::fs::read(tiny("tiny_b158_i2_s.gguf")).expect("fixture");
        let f = std::fs::OpenOptions::new().write(true).open(p).expect("open for writing");
        use std::io::Write;
        (&f).write_all(&bytes).expect("rewrite");
        // Coarse file-system clocks may not move within a test: set the time as a writer
        // later than the open would have left it.
        let later = std::time::SystemTime::now() + std::time::Duration::from_secs(2);
        f.set_modified(later).expect("set mtime");
    });

    let copy = TempCopy::new("renamed");
    let file = GgufFile::open(&copy.0).expect("opens");
    let mut model = Model::load(RefEngine::new(), &file).expect("loads");
    let mut session = model.new_session(16).expect("session allocates");
    let before = model.forward(&mut session, &[0, 1, 2], 0, LogitsRows::Last).expect("the first pass runs");
    let other = copy.0.with_file_name("other.gguf");
    std::fs::copy(tiny("tiny_b158_tq2_0.gguf"), &other).expect("copy");
    std::fs::rename(&other, &copy.0).expect("rename over the open file");
    assert!(file.check_unchanged().is_ok());
    let again = model.forward(&mut session, &[0, 1, 2], 0, LogitsRows::Last).expect("the old file still runs");
    assert_eq!(before, again);
}
