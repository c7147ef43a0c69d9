//! Layout tests across formats: the committed fixture rows and the gguf-py oracle
//! ([`super::test_vectors`]), multi-row offsets, size errors, and a property test that encodes
//! random trits in each ternary layout and decodes them back through [`QuantMatrix`].

use half::f16;
use proptest::prelude::*;

use super::test_vectors::{le_f32s, FIXTURE_ROWS, ORACLE};
use super::*;
use crate::Shape;

/// Asserts that two float slices are equal bit for bit, naming the first differing index.
fn assert_bits_eq(got: &[f32], expected: &[f32], what: &str) {
    assert_eq!(got.len(), expected.len(), "{what}: lengths differ");
    if let Some(i) = (0..got.len()).find(|&i| got[i].to_bits() != expected[i].to_bits()) {
        panic!(
            "{what}: element {i}: got {} ({:#010x}), expected {} ({:#010x}), difference {}",
            got[i],
            got[i].to_bits(),
            expected[i],
            expected[i].to_bits(),
            got[i] - expected[i]
        );
    }
}

/// Every row of `m`, dequantized and concatenated.
fn all_rows(m: &QuantMatrix<'_>) -> Vec<f32> {
    let mut out = vec![0f32; m.rows() * m.cols()];
    for (r, o) in out.chunks_exact_mut(m.cols()).enumerate() {
        m.dequantize_row(r, o).expect("row in range, buffer sized");
    }
    out
}

/// Every row of a ternary `m` as (trits, per-row scales), concatenated.
fn all_ternary_rows(m: &QuantMatrix<'_>) -> (Vec<i8>, Vec<f32>) {
    let per_row = m.ternary_scales_per_row().expect("ternary");
    let mut trits = vec![0i8; m.rows() * m.cols()];
    let mut scales = vec![0f32; m.rows() * per_row];
    for r in 0..m.rows() {
        m.ternary_row(r, &mut trits[r * m.cols()..(r + 1) * m.cols()], &mut scales[r * per_row..(r + 1) * per_row])
            .expect("row in range, buffers sized");
    }
    (trits, scales)
}

// ---- Real data: the fixtures ------------------------------------------------------------------

#[test]
fn fixture_rows_decode_to_the_f32_file_bit_for_bit() {
    for v in &FIXTURE_ROWS {
        let expected = le_f32s(v.f32);
        assert_eq!(expected.len(), 2 * v.cols);
        let i2_s: Vec<u8> = [v.i2_s, v.i2_s_trailer].concat();
        for (dtype, bytes) in
            [(DType::F32, v.f32), (DType::I2_S, &i2_s[..]), (DType::TQ1_0, v.tq1_0), (DType::TQ2_0, v.tq2_0)]
        {
            let m = QuantMatrix::new(dtype, bytes, 2, v.cols).expect("fixture rows are whole rows");
            assert_bits_eq(&all_rows(&m), &expected, &format!("{} as {dtype}", v.name));
        }
    }
}

