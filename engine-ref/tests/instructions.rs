//! Every instruction on the reference engine against hand-computed or float64 expectations,
//! with edge sizes (1, and lengths that are not multiples of 32, 128 or 256).

use purebee_engine_ref::RefEngine;
use purebee_isa::ops::{Attention, Rope, RopeStyle};
use purebee_isa::{Engine, ExecError, ParamValue, ProgramBuilder, TensorId};
use purebee_memory::{DType, HostTensor, MemoryError, Shape};
use purebee_rng::SplitMix64;

/// Odd sizes: 1, and lengths on both sides of 32, 128 and 256.
const EDGE_LENS: [usize; 8] = [1, 7, 31, 33, 127, 129, 255, 257];

/// Test data from the one SplitMix64 stream, so the tests need no seed plumbing.
trait Draws {
    /// `n` uniform values in [-1, 1).
    fn vec(&mut self, n: usize) -> Vec<f32>;
}

impl Draws for SplitMix64 {
    fn vec(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.symmetric_f32()).collect()
    }
}

fn shape(d: &[usize]) -> Shape {
    Shape::new(d).expect("valid shape")
}

/// Inserts a host tensor (a "weight") into the engine's registry.
fn weight(e: &mut RefEngine, name: &str, t: HostTensor) -> TensorId {
    e.memory_mut().insert(name, t).expect("new name")
}

fn f32_weight(e: &mut RefEngine, name: &str, dims: &[usize], v: Vec<f32>) -> TensorId {
    weight(e, name, HostTensor::from_f32(name, shape(dims), v).expect("sizes agree"))
}

fn assert_close(got: &[f32], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let diff = (g as f64 - w).abs();
        assert!(diff <= tol * (1.0 + w.abs()), "{what}: index {i}: got {g}, expected {w}, difference {diff}");
    }
}

#[test]
fn grid_alloc_write_read_free() {
    let mut e = RefEngine::new();
    let mut b = ProgramBuilder::new("p", e.memory_mut());
    let x = b.alloc("x", DType::F32, &[3]).expect("declare");
    let c = b.alloc("c", DType::U32, &[2]).expect("declare");
    b.grid_write(c, vec![1, 0, 0, 0, 2, 0, 0, 0].into()).expect("8 bytes");
    b.sync().expect("valid");
    b.silu(x, x).expect("valid after SYNC");
    let p = b.finish();
    e.execute(&p, &[]).expect("runs");
    assert_eq!(e.read_f32(x).expect("live"), vec![0.0; 3]);
    assert_eq!(e.read_u32(c).expect("live"), vec![1, 2]);
    e.write_f32(x, &[1.0, 2.0, 3.0]).expect("right size");
    assert_eq!(e.read_f32(x).expect("live"), vec![1.0, 2.0, 3.0]);
    assert!(matches!(e.write_f32(x, &[1.0]), Err(ExecError::Memory { source: MemoryError::SizeMismatch { .. }, .. })));
    assert_eq!(e.memory().bytes_held(), 12 + 8);

    let mut b = ProgramBuilder::new("free", e.memory_mut());
    b.free(x).expect("valid");
    let free = b.finish();
    e.execute(&free, &[]).expect("runs");
    assert_eq!(e.memory().bytes_held(), 8);
    assert_eq!(e.read(x), Err(ExecError::Memory { op: "GRID_READ", source: MemoryError::Freed { name: "x".into() } }));
    // Running FREE again finds the tensor already freed: a run-time error naming it.
    assert_eq!(
        e.execute(&free, &[]),
        Err(ExecError::Memory { op: "FREE", source: MemoryError::Freed { name: "x".into() } })
    );
}

#[test]
fn an_output_that_was_never_allocated_is_an_error_naming_it() {
    let mut e = RefEngine::new();
    let mut b = ProgramBuilder::new("p", e.memory_mut());
    let x = b.alloc("x", DType::F32, &[4]).expect("declare");
    let y = b.declare("y", DType::F32, &[4]).expect("declare");
    b.silu(y, x).expect("valid");
    let p = b.finish();
    assert_eq!(
        e.execute(&p, &[]),
        Err(ExecError::Memory { op: "SILU", source: MemoryError::NotAllocated { name: "y".into() } })
    );
}

