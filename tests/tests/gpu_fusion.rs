//! The GPU compiler's fusion pass (`engine-gpu/src/fuse/`): whole programs run fused and
//! unfused, and fused against the reference engine.
//!
//! **Fused vs unfused GPU, bit for bit.** The fused kernels do the same float operations in
//! the same order as the kernels they replace (norm_quant.wgsl is rms_norm.wgsl's
//! arithmetic at rms_norm's workgroup size, then `quantize`'s exact integer maximum and
//! correctly rounded scale; the residual and activation epilogues are the elementwise
//! kernels' operations (elementwise_ops.wgsl); rope_kv.wgsl, and rope_qkv.wgsl on the q/k/v
//! products' own values, are rope.wgsl's rotation (rope_math.wgsl); gemv_multi,
//! gemv_multi_rope and gemv_gated are gemv's per-row sums and reductions;
//! linear_argmax.wgsl computes each row with linear.wgsl's own gemv_total / rows_total and
//! compares with argmax.wgsl's argmax_key; a shared quantization or int8-block rounding is
//! the same one computed once), so a fused program must
//! give exactly the unfused program's bits in every tensor the host can read.
//! Checked on whole BitNet layers (two of them, with ROPE, KV_WRITE and ATTENTION, one
//! token through `gemv` and several through `tiled`, every ternary format, with and without
//! output scales, subgroup and portable kernels), Llama-style layers (LINEAR of F32, F16,
//! Q8_0 and Q4_1 weights, f32 and int8-block activations, random odd shapes, one token and
//! several) with a final norm + LM head + ARGMAX; and
//! one-token LM heads with their ARGMAX (F32, F16, Q8_0 weights, f32 or int8-block
//! activations, `gemv_rows` and `gemv` rows, row windows, tied maxima and NaN logits). The
//! fused norms run both ways: their loops (the default) and their held-row variant
//! (`GpuOptions::held_norm`).
//! Since the unfused kernels are held to the reference by the per-instruction tests, this
//! carries their tolerances over to the fused program. That is on a driver that rounds every
//! float operation as written (lavapipe, CI's driver); a GPU driver may contract `a·b + c`
//! into one FMA differently in the two programs, so there the outputs must agree within a
//! relative L2 distance of 1e-3 (`GPU_DRIVER_REL_L2` says why that bound).
//!
//! **Fused GPU vs the reference engine**, with the per-instruction tolerances:
//! - shared quantization and the residual epilogue on `bitlinear.rs`'s *exact* data
//!   (integer activations with max |x| = 127, block scales ±j/8, power-of-two output
//!   scales, small residuals in multiples of 1/8): every product, sum and add is exact on
//!   both engines, so the outputs must be equal (±0 compare equal);
//! - RMS_NORM + quantization: the normed tensor (kept: it is the program's last write) within
//!   RMS_NORM's tolerance of `rows.rs` (`(depth/2 + 16)·u` relative, depth = ⌈d/64⌉ + 256),
//!   and the int8 activations and scales in the scratch buffers exactly equal to the ISA's
//!   `bitlinear_act_scale` / `bitlinear_quantize` of the GPU's own normed values (as
//!   `bitlinear.rs` checks the unfused `quantize`; a ±1 difference is tolerated only where
//!   `h·s` lies within one ulp of a .5 boundary, as there).
//!
//! - LM head + ARGMAX: the logits within LINEAR's tolerance of `linear.rs` (γ_{k+2}·Σ|x·w| +
//!   u·|ref|, or γ_{k+6}·Σ|x̂·w| + u·|ref| with int8 blocks; NaN where the reference has
//!   NaN), and the id equal to the reference's exactly: the data make the maximum a tie of
//!   identical rows that dominate every other logit by far, so no rounding can move it,
//!   and NaN rows sit around it.
//!
//! - LINEAR's shared rounding and epilogues and the LM head on exact data (integer
//!   activations with 127 in every block, integer weights): equal outputs and id.
//!
//! **Every pattern is fused**: the dispatches of a BitNet layer and of a Llama-style layer,
//! counted with `GpuEngine::dispatched_kernels`, and the LM head's kernels.
//!
//! Case counts are small: lavapipe is slow, and the whole file must stay cheap in CI.

use proptest::prelude::*;
use purebee_engine_gpu::{GpuEngine, GpuOptions, ScratchKey};
use purebee_isa::ops::LINEAR_ACT_BLOCK;
use purebee_isa::ops::{
    bitlinear_act_scale, bitlinear_quantize, quantize_blocks, Attention, LinearActivations, Rope, RopeStyle,
};
use purebee_isa::{DType, IsaError, ParamValue, ProgramBuilder, TensorId, U32Arg};
use purebee_memory::quant::{encode::encode_q8_0_row, QuantMatrix};
use purebee_memory::{HostTensor, Shape};
use purebee_tests::differential::{
    assert_close, f32s, gpu_kernels_pair, gpu_tests_skipped, held_norm_pair, pair_for, u32s, unfused_pair,
    windowed_pair, windowed_unfused_pair, Outputs,
};
use purebee_tests::rng::SplitMix64;

const FORMATS: [DType; 3] = [DType::TQ1_0, DType::TQ2_0, DType::I2_S];

fn matrix(name: &str, rows: usize, cols: usize, v: Vec<f32>) -> HostTensor {
    HostTensor::from_f32(name, Shape::matrix(rows, cols).expect("shape"), v).expect("sizes agree")
}

/// A KV cache of `v`: F32, or (`f16`) F16 of the values rounded.
fn cache(name: &str, rows: usize, cols: usize, v: Vec<f32>, f16: bool) -> HostTensor {
    if !f16 {
        return matrix(name, rows, cols, v);
    }
    let bytes: Vec<u8> = v.iter().flat_map(|&x| half::f16::from_f32(x).to_le_bytes()).collect();
    HostTensor::from_bytes(name, DType::F16, Shape::matrix(rows, cols).expect("shape"), &bytes).expect("sizes agree")
}

fn vector(name: &str, v: Vec<f32>) -> HostTensor {
    HostTensor::from_f32(name, Shape::vector(v.len()), v).expect("sizes agree")
}

/// Random ternary weight bytes `[m, k]` (codes from random bytes; finite scales: f16 in
/// ±[2^-10, 2) for TQ, an f32 in ±[0.01, 2) for I2_S), or with `exact` scales ±j/8.
fn ternary(dtype: DType, m: usize, k: usize, rng: &mut SplitMix64, exact: bool) -> Vec<u8> {
    let mut out = Vec::new();
    if dtype == DType::I2_S {
        out.extend((0..m * k / 4).map(|_| rng.next_u64() as u8));
        let s = if exact {
            rng.sign() * (1 + rng.below(16)) as f32 / 8.0
        } else {
            rng.sign() * rng.range(0.01, 2.0) as f32
        };
        for _ in 0..8 {
            out.extend_from_slice(&s.to_le_bytes());
        }
        return out;
    }
    let (len, bytes) = (dtype.block_len(), dtype.block_bytes());
    for _ in 0..m * (k / len) {
        out.extend((0..bytes - 2).map(|_| rng.next_u64() as u8));
        let d: u16 = if exact {
            // ±j/8, j in 1..=16, as an f16: j·2^-3 = 1.f · 2^e.
            let j = 1 + rng.below(16) as u32;
            let e = 31 - j.leading_zeros(); // j in [2^e, 2^(e+1))
            let mant = ((j << (10 - e)) & 0x3ff) as u16;
            (((rng.below(2) as u16) << 15) | (((15 + e - 3) as u16) << 10)) | mant
        } else {
            ((rng.below(2) as u16) << 15) | ((5 + rng.below(11) as u16) << 10) | rng.below(1024) as u16
        };
        out.extend_from_slice(&d.to_le_bytes());
    }
    out
}

fn randn(rng: &mut SplitMix64, len: usize, mag: f64) -> Vec<f32> {
    (0..len).map(|_| (rng.range(-1.0, 1.0) * mag) as f32).collect()
}

/// A BitNet-shaped problem: `layers` layers of the program runtime/src/forward.rs writes.
#[derive(Clone, Debug)]
struct Layer {
    dtype: DType,
    n: usize,
    d: usize,
    ff: usize,
    head_dim: usize,
    kv_heads: usize,
    pos: u32,
    /// The position as a run-time parameter (else a constant).
    runtime_pos: bool,
    scales: bool,
    relu2: bool,
    seed: u64,
}

const LAYERS: usize = 2;

impl Layer {
    fn kvw(&self) -> usize {
        self.kv_heads * self.head_dim
    }

    /// F16 KV caches (the runtime's default) for odd seeds, F32 for even ones.
    fn f16_caches(&self) -> bool {
        self.seed % 2 == 1
    }

    fn n_ctx(&self) -> usize {
        self.pos as usize + self.n + 1
    }

    /// The inputs: x, the caches, then per layer the norms, the 7 weights and their scales.
    fn inputs(&self) -> Vec<(String, HostTensor)> {
        let mut rng = SplitMix64(self.seed);
        let (d, ff, kvw, n) = (self.d, self.ff, self.kvw(), self.n);
        let mut v = vec![("x".to_string(), matrix("x", n, d, randn(&mut rng, n * d, 1.0)))];
        for l in 0..LAYERS {
            let ctx = self.n_ctx();
            let f16 = self.f16_caches();
            v.push((format!("kc{l}"), cache("kc", ctx, kvw, randn(&mut rng, ctx * kvw, 1.0), f16)));
            v.push((format!("vc{l}"), cache("vc", ctx, kvw, randn(&mut rng, ctx * kvw, 1.0), f16)));
            for (name, len) in [("attn_norm", d), ("attn_sub", d), ("ffn_norm", d), ("ffn_sub", ff)] {
                let w = (0..len).map(|_| rng.range(0.5, 1.5) as f32).collect();
                v.push((format!("{name}{l}"), vector(name, w)));
            }
            for (name, m, k) in [
                ("wq", d, d),
                ("wk", kvw, d),
                ("wv", kvw, d),
                ("wo", d, d),
                ("wg", ff, d),
                ("wu", ff, d),
                ("wd", d, ff),
            ] {
                let bytes = ternary(self.dtype, m, k, &mut rng, false);
                let shape = Shape::matrix(m, k).expect("shape");
                v.push((format!("{name}{l}"), HostTensor::from_bytes(name, self.dtype, shape, &bytes).expect("sizes")));
                if self.scales {
                    v.push((format!("{name}{l}.scale"), vector("scale", vec![rng.range(0.5, 2.0) as f32])));
                }
            }
        }
        v
    }