#[test]
fn fixture_trits_and_scales_agree_across_formats() {
    for v in &FIXTURE_ROWS {
        let expected = le_f32s(v.f32);
        let i2_s: Vec<u8> = [v.i2_s, v.i2_s_trailer].concat();
        let (i2_trits, i2_scales) = all_ternary_rows(&QuantMatrix::new(DType::I2_S, &i2_s, 2, v.cols).expect("sizes"));
        let (tq1_trits, tq1_scales) =
            all_ternary_rows(&QuantMatrix::new(DType::TQ1_0, v.tq1_0, 2, v.cols).expect("sizes"));
        let (tq2_trits, tq2_scales) =
            all_ternary_rows(&QuantMatrix::new(DType::TQ2_0, v.tq2_0, 2, v.cols).expect("sizes"));
        let (d1_trits, d1_scales) =
            all_ternary_rows(&QuantMatrix::new(DType::TQ2_0, v.tq2_0_d1, 2, v.cols).expect("sizes"));
        assert_eq!(i2_trits, tq1_trits, "{}: I2_S vs TQ1_0 trits", v.name);
        assert_eq!(i2_trits, tq2_trits, "{}: I2_S vs TQ2_0 trits", v.name);
        assert_eq!(i2_trits, d1_trits, "{}: I2_S vs TQ2_0 (d = 1) trits", v.name);
        assert!(i2_trits.iter().all(|t| (-1..=1).contains(t)), "{}: a converter wrote code 3", v.name);
        // One scale per tensor (I2_S, one per row), the same d in every block (TQ, cols/256 per row).
        let s = i2_scales[0];
        assert_eq!(i2_scales, vec![s; 2]);
        assert_eq!(tq1_scales, vec![s; 2 * v.cols / 256]);
        assert_eq!(tq2_scales, vec![s; 2 * v.cols / 256]);
        assert_eq!(d1_scales, vec![1.0; 2 * v.cols / 256]);
        let rebuilt: Vec<f32> = i2_trits.iter().map(|&t| f32::from(t) * s).collect();
        assert_bits_eq(&rebuilt, &expected, &format!("{}: trits · scale", v.name));
        // The fixtures' I2_S trailer holds the scale 8 times.
        assert!(v.i2_s_trailer.chunks(4).all(|c| c == s.to_le_bytes()));
    }
}

#[test]
fn scale_tensor_file_decodes_to_trits_and_its_scale_restores_the_weights() {
    for v in &FIXTURE_ROWS {
        let expected = le_f32s(v.f32);
        let scale = le_f32s(v.tq2_0_d1_scale)[0];
        let m = QuantMatrix::new(DType::TQ2_0, v.tq2_0_d1, 2, v.cols).expect("sizes");
        let values = all_rows(&m);
        assert!(values.iter().all(|&x| x == -1.0 || x == 0.0 || x == 1.0), "{}: d = 1 gives bare trits", v.name);
        let scaled: Vec<f32> = values.iter().map(|&x| x * scale).collect();
        assert_bits_eq(&scaled, &expected, &format!("{}: TQ2_0 (d = 1) · .scale", v.name));
    }
}

// ---- An independent decoder: gguf-py ----------------------------------------------------------

#[test]
fn gguf_py_dequantizes_the_same_random_blocks_bit_for_bit() {
    for o in &ORACLE {
        let expected = le_f32s(o.values);
        let n_blocks = o.blocks.len() / o.dtype.block_bytes();
        assert_eq!(expected.len(), n_blocks * o.dtype.block_len(), "{}", o.dtype);
        // As one row of every block, and as one row per block.
        for (rows, cols) in [(1, n_blocks * o.dtype.block_len()), (n_blocks, o.dtype.block_len())] {
            let m = QuantMatrix::new(o.dtype, o.blocks, rows, cols).expect("whole blocks");
            assert_bits_eq(&all_rows(&m), &expected, &format!("{} as {rows} x {cols}", o.dtype));
        }
    }
}

#[test]
fn gguf_py_agrees_on_code_3_and_unencodable_tq1_0_bytes() {
    // The test above covers these cases only if the random blocks contain them.
    let tq2 = ORACLE.iter().find(|o| o.dtype == DType::TQ2_0).expect("TQ2_0 vectors");
    let m = QuantMatrix::new(DType::TQ2_0, tq2.blocks, 1, 768).expect("3 blocks");
    let (trits, _) = all_ternary_rows(&m);
    assert!(trits.contains(&2), "the random TQ2_0 blocks hold no code 3");
    let tq1 = ORACLE.iter().find(|o| o.dtype == DType::TQ1_0).expect("TQ1_0 vectors");
    let qs_bytes = (0..3).flat_map(|b| &tq1.blocks[b * 54..b * 54 + 52]);
    assert!(qs_bytes.into_iter().any(|&q| q >= 243), "the random TQ1_0 blocks hold no byte above 242");
}

// ---- Offsets, shapes and whole tensors --------------------------------------------------------