#[test]
fn embed_gathers_rows_of_f32_f16_and_q8_0_tables() {
    let mut e = RefEngine::new();
    let t32 = f32_weight(&mut e, "t32", &[3, 2], vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
    let f16: Vec<u8> = [1.5f32, -2.0, 0.25, 8.0].iter().flat_map(|&v| half::f16::from_f32(v).to_le_bytes()).collect();
    let t16 = weight(&mut e, "t16", HostTensor::from_bytes("t16", DType::F16, shape(&[2, 2]), &f16).expect("size"));
    // One Q8_0 row: d = 0.5, q_i = i − 16.
    let mut q8 = half::f16::from_f32(0.5).to_le_bytes().to_vec();
    q8.extend((0..32).map(|i| (i as i8 - 16) as u8));
    let tq = weight(&mut e, "tq", HostTensor::from_bytes("tq", DType::Q8_0, shape(&[1, 32]), &q8).expect("size"));
    let mut b = ProgramBuilder::new("setup", e.memory_mut());
    let ids = b.alloc("ids", DType::U32, &[3]).expect("declare");
    let o32 = b.alloc("o32", DType::F32, &[3, 2]).expect("declare");
    let ids2 = b.alloc("ids2", DType::U32, &[1]).expect("declare");
    let o16 = b.alloc("o16", DType::F32, &[1, 2]).expect("declare");
    let oq = b.alloc("oq", DType::F32, &[1, 32]).expect("declare");
    let zero = b.alloc("zero", DType::U32, &[1]).expect("declare");
    let setup = b.finish();
    e.execute(&setup, &[]).expect("allocates");
    // GRID_ALLOC zero-fills, so the gathering program is a separate one that allocates nothing.
    let mut b = ProgramBuilder::new("p", e.memory_mut());
    b.embed(o32, t32, ids).expect("valid");
    b.embed(o16, t16, ids2).expect("valid");
    b.embed(oq, tq, zero).expect("valid");
    let p = b.finish();
    e.write_u32(ids, &[2, 0, 2]).expect("size");
    e.write_u32(ids2, &[1]).expect("size");
    e.execute(&p, &[]).expect("runs");
    assert_eq!(e.read_f32(o32).expect("live"), vec![4.0, 5.0, 0.0, 1.0, 4.0, 5.0]);
    assert_eq!(e.read_f32(o16).expect("live"), vec![0.25, 8.0]);
    assert_eq!(e.read_f32(oq).expect("live"), (0..32).map(|i| (i as f32 - 16.0) * 0.5).collect::<Vec<_>>());
    e.write_u32(ids, &[0, 3, 1]).expect("size");
    assert_eq!(e.execute(&p, &[]), Err(ExecError::TokenOutOfRange { tensor: "ids".into(), row: 1, id: 3, vocab: 3 }));
}

#[test]
fn rms_norm_matches_hand_and_f64_values() {
    let mut e = RefEngine::new();
    let w = f32_weight(&mut e, "w", &[2], vec![1.0, 2.0]);
    let mut b = ProgramBuilder::new("p", e.memory_mut());
    let x = b.alloc("x", DType::F32, &[1, 2]).expect("declare");
    b.rms_norm(x, x, w, 0.0).expect("in place");
    let p = b.finish();
    // Allocation happens in the program, so write after a first run and use a second,
    // allocation-free program for the computation.
    e.execute(&p, &[]).expect("runs");
    let mut b = ProgramBuilder::new("norm", e.memory_mut());
    b.rms_norm(x, x, w, 0.0).expect("in place");
    let norm = b.finish();
    e.write_f32(x, &[3.0, 4.0]).expect("size");
    e.execute(&norm, &[]).expect("runs");
    // mean(x²) = 12.5, so x / sqrt(12.5) · w.
    let r = 12.5f64.sqrt();
    assert_close(&e.read_f32(x).expect("live"), &[3.0 / r, 8.0 / r], 1e-7, "rms_norm");

    let mut rng = SplitMix64(1);
    for &d in &EDGE_LENS {
        let mut e = RefEngine::new();
        let (xv, wv) = (rng.vec(3 * d), rng.vec(d));
        let x = f32_weight(&mut e, "x", &[3, d], xv.clone());
        let w = f32_weight(&mut e, "w", &[d], wv.clone());
        let mut b = ProgramBuilder::new("p", e.memory_mut());
        let y = b.alloc("y", DType::F32, &[3, d]).expect("declare");
        b.rms_norm(y, x, w, 1e-5).expect("valid");
        let p = b.finish();
        e.execute(&p, &[]).expect("runs");
        let mut want = Vec::new();
        for r in 0..3 {
            let row = &xv[r * d..(r + 1) * d];
            let ms: f64 = row.iter().map(|&v| (v as f64).powi(2)).sum::<f64>() / d as f64;
            want.extend(row.iter().zip(&wv).map(|(&v, &w)| v as f64 / (ms + 1e-5f32 as f64).sqrt() * w as f64));
        }
        // One f32 rounding of an f64 result: half an ulp, 2^-24 relative.
        assert_close(&e.read_f32(y).expect("live"), &want, 6e-8, &format!("rms_norm d={d}"));
    }
}

#[test]
fn linear_matches_hand_and_f64_values_for_float_and_block_weights() {
    let mut e = RefEngine::new();
    // x [2, 3], W [2, 3]: out = x · Wᵀ.
    let x = f32_weight(&mut e, "x", &[2, 3], vec![1.0, 2.0, 3.0, -1.0, 0.5, 0.0]);
    let w = f32_weight(&mut e, "w", &[2, 3], vec![1.0, 0.0, -1.0, 2.0, 2.0, 2.0]);
    let mut b = ProgramBuilder::new("p", e.memory_mut());
    let y = b.alloc("y", DType::F32, &[2, 2]).expect("declare");
    b.linear(y, x, w).expect("valid");
    let p = b.finish();
    e.execute(&p, &[]).expect("runs");
    assert_eq!(e.read_f32(y).expect("live"), vec![-2.0, 12.0, -1.0, -1.0]);

    // Q4_0: one block, d = 0.25, nibble i → value (i mod 16 − 8)·d.
    let mut e = RefEngine::new();
    let mut blk = half::f16::from_f32(0.25).to_le_bytes().to_vec();
    blk.extend((0..16u8).map(|i| i | ((15 - i) << 4)));
    let wq = weight(&mut e, "wq", HostTensor::from_bytes("wq", DType::Q4_0, shape(&[1, 32]), &blk).expect("size"));
    let x = f32_weight(&mut e, "x", &[1, 32], vec![1.0; 32]);
    let mut b = ProgramBuilder::new("p", e.memory_mut());
    let y = b.alloc("y", DType::F32, &[1, 1]).expect("declare");
    b.linear(y, x, wq).expect("valid");
    let p = b.finish();
    e.execute(&p, &[]).expect("runs");
    // Low nibbles 0..15 and high nibbles 15..0: Σ (q − 8) = 2 · (120 − 128) = −16; × 0.25.
    assert_eq!(e.read_f32(y).expect("live"), vec![-4.0]);

    // F16 weights at odd sizes against an f64 product of the decoded weights.
    let mut rng = SplitMix64(2);
    for &k in &EDGE_LENS {
        let (n, m) = (3, 5);
        let mut e = RefEngine::new();
        let xv = rng.vec(n * k);
        let wv: Vec<half::f16> = rng.vec(m * k).into_iter().map(half::f16::from_f32).collect();
        let bytes: Vec<u8> = wv.iter().flat_map(|v| v.to_le_bytes()).collect();
        let x = f32_weight(&mut e, "x", &[n, k], xv.clone());
        let w = weight(&mut e, "w", HostTensor::from_bytes("w", DType::F16, shape(&[m, k]), &bytes).expect("size"));
        let mut b = ProgramBuilder::new("p", e.memory_mut());
        let y = b.alloc("y", DType::F32, &[n, m]).expect("declare");
        b.linear(y, x, w).expect("valid");
        let p = b.finish();
        e.execute(&p, &[]).expect("runs");
        let want: Vec<f64> = (0..n * m)
            .map(|idx| {
                let (r, j) = (idx / m, idx % m);
                (0..k).map(|i| xv[r * k + i] as f64 * wv[j * k + i].to_f64()).sum()
            })
            .collect();
        let got = e.read_f32(y).expect("live");
        for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
            // One rounding of the f64 sum to f32.
            assert!((g as f64 - w).abs() <= w.abs() * 6e-8 + 1e-30, "linear k={k}: index {i}: got {g}, expected {w}");
        }
    }
}