    /// Builds the layers; returns what to read: x, h, q, k, v, att, proj, gate, up, caches.
    fn build(
        &self,
        b: &mut ProgramBuilder,
        name: &dyn Fn(&str) -> String,
        ids: &[TensorId],
    ) -> Result<Vec<TensorId>, IsaError> {
        let (d, ff, kvw, n) = (self.d, self.ff, self.kvw(), self.n);
        let f = DType::F32;
        let x = ids[0];
        let h = b.alloc(&name("h"), f, &[n, d])?;
        let q = b.alloc(&name("q"), f, &[n, d])?;
        let k = b.alloc(&name("k"), f, &[n, kvw])?;
        let v = b.alloc(&name("v"), f, &[n, kvw])?;
        let att = b.alloc(&name("att"), f, &[n, d])?;
        let proj = b.alloc(&name("proj"), f, &[n, d])?;
        let gate = b.alloc(&name("gate"), f, &[n, ff])?;
        let up = b.alloc(&name("up"), f, &[n, ff])?;
        let mut it = ids[1..].iter().copied();
        let mut next =
            || it.next().ok_or_else(|| IsaError::Invalid { op: "test", reason: "missing input".to_string() });
        let mut read = vec![x, h, q, k, v, att, proj, gate, up];
        let pos = if self.runtime_pos { b.param_u32("pos")? } else { U32Arg::Const(self.pos) };
        for _ in 0..LAYERS {
            let (kc, vc) = (next()?, next()?);
            read.extend([kc, vc]);
            let (attn_norm, attn_sub, ffn_norm, ffn_sub) = (next()?, next()?, next()?, next()?);
            let mut w = Vec::new();
            for _ in 0..7 {
                let weight = next()?;
                let scale = if self.scales { Some(next()?) } else { None };
                w.push((weight, scale));
            }
            b.rms_norm(h, x, attn_norm, 1e-5)?;
            b.bitlinear(q, h, w[0].0, w[0].1)?;
            b.bitlinear(k, h, w[1].0, w[1].1)?;
            b.bitlinear(v, h, w[2].0, w[2].1)?;
            let hd = self.head_dim as u32;
            let rope = |out| Rope {
                out,
                x: out,
                head_dim: hd,
                rot_dim: hd,
                style: RopeStyle::Neox,
                base: 10000f32.into(),
                pos: pos.into(),
            };
            b.rope(rope(q))?;
            b.rope(rope(k))?;
            b.kv_write(kc, k, pos)?;
            b.kv_write(vc, v, pos)?;
            b.attention(Attention { out: att, q, k_cache: kc, v_cache: vc, head_dim: hd, rows: pos.into() })?;
            b.rms_norm(att, att, attn_sub, 1e-5)?;
            b.bitlinear(proj, att, w[3].0, w[3].1)?;
            b.add(x, x, proj)?;
            b.rms_norm(h, x, ffn_norm, 1e-5)?;
            b.bitlinear(gate, h, w[4].0, w[4].1)?;
            b.bitlinear(up, h, w[5].0, w[5].1)?;
            if self.relu2 {
                b.relu2(gate, gate)?;
            } else {
                b.silu(gate, gate)?;
            }
            b.mul(gate, gate, up)?;
            b.rms_norm(gate, gate, ffn_sub, 1e-5)?;
            b.bitlinear(proj, gate, w[6].0, w[6].1)?;
            b.add(x, x, proj)?;
        }
        Ok(read)
    }
}

fn layer_case() -> impl Strategy<Value = Layer> {
    let flags = (any::<bool>(), any::<bool>(), any::<bool>(), any::<bool>());
    (0..3usize, 1..=3usize, 1..=2usize, 1..=2usize, 0..3u32, flags, any::<u64>()).prop_map(
        |(f, n, dm, fm, pos, (scales, relu2, gqa, runtime_pos), seed)| {
            let dtype = FORMATS[f];
            // Row lengths are whole blocks: 256 for TQ1_0 / TQ2_0, 128 for I2_S.
            let block = if dtype == DType::I2_S { 128 } else { 256 };
            let d = block * dm;
            let head_dim = 64;
            let heads = d / head_dim;
            let kv_heads = if gqa && heads % 2 == 0 { heads / 2 } else { heads };
            Layer { dtype, n, d, ff: block * (dm + fm), head_dim, kv_heads, pos, runtime_pos, scales, relu2, seed }
        },
    )
}

/// Runs `inputs`/`build` on the fused GPU engine and on the unfused one (subgroup or
/// portable kernels); returns (fused, unfused, reference) outputs and the two kernel lists.
#[allow(clippy::type_complexity)]
fn fused_and_unfused(
    portable: bool,
    inputs: &[(String, HostTensor)],
    params: &[ParamValue],
    build: &dyn Fn(&mut ProgramBuilder, &dyn Fn(&str) -> String, &[TensorId]) -> Result<Vec<TensorId>, IsaError>,
) -> (Outputs, Outputs, Outputs, Vec<String>, Vec<String>) {
    fused_and_unfused_on(Kernels { portable, gpu: false, held_norm: false }, inputs, params, build)
}

/// Which kernels an engine pair chooses: portable reductions or subgroup ones, (`gpu`)
/// those a GPU takes even on a CPU adapter (`GpuOptions::gpu_kernels`), and (`held_norm`, the
/// fused side only) the fused norms' held-row variant (`GpuOptions::held_norm`).
#[derive(Clone, Copy, Debug)]
struct Kernels {
    portable: bool,
    gpu: bool,
    held_norm: bool,
}

/// [`fused_and_unfused`] on the pairs that choose `kernels`.
#[allow(clippy::type_complexity)]
fn fused_and_unfused_on(
    kernels: Kernels,
    inputs: &[(String, HostTensor)],
    params: &[ParamValue],
    build: &dyn Fn(&mut ProgramBuilder, &dyn Fn(&str) -> String, &[TensorId]) -> Result<Vec<TensorId>, IsaError>,
) -> (Outputs, Outputs, Outputs, Vec<String>, Vec<String>) {
    let inputs: Vec<(&str, HostTensor)> = inputs.iter().map(|(n, t)| (n.as_str(), t.clone())).collect();
    let list = |g: &mut GpuEngine, p: &purebee_isa::Program| g.dispatched_kernels(p).unwrap_or_default();
    let Kernels { portable, gpu, held_norm } = kernels;
    let (fused, reference, fk) = if held_norm {
        held_norm_pair(portable, gpu).run_inspect(&inputs, params, build, list)
    } else if gpu {
        gpu_kernels_pair(portable, true).run_inspect(&inputs, params, build, list)
    } else {
        pair_for(portable).run_inspect(&inputs, params, build, list)
    };
    let (unfused, _, uk) = if gpu {
        gpu_kernels_pair(portable, false).run_inspect(&inputs, params, build, list)
    } else {
        unfused_pair(portable).run_inspect(&inputs, params, build, list)
    };
    (fused, unfused, reference, fk, uk)
}

/// True when the GPU tests run on a CPU adapter (lavapipe, as in CI). Its every float
/// operation rounds as written, so there the fused program must give the unfused one's bits;
/// and its one-token short rows take `gemv_rows` (a GPU's take `gemv`).
fn cpu_adapter() -> bool {
    // Its own engine: a caller may hold the pairs' locks.
    static CPU: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *CPU.get_or_init(|| GpuEngine::new(&GpuOptions::default()).is_ok_and(|g| g.context().capabilities().cpu))
}

/// Relative L2 distance allowed between fused and unfused outputs on a GPU driver. Such a
/// driver may contract a product and the add after it into one fused multiply-add, and does
/// so differently in a fused epilogue (`x + y·scale` in one kernel) than across the unfused
/// kernels (the product rounded to memory first): seen on an H200 (NVIDIA 580) as a 1-ulp
/// difference in a layer's output. One skipped rounding per operation moves an output by
/// about 2⁻²⁴ relative per operation on its path; the worst it can set off is an int8 code
/// of a later activation quantization rounded the other way (its value within an ulp of
/// .5), which moves the sums that code feeds by one quantization step out of 127 of a row's
/// maximum, about 1/(127·√d) of the output's norm (under 1e-3 for every d ≥ 64 here). A
/// wrong fusion (a missed epilogue, a wrong row or scale) moves it by O(1).
const GPU_DRIVER_REL_L2: f64 = 1e-3;

