//! Writer → reader round trips: metadata of every type (nested arrays, extremes, Unicode),
//! tensors of every storable dtype and rank, versions and alignments, byte for byte.

use proptest::prelude::*;
use purebee_memory::gguf::{GgufFile, GgufWriter, MetaArray, MetaType, MetaValue, MAX_ARRAY_NESTING};
use purebee_memory::{DType, ALL_DTYPES};

fn read(w: &GgufWriter) -> GgufFile {
    let bytes = w.to_bytes();
    GgufFile::from_bytes("roundtrip.gguf", &bytes).unwrap_or_else(|e| panic!("{e}"))
}

/// One value of every type, extremes included.
fn every_type() -> Vec<(String, MetaValue)> {
    let nested = MetaArray::new(
        MetaType::Array,
        vec![
            MetaValue::Array(MetaArray::of_i32([1, -2, 3])),
            MetaValue::Array(MetaArray::of_i32([])),
            MetaValue::Array(MetaArray::of_i32([i32::MIN, i32::MAX])),
        ],
    )
    .expect("one element type");
    let nested_strings = MetaArray::new(
        MetaType::Array,
        vec![MetaValue::Array(
            MetaArray::new(MetaType::Array, vec![MetaValue::Array(MetaArray::of_strings(["deep", ""]))])
                .expect("one element type"),
        )],
    )
    .expect("one element type");
    let values = vec![
        MetaValue::U8(u8::MAX),
        MetaValue::I8(i8::MIN),
        MetaValue::U16(u16::MAX),
        MetaValue::I16(i16::MIN),
        MetaValue::U32(u32::MAX),
        MetaValue::I32(i32::MIN),
        MetaValue::U64(u64::MAX),
        MetaValue::I64(i64::MIN),
        MetaValue::F32(-1.5e-42),
        MetaValue::F64(f64::MAX),
        MetaValue::F32(f32::INFINITY),
        MetaValue::Bool(false),
        MetaValue::Bool(true),
        MetaValue::String(String::new()),
        MetaValue::String("héllo ✓ 🐝 \0 \n".to_string()),
        MetaValue::Array(MetaArray::of_strings(["a", "", "ü"])),
        MetaValue::Array(MetaArray::of_u32([0, u32::MAX])),
        MetaValue::Array(MetaArray::of_f32([0.1, -0.0])),
        MetaValue::Array(
            MetaArray::new(MetaType::Bool, vec![MetaValue::Bool(true), MetaValue::Bool(false)])
                .expect("one element type"),
        ),
        MetaValue::Array(MetaArray::new(MetaType::U64, vec![]).expect("one element type")),
        MetaValue::Array(MetaArray::new(MetaType::F64, vec![MetaValue::F64(1e-300)]).expect("one element type")),
        MetaValue::Array(
            MetaArray::new(MetaType::I8, vec![MetaValue::I8(-1), MetaValue::I8(1)]).expect("one element type"),
        ),
        MetaValue::Array(MetaArray::new(MetaType::U16, vec![MetaValue::U16(7)]).expect("one element type")),
        MetaValue::Array(MetaArray::new(MetaType::I16, vec![MetaValue::I16(-7)]).expect("one element type")),
        MetaValue::Array(
            MetaArray::new(MetaType::U8, vec![MetaValue::U8(0), MetaValue::U8(255)]).expect("one element type"),
        ),
        MetaValue::Array(MetaArray::new(MetaType::I64, vec![MetaValue::I64(i64::MAX)]).expect("one element type")),
        MetaValue::Array(MetaArray::new(MetaType::Array, vec![]).expect("one element type")),
        MetaValue::Array(nested),
        MetaValue::Array(nested_strings),
    ];
    values.into_iter().enumerate().map(|(i, v)| (format!("test.{i}.{}", v.meta_type()), v)).collect()
}

