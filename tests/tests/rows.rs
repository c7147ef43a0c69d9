//! RMS_NORM, SOFTMAX and ARGMAX: the GPU engine and the CPU engine (every SIMD path this CPU
//! runs) vs the reference engine over random shapes and data; on the GPU through both forms
//! of the row reductions (subgroup operations, from [`pair`] on an adapter that has them, as
//! lavapipe does; the portable workgroup-memory tree, from [`portable_pair`]) and both
//! workgroup sizes (64 threads for rows up to 1024, 256 beyond); in place and not. Row lengths include 1, values around 64, 128, 256 and 1024 (the workgroup
//! sizes and the switch between them), odd lengths, and the model's 2560, 6912 and 128256.
//!
//! Tolerances (u = 2^-24, the f32 unit roundoff; one ulp is at most 2u relative):
//!
//! - **Summation depth.** The GPU sums a row in f32: each thread adds its strided elements in
//!   order (at most ⌈d/64⌉ of them, 64 being the smallest workgroup), then the workgroup
//!   combines at most 256 partial sums in some tree (a pairwise tree, or subgroup operations
//!   whose order the device chooses): any term passes through at most
//!   `depth(d) = ⌈d/64⌉ + 256` additions. A sum of non-negative terms computed that way has a
//!   relative error of at most `depth·u` (to first order), whatever the order.
//! - **RMS_NORM**: squares (u) and sum (`depth·u`), `/ d` (WGSL division: 2.5 ulp = 5u) and
//!   `+ eps` (u, a sum of non-negative terms): the argument of `inverseSqrt` is within
//!   `(depth + 7)u`; the square root halves that and `inverseSqrt` adds 2 ulp (4u); the two
//!   products `x · inv · w` add 2u and the reference's one rounding u. In all
//!   `(depth/2 + 10.5)u`, so the check is relative `(depth/2 + 16)u` (the rest is margin).
//!   For d = 2560 that is 1.1e-5; for 6912, 1.2e-5.
//! - **SOFTMAX**: with `T` the spread of the row (max − min over finite elements), `x − max`
//!   rounds once (absolute error ≤ u·T, a relative error ≤ u·T after `exp`), and WGSL's `exp`
//!   is within `3 + 2|t|` ulp (≤ (6 + 4T)u): each `e^t` is within `(6 + 5T)u`. The sum adds
//!   `depth·u` to the largest of those, the division 2.5 ulp (5u), the reference u: in all
//!   `(depth + 10T + 18)u`, checked as `(depth + 10T + 24)u`.
//! - Both allow an absolute `f32::MIN_POSITIVE` (1.2e-38): a result below the smallest normal
//!   f32 may be flushed to zero by a GPU, and relative error means nothing there.
//! - **ARGMAX** is exact: the GPU compares integer keys; the indices must be equal.
//!
//! The CPU engine is held to the same tolerances (it sums RMS_NORM's squares and
//! SOFTMAX's exponentials in f64, its e^x is within 2 ulp) and ARGMAX to equal indices.
//!
//! On failure each check prints the case (engine, operation, shape, path), the index, got,
//! expected and the difference.

use proptest::prelude::*;
use purebee_isa::{DType, Engine, ProgramBuilder};
use purebee_memory::{HostTensor, Shape};
use purebee_tests::differential::{assert_close, f32s, gpu_tests_skipped, on_cpu_levels, pair_for, u32s, Pair};

/// The f32 unit roundoff, 2^-24.
const U: f64 = 1.0 / 16_777_216.0;

/// The most additions a term of a d-element row goes through on the GPU (module docs).
fn depth(d: usize) -> f64 {
    (d.div_ceil(64) + 256) as f64
}

/// RMS_NORM's relative tolerance for rows of `d` elements (module docs).
fn rms_norm_rel(d: usize) -> f32 {
    ((depth(d) / 2.0 + 16.0) * U) as f32
}

/// SOFTMAX's relative tolerance for rows of `d` elements whose finite values span `spread`.
fn softmax_rel(d: usize, spread: f64) -> f32 {
    ((depth(d) + 10.0 * spread + 24.0) * U) as f32
}

