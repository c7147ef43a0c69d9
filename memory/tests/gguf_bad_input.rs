//! Hostile and malformed GGUF files: one test per class of bad input.
//!
//! Each file is built with [`GgufWriter`] and then damaged by byte surgery at the offsets
//! its [`GgufLayout`] reports (the writer itself refuses to write bad files). Each test
//! expects one specific [`GgufError`] variant and checks that the message names the file
//! and the key or tensor concerned.

use std::path::{Path, PathBuf};

use proptest::prelude::*;
use purebee_memory::gguf::{
    GgufError, GgufFile, GgufLayout, GgufWriteError, GgufWriter, MetaArray, MetaType, MetaValue,
};
use purebee_memory::DType;

/// A small valid file: a few keys of several types and three tensors of three dtypes.
fn base() -> GgufWriter {
    let mut w = GgufWriter::new();
    w.add_str("general.architecture", "llama").expect("new key");
    w.add_u32("llama.block_count", 1).expect("new key");
    w.add_bool("flag", true).expect("new key");
    w.add_str_array("tokenizer.ggml.tokens", ["a", "bc", "d"]).expect("new key");
    w.add("k.a", MetaValue::U8(1)).expect("new key");
    w.add("k.b", MetaValue::U8(2)).expect("new key");
    w.add_f32_tensor("tok_embd.weight", &[4, 2], &[0.5; 8]).expect("valid");
    w.add_tensor("blk.0.attn_q.weight", DType::TQ2_0, &[256, 2], vec![0u8; 132]).expect("valid");
    w.add_tensor("blk.0.attn_k.weight", DType::F16, &[32], vec![0u8; 64]).expect("valid");
    w
}

fn built(w: &GgufWriter) -> (Vec<u8>, GgufLayout) {
    w.to_bytes_with_layout()
}

fn kv_at<'a>(layout: &'a GgufLayout, key: &str) -> &'a purebee_memory::gguf::KvLayout {
    layout.kv.iter().find(|k| k.key == key).unwrap_or_else(|| panic!("no key {key}"))
}

