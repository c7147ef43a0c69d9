//! LINEAR: the GPU engine and the CPU engine (every SIMD path this CPU runs) vs the
//! reference engine, every weight dtype (F32, F16, BF16, Q4_0, Q4_1, Q8_0, TQ1_0, TQ2_0,
//! I2_S); on the GPU every kernel (`gemv` for one token, `tiled` for more, `tiled_int8`
//! for more with int8-block activations against Q4_0, Q4_1 and Q8_0) and both reduction
//! paths (subgroups, and the portable engine of `portable_pair`); over random
//! shapes (row counts, token counts and plain-dtype row lengths that are not multiples of
//! 8, 32, 64 or 256; one token; over 65535 rows) and random data.
//!
//! **Tolerance.** The GPU decodes every weight exactly (f16/bf16 widening and `code · d` are
//! exact; Q4_1's `code · d + m` has an exact product, so it rounds once, fused or not), so
//! only the summation differs: the GPU sums the k products in f32 in its own order, the
//! reference in f64 in index order with one rounding at the end. For any order, a float
//! dot product of k terms satisfies |ŝ − s| ≤ γ_k · Σ|x_i·w_i| with γ_k = k·u / (1 − k·u),
//! u = 2⁻²⁴ (Higham, *Accuracy and Stability of Numerical Algorithms*, §3.1; a fused
//! multiply-add only removes roundings). The reference is within u·|s| + γ_k(f64)·Σ|x·w|
//! of s. So each output must satisfy
//!     |gpu − ref| ≤ γ_{k+2} · Σ_i |x_i · w_i| + u · |ref|,
//! computed per output from the data (the extra 2 in γ covers the f64 sum's error, about
//! k·2⁻⁵³·Σ|x·w|). Integer-valued data whose every partial sum is below 2²⁴ is summed exactly
//! in any order, so `integer_data_is_exact` compares exactly.
//!
//! The CPU engine is held to the same bound: it decodes weights exactly too (and converts
//! nothing but the f16/bf16 widening) and sums the k products in f32 in its own order.
//!
//! **Int8-block activations** (`LinearActivations::Int8Blocks`). Every engine must round x
//! to the same int8 codes `q_i` (checked exactly by `int8_rounding_is_exact*`, on ties and
//! on scales that are powers of two, where every output is an exact integer); then the
//! output is `Σ_i x̂_i · w_i` with `x̂_i = q_i / s_b`, computed as the reference does in f64.
//! An engine may form it as the f32 kernels' dot product of a rounded `x̂` (one rounding
//! more per term: the CPU's `q / s_b` and the GPU's long division are correctly rounded), or per block as
//! llama.cpp does, `(d · Σ c_i q_i + m · Σ q_i) · (1 / s_b)`: three roundings per term
//! (`1/s`, `d·(1/s)`, the product) on exact integer sums, with Q4_1's weight taken as the
//! exact `c·d + m` rather than the decoded (once rounded) one, and the block split into
//! `d·Σcq` and a constant term whose magnitudes can exceed `|Σ q·w|`: Q4_0's
//! `d·Σ c q − 8d·Σ q` (≤ Σ|q|·|d|·(|c − 8| + 16)) and Q4_1's (≤ Σ|q|·(|w| + 2|m|)). So the
//! bound is γ_{k+6} times `Σ_i |x̂_i| · (|w_i| + o_b)`, `o_b` being `16|d|` (Q4_0), `2|m|`
//! (Q4_1) or 0, plus `u · |ref|`: six roundings above the f32 bound's two cover the worst
//! of these.

use proptest::prelude::*;
use purebee_isa::ops::{quantize_blocks, LinearActivations, LINEAR_ACT_BLOCK};
use purebee_isa::{DType, Engine};
use purebee_memory::quant::QuantMatrix;
use purebee_memory::{HostTensor, Shape};
use purebee_tests::differential::{f32s, gpu_tests_skipped, on_cpu_levels, pair, portable_pair, Pair};
use purebee_tests::rng::SplitMix64;

/// The dtypes a weight or table may have (EMBED and LINEAR take them all).
const DTYPES: [DType; 9] = purebee_tests::WEIGHT_DTYPES;

const U: f64 = 1.0 / (1u64 << 24) as f64;