/// Every output equal bit for bit where the driver rounds as written; on a GPU driver, each
/// output bit for bit or within [`GPU_DRIVER_REL_L2`] (NaN where the other has NaN).
fn assert_bits(fused: &Outputs, unfused: &Outputs, what: &str) -> Result<(), TestCaseError> {
    let exact = cpu_adapter();
    for (i, (a, b)) in fused.iter().zip(unfused).enumerate() {
        if a != b {
            let (a, b) = (f32s(a), f32s(b));
            if !exact && a.len() == b.len() {
                let nan_alike = a.iter().zip(&b).all(|(x, y)| x.is_nan() == y.is_nan());
                let (mut diff, mut norm) = (0f64, 0f64);
                for (x, y) in a.iter().zip(&b).filter(|(x, y)| !x.is_nan() && !y.is_nan()) {
                    diff += (f64::from(*x) - f64::from(*y)).powi(2);
                    norm += f64::from(*y).powi(2);
                }
                let rel = (diff / norm.max(f64::MIN_POSITIVE)).sqrt();
                if nan_alike && rel <= GPU_DRIVER_REL_L2 {
                    continue;
                }
                return Err(TestCaseError::fail(format!(
                    "{what}: output {i} differs fused vs unfused by {rel:.3e} relative L2 (NaN positions alike: {nan_alike})"
                )));
            }
            let at = a.iter().zip(&b).position(|(x, y)| x.to_bits() != y.to_bits()).unwrap_or(0);
            return Err(TestCaseError::fail(format!(
                "{what}: output {i} differs fused vs unfused at {at}: {:?} vs {:?}",
                a.get(at),
                b.get(at)
            )));
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]

    #[test]
    fn bitnet_layers_fused_equal_unfused_bit_for_bit(
        c in layer_case(),
        portable in any::<bool>(),
        held_norm in any::<bool>(),
    ) {
        if gpu_tests_skipped() {
            return Ok(());
        }
        let inputs = c.inputs();
        let params = if c.runtime_pos { vec![ParamValue::U32(c.pos)] } else { vec![] };
        let kernels = Kernels { portable, gpu: false, held_norm };
        let (fused, unfused, _, fk, uk) =
            fused_and_unfused_on(kernels, &inputs, &params, &|b, name, ids| c.build(b, name, ids));
        prop_assert!(fk.len() < uk.len(), "nothing fused: {fk:?}");
        assert_bits(&fused, &unfused, &format!("{c:?} {kernels:?}"))?;
    }
}

/// The bytes of a `[m, k]` LINEAR weight of `dtype` (F32, F16, Q8_0, Q4_1), values of
/// magnitude about `mag`.
fn float_weight(dtype: DType, m: usize, k: usize, rng: &mut SplitMix64, mag: f64) -> Vec<u8> {
    let mut out = Vec::new();
    match dtype {
        DType::F32 => {
            (0..m * k).for_each(|_| out.extend_from_slice(&((rng.range(-1.0, 1.0) * mag) as f32).to_le_bytes()))
        }
        DType::F16 => (0..m * k)
            .for_each(|_| out.extend_from_slice(&half::f16::from_f64(rng.range(-1.0, 1.0) * mag).to_le_bytes())),
        DType::Q8_0 => (0..m).for_each(|_| {
            let row: Vec<f32> = randn(rng, k, mag);
            out.extend(encode_q8_0_row(&row).expect("whole blocks"));
        }),
        DType::Q4_1 => (0..m * k / 32).for_each(|_| {
            out.extend_from_slice(&half::f16::from_f64(rng.range(0.5, 1.0) * mag / 8.0).to_le_bytes());
            out.extend_from_slice(&half::f16::from_f64(-rng.range(0.5, 1.0) * mag).to_le_bytes());
            out.extend((0..16).map(|_| rng.next_u64() as u8));
        }),
        other => panic!("no float weight of {other} in this test"),
    }
    out
}

/// A Llama-shaped problem: [`LLAMA_LAYERS`] layers of the program runtime/src/forward.rs
/// writes for LINEAR weights (no sub-norms, normal RoPE, SILU), then the final norm, the LM
/// head over every token and ARGMAX.
#[derive(Clone, Debug)]
struct LlamaLayer {
    dtype: DType,
    acts: LinearActivations,
    n: usize,
    d: usize,
    ff: usize,
    vocab: usize,
    head_dim: usize,
    kv_heads: usize,
    pos: u32,
    seed: u64,
}

const LLAMA_LAYERS: usize = 2;

impl LlamaLayer {
    fn kvw(&self) -> usize {
        self.kv_heads * self.head_dim
    }

    /// F16 KV caches (the runtime's default) for odd seeds, F32 for even ones.
    fn f16_caches(&self) -> bool {
        self.seed % 2 == 1
    }

    /// x, then per layer the caches, 3 norms... : x, then per layer kc, vc, n1, n2 and the 7
    /// weights; then the final norm and the head.
    fn inputs(&self) -> Vec<(String, HostTensor)> {
        let mut rng = SplitMix64(self.seed);
        let (d, ff, kvw, n) = (self.d, self.ff, self.kvw(), self.n);
        let n_ctx = self.pos as usize + n + 1;
        let mut v = vec![("x".to_string(), matrix("x", n, d, randn(&mut rng, n * d, 1.0)))];
        let weight = |name: String, m: usize, k: usize, rng: &mut SplitMix64| {
            let bytes = float_weight(self.dtype, m, k, rng, 0.3);
            let shape = Shape::matrix(m, k).expect("shape");
            (name.clone(), HostTensor::from_bytes(&name, self.dtype, shape, &bytes).expect("sizes"))
        };
        for l in 0..LLAMA_LAYERS {
            let f16 = self.f16_caches();
            v.push((format!("kc{l}"), cache("kc", n_ctx, kvw, randn(&mut rng, n_ctx * kvw, 1.0), f16)));
            v.push((format!("vc{l}"), cache("vc", n_ctx, kvw, randn(&mut rng, n_ctx * kvw, 1.0), f16)));
            for name in ["n1", "n2"] {
                v.push((format!("{name}{l}"), vector(name, (0..d).map(|_| rng.range(0.5, 1.5) as f32).collect())));
            }
            for (name, m, k) in [
                ("wq", d, d),
                ("wk", kvw, d),
                ("wv", kvw, d),
                ("wo", d, d),
                ("wg", ff, d),
                ("wu", ff, d),
                ("wd", d, ff),
            ] {
                v.push(weight(format!("{name}{l}"), m, k, &mut rng));
            }
        }
        v.push(("nf".to_string(), vector("nf", (0..d).map(|_| rng.range(0.5, 1.5) as f32).collect())));
        v.push(weight("head".to_string(), self.vocab, d, &mut rng));
        v
    }

    /// Builds the program; returns what to read.
    fn build(
        &self,
        b: &mut ProgramBuilder,
        name: &dyn Fn(&str) -> String,
        ids: &[TensorId],
    ) -> Result<Vec<TensorId>, IsaError> {
        let (d, ff, kvw, n) = (self.d, self.ff, self.kvw(), self.n);
        let f = DType::F32;
        let x = ids[0];
        let h = b.alloc(&name("h"), f, &[n, d])?;
        let q = b.alloc(&name("q"), f, &[n, d])?;
        let k = b.alloc(&name("k"), f, &[n, kvw])?;
        let v = b.alloc(&name("v"), f, &[n, kvw])?;
        let att = b.alloc(&name("att"), f, &[n, d])?;
        let proj = b.alloc(&name("proj"), f, &[n, d])?;
        let gate = b.alloc(&name("gate"), f, &[n, ff])?;
        let up = b.alloc(&name("up"), f, &[n, ff])?;
        let normed = b.alloc(&name("normed"), f, &[n, d])?;
        let logits = b.alloc(&name("logits"), f, &[n, self.vocab])?;
        let am = b.alloc(&name("argmax"), DType::U32, &[n])?;
        let mut it = ids[1..].iter().copied();
        let mut next =
            || it.next().ok_or_else(|| IsaError::Invalid { op: "test", reason: "missing input".to_string() });
        let mut read = vec![x, h, q, k, v, att, proj, gate, up, normed, logits, am];
        let pos = U32Arg::Const(self.pos);
        let acts = self.acts;
        for _ in 0..LLAMA_LAYERS {
            let (kc, vc, n1, n2) = (next()?, next()?, next()?, next()?);
            read.extend([kc, vc]);
            let w: Vec<TensorId> = (0..7).map(|_| next()).collect::<Result<_, _>>()?;
            b.rms_norm(h, x, n1, 1e-5)?;
            b.linear_with(q, h, w[0], acts)?;
            b.linear_with(k, h, w[1], acts)?;
            b.linear_with(v, h, w[2], acts)?;
            let hd = self.head_dim as u32;
            let rope = |out| Rope {
                out,
                x: out,
                head_dim: hd,
                rot_dim: hd,
                style: RopeStyle::Normal,
                base: 5e5f32.into(),
                pos: pos.into(),
            };
            b.rope(rope(q))?;
            b.rope(rope(k))?;
            b.kv_write(kc, k, pos)?;
            b.kv_write(vc, v, pos)?;
            b.attention(Attention { out: att, q, k_cache: kc, v_cache: vc, head_dim: hd, rows: pos.into() })?;
            b.linear_with(proj, att, w[3], acts)?;
            b.add(x, x, proj)?;
            b.rms_norm(h, x, n2, 1e-5)?;
            b.linear_with(gate, h, w[4], acts)?;
            b.linear_with(up, h, w[5], acts)?;
            b.silu(gate, gate)?;
            b.mul(gate, gate, up)?;
            b.linear_with(proj, gate, w[6], acts)?;
            b.add(x, x, proj)?;
        }
        let (nf, head) = (next()?, next()?);
        b.rms_norm(normed, x, nf, 1e-5)?;
        b.linear_with(logits, normed, head, acts)?;
        b.argmax(am, logits)?;
        Ok(read)
    }
}

fn llama_case() -> impl Strategy<Value = LlamaLayer> {
    let kinds = [
        (DType::F32, LinearActivations::F32),
        (DType::F16, LinearActivations::F32),
        (DType::Q8_0, LinearActivations::Int8Blocks),
        (DType::Q4_1, LinearActivations::Int8Blocks),
        (DType::Q8_0, LinearActivations::F32),
        // Int8 blocks over rows that need not be whole blocks (the last one shorter).
        (DType::F16, LinearActivations::Int8Blocks),
    ];
    // Positions past 32 give a cache of several tiles, so decode splits the positions and
    // ATTENTION's merge runs (and, with int8 blocks, rounds for the o projection).
    let pos = prop_oneof![0..3u32, 33..120u32];
    (0..6usize, 1..=3usize, 1..=3usize, 0..31usize, 20..700usize, any::<bool>(), pos, any::<u64>()).prop_map(
        move |(kind, n, heads, odd, vocab, gqa, pos, seed)| {
            let (dtype, acts) = kinds[kind];
            let block = matches!(dtype, DType::Q8_0 | DType::Q4_1);
            // Rows of block types are whole blocks of 32 (heads of one or two blocks); float
            // rows any (even head) length.
            let head_dim = if block { 32 * (1 + odd % 2) } else { 16 + 2 * (odd % 8) };
            let heads = 2 * heads;
            let d = heads * head_dim;
            let ff = if block { 32 * (1 + odd % 4) + d } else { d + 2 * odd + 1 };
            let kv_heads = if gqa { heads / 2 } else { heads };
            LlamaLayer { dtype, acts, n, d, ff, vocab, head_dim, kv_heads, pos, seed }
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(8))]

    /// Llama-style layers, the final norm, the LM head and ARGMAX, fused and unfused: the
    /// same bits, and fewer dispatches.
    #[test]
    fn llama_layers_fused_equal_unfused_bit_for_bit(
        c in llama_case(),
        portable in any::<bool>(),
        gpu in any::<bool>(),
        held_norm in any::<bool>(),
    ) {
        if gpu_tests_skipped() {
            return Ok(());
        }
        let inputs = c.inputs();
        let kernels = Kernels { portable, gpu, held_norm };
        let (fused, unfused, _, fk, uk) =
            fused_and_unfused_on(kernels, &inputs, &[], &|b, name, ids| c.build(b, name, ids));
        prop_assert!(fk.len() < uk.len(), "nothing fused: {fk:?}");
        assert_bits(&fused, &unfused, &format!("{c:?} {kernels:?}"))?;
    }
}

/// A prefill chunk of Llama-style layers (4 rows: ROPE + KV_WRITE as `rope_kv.wgsl`) over
/// F16 caches (seed 1) and F32 ones (seed 2): fused equal unfused bit for bit, caches
/// included, and the ROPEs and KV_WRITEs are one dispatch.
#[test]
fn llama_prefill_rope_kv_write_fuses_over_f16_and_f32_caches() {
    if gpu_tests_skipped() {
        return;
    }
    for seed in [1, 2] {
        let (dtype, acts) = (DType::F16, LinearActivations::F32);
        let c = LlamaLayer { dtype, acts, n: 4, d: 96, ff: 130, vocab: 50, head_dim: 24, kv_heads: 2, pos: 5, seed };
        let inputs = c.inputs();
        let kernels = Kernels { portable: false, gpu: false, held_norm: false };
        let (fused, unfused, _, fk, _) =
            fused_and_unfused_on(kernels, &inputs, &[], &|b, name, ids| c.build(b, name, ids));
        assert_bits(&fused, &unfused, &format!("{c:?}")).unwrap_or_else(|e| panic!("{e}"));
        let rope_kv = fk.iter().filter(|k| k.ends_with(":rope_kv")).count();
        assert_eq!(rope_kv, LLAMA_LAYERS, "f16 caches: {}: {fk:?}", c.f16_caches());
    }
}

/// Llama-style layers with rows long enough that the fused norms' invocations hold many
/// elements (llama_case's rows are at most 384 wide: one or two words per invocation): d of
/// 7200 (`norm_quant_blocks` holds 28 or 29 elements per invocation of 256, every one of its
/// named vectors used; f32-decoded weights, so a last word that is partial too: 7202) and
/// 8224 (past 32 per invocation: the looped passes), with the adapter's kernels or a GPU's,
/// the fused norms' held-row variant on (`GpuOptions::held_norm`; the loops take these rows
/// by default, as `norm_and_int8_block_rounding_fuse_in_place_and_on_short_blocks` checks).
#[test]
fn llama_layers_with_long_rows_fused_equal_unfused_bit_for_bit() {
    if gpu_tests_skipped() {
        return;
    }
    // (dtype, head_dim, heads, kv_heads): d = head_dim · heads.
    // The kernel choices alternate over the cases (both for every case doubled this test's
    // time on a CPU adapter).
    let cases = [(DType::Q8_0, 32, 225, 25, true), (DType::F16, 2, 3601, 1, false), (DType::Q4_1, 32, 257, 1, true)];
    for (dtype, head_dim, heads, kv_heads, gpu) in cases {
        let acts = LinearActivations::Int8Blocks;
        let d = head_dim * heads;
        let c = LlamaLayer { dtype, acts, n: 1, d, ff: 64, vocab: 40, head_dim, kv_heads, pos: 5, seed: 11 };
        let inputs = c.inputs();
        let kernels = Kernels { portable: false, gpu, held_norm: true };
        let (fused, unfused, _, fk, uk) =
            fused_and_unfused_on(kernels, &inputs, &[], &|b, name, ids| c.build(b, name, ids));
        assert!(fk.len() < uk.len(), "nothing fused: {fk:?}");
        assert_bits(&fused, &unfused, &format!("{c:?} {kernels:?}")).unwrap_or_else(|e| panic!("{e}"));
    }
}

/// Every pattern of a Llama-style layer is fused: the dispatches of two layers, the final
/// norm, the head and ARGMAX at one token, fused vs unfused (`dispatched_kernels`), with
/// int8-block activations (Q8_0) and f32 ones (F16), at position 1 (one tile of cache:
/// ATTENTION in one dispatch) and 70 (three tiles: its positions split, and merged by
/// `combine`, or by `combine_rounded` with int8 blocks), with the kernels of the adapter and
/// with a GPU's (whose one-token INT8 products round their own x, after the norm, and whose
/// one-token products of f32 activations apply the norm themselves, so that no norm or
/// rounding dispatch is left in the layer).
#[test]
fn llama_layer_dispatches_are_fused() {
    if gpu_tests_skipped() {
        return;
    }
    let q8_blocks = (DType::Q8_0, LinearActivations::Int8Blocks);
    let f16_f32 = (DType::F16, LinearActivations::F32);
    let cases = [(q8_blocks, 1), (f16_f32, 1), (q8_blocks, 70), (f16_f32, 70)];
    // Seed 9: F16 caches (the ROPE epilogue rounds into them), 10: F32.
    let runs = cases.into_iter().flat_map(|c| [(c, false, 9), (c, true, 9), (c, true, 10)]);
    for (((dtype, acts), pos), gpu, seed) in runs {
        let c = LlamaLayer { dtype, acts, n: 1, d: 128, ff: 192, vocab: 300, head_dim: 32, kv_heads: 2, pos, seed };
        let inputs = c.inputs();
        let kernels = Kernels { portable: false, gpu, held_norm: false };
        let (fused, unfused, _, fk, uk) =
            fused_and_unfused_on(kernels, &inputs, &[], &|b, name, ids| c.build(b, name, ids));
        assert_bits(&fused, &unfused, "dispatch-count Llama layer").unwrap_or_else(|e| panic!("{e}"));
        eprintln!("{dtype} {acts:?} {kernels:?}:\n unfused: {uk:?}\n fused: {fk:?}");
        let int8 = acts == LinearActivations::Int8Blocks;
        // A GPU's one-token INT8 products round their own x (after the norm), and its
        // products of f32 activations apply the norm, where a CPU adapter's take a rounding
        // or norm dispatch (linear.rs: rounds_in_product).
        let gpu_kernels = gpu || !cpu_adapter();
        let in_product = gpu_kernels;
        // The head: the final norm (with the int8-block rounding), the product with the
        // ARGMAX's first pass, its second pass. Unfused: the norm, (the rounding,) the
        // product, the ARGMAX.
        let (fk_layers, fk_head) = fk.split_at(fk.len() - 3);
        let (uk_layers, _) = uk.split_at(uk.len() - 3 - usize::from(int8 && !in_product));
        let norm_entry = if int8 { ":norm_quant_blocks" } else { ":rms_norm" };
        assert!(fk_head[0].ends_with(norm_entry), "{fk_head:?}");
        // Short rows take `gemv_rows` on a CPU adapter, `gemv` on a GPU (linear.rs).
        let rows = |entry: &str| if gpu_kernels { entry.to_string() } else { entry.replace(":gemv", ":gemv_rows") };
        assert!(
            fk_head[1].starts_with("linear_argmax.wgsl") && fk_head[1].ends_with(&rows(":gemv_argmax")),
            "{fk_head:?}"
        );
        assert!(fk_head[2].ends_with(":argmax_partials"), "{fk_head:?}");
        // With the products normalizing their x, the second layer's second norm keeps its own
        // dispatch: its write of h is the program's last one (the host may read it).
        let kept_norm = usize::from(in_product);
        let per_layer: Vec<&str> =
            fk_layers[..(fk_layers.len() - kept_norm) / LLAMA_LAYERS].iter().map(|s| s.as_str()).collect();
        let mut second: Vec<&str> = fk_layers[per_layer.len()..].iter().map(|s| s.as_str()).collect();
        if in_product {
            let at = second.iter().position(|s| s.ends_with(norm_entry));
            assert_eq!(at.map(|i| second[i + 1].ends_with(":gemv_gated")), Some(true), "{second:?}");
            second.retain(|s| !s.ends_with(norm_entry));
        }
        assert_eq!(per_layer, second, "both layers alike");
        let count = |k: &str| per_layer.iter().filter(|s| s.ends_with(k)).count();
        // Both norms round for the products after them; down rounds its own x, and so does
        // o unless the attention's merge rounds it (or, on a GPU, the products round it).
        let split = pos > 32;
        assert_eq!(count(":norm_quant_blocks"), if int8 && !in_product { 2 } else { 0 }, "{per_layer:?}");
        assert_eq!(count(":rms_norm"), if !int8 && !in_product { 2 } else { 0 }, "{per_layer:?}");
        let rounding_dispatches = if in_product { 0 } else { 2 - usize::from(split) };
        assert_eq!(count(":quantize_blocks"), if int8 { rounding_dispatches } else { 0 }, "{per_layer:?}");
        assert_eq!(count(":combine_rounded"), usize::from(int8 && split), "{per_layer:?}");
        assert_eq!(count(":combine"), usize::from(!int8 && split), "{per_layer:?}");
        // q, k, v with ROPE and KV_WRITE in one dispatch; gate, up, the activation and the
        // multiply in another; o and down carry the residual add; no elementwise kernel.
        assert_eq!(count(&rows(":gemv_multi_rope")), 1, "{per_layer:?}");
        assert_eq!(count(&rows(":gemv_gated")), 1, "{per_layer:?}");
        assert_eq!(per_layer.iter().filter(|s| s.contains("residual_add.wgsl")).count(), 2, "{per_layer:?}");
        assert_eq!(per_layer.iter().filter(|s| s.contains("elementwise.wgsl")).count(), 0, "{per_layer:?}");
        let rope = |k: &str| per_layer.iter().filter(|s| s.contains(k)).count();
        assert_eq!(rope("rope_kv.wgsl") + rope("rope.wgsl") + rope("kv_write.wgsl"), 0, "{per_layer:?}");
        // Unfused: norm, 7 × (rounding +) product, 2 ROPE, 2 KV_WRITE, attention, 2 adds,
        // norm, SILU, ELEMENT_MUL. Fused: norm (+ rounding), q/k/v + ROPE + KV_WRITE,
        // attention (+ the rounding, when its merge runs), (rounding +) o, norm (+ rounding),
        // gate/up, (rounding +) down; with a GPU's products, none of the norms and roundings
        // outside the attention.
        let attention = per_layer.iter().filter(|s| s.contains("attention.wgsl")).count();
        assert_eq!(attention, 1 + usize::from(split), "{per_layer:?}");
        let (unfused_want, fused_want) = match (int8, in_product) {
            // Seven LINEARs rounding their own x; four products.
            (true, true) => (17, 4),
            (true, false) => (24, 8 - usize::from(split)),
            // The products apply both norms.
            (false, true) => (17, 4),
            (false, false) => (17, 6),
        };
        assert_eq!(
            (uk_layers.len() / LLAMA_LAYERS, per_layer.len()),
            (unfused_want + attention, fused_want + attention),
            "dispatches per layer, unfused and fused"
        );
    }
}

/// RMS_NORM then LINEARs with int8-block activations: the norm and the rounding in one
/// dispatch (`norm_quant_blocks`), in place or not, over rows that are not whole blocks (k =
/// 45: a block of 32 and one of 13; 600, 1100 and 8200 end in blocks of 24, 12 and 8), at one
/// token (q, k, v merged) and several, F16 weights (whose products read x̂) and Q8_0 ones
/// (whose one-token products read the codes and scales); the normed
/// tensor is read back (so its write is kept), and every output equals the unfused program's.
#[test]
fn norm_and_int8_block_rounding_fuse_in_place_and_on_short_blocks() {
    if gpu_tests_skipped() {
        return;
    }
    // 600, 1100, 8200 and 8224: rows long enough for the kernel's four-loads-a-step loop, at
    // both of RMS_NORM's workgroup sizes (64 and 256); 8200 and 8224 have over 256 blocks.
    for (seed, n, k, inplace, dtype) in [
        (41, 1, 45, true, DType::F16),
        (42, 3, 45, false, DType::F16),
        (43, 2, 96, true, DType::F16),
        (44, 1, 96, false, DType::F16),
        (45, 1, 600, true, DType::F16),
        (46, 2, 1100, false, DType::F16),
        (47, 1, 8200, true, DType::F16),
        (48, 2, 8200, false, DType::F16),
        (49, 1, 608, true, DType::Q8_0),
        (50, 1, 1120, false, DType::Q8_0),
        (51, 1, 8224, false, DType::Q8_0),
    ] {
        let mut rng = SplitMix64(seed);
        let m = 37;
        let mut inputs = vec![
            ("x".to_string(), matrix("x", n, k, randn(&mut rng, n * k, 1.0))),
            ("nw".to_string(), vector("nw", randn(&mut rng, k, 1.0))),
        ];
        for name in ["w1", "w2", "w3"] {
            let bytes = float_weight(dtype, m, k, &mut rng, 0.3);
            let shape = Shape::matrix(m, k).expect("shape");
            inputs.push((name.to_string(), HostTensor::from_bytes(name, dtype, shape, &bytes).expect("sizes")));
        }
        let build = |b: &mut ProgramBuilder, name: &dyn Fn(&str) -> String, ids: &[TensorId]| {
            let [x, nw, w1, w2, w3] = ids[..] else {
                return Err(IsaError::Invalid { op: "test", reason: "inputs".to_string() });
            };
            let h = if inplace { x } else { b.alloc(&name("h"), DType::F32, &[n, k])? };
            let ys: Vec<TensorId> =
                (0..3).map(|i| b.alloc(&name(&format!("y{i}")), DType::F32, &[n, m])).collect::<Result<_, _>>()?;
            b.rms_norm(h, x, nw, 1e-5)?;
            for (&y, w) in ys.iter().zip([w1, w2, w3]) {
                b.linear_with(y, h, w, LinearActivations::Int8Blocks)?;
            }
            Ok([vec![h], ys].concat())
        };
        // The held-row variant of the norms too (rows up to 8192 held; 8200 and 8224 looped).
        let kernels = [(false, false, false), (true, false, false), (false, true, false), (true, true, false)];
        for (portable, gpu, held_norm) in kernels.into_iter().chain([(false, false, true), (true, true, true)]) {
            let (fused, unfused, _, fk, uk) =
                fused_and_unfused_on(Kernels { portable, gpu, held_norm }, &inputs, &[], &build);
            let what = format!("{dtype} n={n} k={k} in place={inplace} portable={portable} gpu={gpu} held={held_norm}");
            assert_bits(&fused, &unfused, &what).unwrap_or_else(|e| panic!("{e}"));
            let entry = if inplace { ":norm_quant_blocks_inplace" } else { ":norm_quant_blocks" };
            assert!(fk[0].ends_with(entry), "{what}: {fk:?}");
            assert!(!fk.iter().any(|f| f.ends_with(":quantize_blocks")), "{what}: {fk:?}");
            // Unfused: the norm, then a rounding and a product per LINEAR, or, where a GPU's
            // one-token Q8_0 products round their own x (linear.rs, rounds_in_product: at most
            // 37 × 8224 elements here, under its bound), the norm and the products. Fused:
            // the norm with the rounding (its output is also the program's), then the
            // products (one dispatch at one token).
            let in_product = (gpu || !cpu_adapter()) && n == 1 && dtype == DType::Q8_0;
            assert_eq!(uk.len(), if in_product { 4 } else { 7 }, "{what}: {uk:?}");
            assert_eq!(fk.len(), if n == 1 { 2 } else { 4 }, "{what}: {fk:?}");
        }
    }
}

/// A norm whose input the group's own kernels write: RMS_NORM(h, x) ; LINEAR(p, h, W) ;
/// TENSOR_ADD(x, x, p), twice (x = x + W·norm(x), h's first write dead), with int8-block
/// and f32 activations. With a GPU's kernels the product would read x to normalize it while
/// its residual epilogue writes x, so the norm keeps its own dispatch there; the same bits
/// as unfused either way.
#[test]
fn a_norm_whose_input_the_group_writes_keeps_its_dispatch() {
    if gpu_tests_skipped() {
        return;
    }
    let k = 96;
    let mut rng = SplitMix64(61);
    let bytes = float_weight(DType::Q8_0, k, k, &mut rng, 0.3);
    let w = HostTensor::from_bytes("w", DType::Q8_0, Shape::matrix(k, k).expect("shape"), &bytes).expect("sizes");
    let inputs = vec![
        ("x".to_string(), matrix("x", 1, k, randn(&mut rng, k, 1.0))),
        ("nw".to_string(), vector("nw", randn(&mut rng, k, 1.0))),
        ("w".to_string(), w),
    ];
    for (acts, norm_entry) in
        [(LinearActivations::Int8Blocks, ":norm_quant_blocks"), (LinearActivations::F32, ":rms_norm")]
    {
        let build = |b: &mut ProgramBuilder, name: &dyn Fn(&str) -> String, ids: &[TensorId]| {
            let [x, nw, w] = ids[..] else {
                return Err(IsaError::Invalid { op: "test", reason: "inputs".to_string() });
            };
            let h = b.alloc(&name("h"), DType::F32, &[1, k])?;
            let p = b.alloc(&name("p"), DType::F32, &[1, k])?;
            for _ in 0..2 {
                b.rms_norm(h, x, nw, 1e-5)?;
                b.linear_with(p, h, w, acts)?;
                b.add(x, x, p)?;
            }
            Ok(vec![x, h, p])
        };
        for gpu in [false, true] {
            let kernels = Kernels { portable: false, gpu, held_norm: false };
            let (fused, unfused, _, fk, _) = fused_and_unfused_on(kernels, &inputs, &[], &build);
            assert_bits(&fused, &unfused, &format!("{acts:?} {kernels:?}")).unwrap_or_else(|e| panic!("{e}"));
            let norms = fk.iter().filter(|f| f.ends_with(norm_entry)).count();
            assert_eq!(norms, 2, "{acts:?} {kernels:?}: {fk:?}");
        }
    }
}

/// LINEAR's patterns against the reference engine on exact data: integer activations with
/// max |x| = 127 in every block of 32 (so int8 blocks round nothing: s_b = 1), integer
/// weights (F16) or Q8_0 codes with d = 1, small residuals in multiples of 1/8: every
/// product, sum, add, square and multiply is exact or one correctly rounded f32 operation
/// on both engines, so the outputs must be equal (±0 compare equal). (RELU2 stands in for
/// SILU, whose own tolerance the elementwise tests hold; the fused SILU is elementwise.wgsl's
/// bit for bit, as the layer tests show.)
#[test]
fn linear_patterns_match_the_reference_exactly() {
    if gpu_tests_skipped() {
        return;
    }
    for (seed, dtype, acts) in [
        (31, DType::Q8_0, LinearActivations::Int8Blocks),
        (32, DType::F16, LinearActivations::F32),
        (33, DType::F16, LinearActivations::Int8Blocks),
    ] {
        let mut rng = SplitMix64(seed);
        let (k, m, vocab) = (96, 45, 77);
        let mut x = Vec::new();
        for _ in 0..k / 32 {
            let start = x.len();
            x.extend((0..32).map(|_| rng.below(255) as f32 - 127.0));
            x[start + rng.below(32) as usize] = 127.0 * rng.sign();
        }
        let r: Vec<f32> = (0..m).map(|_| (rng.below(1 << 12) as f32 - 2048.0) / 8.0).collect();
        let mut inputs = vec![("x".to_string(), matrix("x", 1, k, x)), ("r".to_string(), matrix("r", 1, m, r))];
        let mut weight = |name: &str, rows: usize| {
            let bytes: Vec<u8> = match dtype {
                DType::F16 => {
                    (0..rows * k).flat_map(|_| half::f16::from_f32(rng.below(17) as f32 - 8.0).to_le_bytes()).collect()
                }
                _ => (0..rows * k / 32)
                    .flat_map(|_| {
                        let mut block = half::f16::ONE.to_le_bytes().to_vec();
                        block.extend((0..32).map(|_| (rng.below(255) as i32 - 127) as i8 as u8));
                        block
                    })
                    .collect(),
            };
            let shape = Shape::matrix(rows, k).expect("shape");
            (name.to_string(), HostTensor::from_bytes(name, dtype, shape, &bytes).expect("sizes"))
        };
        for name in ["w1", "w2", "w3", "wp", "wg", "wu"] {
            inputs.push(weight(name, m));
        }
        inputs.push(weight("head", vocab));
        let build = |b: &mut ProgramBuilder, name: &dyn Fn(&str) -> String, ids: &[TensorId]| {
            let [x, r, w1, w2, w3, wp, wg, wu, head] = ids[..] else {
                return Err(IsaError::Invalid { op: "test", reason: "inputs".to_string() });
            };
            let f = DType::F32;
            let y: Vec<TensorId> =
                (0..6).map(|i| b.alloc(&name(&format!("y{i}")), f, &[1, m])).collect::<Result<_, _>>()?;
            let logits = b.alloc(&name("logits"), f, &[1, vocab])?;
            let id = b.alloc(&name("id"), DType::U32, &[1])?;
            for (out, w) in [(y[0], w1), (y[1], w2), (y[2], w3)] {
                b.linear_with(out, x, w, acts)?;
            }
            b.linear_with(y[3], x, wp, acts)?;
            b.add(r, y[3], r)?;
            b.linear_with(y[4], x, wg, acts)?;
            b.linear_with(y[5], x, wu, acts)?;
            b.relu2(y[4], y[4])?;
            b.mul(y[4], y[5], y[4])?;
            b.linear_with(logits, x, head, acts)?;
            b.argmax(id, logits)?;
            Ok(vec![y[0], y[1], y[2], y[3], r, y[4], y[5], logits, id])
        };
        for portable in [false, true] {
            let (fused, unfused, reference, fk, uk) = fused_and_unfused(portable, &inputs, &[], &build);
            assert!(fk.len() < uk.len(), "{fk:?}");
            assert_bits(&fused, &unfused, "LINEAR patterns").unwrap_or_else(|e| panic!("{e}"));
            for (i, (g, w)) in fused.iter().zip(&reference).enumerate() {
                let (g, w) = (f32s(g), f32s(w));
                assert!(g == w, "{dtype} {acts:?} portable={portable}: output {i} differs from the reference");
            }
        }
    }
}

/// The final norm, a ternary LM head and ARGMAX: the norm and the head's quantization fuse;
/// logits and ids bit-identical to the unfused program.
#[test]
fn bitnet_lm_head_and_argmax_fused_equal_unfused() {
    if gpu_tests_skipped() {
        return;
    }
    for (seed, dtype, n) in [(1, DType::I2_S, 1), (2, DType::TQ2_0, 3), (3, DType::TQ1_0, 2)] {
        let mut rng = SplitMix64(seed);
        let (d, vocab) = (256, 517);
        let w = ternary(dtype, vocab, d, &mut rng, false);
        let inputs = vec![
            ("x".to_string(), matrix("x", n, d, randn(&mut rng, n * d, 2.0))),
            ("nw".to_string(), vector("nw", (0..d).map(|_| rng.range(0.5, 1.5) as f32).collect())),
            (
                "head".to_string(),
                HostTensor::from_bytes("head", dtype, Shape::matrix(vocab, d).expect("shape"), &w).expect("sizes"),
            ),
        ];
        let build = |b: &mut ProgramBuilder, name: &dyn Fn(&str) -> String, ids: &[TensorId]| {
            let normed = b.alloc(&name("normed"), DType::F32, &[n, d])?;
            let logits = b.alloc(&name("logits"), DType::F32, &[n, vocab])?;
            let am = b.alloc(&name("argmax"), DType::U32, &[n])?;
            b.rms_norm(normed, ids[0], ids[1], 1e-5)?;
            b.bitlinear(logits, normed, ids[2], None)?;
            b.argmax(am, logits)?;
            Ok(vec![normed, logits, am])
        };
        for portable in [false, true] {
            let (fused, unfused, _, fk, uk) = fused_and_unfused(portable, &inputs, &[], &build);
            assert_eq!(fk.len() + 1, uk.len(), "norm + quantize fused: {fk:?}");
            assert_bits(&fused, &unfused, &format!("LM head {dtype} n={n}")).unwrap_or_else(|e| panic!("{e}"));
        }
    }
}

/// Shared quantization and the residual epilogue against the reference engine on exact data
/// (module docs): equal outputs.
#[test]
fn shared_quantization_and_residual_add_match_the_reference_exactly() {
    if gpu_tests_skipped() {
        return;
    }
    for (seed, dtype, n, scaled) in
        [(11, DType::I2_S, 1, false), (12, DType::TQ2_0, 3, true), (13, DType::TQ1_0, 1, true)]
    {
        let mut rng = SplitMix64(seed);
        let (k, m) = (512, 75);
        let mut x = Vec::new();
        for _ in 0..n {
            let start = x.len();
            x.extend((0..k).map(|_| rng.below(255) as f32 - 127.0));
            let i = start + rng.below(k as u64) as usize;
            x[i] = 127.0 * rng.sign();
        }
        let r: Vec<f32> = (0..n * m).map(|_| (rng.below(1 << 12) as f32 - 2048.0) / 8.0).collect();
        let mut inputs = vec![("x".to_string(), matrix("x", n, k, x)), ("r".to_string(), matrix("r", n, m, r))];
        for name in ["w1", "w2", "w3"] {
            let w = ternary(dtype, m, k, &mut rng, true);
            inputs.push((
                name.to_string(),
                HostTensor::from_bytes(name, dtype, Shape::matrix(m, k).expect("shape"), &w).expect("sizes"),
            ));
        }
        inputs.push(("s".to_string(), vector("s", vec![[0.5, 2.0, -1.0, 0.25][rng.below(4) as usize]])));
        let build = |b: &mut ProgramBuilder, name: &dyn Fn(&str) -> String, ids: &[TensorId]| {
            let [x, r, w1, w2, w3, s] = ids[..] else {
                return Err(IsaError::Invalid { op: "test", reason: "inputs".to_string() });
            };
            let scale = scaled.then_some(s);
            let (y1, y2, p) = (
                b.alloc(&name("y1"), DType::F32, &[n, m])?,
                b.alloc(&name("y2"), DType::F32, &[n, m])?,
                b.alloc(&name("p"), DType::F32, &[n, m])?,
            );
            b.bitlinear(y1, x, w1, scale)?;
            b.bitlinear(y2, x, w2, None)?;
            b.bitlinear(p, x, w3, scale)?;
            b.add(r, r, p)?;
            Ok(vec![y1, y2, p, r])
        };
        for portable in [false, true] {
            let (fused, unfused, reference, fk, uk) = fused_and_unfused(portable, &inputs, &[], &build);
            // Unfused: 3 × (quantize + product) + add = 7; fused: one quantize, 3 products.
            assert_eq!((fk.len(), uk.len()), (4, 7), "{fk:?}");
            assert_bits(&fused, &unfused, "shared quantization + residual").unwrap_or_else(|e| panic!("{e}"));
            for (i, (g, w)) in fused.iter().zip(&reference).enumerate() {
                let (g, w) = (f32s(g), f32s(w));
                assert!(
                    g == w,
                    "{dtype} n={n} portable={portable}: output {i} differs from the reference: {g:?} vs {w:?}"
                );
            }
        }
    }
}

/// RMS_NORM + quantization (in place and not) against the reference: the normed tensor
/// within RMS_NORM's tolerance, the int8 activations and scales exact (module docs).
#[test]
fn norm_quantization_matches_the_reference() {
    if gpu_tests_skipped() {
        return;
    }
    const U: f64 = 1.0 / 16_777_216.0;
    // rows.rs: RMS_NORM's relative tolerance, (depth/2 + 16)·u with depth = ⌈d/64⌉ + 256.
    let rms_norm_rel = |d: usize| (((d.div_ceil(64) + 256) as f64 / 2.0 + 16.0) * U) as f32;
    // 8320: a long row (256 threads, eight four-load steps each).
    for (seed, n, d, inplace) in
        [(21, 1, 256, false), (22, 3, 1280, true), (23, 2, 128, true), (24, 5, 384, false), (25, 2, 8320, true)]
    {
        let mut rng = SplitMix64(seed);
        let m = 33;
        let w = ternary(DType::I2_S, m, d, &mut rng, false);
        let inputs = [
            ("x".to_string(), matrix("x", n, d, randn(&mut rng, n * d, 3.0))),
            ("nw".to_string(), vector("nw", (0..d).map(|_| rng.range(0.5, 1.5) as f32).collect())),
            (
                "w".to_string(),
                HostTensor::from_bytes("w", DType::I2_S, Shape::matrix(m, d).expect("shape"), &w).expect("sizes"),
            ),
        ];
        let build = |b: &mut ProgramBuilder, name: &dyn Fn(&str) -> String, ids: &[TensorId]| {
            let h = if inplace { ids[0] } else { b.alloc(&name("h"), DType::F32, &[n, d])? };
            let y = b.alloc(&name("y"), DType::F32, &[n, m])?;
            b.rms_norm(h, ids[0], ids[1], 1e-5)?;
            b.bitlinear(y, h, ids[2], None)?;
            Ok(vec![h, y])
        };
        // The norm's loops, and its held-row variant (GpuOptions::held_norm: rows up to 8192).
        for (portable, held_norm) in [(false, false), (true, false), (false, true), (true, true)] {
            let inputs: Vec<(&str, HostTensor)> = inputs.iter().map(|(n, t)| (n.as_str(), t.clone())).collect();
            let mut pair = if held_norm { held_norm_pair(portable, false) } else { pair_for(portable) };
            let (got, want, (kernels, acts, scales)) = pair.run_inspect(&inputs, &[], build, |g, p| {
                let k = g.dispatched_kernels(p).unwrap_or_default();
                let a = g.read_scratch(p, ScratchKey::BitlinearActivations).expect("activations");
                let s = g.read_scratch(p, ScratchKey::BitlinearScales).expect("scales");
                (k, a, s)
            });
            assert_eq!(kernels.len(), 2, "{kernels:?}");
            let what =
                format!("RMS_NORM+BITLINEAR n={n} d={d} in place={inplace} portable={portable} held={held_norm}");
            let h = f32s(&got[0]);
            assert_close(&h, &f32s(&want[0]), f32::MIN_POSITIVE, rms_norm_rel(d), &what)
                .unwrap_or_else(|e| panic!("{e}"));
            let scales = f32s(&scales);
            for r in 0..n {
                let row = &h[r * d..(r + 1) * d];
                let s = bitlinear_act_scale(row.iter().fold(0f32, |a, v| a.max(v.abs())));
                assert_eq!(scales[r].to_bits(), s.to_bits(), "{what}: row {r} scale");
                for (i, &v) in row.iter().enumerate() {
                    let q = acts[r * d + i] as i8;
                    let want = bitlinear_quantize(v, s);
                    let p = (v * s).abs();
                    let ulp = f32::from_bits(p.to_bits() + 1) - p;
                    let near_half = ((p - p.floor()) - 0.5).abs() <= ulp;
                    assert!(
                        q == want || (near_half && (q as i32 - want as i32).abs() == 1),
                        "{what}: q[{r},{i}] {q} vs {want}"
                    );
                }
            }
        }
    }
}

/// Rows long enough that the one-token products' invocations hold several code words each
/// (layer_case's rows are at most 64 words, one per invocation of 64): d of 3328 (208 words:
/// up to four per invocation of q, k, v, gate and up) and ff of 4352 (272 words: up to
/// five per invocation of down). Also ff of 8192, the longest row `norm_quant` holds in
/// registers with `GpuOptions::held_norm` (32 elements per invocation of 256, every one of
/// its named vectors used), and 8448, past it (the looped passes), with that variant on.
#[test]
fn bitnet_layers_with_long_rows_fused_equal_unfused_bit_for_bit() {
    if gpu_tests_skipped() {
        return;
    }
    let cases = FORMATS
        .into_iter()
        .enumerate()
        .flat_map(|(i, dtype)| [(i, dtype, 4352, false), (i, dtype, [8192, 8448][i % 2], true)]);
    for (i, dtype, ff, held_norm) in cases {
        let d = 3328;
        let c = Layer {
            dtype,
            n: 1,
            d,
            ff,
            head_dim: 64,
            kv_heads: d / 128,
            pos: 3,
            runtime_pos: i % 2 == 0,
            scales: i % 2 == 1,
            relu2: true,
            seed: 40 + i as u64,
        };
        let inputs = c.inputs();
        let params = if c.runtime_pos { vec![ParamValue::U32(c.pos)] } else { vec![] };
        let kernels = Kernels { portable: false, gpu: false, held_norm };
        let (fused, unfused, _, fk, uk) =
            fused_and_unfused_on(kernels, &inputs, &params, &|b, name, ids| c.build(b, name, ids));
        assert!(fk.len() < uk.len(), "nothing fused: {fk:?}");
        assert_bits(&fused, &unfused, &format!("{c:?} {kernels:?}")).unwrap_or_else(|e| panic!("{e}"));
    }
}

/// Every pattern the pass matches is fused: the dispatches of two BitNet layers at one
/// token, fused vs unfused (`dispatched_kernels`).
#[test]
fn bitnet_layer_dispatches_are_fused() {
    if gpu_tests_skipped() {
        return;
    }
    for scales in [false, true] {
        let c = Layer {
            dtype: DType::TQ2_0,
            n: 1,
            d: 256,
            ff: 512,
            head_dim: 64,
            kv_heads: 2,
            pos: 1,
            runtime_pos: false,
            scales,
            relu2: true,
            seed: 5,
        };
        let inputs = c.inputs();
        let (fused, unfused, _, fk, uk) = fused_and_unfused(false, &inputs, &[], &|b, name, ids| c.build(b, name, ids));
        assert_bits(&fused, &unfused, "dispatch-count layer").unwrap_or_else(|e| panic!("{e}"));
        eprintln!("unfused ({} per layer): {uk:?}\nfused ({} per layer): {fk:?}", uk.len() / LAYERS, fk.len() / LAYERS);
        let per_layer: Vec<&str> = fk[..fk.len() / LAYERS].iter().map(|s| s.as_str()).collect();
        let count = |k: &str| per_layer.iter().filter(|s| s.contains(k)).count();
        // norm + quantization: the block norms and the sub-norms; no separate quantize or add.
        assert_eq!(count("norm_quant.wgsl"), 4, "{per_layer:?}");
        assert_eq!(count(":quantize"), 0, "{per_layer:?}");
        assert_eq!(count("rms_norm.wgsl"), 0, "{per_layer:?}");
        // q, k, v with ROPE and KV_WRITE in one dispatch (the entry point with the output
        // scales when there are some); gate and up with the activation and the multiply in
        // one; o and down with the residual add. (lavapipe allows 32 storage buffers per
        // stage: the merged products need 14, or 17 with output scales, and 11.)
        let rope = if scales { ":gemv_multi_rope_scaled" } else { ":gemv_multi_rope" };
        assert_eq!(per_layer.iter().filter(|s| s.ends_with(rope)).count(), 1, "{per_layer:?}");
        assert_eq!(count(":gemv_gated"), 1, "{per_layer:?}");
        assert_eq!(count("bitlinear.wgsl:gemv") + count("bitlinear.wgsl (subgroups):gemv"), 0, "{per_layer:?}");
        assert_eq!(count("residual_add.wgsl"), 2, "{per_layer:?}");
        assert_eq!(count("elementwise.wgsl"), 0, "{per_layer:?}");
        // ROPE q, k and KV_WRITE k, v: in the q/k/v products' epilogue.
        assert_eq!(count("rope_kv.wgsl") + count("rope.wgsl") + count("kv_write.wgsl"), 0, "{per_layer:?}");
        assert_eq!(fk.len() % LAYERS, 0);
        assert_eq!(fk[..fk.len() / LAYERS], fk[fk.len() / LAYERS..], "both layers alike");
        assert_eq!((uk.len() / LAYERS, fk.len() / LAYERS), (27, 9), "dispatches per layer, unfused and fused");
    }
}

/// Dispatches per decode token of a tiny BitNet fixture (`Engine::counters`), fusion on and
/// off: the layers' share must drop to 9 per layer from 27 (lavapipe: 32 storage buffers
/// per stage, enough for every pattern).
#[test]
fn tiny_fixture_decode_dispatches() {
    if gpu_tests_skipped() {
        return;
    }
    use purebee_engine_gpu::GpuOptions;
    use purebee_isa::Engine;
    use purebee_memory::gguf::GgufFile;
    use purebee_runtime::{KvCacheTypes, LogitsRows, Model};
    let per_token = |fuse: bool, caches: KvCacheTypes| {
        let gpu = GpuEngine::new(&GpuOptions { fuse, ..GpuOptions::default() }).expect("a GPU adapter");
        let file = GgufFile::open(purebee_tests::tiny("tiny_bitnet_tq2_0.gguf")).expect("fixture opens");
        let mut model = Model::load(gpu, &file).expect("model loads");
        model.set_kv_cache_types(caches);
        let mut session = model.new_session(16).expect("session allocates");
        model.forward(&mut session, &[1], 0, LogitsRows::Last).expect("decode step");
        let before = model.engine().counters().expect("counted").dispatches;
        model.forward(&mut session, &[2], 1, LogitsRows::Last).expect("decode step");
        let after = model.engine().counters().expect("counted").dispatches;
        (after - before, model.config().n_layer as u64)
    };
    // Every pattern applies over F32 caches and over F16 ones (the default: the ROPE
    // epilogue rounds into them).
    for (caches, saved) in [(KvCacheTypes::F32, 18), (KvCacheTypes::F16, 18)] {
        let ((unfused, layers), (fused, _)) = (per_token(false, caches), per_token(true, caches));
        eprintln!(
            "tiny_bitnet_tq2_0 decode, {caches:?}: {unfused} dispatches per token unfused, {fused} fused, {layers} layers"
        );
        // The head (EMBED, final norm, LM head, ARGMAX) changes by at most one dispatch (its
        // norm + quantization); every layer saves `saved`.
        let ok = (unfused - fused) >= saved * layers && unfused - fused <= saved * layers + 1;
        assert!(ok, "{caches:?}: {unfused} vs {fused}");
    }
}

/// An LM head with ARGMAX (pattern ArgmaxPartials): its weight type, the activations, the
/// row length, the vocabulary, whether the weight is bound as row windows, and whether x
/// holds a NaN (with f32 activations every logit is NaN: the id is 0).
#[derive(Clone, Debug)]
struct Head {
    dtype: DType,
    acts: LinearActivations,
    d: usize,
    vocab: usize,
    windowed: bool,
    nan_x: bool,
    seed: u64,
}

impl Head {
    /// The rows of weight 1.0 (dominant, since x > 0 and the other rows are small): equal
    /// logits, in different slots (and windows); the id is the first.
    fn tied(&self) -> [usize; 3] {
        [1 + self.seed as usize % (self.vocab / 3), self.vocab / 2 + 3, self.vocab - 1]
    }

    /// x `[1, d]` and the weight `[vocab, d]` (bytes): small random rows, the tied
    /// dominant rows, and NaN rows just before and after the first of them.
    fn inputs(&self) -> (Vec<f32>, Vec<u8>) {
        let mut rng = SplitMix64(self.seed);
        let (d, vocab) = (self.d, self.vocab);
        let mut x: Vec<f32> = (0..d).map(|_| rng.range(0.5, 1.5) as f32).collect();
        if self.nan_x {
            x[rng.below(d as u64) as usize] = f32::NAN;
        }
        let tied = self.tied();
        let nan_rows = [tied[0] - 1, tied[0] + 1];
        let mut bytes = Vec::new();
        for r in 0..vocab {
            let mut row: Vec<f32> = (0..d).map(|_| rng.range(-0.05, 0.05) as f32).collect();
            if tied.contains(&r) {
                row.iter_mut().for_each(|v| *v = 1.0);
            }
            let nan = nan_rows.contains(&r);
            if nan && self.dtype != DType::Q8_0 {
                row[rng.below(d as u64) as usize] = f32::NAN;
            }
            match self.dtype {
                DType::F32 => row.iter().for_each(|v| bytes.extend_from_slice(&v.to_le_bytes())),
                DType::F16 => row.iter().for_each(|&v| bytes.extend_from_slice(&half::f16::from_f32(v).to_le_bytes())),
                DType::Q8_0 => {
                    let mut enc = encode_q8_0_row(&row).expect("whole blocks");
                    if nan {
                        enc[..2].copy_from_slice(&half::f16::NAN.to_le_bytes());
                        // a NaN block scale
                    }
                    bytes.extend_from_slice(&enc);
                }
                other => panic!("no head of {other} in this test"),
            }
        }
        (x, bytes)
    }
}

fn head_case() -> impl Strategy<Value = Head> {
    let kinds = [
        (DType::F32, LinearActivations::F32),
        (DType::F16, LinearActivations::F32),
        (DType::Q8_0, LinearActivations::F32),
        (DType::Q8_0, LinearActivations::Int8Blocks),
    ];
    (0..4usize, 1..=5usize, 0..9usize, 20..1500usize, any::<bool>(), any::<u64>()).prop_map(
        move |(kind, blocks, extra, vocab, nan_x, seed)| {
            let (dtype, acts) = kinds[kind];
            // Q8_0 rows are whole blocks of 32; float rows any length.
            let d = if dtype == DType::Q8_0 { 32 * blocks } else { 32 * blocks - extra };
            Head { dtype, acts, d, vocab, windowed: false, nan_x: nan_x && seed % 4 == 0, seed }
        },
    )
}

/// Runs a head case fused and unfused (windowed pairs when the case says so): asserts the
/// pattern is fused and the bits equal, and checks the logits against the reference with
/// LINEAR's tolerance and the id exactly.
fn check_head(c: &Head, kernels: Kernels) -> Result<(), TestCaseError> {
    let Kernels { portable, gpu, .. } = kernels;
    let (x, w) = c.inputs();
    let (d, vocab) = (c.d, c.vocab);
    let inputs = [
        ("x", matrix("x", 1, d, x.clone())),
        ("head", HostTensor::from_bytes("head", c.dtype, Shape::matrix(vocab, d).expect("shape"), &w).expect("sizes")),
    ];
    let acts = c.acts;
    let build = |b: &mut ProgramBuilder, name: &dyn Fn(&str) -> String, ids: &[TensorId]| {
        let logits = b.alloc(&name("logits"), DType::F32, &[1, vocab])?;
        let id = b.alloc(&name("id"), DType::U32, &[1])?;
        b.linear_with(logits, ids[0], ids[1], acts)?;
        b.argmax(id, logits)?;
        Ok(vec![logits, id])
    };
    let kernels = |g: &mut GpuEngine, p: &purebee_isa::Program| g.dispatched_kernels(p).unwrap_or_default();
    let (fused_pair, unfused) = if c.windowed {
        (windowed_pair(), windowed_unfused_pair())
    } else if gpu {
        (gpu_kernels_pair(portable, true), gpu_kernels_pair(portable, false))
    } else {
        (pair_for(portable), unfused_pair(portable))
    };
    let (mut fused_pair, mut unfused) = (fused_pair, unfused);
    let (fused, reference, fk) = fused_pair.run_inspect(&inputs, &[], build, kernels);
    let (unfused, _, uk) = unfused.run_inspect(&inputs, &[], build, kernels);
    let what = format!("{c:?} portable={portable} gpu={gpu}");
    // The product kernels carry the first pass, one dispatch per window as unfused; the
    // ARGMAX is the small second pass.
    let heads = fk.iter().filter(|k| k.starts_with("linear_argmax.wgsl")).count();
    let products = uk.iter().filter(|k| k.contains(":gemv")).count();
    prop_assert!(heads >= 1 && heads == products, "{what}: {fk:?} vs {uk:?}");
    // The same dispatches apart from x's rounding: on a GPU's kernels the unfused LINEAR of
    // a small head rounds x in its products (linear.rs, rounds_in_product), never the
    // fused head (gemv_argmax reads the rounded x).
    let roundings = |ks: &[String]| ks.iter().filter(|k| k.ends_with(":quantize_blocks")).count();
    prop_assert_eq!(fk.len() - roundings(&fk), uk.len() - roundings(&uk), "{}: {:?} vs {:?}", what, fk, uk);
    prop_assert!(roundings(&fk) <= 1, "{}: {:?}", what, fk);
    prop_assert!(fk.last().is_some_and(|k| k.ends_with(":argmax_partials")), "{}: {:?}", what, fk);
    prop_assert!(!fk.iter().any(|k| k.ends_with(":argmax")), "{}: {:?}", what, fk);
    if c.windowed {
        prop_assert!(heads > 1, "{what}: one window: {fk:?}");
    }
    assert_bits(&fused, &unfused, &what)?;
    // The id: the reference's and the expected row exactly (the tied rows dominate by far,
    // so LINEAR's rounding cannot move the maximum; NaN rows are skipped).
    let (id, want_id) = (u32s(&fused[1]), u32s(&reference[1]));
    // (Int8 blocks round a NaN element to 0, so only f32 activations make every logit NaN.)
    let expected = if c.nan_x && acts == LinearActivations::F32 { 0 } else { c.tied()[0] as u32 };
    prop_assert_eq!(&id, &want_id, "{}", what);
    prop_assert_eq!(id, vec![expected], "{}", what);
    // The logits: linear.rs's tolerance, γ_{k+2}·Σ|x·w| + u·|ref| (f32 activations) or
    // γ_{k+6}·Σ|x̂|·|w| + u·|ref| (int8 blocks, Q8_0: no block offset); NaN where the
    // reference has NaN.
    const U: f64 = 1.0 / 16_777_216.0;
    let (got, want) = (f32s(&fused[0]), f32s(&reference[0]));
    let mut xh: Vec<f64> = x.iter().map(|&v| v as f64).collect();
    let extra = if acts == LinearActivations::Int8Blocks {
        let (mut q, mut s) = (vec![0i8; d], vec![0f32; d.div_ceil(LINEAR_ACT_BLOCK)]);
        quantize_blocks(&x, &mut q, &mut s);
        xh = q.iter().enumerate().map(|(i, &qi)| qi as f64 / s[i / LINEAR_ACT_BLOCK] as f64).collect();
        6
    } else {
        2
    };
    let gamma = (d + extra) as f64 * U / (1.0 - (d + extra) as f64 * U);
    let wq = QuantMatrix::new(c.dtype, &w, vocab, d).expect("weight");
    let mut row = vec![0f32; d];
    for j in 0..vocab {
        wq.dequantize_row(j, &mut row).expect("row");
        let sum_abs: f64 = xh.iter().zip(&row).map(|(a, b)| (a * *b as f64).abs()).sum();
        let (g, r) = (got[j] as f64, want[j] as f64);
        let ok = (g.is_nan() && r.is_nan()) || (g - r).abs() <= gamma * sum_abs + U * r.abs();
        prop_assert!(ok, "{}: logit {} {} vs reference {}", what, j, g, r);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(8))]

    /// LINEAR + ARGMAX at one token, random shapes (odd row lengths, odd vocabularies),
    /// F32, F16 and Q8_0 weights, f32 and int8-block activations, ties and NaN rows.
    #[test]
    fn lm_head_argmax_fused_equal_unfused_and_the_reference(
        c in head_case(), portable in any::<bool>(), gpu in any::<bool>()
    ) {
        if gpu_tests_skipped() {
            return Ok(());
        }
        check_head(&c, Kernels { portable, gpu, held_norm: false })?;
    }
}

/// The two LM-head kernels' less common paths: rows longer than `gemv_rows` takes
/// (`gemv_argmax`), a head split into row windows (256 KiB bindings: every window's slots
/// are combined), and an x with a NaN (every logit NaN: id 0).
#[test]
fn lm_head_argmax_long_rows_windows_and_nan() {
    if gpu_tests_skipped() {
        return;
    }
    let cases = [
        (DType::F16, LinearActivations::F32, 2100, 203, false, false),
        (DType::Q8_0, LinearActivations::Int8Blocks, 2112, 77, false, true),
        (DType::F32, LinearActivations::F32, 95, 1900, true, false),
        (DType::Q8_0, LinearActivations::Int8Blocks, 160, 3001, true, false),
        (DType::F16, LinearActivations::F32, 63, 2500, true, true),
    ];
    for (i, (dtype, acts, d, vocab, windowed, nan_x)) in cases.into_iter().enumerate() {
        let c = Head { dtype, acts, d, vocab, windowed, nan_x, seed: 40 + i as u64 };
        for (portable, gpu) in [(false, false), (true, false), (false, true)] {
            check_head(&c, Kernels { portable, gpu, held_norm: false }).unwrap_or_else(|e| panic!("{e}"));
        }
    }
}
