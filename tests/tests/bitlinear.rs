//! BITLINEAR: the GPU engine and the CPU engine (every SIMD path this CPU runs) vs the
//! reference engine for TQ1_0, TQ2_0 and I2_S weights, with and without the `.scale` tensor,
//! one token (`gemv`) and several (`tiled`), subgroup and portable reductions (GPU), odd row
//! and token counts, row lengths that are whole blocks (multiples of 128 for I2_S, 256 for
//! TQ1_0 / TQ2_0) but not multiples of the 256-column tile (I2_S), more than 65535 tokens.
//!
//! **The CPU engine** must give the reference's outputs exactly, for exact and random data
//! alike (±0 compare equal, and NaN equals NaN): it quantizes the activations as the ISA
//! says, sums the int8 × ternary products exactly in integers per scale block, and computes
//! the final scaling `Σ_b d_b · isum_b / s · scale` in f64 in the reference's order, rounding
//! once. Its int8 activations are internal, so only the outputs are compared.
//!
//! **On the GPU**, each case checks, in order:
//! 1. **The activation scales `s`, bit for bit**, read from the GPU's scratch buffer, against
//!    `bitlinear_act_scale` (the GPU computes the correctly rounded quotient by integer long
//!    division, so no difference is allowed).
//! 2. **The int8 activations**, read from scratch, against `bitlinear_quantize`. With `s`
//!    equal, `x · s` is one correctly rounded f32 multiply on both sides (WGSL requires it)
//!    and `round` is half-to-even on both, so they must agree; a difference of one is
//!    tolerated only where `x · s` lies within one ulp of a .5 boundary (a device whose
//!    multiply were off by an ulp there), and the outputs' tolerance then grows by that
//!    element's `|d · t| / s`. The number of such flips is reported; on lavapipe it is 0.
//! 3. **The outputs.** With *exact* data (integer activations with max |x| = 127, so
//!    `s = 1` and `q = x`; block scales `±j/8`; output scales powers of two; k ≤ 2048) every
//!    product and partial sum is a multiple of 1/8 below 2²¹, exactly representable, so the
//!    integer sums and the scaling are exact on both engines: the outputs must be equal
//!    (±0 compare equal: the sign of an exactly-zero sum depends on where a sum starts).
//!    With *random* data only the final float scaling may differ:
//!    `|gpu − ref| ≤ γ_N · B · |scale| / s + 8u · |ref|` (+ the flips of step 2), where B = Σ_i |d_b(i)| · |q_i| · |t_i| bounds the terms the GPU adds in f32 (at most
//!    N = k/16 + 1 of them: one per 16-element code word in `gemv`, one per 256-element
//!    block in `tiled`; each exact, or rounded once), γ_N = N·u/(1 − N·u), u = 2⁻²⁴ (any
//!    summation order: Higham §3.1); 8u covers the product by I2_S's d (u), the division
//!    by s (WGSL allows 2.5 ulp: 5u), the product by the output scale (u) and the
//!    reference's one rounding of its f64 result (u).

use proptest::prelude::*;
use purebee_engine_gpu::{GpuEngine, ScratchKey};
use purebee_isa::ops::{bitlinear_act_scale, bitlinear_quantize};
use purebee_isa::{DType, Engine, Program};
use purebee_memory::quant::QuantMatrix;
use purebee_memory::{HostTensor, Shape};
use purebee_tests::differential::{f32s, gpu_tests_skipped, on_cpu_levels, pair, portable_pair, Pair};
use purebee_tests::rng::SplitMix64;

const FORMATS: [DType; 3] = [DType::TQ1_0, DType::TQ2_0, DType::I2_S];

const U: f64 = 1.0 / (1u64 << 24) as f64;

/// Exact data (see the module docs) or random data.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Data {
    Exact,
    Random,
}

