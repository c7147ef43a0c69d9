//! The engine check: each instruction family run on the engine a page uses (WebGPU in a tab,
//! or the wasm CPU engine) and on the reference engine, over fixed pseudo-random cases with
//! odd sizes, compared within the bounds the native differential tests hold each kernel to.
//!
//! A browser compiles the GPU engine's WGSL with its own compiler (Chromium's Tint, not naga)
//! and runs it on its own adapter, so the native tests say nothing about a tab: this check
//! does, there. Like generation it never blocks: [`EngineCheck::begin`] submits a case,
//! [`EngineCheck::ready`] says when its reads have arrived (the page yields to its event
//! loop in between) and [`EngineCheck::finish`] compares.

use half::f16;
use purebee_engine_ref::RefEngine;
use purebee_isa::ops::{Attention, Rope, RopeStyle};
use purebee_isa::{DType, Engine, IsaError, PendingRead, ProgramBuilder, TensorId, U32Arg};
use purebee_memory::quant::encode;
use purebee_memory::{HostTensor, Shape};

use crate::WebError;

/// Builds a case's program from its input handles (and a function that prefixes names with
/// the case's own); returns the handles to read.
type Build = dyn Fn(&mut ProgramBuilder, &dyn Fn(&str) -> String, &[TensorId]) -> Result<Vec<TensorId>, IsaError>;

/// How a case's outputs must agree with the reference's.
#[derive(Clone, Copy, Debug)]
enum Bound {
    /// Bit for bit (integer results, gathers, single correctly rounded operations).
    Exact,
    /// Each f32 within `abs + rel·|reference|`.
    Close { abs: f32, rel: f32 },
}

struct Case {
    name: String,
    inputs: Vec<HostTensor>,
    build: Box<Build>,
    bound: Bound,
}

/// A case submitted to the engine under check: its reads, and what to free afterwards.
struct Submitted {
    reads: Vec<PendingRead>,
    made: Vec<TensorId>,
    reference: Vec<Vec<u8>>,
}

/// The outcome of one case: its name and, when it failed, why.
#[derive(Clone, Debug)]
pub struct CaseOutcome {
    /// The instructions and variant the case runs.
    pub name: String,
    /// How its outputs differ from the reference's beyond its bound (None: they agree).
    pub failure: Option<String>,
}

/// Every case, run one at a time on `engine` and on the reference engine.
pub struct EngineCheck {
    cases: Vec<Case>,
    next: usize,
    submitted: Option<Submitted>,
    reference: RefEngine,
}

impl EngineCheck {
    /// The check over every case, none run yet.
    pub fn new() -> Result<EngineCheck, WebError> {
        let cases = cases().map_err(|e| WebError::Model(format!("building the check's cases: {e}")))?;
        Ok(EngineCheck { cases, next: 0, submitted: None, reference: RefEngine::new() })
    }

    /// How many cases there are, and how many have finished.
    pub fn progress(&self) -> (usize, usize) {
        (self.next, self.cases.len())
    }

    /// Whether every case has finished.
    pub fn done(&self) -> bool {
        self.next >= self.cases.len()
    }

    /// Runs the next case on the reference engine, and submits it to `engine` with reads of
    /// its outputs; nothing waits.
    pub fn begin(&mut self, engine: &mut dyn Engine) -> Result<(), WebError> {
        let Some(case) = self.cases.get(self.next) else { return Ok(()) };
        if self.submitted.is_some() {
            return Err(WebError::Model("a check case is already in flight".to_string()));
        }
        let prefix = format!("check{}", self.next);
        let (reference, ref_made) = run(&mut self.reference, case, &prefix)?;
        let reference_reads = reference
            .iter()
            .map(|&o| self.reference.read(o).map_err(|e| model_error(case, e)))
            .collect::<Result<_, _>>()?;
        free(&mut self.reference, &ref_made).map_err(|e| model_error(case, e))?;
        let (outputs, made) = run(engine, case, &prefix)?;
        let reads = outputs
            .iter()
            .map(|&o| engine.read_later(o).map_err(|e| model_error(case, e)))
            .collect::<Result<_, _>>()?;
        self.submitted = Some(Submitted { reads, made, reference: reference_reads });
        Ok(())
    }

    /// Whether the submitted case's reads have arrived (true when none is in flight).
    pub fn ready(&self, engine: &mut dyn Engine) -> bool {
        self.submitted.as_ref().is_none_or(|s| s.reads.iter().all(|r| engine.read_ready(r)))
    }

