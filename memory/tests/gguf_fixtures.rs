//! The GGUF reader on the seven tiny BitNet fixtures.
//!
//! The expectations come from `fixtures/README.md` §1 (shapes, types, file types, sizes,
//! tokenizer), written out here independently of the reader: the tensor list is derived
//! from the model's shape, and each tensor's byte size from the block layouts.

use std::collections::BTreeMap;
use std::path::PathBuf;

use purebee_memory::gguf::{GgufError, GgufFile, MetaType, MetaValue};
use purebee_memory::{DType, MemoryError, Registry};

const DIM: u64 = 256;
const LAYERS: usize = 4;
const HEADS: u64 = 8;
const KV_HEADS: u64 = 2;
const HEAD_DIM: u64 = DIM / HEADS;
const FFN: u64 = 512;
const VOCAB: u64 = 8192;

/// One fixture's facts, from the README's table.
struct Fixture {
    file: &'static str,
    arch: &'static str,
    linear: DType,
    embd: DType,
    file_type: u32,
    scale_tensors: bool,
    bytes: u64,
}

const FIXTURES: [Fixture; 7] = [
    Fixture {
        file: "tiny_b158_i2_s.gguf",
        arch: "bitnet-b1.58",
        linear: DType::I2_S,
        embd: DType::F16,
        file_type: 40,
        scale_tensors: false,
        bytes: 5_050_336,
    },
    Fixture {
        file: "tiny_b158_tq2_0.gguf",
        arch: "bitnet-b1.58",
        linear: DType::TQ2_0,
        embd: DType::F16,
        file_type: 37,
        scale_tensors: false,
        bytes: 5_066_848,
    },
    Fixture {
        file: "tiny_b158_tq1_0.gguf",
        arch: "bitnet-b1.58",
        linear: DType::TQ1_0,
        embd: DType::F16,
        file_type: 36,
        scale_tensors: false,
        bytes: 4_962_400,
    },
    Fixture {
        file: "tiny_b158_f32.gguf",
        arch: "bitnet-b1.58",
        linear: DType::F32,
        embd: DType::F32,
        file_type: 0,
        scale_tensors: false,
        bytes: 17_599_584,
    },
    Fixture {
        file: "tiny_bitnet_tq2_0.gguf",
        arch: "bitnet",
        linear: DType::TQ2_0,
        embd: DType::F16,
        file_type: 37,
        scale_tensors: false,
        bytes: 5_066_816,
    },
    Fixture {
        file: "tiny_bitnet_f32.gguf",
        arch: "bitnet",
        linear: DType::F32,
        embd: DType::F32,
        file_type: 0,
        scale_tensors: false,
        bytes: 17_599_552,
    },
    Fixture {
        file: "tiny_bitnet_tq2_0_scaletensors.gguf",
        arch: "bitnet",
        linear: DType::TQ2_0,
        embd: DType::F16,
        file_type: 37,
        scale_tensors: true,
        bytes: 5_069_152,
    },
];

fn fixture_path(file: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/bitnet-tiny").join(file)
}

fn open(f: &Fixture) -> GgufFile {
    GgufFile::open(fixture_path(f.file)).unwrap_or_else(|e| panic!("{}: {e}", f.file))
}

/// Bytes of a tensor of `n` elements in `ne0`-long rows, from the block layouts in
/// docs/formats.md § Block layouts (not from `DType`).
fn expected_bytes(dtype: DType, n: u64) -> u64 {
    match dtype {
        DType::F32 => 4 * n,
        DType::F16 => 2 * n,
        DType::TQ2_0 => n / 256 * 66,
        DType::TQ1_0 => n / 256 * 54,
        DType::I2_S => n / 4 + 32,
        other => panic!("no fixture uses {other}"),
    }
}