#[test]
fn i2_s_rows_start_at_row_times_cols_over_4() {
    // 3 rows of 256: row r is trits [r-th pattern]; rows occupy bytes 0..64, 64..128, 128..192,
    // and the trailer 192..224.
    let (rows, cols) = (3, 256);
    let trits: Vec<i8> = (0..rows * cols).map(|i| [-1i8, 0, 1][(i / cols + i * (i / cols + 1) / 3) % 3]).collect();
    let bytes = encode::encode_i2_s(&trits, 0.75).expect("whole blocks of trits");
    assert_eq!(bytes.len(), rows * cols / 4 + 32);
    let m = QuantMatrix::new(DType::I2_S, &bytes, rows, cols).expect("sizes");
    assert_eq!((m.ternary_scale_block(), m.ternary_scales_per_row()), (Some(256), Some(1)));
    for r in 0..rows {
        let mut t = vec![0i8; cols];
        let mut s = [0f32];
        m.ternary_row(r, &mut t, &mut s).expect("row in range");
        assert_eq!(&t[..], &trits[r * cols..(r + 1) * cols], "row {r}");
        assert_eq!(s, [0.75]);
        let mut v = vec![0f32; cols];
        m.dequantize_row(r, &mut v).expect("row in range");
        let expected: Vec<f32> = trits[r * cols..(r + 1) * cols].iter().map(|&t| f32::from(t) * 0.75).collect();
        assert_bits_eq(&v, &expected, &format!("row {r}"));
    }
    // Row 1 of the view is exactly the bytes 64..128 decoded on their own.
    let alone: Vec<u8> = [&bytes[64..128], &bytes[192..]].concat();
    let m1 = QuantMatrix::new(DType::I2_S, &alone, 1, cols).expect("sizes");
    let (t1, _) = all_ternary_rows(&m1);
    assert_eq!(&t1[..], &trits[cols..2 * cols]);
}

#[test]
fn code_3_decodes_as_plus_2_in_both_two_bit_layouts() {
    // Every 2-bit code 3 (no encoder writes it), scale 0.5.
    let tq2: Vec<u8> = [[0xffu8; 64].as_slice(), &f16::from_f32(0.5).to_le_bytes()].concat();
    let i2: Vec<u8> = [[0xffu8; 64].as_slice(), &[0.5f32.to_le_bytes(); 8].concat()].concat();
    for (dtype, bytes) in [(DType::TQ2_0, &tq2[..]), (DType::I2_S, &i2[..])] {
        let m = QuantMatrix::new(dtype, bytes, 1, 256).expect("sizes");
        assert_eq!(all_ternary_rows(&m).0, vec![2i8; 256], "{dtype}");
        assert_eq!(all_rows(&m), vec![1.0f32; 256], "{dtype}");
    }
}