    /// Compares the submitted case's outputs with the reference's and frees what it made.
    pub fn finish(&mut self, engine: &mut dyn Engine) -> Result<CaseOutcome, WebError> {
        let Some(submitted) = self.submitted.take() else {
            return Err(WebError::Model("no check case is in flight".to_string()));
        };
        let Some(case) = self.cases.get(self.next) else {
            return Err(WebError::Model("every check case has run".to_string()));
        };
        self.next += 1;
        let mut failure = None;
        for (i, (read, want)) in submitted.reads.into_iter().zip(&submitted.reference).enumerate() {
            let got = engine.finish_read(read).map_err(|e| model_error(case, e))?;
            if failure.is_none() {
                failure = compare(&got, want, case.bound).err().map(|e| format!("output {i}: {e}"));
            }
        }
        free(engine, &submitted.made).map_err(|e| model_error(case, e))?;
        Ok(CaseOutcome { name: case.name.clone(), failure })
    }
}

fn model_error(case: &Case, e: impl std::fmt::Display) -> WebError {
    WebError::Model(format!("check {}: {e}", case.name))
}

/// Inserts the case's inputs into `engine`, builds and executes its program; returns the
/// handles to read and everything made.
fn run(engine: &mut dyn Engine, case: &Case, prefix: &str) -> Result<(Vec<TensorId>, Vec<TensorId>), WebError> {
    let name = |n: &str| format!("{prefix}.{n}");
    let mut ids = Vec::with_capacity(case.inputs.len());
    for (i, t) in case.inputs.iter().enumerate() {
        ids.push(engine.memory_mut().insert(&name(&format!("in{i}")), t.clone()).map_err(|e| model_error(case, e))?);
    }
    let mut b = ProgramBuilder::new(prefix, engine.memory_mut());
    let outputs = (case.build)(&mut b, &name, &ids).map_err(|e| model_error(case, e))?;
    let program = b.finish();
    engine.execute(&program, &[]).map_err(|e| model_error(case, e))?;
    let mut made: Vec<TensorId> = ids.into_iter().chain(outputs.iter().copied()).collect();
    made.sort();
    made.dedup();
    Ok((outputs, made))
}

fn free(engine: &mut dyn Engine, made: &[TensorId]) -> Result<(), String> {
    let mut b = ProgramBuilder::new("check.free", engine.memory_mut());
    for &id in made {
        b.free(id).map_err(|e| e.to_string())?;
    }
    let program = b.finish();
    engine.execute(&program, &[]).map_err(|e| e.to_string())
}

fn compare(got: &[u8], want: &[u8], bound: Bound) -> Result<(), String> {
    if got.len() != want.len() {
        return Err(format!("{} bytes, the reference {}", got.len(), want.len()));
    }
    match bound {
        Bound::Exact => match got.chunks_exact(4).zip(want.chunks_exact(4)).position(|(g, w)| g != w) {
            None => Ok(()),
            Some(i) => Err(format!(
                "word {i} is {:02x?}, the reference's {:02x?}",
                &got[4 * i..4 * i + 4],
                &want[4 * i..4 * i + 4]
            )),
        },
        Bound::Close { abs, rel } => {
            for (i, (g, w)) in f32s(got).into_iter().zip(f32s(want)).enumerate() {
                let ok = (g - w).abs() <= abs + rel * w.abs() || g.to_bits() == w.to_bits();
                if !ok {
                    return Err(format!("element {i} is {g:e}, the reference's {w:e} (bound {abs:e} + {rel:e}·|ref|)"));
                }
            }
            Ok(())
        }
    }
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

/// A fixed xorshift stream: the same cases in every browser.
struct Stream(u64);

impl Stream {
    fn next_u32(&mut self) -> u32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 32) as u32
    }
    /// Uniform in [-r, r).
    fn f32s(&mut self, n: usize, r: f32) -> Vec<f32> {
        (0..n).map(|_| (self.next_u32() as f32 / 4294967296.0 * 2.0 - 1.0) * r).collect()
    }
    fn trits(&mut self, n: usize) -> Vec<i8> {
        (0..n).map(|_| (self.next_u32() % 3) as i8 - 1).collect()
    }
}