/// Every tensor the model holds: name → (type, ne), from the README's description.
fn expected_tensors(f: &Fixture) -> BTreeMap<String, (DType, Vec<u64>)> {
    let mut t = BTreeMap::new();
    t.insert("token_embd.weight".to_string(), (f.embd, vec![DIM, VOCAB]));
    t.insert("output_norm.weight".to_string(), (DType::F32, vec![DIM]));
    let kv_dim = HEAD_DIM * KV_HEADS;
    for i in 0..LAYERS {
        let p = format!("blk.{i}");
        for (norm, n) in [("attn_norm", DIM), ("attn_sub_norm", DIM), ("ffn_norm", DIM), ("ffn_sub_norm", FFN)] {
            t.insert(format!("{p}.{norm}.weight"), (DType::F32, vec![n]));
        }
        let linears = [
            ("attn_q", [DIM, DIM]),
            ("attn_k", [DIM, kv_dim]),
            ("attn_v", [DIM, kv_dim]),
            ("attn_output", [DIM, DIM]),
            ("ffn_gate", [DIM, FFN]),
            ("ffn_up", [DIM, FFN]),
            ("ffn_down", [FFN, DIM]),
        ];
        for (name, ne) in linears {
            t.insert(format!("{p}.{name}.weight"), (f.linear, ne.to_vec()));
            if f.scale_tensors {
                t.insert(format!("{p}.{name}.scale"), (DType::F32, vec![1]));
            }
        }
    }
    t
}

#[test]
fn header_and_metadata_match_the_readme() {
    for f in &FIXTURES {
        let g = open(f);
        let ctx = f.file;
        assert_eq!(g.version(), 3, "{ctx}");
        assert_eq!(g.file_len(), f.bytes, "{ctx}");
        assert_eq!(g.architecture().expect("arch"), f.arch, "{ctx}");
        assert_eq!(g.alignment(), 32, "{ctx}: tensor data is aligned to 32 bytes");
        assert_eq!(g.data_offset() % 32, 0, "{ctx}");
        assert_eq!(g.path(), fixture_path(f.file), "{ctx}");

        let a = f.arch;
        let key = |k: &str| format!("{a}.{k}");
        assert_eq!(g.get_u32(&key("context_length")).expect("ctx"), 4096, "{ctx}");
        assert_eq!(g.get_u32(&key("embedding_length")).expect("dim"), 256, "{ctx}");
        assert_eq!(g.get_u32(&key("block_count")).expect("layers"), 4, "{ctx}");
        assert_eq!(g.get_u32(&key("feed_forward_length")).expect("ffn"), 512, "{ctx}");
        assert_eq!(g.get_u32(&key("attention.head_count")).expect("heads"), 8, "{ctx}");
        assert_eq!(g.get_u32(&key("attention.head_count_kv")).expect("kv heads"), 2, "{ctx}");
        assert_eq!(g.get_u32(&key("rope.dimension_count")).expect("rope dims"), 32, "{ctx}");
        assert_eq!(g.get_u64(&key("vocab_size")).expect("vocab"), 8192, "{ctx}");
        assert_eq!(g.get_f32(&key("rope.freq_base")).expect("rope base"), 500000.0, "{ctx}");
        assert_eq!(g.get_f32(&key("attention.layer_norm_rms_epsilon")).expect("eps"), 1e-5, "{ctx}");
        assert_eq!(g.get_str(&key("rope.scaling.type")).expect("rope scaling"), "linear", "{ctx}");
        assert_eq!(g.get_f32(&key("rope.scaling.factor")).expect("rope factor"), 1.0, "{ctx}");
        assert_eq!(g.get_u32("general.file_type").expect("file type"), f.file_type, "{ctx}");
        assert_eq!(g.get_bool("synthetic.scale_tensors").expect("label"), f.scale_tensors, "{ctx}");

        assert_eq!(g.get_str("tokenizer.ggml.model").expect("model"), "gpt2", "{ctx}");
        assert_eq!(g.get_str("tokenizer.ggml.pre").expect("pre"), "llama-bpe", "{ctx}");
        let tokens = g.get_str_array("tokenizer.ggml.tokens").expect("tokens");
        assert_eq!(tokens.len(), 8192, "{ctx}");
        assert_eq!(tokens[0], "<|endoftext|>", "{ctx}");
        assert_eq!(tokens[2], "<|im_end|>", "{ctx}");
        assert_eq!(g.get_i32_array("tokenizer.ggml.token_type").expect("types").len(), 8192, "{ctx}");
        assert_eq!(g.get_array("tokenizer.ggml.merges").expect("merges").elem_type(), MetaType::String, "{ctx}");
        assert_eq!(g.get_u32("tokenizer.ggml.bos_token_id").expect("bos"), 0, "{ctx}");
        assert_eq!(g.get_u32("tokenizer.ggml.eos_token_id").expect("eos"), 2, "{ctx}");
        assert!(g.get_bool("tokenizer.ggml.add_bos_token").expect("add bos"), "{ctx}");
        assert!(g.get_str("tokenizer.chat_template").expect("template").contains("<|im_start|>"), "{ctx}");

        // Metadata is in file order, general.architecture first (gguf-py writes it first).
        assert_eq!(g.metadata()[0], ("general.architecture".to_string(), MetaValue::String(f.arch.to_string())));
        assert!(g.get("general.alignment").is_none(), "{ctx}");
    }
}