/// Packs codes t ∈ {−1, 0, +1} of one row into TQ2_0 blocks with scale `d` (docs/formats.md § TQ2_0:
/// byte 32c + m holds element 128c + 32n + m in bits 2n..2n+1; code t + 1).
fn tq2_0_row(trits: &[i8], d: f32) -> Vec<u8> {
    let mut out = Vec::new();
    for block in trits.chunks(256) {
        let mut qs = [0u8; 64];
        for (e, &t) in block.iter().enumerate() {
            let (c, rest) = (e / 128, e % 128);
            let (n, m) = (rest / 32, rest % 32);
            qs[32 * c + m] |= ((t + 1) as u8) << (2 * n);
        }
        out.extend(qs);
        out.extend(half::f16::from_f32(d).to_le_bytes());
    }
    out
}

/// Packs a whole tensor's codes into I2_S (docs/formats.md § I2_S: 128-element blocks, byte j holds
/// elements j, 32+j, 64+j, 96+j at shifts 6, 4, 2, 0; codes −1→0, 0→1, +1→2), then the f32
/// scale repeated 8 times.
fn i2_s_tensor(trits: &[i8], scale: f32) -> Vec<u8> {
    let mut out = Vec::new();
    for block in trits.chunks(128) {
        for j in 0..32 {
            let code = |g: usize| ((block[g * 32 + j] + 1) as u8) << (6 - 2 * g);
            out.push(code(0) | code(1) | code(2) | code(3));
        }
    }
    for _ in 0..8 {
        out.extend(scale.to_le_bytes());
    }
    out
}