fn matrix(name: &str, rows: usize, cols: usize, values: Vec<f32>) -> Result<HostTensor, String> {
    HostTensor::from_f32(name, shape(rows, cols)?, values).map_err(|e| e.to_string())
}

fn vector(name: &str, values: Vec<f32>) -> Result<HostTensor, String> {
    HostTensor::from_f32(name, Shape::vector(values.len()), values).map_err(|e| e.to_string())
}

fn shape(rows: usize, cols: usize) -> Result<Shape, String> {
    Shape::matrix(rows, cols).ok_or(format!("shape [{rows}, {cols}]"))
}

/// Values of an f16 tensor: `values` rounded to f16.
fn f16_matrix(name: &str, rows: usize, cols: usize, values: &[f32]) -> Result<HostTensor, String> {
    let bytes: Vec<u8> = values.iter().flat_map(|&v| f16::from_f32(v).to_le_bytes()).collect();
    HostTensor::from_bytes(name, DType::F16, shape(rows, cols)?, &bytes).map_err(|e| e.to_string())
}

/// A ternary `[rows, cols]` weight of random trits in `dtype` (TQ1_0, TQ2_0: block scales
/// ±j/8; I2_S: one scale 0.5), exactly representable.
fn ternary(name: &str, dtype: DType, rows: usize, cols: usize, s: &mut Stream) -> Result<HostTensor, String> {
    let trits = s.trits(rows * cols);
    let invalid = |e: encode::EncodeError| e.to_string();
    let bytes = if dtype == DType::I2_S {
        encode::encode_i2_s(&trits, 0.5).map_err(invalid)?
    } else {
        let mut bytes = Vec::new();
        for row in trits.chunks(cols) {
            let d = f16::from_f32(
                (s.next_u32() % 16 + 1) as f32 / 8.0 * if s.next_u32().is_multiple_of(2) { 1.0 } else { -1.0 },
            );
            let encoded =
                if dtype == DType::TQ1_0 { encode::encode_tq1_0_row(row, d) } else { encode::encode_tq2_0_row(row, d) };
            bytes.extend(encoded.map_err(invalid)?);
        }
        bytes
    };
    HostTensor::from_bytes(name, dtype, shape(rows, cols)?, &bytes).map_err(|e| e.to_string())
}

/// Integer activations in [-127, 127] with 127 reached in each row, so that BITLINEAR's
/// absmax scale is 1 and its int8 codes are the values: the products and sums are exact on
/// every engine.
fn integer_rows(rows: usize, cols: usize, s: &mut Stream) -> Vec<f32> {
    let mut v: Vec<f32> = (0..rows * cols).map(|_| (s.next_u32() % 255) as f32 - 127.0).collect();
    for r in 0..rows {
        v[r * cols] = 127.0;
    }
    v
}

/// An elementwise instruction into `out` from `a` (and `b` for the binary ones).
type ElementwiseOp = fn(&mut ProgramBuilder, TensorId, TensorId, TensorId) -> Result<(), IsaError>;

fn case(name: impl Into<String>, inputs: Vec<HostTensor>, bound: Bound, build: Box<Build>) -> Case {
    Case { name: name.into(), inputs, build, bound }
}