#[test]
fn every_metadata_type_round_trips_in_order() {
    let entries = every_type();
    let mut w = GgufWriter::new();
    for (k, v) in &entries {
        w.add(k, v.clone()).expect("valid entry");
    }
    let g = read(&w);
    assert_eq!(g.metadata(), entries.as_slice());
    let types: Vec<MetaType> = g.metadata().iter().map(|(_, v)| v.meta_type()).collect();
    for id in 0..=12 {
        let t = MetaType::from_id(id).expect("defined");
        assert!(types.contains(&t), "type {t} missing from the test");
        assert_eq!(t.id(), id);
    }
    assert_eq!(MetaType::from_id(13), None);
    assert!(g.tensors().is_empty());
    assert_eq!(g.data_offset() % 32, 0);
}

#[test]
fn nan_round_trips_bit_for_bit() {
    let mut w = GgufWriter::new();
    let nan32 = f32::from_bits(0x7fc0_1234);
    let nan64 = f64::from_bits(0xfff8_0000_0000_0042);
    w.add("n32", nan32).expect("new key").add("n64", nan64).expect("new key");
    let g = read(&w);
    match (g.get("n32"), g.get("n64")) {
        (Some(MetaValue::F32(a)), Some(MetaValue::F64(b))) => {
            assert_eq!(a.to_bits(), nan32.to_bits());
            assert_eq!(b.to_bits(), nan64.to_bits());
        }
        other => panic!("{other:?}"),
    }
}

/// Deterministic bytes for a tensor.
fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

#[test]
fn tensors_of_every_storable_dtype_and_rank_round_trip() {
    let mut w = GgufWriter::new();
    let mut expected = Vec::new();
    for (k, dtype) in ALL_DTYPES.into_iter().filter(|d| d.gguf_type_id().is_some()).enumerate() {
        let ne0 = dtype.block_len() as u64 * 2;
        for ne in [vec![ne0], vec![ne0, 3], vec![ne0, 1, 2], vec![ne0, 2, 1, 3]] {
            let name = format!("{}.{}d", dtype.name().to_lowercase(), ne.len());
            let rows: u64 = ne[1..].iter().product();
            let n = dtype.tensor_bytes(rows as usize, ne0 as usize).expect("small");
            let data = pattern(n, k as u8);
            w.add_tensor(&name, dtype, &ne, data.clone()).expect("valid tensor");
            expected.push((name, dtype, ne, data));
        }
    }
    // A zero-element tensor is legal.
    w.add_tensor("empty", DType::F32, &[0, 4], Vec::new()).expect("empty tensor");
    let g = read(&w);
    assert_eq!(g.tensors().len(), expected.len() + 1);
    for ((name, dtype, ne, data), t) in expected.iter().zip(g.tensors()) {
        assert_eq!((&t.name, t.dtype, &t.ne), (name, *dtype, ne));
        assert_eq!(g.tensor_bytes(t), data.as_slice(), "{name}");
        assert_eq!(t.offset % 32, 0);
        let h = g.host_tensor(name).expect("present");
        assert_eq!(h.bytes(), data.as_slice());
    }
    let empty = g.tensor_info("empty").expect("present");
    assert_eq!((empty.n_bytes, empty.shape.dims()), (0, &[4usize, 0][..]));
}

#[test]
fn versions_and_alignments_round_trip() {
    for (version, alignment) in [(2u32, 1u32), (3, 8), (3, 64), (2, 4096)] {
        let mut w = GgufWriter::new();
        w.set_version(version).expect("2 or 3");
        w.add_u32("general.alignment", alignment).expect("power of two");
        w.add_tensor("a", DType::I8, &[3], vec![1, 2, 3]).expect("valid");
        w.add_tensor("b", DType::Q8_0, &[32], vec![9; 34]).expect("valid");
        let (bytes, layout) = w.to_bytes_with_layout();
        let g = GgufFile::from_bytes("v.gguf", &bytes).expect("valid");
        assert_eq!((g.version(), g.alignment()), (version, u64::from(alignment)));
        assert_eq!(g.data_offset(), layout.data_offset);
        assert_eq!(g.data_offset() % u64::from(alignment), 0);
        let b = g.tensor_info("b").expect("present");
        assert_eq!(b.offset, 3u64.next_multiple_of(u64::from(alignment)));
        assert_eq!(g.tensor_bytes(b), &[9; 34][..]);
        assert_eq!(layout.tensors[1].data.start, g.data_offset() + b.offset);
    }
}

