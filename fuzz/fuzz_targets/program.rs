//! `program`: random tensors and instruction lists → building a program never panics, and
//! every program that builds runs on the reference engine without a panic.
//!
//! Tensors are declared with random dtypes and shapes (dims from a small table, at most
//! `MAX_ELEMENTS` elements each); some are given data from the input (float weights with NaN
//! and infinite values, quantized blocks with any bits). Each instruction is pushed through
//! `ProgramBuilder::push`; one that fails validation is left out, so the program holds exactly
//! the ones that validated. It then runs with random parameter values (wrong counts and
//! kinds included), and every tensor is read back. Run-time errors are fine; panics are not.

#![no_main]

use std::sync::Arc;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use purebee_engine_ref::RefEngine;
use purebee_isa::ops::{
    Argmax, Attention, Binary, BitLinear, CacheRows, Embed, Free, GridAlloc, GridWrite, KvWrite, Linear,
    LinearActivations, PagedRows, RmsNorm, Rope, RopeStyle, RowPositions, Softmax, TopK, Unary,
};
use purebee_isa::{Engine, F32Arg, Instruction, ParamValue, ProgramBuilder, TensorId, U32Arg};
use purebee_memory::{HostTensor, Shape, ALL_DTYPES};

const MAX_TENSORS: usize = 12;
const MAX_OPS: usize = 32;
const MAX_ELEMENTS: usize = 4096;
/// The dims a tensor may have: the block lengths of every layout, and edge cases.
const DIMS: [usize; 12] = [0, 1, 2, 3, 4, 5, 8, 16, 32, 64, 128, 256];

#[derive(Arbitrary, Debug)]
struct Input {
    tensors: Vec<TensorSpec>,
    /// The program's parameters: true for u32, false for f32.
    params: Vec<bool>,
    ops: Vec<Op>,
    values: Vec<Value>,
}

#[derive(Arbitrary, Debug)]
struct TensorSpec {
    dtype: u8,
    dims: Vec<u8>,
    /// Bytes repeated to fill the tensor, which is then live before the program runs.
    data: Option<Vec<u8>>,
}

#[derive(Arbitrary, Debug)]
enum Value {
    U32(u32),
    F32(f32),
}

#[derive(Arbitrary, Debug)]
enum U32Sel {
    Const(u32),
    Param(u8),
}

#[derive(Arbitrary, Debug)]
enum F32Sel {
    Const(f32),
    Param(u8),
}

/// Tensors are indices into the declared ones (modulo their count).
#[derive(Arbitrary, Debug)]
enum Op {
    GridAlloc(u8),
    /// Bytes of any length (the size check is fuzzed).
    GridWrite(u8, Vec<u8>),
    /// The tensor's exact size, repeating the pattern.
    GridFill(u8, Vec<u8>),
    Free(u8),
    Sync,
    Embed(u8, u8, u8),
    RmsNorm(u8, u8, u8, f32),
    Linear(u8, u8, u8, bool),
    BitLinear(u8, u8, u8, Option<u8>),
    Add(u8, u8, u8),
    Mul(u8, u8, u8),
    Silu(u8, u8),
    Relu2(u8, u8),
    Gelu(u8, u8),
    Softmax(u8, u8),
    Rope {
        out: u8,
        x: u8,
        head_dim: u32,
        rot_dim: u32,
        neox: bool,
        base: F32Sel,
        pos: RowsSel,
    },
    KvWrite(u8, u8, RowsSel),
    Attention {
        out: u8,
        q: u8,
        k: u8,
        v: u8,
        head_dim: u32,
        rows: RowsSel,
    },
    Argmax(u8, u8),
    TopK {
        values: u8,
        ids: u8,
        x: u8,
        k: u32,
        lse: Option<u8>,
    },
}

/// Where the rows of ROPE, KV_WRITE and ATTENTION sit: consecutive positions, or per-row
/// positions, sequences and a page table (tensors, any dtype and contents: the checks are
/// fuzzed).
#[derive(Arbitrary, Debug)]
enum RowsSel {
    Consecutive(U32Sel),
    Paged { pos: u8, seq: u8, pages: u8, page_size: u32 },
}

/// `n` bytes repeating `pattern` (zeros without one).
fn fill(pattern: &[u8], n: usize) -> Vec<u8> {
    if pattern.is_empty() {
        return vec![0; n];
    }
    pattern.iter().copied().cycle().take(n).collect()
}

