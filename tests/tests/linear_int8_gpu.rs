//! LINEAR with `LinearActivations::Int8Blocks` on the GPU engine against the reference
//! engine: F32 weights over every row length 1..=300 (blocks of 32 and a shorter last
//! block), Q4_0, Q4_1 and Q8_0 over whole blocks, one token (`gemv_rows`, and `gemv` past
//! 2048 columns) and more (`tiled`; `tiled_int8` over Q4_0, Q4_1 and Q8_0), odd row counts,
//! subgroup and portable reductions,
//! weights bound as row windows, and the kernels a GPU chooses (`gemv` on short rows, whose
//! one-token Q4_0, Q4_1 and Q8_0 products round their own x: `linear.wgsl`'s `x_block`).
//!
//! Three checks per case:
//! - **The rounded activations, exactly.** The scratch buffer
//!   ([`ScratchKey::LinearActivations`]) must hold the ISA's own `quantize_blocks` codes `q`
//!   and scales `s_b`, bit for bit, and, where a product reads it (F32 weights; the Q4_0,
//!   Q4_1 and Q8_0 products read only the codes and scales, so the rounding skips it there),
//!   `x̂ = q / s_b` correctly rounded to f32.
//! - **The outputs, within the summation's error.** The reference sums each block's
//!   `q_i · w_i` exactly in f64 and divides by `s_b`. The GPU's products over F32 weights
//!   (`gemv_rows`, `gemv`, `tiled`) sum `x̂_i · w_i` in f32 in their own order (each `x̂_i`
//!   one rounding from `q_i / s_b`): `|gpu − ref| ≤ γ_{k+2} · Σ_i |x̂_i · w_i| + u · |ref|`
//!   (u = 2⁻²⁴, γ_j = j·u / (1 − j·u)), the bound of the F32 LINEAR tests, one more rounding
//!   per term included. Its products over Q4_0, Q4_1 and Q8_0 weights take each block as an
//!   exact integer sum, scaled once (`linear.wgsl`'s `dot_blocks`, and `tiled_int8`'s
//!   `block_terms` for several tokens): Q8_0
//!   `d·Σqc / s_b` and Q4_0 `d·Σq(c − 8) / s_b` have one product and one division (WGSL's,
//!   within 2.5 ulp) per block on an exact sum of the terms, inside the same bound; Q4_1's
//!   `(d·Σqc + m·Σq) / s_b` splits the block into two parts whose magnitudes can exceed
//!   `|Σ q·w|` (at most `Σ|q|·(|w| + |m|)` and `Σ|q|·|m|`), so there the bound is tests/
//!   linear.rs's for that form: `γ_{k+6} · Σ_i |x̂_i| · (|w_i| + 2|m_b|) + u · |ref|`.
//! - **Exact data, exactly.** Blocks whose maximum is 63.5 (so `s_b = 2` and every
//!   `x̂ = q / 2` is exact) of quarter-integers (so half of the products `x · s` are ties,
//!   which must round to even) against integer weights: every sum is exact in any order.
//!
//! Set `PUREBEE_SKIP_GPU_TESTS=1` to skip them where no wgpu adapter exists.

use purebee_engine_gpu::{GpuEngine, GpuOptions, ScratchKey};
use purebee_engine_ref::RefEngine;
use purebee_isa::ops::{quantize_blocks, LinearActivations, LINEAR_ACT_BLOCK};
use purebee_isa::{DType, Engine, Program, ProgramBuilder, TensorId};
use purebee_memory::quant::QuantMatrix;
use purebee_memory::{HostTensor, Shape};
use purebee_tests::differential::{gpu_tests_skipped, new_gpu_engine};
use purebee_tests::rng::SplitMix64;

const U: f64 = 1.0 / (1u64 << 24) as f64;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Data {
    /// Random values, each block of its own magnitude (2⁻¹² .. 2⁸), some blocks all zero,
    /// and random weights.
    Random,
    /// Quarter-integers in [−63.5, 63.5] with ±63.5 in every block, and integer weights:
    /// every output exact.
    Exact,
}