fn put_u32(bytes: &mut [u8], at: u64, v: u32) {
    let at = at as usize;
    bytes[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

fn put_u64(bytes: &mut [u8], at: u64, v: u64) {
    let at = at as usize;
    bytes[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

fn get_u64(bytes: &[u8], at: u64) -> u64 {
    let at = at as usize;
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}

/// Writes `bytes` to a file in a fresh temp dir and opens it.
fn open_bytes(bytes: &[u8]) -> (tempfile::TempDir, PathBuf, Result<GgufFile, GgufError>) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("hostile.gguf");
    std::fs::write(&path, bytes).expect("write");
    let r = GgufFile::open(&path);
    (dir, path, r)
}

/// Opens `bytes`, expects an error whose message names the file and every string in
/// `names`, and returns it.
fn expect_err(bytes: &[u8], names: &[&str]) -> GgufError {
    let (_dir, path, r) = open_bytes(bytes);
    let err = match r {
        Ok(_) => panic!("a damaged file opened without error"),
        Err(e) => e,
    };
    let msg = err.to_string();
    assert!(msg.starts_with(&format!("{}: ", path.display())), "message does not name the file: {msg}");
    for n in names {
        assert!(msg.contains(n), "message does not name '{n}': {msg}");
    }
    err
}

#[test]
fn the_undamaged_base_file_opens() {
    let (bytes, layout) = built(&base());
    let (_dir, _path, r) = open_bytes(&bytes);
    let g = r.expect("valid file");
    assert_eq!(g.tensors().len(), 3);
    assert_eq!(g.data_offset(), layout.data_offset);
    assert_eq!(g.file_len(), layout.file_len);
}

#[test]
fn wrong_magic() {
    let (mut bytes, _) = built(&base());
    bytes[3] = b'X';
    match expect_err(&bytes, &["GGUX"]) {
        GgufError::BadMagic { found, .. } => assert_eq!(&found, b"GGUX"),
        other => panic!("expected BadMagic, got {other:?}"),
    }
    // A text file, for the message.
    match expect_err(b"hello world, not a model", &["hell"]) {
        GgufError::BadMagic { found, .. } => assert_eq!(&found, b"hell"),
        other => panic!("expected BadMagic, got {other:?}"),
    }
}

#[test]
fn empty_and_missing_files() {
    match expect_err(b"", &["magic"]) {
        GgufError::Truncated { offset: 0, needed: 4, available: 0, .. } => {}
        other => panic!("expected Truncated, got {other:?}"),
    }
    match GgufFile::from_bytes("empty.gguf", &[]) {
        Err(e @ GgufError::Truncated { offset: 0, needed: 4, available: 0, .. }) => {
            assert!(e.to_string().starts_with("empty.gguf: truncated at offset 0 while reading the magic"), "{e}");
        }
        other => panic!("expected Truncated, got {other:?}"),
    }
    let missing = Path::new("/nonexistent/dir/model.gguf");
    match GgufFile::open(missing) {
        Err(e @ GgufError::Io { .. }) => assert!(e.to_string().contains("/nonexistent/dir/model.gguf"), "{e}"),
        other => panic!("expected Io, got {other:?}"),
    }
}

#[test]
fn versions_1_and_4_are_refused_and_2_is_read() {
    for version in [0u32, 1, 4, 0x0300_0000] {
        let (mut bytes, _) = built(&base());
        put_u32(&mut bytes, 4, version);
        match expect_err(&bytes, &[&format!("version {version}")]) {
            GgufError::UnsupportedVersion { version: v, .. } => assert_eq!(v, version),
            other => panic!("expected UnsupportedVersion, got {other:?}"),
        }
    }
    let mut w = base();
    w.set_version(2).expect("valid version");
    let (_dir, _path, r) = open_bytes(&w.to_bytes());
    assert_eq!(r.expect("v2 file").version(), 2);
}

#[test]
fn absurd_tensor_count() {
    for count in [u64::MAX, 1 << 40, 1000] {
        let (mut bytes, _) = built(&base());
        put_u64(&mut bytes, 8, count);
        match expect_err(&bytes, &["tensor count", &count.to_string()]) {
            GgufError::CountTooLarge { offset: 8, count: c, min_bytes_each: 24, .. } => assert_eq!(c, count),
            other => panic!("expected CountTooLarge, got {other:?}"),
        }
    }
}

#[test]
fn absurd_metadata_count() {
    for count in [u64::MAX, 1 << 50, 10_000] {
        let (mut bytes, _) = built(&base());
        put_u64(&mut bytes, 16, count);
        match expect_err(&bytes, &["metadata entry count"]) {
            GgufError::CountTooLarge { offset: 16, count: c, .. } => assert_eq!(c, count),
            other => panic!("expected CountTooLarge, got {other:?}"),
        }
    }
}

#[test]
fn absurd_string_lengths() {
    let (bytes, layout) = built(&base());
    // A key's length.
    let mut b = bytes.clone();
    put_u64(&mut b, layout.kv[0].start, u64::MAX);
    match expect_err(&b, &["key of metadata entry 0"]) {
        GgufError::Truncated { offset, needed: u64::MAX, .. } => assert_eq!(offset, layout.kv[0].start + 8),
        other => panic!("expected Truncated, got {other:?}"),
    }
    // A string value's length.
    let mut b = bytes.clone();
    let arch = kv_at(&layout, "general.architecture");
    put_u64(&mut b, arch.value_at, 1 << 62);
    match expect_err(&b, &["general.architecture"]) {
        GgufError::Truncated { offset, needed, .. } => {
            assert_eq!(offset, arch.value_at + 8);
            assert_eq!(needed, 1 << 62);
        }
        other => panic!("expected Truncated, got {other:?}"),
    }
    // A tensor name's length.
    let mut b = bytes;
    put_u64(&mut b, layout.tensors[1].start, u64::MAX - 7);
    match expect_err(&b, &["name of tensor 1"]) {
        GgufError::Truncated { offset, .. } => assert_eq!(offset, layout.tensors[1].start + 8),
        other => panic!("expected Truncated, got {other:?}"),
    }
}

#[test]
fn absurd_array_length() {
    let (bytes, layout) = built(&base());
    let tokens = kv_at(&layout, "tokenizer.ggml.tokens");
    for count in [u64::MAX, 1 << 61, 100_000] {
        let mut b = bytes.clone();
        put_u64(&mut b, tokens.value_at + 4, count);
        match expect_err(&b, &["tokenizer.ggml.tokens", "array length"]) {
            GgufError::CountTooLarge { offset, count: c, min_bytes_each: 8, .. } => {
                assert_eq!(offset, tokens.value_at + 4);
                assert_eq!(c, count);
            }
            other => panic!("expected CountTooLarge, got {other:?}"),
        }
    }
}

#[test]
fn too_many_dims() {
    for n_dims in [5u32, 1000, u32::MAX] {
        let (mut bytes, layout) = built(&base());
        put_u32(&mut bytes, layout.tensors[0].n_dims_at, n_dims);
        match expect_err(&bytes, &["tok_embd.weight", &format!("{n_dims} dims")]) {
            GgufError::TooManyDims { n_dims: n, max: 4, offset, tensor, .. } => {
                assert_eq!((n, offset, tensor.as_str()), (n_dims, layout.tensors[0].n_dims_at, "tok_embd.weight"));
            }
            other => panic!("expected TooManyDims, got {other:?}"),
        }
    }
}

#[test]
fn dims_whose_product_or_size_overflows() {
    // tok_embd.weight is F32 with two dims.
    for ne in [[1u64 << 40, 1 << 40], [u64::MAX, 1], [1, 1 << 63], [1 << 62, 1], [1 << 32, 1 << 32]] {
        let (mut bytes, layout) = built(&base());
        put_u64(&mut bytes, layout.tensors[0].dims_at, ne[0]);
        put_u64(&mut bytes, layout.tensors[0].dims_at + 8, ne[1]);
        match expect_err(&bytes, &["tok_embd.weight", "too large"]) {
            GgufError::TensorTooLarge { ne: got, offset, .. } => {
                assert_eq!(got, ne.to_vec());
                assert_eq!(offset, layout.tensors[0].start);
            }
            other => panic!("expected TensorTooLarge for {ne:?}, got {other:?}"),
        }
    }
}

#[test]
fn tensor_past_the_end_of_the_file() {
    let (bytes, layout) = built(&base());
    let last = &layout.tensors[2];
    for offset in [1u64 << 20, !31u64] {
        let mut b = bytes.clone();
        put_u64(&mut b, last.offset_at, offset);
        match expect_err(&b, &["blk.0.attn_k.weight", "past the end"]) {
            GgufError::TensorOutOfBounds { offset: o, n_bytes: 64, file_len, tensor, .. } => {
                assert_eq!((o, file_len, tensor.as_str()), (offset, layout.file_len, "blk.0.attn_k.weight"));
            }
            other => panic!("expected TensorOutOfBounds, got {other:?}"),
        }
    }
    // The file cut one byte short of the last tensor's end.
    match expect_err(&bytes[..last.data.end as usize - 1], &["blk.0.attn_k.weight"]) {
        GgufError::TensorOutOfBounds { file_len, .. } => assert_eq!(file_len, last.data.end - 1),
        other => panic!("expected TensorOutOfBounds, got {other:?}"),
    }
}

#[test]
fn misaligned_tensor_offset() {
    let (mut bytes, layout) = built(&base());
    let t = &layout.tensors[1];
    let offset = get_u64(&bytes, t.offset_at) + 8;
    put_u64(&mut bytes, t.offset_at, offset);
    match expect_err(&bytes, &["blk.0.attn_q.weight", "alignment 32"]) {
        GgufError::MisalignedTensor { offset: o, alignment: 32, tensor, .. } => {
            assert_eq!((o, tensor.as_str()), (offset, "blk.0.attn_q.weight"));
        }
        other => panic!("expected MisalignedTensor, got {other:?}"),
    }
}

#[test]
fn bad_alignment_values() {
    let mut w = base();
    w.add_u32("general.alignment", 64).expect("a power of two");
    let (bytes, layout) = built(&w);
    let (_dir, _path, r) = open_bytes(&bytes);
    let g = r.expect("alignment 64 is valid");
    assert_eq!(g.alignment(), 64);
    assert_eq!(g.data_offset() % 64, 0);
    assert!(g.tensors().iter().all(|t| t.offset % 64 == 0));

    let at = kv_at(&layout, "general.alignment").value_at;
    for alignment in [0u32, 3, 48, u32::MAX] {
        let mut b = bytes.clone();
        put_u32(&mut b, at, alignment);
        match expect_err(&b, &["general.alignment", &format!("is {alignment};")]) {
            GgufError::BadAlignment { alignment: a, .. } => assert_eq!(a, u64::from(alignment)),
            other => panic!("expected BadAlignment, got {other:?}"),
        }
    }
}

#[test]
fn alignment_of_the_wrong_type_or_out_of_range() {
    // The writer only writes a u32 general.alignment, so write another key of the same
    // length and rename it.
    let rename = |value: MetaValue| {
        let mut w = base();
        w.add("general.alignmenX", value).expect("new key");
        let (mut bytes, layout) = built(&w);
        let k = kv_at(&layout, "general.alignmenX");
        bytes[(k.start + 8 + 16) as usize] = b't';
        bytes
    };
    match expect_err(&rename(MetaValue::String("32".into())), &["general.alignment", "string"]) {
        GgufError::WrongType { key, found, .. } => {
            assert_eq!((key.as_str(), found.as_str()), ("general.alignment", "string"))
        }
        other => panic!("expected WrongType, got {other:?}"),
    }
    match expect_err(&rename(MetaValue::I64(-32)), &["general.alignment", "-32"]) {
        GgufError::OutOfRange { key, target: "u32", .. } => assert_eq!(key, "general.alignment"),
        other => panic!("expected OutOfRange, got {other:?}"),
    }
}

#[test]
fn unknown_tensor_type_ids() {
    for type_id in [4u32, 31, 37, 999, u32::MAX] {
        let (mut bytes, layout) = built(&base());
        put_u32(&mut bytes, layout.tensors[0].type_at, type_id);
        match expect_err(&bytes, &["tok_embd.weight", &format!("unknown type id {type_id}")]) {
            GgufError::UnknownTensorType { type_id: t, offset, .. } => {
                assert_eq!((t, offset), (type_id, layout.tensors[0].type_at));
            }
            other => panic!("expected UnknownTensorType, got {other:?}"),
        }
    }
}

#[test]
fn known_but_unsupported_tensor_types() {
    for (type_id, name) in [(12u32, "Q4_K"), (6, "Q5_0"), (14, "Q6_K"), (28, "F64")] {
        let (mut bytes, layout) = built(&base());
        put_u32(&mut bytes, layout.tensors[0].type_at, type_id);
        match expect_err(&bytes, &["tok_embd.weight", name, "does not support"]) {
            GgufError::UnsupportedTensorType { type_id: t, type_name, .. } => {
                assert_eq!((t, type_name), (type_id, name))
            }
            other => panic!("expected UnsupportedTensorType, got {other:?}"),
        }
    }
}

#[test]
fn ne0_not_a_multiple_of_the_block_length() {
    let (mut bytes, layout) = built(&base());
    put_u64(&mut bytes, layout.tensors[1].dims_at, 100);
    match expect_err(&bytes, &["blk.0.attn_q.weight", "ne0 = 100", "256"]) {
        GgufError::NotWholeBlocks { ne0: 100, block_len: 256, dtype: DType::TQ2_0, tensor, .. } => {
            assert_eq!(tensor, "blk.0.attn_q.weight");
        }
        other => panic!("expected NotWholeBlocks, got {other:?}"),
    }
}

#[test]
fn duplicated_tensor_name() {
    let (mut bytes, layout) = built(&base());
    // "blk.0.attn_k.weight" → "blk.0.attn_q.weight".
    let k = layout.tensors[2].start + 8 + "blk.0.attn_".len() as u64;
    assert_eq!(bytes[k as usize], b'k');
    bytes[k as usize] = b'q';
    match expect_err(&bytes, &["duplicate tensor name 'blk.0.attn_q.weight'"]) {
        GgufError::DuplicateTensor { offset, .. } => assert_eq!(offset, layout.tensors[2].start),
        other => panic!("expected DuplicateTensor, got {other:?}"),
    }
}

#[test]
fn duplicated_key() {
    let (mut bytes, layout) = built(&base());
    let kb = kv_at(&layout, "k.b");
    bytes[(kb.start + 8 + 2) as usize] = b'a';
    match expect_err(&bytes, &["duplicate metadata key 'k.a'"]) {
        GgufError::DuplicateKey { offset, key, .. } => assert_eq!((offset, key.as_str()), (kb.start, "k.a")),
        other => panic!("expected DuplicateKey, got {other:?}"),
    }
}

#[test]
fn invalid_utf8_in_keys_values_names_and_array_elements() {
    let (bytes, layout) = built(&base());
    let tokens = kv_at(&layout, "tokenizer.ggml.tokens");
    let arch = kv_at(&layout, "general.architecture");
    let kb_index = layout.kv.iter().position(|k| k.key == "k.b").expect("k.b");
    let cases = [
        // (byte to damage, words the message must hold)
        (layout.kv[kb_index].start + 8 + 1, format!("key of metadata entry {kb_index}")),
        (arch.value_at + 8 + 2, "key 'general.architecture'".to_string()),
        // The second token "bc": after elem type (4), count (8), "a" (8 + 1), its length (8).
        (tokens.value_at + 4 + 8 + 9 + 8 + 1, "key 'tokenizer.ggml.tokens'".to_string()),
        (layout.tensors[1].start + 8 + 3, "name of tensor 1".to_string()),
    ];
    for (at, what) in cases {
        let mut b = bytes.clone();
        b[at as usize] = 0xff;
        match expect_err(&b, &[&what, "UTF-8"]) {
            GgufError::InvalidUtf8 { offset, .. } => assert_eq!(offset, at, "{what}"),
            other => panic!("expected InvalidUtf8 for {what}, got {other:?}"),
        }
    }
}

#[test]
fn invalid_bool() {
    let (mut bytes, layout) = built(&base());
    let flag = kv_at(&layout, "flag");
    bytes[flag.value_at as usize] = 2;
    match expect_err(&bytes, &["'flag'", "boolean byte 2"]) {
        GgufError::InvalidBool { value: 2, offset, .. } => assert_eq!(offset, flag.value_at),
        other => panic!("expected InvalidBool, got {other:?}"),
    }
}

#[test]
fn unknown_metadata_value_types() {
    let (bytes, layout) = built(&base());
    let ka = kv_at(&layout, "k.a");
    let mut b = bytes.clone();
    put_u32(&mut b, ka.type_at, 13);
    match expect_err(&b, &["'k.a'", "type 13"]) {
        GgufError::UnknownMetaType { type_id: 13, offset, .. } => assert_eq!(offset, ka.type_at),
        other => panic!("expected UnknownMetaType, got {other:?}"),
    }
    let tokens = kv_at(&layout, "tokenizer.ggml.tokens");
    let mut b = bytes;
    put_u32(&mut b, tokens.value_at, 99);
    match expect_err(&b, &["'tokenizer.ggml.tokens'", "type 99"]) {
        GgufError::UnknownMetaType { type_id: 99, offset, .. } => assert_eq!(offset, tokens.value_at),
        other => panic!("expected UnknownMetaType, got {other:?}"),
    }
}

/// A file holding one key whose value is `levels` arrays nested in each other around one
/// u8, and no tensors, written by hand (the writer refuses more than 16 levels).
fn nested_arrays(levels: usize) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(b"GGUF");
    b.extend_from_slice(&3u32.to_le_bytes());
    b.extend_from_slice(&0u64.to_le_bytes());
    b.extend_from_slice(&1u64.to_le_bytes());
    b.extend_from_slice(&4u64.to_le_bytes());
    b.extend_from_slice(b"deep");
    b.extend_from_slice(&MetaType::Array.id().to_le_bytes());
    for level in 1..=levels {
        let elem = if level == levels { MetaType::U8 } else { MetaType::Array };
        b.extend_from_slice(&elem.id().to_le_bytes());
        b.extend_from_slice(&1u64.to_le_bytes());
    }
    b.push(7);
    // The (empty) data section starts at the next multiple of 32.
    b.resize(b.len().next_multiple_of(32), 0);
    b
}

#[test]
fn nesting_too_deep() {
    // 16 levels read back.
    let (_dir, _path, r) = open_bytes(&nested_arrays(16));
    let g = r.expect("16 levels are allowed");
    let mut a = g.get("deep").expect("present").as_array().expect("array");
    for _ in 1..16 {
        a = &a.arrays().expect("an array of arrays")[0];
    }
    assert_eq!(a.get(0), Some(MetaValue::U8(7)));

    for levels in [17usize, 1000, 1_000_000] {
        match expect_err(&nested_arrays(levels), &["'deep'", "deeper than 16"]) {
            // The 16th array declares arrays as its elements: its element type is at
            // 24 + 8 + 4 (key) + 4 (value type) + 15 × 12.
            GgufError::NestingTooDeep { offset, max: 16, .. } => assert_eq!(offset, 40 + 15 * 12),
            other => panic!("expected NestingTooDeep, got {other:?}"),
        }
    }

    // The writer refuses 17 levels too, and writes 16.
    let nest = |levels: usize| {
        let mut v = MetaValue::U8(7);
        for _ in 0..levels {
            let t = v.meta_type();
            v = MetaValue::Array(MetaArray::new(t, vec![v]).expect("one element type"));
        }
        v
    };
    let mut w = GgufWriter::new();
    assert!(matches!(w.add("deep", nest(17)), Err(GgufWriteError::NestingTooDeep { max: 16, .. })));
    w.add("deep", nest(16)).expect("16 levels");
    assert_eq!(w.to_bytes(), nested_arrays(16));
}

/// Damaged files never panic the reader: any byte replaced anywhere in the header and
/// tensor infos, or several bytes at once, gives `Ok` or an error naming the file.
mod fuzz {
    use super::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn random_damage_never_panics(edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8)) {
            let (mut bytes, layout) = built(&base());
            let header = layout.data_offset as usize;
            for (i, v) in edits {
                bytes[i.index(header)] = v;
            }
            if let Err(e) = GgufFile::from_bytes("fuzzed.gguf", &bytes) {
                prop_assert!(e.to_string().starts_with("fuzzed.gguf: "), "{}", e);
            }
        }
    }
}