/// The largest minus the smallest finite value of any row (0 for rows without two).
fn spread(x: &[f32], cols: usize) -> f64 {
    x.chunks(cols.max(1))
        .map(|row| {
            let finite = row.iter().filter(|v| v.is_finite()).map(|&v| v as f64);
            let (lo, hi) = finite.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| (lo.min(v), hi.max(v)));
            if hi >= lo {
                hi - lo
            } else {
                0.0
            }
        })
        .fold(0.0, f64::max)
}

fn matrix(rows: usize, cols: usize, values: Vec<f32>) -> HostTensor {
    HostTensor::from_f32("x", Shape::matrix(rows, cols).expect("shape"), values).expect("sizes agree")
}

fn path(portable: bool) -> &'static str {
    if portable {
        "portable"
    } else {
        "subgroup"
    }
}

/// Runs `check` on the GPU pair of `portable` ([`pair_for`]); an error names the path.
fn on_gpu(portable: bool, check: impl FnOnce(&mut Pair) -> Result<(), String>) -> Result<(), String> {
    check(&mut pair_for(portable)).map_err(|e| format!("{} path: {e}", path(portable)))
}

/// Runs RMS_NORM on both engines of `pair` and compares.
fn check_rms_norm<E: Engine>(
    pair: &mut Pair<E>,
    rows: usize,
    cols: usize,
    x: &[f32],
    w: &[f32],
    eps: f32,
    in_place: bool,
) -> Result<(), String> {
    let inputs = [
        ("x", matrix(rows, cols, x.to_vec())),
        ("w", HostTensor::from_f32("w", Shape::vector(cols), w.to_vec()).expect("w")),
    ];
    let (got, reference) = pair.run(&inputs, &[], |b: &mut ProgramBuilder, name, ids| {
        let out = if in_place { ids[0] } else { b.alloc(&name("out"), DType::F32, &[rows, cols])? };
        b.rms_norm(out, ids[0], ids[1], eps)?;
        Ok(vec![out])
    });
    let what = format!("{} engine: RMS_NORM [{rows}, {cols}] eps={eps} in_place={in_place}", pair.engine.name());
    assert_close(&f32s(&got[0]), &f32s(&reference[0]), f32::MIN_POSITIVE, rms_norm_rel(cols), &what)
}

/// Runs SOFTMAX on both engines of `pair` and compares.
fn check_softmax<E: Engine>(
    pair: &mut Pair<E>,
    rows: usize,
    cols: usize,
    x: &[f32],
    in_place: bool,
) -> Result<(), String> {
    let rel = softmax_rel(cols, spread(x, cols));
    let inputs = [("x", matrix(rows, cols, x.to_vec()))];
    let (got, reference) = pair.run(&inputs, &[], |b: &mut ProgramBuilder, name, ids| {
        let out = if in_place { ids[0] } else { b.alloc(&name("out"), DType::F32, &[rows, cols])? };
        b.softmax(out, ids[0])?;
        Ok(vec![out])
    });
    let what = format!("{} engine: SOFTMAX [{rows}, {cols}] in_place={in_place} (rel tol {rel:e})", pair.engine.name());
    assert_close(&f32s(&got[0]), &f32s(&reference[0]), f32::MIN_POSITIVE, rel, &what)
}

/// ARGMAX of `x` on `pair`'s engine under test and reference engine.
fn argmax_of<E: Engine>(pair: &mut Pair<E>, rows: usize, cols: usize, x: &[f32]) -> (Vec<u32>, Vec<u32>) {
    let inputs = [("x", matrix(rows, cols, x.to_vec()))];
    let (got, reference) = pair.run(&inputs, &[], |b: &mut ProgramBuilder, name, ids| {
        let out = b.alloc(&name("out"), DType::U32, &[rows])?;
        b.argmax(out, ids[0])?;
        Ok(vec![out])
    });
    (u32s(&got[0]), u32s(&reference[0]))
}