/// The f16 bits of `v`, which must be a normal f16 value (exactly representable).
fn f16_exact(v: f32) -> u16 {
    let b = v.to_bits();
    let exp = ((b >> 23) & 0xff) as i32 - 127 + 15;
    assert!((1..31).contains(&exp) && b & 0x1fff == 0, "{v} is not an exact normal f16");
    (((b >> 16) & 0x8000) | ((exp as u32) << 10) | ((b >> 13) & 0x3ff)) as u16
}

/// A weight scale: exact data ±j/8 (j in 1..=16: at most 4 significant bits); random
/// data an f16 of magnitude in [2⁻¹⁰, 2) (TQ) or an f32 in ±[0.01, 2) (I2_S).
fn weight_scale(rng: &mut SplitMix64, data: Data) -> f32 {
    match data {
        Data::Exact => rng.sign() * (1 + rng.below(16)) as f32 / 8.0,
        Data::Random => rng.sign() * rng.range(0.01, 2.0) as f32,
    }
}

/// Random ternary bytes of an `[m, k]` weight: codes from random bytes (TQ2_0 and I2_S
/// codes include 3, which decodes as +2), finite scales.
fn weight_bytes(dtype: DType, m: usize, k: usize, rng: &mut SplitMix64, data: Data) -> Vec<u8> {
    let mut out = Vec::new();
    if dtype == DType::I2_S {
        out.extend((0..m * k / 4).map(|_| rng.next_u64() as u8));
        let s = weight_scale(rng, data);
        for _ in 0..8 {
            out.extend_from_slice(&s.to_le_bytes());
        }
        return out;
    }
    let (len, bytes) = (dtype.block_len(), dtype.block_bytes());
    let scale = |rng: &mut SplitMix64| match data {
        Data::Exact => f16_exact(weight_scale(rng, data)),
        // ±[2^-10, 2): exponent field 5..=15, any mantissa.
        Data::Random => ((rng.below(2) as u16) << 15) | ((5 + rng.below(11) as u16) << 10) | rng.below(1024) as u16,
    };
    // A scale per block, or (as real BitNet files, whose scale is per tensor) one per row,
    // sometimes with one block in the middle that differs.
    let per_row = rng.below(2) == 0;
    let blocks = k / len;
    for _ in 0..m {
        let row_d = scale(rng);
        let odd_one = if blocks > 0 && rng.below(4) == 0 { Some(rng.below(blocks as u64) as usize) } else { None };
        for b in 0..blocks {
            out.extend((0..bytes - 2).map(|_| rng.next_u64() as u8));
            let d = if per_row && odd_one != Some(b) { row_d } else { scale(rng) };
            out.extend_from_slice(&d.to_le_bytes());
        }
    }
    out
}

/// Activations `[n, k]`. Exact: integers in −127..=127 with max |x| = 127 in every row.
/// Random: rows of varied magnitude, some all zero, some below the 1e-5 floor.
fn activations(n: usize, k: usize, rng: &mut SplitMix64, data: Data) -> Vec<f32> {
    let mut x = Vec::with_capacity(n * k);
    for _ in 0..n {
        let start = x.len();
        match data {
            Data::Exact => {
                x.extend((0..k).map(|_| rng.below(255) as f32 - 127.0));
                let i = start + rng.below(k as u64) as usize;
                x[i] = 127.0 * rng.sign();
            }
            Data::Random => {
                let kind = rng.below(10);
                let mag = match kind {
                    0 => 0.0,
                    1 => 1e-6 * rng.range(0.0, 1.0),
                    _ => 2f64.powf(rng.range(-8.0, 6.0)),
                };
                x.extend((0..k).map(|_| (rng.range(-1.0, 1.0) * mag) as f32));
            }
        }
    }
    x
}

/// One BITLINEAR problem.
struct Case {
    dtype: DType,
    n: usize,
    m: usize,
    k: usize,
    x: Vec<f32>,
    w: Vec<u8>,
    scale: Option<f32>,
    data: Data,
    label: String,
}