#[test]
fn bitlinear_integer_sums_are_exact() {
    // x holds integers with max |x| = 127, so s = 1 and q = x: y = (Σ x·t)·d exactly.
    let k = 256;
    let mut rng = SplitMix64(3);
    let xv: Vec<f32> =
        (0..k).map(|i| if i == 5 { 127.0 } else { ((rng.next_u64() % 255) as i64 - 127) as f32 }).collect();
    let trits: Vec<i8> = (0..3 * k).map(|_| (rng.next_u64() % 3) as i8 - 1).collect();
    let mut tq = Vec::new();
    for row in trits.chunks(k) {
        tq.extend(tq2_0_row(row, 0.5));
    }
    for (dtype, bytes) in [(DType::TQ2_0, tq), (DType::I2_S, i2_s_tensor(&trits, 0.5))] {
        let mut e = RefEngine::new();
        let x = f32_weight(&mut e, "x", &[1, k], xv.clone());
        let w = weight(&mut e, "w", HostTensor::from_bytes("w", dtype, shape(&[3, k]), &bytes).expect("size"));
        let mut b = ProgramBuilder::new("p", e.memory_mut());
        let y = b.alloc("y", DType::F32, &[1, 3]).expect("declare");
        b.bitlinear(y, x, w, None).expect("valid");
        let p = b.finish();
        e.execute(&p, &[]).expect("runs");
        let want: Vec<f32> = trits
            .chunks(k)
            .map(|t| xv.iter().zip(t).map(|(&x, &t)| x as i64 * t as i64).sum::<i64>() as f32 * 0.5)
            .collect();
        assert_eq!(e.read_f32(y).expect("live"), want, "{dtype}");
    }
}

#[test]
fn bitlinear_quantizes_per_row_and_applies_block_and_output_scales() {
    // Row 0: max 2 → s = 63.5; x·s = [127, -31.75, 15.875, 63.5] → q = [127, -32, 16, 64]
    // (63.5 rounds half to even: 64). Row 1 is all zero (s = 127/1e-5, q = 0): y = 0.
    let k = 256;
    let mut xv = vec![0f32; 2 * k];
    xv[..4].copy_from_slice(&[2.0, -0.5, 0.25, 1.0]);
    xv[200] = 1.0; // in block 0 (TQ2_0 blocks are 256 long): q = 64
    let mut trits = vec![0i8; 2 * k];
    trits[..4].copy_from_slice(&[1, -1, 1, -1]);
    trits[200] = 1;
    trits[k + 3] = 1; // output row 1: only element 3
    let mut bytes = tq2_0_row(&trits[..k], 0.25);
    bytes.extend(tq2_0_row(&trits[k..], 0.75));
    let mut e = RefEngine::new();
    let x = f32_weight(&mut e, "x", &[2, k], xv);
    let w = weight(&mut e, "w", HostTensor::from_bytes("w", DType::TQ2_0, shape(&[2, k]), &bytes).expect("size"));
    let scale = f32_weight(&mut e, "w.scale", &[1], vec![3.0]);
    let mut b = ProgramBuilder::new("p", e.memory_mut());
    let y = b.alloc("y", DType::F32, &[2, 2]).expect("declare");
    let ys = b.alloc("ys", DType::F32, &[2, 2]).expect("declare");
    b.bitlinear(y, x, w, None).expect("valid");
    b.bitlinear(ys, x, w, Some(scale)).expect("valid");
    let p = b.finish();
    e.execute(&p, &[]).expect("runs");
    // y[0][0] = (127 + 32 + 16 − 64 + 64)·0.25 / 63.5; y[0][1] = 64·0.75 / 63.5.
    let want = [175.0 * 0.25 / 63.5, 64.0 * 0.75 / 63.5, 0.0, 0.0];
    assert_close(&e.read_f32(y).expect("live"), &want, 6e-8, "bitlinear");
    assert_close(&e.read_f32(ys).expect("live"), &want.map(|v| v * 3.0), 6e-8, "bitlinear with .scale");
}

#[test]
fn bitlinear_with_an_all_zero_weight_gives_exactly_zero() {
    let k = 384; // three I2_S blocks, not a multiple of 256
    let mut rng = SplitMix64(4);
    let mut e = RefEngine::new();
    let x = f32_weight(&mut e, "x", &[3, k], rng.vec(3 * k));
    let w = weight(
        &mut e,
        "w",
        HostTensor::from_bytes("w", DType::I2_S, shape(&[5, k]), &i2_s_tensor(&vec![0; 5 * k], 1.5)).expect("size"),
    );
    let mut b = ProgramBuilder::new("p", e.memory_mut());
    let y = b.alloc("y", DType::F32, &[3, 5]).expect("declare");
    b.bitlinear(y, x, w, None).expect("valid");
    let p = b.finish();
    e.execute(&p, &[]).expect("runs");
    assert!(e.read_f32(y).expect("live").iter().all(|&v| v == 0.0 && v.is_sign_positive()));
}

