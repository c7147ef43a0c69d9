//! The writer's output against gguf-py's, byte for byte.
//!
//! `GGUF_PY_HEX` is the file that gguf-py 0.19.0 (the library the fixtures were made with,
//! and whose output llama.cpp reads) writes for the entries and tensors of `ours()`:
//!
//! ```python
//! import gguf, numpy as np
//! w = gguf.GGUFWriter("py.gguf", "llama")
//! w.add_uint8("a.u8", 200); w.add_int8("a.i8", -3); w.add_uint16("a.u16", 65000)
//! w.add_int16("a.i16", -30000); w.add_uint32("a.u32", 4000000000)
//! w.add_int32("a.i32", -2000000000); w.add_uint64("a.u64", 2**64-1); w.add_int64("a.i64", -2**63)
//! w.add_float32("a.f32", 0.1); w.add_float64("a.f64", 0.1); w.add_bool("a.bool", True)
//! w.add_string("a.str", "héllo"); w.add_array("a.strs", ["x", "yy"])
//! w.add_array("a.i32s", [1, -2, 3]); w.add_array("a.nested", [[1, 2], [3]])
//! w.add_tensor("t.f32", np.full((3, 4), 1.5, dtype=np.float32))
//! w.add_tensor("t.f16", np.array([1, 2, 3, 4, 5], dtype=np.float16))
//! w.add_tensor("t.q8", np.full((2, 34), 1, dtype=np.uint8), raw_dtype=gguf.GGMLQuantizationType.Q8_0)
//! w.add_tensor("t.tq2", np.full((1, 66), 0x55, dtype=np.uint8), raw_dtype=gguf.GGMLQuantizationType.TQ2_0)
//! w.add_tensor("t.tq1", np.zeros((54,), dtype=np.uint8), raw_dtype=gguf.GGMLQuantizationType.TQ1_0)
//! w.add_tensor("t.i8", np.arange(1, 8, dtype=np.int8))
//! w.add_tensor("t.bf16", np.array([[[[0x3f80, 0x4000]]]], dtype=np.uint16), raw_dtype=gguf.GGMLQuantizationType.BF16)
//! w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
//! ```

use purebee_memory::gguf::{GgufFile, GgufWriter, MetaArray, MetaType, MetaValue};
use purebee_memory::DType;

const GGUF_PY_HEX: &str = concat!(
    "474755460300000007000000000000001000000000000000140000000000000067656e6572616c2e6172636869746563",
    "747572650800000005000000000000006c6c616d610400000000000000612e753800000000c80400000000000000612e",
    "693801000000fd0500000000000000612e75313602000000e8fd0500000000000000612e69313603000000d08a050000",
    "0000000000612e7533320400000000286bee0500000000000000612e69333205000000006cca88050000000000000061",
    "2e7536340a000000ffffffffffffffff0500000000000000612e6936340b000000000000000000008005000000000000",
    "00612e66333206000000cdcccc3d0500000000000000612e6636340c0000009a9999999999b93f060000000000000061",
    "2e626f6f6c07000000010500000000000000612e73747208000000060000000000000068c3a96c6c6f06000000000000",
    "00612e737472730900000008000000020000000000000001000000000000007802000000000000007979060000000000",
    "0000612e693332730900000005000000030000000000000001000000feffffff030000000800000000000000612e6e65",
    "737465640900000009000000020000000000000005000000020000000000000001000000020000000500000001000000",
    "00000000030000000500000000000000742e663332020000000400000000000000030000000000000000000000000000",
    "00000000000500000000000000742e663136010000000500000000000000010000004000000000000000040000000000",
    "0000742e713802000000200000000000000002000000000000000800000060000000000000000500000000000000742e",
    "747132020000000001000000000000010000000000000023000000c0000000000000000500000000000000742e747131",
    "0100000000010000000000002200000020010000000000000400000000000000742e6938010000000700000000000000",
    "1800000060010000000000000600000000000000742e6266313604000000020000000000000001000000000000000100",
    "00000000000001000000000000001e00000080010000000000000000000000000000c03f0000c03f0000c03f0000c03f",
    "0000c03f0000c03f0000c03f0000c03f0000c03f0000c03f0000c03f0000c03f00000000000000000000000000000000",
    "003c00400042004400450000000000000000000000000000000000000000000001010101010101010101010101010101",
    "010101010101010101010101010101010101010101010101010101010101010101010101010101010101010101010101",
    "010101010000000000000000000000000000000000000000000000000000000055555555555555555555555555555555",
    "555555555555555555555555555555555555555555555555555555555555555555555555555555555555555555555555",
    "555500000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000",
    "000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000",
    "0102030405060700000000000000000000000000000000000000000000000000803f0040000000000000000000000000",
    "00000000000000000000000000000000",
);