impl Case {
    fn random(dtype: DType, n: usize, m: usize, k: usize, seed: u64, with_scale: bool, data: Data) -> Case {
        let mut rng = SplitMix64(seed);
        let w = weight_bytes(dtype, m, k, &mut rng, data);
        let x = activations(n, k, &mut rng, data);
        let scale = with_scale.then(|| match data {
            Data::Exact => [0.5, 2.0, -1.0, 0.25][rng.below(4) as usize],
            Data::Random => rng.sign() * rng.range(0.1, 2.0) as f32,
        });
        Case { dtype, n, m, k, x, w, scale, data, label: format!("seed={seed}") }
    }
}

/// `x · s` is within one ulp of a .5 boundary (where a one-ulp error could flip `round`).
fn near_half(x: f32, s: f32) -> bool {
    let p = (x * s).abs();
    let ulp = f32::from_bits(p.to_bits() + 1) - p;
    ((p - p.floor()) - 0.5).abs() <= ulp
}

/// What the engine under test is held to (module docs).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Expect {
    /// The GPU: equal outputs for exact data, the scaling tolerance for random data.
    Bound,
    /// The CPU: the reference's outputs, exactly, for any data.
    Equal,
}

/// The GPU's int8 activations and activation scales of the BITLINEAR in `program` (its
/// scratch buffers).
fn gpu_scratch(gpu: &mut GpuEngine, program: &Program) -> Option<(Vec<u8>, Vec<u8>)> {
    let acts = gpu.read_scratch(program, ScratchKey::BitlinearActivations).expect("activations");
    let scales = gpu.read_scratch(program, ScratchKey::BitlinearScales).expect("scales");
    Some((acts, scales))
}