#[test]
fn elementwise_and_activations() {
    let xs = [-3.0f32, -1.0, -0.0, 0.0, 0.5, 1.0, 2.0];
    let mut e = RefEngine::new();
    let x = f32_weight(&mut e, "x", &[xs.len()], xs.to_vec());
    let z = f32_weight(&mut e, "z", &[xs.len()], vec![2.0; xs.len()]);
    let mut b = ProgramBuilder::new("p", e.memory_mut());
    let names = ["add", "mul", "silu", "relu2", "gelu"];
    let outs: Vec<TensorId> = names.iter().map(|n| b.alloc(n, DType::F32, &[xs.len()]).expect("declare")).collect();
    b.add(outs[0], x, z).expect("valid");
    b.mul(outs[1], x, z).expect("valid");
    b.silu(outs[2], x).expect("valid");
    b.relu2(outs[3], x).expect("valid");
    b.gelu(outs[4], x).expect("valid");
    let p = b.finish();
    e.execute(&p, &[]).expect("runs");
    assert_eq!(e.read_f32(outs[0]).expect("live"), xs.map(|v| v + 2.0).to_vec());
    assert_eq!(e.read_f32(outs[1]).expect("live"), xs.map(|v| v * 2.0).to_vec());
    let silu = |v: f64| v / (1.0 + (-v).exp());
    assert_close(&e.read_f32(outs[2]).expect("live"), &xs.map(|v| silu(v as f64)), 6e-8, "silu");
    assert_eq!(e.read_f32(outs[3]).expect("live"), vec![0.0, 0.0, 0.0, 0.0, 0.25, 1.0, 4.0]);
    // GELU (tanh form) at 1.0 is 0.841192; at −3 it is −0.0036373.
    let g = e.read_f32(outs[4]).expect("live");
    assert_close(&g[5..6], &[0.841_191_990_607_477_2], 1e-7, "gelu(1)");
    assert_close(&g[0..1], &[-0.003_637_392_828_159_018], 1e-7, "gelu(-3)");
}

#[test]
fn softmax_rows() {
    let mut e = RefEngine::new();
    let x = f32_weight(&mut e, "x", &[3, 3], vec![1.0, 2.0, 3.0, 1000.0, 1000.0, -1000.0, 0.0, 0.0, 0.0]);
    let one = f32_weight(&mut e, "one", &[1, 1], vec![-42.0]);
    let mut b = ProgramBuilder::new("p", e.memory_mut());
    let y = b.alloc("y", DType::F32, &[3, 3]).expect("declare");
    let y1 = b.alloc("y1", DType::F32, &[1, 1]).expect("declare");
    b.softmax(y, x).expect("valid");
    b.softmax(y1, one).expect("valid");
    let p = b.finish();
    e.execute(&p, &[]).expect("runs");
    let third = 1.0 / 3.0;
    let want = [
        0.090_030_573_170_380_46,
        0.244_728_471_054_797_64,
        0.665_240_955_774_821_9,
        0.5,
        0.5,
        0.0,
        third,
        third,
        third,
    ];
    assert_close(&e.read_f32(y).expect("live"), &want, 1e-7, "softmax");
    assert_eq!(e.read_f32(y1).expect("live"), vec![1.0]);
}

#[test]
fn rope_rotates_neox_and_normal_pairs_by_position() {
    // One head of 6 with rot_dim 4: pairs (0,2),(1,3) for NEOX, (0,1),(2,3) for normal;
    // elements 4, 5 unchanged. θ_0 = p, θ_1 = p · base^(−1/2).
    let xv = vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
    for style in [RopeStyle::Neox, RopeStyle::Normal] {
        let mut e = RefEngine::new();
        let x = f32_weight(&mut e, "x", &[1, 6], xv.clone());
        let mut b = ProgramBuilder::new("p", e.memory_mut());
        let pos = b.param_u32("pos").expect("param");
        let y = b.alloc("y", DType::F32, &[1, 6]).expect("declare");
        b.rope(Rope { out: y, x, head_dim: 6, rot_dim: 4, style, base: 100.0.into(), pos: pos.into() }).expect("valid");
        let p = b.finish();
        e.execute(&p, &[ParamValue::U32(0)]).expect("runs");
        assert_eq!(e.read_f32(y).expect("live"), xv, "position 0 is the identity");
        e.execute(&p, &[ParamValue::U32(3)]).expect("runs");
        let th = [3.0f64, 3.0 / 10.0];
        let rot =
            |a: f32, b: f32, t: f64| (a as f64 * t.cos() - b as f64 * t.sin(), a as f64 * t.sin() + b as f64 * t.cos());
        let mut want: Vec<f64> = xv.iter().map(|&v| v as f64).collect();
        let pairs = match style {
            RopeStyle::Neox => [(0, 2), (1, 3)],
            RopeStyle::Normal => [(0, 1), (2, 3)],
        };
        for (i, (a, b)) in pairs.into_iter().enumerate() {
            (want[a], want[b]) = rot(xv[a], xv[b], th[i]);
        }
        assert_close(&e.read_f32(y).expect("live"), &want, 1e-7, &format!("{style:?}"));
    }
}