/// Runs ARGMAX on both engines of `pair` and requires equal indices.
fn check_argmax<E: Engine>(pair: &mut Pair<E>, rows: usize, cols: usize, x: &[f32]) -> Result<(), String> {
    let (got, want) = argmax_of(pair, rows, cols, x);
    let what = format!("{} engine: ARGMAX [{rows}, {cols}]", pair.engine.name());
    if got.len() != want.len() {
        return Err(format!("{what}: {} indices, expected {}", got.len(), want.len()));
    }
    for (r, (&g, &w)) in got.iter().zip(&want).enumerate() {
        if g != w {
            let value = |i: u32| x.get(r * cols + i as usize).copied();
            return Err(format!(
                "{what}: row {r}: got index {g} (value {:?}), expected {w} (value {:?}), difference {}",
                value(g),
                value(w),
                g as i64 - w as i64
            ));
        }
    }
    Ok(())
}

/// Row lengths: short ones, the workgroup-size boundaries, longer odd ones, and rows past
/// 4096 (the 2B's 6912), which an invocation of 256 goes through in more than one step.
fn cols() -> impl Strategy<Value = usize> {
    prop_oneof![
        2 => 1usize..=80,
        2 => prop::sample::select(vec![63usize, 64, 65, 127, 128, 129, 255, 256, 257, 1023, 1024, 1025, 2560]),
        3 => 81usize..=3000,
        1 => 4097usize..=9000,
    ]
}

fn shape() -> impl Strategy<Value = (usize, usize)> {
    (1usize..=5, cols())
}

fn values(n: usize, range: f32) -> impl Strategy<Value = Vec<f32>> {
    prop::collection::vec(-range..range, n)
}

/// A RMS_NORM case: shape, x (scaled by 10^k, k in -3..=3), weight, eps, in place, path.
#[allow(clippy::type_complexity)] // A proptest tuple, named by the function.
fn rms_norm_case() -> impl Strategy<Value = (usize, usize, Vec<f32>, Vec<f32>, f32, bool, bool)> {
    shape().prop_flat_map(|(rows, cols)| {
        (
            Just(rows),
            Just(cols),
            (values(rows * cols, 8.0), -3i32..=3).prop_map(|(v, k)| v.into_iter().map(|x| x * 10f32.powi(k)).collect()),
            values(cols, 2.0),
            prop::sample::select(vec![1e-5f32, 1e-6, 0.1]),
            any::<bool>(),
            any::<bool>(),
        )
    })
}

/// A SOFTMAX case: shape, x in ±range for a range of 0.5, 8 or 40, in place, path.
fn softmax_case() -> impl Strategy<Value = (usize, usize, Vec<f32>, bool, bool)> {
    (shape(), prop::sample::select(vec![0.5f32, 8.0, 40.0])).prop_flat_map(|((rows, cols), range)| {
        (Just(rows), Just(cols), values(rows * cols, range), any::<bool>(), any::<bool>())
    })
}

/// A special value injected into a SOFTMAX row.
#[derive(Clone, Copy, Debug)]
enum Special {
    Nan,
    PosInf,
    NegInf,
    AllNegInf,
}

/// ARGMAX elements: small integers (many ties), wide values, and the special values.
fn argmax_element() -> impl Strategy<Value = f32> {
    prop_oneof![
        6 => (-4i32..=4).prop_map(|v| v as f32),
        3 => -1e3f32..1e3,
        1 => prop::sample::select(vec![
            f32::NAN, -f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 0.0, -0.0,
            1e-40, -1e-40, 2e-40, f32::MAX, f32::MIN, f32::MIN_POSITIVE,
        ]),
    ]
}

