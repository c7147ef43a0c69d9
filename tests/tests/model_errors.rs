//! A model file with unsupported, missing or inconsistent metadata, or a tensor of the wrong
//! shape or type for its role, is a clear error naming the key or tensor, never a panic.

use purebee_engine_ref::RefEngine;
use purebee_memory::gguf::{GgufError, GgufFile, GgufWriter, MetaValue};
use purebee_memory::DType;
use purebee_runtime::{Model, ModelError};
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
    Model::load(RefEngine::new(), f, 64)
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
                assert!(m.contains(key) && m.contains(needle), "{key}: {m}");
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