#[test]
fn rope_rows_are_consecutive_positions_and_heads_independent() {
    let (hd, heads, rows) = (8usize, 3usize, 5usize);
    let mut rng = SplitMix64(5);
    let xv = rng.vec(rows * heads * hd);
    let mut e = RefEngine::new();
    let x = f32_weight(&mut e, "x", &[rows, heads * hd], xv.clone());
    let mut b = ProgramBuilder::new("p", e.memory_mut());
    let y = b.alloc("y", DType::F32, &[rows, heads * hd]).expect("declare");
    b.rope(Rope {
        out: y,
        x,
        head_dim: hd as u32,
        rot_dim: hd as u32,
        style: RopeStyle::Neox,
        base: 10000.0.into(),
        pos: 7.into(),
    })
    .expect("valid");
    let p = b.finish();
    e.execute(&p, &[]).expect("runs");
    let got = e.read_f32(y).expect("live");
    for r in 0..rows {
        for h in 0..heads {
            for i in 0..hd / 2 {
                let th = (7 + r) as f64 * 10000f64.powf(-2.0 * i as f64 / hd as f64);
                let base = r * heads * hd + h * hd;
                let (a, b) = (xv[base + i] as f64, xv[base + i + hd / 2] as f64);
                assert_close(&got[base + i..base + i + 1], &[a * th.cos() - b * th.sin()], 1e-6, "rope a");
                assert_close(
                    &got[base + i + hd / 2..base + i + hd / 2 + 1],
                    &[a * th.sin() + b * th.cos()],
                    1e-6,
                    "rope b",
                );
            }
        }
    }
}

#[test]
fn kv_write_and_causal_grouped_query_attention() {
    // 4 query heads over 2 kv heads of dim 2; a cache of 4 positions.
    let (hd, n_head, n_kv, n_ctx) = (2usize, 4usize, 2usize, 4usize);
    let mut e = RefEngine::new();
    let mut b = ProgramBuilder::new("p", e.memory_mut());
    let kc = b.alloc("k_cache", DType::F32, &[n_ctx, n_kv * hd]).expect("declare");
    let vc = b.alloc("v_cache", DType::F32, &[n_ctx, n_kv * hd]).expect("declare");
    let q = b.alloc("q", DType::F32, &[2, n_head * hd]).expect("declare");
    let k = b.alloc("k", DType::F32, &[2, n_kv * hd]).expect("declare");
    let v = b.alloc("v", DType::F32, &[2, n_kv * hd]).expect("declare");
    let o = b.alloc("o", DType::F32, &[2, n_head * hd]).expect("declare");
    let init = b.finish();
    e.execute(&init, &[]).expect("allocates");

    let mut b = ProgramBuilder::new("step", e.memory_mut());
    let pos = b.param_u32("pos").expect("param");
    b.kv_write(kc, k, pos).expect("valid");
    b.kv_write(vc, v, pos).expect("valid");
    b.attention(Attention { out: o, q, k_cache: kc, v_cache: vc, head_dim: hd as u32, rows: pos.into() })
        .expect("valid");
    let step = b.finish();
    // Keys: position 0 = [1,0 | 0,1], position 1 = [0,1 | 1,0]. Values: distinct per kv head.
    e.write_f32(k, &[1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0]).expect("size");
    e.write_f32(v, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]).expect("size");
    // Query row 0 (position 0) sees only position 0: every head returns its kv head's v0.
    // Query row 1 (position 1): head h uses kv head h/2; q = [1,0] for every head.
    e.write_f32(q, &[1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0]).expect("size");
    e.execute(&step, &[ParamValue::U32(0)]).expect("runs");
    let out = e.read_f32(o).expect("live");
    assert_eq!(&out[..8], &[1.0, 2.0, 1.0, 2.0, 3.0, 4.0, 3.0, 4.0], "row 0 is causal: it sees position 0 only");
    // Row 1, kv head 0: scores [1, 0]/√2; kv head 1: scores [0, 1]/√2.
    let s = 1.0 / 2f64.sqrt();
    let w0 = [1.0 / (1.0 + (-s).exp()), 1.0 - 1.0 / (1.0 + (-s).exp())]; // softmax([s, 0])
    let head0 = [w0[0] * 1.0 + w0[1] * 5.0, w0[0] * 2.0 + w0[1] * 6.0];
    let head1 = [w0[1] * 3.0 + w0[0] * 7.0, w0[1] * 4.0 + w0[0] * 8.0];
    let want = [head0[0], head0[1], head0[0], head0[1], head1[0], head1[1], head1[0], head1[1]];
    assert_close(&out[8..], &want, 1e-7, "row 1");

    // Positions 3..5 do not fit 4 rows: both instructions refuse, naming the cache.
    assert_eq!(
        e.execute(&step, &[ParamValue::U32(3)]),
        Err(ExecError::ContextOverflow { op: "KV_WRITE", tensor: "k_cache".into(), pos: 3, end: 5, n_ctx: 4 })
    );
}

