//! The instruction set as one exhaustive enum: adding a variant breaks every engine's
//! build until each one implements it.

use purebee_memory::TensorId;

use crate::ops::*;
use crate::validate::Checker;
use crate::IsaError;

/// One instruction over tensor handles. The semantics of each are in the rustdoc of its
/// operand struct.
#[derive(Clone, Debug, PartialEq)]
pub enum Instruction {
    /// GRID_ALLOC: see [`GridAlloc`].
    GridAlloc(GridAlloc),
    /// GRID_WRITE of constant data: see [`GridWrite`].
    GridWrite(GridWrite),
    /// FREE: see [`Free`].
    Free(Free),
    /// SYNC: every earlier instruction has completed and its writes are visible before any
    /// later one starts. Engines that run instructions one after another in order satisfy it
    /// by construction; engines with queues insert a barrier.
    Sync,
    /// EMBED: see [`Embed`].
    Embed(Embed),
    /// RMS_NORM: see [`RmsNorm`].
    RmsNorm(RmsNorm),
    /// LINEAR: see [`Linear`].
    Linear(Linear),
    /// BITLINEAR: see [`BitLinear`].
    BitLinear(BitLinear),
    /// TENSOR_ADD: `out = a + b`, see [`Binary`].
    TensorAdd(Binary),
    /// ELEMENT_MUL: `out = a · b`, see [`Binary`].
    ElementMul(Binary),
    /// SILU: `x / (1 + e^(−x))`, see [`Unary`].
    Silu(Unary),
    /// RELU2: `max(x, 0)²`, see [`Unary`].
    Relu2(Unary),
    /// GELU (tanh approximation), see [`Unary`].
    Gelu(Unary),
    /// SOFTMAX: see [`Softmax`].
    Softmax(Softmax),
    /// ROPE: see [`Rope`].
    Rope(Rope),
    /// KV_WRITE: see [`KvWrite`].
    KvWrite(KvWrite),
    /// ATTENTION: see [`Attention`].
    Attention(Attention),
    /// ARGMAX: see [`Argmax`].
    Argmax(Argmax),
    /// TOP_K: see [`TopK`].
    TopK(TopK),
}

impl Instruction {
    /// The instruction's name in the ISA (`"RMS_NORM"`, `"BITLINEAR"`, ...).
    pub fn name(&self) -> &'static str {
        match self {
            Instruction::GridAlloc(_) => "GRID_ALLOC",
            Instruction::GridWrite(_) => "GRID_WRITE",
            Instruction::Free(_) => "FREE",
            Instruction::Sync => "SYNC",
            Instruction::Embed(_) => "EMBED",
            Instruction::RmsNorm(_) => "RMS_NORM",
            Instruction::Linear(_) => "LINEAR",
            Instruction::BitLinear(_) => "BITLINEAR",
            Instruction::TensorAdd(_) => "TENSOR_ADD",
            Instruction::ElementMul(_) => "ELEMENT_MUL",
            Instruction::Silu(_) => "SILU",
            Instruction::Relu2(_) => "RELU2",
            Instruction::Gelu(_) => "GELU",
            Instruction::Softmax(_) => "SOFTMAX",
            Instruction::Rope(_) => "ROPE",
            Instruction::KvWrite(_) => "KV_WRITE",
            Instruction::Attention(_) => "ATTENTION",
            Instruction::Argmax(_) => "ARGMAX",
            Instruction::TopK(_) => "TOP_K",
        }
    }

    /// Every tensor the instruction touches: the outputs first (TOP_K has two or three), then the
    /// inputs.
    pub fn operands(&self) -> Vec<TensorId> {
        match self {
            Instruction::GridAlloc(i) => vec![i.tensor],
            Instruction::GridWrite(i) => vec![i.tensor],
            Instruction::Free(i) => vec![i.tensor],
            Instruction::Sync => vec![],
            Instruction::Embed(i) => vec![i.out, i.table, i.ids],
            Instruction::RmsNorm(i) => vec![i.out, i.x, i.weight],
            Instruction::Linear(i) => vec![i.out, i.x, i.weight],
            Instruction::BitLinear(i) => [i.out, i.x, i.weight].into_iter().chain(i.scale).collect(),
            Instruction::TensorAdd(i) | Instruction::ElementMul(i) => vec![i.out, i.a, i.b],
            Instruction::Silu(i) | Instruction::Relu2(i) | Instruction::Gelu(i) => vec![i.out, i.x],
            Instruction::Softmax(i) => vec![i.out, i.x],
            Instruction::Rope(i) => [i.out, i.x].into_iter().chain(i.pos.tensor()).collect(),
            Instruction::KvWrite(i) => [i.cache, i.src].into_iter().chain(i.rows.tensors()).collect(),
            Instruction::Attention(i) => {
                [i.out, i.q, i.k_cache, i.v_cache].into_iter().chain(i.rows.tensors()).collect()
            }
            Instruction::Argmax(i) => vec![i.out, i.x],
            Instruction::TopK(i) => [i.values, i.ids].into_iter().chain(i.lse).chain([i.x]).collect(),
        }
    }

    pub(crate) fn validate(&self, c: &Checker) -> Result<(), IsaError> {
        match self {
            Instruction::GridAlloc(i) => i.validate(c),
            Instruction::GridWrite(i) => i.validate(c),
            Instruction::Free(i) => i.validate(c),
            Instruction::Sync => Ok(()),
            Instruction::Embed(i) => i.validate(c),
            Instruction::RmsNorm(i) => i.validate(c),
            Instruction::Linear(i) => i.validate(c),
            Instruction::BitLinear(i) => i.validate(c),
            Instruction::TensorAdd(i) | Instruction::ElementMul(i) => i.validate(c),
            Instruction::Silu(i) | Instruction::Relu2(i) | Instruction::Gelu(i) => i.validate(c),
            Instruction::Softmax(i) => i.validate(c),
            Instruction::Rope(i) => i.validate(c),
            Instruction::KvWrite(i) => i.validate(c),
            Instruction::Attention(i) => i.validate(c),
            Instruction::Argmax(i) => i.validate(c),
            Instruction::TopK(i) => i.validate(c),
        }
    }
}