/// The f16 bits of a normal value or zero, exactly.
fn f16_bits(v: f32) -> [u8; 2] {
    let h = half::f16::from_f32(v);
    assert_eq!(h.to_f32(), v, "{v} is not an exact f16");
    h.to_bits().to_le_bytes()
}

/// The bytes of an `[m, k]` weight of `dtype` (F32, Q4_0, Q4_1 or Q8_0).
fn weight_bytes(dtype: DType, m: usize, k: usize, rng: &mut SplitMix64, data: Data) -> Vec<u8> {
    let mut out = Vec::new();
    if dtype == DType::F32 {
        for _ in 0..m * k {
            let v = match data {
                Data::Random => (rng.range(-1.0, 1.0) * 2f64.powf(rng.range(-8.0, 3.0))) as f32,
                Data::Exact => rng.below(17) as f32 - 8.0,
            };
            out.extend_from_slice(&v.to_le_bytes());
        }
        return out;
    }
    let scale = |rng: &mut SplitMix64| match data {
        Data::Random => f16_bits(half::f16::from_f64(rng.range(-2.0, 2.0)).to_f32()),
        Data::Exact => f16_bits(1.0),
    };
    for _ in 0..m * k / dtype.block_len() {
        let mut block: Vec<u8> = (0..dtype.block_bytes()).map(|_| rng.below(256) as u8).collect();
        block[..2].copy_from_slice(&scale(rng));
        if dtype == DType::Q4_1 {
            let min = match data {
                Data::Random => half::f16::from_f64(rng.range(-4.0, 4.0)).to_f32(),
                Data::Exact => rng.below(9) as f32 - 4.0,
            };
            block[2..4].copy_from_slice(&f16_bits(min));
        }
        out.extend_from_slice(&block);
    }
    out
}

/// The min `m` of the Q4_1 block holding element `i` of row `j` of a `[·, k]` weight.
fn q4_1_min(wbytes: &[u8], k: usize, j: usize, i: usize) -> f64 {
    let at = (j * k + i) / 32 * 20 + 2;
    half::f16::from_le_bytes([wbytes[at], wbytes[at + 1]]).to_f64()
}

/// `n` rows of `k` activations.
fn activations(n: usize, k: usize, rng: &mut SplitMix64, data: Data) -> Vec<f32> {
    let mut x = Vec::with_capacity(n * k);
    for _ in 0..n {
        let mut row: Vec<f32> = Vec::with_capacity(k);
        for b0 in (0..k).step_by(LINEAR_ACT_BLOCK) {
            let len = LINEAR_ACT_BLOCK.min(k - b0);
            match data {
                Data::Random => {
                    let zero = rng.below(16) == 0;
                    let mag = 2f64.powf(rng.range(-12.0, 8.0));
                    row.extend((0..len).map(|_| if zero { 0.0 } else { (rng.range(-1.0, 1.0) * mag) as f32 }));
                }
                Data::Exact => {
                    row.extend((0..len).map(|_| (rng.below(509) as f32 - 254.0) / 4.0));
                    let at = b0 + rng.below(len as u64) as usize;
                    row[at] = if rng.below(2) == 0 { 63.5 } else { -63.5 };
                }
            }
        }
        x.extend(row);
    }
    x
}

/// What one engine made of one LINEAR: the outputs, and on the GPU the rounded activations.
struct Run {
    out: Vec<f32>,
    xhat: Option<Vec<f32>>,
}