#[test]
fn attention_over_many_positions_matches_f64() {
    let (hd, n_head, n_kv, n_ctx, n) = (5usize, 6usize, 3usize, 37usize, 33usize);
    let mut rng = SplitMix64(6);
    let (qv, kv, vv) = (rng.vec(n * n_head * hd), rng.vec(n_ctx * n_kv * hd), rng.vec(n_ctx * n_kv * hd));
    let mut e = RefEngine::new();
    let q = f32_weight(&mut e, "q", &[n, n_head * hd], qv.clone());
    let kc = f32_weight(&mut e, "k", &[n_ctx, n_kv * hd], kv.clone());
    let vc = f32_weight(&mut e, "v", &[n_ctx, n_kv * hd], vv.clone());
    let mut b = ProgramBuilder::new("p", e.memory_mut());
    let o = b.alloc("o", DType::F32, &[n, n_head * hd]).expect("declare");
    b.attention(Attention { out: o, q, k_cache: kc, v_cache: vc, head_dim: hd as u32, rows: 4.into() }).expect("valid");
    let p = b.finish();
    e.execute(&p, &[]).expect("runs");
    let got = e.read_f32(o).expect("live");
    let (qw, kw) = (n_head * hd, n_kv * hd);
    for r in 0..n {
        for h in 0..n_head {
            let g = h / (n_head / n_kv);
            let scores: Vec<f64> = (0..=4 + r)
                .map(|t| {
                    (0..hd).map(|i| qv[r * qw + h * hd + i] as f64 * kv[t * kw + g * hd + i] as f64).sum::<f64>()
                        / (hd as f64).sqrt()
                })
                .collect();
            let mx = scores.iter().cloned().fold(f64::MIN, f64::max);
            let z: f64 = scores.iter().map(|s| (s - mx).exp()).sum();
            for i in 0..hd {
                let want: f64 =
                    scores.iter().enumerate().map(|(t, s)| (s - mx).exp() / z * vv[t * kw + g * hd + i] as f64).sum();
                assert_close(&got[r * qw + h * hd + i..][..1], &[want], 1e-6, &format!("row {r} head {h} i {i}"));
            }
        }
    }
}

#[test]
fn argmax_takes_the_lowest_index_of_the_maximum_and_skips_nan() {
    let mut e = RefEngine::new();
    let x = f32_weight(
        &mut e,
        "x",
        &[4, 3],
        vec![1.0, 3.0, 3.0, f32::NAN, -1.0, -2.0, f32::NAN, f32::NAN, f32::NAN, -5.0, -5.0, -4.0],
    );
    let mut rng = SplitMix64(7);
    let long: Vec<f32> = rng.vec(257);
    let x2 = f32_weight(&mut e, "x2", &[257], long.clone());
    let mut b = ProgramBuilder::new("p", e.memory_mut());
    let y = b.alloc("y", DType::U32, &[4]).expect("declare");
    let y2 = b.alloc("y2", DType::U32, &[1]).expect("declare");
    b.argmax(y, x).expect("valid");
    b.argmax(y2, x2).expect("valid");
    let p = b.finish();
    e.execute(&p, &[]).expect("runs");
    assert_eq!(e.read_u32(y).expect("live"), vec![1, 1, 0, 2]);
    let want = long.iter().enumerate().fold(0, |best, (i, &v)| if v > long[best] { i } else { best });
    assert_eq!(e.read_u32(y2).expect("live"), vec![want as u32]);
}

