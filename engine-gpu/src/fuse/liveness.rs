//! The dead-store rule (see the module docs of `fuse`): which writes a fused kernel may skip.

use purebee_isa::Instruction;
use purebee_memory::TensorId;

/// The tensor an instruction fully overwrites or frees, if any.
fn killed(i: &Instruction) -> Option<TensorId> {
    match i {
        Instruction::GridAlloc(a) => Some(a.tensor),
        Instruction::GridWrite(w) => Some(w.tensor),
        Instruction::Free(f) => Some(f.tensor),
        Instruction::Sync | Instruction::KvWrite(_) => None,
        Instruction::Embed(o) => Some(o.out),
        Instruction::RmsNorm(o) => Some(o.out),
        Instruction::Linear(o) => Some(o.out),
        Instruction::BitLinear(o) => Some(o.out),
        Instruction::TensorAdd(o) | Instruction::ElementMul(o) => Some(o.out),
        Instruction::Silu(o) | Instruction::Relu2(o) | Instruction::Gelu(o) => Some(o.out),
        Instruction::Softmax(o) => Some(o.out),
        Instruction::Rope(o) => Some(o.out),
        Instruction::Attention(o) => Some(o.out),
        Instruction::Argmax(o) => Some(o.out),
        Instruction::TopK(_) => None, // two outputs: claiming neither keeps every store
    }
}

/// Whether instruction `i` writes tensor `t` (or FREEs it): operands() lists the output
/// first (a KV_WRITE's cache); TOP_K has two or three.
pub(super) fn writes(i: &Instruction, t: TensorId) -> bool {
    match i {
        Instruction::TopK(k) => k.values == t || k.ids == t || k.lse == Some(t),
        other => other.operands().first() == Some(&t),
    }
}

/// Whether an instruction reads `t` (in-place instructions read their output; KV_WRITE is
/// taken to read its cache, which it writes only in part).
fn reads(i: &Instruction, t: TensorId) -> bool {
    match i {
        Instruction::GridAlloc(_) | Instruction::GridWrite(_) | Instruction::Free(_) | Instruction::Sync => false,
        Instruction::KvWrite(k) => k.cache == t || k.src == t || k.rows.tensors().contains(&t),
        other => {
            let ops = other.operands();
            // operands() lists the output first, then the inputs.
            ops.iter().skip(1).any(|&id| id == t)
        }
    }
}

/// The dead-store rule: whether the write of `t` by instruction `at` is dead, the reads of
/// `t` by the instructions in `served` being served from registers.
pub(super) fn write_is_dead(instructions: &[Instruction], at: usize, t: TensorId, served: &[usize]) -> bool {
    for (j, i) in instructions.iter().enumerate().skip(at + 1) {
        if !served.contains(&j) && reads(i, t) {
            return false;
        }
        if killed(i) == Some(t) {
            return true;
        }
    }
    false
}