/// Runs `out = LINEAR(x, w, Int8Blocks)` (and, with `also_f32`, a second LINEAR of the same
/// operands with F32 activations, whose outputs follow) on `engine`, then frees everything.
fn run_on<E: Engine>(
    engine: &mut E,
    case: &str,
    x: &HostTensor,
    w: &HostTensor,
    (n, m): (usize, usize),
    also_f32: bool,
    scratch: impl Fn(&mut E, &Program) -> Option<Vec<f32>>,
) -> Run {
    let xi = engine.memory_mut().insert(&format!("{case}.x"), x.clone()).expect("unique name");
    let wi = engine.memory_mut().insert(&format!("{case}.w"), w.clone()).expect("unique name");
    let mut b = ProgramBuilder::new(case, engine.memory_mut());
    let mut outs: Vec<TensorId> = Vec::new();
    let out = b.alloc(&format!("{case}.out"), DType::F32, &[n, m]).expect("alloc");
    b.linear_with(out, xi, wi, LinearActivations::Int8Blocks).expect("LINEAR builds");
    outs.push(out);
    if also_f32 {
        let out = b.alloc(&format!("{case}.out_f32"), DType::F32, &[n, m]).expect("alloc");
        b.linear(out, xi, wi).expect("LINEAR builds");
        outs.push(out);
    }
    let program = b.finish();
    engine.execute(&program, &[]).unwrap_or_else(|e| panic!("{} engine: {e}", engine.name()));
    let mut got = Vec::new();
    for &o in &outs {
        got.extend(engine.read_f32(o).unwrap_or_else(|e| panic!("{} engine: {e}", engine.name())));
    }
    let xhat = scratch(engine, &program);
    let mut b = ProgramBuilder::new("free", engine.memory_mut());
    for id in [xi, wi].into_iter().chain(outs) {
        b.free(id).expect("live");
    }
    let free = b.finish();
    engine.execute(&free, &[]).unwrap_or_else(|e| panic!("{} engine: freeing: {e}", engine.name()));
    Run { out: got, xhat }
}

/// The engine that chooses its kernels as a GPU does, on any adapter: its one-token Q4_0,
/// Q4_1 and Q8_0 products round their own x (no scratch buffer is written).
const GPU_KERNELS: &str = "gpu-kernels";

/// The GPU engines under test (subgroups where the adapter has them, portable, one that
/// binds at most 256 KiB at once, and [`GPU_KERNELS`]), or none when the user opted out.
fn engines() -> Vec<(&'static str, GpuEngine)> {
    if gpu_tests_skipped() {
        return vec![];
    }
    let new = |o: GpuOptions| new_gpu_engine(&o);
    let default = new(GpuOptions::default());
    eprintln!("GPU tests on {} ({:?})", default.context().describe(), default.context().capabilities());
    vec![
        ("default", default),
        ("portable", new(GpuOptions { use_subgroups: false, ..GpuOptions::default() })),
        ("windowed", new(GpuOptions { max_binding: Some(256 * 1024), ..GpuOptions::default() })),
        (GPU_KERNELS, new(GpuOptions { gpu_kernels: true, ..GpuOptions::default() })),
    ]
}

/// The ISA's rounding of x [n, k]: `q / s_b` per element, as f32 (correctly rounded) and as
/// f64 (exact), and the words the scratch buffer holds after x̂ (act_quant.wgsl's layout:
/// each block's 32 codes four to a word, zeros past k, then each block's scale bits).
struct Rounded {
    xhat: Vec<f32>,
    exact: Vec<f64>,
    codes_and_scales: Vec<u32>,
}

fn rounded(x: &[f32], n: usize, k: usize) -> Rounded {
    let (mut xhat, mut exact) = (Vec::with_capacity(n * k), Vec::with_capacity(n * k));
    let (mut codes, mut scales) = (Vec::new(), Vec::new());
    for row in x.chunks(k.max(1)).take(n) {
        let mut q = vec![0i8; k];
        let mut s = vec![0f32; k.div_ceil(LINEAR_ACT_BLOCK)];
        quantize_blocks(row, &mut q, &mut s);
        for (i, &qi) in q.iter().enumerate() {
            let sb = s[i / LINEAR_ACT_BLOCK];
            xhat.push(qi as f32 / sb);
            exact.push(qi as f64 / sb as f64);
        }
        for block in q.chunks(LINEAR_ACT_BLOCK) {
            let mut bytes = [0u8; LINEAR_ACT_BLOCK];
            for (b, &qi) in bytes.iter_mut().zip(block) {
                *b = qi as u8;
            }
            codes.extend(bytes.chunks_exact(4).map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]])));
        }
        scales.extend(s.iter().map(|v| v.to_bits()));
    }
    codes.extend(scales);
    Rounded { xhat, exact, codes_and_scales: codes }
}