fn golden() -> Vec<u8> {
    (0..GGUF_PY_HEX.len()).step_by(2).map(|i| u8::from_str_radix(&GGUF_PY_HEX[i..i + 2], 16).expect("hex")).collect()
}

fn ours() -> GgufWriter {
    let mut w = GgufWriter::new();
    let nested = MetaArray::new(
        MetaType::Array,
        vec![MetaValue::Array(MetaArray::of_i32([1, 2])), MetaValue::Array(MetaArray::of_i32([3]))],
    )
    .expect("one element type");
    let entries: Vec<(&str, MetaValue)> = vec![
        ("general.architecture", "llama".into()),
        ("a.u8", 200u8.into()),
        ("a.i8", (-3i8).into()),
        ("a.u16", 65000u16.into()),
        ("a.i16", (-30000i16).into()),
        ("a.u32", 4_000_000_000u32.into()),
        ("a.i32", (-2_000_000_000i32).into()),
        ("a.u64", u64::MAX.into()),
        ("a.i64", i64::MIN.into()),
        ("a.f32", 0.1f32.into()),
        ("a.f64", 0.1f64.into()),
        ("a.bool", true.into()),
        ("a.str", "héllo".into()),
        ("a.strs", MetaArray::of_strings(["x", "yy"]).into()),
        ("a.i32s", MetaArray::of_i32([1, -2, 3]).into()),
        ("a.nested", nested.into()),
    ];
    for (k, v) in entries {
        w.add(k, v).expect("new key");
    }
    w.add_f32_tensor("t.f32", &[4, 3], &[1.5; 12]).expect("valid");
    let f16: Vec<u8> =
        [1.0f32, 2.0, 3.0, 4.0, 5.0].iter().flat_map(|&x| half::f16::from_f32(x).to_le_bytes()).collect();
    w.add_tensor("t.f16", DType::F16, &[5], f16).expect("valid");
    w.add_tensor("t.q8", DType::Q8_0, &[32, 2], vec![1u8; 68]).expect("valid");
    w.add_tensor("t.tq2", DType::TQ2_0, &[256, 1], vec![0x55u8; 66]).expect("valid");
    w.add_tensor("t.tq1", DType::TQ1_0, &[256], vec![0u8; 54]).expect("valid");
    w.add_tensor("t.i8", DType::I8, &[7], vec![1, 2, 3, 4, 5, 6, 7]).expect("valid");
    w.add_tensor("t.bf16", DType::BF16, &[2, 1, 1, 1], vec![0x80, 0x3f, 0x00, 0x40]).expect("valid");
    w
}

#[test]
fn the_writer_matches_gguf_py_byte_for_byte() {
    let golden = golden();
    let ours = ours().to_bytes();
    if let Some(i) = ours.iter().zip(&golden).position(|(a, b)| a != b) {
        panic!(
            "first difference at byte {i}: ours {:02x?}, gguf-py {:02x?}",
            &ours[i..(i + 8).min(ours.len())],
            &golden[i..(i + 8).min(golden.len())]
        );
    }
    assert_eq!(ours.len(), golden.len());
}

#[test]
fn the_reader_reads_gguf_py_output() {
    let g = GgufFile::from_bytes("gguf-py.gguf", &golden()).expect("valid");
    assert_eq!(g.get_u32("a.u32").expect("u32"), 4_000_000_000);
    assert_eq!(g.get_str("a.str").expect("str"), "héllo");
    assert_eq!(g.get_f32("a.f32").expect("f32"), 0.1);
    assert_eq!(g.tensors().len(), 7);
    let t = g.tensor_info("t.tq2").expect("present");
    assert_eq!((t.dtype, t.ne.as_slice(), t.n_bytes), (DType::TQ2_0, &[256u64, 1][..], 66));
    assert!(g.tensor_bytes(t).iter().all(|&b| b == 0x55));
    let mine = GgufFile::from_bytes("ours.gguf", &ours().to_bytes()).expect("valid");
    assert_eq!(g.metadata(), mine.metadata());
}