/// Every case. The bounds (u = 2^-24) are the native differential tests' for these sizes:
/// - exact: TENSOR_ADD, ELEMENT_MUL, RELU2 (one rounding each), EMBED (exact decoding),
///   ARGMAX and TOP_K (selections), and BITLINEAR on integer activations whose absmax is 127
///   and exactly representable weights (every product and sum exact);
/// - SILU: its own e^x to about an ulp, an add and a division: 4 ulp; GELU: WGSL's tanh,
///   1e-5 relative;
/// - RMS_NORM, SOFTMAX: a sum of k ≤ 1001 terms in any f32 order is within k·u of exact
///   (6e-5 relative), the square root or division adding a few u: 1e-4 relative;
/// - LINEAR, f16 weights, k = 256, |x|, |w| ≤ 1: within k·u·Σ|x·w| ≤ 256·u·256 ≈ 4e-3;
/// - ROPE, |θ| ≤ 40: (|a| + |b|)·(11u·|θ| + 6u) + u·|want| ≤ 6e-5 for |a|, |b| ≤ 1;
/// - ATTENTION over 10 positions, head_dim 16: the scores' dot products, the exponentials
///   and the weighted sum, each a few u per term: 1e-4 relative, 1e-5 absolute.
fn cases() -> Result<Vec<Case>, String> {
    let mut s = Stream(0x9e37_79b9_7f4a_7c15);
    let mut all = Vec::new();
    let n = 1001;
    let elementwise: [(&str, ElementwiseOp, Bound); 5] = [
        ("TENSOR_ADD", |b, o, x, y| b.add(o, x, y), Bound::Exact),
        ("ELEMENT_MUL", |b, o, x, y| b.mul(o, x, y), Bound::Exact),
        ("SILU", |b, o, x, _| b.silu(o, x), Bound::Close { abs: 1e-37, rel: 2.4e-7 }),
        ("RELU2", |b, o, x, _| b.relu2(o, x), Bound::Exact),
        ("GELU", |b, o, x, _| b.gelu(o, x), Bound::Close { abs: 1e-6, rel: 1e-5 }),
    ];
    for (name, op, bound) in elementwise {
        let inputs = vec![matrix("a", 1, n, s.f32s(n, 8.0))?, matrix("b", 1, n, s.f32s(n, 8.0))?];
        all.push(case(
            name,
            inputs,
            bound,
            Box::new(move |b, name, ids| {
                let out = b.alloc(&name("out"), DType::F32, &[1, n])?;
                op(b, out, ids[0], ids[1])?;
                Ok(vec![out])
            }),
        ));
    }
    let (rows, cols) = (3, 777);
    let inputs = vec![matrix("x", rows, cols, s.f32s(rows * cols, 2.0))?, vector("w", s.f32s(cols, 1.5))?];
    all.push(case(
        "RMS_NORM",
        inputs,
        Bound::Close { abs: 1e-7, rel: 1e-4 },
        Box::new(move |b, name, ids| {
            let out = b.alloc(&name("out"), DType::F32, &[rows, cols])?;
            b.rms_norm(out, ids[0], ids[1], 1e-6)?;
            Ok(vec![out])
        }),
    ));
    let inputs = vec![matrix("x", 3, n, s.f32s(3 * n, 10.0))?];
    all.push(case(
        "SOFTMAX",
        inputs,
        Bound::Close { abs: 1e-12, rel: 1e-4 },
        Box::new(move |b, name, ids| {
            let out = b.alloc(&name("out"), DType::F32, &[3, n])?;
            b.softmax(out, ids[0])?;
            Ok(vec![out])
        }),
    ));
    let inputs = vec![matrix("x", 2, n, s.f32s(2 * n, 10.0))?];
    all.push(case(
        "ARGMAX, TOP_K",
        inputs,
        Bound::Exact,
        Box::new(move |b, name, ids| {
            let arg = b.alloc(&name("arg"), DType::U32, &[2])?;
            b.argmax(arg, ids[0])?;
            let values = b.alloc(&name("values"), DType::F32, &[2, 5])?;
            let top = b.alloc(&name("top"), DType::U32, &[2, 5])?;
            b.top_k(values, top, ids[0], 5)?;
            Ok(vec![arg, values, top])
        }),
    ));
    let (vocab, width) = (50, 256);
    let token_ids = HostTensor::from_u32("ids", Shape::vector(4), vec![3, 49, 0, 3]).map_err(|e| e.to_string())?;
    for dtype in [DType::F16, DType::TQ2_0, DType::I2_S] {
        let table = match dtype {
            DType::F16 => f16_matrix("table", vocab, width, &s.f32s(vocab * width, 2.0))?,
            _ => ternary("table", dtype, vocab, width, &mut s)?,
        };
        all.push(case(
            format!("EMBED {dtype:?}"),
            vec![table, token_ids.clone()],
            Bound::Exact,
            Box::new(move |b, name, ids| {
                let out = b.alloc(&name("out"), DType::F32, &[4, width])?;
                b.embed(out, ids[0], ids[1])?;
                Ok(vec![out])
            }),
        ));
    }
    let (m, k) = (37, 256);
    for tokens in [1, 5] {
        let inputs =
            vec![matrix("x", tokens, k, s.f32s(tokens * k, 1.0))?, f16_matrix("w", m, k, &s.f32s(m * k, 1.0))?];
        all.push(case(
            format!("LINEAR F16, {tokens} rows"),
            inputs,
            Bound::Close { abs: 4e-3, rel: 0.0 },
            Box::new(move |b, name, ids| {
                let out = b.alloc(&name("out"), DType::F32, &[tokens, m])?;
                b.linear(out, ids[0], ids[1])?;
                Ok(vec![out])
            }),
        ));
        for dtype in [DType::TQ2_0, DType::TQ1_0, DType::I2_S] {
            let (m, k) = (40, 512);
            let inputs =
                vec![matrix("x", tokens, k, integer_rows(tokens, k, &mut s))?, ternary("w", dtype, m, k, &mut s)?];
            all.push(case(
                format!("BITLINEAR {dtype:?}, {tokens} rows"),
                inputs,
                Bound::Exact,
                Box::new(move |b, name, ids| {
                    let out = b.alloc(&name("out"), DType::F32, &[tokens, m])?;
                    b.bitlinear(out, ids[0], ids[1], None)?;
                    Ok(vec![out])
                }),
            ));
        }
    }
    for style in [RopeStyle::Normal, RopeStyle::Neox] {
        let (rows, heads, head_dim) = (3, 4, 32);
        let inputs = vec![matrix("x", rows, heads * head_dim, s.f32s(rows * heads * head_dim, 1.0))?];
        all.push(case(
            format!("ROPE {style:?}"),
            inputs,
            Bound::Close { abs: 6e-5, rel: 0.0 },
            Box::new(move |b, name, ids| {
                let out = b.alloc(&name("out"), DType::F32, &[rows, heads * head_dim])?;
                let pos = U32Arg::Const(37);
                b.rope(Rope {
                    out,
                    x: ids[0],
                    head_dim: head_dim as u32,
                    rot_dim: head_dim as u32,
                    style,
                    base: 10000.0.into(),
                    pos: pos.into(),
                })?;
                Ok(vec![out])
            }),
        ));
    }
    let (n_ctx, n_head, n_kv, head_dim, pos) = (16, 4, 2, 16, 9u32);
    let inputs = vec![
        matrix("q", 1, n_head * head_dim, s.f32s(n_head * head_dim, 1.0))?,
        matrix("k", 1, n_kv * head_dim, s.f32s(n_kv * head_dim, 1.0))?,
        matrix("v", 1, n_kv * head_dim, s.f32s(n_kv * head_dim, 1.0))?,
        matrix("kc", n_ctx, n_kv * head_dim, s.f32s(n_ctx * n_kv * head_dim, 1.0))?,
        f16_matrix("vc", n_ctx, n_kv * head_dim, &s.f32s(n_ctx * n_kv * head_dim, 1.0))?,
    ];
    all.push(case(
        "KV_WRITE, ATTENTION",
        inputs,
        Bound::Close { abs: 1e-5, rel: 1e-4 },
        Box::new(move |b, name, ids| {
            let at = U32Arg::Const(pos);
            b.kv_write(ids[3], ids[1], at)?;
            b.kv_write(ids[4], ids[2], at)?;
            let out = b.alloc(&name("out"), DType::F32, &[1, n_head * head_dim])?;
            b.attention(Attention {
                out,
                q: ids[0],
                k_cache: ids[3],
                v_cache: ids[4],
                head_dim: head_dim as u32,
                rows: at.into(),
            })?;
            Ok(vec![out, ids[3]])
        }),
    ));
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn exact_rejects_one_bit() {
        let want = bytes(&[1.0, 2.0]);
        let got = bytes(&[1.0, f32::from_bits(2.0f32.to_bits() + 1)]);
        assert!(compare(&want, &want, Bound::Exact).is_ok());
        let e = compare(&got, &want, Bound::Exact).expect_err("one bit off");
        assert!(e.contains("word 1"), "{e}");
    }

    #[test]
    fn close_holds_its_bound_and_no_more() {
        // 1e-3 + 1e-3·|want|: 0.011 at 10, 0.002 at -1.
        let bound = Bound::Close { abs: 1e-3, rel: 1e-3 };
        let want = bytes(&[10.0, -1.0]);
        assert!(compare(&bytes(&[10.01, -1.0015]), &want, bound).is_ok());
        assert!(compare(&bytes(&[10.1, -1.0]), &want, bound).is_err());
        let e = compare(&bytes(&[10.0, -1.003]), &want, bound).expect_err("past the bound");
        assert!(e.contains("element 1"), "{e}");
        assert!(compare(&bytes(&[f32::NAN, -1.0]), &want, bound).is_err());
        assert!(compare(&bytes(&[10.0]), &want, bound).is_err());
    }
}