struct Case {
    dtype: DType,
    n: usize,
    m: usize,
    k: usize,
    seed: u64,
    data: Data,
}

/// One case on one GPU engine and the reference engine; every check of the module doc.
fn check(gpu: &mut GpuEngine, which: &str, reference: &mut RefEngine, c: &Case, id: u64, also_f32: bool) {
    let Case { dtype, n, m, k, seed, data } = *c;
    let what = format!("{which} GPU engine: LINEAR Int8Blocks {dtype} n={n} m={m} k={k} seed={seed} {data:?}");
    let mut rng = SplitMix64(seed);
    let wbytes = weight_bytes(dtype, m, k, &mut rng, data);
    let xs = activations(n, k, &mut rng, data);
    let shape = |r, c| Shape::matrix(r, c).expect("valid shape");
    let x = HostTensor::from_f32("x", shape(n, k), xs.clone()).expect("sizes agree");
    let w = HostTensor::from_bytes("w", dtype, shape(m, k), &wbytes).expect("sizes agree");
    let case = format!("case{id}");
    let int8_products = dtype != DType::F32;
    // A GPU's kernels (GPU_KERNELS, and every engine on a GPU) round x in the one-token
    // products where its row is short enough (linear.rs: rounds_in_product), leaving no
    // scratch buffer: then only the outputs are checked.
    let may_round_in_product = n == 1 && int8_products && !gpu.context().capabilities().cpu;
    let got = run_on(gpu, &case, &x, &w, (n, m), also_f32, |g, p| {
        let bytes = match g.read_scratch(p, ScratchKey::LinearActivations) {
            Ok(bytes) => bytes,
            Err(_) if may_round_in_product => return None,
            Err(e) => panic!("{which}: the rounded activations: {e}"),
        };
        Some(bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect())
    });
    let want = run_on(reference, &case, &x, &w, (n, m), also_f32, |_, _| None);
    assert_eq!(got.out.len(), want.out.len(), "{what}: output count");

    // The rounded activations, bit for bit: the codes and scales always, x̂ where a product
    // reads it (the F32 variant of `also_f32` is a product of x, not of the scratch).
    let r = rounded(&xs, n, k);
    if let Some(scratch) = got.xhat {
        let (gx, gcs) = scratch.split_at(n * k);
        let gcs: Vec<u32> = gcs.iter().map(|v| v.to_bits()).collect();
        assert_eq!(gcs.get(..r.codes_and_scales.len()), Some(&r.codes_and_scales[..]), "{what}: codes and scales");
        if !int8_products {
            for (i, (&g, &e)) in gx.iter().zip(&r.xhat).enumerate() {
                assert!(g.to_bits() == e.to_bits(), "{what}: x̂[{i}] (x = {}) is {g}, expected {e}", xs[i]);
            }
        }
    }
    let xhat_exact = r.exact;

    // The outputs.
    let wq = QuantMatrix::new(dtype, &wbytes, m, k).expect("weight decodes");
    let mut row = vec![0f32; k];
    let gamma = |terms: usize| terms as f64 * U / (1.0 - terms as f64 * U);
    for (variant, acts) in [("Int8Blocks", &xhat_exact), ("F32", &xs.iter().map(|&v| v as f64).collect())]
        .into_iter()
        .take(1 + usize::from(also_f32))
    {
        let base = if variant == "F32" { n * m } else { 0 };
        for j in 0..m {
            wq.dequantize_row(j, &mut row).expect("row decodes");
            for t in 0..n {
                let i = base + t * m + j;
                let (g, r) = (got.out[i], want.out[i]);
                let acts = &acts[t * k..(t + 1) * k];
                let sum_abs: f64 = acts.iter().zip(&row).map(|(&a, &b)| (a * b as f64).abs()).sum();
                // Q4_1's integer blocks: Σ |x̂_i| · (|w_i| + 2|m_b|) (the module doc).
                let split_blocks = dtype == DType::Q4_1 && variant == "Int8Blocks";
                let q41_abs: f64 = if split_blocks {
                    acts.iter()
                        .zip(&row)
                        .enumerate()
                        .map(|(i, (&a, &b))| a.abs() * (b.abs() as f64 + 2.0 * q4_1_min(&wbytes, k, j, i).abs()))
                        .sum()
                } else {
                    0.0
                };
                let bound = match data {
                    Data::Exact if variant == "Int8Blocks" => {
                        // Halves below 2²³: every partial sum is exact, in any order.
                        assert!(sum_abs < (1 << 23) as f64, "{what}: exact data too large ({sum_abs})");
                        0.0
                    }
                    _ if split_blocks => gamma(k + 6) * q41_abs + U * (r as f64).abs(),
                    _ => gamma(k + 2) * sum_abs + U * (r as f64).abs(),
                };
                let diff = (g as f64 - r as f64).abs();
                assert!(
                    diff <= bound,
                    "{what} ({variant} output): token {t}, row {j}: got {g}, expected {r}, difference {diff:e}, \
                     bound {bound:e}"
                );
            }
        }
    }
}

