//! EMBED: the GPU engine and the CPU engine (every SIMD path this CPU runs) vs the
//! reference engine for tables of every dtype the ISA allows (F32, F16, BF16, Q4_0, Q4_1,
//! Q8_0, TQ1_0, TQ2_0, I2_S) over random shapes, random table bytes and random ids (repeats
//! included).
//!
//! Exact: every decoded value is an integer code times a scale widened from f16 (or I2_S's
//! f32 scale), a product exact in f32, plus Q4_1's minimum (one rounding, the same on every
//! engine); F32 and BF16 are bit copies. So the engines must give the reference's bits; the
//! only freedom is a NaN's payload (a NaN scale or a NaN element stays NaN, any NaN).
//!
//! The table bytes are random, so scales and F16/F32/BF16 elements include subnormals,
//! infinities and NaN; ternary codes include the 2-bit code 3 and TQ1_0 bytes 243..=255 that
//! no encoder writes. One exception: I2_S's f32 scale is drawn from normal floats, because a
//! GPU that flushes f32 subnormals may flush `code · scale` for a subnormal scale (no
//! converter writes one; the f16 scales of the other types widen to normal f32s).
//!
//! Ids past the vocabulary are a run-time error on the reference engine, and the same error
//! on the CPU engine; the GPU kernel writes zeros for them (the host validates ids), checked
//! here on the GPU alone.

use proptest::prelude::*;
use purebee_isa::{DType, Engine, ExecError, ProgramBuilder};
use purebee_memory::{HostTensor, Shape};
use purebee_tests::differential::{cpu_levels, cpu_pair, f32s, gpu_tests_skipped, on_cpu_levels, pair, Pair};

/// The dtypes a weight or table may have (EMBED and LINEAR take them all).
const DTYPES: [DType; 9] = purebee_tests::WEIGHT_DTYPES;

/// Requires bit-equal values (or NaN on both sides); names the row, column, both values
/// with their bits, and the difference on failure.
fn assert_bits_equal(got: &[f32], want: &[f32], cols: usize, what: &str) -> Result<(), String> {
    if got.len() != want.len() {
        return Err(format!("{what}: {} values, expected {}", got.len(), want.len()));
    }
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        if g.to_bits() != w.to_bits() && !(g.is_nan() && w.is_nan()) {
            return Err(format!(
                "{what}: index {i} (row {}, column {}): got {g} ({:#010x}), expected {w} ({:#010x}), difference {}",
                i / cols,
                i % cols,
                g.to_bits(),
                w.to_bits(),
                g - w
            ));
        }
    }
    Ok(())
}

/// A table of `dtype` from random bytes. For I2_S the trailer's first f32, the scale, is
/// replaced by `scale`; its other 28 bytes stay random (bitnet.cpp's quantizer writes only
/// the first f32), so reading any other word as the scale fails the comparison.
fn table(dtype: DType, vocab: usize, cols: usize, mut bytes: Vec<u8>, scale: f32) -> HostTensor {
    if dtype == DType::I2_S {
        let at = vocab * cols / 4;
        bytes[at..at + 4].copy_from_slice(&scale.to_le_bytes());
    }
    let shape = Shape::matrix(vocab, cols).expect("shape");
    HostTensor::from_bytes("table", dtype, shape, &bytes).expect("sizes agree")
}

fn ids_tensor(ids: &[u32]) -> HostTensor {
    HostTensor::from_u32("ids", Shape::vector(ids.len()), ids.to_vec()).expect("ids")
}

/// Runs EMBED on both engines of `pair` and requires bit-equal outputs.
fn check<E: Engine>(pair: &mut Pair<E>, table: &HostTensor, ids: &[u32]) -> Result<(), String> {
    let (dtype, vocab, cols) = (table.dtype(), table.shape().rows(), table.shape().cols());
    let n = ids.len();
    let inputs = [("table", table.clone()), ("ids", ids_tensor(ids))];
    let (got, reference) = pair.run(&inputs, &[], |b: &mut ProgramBuilder, name, t| {
        let out = b.alloc(&name("out"), DType::F32, &[n, cols])?;
        b.embed(out, t[0], t[1])?;
        Ok(vec![out])
    });
    let what =
        format!("{} engine: EMBED {} table [{vocab}, {cols}], {n} ids {ids:?}", pair.engine.name(), dtype.name());
    assert_bits_equal(&f32s(&got[0]), &f32s(&reference[0]), cols, &what)
}

/// EMBED on the GPU engine.
fn check_gpu(table: HostTensor, ids: Vec<u32>) -> Result<(), String> {
    check(&mut pair(), &table, &ids)
}