#[test]
fn every_tensor_has_the_readme_type_shape_and_size() {
    for f in &FIXTURES {
        let g = open(f);
        let ctx = f.file;
        let expected = expected_tensors(f);
        let got: BTreeMap<String, (DType, Vec<u64>)> =
            g.tensors().iter().map(|t| (t.name.clone(), (t.dtype, t.ne.clone()))).collect();
        assert_eq!(got.len(), g.tensors().len(), "{ctx}: names are unique");
        assert_eq!(got, expected, "{ctx}");
        assert_eq!(g.tensors().len(), if f.scale_tensors { 74 } else { 46 }, "{ctx}");
        assert!(g.tensor_info("output.weight").is_err(), "{ctx}: the LM head is tied");

        for t in g.tensors() {
            let n: u64 = t.ne.iter().product();
            assert_eq!(t.n_bytes as u64, expected_bytes(t.dtype, n), "{ctx}: {}", t.name);
            assert_eq!(t.n_elements() as u64, n, "{ctx}: {}", t.name);
            let rev: Vec<usize> = t.ne.iter().rev().map(|&d| d as usize).collect();
            assert_eq!(t.shape.dims(), rev.as_slice(), "{ctx}: {} shape is ne reversed", t.name);
            assert_eq!(g.tensor_bytes(t).len(), t.n_bytes, "{ctx}: {}", t.name);
            assert_eq!(g.tensor_info(&t.name).expect("present"), t);
        }

        // Tensors are packed in file order, each at the padded end of the one before, and
        // the last one's padding ends the file.
        let mut next = 0u64;
        for t in g.tensors() {
            assert_eq!(t.offset, next, "{ctx}: {}", t.name);
            next = (t.offset + t.n_bytes as u64).next_multiple_of(32);
        }
        assert_eq!(g.data_offset() + next, g.file_len(), "{ctx}");

        let params: u64 = g.tensors().iter().map(|t| t.n_elements() as u64).sum();
        let per_layer = DIM * DIM * 2 + DIM * HEAD_DIM * KV_HEADS * 2 + DIM * FFN * 3 + DIM * 3 + FFN;
        let scales = if f.scale_tensors { 7 * LAYERS as u64 } else { 0 };
        assert_eq!(params, VOCAB * DIM + DIM + per_layer * LAYERS as u64 + scales, "{ctx}");
    }
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

#[test]
fn tensor_bytes_point_at_the_right_data() {
    let f32_file = open(&FIXTURES[3]);
    let f16_file = open(&FIXTURES[1]);
    // token_embd is the same fp16-rounded values in both files (README §1).
    let e32 = f32s(f32_file.tensor_bytes(f32_file.tensor_info("token_embd.weight").expect("embd")));
    let e16 = f16_file.tensor_bytes(f16_file.tensor_info("token_embd.weight").expect("embd"));
    assert_eq!(e32.len() * 2, e16.len());
    for (i, (a, b)) in e32.iter().zip(e16.chunks_exact(2)).enumerate() {
        let b = half::f16::from_le_bytes([b[0], b[1]]).to_f32();
        assert_eq!(*a, b, "token_embd element {i}");
    }
    // Norm weights are 1 + 0.1·N(0,1) and identical across files.
    for name in ["output_norm.weight", "blk.3.ffn_sub_norm.weight"] {
        let a = f32s(f32_file.tensor_bytes(f32_file.tensor_info(name).expect("norm")));
        let b = f32s(f16_file.tensor_bytes(f16_file.tensor_info(name).expect("norm")));
        assert_eq!(a, b, "{name}");
        let mean = a.iter().sum::<f32>() / a.len() as f32;
        assert!((mean - 1.0).abs() < 0.05, "{name}: mean {mean}");
    }

    // The I2_S trailer holds the per-tensor scale 8 times; it equals the `.scale` tensor of
    // the scale-tensor file (same seed, same scales) and lies in the README's range.
    let i2s = open(&FIXTURES[0]);
    let st = open(&FIXTURES[6]);
    for (base, lo, hi) in [("blk.0.attn_q", 0.06, 0.10), ("blk.2.attn_v", 0.03, 0.05), ("blk.3.ffn_down", 0.20, 0.30)] {
        let bytes = i2s.tensor_bytes(i2s.tensor_info(&format!("{base}.weight")).expect("weight"));
        let trailer = f32s(&bytes[bytes.len() - 32..]);
        assert!(trailer.iter().all(|&s| s == trailer[0]), "{base}: {trailer:?}");
        assert!((lo..=hi).contains(&trailer[0]), "{base}: scale {}", trailer[0]);
        let scale = f32s(st.tensor_bytes(st.tensor_info(&format!("{base}.scale")).expect("scale")));
        assert_eq!(scale, vec![trailer[0]], "{base}");
    }
}

#[test]
fn host_tensors_are_zero_copy_views_of_the_map() {
    for f in &FIXTURES {
        let g = open(f);
        let map = g.map().as_ptr_range();
        for name in ["token_embd.weight", "blk.1.ffn_down.weight", "output_norm.weight"] {
            let t = g.host_tensor(name).expect("present");
            let info = g.tensor_info(name).expect("present");
            assert!(t.is_mapped(), "{}: {name}", f.file);
            assert_eq!(t.dtype(), info.dtype);
            assert_eq!(t.shape(), &info.shape);
            let bytes = t.bytes().as_ptr_range();
            assert!(map.start <= bytes.start && bytes.end <= map.end, "{}: {name} lies outside the map", f.file);
            assert_eq!(bytes.start, g.tensor_bytes(info).as_ptr(), "{}: {name}", f.file);
            assert_eq!(bytes.start as u64 - map.start as u64, g.data_offset() + info.offset);
        }
        match g.host_tensor("no.such.tensor") {
            Err(GgufError::UnknownTensor { tensor, path }) => {
                assert_eq!(tensor, "no.such.tensor");
                assert_eq!(path, fixture_path(f.file));
            }
            other => panic!("expected UnknownTensor, got {other:?}"),
        }
    }
}

#[test]
fn load_into_registers_every_tensor_without_copying() {
    let f = &FIXTURES[6];
    let g = open(f);
    let mut r = Registry::new();
    let ids = g.load_into(&mut r).expect("fresh registry");
    assert_eq!(ids.len(), g.tensors().len());
    assert_eq!(r.owned_bytes_held(), 0, "nothing was copied");
    assert_eq!(r.bytes_held(), g.tensors().iter().map(|t| t.n_bytes).sum::<usize>());
    for (id, info) in ids.iter().zip(g.tensors()) {
        assert_eq!(r.id(&info.name).expect("registered"), *id);
        let desc = r.desc(*id).expect("registered");
        assert_eq!((desc.dtype, &desc.shape), (info.dtype, &info.shape));
        assert!(r.get(*id).expect("live").is_mapped());
    }
    // A second load into the same registry collides on the first name.
    match g.load_into(&mut r) {
        Err(GgufError::Memory { tensor, source: MemoryError::DuplicateTensor { .. }, .. }) => {
            assert_eq!(tensor, g.tensors()[0].name);
        }
        other => panic!("expected Memory(DuplicateTensor), got {other:?}"),
    }
}

#[test]
fn a_file_read_into_memory_equals_the_file_mapped() {
    for f in &FIXTURES {
        let (mapped, read) =
            (open(f), GgufFile::read(fixture_path(f.file)).unwrap_or_else(|e| panic!("{}: {e}", f.file)));
        assert_eq!(read.file_len(), mapped.file_len(), "{}", f.file);
        assert_eq!(read.tensors(), mapped.tensors(), "{}", f.file);
        for info in mapped.tensors() {
            assert!(read.tensor_bytes(info) == mapped.tensor_bytes(info), "{}: {}", f.file, info.name);
        }
        // The copy has no file behind it to watch.
        assert!(read.check_unchanged().is_ok());
    }
    let missing = fixture_path("no_such_model.gguf");
    match GgufFile::read(&missing) {
        Err(GgufError::Io { path, .. }) => assert_eq!(path, missing),
        other => panic!("reading a missing file: {other:?}"),
    }
}