/// Every shape of the module doc on every GPU engine, both kinds of data.
#[test]
fn int8_blocks_match_the_reference() {
    let mut engines = engines();
    let mut reference = RefEngine::new();
    let mut cases = Vec::new();
    // F32 weights: every row length 1..=300 (each with one token or 37, odd row counts),
    // and one past GEMV_ROWS_MAX_K.
    for k in (1..=300).chain([2100]) {
        for n in [1, 37] {
            let m = [67, 7, 1, 33][k % 4];
            cases.push((DType::F32, n, m, k));
        }
    }
    for dtype in [DType::Q4_0, DType::Q4_1, DType::Q8_0] {
        for k in [32, 64, 96, 288, 2080] {
            for (n, m) in [(1, 67), (33, 5), (2, 1)] {
                cases.push((dtype, n, m, k));
            }
        }
    }
    let mut id = 0;
    for (which, gpu) in &mut engines {
        for (ci, &(dtype, n, m, k)) in cases.iter().enumerate() {
            // The windowed engine only where the weight spans windows (below).
            if *which == "windowed" {
                continue;
            }
            for data in [Data::Random, Data::Exact] {
                id += 1;
                let c = Case { dtype, n, m, k, seed: 1000 + ci as u64, data };
                check(gpu, which, &mut reference, &c, id, ci % 5 == 0);
            }
        }
    }
    // Weights over 256 KiB on the windowed engine: several dispatches of the product after
    // one rounding dispatch.
    for (which, gpu) in engines.iter_mut().filter(|(w, _)| *w == "windowed") {
        for (dtype, n, m, k) in [(DType::F32, 3, 1100, 64), (DType::F32, 1, 1100, 65), (DType::Q8_0, 8, 8000, 32)] {
            for data in [Data::Random, Data::Exact] {
                id += 1;
                let c = Case { dtype, n, m, k, seed: 7 + id, data };
                check(gpu, which, &mut reference, &c, id, true);
            }
        }
    }
}

