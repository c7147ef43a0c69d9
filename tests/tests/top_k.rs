//! TOP_K: the GPU engine and the CPU engine (every SIMD path this CPU runs) vs the reference
//! engine, exactly: it is a selection, so the indices must be equal and the values equal bit
//! for bit (NaN payloads and the sign of zero included).
//!
//! Random shapes (row lengths from 1 to past 16 384, so that the GPU's selection takes one,
//! two or three levels, and around its slice sizes 1024 and 4096), random `k` (1, up to the
//! row, up to the GPU's 256), and elements with many ties, NaN, ±∞, ±0 and subnormals; rows
//! of only NaN or with fewer than `k` numbers. The vocabulary row of the 2B model (128256)
//! at the `k` a sampler asks for, and a tensor split in row windows on the GPU.
//!
//! On failure each check prints the engine, the shape, `k`, the first differing slot, got
//! and expected.

use proptest::prelude::*;
use purebee_isa::{DType, Engine, ProgramBuilder};
use purebee_memory::{HostTensor, Shape};
use purebee_tests::differential::{f32s, gpu_tests_skipped, on_cpu_levels, pair, u32s, windowed_pair, Pair};

fn matrix(rows: usize, cols: usize, values: Vec<f32>) -> HostTensor {
    HostTensor::from_f32("x", Shape::matrix(rows, cols).expect("shape"), values).expect("sizes agree")
}

/// Runs TOP_K on both engines of `pair` and requires equal indices and equal value bits.
fn check_top_k<E: Engine>(pair: &mut Pair<E>, rows: usize, cols: usize, k: usize, x: &[f32]) -> Result<(), String> {
    let inputs = [("x", matrix(rows, cols, x.to_vec()))];
    let (got, want) = pair.run(&inputs, &[], |b: &mut ProgramBuilder, name, ids| {
        let values = b.alloc(&name("values"), DType::F32, &[rows, k])?;
        let idx = b.alloc(&name("ids"), DType::U32, &[rows, k])?;
        b.top_k(values, idx, ids[0], k as u32)?;
        Ok(vec![values, idx])
    });
    let what = format!("{} engine: TOP_K [{rows}, {cols}], k = {k}", pair.engine.name());
    let (got_ids, want_ids) = (u32s(&got[1]), u32s(&want[1]));
    let bits = |b: &[u8]| f32s(b).iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    let (got_values, want_values) = (bits(&got[0]), bits(&want[0]));
    if got_ids.len() != rows * k || got_values.len() != rows * k {
        return Err(format!("{what}: {} ids and {} values, expected {}", got_ids.len(), got_values.len(), rows * k));
    }
    for j in 0..rows * k {
        if got_ids[j] != want_ids[j] || got_values[j] != want_values[j] {
            let value = |i: u32| x.get((j / k) * cols + i as usize).copied();
            return Err(format!(
                "{what}: row {}, slot {}: got index {} (value bits {:#x}, x there {:?}), expected index {} (bits {:#x}, \
                 x there {:?}), index difference {}",
                j / k,
                j % k,
                got_ids[j],
                got_values[j],
                value(got_ids[j]),
                want_ids[j],
                want_values[j],
                value(want_ids[j]),
                got_ids[j] as i64 - want_ids[j] as i64
            ));
        }
    }
    Ok(())
}

/// Elements: small integers (many ties), wide values, and the special values.
fn element() -> impl Strategy<Value = f32> {
    prop_oneof![
        6 => (-4i32..=4).prop_map(|v| v as f32),
        3 => -1e3f32..1e3,
        1 => prop::sample::select(vec![
            f32::NAN, -f32::NAN, f32::from_bits(0x7fc0_1234), f32::INFINITY, f32::NEG_INFINITY, 0.0, -0.0,
            1e-40, -1e-40, 2e-40, f32::MAX, f32::MIN, f32::MIN_POSITIVE,
        ]),
    ]
}

/// Row lengths: short ones, the GPU's slice sizes (1024 at 64 invocations, 4096 at 256) and
/// around them, and rows that take two or three levels.
fn cols() -> impl Strategy<Value = usize> {
    prop_oneof![
        3 => 1usize..=80,
        2 => prop::sample::select(vec![255usize, 256, 257, 1023, 1024, 1025, 4095, 4096, 4097, 8193]),
        2 => 81usize..=5000,
        1 => 5000usize..=20_000,
    ]
}

/// `k`: 1, small, the whole row, the GPU's largest, or anything up to the row.
fn k_for(cols: usize) -> impl Strategy<Value = usize> {
    let most = cols.min(256);
    prop_oneof![
        1 => Just(1usize),
        2 => 1usize..=most.min(8),
        1 => Just(most),
        2 => 1usize..=most,
    ]
}