#[test]
fn plain_types_decode_row_by_row() {
    // 2 rows of 3 elements each, for every plain dtype.
    let cases: [(DType, Vec<u8>, [f32; 6]); 7] = [
        (
            DType::F32,
            [1.5f32, -2.0, 0.0, 3.25, -0.5, 8.0].iter().flat_map(|v| v.to_le_bytes()).collect(),
            [1.5, -2.0, 0.0, 3.25, -0.5, 8.0],
        ),
        (
            DType::F16,
            [0x3e00u16, 0xc000, 0, 0x4280, 0xb800, 0x4800].iter().flat_map(|v| v.to_le_bytes()).collect(),
            [1.5, -2.0, 0.0, 3.25, -0.5, 8.0],
        ),
        (
            DType::BF16,
            [0x3fc0u16, 0xc000, 0, 0x4050, 0xbf00, 0x4100].iter().flat_map(|v| v.to_le_bytes()).collect(),
            [1.5, -2.0, 0.0, 3.25, -0.5, 8.0],
        ),
        (DType::I8, vec![1, 0xfe, 0, 3, 0x80, 127], [1.0, -2.0, 0.0, 3.0, -128.0, 127.0]),
        (
            DType::I16,
            [1i16, -2, 0, 3, -300, 32767].iter().flat_map(|v| v.to_le_bytes()).collect(),
            [1.0, -2.0, 0.0, 3.0, -300.0, 32767.0],
        ),
        (
            DType::I32,
            [1i32, -2, 0, 3, -70000, 1 << 24].iter().flat_map(|v| v.to_le_bytes()).collect(),
            [1.0, -2.0, 0.0, 3.0, -70000.0, 16_777_216.0],
        ),
        (
            DType::U32,
            [1u32, 2, 0, 3, 70000, 8191].iter().flat_map(|v| v.to_le_bytes()).collect(),
            [1.0, 2.0, 0.0, 3.0, 70000.0, 8191.0],
        ),
    ];
    for (dtype, bytes, expected) in cases {
        let m = QuantMatrix::new(dtype, &bytes, 2, 3).expect("sizes");
        assert_bits_eq(&all_rows(&m), &expected, &dtype.to_string());
        assert_eq!(m.ternary_scale_block(), None);
        assert_eq!(m.ternary_row(0, &mut [0; 3], &mut []), Err(QuantError::NotTernary { dtype }));
    }
}

#[test]
fn dequantize_decodes_a_whole_tensor_in_row_major_order() {
    // A [2, 3, 32] Q8_0 tensor: 6 rows of one block; block b has d = b + 1 and codes i − 16.
    let mut bytes = Vec::new();
    for b in 0..6u8 {
        bytes.extend_from_slice(&f16::from_f32(f32::from(b + 1)).to_bits().to_le_bytes());
        bytes.extend((0..32).map(|i: i8| (i - 16) as u8));
    }
    let shape = Shape::new(&[2, 3, 32]).expect("valid");
    let t = HostTensor::from_bytes("w", DType::Q8_0, shape, &bytes).expect("sizes");
    let values = dequantize(&t).expect("decodes");
    let expected: Vec<f32> = (0..6).flat_map(|b| (0..32).map(move |i| (i as f32 - 16.0) * (b as f32 + 1.0))).collect();
    assert_bits_eq(&values, &expected, "Q8_0 [2, 3, 32]");
    let m = QuantMatrix::from_tensor(&t).expect("sizes");
    assert_eq!((m.dtype(), m.rows(), m.cols()), (DType::Q8_0, 6, 32));
    // Empty tensors decode to nothing.
    let empty = HostTensor::zeros("e", DType::TQ2_0, Shape::new(&[0, 256]).expect("valid")).expect("valid");
    assert_eq!(dequantize(&empty), Ok(vec![]));
    let no_cols = HostTensor::zeros("e", DType::I2_S, Shape::new(&[4, 0]).expect("valid")).expect("valid");
    assert_eq!(dequantize(&no_cols), Ok(vec![]));
}

// ---- Errors -----------------------------------------------------------------------------------