/// Special values as the ISA defines them: a NaN element is ignored by the maximum and
/// rounds to 0; an infinite one makes its block's scale 0, so that block's `x̂` (and every
/// output of its row) is NaN, as the reference's 0 / 0; the other rows are unaffected.
#[test]
fn int8_blocks_nan_and_infinity() {
    let mut engines = engines();
    let mut reference = RefEngine::new();
    let (n, m, k) = (3, 5, 40);
    let mut xs: Vec<f32> = (0..n * k).map(|i| (i as f32 * 0.37).sin()).collect();
    xs[3] = f32::NAN; // row 0: ignored
    xs[k + 35] = f32::INFINITY; // row 1, second block
    let ws: Vec<f32> = (0..m * k).map(|i| (i as f32 * 0.11).cos()).collect();
    let shape = |r, c| Shape::matrix(r, c).expect("valid shape");
    let x = HostTensor::from_f32("x", shape(n, k), xs.clone()).expect("sizes agree");
    let w = HostTensor::from_f32("w", shape(m, k), ws).expect("sizes agree");
    let want = run_on(&mut reference, "special", &x, &w, (n, m), false, |_, _| None);
    for (which, gpu) in &mut engines {
        let got = run_on(gpu, "special", &x, &w, (n, m), false, |g, p| {
            let bytes = g.read_scratch(p, ScratchKey::LinearActivations).expect("the rounded activations");
            Some(bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect())
        });
        let xhat = got.xhat.expect("GPU scratch");
        assert_eq!(xhat[3], 0.0, "{which}: a NaN element rounds to 0");
        assert!(xhat[k + 32..2 * k].iter().all(|v| v.is_nan()), "{which}: the infinite block is NaN");
        assert!(xhat[k..k + 32].iter().all(|v| v.is_finite()), "{which}: the finite block of that row is finite");
        for (i, (&g, &r)) in got.out.iter().zip(&want.out).enumerate() {
            if r.is_nan() {
                assert!(g.is_nan(), "{which}: output {i} is {g}, expected NaN");
            } else {
                let diff = (g - r).abs();
                assert!(diff <= 1e-5 * (1.0 + r.abs()), "{which}: output {i} is {g}, expected {r}");
            }
        }
        assert!(want.out[m..2 * m].iter().all(|v| v.is_nan()), "the reference's infinite row is NaN");
    }
}

/// The same special values in one token against Q8_0 weights: the integer products, which
/// on [`GPU_KERNELS`] round their own x. A NaN element rounds to 0 (the output stays finite
/// and matches the reference); an infinite one makes its block's scale 0, so every output is
/// NaN, as the reference's 0 / 0.
#[test]
fn int8_blocks_nan_and_infinity_in_one_token_products() {
    let mut engines = engines();
    let mut reference = RefEngine::new();
    let (m, k) = (5, 64);
    let mut rng = SplitMix64(77);
    let wbytes = weight_bytes(DType::Q8_0, m, k, &mut rng, Data::Random);
    let shape = |r, c| Shape::matrix(r, c).expect("valid shape");
    let w = HostTensor::from_bytes("w", DType::Q8_0, shape(m, k), &wbytes).expect("sizes agree");
    // NaNs in two lanes of a word of codes (elements 3 and 8: the last and the first).
    for (special, at) in [(f32::NAN, &[3, 8][..]), (f32::INFINITY, &[40][..])] {
        let mut xs: Vec<f32> = (0..k).map(|i| (i as f32 * 0.37).sin()).collect();
        for &i in at {
            xs[i] = special;
        }
        let x = HostTensor::from_f32("x", shape(1, k), xs).expect("sizes agree");
        let case = format!("special_at_{}", at[0]);
        let want = run_on(&mut reference, &case, &x, &w, (1, m), false, |_, _| None);
        for (which, gpu) in &mut engines {
            let got = run_on(gpu, &case, &x, &w, (1, m), false, |_, _| None);
            for (i, (&g, &r)) in got.out.iter().zip(&want.out).enumerate() {
                if special.is_nan() {
                    assert!(r.is_finite(), "the reference's output {i} with a NaN element is {r}");
                    let diff = (g - r).abs();
                    assert!(diff <= 1e-4 * (1.0 + r.abs()), "{which}: NaN element: output {i} is {g}, expected {r}");
                } else {
                    assert!(r.is_nan() && g.is_nan(), "{which}: infinite element: output {i} is {g}, reference {r}");
                }
            }
        }
    }
}
