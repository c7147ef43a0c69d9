//! KV_WRITE: the GPU engine and the CPU engine (every SIMD path this CPU runs) vs the
//! reference engine, bit for bit.
//!
//! KV_WRITE is a copy, so the caches must agree exactly, bit for bit: the data are random
//! 32-bit patterns (NaNs with payloads, infinities, subnormals included), and the whole cache
//! is compared after each run, so a write to a wrong row or past the rows written shows. One
//! compiled program runs at several positions (a run-time parameter), each run adding rows
//! to the same cache. Widths are not multiples of the 256-thread workgroup.
//!
//! Into an F16 cache KV_WRITE rounds (to nearest, ties to even, NaN to the ISA's quiet
//! NaN), and that too must agree bit for bit: the same random patterns (every class of f32,
//! values past f16's range and below its subnormals), half of them made exact ties between
//! two f16 values (the 13 bits f16 drops set to `0x1000`), so that ties to even are tested
//! in every case rather than once in 8192.

use proptest::prelude::*;
use purebee_isa::{Engine, ExecError, ParamValue, ProgramBuilder, U32Arg};
use purebee_memory::{DType, HostTensor, Shape};
use purebee_tests::differential::{cpu_levels, cpu_pair, gpu_tests_skipped, on_cpu_levels, pair, u32s, Pair};

fn matrix(rows: usize, cols: usize, bits: Vec<u32>) -> HostTensor {
    let values = bits.into_iter().map(f32::from_bits).collect();
    HostTensor::from_f32("x", Shape::matrix(rows, cols).expect("shape"), values).expect("sizes agree")
}

/// An F16 `[rows, cols]` matrix of the low halves of `bits`.
fn matrix_f16(rows: usize, cols: usize, bits: &[u32]) -> HostTensor {
    let bytes: Vec<u8> = bits.iter().flat_map(|&b| (b as u16).to_le_bytes()).collect();
    HostTensor::from_bytes("x", DType::F16, Shape::matrix(rows, cols).expect("shape"), &bytes).expect("sizes agree")
}

/// Half of `bits` made exact ties between two f16 values (for an F16 cache).
fn with_ties(bits: &[u32]) -> Vec<u32> {
    bits.iter().enumerate().map(|(i, &b)| if i % 2 == 0 { b & !0x1fff | 0x1000 } else { b }).collect()
}

/// Writes `src` (`[n, w]`) into a `[n_ctx, w]` cache holding `init`, once per position of
/// `positions`, with one compiled program on both engines of `pair`; compares the caches
/// bit for bit after each run. Over an F32 cache, and over an F16 one (its initial values
/// the low halves of `init`, `src` with ties).
fn check<E: Engine>(
    pair: &mut Pair<E>,
    n: usize,
    w: usize,
    n_ctx: usize,
    src: &[u32],
    init: &[u32],
    positions: &[u32],
) -> Result<(), String> {
    check_dtype(pair, DType::F32, n, w, n_ctx, src, init, positions)?;
    check_dtype(pair, DType::F16, n, w, n_ctx, &with_ties(src), init, positions)
}

#[allow(clippy::too_many_arguments)] // the case's shape and data
fn check_dtype<E: Engine>(
    pair: &mut Pair<E>,
    dtype: DType,
    n: usize,
    w: usize,
    n_ctx: usize,
    src: &[u32],
    init: &[u32],
    positions: &[u32],
) -> Result<(), String> {
    let cache = match dtype {
        DType::F16 => matrix_f16(n_ctx, w, init),
        _ => matrix(n_ctx, w, init.to_vec()),
    };
    let size = if dtype == DType::F16 { 2 } else { 4 };
    let inputs = [("src", matrix(n, w, src.to_vec())), ("cache", cache)];
    let runs: Vec<Vec<ParamValue>> = positions.iter().map(|&p| vec![ParamValue::U32(p)]).collect();
    let results = pair.run_each(&inputs, &runs, |b: &mut ProgramBuilder, _, ids| {
        let pos = b.param_u32("pos")?;
        b.kv_write(ids[1], ids[0], pos)?;
        Ok(vec![ids[1]])
    });
    for (run, (got, reference)) in results.iter().enumerate() {
        let elements = |b: &[u8]| -> Vec<u32> {
            b.chunks_exact(size).map(|c| c.iter().rev().fold(0u32, |a, &x| a << 8 | x as u32)).collect()
        };
        let (got, want) = (elements(&got[0]), elements(&reference[0]));
        if got.len() != want.len() {
            return Err(format!("{} engine: {} elements, expected {}", pair.engine.name(), got.len(), want.len()));
        }
        if let Some(i) = got.iter().zip(&want).position(|(g, w)| g != w) {
            let r = i / w;
            let source = r
                .checked_sub(positions[run] as usize)
                .filter(|&sr| sr < n)
                .map(|sr| format!(" (source {:#010x})", src[sr * w + i % w]))
                .unwrap_or_default();
            return Err(format!(
                "{} engine, {dtype} cache: n={n} w={w} n_ctx={n_ctx} run {run} (pos {}): index {i} (row {r}, col {}): \
                 got {:#x}, expected {:#x}{source}",
                pair.engine.name(),
                positions[run],
                i % w,
                got[i],
                want[i],
            ));
        }
    }
    Ok(())
}