#[test]
fn sizes_are_checked_once_in_new() {
    // I2_S without its trailer: 256·256/4 bytes where 256·256/4 + 32 are needed.
    let bytes = vec![0u8; 256 * 256 / 4 + 32];
    assert_eq!(
        QuantMatrix::new(DType::I2_S, &bytes[..256 * 256 / 4], 256, 256).err(),
        Some(QuantError::SizeMismatch { dtype: DType::I2_S, rows: 256, cols: 256, expected: 16416, actual: 16384 })
    );
    assert!(QuantMatrix::new(DType::I2_S, &bytes, 256, 256).is_ok());
    // One byte too many or too few, for every blocked type.
    for dtype in [DType::Q4_0, DType::Q4_1, DType::Q8_0, DType::TQ1_0, DType::TQ2_0] {
        let need = dtype.block_bytes() * 2 * 3;
        let bytes = vec![0u8; need + 1];
        let (rows, cols) = (3, 2 * dtype.block_len());
        assert!(QuantMatrix::new(dtype, &bytes[..need], rows, cols).is_ok(), "{dtype}");
        for actual in [need - 1, need + 1] {
            assert_eq!(
                QuantMatrix::new(dtype, &bytes[..actual], rows, cols).err(),
                Some(QuantError::SizeMismatch { dtype, rows, cols, expected: need, actual }),
                "{dtype}"
            );
        }
    }
    // Rows that are not whole blocks (I2_S blocks are 128 elements, TQ 256, Q 32).
    assert_eq!(
        QuantMatrix::new(DType::TQ2_0, &[0; 33], 1, 128).err(),
        Some(QuantError::NotWholeBlocks { dtype: DType::TQ2_0, cols: 128, block_len: 256 })
    );
    assert_eq!(
        QuantMatrix::new(DType::I2_S, &[0; 48], 1, 64).err(),
        Some(QuantError::NotWholeBlocks { dtype: DType::I2_S, cols: 64, block_len: 128 })
    );
    assert_eq!(
        QuantMatrix::new(DType::F32, &[], usize::MAX, 2).err(),
        Some(QuantError::TooLarge { dtype: DType::F32, rows: usize::MAX, cols: 2 })
    );
}

#[test]
fn row_and_buffer_errors_name_what_is_wrong() {
    let two_rows = encode::encode_tq2_0_row(&[0; 512], f16::ONE).expect("two blocks of trits");
    let m = QuantMatrix::new(DType::TQ2_0, &two_rows, 2, 256).expect("sizes");
    let mut out = vec![0f32; 256];
    let mut trits = vec![0i8; 256];
    let mut scales = [0f32; 1];
    assert_eq!(m.dequantize_row(2, &mut out), Err(QuantError::RowOutOfRange { dtype: DType::TQ2_0, row: 2, rows: 2 }));
    assert_eq!(
        m.dequantize_row(1, &mut out[..255]),
        Err(QuantError::BufferLength {
            dtype: DType::TQ2_0,
            row: 1,
            buffer: RowBuffer::Values,
            expected: 256,
            actual: 255
        })
    );
    assert_eq!(
        m.ternary_row(0, &mut trits[..128], &mut scales),
        Err(QuantError::BufferLength {
            dtype: DType::TQ2_0,
            row: 0,
            buffer: RowBuffer::Trits,
            expected: 256,
            actual: 128
        })
    );
    assert_eq!(
        m.ternary_row(0, &mut trits, &mut []),
        Err(QuantError::BufferLength {
            dtype: DType::TQ2_0,
            row: 0,
            buffer: RowBuffer::BlockScales,
            expected: 1,
            actual: 0
        })
    );
    assert_eq!(m.ternary_row(1, &mut trits, &mut scales), Ok(()));
    assert_eq!(scales, [1.0]);
    let msg = QuantError::SizeMismatch { dtype: DType::I2_S, rows: 256, cols: 256, expected: 16416, actual: 16384 };
    assert_eq!(msg.to_string(), "I2_S matrix of 256 x 256 needs 16416 bytes, got 16384");
    let msg = QuantError::BufferLength {
        dtype: DType::TQ1_0,
        row: 3,
        buffer: RowBuffer::BlockScales,
        expected: 2,
        actual: 1,
    };
    assert_eq!(msg.to_string(), "block scales buffer for row 3 of a TQ1_0 matrix holds 1 elements, expected 2");
}

// ---- Property: encode random trits in each ternary layout, decode them back --------------------