/// An ARGMAX case: shape, x (one row all NaN when the flag is set), path.
fn argmax_case() -> impl Strategy<Value = (usize, usize, Vec<f32>, bool)> {
    (shape(), any::<bool>(), any::<bool>()).prop_flat_map(|((rows, cols), nan_row, portable)| {
        prop::collection::vec(argmax_element(), rows * cols).prop_map(move |mut x| {
            if nan_row {
                x[(rows - 1) * cols..].fill(f32::NAN);
            }
            (rows, cols, x, portable)
        })
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn rms_norm_matches_the_reference((rows, cols, x, w, eps, in_place, portable) in rms_norm_case()) {
        if gpu_tests_skipped() { return Ok(()); }
        on_gpu(portable, |p| check_rms_norm(p, rows, cols, &x, &w, eps, in_place)).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn softmax_matches_the_reference((rows, cols, x, in_place, portable) in softmax_case()) {
        if gpu_tests_skipped() { return Ok(()); }
        on_gpu(portable, |p| check_softmax(p, rows, cols, &x, in_place)).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn softmax_of_rows_with_special_values_matches_the_reference(
        (rows, cols, mut x, in_place, portable) in softmax_case(),
        special in prop::sample::select(vec![Special::Nan, Special::PosInf, Special::NegInf, Special::AllNegInf]),
        at in (0.0f64..1.0, 0.0f64..1.0),
    ) {
        if gpu_tests_skipped() { return Ok(()); }
        inject(&mut x, rows, cols, special, at);
        on_gpu(portable, |p| check_softmax(p, rows, cols, &x, in_place))
            .map_err(|e| TestCaseError::fail(format!("{special:?}: {e}")))?;
    }

    #[test]
    fn argmax_matches_the_reference((rows, cols, x, portable) in argmax_case()) {
        if gpu_tests_skipped() { return Ok(()); }
        on_gpu(portable, |p| check_argmax(p, rows, cols, &x)).map_err(TestCaseError::fail)?;
    }
}

// The same cases on the CPU engine (the GPU's `portable` flag is not used).
proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn cpu_rms_norm_matches_the_reference((rows, cols, x, w, eps, in_place, _portable) in rms_norm_case()) {
        on_cpu_levels(|p| check_rms_norm(p, rows, cols, &x, &w, eps, in_place)).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn cpu_softmax_matches_the_reference((rows, cols, x, in_place, _portable) in softmax_case()) {
        on_cpu_levels(|p| check_softmax(p, rows, cols, &x, in_place)).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn cpu_softmax_of_rows_with_special_values_matches_the_reference(
        (rows, cols, mut x, in_place, _portable) in softmax_case(),
        special in prop::sample::select(vec![Special::Nan, Special::PosInf, Special::NegInf, Special::AllNegInf]),
        at in (0.0f64..1.0, 0.0f64..1.0),
    ) {
        inject(&mut x, rows, cols, special, at);
        on_cpu_levels(|p| check_softmax(p, rows, cols, &x, in_place))
            .map_err(|e| TestCaseError::fail(format!("{special:?}: {e}")))?;
    }

    #[test]
    fn cpu_argmax_matches_the_reference((rows, cols, x, _portable) in argmax_case()) {
        on_cpu_levels(|p| check_argmax(p, rows, cols, &x)).map_err(TestCaseError::fail)?;
    }
}

/// Puts `special` into row `at.0` (a fraction of the rows), element `at.1` (of the row).
fn inject(x: &mut [f32], rows: usize, cols: usize, special: Special, at: (f64, f64)) {
    let r = (at.0 * rows as f64) as usize;
    let i = r * cols + (at.1 * cols as f64) as usize;
    match special {
        Special::Nan => x[i] = f32::NAN,
        Special::PosInf => x[i] = f32::INFINITY,
        Special::NegInf => x[i] = f32::NEG_INFINITY,
        Special::AllNegInf => x[r * cols..(r + 1) * cols].fill(f32::NEG_INFINITY),
    }
}

/// Deterministic pseudo-random values in [-1, 1) (SplitMix64), for the fixed-shape tests.
fn pseudo_random(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = purebee_tests::rng::SplitMix64(seed);
    (0..n).map(|_| rng.symmetric_f32()).collect()
}

/// Every GPU pair (subgroup, then portable) and every CPU pair, each given to `check`; the
/// first error names the engine and its path.
fn on_every_engine(mut check: impl FnMut(&mut dyn Check) -> Result<(), String>) {
    if !gpu_tests_skipped() {
        for portable in [false, true] {
            on_gpu(portable, |p| check(p)).unwrap_or_else(|e| panic!("{e}"));
        }
    }
    on_cpu_levels(|p| check(p)).unwrap_or_else(|e| panic!("{e}"));
}

/// The checks of this file over a pair of any engine (for [`on_every_engine`]).
trait Check {
    fn rms_norm(
        &mut self,
        rows: usize,
        cols: usize,
        x: &[f32],
        w: &[f32],
        eps: f32,
        in_place: bool,
    ) -> Result<(), String>;
    fn softmax(&mut self, rows: usize, cols: usize, x: &[f32], in_place: bool) -> Result<(), String>;
    fn argmax(&mut self, rows: usize, cols: usize, x: &[f32]) -> Result<(), String>;
    /// SOFTMAX's outputs: (engine under test, reference).
    fn softmax_values(&mut self, rows: usize, cols: usize, x: &[f32]) -> (Vec<f32>, Vec<f32>);
    /// ARGMAX's indices: (engine under test, reference).
    fn argmax_indices(&mut self, rows: usize, cols: usize, x: &[f32]) -> (Vec<u32>, Vec<u32>);
}

impl<E: Engine> Check for Pair<E> {
    fn rms_norm(
        &mut self,
        rows: usize,
        cols: usize,
        x: &[f32],
        w: &[f32],
        eps: f32,
        in_place: bool,
    ) -> Result<(), String> {
        check_rms_norm(self, rows, cols, x, w, eps, in_place)
    }

    fn softmax(&mut self, rows: usize, cols: usize, x: &[f32], in_place: bool) -> Result<(), String> {
        check_softmax(self, rows, cols, x, in_place)
    }

    fn argmax(&mut self, rows: usize, cols: usize, x: &[f32]) -> Result<(), String> {
        check_argmax(self, rows, cols, x)
    }

    fn softmax_values(&mut self, rows: usize, cols: usize, x: &[f32]) -> (Vec<f32>, Vec<f32>) {
        let inputs = [("x", matrix(rows, cols, x.to_vec()))];
        let (got, reference) = self.run(&inputs, &[], |b: &mut ProgramBuilder, name, ids| {
            let out = b.alloc(&name("out"), DType::F32, &[rows, cols])?;
            b.softmax(out, ids[0])?;
            Ok(vec![out])
        });
        (f32s(&got[0]), f32s(&reference[0]))
    }

    fn argmax_indices(&mut self, rows: usize, cols: usize, x: &[f32]) -> (Vec<u32>, Vec<u32>) {
        argmax_of(self, rows, cols, x)
    }
}

#[test]
fn rms_norm_at_the_model_shapes() {
    // The 2B model's hidden size (2560) and FFN size (6912), and SmolLM2's 576.
    on_every_engine(|p| {
        for (rows, cols) in [(3, 2560), (2, 6912), (4, 576)] {
            for in_place in [false, true] {
                let x: Vec<f32> = pseudo_random(rows * cols, cols as u64).iter().map(|v| v * 4.0).collect();
                let w: Vec<f32> = pseudo_random(cols, 7).iter().map(|v| v + 1.5).collect();
                p.rms_norm(rows, cols, &x, &w, 1e-5, in_place)?;
            }
        }
        Ok(())
    });
}

#[test]
fn rms_norm_of_more_rows_than_one_grid_dimension_holds() {
    // 65535 workgroups is the most one dimension may hold (WebGPU's and lavapipe's limit):
    // rows past it come from the grid's y dimension. (Subgroup path only on the GPU.)
    let (rows, cols) = (65_535 + 7, 3);
    let x: Vec<f32> = pseudo_random(rows * cols, 11).iter().map(|v| v * 3.0).collect();
    let w = [1.0, -2.0, 0.5];
    if !gpu_tests_skipped() {
        on_gpu(false, |p| check_rms_norm(p, rows, cols, &x, &w, 1e-5, false)).unwrap_or_else(|e| panic!("{e}"));
    }
    on_cpu_levels(|p| check_rms_norm(p, rows, cols, &x, &w, 1e-5, false)).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn rms_norm_of_a_zero_row_is_zero() {
    on_every_engine(|p| p.rms_norm(2, 300, &[0.0; 600], &[1.0; 300], 1e-5, true));
}

#[test]
fn softmax_over_a_vocabulary_row() {
    // The 2B model's vocabulary: 128256 logits in one row (one workgroup of 256).
    let cols = 128_256;
    let x: Vec<f32> = pseudo_random(cols, 5).iter().map(|v| v * 12.0).collect();
    on_every_engine(|p| {
        for in_place in [false, true] {
            p.softmax(1, cols, &x, in_place)?;
        }
        Ok(())
    });
}

#[test]
fn softmax_of_prefill_rows() {
    // Many rows (a 512-token prefill's attention scores would be this many).
    let (rows, cols) = (512, 37);
    let x: Vec<f32> = pseudo_random(rows * cols, 9).iter().map(|v| v * 6.0).collect();
    on_every_engine(|p| p.softmax(rows, cols, &x, false));
}

#[test]
fn softmax_rows_with_nan_or_infinities_are_nan_and_others_are_not() {
    let inf = f32::INFINITY;
    let rows: Vec<Vec<f32>> = vec![
        vec![1.0, f32::NAN, 2.0, 0.5],
        vec![1.0, inf, 2.0, 0.5],
        vec![-inf; 4],
        vec![-inf, 0.0, -inf, 1.0],
        vec![f32::MAX, -f32::MAX, 0.0, 1.0],
    ];
    let x: Vec<f32> = rows.concat();
    on_every_engine(|p| {
        let (got, want) = p.softmax_values(5, 4, &x);
        assert!(want[..12].iter().all(|v| v.is_nan()), "the reference: {want:?}");
        if !got[..12].iter().all(|v| v.is_nan()) {
            return Err(format!("rows 0..3 must be NaN: {got:?}"));
        }
        // Row 3: e^(-inf) is exactly 0, the rest within the tolerance; row 4: the f32::MAX
        // element takes everything (the others are more than 104 below it).
        if (got[12], got[14]) != (0.0, 0.0) {
            return Err(format!("row 3: e^(-inf) must be exactly 0: {:?}", &got[12..16]));
        }
        assert_close(&got[12..16], &want[12..16], f32::MIN_POSITIVE, softmax_rel(4, 1.0), "SOFTMAX row 3")?;
        if got[16..] != [1.0, 0.0, 0.0, 0.0] {
            return Err(format!("row 4: {:?}, expected [1, 0, 0, 0]", &got[16..]));
        }
        Ok(())
    });
}

#[test]
fn argmax_over_a_vocabulary_row_finds_the_first_of_tied_maxima() {
    let cols = 128_256;
    let mut x = pseudo_random(cols, 3);
    // The maximum appears three times, the first far from the start; NaN and a huge value's
    // negation around it must not matter.
    for i in [100_003, 127_000, 128_255] {
        x[i] = 7.5;
    }
    x[5] = f32::NAN;
    x[100_002] = f32::NAN;
    x[6] = -f32::MAX;
    on_every_engine(|p| {
        p.argmax(1, cols, &x)?;
        let (got, _) = p.argmax_indices(1, cols, &x);
        if got != [100_003] {
            return Err(format!("ARGMAX of the vocabulary row: {got:?}, expected [100003]"));
        }
        Ok(())
    });
}

#[test]
fn argmax_edge_rows() {
    let (nan, inf) = (f32::NAN, f32::INFINITY);
    let sub = f32::from_bits; // sub(k): k times the smallest subnormal
    let rows: Vec<Vec<f32>> = vec![
        vec![nan, nan, nan, nan, nan],              // all NaN: 0
        vec![nan, -inf, nan, -inf, nan],            // -inf is a value: 1
        vec![-0.0, 0.0, -0.0, nan, -1.0],           // -0 == +0: the first, 0
        vec![sub(1), sub(2), sub(1), 0.0, -sub(1)], // subnormals compare exactly: 1
        vec![-3.0, -2.0, nan, -2.0, inf],           // +inf wins: 4
    ];
    let x: Vec<f32> = rows.concat();
    on_every_engine(|p| {
        p.argmax(5, 5, &x)?;
        let (got, _) = p.argmax_indices(5, 5, &x);
        if got != [0, 1, 0, 1, 4] {
            return Err(format!("ARGMAX of the edge rows: {got:?}, expected [0, 1, 0, 1, 4]"));
        }
        Ok(())
    });
}

#[test]
fn argmax_of_a_one_element_row_and_many_rows() {
    on_every_engine(|p| {
        p.argmax(1, 1, &[-5.0])?;
        let (rows, cols) = (700, 9);
        p.argmax(rows, cols, &pseudo_random(rows * cols, 1))
    });
}