/// A case: rows, cols, k, x; one row made all NaN, or all NaN but for fewer than k numbers.
fn case() -> impl Strategy<Value = (usize, usize, usize, Vec<f32>)> {
    (1usize..=4, cols(), 0u8..4).prop_flat_map(|(rows, cols, special)| {
        (Just(rows), Just(cols), k_for(cols), prop::collection::vec(element(), rows * cols)).prop_map(
            move |(rows, cols, k, mut x)| {
                let last = &mut x[(rows - 1) * cols..];
                match special {
                    0 => last.fill(f32::NAN),
                    1 => {
                        // Numbers only at every third index of the last row: fewer than k
                        // when k is large.
                        for (i, v) in last.iter_mut().enumerate() {
                            if i % 3 != 0 {
                                *v = f32::NAN;
                            }
                        }
                    }
                    _ => {}
                }
                (rows, cols, k, x)
            },
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn top_k_matches_the_reference((rows, cols, k, x) in case()) {
        if gpu_tests_skipped() { return Ok(()); }
        check_top_k(&mut pair(), rows, cols, k, &x).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn cpu_top_k_matches_the_reference((rows, cols, k, x) in case()) {
        on_cpu_levels(|p| check_top_k(p, rows, cols, k, &x)).map_err(TestCaseError::fail)?;
    }
}

/// Deterministic pseudo-random values in [-1, 1) (SplitMix64).
fn pseudo_random(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = purebee_tests::rng::SplitMix64(seed);
    (0..n).map(|_| rng.symmetric_f32()).collect()
}

#[test]
fn top_k_over_a_vocabulary_row() {
    // The 2B model's vocabulary, at the k of a default sampler (40), with a 64-token penalty
    // window (104), and the GPU's largest (256: three levels). Logits rounded to 1/64 tie.
    let cols = 128_256;
    let mut x: Vec<f32> = pseudo_random(cols, 5).iter().map(|v| (v * 640.0).round() / 64.0).collect();
    x[7] = f32::NAN;
    x[128_255] = 10.0;
    for k in [40, 104, 256] {
        if !gpu_tests_skipped() {
            check_top_k(&mut pair(), 1, cols, k, &x).unwrap_or_else(|e| panic!("{e}"));
        }
        on_cpu_levels(|p| check_top_k(p, 1, cols, k, &x)).unwrap_or_else(|e| panic!("{e}"));
    }
}

#[test]
fn top_k_of_many_rows_and_a_tensor_split_in_row_windows() {
    // 600 rows of 200 elements: 480 KB, three windows of at most 256 rows on the windowed
    // GPU engine (256 KiB per binding).
    let (rows, cols) = (600, 200);
    let x: Vec<f32> = pseudo_random(rows * cols, 9).iter().map(|v| (v * 16.0).round()).collect();
    if !gpu_tests_skipped() {
        check_top_k(&mut windowed_pair(), rows, cols, 17, &x).unwrap_or_else(|e| panic!("{e}"));
        check_top_k(&mut pair(), rows, cols, 200, &x).unwrap_or_else(|e| panic!("{e}"));
    }
    on_cpu_levels(|p| check_top_k(p, rows, cols, 17, &x)).unwrap_or_else(|e| panic!("{e}"));
}

/// TOP_K with k = 1 and ARGMAX give the same index, on the engine under test and the
/// reference: all NaN (0), -inf as a number, -0 == +0 (the first), +inf.
fn check_k1_is_argmax<E: Engine>(p: &mut Pair<E>) -> Result<(), String> {
    let (nan, inf) = (f32::NAN, f32::INFINITY);
    let x = [[nan, nan, nan, nan], [nan, -inf, nan, -inf], [-0.0, 0.0, -0.0, nan], [-3.0, -2.0, nan, inf]].concat();
    let inputs = [("x", matrix(4, 4, x))];
    let (got, want) = p.run(&inputs, &[], |b: &mut ProgramBuilder, name, ids| {
        let (v, i) = (b.alloc(&name("v"), DType::F32, &[4, 1])?, b.alloc(&name("i"), DType::U32, &[4, 1])?);
        b.top_k(v, i, ids[0], 1)?;
        let am = b.alloc(&name("am"), DType::U32, &[4])?;
        b.argmax(am, ids[0])?;
        Ok(vec![i, am])
    });
    for (engine, out) in [(p.engine.name(), &got), ("ref", &want)] {
        let (top, am) = (u32s(&out[0]), u32s(&out[1]));
        if top != am || top != [0, 1, 0, 3] {
            return Err(format!("{engine} engine: TOP_K k = 1 {top:?}, ARGMAX {am:?}, expected [0, 1, 0, 3]"));
        }
    }
    Ok(())
}

#[test]
fn top_k_with_k_one_is_argmax() {
    if !gpu_tests_skipped() {
        check_k1_is_argmax(&mut pair()).unwrap_or_else(|e| panic!("{e}"));
    }
    on_cpu_levels(check_k1_is_argmax).unwrap_or_else(|e| panic!("{e}"));
}

// ---- TOP_K's log-sum-exp (the optional `lse` output) ----
//
// The tolerance, `(3·m + 64)·u + 2u·|lse|` with `u = 2⁻²⁴` and `m` the row's length, from
// the error of an f32 log-sum-exp `M + ln S`, `S = Σ e^(dⱼ)`, `dⱼ = xⱼ − M ≤ 0`, `S ≥ 1`:
//
// - each `dⱼ` is rounded once (relative `u`, so `e^(dⱼ)` is off by a factor `e^(u·|dⱼ|)`,
//   about `1 + u·|dⱼ|`), and each exponential is within WGSL's `3 + 2|dⱼ|` ulp (the CPU's
//   `expf` within 1): a term's error is at most `(6 + 5|dⱼ|)·u·e^(dⱼ)`, and since
//   `|d|·e^d ≤ 1/e` for `d ≤ 0`, all of them together at most `(6·S + 1.9·m)·u`;
// - summing `m` non-negative terms in f32 in any order (sequential, tree, or the GPU's
//   per-invocation runs merged in a tree with rescaling factors that are exponentials too)
//   costs at most `(m − 1)·u·S` to first order, the rescalings at most another `(6 + 5·|Δ|)`
//   ulps per merge, bounded in the same way;
// - so `S` is within a relative `(6 + 1.9·m + m + c)·u ≤ (3·m + 32)·u` of itself (`S ≥ 1`),
//   which is an absolute error of the same size on `ln S`; `ln` itself and the final
//   `M + ln S` round once each (at most `u·|ln S| ≤ 12u`, since `S ≤ m < 2²⁰`, and
//   `u·|lse|`), and the reference's own result is rounded to F32 once (`u·|lse|`).
//
// The CPU engine sums in f64, so only the first item applies to it; the bound is the GPU's.
// NaN, ±∞ results (rows with NaN, with +∞, of only −∞) must be exactly the reference's.

/// The allowed distance of an engine's log-sum-exp from the reference's, for rows of `m`.
fn lse_tolerance(m: usize, want: f32) -> f64 {
    let u = 2f64.powi(-24);
    (3.0 * m as f64 + 64.0) * u + 2.0 * u * f64::from(want).abs()
}

/// Runs TOP_K with `lse` on both engines: ids and values exactly, `lse` within
/// [`lse_tolerance`] (NaN and infinities exactly).
fn check_top_k_lse<E: Engine>(pair: &mut Pair<E>, rows: usize, cols: usize, k: usize, x: &[f32]) -> Result<(), String> {
    let inputs = [("x", matrix(rows, cols, x.to_vec()))];
    let (got, want) = pair.run(&inputs, &[], |b: &mut ProgramBuilder, name, ids| {
        let values = b.alloc(&name("values"), DType::F32, &[rows, k])?;
        let idx = b.alloc(&name("ids"), DType::U32, &[rows, k])?;
        let lse = b.alloc(&name("lse"), DType::F32, &[rows])?;
        b.top_k_lse(values, idx, lse, ids[0], k as u32)?;
        Ok(vec![values, idx, lse])
    });
    let what = format!("{} engine: TOP_K with lse [{rows}, {cols}], k = {k}", pair.engine.name());
    let bits = |b: &[u8]| f32s(b).iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    if u32s(&got[1]) != u32s(&want[1]) || bits(&got[0]) != bits(&want[0]) {
        return Err(format!("{what}: ids or values differ from the reference's"));
    }
    let (got_lse, want_lse) = (f32s(&got[2]), f32s(&want[2]));
    if got_lse.len() != rows {
        return Err(format!("{what}: {} lse values, expected {rows}", got_lse.len()));
    }
    for r in 0..rows {
        let (g, w) = (got_lse[r], want_lse[r]);
        let ok = if w.is_nan() {
            g.is_nan()
        } else if w.is_infinite() {
            g == w
        } else {
            g.is_finite() && (f64::from(g) - f64::from(w)).abs() <= lse_tolerance(cols, w)
        };
        if !ok {
            return Err(format!(
                "{what}: row {r}: lse {g} ({:#x}), reference {w} ({:#x}), difference {}, tolerance {}",
                g.to_bits(),
                w.to_bits(),
                f64::from(g) - f64::from(w),
                lse_tolerance(cols, w)
            ));
        }
    }
    Ok(())
}

/// Logit-like elements: mostly moderate values, some far below (terms that vanish), ties,
/// and now and then −∞.
fn logit() -> impl Strategy<Value = f32> {
    prop_oneof![
        8 => -30f32..30.0,
        2 => (-4i32..=4).prop_map(|v| v as f32),
        1 => -1e4f32..-100.0,
        1 => Just(f32::NEG_INFINITY),
    ]
}

/// A log-sum-exp case: 1..=5 rows of odd and even lengths; the last row may hold a NaN, a
/// +∞, or be all −∞ (or all but one element).
fn lse_case() -> impl Strategy<Value = (usize, usize, usize, Vec<f32>)> {
    let cols = prop_oneof![3 => 1usize..=64, 2 => 65usize..=1500, 1 => prop::sample::select(vec![1023usize, 1025, 4097, 9001])];
    (1usize..=5, cols, 0u8..6).prop_flat_map(|(rows, cols, special)| {
        (Just(rows), Just(cols), 1usize..=cols.min(20), prop::collection::vec(logit(), rows * cols), 0..cols).prop_map(
            move |(rows, cols, k, mut x, at)| {
                let last = &mut x[(rows - 1) * cols..];
                match special {
                    0 => last[at] = f32::NAN,
                    1 => last[at] = f32::INFINITY,
                    2 => last.fill(f32::NEG_INFINITY),
                    3 => {
                        last.fill(f32::NEG_INFINITY);
                        last[at] = -7.5;
                    }
                    _ => {}
                }
                (rows, cols, k, x)
            },
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn top_k_lse_matches_the_reference((rows, cols, k, x) in lse_case()) {
        if gpu_tests_skipped() { return Ok(()); }
        check_top_k_lse(&mut pair(), rows, cols, k, &x).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn cpu_top_k_lse_matches_the_reference((rows, cols, k, x) in lse_case()) {
        on_cpu_levels(|p| check_top_k_lse(p, rows, cols, k, &x)).map_err(TestCaseError::fail)?;
    }
}

#[test]
fn top_k_lse_over_vocabulary_rows() {
    // Two rows of a 130k vocabulary (the second with one huge logit, so its sum is about 1),
    // and a windowed GPU tensor (600 rows of 200: three row windows).
    let cols = 130_001;
    let mut x: Vec<f32> = pseudo_random(2 * cols, 11).iter().map(|v| v * 12.0).collect();
    x[cols + 17] = 60.0;
    if !gpu_tests_skipped() {
        check_top_k_lse(&mut pair(), 2, cols, 40, &x).unwrap_or_else(|e| panic!("{e}"));
    }
    on_cpu_levels(|p| check_top_k_lse(p, 2, cols, 40, &x)).unwrap_or_else(|e| panic!("{e}"));
    let (rows, cols) = (600, 200);
    let x: Vec<f32> = pseudo_random(rows * cols, 12).iter().map(|v| v * 20.0).collect();
    if !gpu_tests_skipped() {
        check_top_k_lse(&mut windowed_pair(), rows, cols, 5, &x).unwrap_or_else(|e| panic!("{e}"));
    }
    on_cpu_levels(|p| check_top_k_lse(p, rows, cols, 5, &x)).unwrap_or_else(|e| panic!("{e}"));
}

/// NaN wins over +∞, +∞ over everything else, all −∞ is −∞; `[0, 0, −∞, −∞]` is ln 2.
fn check_special_lse<E: Engine>(p: &mut Pair<E>) -> Result<(), String> {
    let (nan, inf) = (f32::NAN, f32::INFINITY);
    let x = [[1.0, nan, inf, 2.0], [-inf, inf, 3.0, -inf], [-inf, -inf, -inf, -inf], [0.0, 0.0, -inf, -inf]].concat();
    let inputs = [("x", matrix(4, 4, x))];
    let (got, want) = p.run(&inputs, &[], |b: &mut ProgramBuilder, name, ids| {
        let (v, i) = (b.alloc(&name("v"), DType::F32, &[4, 2])?, b.alloc(&name("i"), DType::U32, &[4, 2])?);
        let lse = b.alloc(&name("lse"), DType::F32, &[4, 1])?;
        b.top_k_lse(v, i, lse, ids[0], 2)?;
        Ok(vec![lse])
    });
    for (engine, out) in [(p.engine.name(), &got), ("ref", &want)] {
        let lse = f32s(&out[0]);
        let ok = lse[0].to_bits() == 0x7fc0_0000
            && lse[1] == inf
            && lse[2] == -inf
            && (lse[3] - std::f32::consts::LN_2).abs() <= 1e-6;
        if !ok {
            return Err(format!("{engine} engine: lse {lse:?}, expected [NaN, inf, -inf, ln 2]"));
        }
    }
    Ok(())
}

#[test]
fn top_k_lse_special_rows_are_exact() {
    if !gpu_tests_skipped() {
        check_special_lse(&mut pair()).unwrap_or_else(|e| panic!("{e}"));
    }
    on_cpu_levels(check_special_lse).unwrap_or_else(|e| panic!("{e}"));
}