/// Runs the case on both engines of `pair` and checks s and q (when `scratch` gives the
/// engine's int8 activations and scales) and the outputs (module docs). Returns the number
/// of rounding flips at .5 boundaries.
fn check<E: Engine>(
    pair: &mut Pair<E>,
    c: &Case,
    expect: Expect,
    scratch: impl FnOnce(&mut E, &Program) -> Option<(Vec<u8>, Vec<u8>)>,
) -> Result<usize, String> {
    let (n, m, k) = (c.n, c.m, c.k);
    let what = format!(
        "{} engine: BITLINEAR {} n={n} m={m} k={k} scale={:?} {:?} {}",
        pair.engine.name(),
        c.dtype,
        c.scale,
        c.data,
        c.label
    );
    let shape = |r, cols| Shape::matrix(r, cols).expect("valid shape");
    let mut inputs = vec![
        ("x", HostTensor::from_f32("x", shape(n, k), c.x.clone()).expect("sizes agree")),
        ("w", HostTensor::from_bytes("w", c.dtype, shape(m, k), &c.w).expect("sizes agree")),
    ];
    if let Some(s) = c.scale {
        inputs.push(("scale", HostTensor::from_f32("scale", Shape::vector(1), vec![s]).expect("sizes agree")));
    }
    let (got, reference, seen) = pair.run_inspect(
        &inputs,
        &[],
        |b, name, ids| {
            let out = b.alloc(&name("out"), DType::F32, &[n, m])?;
            b.bitlinear(out, ids[0], ids[1], ids.get(2).copied())?;
            Ok(vec![out])
        },
        scratch,
    );

    // s and q as the ISA defines them.
    let mut s = vec![0f32; n];
    for (r, s) in s.iter_mut().enumerate() {
        let row = &c.x[r * k..(r + 1) * k];
        *s = bitlinear_act_scale(row.iter().fold(0f32, |a, &v| a.max(v.abs())));
    }
    let q: Vec<i8> = (0..n * k).map(|i| bitlinear_quantize(c.x[i], s[i / k])).collect();
    let mut flipped = vec![false; n * k];
    let mut flips = 0;
    if let Some((acts, scales)) = seen {
        // 1. s, bit for bit.
        let engine_s = f32s(&scales);
        for r in 0..n {
            if engine_s[r].to_bits() != s[r].to_bits() {
                return Err(format!("{what}: s of row {r}: got {:e}, expected {:e}", engine_s[r], s[r]));
            }
        }
        // 2. q, equal but for one-off flips at .5 boundaries.
        for i in 0..n * k {
            let r = i / k;
            let g = acts[i] as i8;
            if g != q[i] {
                if (g as i32 - q[i] as i32).abs() == 1 && near_half(c.x[i], s[r]) {
                    flipped[i] = true;
                    flips += 1;
                } else {
                    return Err(format!(
                        "{what}: q of row {r}, element {}: got {g}, expected {} (x = {:e}, s = {:e})",
                        i % k,
                        q[i],
                        c.x[i],
                        s[r]
                    ));
                }
            }
        }
    }
    // 3. The outputs.
    let (got, want) = (f32s(&got[0]), f32s(&reference[0]));
    if got.len() != n * m || want.len() != n * m {
        return Err(format!("{what}: {} outputs, expected {}", got.len(), want.len()));
    }
    let wq = QuantMatrix::new(c.dtype, &c.w, m, k).map_err(|e| e.to_string())?;
    let block = wq.ternary_scale_block().unwrap_or(k);
    let (mut t, mut d) = (vec![0i8; k], vec![0f32; wq.ternary_scales_per_row().unwrap_or(1)]);
    let out_scale = c.scale.map_or(1.0, |v| v.abs() as f64);
    let terms = (k / 16 + 1) as f64;
    let gamma = terms * U / (1.0 - terms * U);
    for j in 0..m {
        wq.ternary_row(j, &mut t, &mut d).map_err(|e| e.to_string())?;
        for r in 0..n {
            let idx = r * m + j;
            let (g, w) = (got[idx], want[idx]);
            let diff = (g as f64 - w as f64).abs();
            let ok = match (expect, c.data) {
                // Bit for bit: the sign of a zero too.
                (Expect::Equal, _) => g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()),
                (Expect::Bound, Data::Exact) => g == w,
                (Expect::Bound, Data::Random) => {
                    let (mut b, mut flip) = (0f64, 0f64);
                    for i in 0..k {
                        let dt = (d[i / block] as f64 * t[i] as f64).abs();
                        b += dt * (q[r * k + i] as f64).abs();
                        if flipped[r * k + i] {
                            flip += dt;
                        }
                    }
                    let scaled = out_scale / s[r] as f64;
                    let bound = gamma * b * scaled + 8.0 * U * (w as f64).abs() + flip * scaled;
                    diff <= bound || (g.is_nan() && w.is_nan())
                }
            };
            if !ok {
                return Err(format!(
                    "{what}: token {r}, row {j} (index {idx}): got {g} ({:#010x}), expected {w} ({:#010x}), \
                     difference {diff:e}",
                    g.to_bits(),
                    w.to_bits()
                ));
            }
        }
    }
    Ok(flips)
}

/// The case on the GPU engine, subgroups or portable: s, q and the outputs within the bound.
fn run(c: &Case, portable: bool) -> Result<(), String> {
    let mut pair = if portable { portable_pair() } else { pair() };
    let subgroups = pair.engine.context().capabilities().subgroups;
    let flips = check(&mut pair, c, Expect::Bound, gpu_scratch).map_err(|e| format!("subgroups={subgroups}: {e}"))?;
    if flips > 0 {
        eprintln!("{} {}: {flips} rounding flips at .5 boundaries", c.dtype, c.label);
    }
    Ok(())
}

/// The case on the CPU engine, every SIMD path: the reference's outputs exactly.
fn run_cpu(c: &Case) -> Result<(), String> {
    on_cpu_levels(|p| check(p, c, Expect::Equal, |_, _| None))
}