/// What the weights and activations hold.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Data {
    /// Random finite values of varied magnitude (f16 subnormals included).
    Random,
    /// Small integers, and weights that decode to integers: every sum is exact.
    Integer,
}

/// An f16 bit pattern: `Random`, a finite value below 8 in magnitude (about one in eight
/// subnormal); `Integer`, an integer in −8..=8.
fn f16_bits(rng: &mut SplitMix64, data: Data) -> u16 {
    match data {
        Data::Random => {
            let exp = if rng.below(8) == 0 { 0 } else { 1 + rng.below(17) as u16 };
            ((rng.below(2) as u16) << 15) | (exp << 10) | rng.below(1024) as u16
        }
        Data::Integer => f16_exact(rng.below(17) as f32 - 8.0),
    }
}

/// The f16 bits of `v`, which must be a normal f16 value or zero (exactly representable).
fn f16_exact(v: f32) -> u16 {
    if v == 0.0 {
        return 0;
    }
    let b = v.to_bits();
    let exp = ((b >> 23) & 0xff) as i32 - 127 + 15;
    assert!((1..31).contains(&exp) && b & 0x1fff == 0, "{v} is not an exact normal f16");
    (((b >> 16) & 0x8000) | ((exp as u32) << 10) | ((b >> 13) & 0x3ff)) as u16
}

/// A block scale `d` as f16: `Random`, ±[2⁻¹⁰, 2); `Integer`, 1 (so codes stay integers).
fn scale_f16(rng: &mut SplitMix64, data: Data) -> [u8; 2] {
    let bits = match data {
        Data::Random => ((rng.below(2) as u16) << 15) | ((5 + rng.below(11) as u16) << 10) | rng.below(1024) as u16,
        Data::Integer => f16_exact(1.0),
    };
    bits.to_le_bytes()
}