#[test]
fn top_k_ranks_numbers_first_larger_first_ties_by_index_and_agrees_with_argmax() {
    let mut e = RefEngine::new();
    let (nan, inf) = (f32::NAN, f32::INFINITY);
    let rows: Vec<f32> = [
        [1.0, 3.0, 3.0, nan, -1.0],   // ties by index: 1, 2, then 0, 4, NaN last
        [nan, -inf, nan, -inf, 0.5],  // -inf is a number; two NaNs fill the tail in index order
        [nan, nan, nan, nan, nan],    // all NaN: index order
        [-0.0, 0.0, -0.0, inf, -inf], // -0 == +0: by index
    ]
    .concat();
    let x = f32_weight(&mut e, "x", &[4, 5], rows.clone());
    let mut rng = SplitMix64(11);
    let long: Vec<f32> = rng.vec(257).iter().map(|v| (v * 8.0).round()).collect(); // many ties
    let x2 = f32_weight(&mut e, "x2", &[257], long.clone());
    let mut b = ProgramBuilder::new("p", e.memory_mut());
    let values = b.alloc("values", DType::F32, &[4, 5]).expect("declare");
    let ids = b.alloc("ids", DType::U32, &[4, 5]).expect("declare");
    b.top_k(values, ids, x, 5).expect("valid");
    let (v1, i1) = (b.alloc("v1", DType::F32, &[4, 1]).expect("d"), b.alloc("i1", DType::U32, &[4, 1]).expect("d"));
    b.top_k(v1, i1, x, 1).expect("valid");
    let am = b.alloc("am", DType::U32, &[4]).expect("declare");
    b.argmax(am, x).expect("valid");
    let (v2, i2) = (b.alloc("v2", DType::F32, &[40]).expect("d"), b.alloc("i2", DType::U32, &[40]).expect("d"));
    b.top_k(v2, i2, x2, 40).expect("valid");
    let p = b.finish();
    e.execute(&p, &[]).expect("runs");
    let got = e.read_u32(ids).expect("live");
    assert_eq!(got, vec![1, 2, 0, 4, 3, 4, 1, 3, 0, 2, 0, 1, 2, 3, 4, 3, 0, 1, 2, 4]);
    let got_values = e.read_f32(values).expect("live");
    for (j, (&v, &i)) in got_values.iter().zip(&got).enumerate() {
        assert_eq!(v.to_bits(), rows[(j / 5) * 5 + i as usize].to_bits(), "values[{j}] is x at ids[{j}]");
    }
    assert_eq!(e.read_u32(i1).expect("live"), e.read_u32(am).expect("live"), "k = 1 is ARGMAX");
    // The first 40 of a stable sort by value, descending.
    let mut order: Vec<usize> = (0..257).collect();
    order.sort_by(|&a, &b| long[b].partial_cmp(&long[a]).expect("no NaN"));
    let want: Vec<u32> = order[..40].iter().map(|&i| i as u32).collect();
    assert_eq!(e.read_u32(i2).expect("live"), want);
}

#[test]
fn a_program_runs_many_times_with_new_parameters() {
    let mut e = RefEngine::new();
    let mut b = ProgramBuilder::new("p", e.memory_mut());
    let cache = b.alloc("cache", DType::F32, &[3, 1]).expect("declare");
    let src = b.alloc("src", DType::F32, &[1, 1]).expect("declare");
    let init = b.finish();
    e.execute(&init, &[]).expect("runs");
    let mut b = ProgramBuilder::new("step", e.memory_mut());
    let pos = b.param_u32("pos").expect("param");
    b.kv_write(cache, src, pos).expect("valid");
    let step = b.finish();
    for p in 0..3u32 {
        e.write_f32(src, &[p as f32 + 10.0]).expect("size");
        e.execute(&step, &[ParamValue::U32(p)]).expect("runs");
    }
    assert_eq!(e.read_f32(cache).expect("live"), vec![10.0, 11.0, 12.0]);
    assert_eq!(e.execute(&step, &[]), Err(ExecError::ParamCount { expected: 1, got: 0 }));
}

#[test]
fn linear_and_bitlinear_with_empty_rows_give_zeros() {
    // k = 0: every output is an empty sum.
    let mut e = RefEngine::new();
    let x = f32_weight(&mut e, "x", &[3, 0], vec![]);
    let w = f32_weight(&mut e, "w", &[2, 0], vec![]);
    let wt = weight(
        &mut e,
        "wt",
        HostTensor::from_bytes("wt", DType::I2_S, shape(&[2, 0]), &i2_s_tensor(&[], 1.0)).expect("size"),
    );
    let mut b = ProgramBuilder::new("p", e.memory_mut());
    let y = b.alloc("y", DType::F32, &[3, 2]).expect("declare");
    let yt = b.alloc("yt", DType::F32, &[3, 2]).expect("declare");
    b.linear(y, x, w).expect("valid");
    b.bitlinear(yt, x, wt, None).expect("valid");
    let p = b.finish();
    e.execute(&p, &[]).expect("runs");
    assert_eq!(e.read_f32(y).expect("live"), vec![0.0; 6]);
    assert_eq!(e.read_f32(yt).expect("live"), vec![0.0; 6]);
}