fuzz_target!(|input: Input| {
    let mut engine = RefEngine::new();
    let mut ids: Vec<TensorId> = Vec::new();
    for (i, spec) in input.tensors.iter().take(MAX_TENSORS).enumerate() {
        let dtype = ALL_DTYPES[usize::from(spec.dtype) % ALL_DTYPES.len()];
        let dims: Vec<usize> = spec.dims.iter().take(3).map(|&d| DIMS[usize::from(d) % DIMS.len()]).collect();
        let Some(shape) = Shape::new(&dims).filter(|s| s.numel() <= MAX_ELEMENTS) else { continue };
        let name = format!("t{i}");
        let reg = engine.memory_mut();
        let id = match &spec.data {
            None => reg.declare(&name, dtype, shape),
            Some(pattern) => match dtype.tensor_bytes(shape.rows(), shape.cols()) {
                Some(n) => {
                    HostTensor::from_bytes(&name, dtype, shape, &fill(pattern, n)).and_then(|t| reg.insert(&name, t))
                }
                None => continue,
            },
        };
        ids.extend(id.ok());
    }
    if ids.is_empty() {
        return;
    }
    let t = |i: u8| ids[usize::from(i) % ids.len()];

    let mut b = ProgramBuilder::new("fuzz", engine.memory_mut());
    let mut params = Vec::new();
    for (i, &is_u32) in input.params.iter().take(4).enumerate() {
        let name = format!("p{i}");
        params.push(if is_u32 { b.param_u32(&name).ok().map(Ok) } else { b.param_f32(&name).ok().map(Err) });
    }
    // A parameter reference: the declared one of that slot when its kind fits, else a
    // constant (the builder's own param checks are exercised by the mismatches left in).
    let u32_arg = |s: &U32Sel| match s {
        U32Sel::Const(v) => U32Arg::Const(*v),
        U32Sel::Param(p) => match params.get(usize::from(*p) % params.len().max(1)) {
            Some(Some(Ok(a))) => *a,
            _ => U32Arg::Const(u32::from(*p)),
        },
    };
    let f32_arg = |s: &F32Sel| match s {
        F32Sel::Const(v) => F32Arg::Const(*v),
        F32Sel::Param(p) => match params.get(usize::from(*p) % params.len().max(1)) {
            Some(Some(Err(a))) => *a,
            _ => F32Arg::Const(f32::from(*p)),
        },
    };
    let cache_rows = |s: &RowsSel| match s {
        RowsSel::Consecutive(start) => CacheRows::Consecutive(u32_arg(start)),
        RowsSel::Paged { pos, seq, pages, page_size } => {
            CacheRows::Paged(PagedRows { pos: t(*pos), seq: t(*seq), pages: t(*pages), page_size: *page_size })
        }
    };
    for op in input.ops.iter().take(MAX_OPS) {
        let i = match op {
            Op::GridAlloc(x) => Instruction::GridAlloc(GridAlloc { tensor: t(*x) }),
            Op::GridWrite(x, data) => Instruction::GridWrite(GridWrite { tensor: t(*x), data: Arc::from(&data[..]) }),
            Op::GridFill(x, pattern) => {
                let Ok(d) = b.registry().desc(t(*x)) else { continue };
                let n = d.dtype.tensor_bytes(d.shape.rows(), d.shape.cols()).unwrap_or(0);
                Instruction::GridWrite(GridWrite { tensor: t(*x), data: Arc::from(fill(pattern, n)) })
            }
            Op::Free(x) => Instruction::Free(Free { tensor: t(*x) }),
            Op::Sync => Instruction::Sync,
            Op::Embed(o, table, i) => Instruction::Embed(Embed { out: t(*o), table: t(*table), ids: t(*i) }),
            Op::RmsNorm(o, x, w, eps) => {
                Instruction::RmsNorm(RmsNorm { out: t(*o), x: t(*x), weight: t(*w), eps: *eps })
            }
            Op::Linear(o, x, w, int8) => Instruction::Linear(Linear {
                out: t(*o),
                x: t(*x),
                weight: t(*w),
                activations: if *int8 { LinearActivations::Int8Blocks } else { LinearActivations::F32 },
            }),
            Op::BitLinear(o, x, w, s) => {
                Instruction::BitLinear(BitLinear { out: t(*o), x: t(*x), weight: t(*w), scale: s.map(t) })
            }
            Op::Add(o, a, c) => Instruction::TensorAdd(Binary { out: t(*o), a: t(*a), b: t(*c) }),
            Op::Mul(o, a, c) => Instruction::ElementMul(Binary { out: t(*o), a: t(*a), b: t(*c) }),
            Op::Silu(o, x) => Instruction::Silu(Unary { out: t(*o), x: t(*x) }),
            Op::Relu2(o, x) => Instruction::Relu2(Unary { out: t(*o), x: t(*x) }),
            Op::Gelu(o, x) => Instruction::Gelu(Unary { out: t(*o), x: t(*x) }),
            Op::Softmax(o, x) => Instruction::Softmax(Softmax { out: t(*o), x: t(*x) }),
            Op::Rope { out, x, head_dim, rot_dim, neox, base, pos } => Instruction::Rope(Rope {
                out: t(*out),
                x: t(*x),
                head_dim: *head_dim,
                rot_dim: *rot_dim,
                style: if *neox { RopeStyle::Neox } else { RopeStyle::Normal },
                base: f32_arg(base),
                pos: match cache_rows(pos) {
                    CacheRows::Consecutive(start) => RowPositions::Consecutive(start),
                    CacheRows::Paged(p) => RowPositions::PerRow(p.pos),
                },
            }),
            Op::KvWrite(c, s, rows) => {
                Instruction::KvWrite(KvWrite { cache: t(*c), src: t(*s), rows: cache_rows(rows) })
            }
            Op::Attention { out, q, k, v, head_dim, rows } => Instruction::Attention(Attention {
                out: t(*out),
                q: t(*q),
                k_cache: t(*k),
                v_cache: t(*v),
                head_dim: *head_dim,
                rows: cache_rows(rows),
            }),
            Op::Argmax(o, x) => Instruction::Argmax(Argmax { out: t(*o), x: t(*x) }),
            Op::TopK { values, ids, x, k, lse } => {
                Instruction::TopK(TopK { values: t(*values), ids: t(*ids), x: t(*x), k: *k, lse: lse.map(t) })
            }
        };
        let _ = b.push(i);
    }
    let program = b.finish();
    let values: Vec<ParamValue> = input
        .values
        .iter()
        .take(5)
        .map(|v| match v {
            Value::U32(x) => ParamValue::U32(*x),
            Value::F32(x) => ParamValue::F32(*x),
        })
        .collect();
    let _ = engine.execute(&program, &values);
    for &id in &ids {
        let _ = engine.read(id);
    }
});