/// The bytes of an `[m, k]` weight of `dtype`, random but finite.
fn weight_bytes(dtype: DType, m: usize, k: usize, rng: &mut SplitMix64, data: Data) -> Vec<u8> {
    let n = m * k;
    let mut out = Vec::with_capacity(dtype.tensor_bytes(m, k).unwrap_or(0));
    match dtype {
        DType::F32 => {
            for _ in 0..n {
                let v = match data {
                    Data::Random => (rng.range(-1.0, 1.0) * 2f64.powf(rng.range(-8.0, 3.0))) as f32,
                    Data::Integer => rng.below(17) as f32 - 8.0,
                };
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
        DType::F16 => (0..n).for_each(|_| out.extend_from_slice(&f16_bits(rng, data).to_le_bytes())),
        DType::BF16 => {
            for _ in 0..n {
                let v = match data {
                    Data::Random => {
                        let exp = 118 + rng.below(12) as u16; // 2^-9 .. 2^3
                        ((rng.below(2) as u16) << 15) | (exp << 7) | rng.below(128) as u16
                    }
                    Data::Integer => (((rng.below(17) as f32) - 8.0).to_bits() >> 16) as u16,
                };
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
        DType::Q4_0 | DType::Q4_1 | DType::Q8_0 | DType::TQ1_0 | DType::TQ2_0 => {
            let (len, bytes) = (dtype.block_len(), dtype.block_bytes());
            for _ in 0..n / len {
                let mut block: Vec<u8> = (0..bytes).map(|_| rng.byte()).collect();
                match dtype {
                    // d first; Q4_1: d then m (an integer for Integer data).
                    DType::Q4_0 | DType::Q8_0 => block[..2].copy_from_slice(&scale_f16(rng, data)),
                    DType::Q4_1 => {
                        block[..2].copy_from_slice(&scale_f16(rng, data));
                        block[2..4].copy_from_slice(&f16_bits(rng, data).to_le_bytes());
                    }
                    // Ternary: d last.
                    _ => block[bytes - 2..].copy_from_slice(&scale_f16(rng, data)),
                }
                out.extend_from_slice(&block);
            }
        }
        DType::I2_S => {
            out.extend((0..n / 4).map(|_| rng.byte()));
            let s = match data {
                Data::Random => rng.range(-2.0, 2.0) as f32,
                Data::Integer => 1.0,
            };
            for _ in 0..8 {
                out.extend_from_slice(&s.to_le_bytes());
            }
        }
        other => panic!("no LINEAR weights of {other}"),
    }
    out
}

fn activations(n: usize, k: usize, rng: &mut SplitMix64, data: Data) -> Vec<f32> {
    (0..n * k)
        .map(|_| match data {
            Data::Random => (rng.range(-1.0, 1.0) * 2f64.powf(rng.range(-6.0, 2.0))) as f32,
            Data::Integer => rng.below(17) as f32 - 8.0,
        })
        .collect()
}

/// `x̂` of an `[n, k]` activation matrix: `x` itself, or its int8-block rounding `q / s_b`
/// computed in f64.
fn rounded_activations(x: &[f32], n: usize, k: usize, acts: LinearActivations) -> Vec<f64> {
    match acts {
        LinearActivations::F32 => x.iter().map(|&v| v as f64).collect(),
        LinearActivations::Int8Blocks => {
            let mut out = Vec::with_capacity(n * k);
            let (mut q, mut s) = (vec![0i8; k], vec![0f32; k.div_ceil(LINEAR_ACT_BLOCK)]);
            for row in x.chunks_exact(k.max(1)).take(n) {
                quantize_blocks(row, &mut q, &mut s);
                out.extend(q.iter().enumerate().map(|(i, &qi)| qi as f64 / s[i / LINEAR_ACT_BLOCK] as f64));
            }
            out
        }
    }
}

/// The `o_b` of the int8-block bound (module doc) for element `i` of weight row `j`.
fn block_offset(dtype: DType, wbytes: &[u8], k: usize, j: usize, i: usize) -> f64 {
    let f16 = |at: usize| half::f16::from_le_bytes([wbytes[at], wbytes[at + 1]]).to_f64().abs();
    let block = |bytes: usize| (j * k + i) / 32 * bytes;
    match dtype {
        DType::Q4_0 => 16.0 * f16(block(18)),
        DType::Q4_1 => 2.0 * f16(block(20) + 2),
        _ => 0.0,
    }
}

/// One LINEAR on both engines of `pair`; checks every output against the tolerance above
/// (or exactly for `Data::Integer`).
#[allow(clippy::too_many_arguments)] // one case's every parameter
fn check<E: Engine>(
    pair: &mut Pair<E>,
    dtype: DType,
    n: usize,
    m: usize,
    k: usize,
    seed: u64,
    data: Data,
    acts: LinearActivations,
) -> Result<(), String> {
    let mut rng = SplitMix64(seed);
    let wbytes = weight_bytes(dtype, m, k, &mut rng, data);
    let x = activations(n, k, &mut rng, data);
    let shape = |r, c| Shape::matrix(r, c).expect("valid shape");
    let inputs = [
        ("x", HostTensor::from_f32("x", shape(n, k), x.clone()).expect("sizes agree")),
        ("w", HostTensor::from_bytes("w", dtype, shape(m, k), &wbytes).expect("sizes agree")),
    ];
    let (got, reference) = pair.run(&inputs, &[], |b, name, ids| {
        let out = b.alloc(&name("out"), DType::F32, &[n, m])?;
        b.linear_with(out, ids[0], ids[1], acts)?;
        Ok(vec![out])
    });
    let (got, want) = (f32s(&got[0]), f32s(&reference[0]));
    let what = format!("{} engine: LINEAR {dtype} n={n} m={m} k={k} seed={seed} {data:?} {acts:?}", pair.engine.name());
    let xh = rounded_activations(&x, n, k, acts);
    // Roundings above the f32 bound's (module doc).
    let extra = match acts {
        LinearActivations::F32 => 2,
        LinearActivations::Int8Blocks => 6,
    };
    if got.len() != want.len() {
        return Err(format!("{what}: {} outputs, expected {}", got.len(), want.len()));
    }
    // Σ_i |x_i · w_i| per output, from the reference decoder's weights.
    let wq = QuantMatrix::new(dtype, &wbytes, m, k).map_err(|e| e.to_string())?;
    let mut row = vec![0f32; k];
    let gamma = |terms: usize| terms as f64 * U / (1.0 - terms as f64 * U);
    for j in 0..m {
        wq.dequantize_row(j, &mut row).map_err(|e| e.to_string())?;
        for t in 0..n {
            let i = t * m + j;
            let (g, w) = (got[i], want[i]);
            let diff = (g as f64 - w as f64).abs();
            let bound = match data {
                Data::Integer => 0.0,
                Data::Random => {
                    let sum_abs: f64 = xh[t * k..(t + 1) * k]
                        .iter()
                        .zip(&row)
                        .enumerate()
                        .map(|(i, (&a, &b))| a.abs() * ((b as f64).abs() + block_offset(dtype, &wbytes, k, j, i)))
                        .sum();
                    gamma(k + extra) * sum_abs + U * (w as f64).abs()
                }
            };
            let within = diff <= bound; // false for NaN too
            if !within {
                return Err(format!(
                    "{what}: token {t}, row {j} (index {i}): got {g}, expected {w}, difference {diff:e}, bound {bound:e}"
                ));
            }
        }
    }
    Ok(())
}

fn subgroups(pair: &Pair) -> bool {
    pair.engine.context().capabilities().subgroups
}

/// Row lengths: any for plain dtypes, whole blocks for the others; one case in four longer
/// than `GEMV_ROWS_MAX_K` (2048), where one token takes `gemv` instead of `gemv_rows`.
fn k_for(dtype: DType) -> BoxedStrategy<usize> {
    let (short, long) = match dtype.block_len() {
        1 => ((1usize..=300).boxed(), (2049usize..=2300).boxed()),
        32 => ((1usize..=12).prop_map(|b| 32 * b).boxed(), (65usize..=72).prop_map(|b| 32 * b).boxed()),
        128 => ((1usize..=5).prop_map(|b| 128 * b).boxed(), (17usize..=18).prop_map(|b| 128 * b).boxed()),
        _ => ((1usize..=3).prop_map(|b| 256 * b).boxed(), Just(2304usize).boxed()),
    };
    prop_oneof![3 => short, 1 => long].boxed()
}

/// A row length of `dtype` above 2048 (the `gemv` kernel for one token).
fn long_k(dtype: DType) -> usize {
    2048 + dtype.block_len().max(8) * if dtype.block_len() == 256 { 1 } else { 3 }
}

/// (dtype, n, m, k, seed, portable): one token half of the time (the GEMV), else 2..=70
/// tokens (the tiled kernel, over more than two 32-token tiles).
fn case() -> impl Strategy<Value = (DType, usize, usize, usize, u64, bool)> {
    (0..DTYPES.len()).prop_flat_map(|d| {
        let dtype = DTYPES[d];
        let n = prop_oneof![Just(1usize), 2usize..=70];
        (Just(dtype), n, 1usize..=150, k_for(dtype), any::<u64>(), any::<bool>())
    })
}

/// The case on the GPU engine, subgroups or portable.
fn run_case(dtype: DType, n: usize, m: usize, k: usize, seed: u64, portable: bool, data: Data) -> Result<(), String> {
    run_case_with(dtype, n, m, k, seed, portable, data, LinearActivations::F32)
}

#[allow(clippy::too_many_arguments)] // one case's every parameter
fn run_case_with(
    dtype: DType,
    n: usize,
    m: usize,
    k: usize,
    seed: u64,
    portable: bool,
    data: Data,
    acts: LinearActivations,
) -> Result<(), String> {
    let mut pair = if portable { portable_pair() } else { pair() };
    let subgroups = subgroups(&pair);
    check(&mut pair, dtype, n, m, k, seed, data, acts).map_err(|e| format!("subgroups={subgroups}: {e}"))
}

/// The case on the CPU engine, every SIMD path.
fn run_cpu_case(dtype: DType, n: usize, m: usize, k: usize, seed: u64, data: Data) -> Result<(), String> {
    on_cpu_levels(|p| check(p, dtype, n, m, k, seed, data, LinearActivations::F32))
}

/// The case with int8-block activations on the CPU engine, every SIMD path.
fn run_cpu_int8_case(dtype: DType, n: usize, m: usize, k: usize, seed: u64) -> Result<(), String> {
    on_cpu_levels(|p| check(p, dtype, n, m, k, seed, Data::Random, LinearActivations::Int8Blocks))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn linear_matches_the_reference((dtype, n, m, k, seed, portable) in case()) {
        if gpu_tests_skipped() { return Ok(()); }
        run_case(dtype, n, m, k, seed, portable, Data::Random).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn integer_data_is_exact((dtype, n, m, k, seed, portable) in case()) {
        if gpu_tests_skipped() { return Ok(()); }
        run_case(dtype, n, m, k, seed, portable, Data::Integer).map_err(TestCaseError::fail)?;
    }
}

// The same cases on the CPU engine (the GPU's `portable` flag is not used).
proptest! {
    #![proptest_config(ProptestConfig { cases: purebee_testenv::proptest_cases(192), ..ProptestConfig::default() })]

    #[test]
    fn cpu_linear_matches_the_reference((dtype, n, m, k, seed, _portable) in case()) {
        run_cpu_case(dtype, n, m, k, seed, Data::Random).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn cpu_integer_data_is_exact((dtype, n, m, k, seed, _portable) in case()) {
        run_cpu_case(dtype, n, m, k, seed, Data::Integer).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn cpu_int8_activations_match_the_reference((dtype, n, m, k, seed, _portable) in case()) {
        run_cpu_int8_case(dtype, n, m, k, seed).map_err(TestCaseError::fail)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn int8_activations_match_the_reference((dtype, n, m, k, seed, portable) in case()) {
        if gpu_tests_skipped() { return Ok(()); }
        run_case_with(dtype, n, m, k, seed, portable, Data::Random, LinearActivations::Int8Blocks)
            .map_err(TestCaseError::fail)?;
    }
}

/// Activations whose int8-block rounding is known: block `b` of each row holds multiples of
/// `2^e_b / 2` up to `±127 · 2^e_b` (so `s_b = 2^−e_b` exactly), half of them ties
/// (`(c + 1/2) · 2^e_b`), and rows of an identity weight (F32, any `k`; Q8_0 with `d = 1`).
/// Every output is then `q_i / s_b` exactly, whatever the summation order: equality proves
/// the engines round to the same codes, ties to even included.
fn check_int8_rounding<E: Engine>(
    pair: &mut Pair<E>,
    dtype: DType,
    n: usize,
    k: usize,
    seed: u64,
) -> Result<(), String> {
    let mut rng = SplitMix64(seed);
    let mut x = vec![0f32; n * k];
    for row in x.chunks_exact_mut(k) {
        for block in row.chunks_mut(LINEAR_ACT_BLOCK) {
            let scale = 2f32.powi(rng.below(20) as i32 - 10);
            for v in block.iter_mut() {
                let half_steps = rng.below(509) as f32 - 254.0; // −127 ..= 127 in steps of 1/2
                *v = half_steps / 2.0 * scale;
            }
            let at = rng.below(block.len() as u64) as usize;
            block[at] = 127.0 * scale * rng.sign(); // the block's maximum
        }
    }
    let mut wbytes = Vec::new();
    for j in 0..k {
        match dtype {
            DType::F32 => (0..k).for_each(|i| wbytes.extend_from_slice(&f32::from(u8::from(i == j)).to_le_bytes())),
            _ => {
                for b in 0..k / 32 {
                    wbytes.extend_from_slice(&half::f16::from_f32(1.0).to_le_bytes());
                    wbytes.extend((0..32).map(|i| u8::from(b * 32 + i == j)));
                }
            }
        }
    }
    let shape = |r, c| Shape::matrix(r, c).expect("valid shape");
    let inputs = [
        ("x", HostTensor::from_f32("x", shape(n, k), x).expect("sizes agree")),
        ("w", HostTensor::from_bytes("w", dtype, shape(k, k), &wbytes).expect("sizes agree")),
    ];
    let (got, reference) = pair.run(&inputs, &[], |b, name, ids| {
        let out = b.alloc(&name("out"), DType::F32, &[n, k])?;
        b.linear_with(out, ids[0], ids[1], LinearActivations::Int8Blocks)?;
        Ok(vec![out])
    });
    let (got, want) = (f32s(&got[0]), f32s(&reference[0]));
    match got.iter().zip(&want).position(|(g, w)| g.to_bits() != w.to_bits()) {
        None => Ok(()),
        Some(i) => Err(format!(
            "{} engine, {dtype} identity n={n} k={k} seed={seed}: output {i} is {}, the reference's {}",
            pair.engine.name(),
            got[i],
            want[i]
        )),
    }
}

#[test]
fn int8_rounding_is_exact_on_the_cpu() {
    for (dtype, n, k) in [(DType::F32, 1, 70), (DType::F32, 5, 33), (DType::Q8_0, 1, 64), (DType::Q8_0, 3, 96)] {
        on_cpu_levels(|p| check_int8_rounding(p, dtype, n, k, 11 + k as u64)).unwrap_or_else(|e| panic!("{e}"));
    }
}

#[test]
fn int8_rounding_is_exact_on_the_gpu() {
    if gpu_tests_skipped() {
        return;
    }
    for (dtype, n, k) in [(DType::F32, 1, 70), (DType::F32, 5, 33), (DType::Q8_0, 1, 64), (DType::Q8_0, 3, 96)] {
        for portable in [false, true] {
            let mut p = if portable { portable_pair() } else { pair() };
            check_int8_rounding(&mut p, dtype, n, k, 11 + k as u64).unwrap_or_else(|e| panic!("{e}"));
        }
    }
}

#[test]
fn every_dtype_and_kernel_on_both_reduction_paths() {
    if gpu_tests_skipped() {
        return;
    }
    for dtype in DTYPES {
        let short_k = dtype.block_len().max(8) * 3;
        for (n, k) in [(1, short_k), (1, long_k(dtype)), (33, short_k)] {
            for portable in [false, true] {
                for data in [Data::Random, Data::Integer] {
                    run_case(dtype, n, 67, k, 42 + n as u64, portable, data).unwrap_or_else(|e| panic!("{e}"));
                }
            }
        }
    }
}

#[test]
fn every_dtype_and_kernel_on_the_cpu() {
    for dtype in DTYPES {
        let short_k = dtype.block_len().max(8) * 3;
        for (n, k) in [(1, short_k), (1, long_k(dtype)), (33, short_k)] {
            for data in [Data::Random, Data::Integer] {
                run_cpu_case(dtype, n, 67, k, 42 + n as u64, data).unwrap_or_else(|e| panic!("{e}"));
            }
        }
    }
}

#[test]
fn the_two_engines_cover_both_reduction_paths() {
    if gpu_tests_skipped() {
        return;
    }
    assert!(!subgroups(&portable_pair()), "the portable engine must not use subgroups");
    if !subgroups(&pair()) {
        eprintln!("this adapter has no subgroups: only the portable kernels were tested");
    }
}

#[test]
fn lm_head_shape_with_more_rows_than_one_grid_dimension() {
    // An F16 LM head's GEMV has one workgroup per vocabulary row: 65537 rows need a 2-D grid.
    if gpu_tests_skipped() {
        return;
    }
    for portable in [false, true] {
        run_case(DType::F16, 1, 65_537, 24, 7, portable, Data::Random).unwrap_or_else(|e| panic!("{e}"));
    }
    run_case(DType::Q8_0, 2, 65_600, 32, 8, false, Data::Random).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn lm_head_shape_with_many_rows_on_the_cpu() {
    run_cpu_case(DType::F16, 1, 65_537, 24, 7, Data::Random).unwrap_or_else(|e| panic!("{e}"));
    run_cpu_case(DType::Q8_0, 2, 65_600, 32, 8, Data::Random).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn a_long_prompt_of_512_tokens() {
    if gpu_tests_skipped() {
        return;
    }
    run_case(DType::F16, 512, 70, 64, 9, false, Data::Random).unwrap_or_else(|e| panic!("{e}"));
    run_case(DType::Q4_1, 512, 3, 96, 10, false, Data::Random).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn a_long_prompt_of_512_tokens_on_the_cpu() {
    run_cpu_case(DType::F16, 512, 70, 64, 9, Data::Random).unwrap_or_else(|e| panic!("{e}"));
    run_cpu_case(DType::Q4_1, 512, 3, 96, 10, Data::Random).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn rows_of_zero_length_sum_to_zero() {
    // k = 0: every output is an empty sum, 0. GPU only: the reference engine derives the
    // token count from x's length and fails on k = 0 (reported, not changed here).
    if gpu_tests_skipped() {
        return;
    }
    use purebee_isa::{Engine, ProgramBuilder};
    let mut p = pair();
    for dtype in [DType::F32, DType::Q8_0, DType::TQ2_0, DType::I2_S] {
        for n in [1, 3] {
            let gpu = &mut p.engine;
            let tag = format!("k0_{dtype}_{n}");
            let w = weight_bytes(dtype, 5, 0, &mut SplitMix64(1), Data::Random);
            let x = gpu.memory_mut().insert(
                &format!("{tag}.x"),
                HostTensor::zeros("x", DType::F32, Shape::matrix(n, 0).expect("shape")).expect("empty"),
            );
            let wt = gpu.memory_mut().insert(
                &format!("{tag}.w"),
                HostTensor::from_bytes("w", dtype, Shape::matrix(5, 0).expect("shape"), &w).expect("sizes"),
            );
            let (x, wt) = (x.expect("unique"), wt.expect("unique"));
            let mut b = ProgramBuilder::new(&tag, gpu.memory_mut());
            let out = b.alloc(&format!("{tag}.out"), DType::F32, &[n, 5]).expect("declares");
            b.grid_write(out, vec![0xffu8; n * 5 * 4].into()).expect("writes");
            b.linear(out, x, wt).expect("valid");
            let program = b.finish();
            gpu.execute(&program, &[]).expect("runs");
            let got = f32s(&gpu.read(out).expect("reads"));
            assert!(got.iter().all(|&v| v == 0.0), "{dtype} n={n}: {got:?}");
        }
    }
}

/// One `x` read by int8-block LINEARs of different kinds in one program: one token against
/// Q4_1 (the CPU's integer kernel), then F16 and Q8_0 (an f32 kernel on `x̂`, then the
/// integer one again), then the same weights against the f32 `x`: engines that keep a
/// rounding per `x` must give each instruction what it needs.
#[test]
fn one_x_through_linears_of_both_modes_and_several_dtypes() {
    let k = 96;
    let mut rng = SplitMix64(77);
    let x = activations(1, k, &mut rng, Data::Random);
    let dtypes = [DType::Q4_1, DType::F16, DType::Q8_0];
    let weights: Vec<Vec<u8>> = dtypes.iter().map(|&d| weight_bytes(d, 9, k, &mut rng, Data::Random)).collect();
    let shape = |r, c| Shape::matrix(r, c).expect("valid shape");
    let mut inputs = vec![("x", HostTensor::from_f32("x", shape(1, k), x).expect("sizes agree"))];
    for (i, (&d, w)) in dtypes.iter().zip(&weights).enumerate() {
        let name = ["w0", "w1", "w2"][i];
        inputs.push((name, HostTensor::from_bytes(name, d, shape(9, k), w).expect("sizes agree")));
    }
    // Fixed data (seed 77), so the bound is not a gamble: summation-order differences of
    // these 96 products are below 1e-4 here, while a stale or wrong rounding moves outputs
    // by whole steps of x̂ (~1e-2 and more).
    let check = |got: &[Vec<u8>], want: &[Vec<u8>], what: &str| -> Result<(), String> {
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            purebee_tests::differential::assert_close(&f32s(g), &f32s(w), 1e-3, 1e-4, &format!("{what} output {i}"))?;
        }
        Ok(())
    };
    let build = |b: &mut purebee_isa::ProgramBuilder, name: &dyn Fn(&str) -> String, ids: &[purebee_isa::TensorId]| {
        let mut outs = Vec::new();
        for (acts, tag) in [(LinearActivations::Int8Blocks, "int8"), (LinearActivations::F32, "f32")] {
            for (i, &w) in ids[1..].iter().enumerate() {
                let out = b.alloc(&name(&format!("{tag}{i}")), DType::F32, &[1, 9])?;
                b.linear_with(out, ids[0], w, acts)?;
                outs.push(out);
            }
        }
        Ok(outs)
    };
    on_cpu_levels(|p| {
        let (got, want) = p.run(&inputs, &[], build);
        check(&got, &want, &format!("{} engine", p.engine.name()))
    })
    .unwrap_or_else(|e| panic!("{e}"));
    if !gpu_tests_skipped() {
        let mut p = pair();
        let (got, want) = p.run(&inputs, &[], build);
        check(&got, &want, "gpu engine").unwrap_or_else(|e| panic!("{e}"));
    }
}