#[test]
fn a_zero_dim_tensor_is_one_element() {
    // ggml accepts n_dims = 0 (every ne is 1); the writer does not write it, so build it.
    let mut b = Vec::new();
    b.extend_from_slice(b"GGUF");
    b.extend_from_slice(&3u32.to_le_bytes());
    b.extend_from_slice(&1u64.to_le_bytes());
    b.extend_from_slice(&0u64.to_le_bytes());
    b.extend_from_slice(&1u64.to_le_bytes());
    b.push(b's');
    b.extend_from_slice(&0u32.to_le_bytes()); // n_dims
    b.extend_from_slice(&0u32.to_le_bytes()); // F32
    b.extend_from_slice(&0u64.to_le_bytes()); // offset
    assert_eq!(b.len(), 49);
    b.resize(64, 0); // padding: the data section starts at 64
    b.extend_from_slice(&2.5f32.to_le_bytes());
    let g = GgufFile::from_bytes("scalar.gguf", &b).expect("valid");
    assert_eq!(g.data_offset(), 64);
    let t = g.tensor_info("s").expect("present");
    assert!(t.ne.is_empty());
    assert_eq!((t.shape.dims(), t.n_bytes, t.n_elements()), (&[1usize][..], 4, 1));
    assert_eq!(g.host_tensor("s").expect("present").f32s("s").expect("f32")[0], 2.5);
}

/// Any metadata value proptest can think of, up to the nesting limit.
fn arb_value() -> impl Strategy<Value = MetaValue> {
    let leaf = prop_oneof![
        any::<u8>().prop_map(MetaValue::U8),
        any::<i8>().prop_map(MetaValue::I8),
        any::<u16>().prop_map(MetaValue::U16),
        any::<i16>().prop_map(MetaValue::I16),
        any::<u32>().prop_map(MetaValue::U32),
        any::<i32>().prop_map(MetaValue::I32),
        any::<u64>().prop_map(MetaValue::U64),
        any::<i64>().prop_map(MetaValue::I64),
        any::<f32>().prop_filter("NaN != NaN", |x| !x.is_nan()).prop_map(MetaValue::F32),
        any::<f64>().prop_filter("NaN != NaN", |x| !x.is_nan()).prop_map(MetaValue::F64),
        any::<bool>().prop_map(MetaValue::Bool),
        ".{0,12}".prop_map(MetaValue::String),
    ];
    leaf.prop_recursive(MAX_ARRAY_NESTING as u32 - 1, 64, 6, |inner| {
        // Arrays are homogeneous: pick one element, then more of the same type.
        prop::collection::vec(inner, 0..6).prop_map(|vs| {
            let t = vs.first().map_or(MetaType::U8, MetaValue::meta_type);
            let vs = vs.into_iter().filter(|v| v.meta_type() == t).collect();
            MetaValue::Array(MetaArray::new(t, vs).expect("one element type"))
        })
    })
}

proptest! {
    #[test]
    fn arbitrary_metadata_round_trips(values in prop::collection::vec(arb_value(), 0..8)) {
        let mut w = GgufWriter::new();
        let entries: Vec<(String, MetaValue)> =
            values.into_iter().enumerate().map(|(i, v)| (format!("k{i}"), v)).collect();
        for (k, v) in &entries {
            w.add(k, v.clone()).expect("homogeneous arrays within the nesting limit");
        }
        let g = GgufFile::from_bytes("p.gguf", &w.to_bytes()).expect("the writer's output reads back");
        prop_assert_eq!(g.metadata(), entries.as_slice());
    }
}