/// A random ternary matrix: dtype, rows, cols (whole blocks), trits in the layout's range, and
/// its scales (TQ: one finite f16 per block; I2_S: one finite f32).
fn ternary_problem() -> impl Strategy<Value = (DType, usize, usize, Vec<i8>, Vec<u16>, f32)> {
    (prop_oneof![Just(DType::I2_S), Just(DType::TQ1_0), Just(DType::TQ2_0)], 1usize..=4, 1usize..=3).prop_flat_map(
        |(dtype, rows, blocks_per_row)| {
            let cols = blocks_per_row * dtype.block_len();
            // TQ1_0 holds only −1, 0, +1; the 2-bit layouts also code 3 (+2).
            let max_trit: i8 = if dtype == DType::TQ1_0 { 1 } else { 2 };
            let n_blocks = if dtype == DType::I2_S { 0 } else { rows * blocks_per_row };
            (
                Just(dtype),
                Just(rows),
                Just(cols),
                proptest::collection::vec(-1i8..=max_trit, rows * cols),
                proptest::collection::vec(
                    any::<u16>().prop_filter("finite f16", |&b| f16::from_bits(b).is_finite()),
                    n_blocks,
                ),
                any::<f32>().prop_filter("finite f32", |s| s.is_finite()),
            )
        },
    )
}

/// Packs `trits` (rows·cols, row-major) in `dtype`'s layout with the library encoders, one
/// block at a time for the TQ layouts (each block has its own `d`). The encoders write only
/// −1..=1, so a +2 is encoded as 0 (code 1) and then turned into code 3 by setting the other
/// bit of its pair, at the place the layout's `position` gives.
fn encode(dtype: DType, trits: &[i8], block_d: &[u16], scale: f32) -> Vec<u8> {
    let trits_01: Vec<i8> = trits.iter().map(|&t| if t == 2 { 0 } else { t }).collect();
    let mut bytes = match dtype {
        DType::I2_S => encode::encode_i2_s(&trits_01, scale).expect("whole blocks of -1..=1"),
        DType::TQ1_0 | DType::TQ2_0 => trits_01
            .chunks(256)
            .zip(block_d)
            .flat_map(|(chunk, &d)| {
                let d = f16::from_bits(d);
                if dtype == DType::TQ1_0 {
                    encode::encode_tq1_0_row(chunk, d)
                } else {
                    encode::encode_tq2_0_row(chunk, d)
                }
                .expect("a block of -1..=1")
            })
            .collect(),
        _ => unreachable!("ternary_problem yields ternary dtypes"),
    };
    for (i, _) in trits.iter().enumerate().filter(|(_, &t)| t == 2) {
        let (block, e) = (i / dtype.block_len(), i % dtype.block_len());
        let (byte, shift) = if dtype == DType::I2_S { i2_s::position(e) } else { tq2_0::position(e) };
        bytes[block * dtype.block_bytes() + byte] |= 3 << shift;
    }
    bytes
}

proptest! {
    #[test]
    fn ternary_layouts_round_trip((dtype, rows, cols, trits, block_d, scale) in ternary_problem()) {
        let bytes = encode(dtype, &trits, &block_d, scale);
        let m = QuantMatrix::new(dtype, &bytes, rows, cols).expect("encoder writes the documented size");
        let block = m.ternary_scale_block().expect("ternary");
        let per_row = m.ternary_scales_per_row().expect("ternary");
        prop_assert_eq!(block * per_row, cols);
        let (got_trits, got_scales) = all_ternary_rows(&m);
        prop_assert_eq!(&got_trits, &trits);
        let expected_scales: Vec<f32> = if dtype == DType::I2_S {
            vec![scale; rows]
        } else {
            block_d.iter().map(|&b| f16::from_bits(b).to_f32()).collect()
        };
        prop_assert_eq!(
            got_scales.iter().map(|s| s.to_bits()).collect::<Vec<_>>(),
            expected_scales.iter().map(|s| s.to_bits()).collect::<Vec<_>>()
        );
        // dequantize_row is t · d of the block's scale, bit for bit.
        let values = all_rows(&m);
        for (i, (&v, &t)) in values.iter().zip(&trits).enumerate() {
            let (r, c) = (i / cols, i % cols);
            let d = expected_scales[r * per_row + c / block];
            prop_assert_eq!(v.to_bits(), (f32::from(t) * d).to_bits(), "row {} col {}: {} vs {} · {}", r, c, v, t, d);
        }
    }
}