/// Row lengths: whole blocks (128 for I2_S, 256 for TQ1_0 / TQ2_0), short (up to 768) or,
/// one case in four, long (3328 to 6912, the 2B's widest rows): `gemv`'s 64 invocations then
/// hold 4 to 7 code words each, more than one batch of four.
fn k_for(dtype: DType) -> BoxedStrategy<usize> {
    let block = if dtype == DType::I2_S { 128 } else { 256 };
    let short = if dtype == DType::I2_S { 1usize..=6 } else { 1usize..=3 };
    let long = (3328 / block)..=(6912 / block);
    prop_oneof![3 => short.prop_map(move |b| block * b), 1 => long.prop_map(move |b| block * b)].boxed()
}

/// (dtype, n, m, k, seed, with_scale, portable); one token half of the time (`gemv`), else
/// 2..=70 (the CPU's few-token path up to 16, then `tiled`, over three 32-token tiles); long rows with at most 40 rows and 4 tokens,
/// which keeps the reference's time short.
fn case() -> impl Strategy<Value = (DType, usize, usize, usize, u64, bool, bool)> {
    (0..FORMATS.len()).prop_flat_map(|f| {
        let dtype = FORMATS[f];
        k_for(dtype).prop_flat_map(move |k| {
            let (n, m) = if k > 768 {
                (prop_oneof![Just(1usize), 2usize..=4].boxed(), (1usize..=40).boxed())
            } else {
                (prop_oneof![Just(1usize), 2usize..=70].boxed(), (1usize..=150).boxed())
            };
            (Just(dtype), n, m, Just(k), any::<u64>(), any::<bool>(), any::<bool>())
        })
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn exact_integer_sums_match_bit_for_bit((dtype, n, m, k, seed, with_scale, portable) in case()) {
        if gpu_tests_skipped() { return Ok(()); }
        run(&Case::random(dtype, n, m, k, seed, with_scale, Data::Exact), portable).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn random_activations_match_within_the_scaling_tolerance(
        (dtype, n, m, k, seed, with_scale, portable) in case()
    ) {
        if gpu_tests_skipped() { return Ok(()); }
        run(&Case::random(dtype, n, m, k, seed, with_scale, Data::Random), portable).map_err(TestCaseError::fail)?;
    }
}

// The same cases on the CPU engine (the GPU's `portable` flag is not used), which must
// match the reference bit for bit on both kinds of data.
proptest! {
    #![proptest_config(ProptestConfig { cases: 192, ..ProptestConfig::default() })]

    #[test]
    fn cpu_exact_integer_sums_match_bit_for_bit((dtype, n, m, k, seed, with_scale, _portable) in case()) {
        run_cpu(&Case::random(dtype, n, m, k, seed, with_scale, Data::Exact)).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn cpu_random_activations_match_bit_for_bit((dtype, n, m, k, seed, with_scale, _portable) in case()) {
        run_cpu(&Case::random(dtype, n, m, k, seed, with_scale, Data::Random)).map_err(TestCaseError::fail)?;
    }
}

#[test]
fn every_format_kernel_path_and_output_scale() {
    if gpu_tests_skipped() {
        return;
    }
    for dtype in FORMATS {
        // I2_S: 384 columns, one and a half 256-column tiles.
        let k = if dtype == DType::I2_S { 384 } else { 512 };
        // One token, a few (the packed one-token kernels per token), many (unpacked tiles).
        for n in [1, 5, 37] {
            for with_scale in [false, true] {
                for portable in [false, true] {
                    for data in [Data::Exact, Data::Random] {
                        let c = Case::random(dtype, n, 67, k, 1000 + n as u64, with_scale, data);
                        run(&c, portable).unwrap_or_else(|e| panic!("{e}"));
                    }
                }
            }
        }
    }
}

#[test]
fn every_format_kernel_path_and_output_scale_on_the_cpu() {
    for dtype in FORMATS {
        let k = if dtype == DType::I2_S { 384 } else { 512 };
        for n in [1, 37] {
            for with_scale in [false, true] {
                for data in [Data::Exact, Data::Random] {
                    let c = Case::random(dtype, n, 67, k, 1000 + n as u64, with_scale, data);
                    run_cpu(&c).unwrap_or_else(|e| panic!("{e}"));
                }
            }
        }
    }
}

/// 65537 rows (more than one grid dimension of quantize workgroups), one large element
/// each: random finite bit patterns of both signs, and the edges: 0, subnormals, the 1e-5
/// floor and its neighbours, 127, the largest f32.
fn across_the_f32_range() -> Case {
    let (n, k) = (65_537, 128);
    let eps = 1e-5f32.to_bits();
    let mut special: Vec<f32> = vec![0.0, -0.0, 1.0, 127.0, -127.0, f32::MAX, -f32::MAX, f32::MIN_POSITIVE, 1e-40];
    special.extend([eps - 1, eps, eps + 1, 0x7f7f_fffe].map(f32::from_bits));
    let mut rng = SplitMix64(5);
    let mut x = vec![0f32; n * k];
    for r in 0..n {
        let a = special.get(r).copied().unwrap_or_else(|| {
            let bits = rng.next_u64() as u32 & 0x7fff_ffff;
            f32::from_bits(bits.min(0x7f7f_ffff)) * rng.sign()
        });
        x[r * k + (r % k)] = a;
        // A smaller neighbour, so that rows are not one-hot.
        x[r * k + (r + 1) % k] = a * 0.375;
    }
    let mut rng = SplitMix64(6);
    let w = weight_bytes(DType::I2_S, 3, k, &mut rng, Data::Random);
    Case { dtype: DType::I2_S, n, m: 3, k, x, w, scale: None, data: Data::Random, label: "range".into() }
}

#[test]
fn activations_across_the_f32_range_on_the_cpu() {
    // Only the outputs are visible on the CPU; they must be the reference's.
    run_cpu(&across_the_f32_range()).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn activation_scale_is_correctly_rounded_across_the_f32_range() {
    if gpu_tests_skipped() {
        return;
    }
    run(&across_the_f32_range(), false).unwrap_or_else(|e| panic!("{e}"));
}

/// NaN is ignored by the absolute maximum and quantizes to 0; an infinite maximum makes
/// s = 127 / inf = 0, every q 0, and the outputs 0 / 0 = NaN on both engines. Calls `run`
/// with each case.
fn non_finite_activations(mut run: impl FnMut(&Case)) {
    let k = 256;
    let mut rng = SplitMix64(11);
    let mut x = activations(4, k, &mut rng, Data::Random);
    x[3] = f32::NAN;
    x[k + 5] = f32::INFINITY;
    x[2 * k + 7] = f32::NEG_INFINITY;
    x[2 * k + 8] = f32::NAN;
    x[3 * k..4 * k].fill(f32::NAN);
    for dtype in [DType::TQ2_0, DType::I2_S] {
        for n in [1, 4] {
            let w = weight_bytes(dtype, 5, k, &mut rng, Data::Random);
            let c = Case {
                dtype,
                n,
                m: 5,
                k,
                x: x[..n * k].to_vec(),
                w,
                scale: Some(0.5),
                data: Data::Random,
                label: "non-finite".into(),
            };
            run(&c);
        }
    }
}

#[test]
fn non_finite_activations_quantize_as_the_reference() {
    if gpu_tests_skipped() {
        return;
    }
    non_finite_activations(|c| {
        run(c, false).unwrap_or_else(|e| panic!("{e}"));
        run(c, true).unwrap_or_else(|e| panic!("{e}"));
    });
}

#[test]
fn non_finite_activations_give_the_references_outputs_on_the_cpu() {
    non_finite_activations(|c| run_cpu(c).unwrap_or_else(|e| panic!("{e}")));
}

#[test]
fn rows_of_zero_length_give_zero() {
    // k = 0 (no blocks): q is empty, s = 127 / 1e-5, every output 0. GPU only: the
    // reference engine derives the token count from x's length and fails on k = 0.
    if gpu_tests_skipped() {
        return;
    }
    use purebee_isa::{Engine, ProgramBuilder};
    let mut p = pair();
    for dtype in FORMATS {
        for n in [1, 3] {
            let gpu = &mut p.engine;
            let tag = format!("k0_{dtype}_{n}");
            let w = weight_bytes(dtype, 4, 0, &mut SplitMix64(1), Data::Random);
            let empty = HostTensor::zeros("x", DType::F32, Shape::matrix(n, 0).expect("shape")).expect("empty");
            let x = gpu.memory_mut().insert(&format!("{tag}.x"), empty).expect("unique");
            let w = HostTensor::from_bytes("w", dtype, Shape::matrix(4, 0).expect("shape"), &w).expect("sizes");
            let wt = gpu.memory_mut().insert(&format!("{tag}.w"), w).expect("unique");
            let mut b = ProgramBuilder::new(&tag, gpu.memory_mut());
            let out = b.alloc(&format!("{tag}.out"), DType::F32, &[n, 4]).expect("declares");
            b.grid_write(out, vec![0xffu8; n * 4 * 4].into()).expect("writes");
            b.bitlinear(out, x, wt, None).expect("valid");
            let program = b.finish();
            gpu.execute(&program, &[]).expect("runs");
            let got = f32s(&gpu.read(out).expect("reads"));
            assert!(got.iter().all(|&v| v == 0.0), "{dtype} n={n}: {got:?}");
        }
    }
}

/// The file-layout bytes `a` and `b` of a ternary weight decode to the same values.
fn same_values(dtype: DType, m: usize, k: usize, a: &[u8], b: &[u8]) -> bool {
    let (Ok(qa), Ok(qb)) = (QuantMatrix::new(dtype, a, m, k), QuantMatrix::new(dtype, b, m, k)) else { return false };
    let (mut ra, mut rb) = (vec![0f32; k], vec![0f32; k]);
    (0..m).all(|j| {
        qa.dequantize_row(j, &mut ra).is_ok()
            && qb.dequantize_row(j, &mut rb).is_ok()
            && ra.iter().zip(&rb).all(|(x, y)| x.to_bits() == y.to_bits())
    })
}

/// Ternary tensors written by GRID_WRITE (an instruction, or the host's Engine::write) and
/// read back by GRID_READ on the engine under test (the GPU repacks them, and rebuilds the
/// file layout to read them). TQ2_0 and I2_S come back byte for byte (I2_S's trailer holds
/// its scale 8 times, as weight_bytes writes it); random TQ1_0 bytes are not all canonical
/// base-3 encodings, so they must decode equal. BITLINEAR on the written weight must give
/// the reference's outputs exactly (exact data).
fn ternary_weights_read_back<E: Engine>(pair: &mut Pair<E>) -> Result<(), String> {
    use purebee_isa::ProgramBuilder;
    let engine = pair.engine.name();
    let mut rng = SplitMix64(21);
    for dtype in FORMATS {
        let (n, m, k) = (3, 5, if dtype == DType::I2_S { 384 } else { 512 });
        let w = weight_bytes(dtype, m, k, &mut rng, Data::Exact);
        let x = activations(n, k, &mut rng, Data::Exact);
        let same = |back: &[u8]| if dtype == DType::TQ1_0 { same_values(dtype, m, k, back, &w) } else { back == w };

        // GRID_WRITE as an instruction, then BITLINEAR on the written weight.
        let inputs = [("x", HostTensor::from_f32("x", Shape::matrix(n, k).expect("shape"), x).expect("sizes"))];
        let data: std::sync::Arc<[u8]> = w.clone().into();
        let (got, reference) = pair.run(&inputs, &[], |b, name, ids| {
            let wt = b.alloc(&name("w"), dtype, &[m, k])?;
            b.grid_write(wt, data.clone())?;
            let out = b.alloc(&name("out"), DType::F32, &[n, m])?;
            b.bitlinear(out, ids[0], wt, None)?;
            Ok(vec![out, wt])
        });
        assert_eq!(reference[1], w, "{dtype}: the reference engine reads back what was written");
        if !same(&got[1]) {
            return Err(format!("{engine} engine: {dtype}: GRID_WRITE then GRID_READ"));
        }
        if f32s(&got[0]) != f32s(&reference[0]) {
            return Err(format!(
                "{engine} engine: {dtype}: BITLINEAR on a GRID_WRITE weight: got {:?}, expected {:?}",
                f32s(&got[0]),
                f32s(&reference[0])
            ));
        }

        // Engine::write from the host.
        let e = &mut pair.engine;
        let name = format!("host_written_{dtype}");
        let mut b = ProgramBuilder::new("alloc", e.memory_mut());
        let id = b.alloc(&name, dtype, &[m, k]).expect("declares");
        let alloc = b.finish();
        e.execute(&alloc, &[]).expect("allocates");
        e.write(id, &w).expect("writes");
        let back = e.read(id).expect("reads");
        if !same(&back) {
            return Err(format!("{engine} engine: {dtype}: Engine::write then Engine::read"));
        }
        let mut b = ProgramBuilder::new("free", e.memory_mut());
        b.free(id).expect("live");
        let free = b.finish();
        e.execute(&free, &[]).expect("frees");
    }
    Ok(())
}

#[test]
fn ternary_weights_written_by_a_program_or_the_host_read_back_in_the_file_layout() {
    if gpu_tests_skipped() {
        return;
    }
    ternary_weights_read_back(&mut pair()).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn ternary_weights_written_by_a_program_or_the_host_read_back_in_the_file_layout_on_the_cpu() {
    on_cpu_levels(ternary_weights_read_back).unwrap_or_else(|e| panic!("{e}"));
}

/// TQ2_0 rows whose blocks share one negative scale and whose two blocks' sums cancel
/// (second block's trits the negation of the first's, activations repeated): the total is
/// zero and the reference's order gives +0, while the shortcut's `d · 0` would give −0.
/// Decode (one token) and prefill (five), every SIMD path, bit for bit.
#[test]
fn a_zero_total_under_one_negative_scale_on_the_cpu() {
    let (m, k) = (3, 512);
    let d = half::f16::from_f32(-0.75).to_bits();
    let mut w = Vec::new();
    for j in 0..m {
        let first: Vec<u8> = (0..64).map(|i| [0x00u8, 0x14, 0x86, 0x21][(i + j) % 4]).collect();
        // Codes c ↦ 2 − c (all codes here are 0, 1 or 2): trits t ↦ −t.
        let mirror = first.iter().map(|&b| (0..4).fold(0u8, |a, g| a | (2 - ((b >> (2 * g)) & 3)) << (2 * g)));
        w.extend_from_slice(&first);
        w.extend_from_slice(&d.to_le_bytes());
        w.extend(mirror);
        w.extend_from_slice(&d.to_le_bytes());
    }
    for n in [1, 5] {
        let x: Vec<f32> = (0..n * k).map(|i| ((i % 256) as f32 * 0.37).sin() * (1 + i / k) as f32).collect();
        let c = Case {
            dtype: DType::TQ2_0,
            n,
            m,
            k,
            x,
            w: w.clone(),
            scale: None,
            data: Data::Random,
            label: "zero".into(),
        };
        run_cpu(&c).unwrap_or_else(|e| panic!("{e}"));
    }
}