/// EMBED on the CPU engine, every SIMD path.
fn check_cpu(table: HostTensor, ids: Vec<u32>) -> Result<(), String> {
    on_cpu_levels(|p| check(p, &table, &ids))
}

/// Row lengths for a dtype: any length for the plain types, whole blocks otherwise.
fn cols_for(dtype: DType) -> BoxedStrategy<usize> {
    match dtype.block_len() {
        1 => prop_oneof![1usize..=40, 41usize..=700].boxed(),
        block => (1usize..=(1536 / block).max(2)).prop_map(move |k| k * block).boxed(),
    }
}

/// A normal f32 of either sign, from 2^-30 to 2^30 (I2_S scales).
fn normal_scale() -> impl Strategy<Value = f32> {
    (any::<bool>(), -30i32..=30, 0u32..(1 << 23))
        .prop_map(|(neg, e, m)| f32::from_bits(((neg as u32) << 31) | (((e + 127) as u32) << 23) | m))
}

/// A case: dtype, vocab, cols, table bytes, I2_S scale, ids.
fn case() -> impl Strategy<Value = (DType, usize, usize, Vec<u8>, f32, Vec<u32>)> {
    (prop::sample::select(DTYPES.to_vec()), 1usize..=24)
        .prop_flat_map(|(dtype, vocab)| (Just(dtype), Just(vocab), cols_for(dtype)))
        .prop_flat_map(|(dtype, vocab, cols)| {
            let bytes = dtype.tensor_bytes(vocab, cols).expect("whole blocks");
            (
                Just(dtype),
                Just(vocab),
                Just(cols),
                prop::collection::vec(any::<u8>(), bytes),
                normal_scale(),
                prop::collection::vec(0..vocab as u32, 1..=12),
            )
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn embed_matches_the_reference_bit_for_bit((dtype, vocab, cols, bytes, scale, ids) in case()) {
        if gpu_tests_skipped() { return Ok(()); }
        check_gpu(table(dtype, vocab, cols, bytes, scale), ids).map_err(TestCaseError::fail)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]
    #[test]
    fn cpu_embed_matches_the_reference_bit_for_bit((dtype, vocab, cols, bytes, scale, ids) in case()) {
        check_cpu(table(dtype, vocab, cols, bytes, scale), ids).map_err(TestCaseError::fail)?;
    }
}

/// Deterministic pseudo-random bytes (SplitMix64).
fn pseudo_random_bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut rng = purebee_tests::rng::SplitMix64(seed);
    (0..n).map(|_| rng.byte()).collect()
}

/// Every dtype at least once, whatever proptest draws: 5 rows of 768 (a multiple of every
/// block length), every row gathered, the last twice.
fn every_dtype_at_a_fixed_shape<E: Engine>(pair: &mut Pair<E>) -> Result<(), String> {
    for (k, dtype) in DTYPES.into_iter().enumerate() {
        let (vocab, cols) = (5, 768);
        let bytes = pseudo_random_bytes(dtype.tensor_bytes(vocab, cols).expect("whole blocks"), k as u64);
        check(pair, &table(dtype, vocab, cols, bytes, -0.0625), &[4, 0, 1, 2, 3, 4])?;
    }
    Ok(())
}

#[test]
fn every_dtype_at_a_fixed_shape_on_the_gpu() {
    if gpu_tests_skipped() {
        return;
    }
    every_dtype_at_a_fixed_shape(&mut pair()).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn every_dtype_at_a_fixed_shape_on_the_cpu() {
    on_cpu_levels(every_dtype_at_a_fixed_shape).unwrap_or_else(|e| panic!("{e}"));
}

/// Offsets of millions of bytes (id · row_bytes) and the I2_S trailer after 70000 rows.
fn rows_far_into_a_long_table<E: Engine>(pair: &mut Pair<E>) -> Result<(), String> {
    for (k, dtype) in [DType::F16, DType::Q8_0, DType::I2_S, DType::TQ1_0].into_iter().enumerate() {
        let cols = if dtype.block_len() == 256 { 256 } else { 128 };
        let vocab = 70_000;
        let bytes = pseudo_random_bytes(dtype.tensor_bytes(vocab, cols).expect("whole blocks"), 100 + k as u64);
        check(pair, &table(dtype, vocab, cols, bytes, 1.5), &[69_999, 0, 65_536, 12_345])?;
    }
    Ok(())
}

#[test]
fn rows_far_into_a_long_table_on_the_gpu() {
    if gpu_tests_skipped() {
        return;
    }
    rows_far_into_a_long_table(&mut pair()).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn rows_far_into_a_long_table_on_the_cpu() {
    on_cpu_levels(rows_far_into_a_long_table).unwrap_or_else(|e| panic!("{e}"));
}

/// Runs EMBED on `engine` alone (the reference engine rejects ids past the vocabulary,
/// which `Pair::run` would take for a failure) and returns the output or the error.
/// `tag` keeps the names unique (registry names stay taken after FREE).
fn embed_on(engine: &mut impl Engine, tag: &str, table: HostTensor, ids: &[u32]) -> Result<Vec<f32>, ExecError> {
    let cols = table.shape().cols();
    let dtype = table.dtype().name();
    let name = |n: &str| format!("{tag}.{dtype}.{n}");
    let t = engine.memory_mut().insert(&name("table"), table).expect("insert");
    let i = engine.memory_mut().insert(&name("ids"), ids_tensor(ids)).expect("insert");
    let mut b = ProgramBuilder::new(&name("embed"), engine.memory_mut());
    let out = b.alloc(&name("out"), DType::F32, &[ids.len(), cols]).expect("alloc");
    b.embed(out, t, i).expect("embed");
    let program = b.finish();
    let got = engine.execute(&program, &[]).and_then(|()| engine.read(out)).map(|bytes| f32s(&bytes));
    let mut b = ProgramBuilder::new(&name("free"), engine.memory_mut());
    for id in [t, i, out] {
        b.free(id).expect("free");
    }
    let free = b.finish();
    engine.execute(&free, &[]).expect("free");
    got
}

#[test]
fn ids_past_the_vocabulary_give_zero_rows_on_the_gpu() {
    if gpu_tests_skipped() {
        return;
    }
    // The reference engine returns an error for these ids; the GPU kernel cannot, and must
    // not read past the table: it writes zeros (the runtime validates ids before writing).
    // I2_S makes a missing check visible even on devices with robust buffer access (where a
    // read past the buffer gives zeros): id == vocab would decode the scale trailer, which
    // lies inside the buffer, as nonzero codes.
    let (vocab, cols) = (3, 128);
    let ids = [2, 3, u32::MAX, 0, 1_000_000, 4];
    for dtype in [DType::F32, DType::I2_S] {
        let mut bytes = pseudo_random_bytes(dtype.tensor_bytes(vocab, cols).expect("whole blocks"), 7);
        bytes.iter_mut().take(vocab * cols * 4).for_each(|b| *b &= 0x3f); // finite F32 values
        bytes[vocab * cols / 4..].fill(0xaa); // I2_S trailer padding: read as codes, 2 (+1)
        let tbl = table(dtype, vocab, cols, bytes, 1.5);
        let want = purebee_memory::quant::dequantize(&tbl).expect("decodes");
        let got = embed_on(&mut pair().engine, "oob", tbl, &ids).unwrap_or_else(|e| panic!("{}: {e}", dtype.name()));
        for (r, &id) in ids.iter().enumerate() {
            let row = &got[r * cols..(r + 1) * cols];
            if (id as usize) < vocab {
                let expected = &want[id as usize * cols..(id as usize + 1) * cols];
                assert_eq!(row, expected, "{} row {r} (id {id})", dtype.name());
            } else {
                assert!(
                    row.iter().all(|&v| v.to_bits() == 0),
                    "{} row {r} (id {id}) must be zeros: {row:?}",
                    dtype.name()
                );
            }
        }
    }
}

#[test]
fn ids_past_the_vocabulary_fail_on_the_cpu_as_on_the_reference() {
    // The CPU engine returns the reference engine's error (naming the ids tensor, the row,
    // the id and the vocabulary), whatever the table's dtype; ids in range then still work.
    let (vocab, cols) = (3, 256);
    for level in cpu_levels() {
        let Some(mut p) = cpu_pair(level) else { continue };
        for (k, dtype) in DTYPES.into_iter().enumerate() {
            let bytes = pseudo_random_bytes(dtype.tensor_bytes(vocab, cols).expect("whole blocks"), 30 + k as u64);
            let tbl = table(dtype, vocab, cols, bytes, 1.5);
            for (j, ids) in [vec![2u32, 3], vec![u32::MAX], vec![0, 1, 1_000_000]].into_iter().enumerate() {
                let tag = format!("oob{j}");
                let got = embed_on(&mut p.engine, &tag, tbl.clone(), &ids);
                let want = embed_on(&mut p.reference, &tag, tbl.clone(), &ids);
                assert!(
                    matches!(want, Err(ExecError::TokenOutOfRange { .. })),
                    "{} ids {ids:?}: the reference gave {want:?}",
                    dtype.name()
                );
                assert_eq!(got, want, "cpu engine, {level} kernels: {} ids {ids:?}", dtype.name());
            }
            check(&mut p, &tbl, &[2, 0, 1]).unwrap_or_else(|e| panic!("cpu engine, {level} kernels: {e}"));
        }
    }
}