/// A case: the shape, the source and initial cache bits, and up to four positions.
fn case() -> impl Strategy<Value = (usize, usize, usize, Vec<u32>, Vec<u32>, Vec<u32>)> {
    (1usize..=12, 1usize..=700, 0usize..=40).prop_flat_map(|(n, w, spare)| {
        let n_ctx = n + spare;
        (
            Just(n),
            Just(w),
            Just(n_ctx),
            prop::collection::vec(any::<u32>(), n * w),
            prop::collection::vec(any::<u32>(), n_ctx * w),
            prop::collection::vec(0..=(spare as u32), 1..=4),
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn kv_write_matches_the_reference_bit_for_bit((n, w, n_ctx, src, init, positions) in case()) {
        if gpu_tests_skipped() { return Ok(()); }
        check(&mut pair(), n, w, n_ctx, &src, &init, &positions).map_err(TestCaseError::fail)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 192, ..ProptestConfig::default() })]
    #[test]
    fn cpu_kv_write_matches_the_reference_bit_for_bit((n, w, n_ctx, src, init, positions) in case()) {
        on_cpu_levels(|p| check(p, n, w, n_ctx, &src, &init, &positions)).map_err(TestCaseError::fail)?;
    }
}

/// Deterministic bits for the pinned shapes (SplitMix64).
fn bits(len: usize, seed: u64) -> Vec<u32> {
    let mut rng = purebee_tests::rng::SplitMix64(seed);
    (0..len).map(|_| rng.bits32()).collect()
}

/// 5 kv heads of 128: 640 floats per row, 4096 rows.
fn decode_row_of_the_2b_model<E: Engine>(pair: &mut Pair<E>) -> Result<(), String> {
    let (n, w, n_ctx) = (1, 640, 4096);
    check(pair, n, w, n_ctx, &bits(n * w, 1), &bits(n_ctx * w, 2), &[0, 4095, 2048])
}

#[test]
fn decode_row_of_the_2b_model_at_the_first_and_last_positions() {
    if gpu_tests_skipped() {
        return;
    }
    decode_row_of_the_2b_model(&mut pair()).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn decode_row_of_the_2b_model_at_the_first_and_last_positions_on_the_cpu() {
    on_cpu_levels(decode_row_of_the_2b_model).unwrap_or_else(|e| panic!("{e}"));
}

fn prefill_of_512_rows<E: Engine>(pair: &mut Pair<E>) -> Result<(), String> {
    let (n, w, n_ctx) = (512, 192, 1024);
    check(pair, n, w, n_ctx, &bits(n * w, 3), &bits(n_ctx * w, 4), &[512, 0, 100])
}

#[test]
fn prefill_of_512_rows_at_the_end_of_the_cache() {
    if gpu_tests_skipped() {
        return;
    }
    prefill_of_512_rows(&mut pair()).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn prefill_of_512_rows_at_the_end_of_the_cache_on_the_cpu() {
    on_cpu_levels(prefill_of_512_rows).unwrap_or_else(|e| panic!("{e}"));
}

/// Runs a KV_WRITE of 2 rows into an 8-row cache at positions 7, 8 and u32::MAX (a run-time
/// parameter) and at 7 (a constant) on `e`, checks that each is a context overflow that
/// leaves the cache as it was, then writes at 6. Returns the errors, in order.
fn a_write_past_the_cache(e: &mut impl Engine) -> Vec<ExecError> {
    let init = bits(8 * 3, 5);
    let src = e.memory_mut().insert("overflow.src", matrix(2, 3, bits(6, 6))).expect("unique");
    let cache = e.memory_mut().insert("overflow.cache", matrix(8, 3, init.clone())).expect("unique");
    let mut b = ProgramBuilder::new("overflow", e.memory_mut());
    let pos = b.param_u32("pos").expect("param");
    b.kv_write(cache, src, pos).expect("valid");
    let program = b.finish();
    let mut errors = Vec::new();
    for p in [7, 8, u32::MAX] {
        match e.execute(&program, &[ParamValue::U32(p)]) {
            Err(err @ ExecError::ContextOverflow { .. }) => errors.push(err),
            other => panic!("{}: pos {p}: expected a context overflow, got {other:?}", e.name()),
        }
    }
    // A constant position is checked the same way.
    let mut b = ProgramBuilder::new("overflow-const", e.memory_mut());
    b.kv_write(cache, src, U32Arg::Const(7)).expect("valid");
    let constant = b.finish();
    match e.execute(&constant, &[]) {
        Err(err @ ExecError::ContextOverflow { .. }) => errors.push(err),
        other => panic!("{}: constant pos 7: expected a context overflow, got {other:?}", e.name()),
    }
    assert_eq!(u32s(&e.read(cache).expect("read")), init, "{}: the cache changed", e.name());
    e.execute(&program, &[ParamValue::U32(6)]).expect("pos 6 fits");
    let after = u32s(&e.read(cache).expect("read"));
    assert_eq!(after[..18], init[..18], "{}", e.name());
    assert_eq!(after[18..], bits(6, 6)[..], "{}", e.name());
    errors
}

#[test]
fn a_write_past_the_cache_is_refused_and_changes_nothing() {
    if gpu_tests_skipped() {
        return;
    }
    a_write_past_the_cache(&mut pair().engine);
}

#[test]
fn a_write_past_the_cache_is_refused_and_changes_nothing_on_the_cpu() {
    // The same errors as the reference engine's, value for value.
    for level in cpu_levels() {
        let Some(mut p) = cpu_pair(level) else { continue };
        let got = a_write_past_the_cache(&mut p.engine);
        let want = a_write_past_the_cache(&mut p.reference);
        assert_eq!(got, want, "cpu engine, {level} kernels");
    }
}
