//! The reference engine: runs each instruction of a program in order, on host tensors.

use purebee_isa::ops::RowPositions;
use purebee_isa::{Engine, ExecError, Instruction, ParamValue, Program};
use purebee_memory::{MemoryError, Registry, TensorId};

use crate::access::mem;
use crate::ops;

/// The scalar reference engine. Its registry holds every tensor's data on the host: weights
/// as zero-copy views of their GGUF file, activations as owned buffers.
#[derive(Debug, Default)]
pub struct RefEngine {
    memory: Registry,
}

impl RefEngine {
    /// An engine with an empty registry.
    pub fn new() -> RefEngine {
        RefEngine::default()
    }

    fn run(&mut self, program: &Program, i: &Instruction, params: &[ParamValue]) -> Result<(), ExecError> {
        let reg = &mut self.memory;
        match i {
            Instruction::GridAlloc(a) => reg.allocate(a.tensor).map_err(mem("GRID_ALLOC")),
            Instruction::GridWrite(w) => write_bytes(reg, "GRID_WRITE", w.tensor, &w.data),
            Instruction::Free(f) => reg.free(f.tensor).map_err(mem("FREE")),
            // Instructions run one after another, so every earlier write is already visible.
            Instruction::Sync => Ok(()),
            Instruction::Embed(e) => ops::embed::run(reg, e),
            Instruction::RmsNorm(n) => ops::rms_norm::run(reg, n),
            Instruction::Linear(l) => ops::linear::run(reg, l),
            Instruction::BitLinear(b) => ops::bitlinear::run(reg, b),
            Instruction::TensorAdd(b) => ops::elementwise::binary(reg, "TENSOR_ADD", b, |a, b| a + b),
            Instruction::ElementMul(b) => ops::elementwise::binary(reg, "ELEMENT_MUL", b, |a, b| a * b),
            Instruction::Silu(u) => ops::elementwise::unary(reg, "SILU", u, ops::elementwise::silu),
            Instruction::Relu2(u) => ops::elementwise::unary(reg, "RELU2", u, ops::elementwise::relu2),
            Instruction::Gelu(u) => ops::elementwise::unary(reg, "GELU", u, ops::elementwise::gelu),
            Instruction::Softmax(s) => ops::softmax::run(reg, s),
            Instruction::Rope(r) => {
                let base = program.resolve_f32(r.base, params)?;
                let rows = reg.desc(r.x).map_err(mem("ROPE"))?.shape.rows();
                let positions: Vec<u32> = match r.pos {
                    RowPositions::Consecutive(start) => {
                        let start = program.resolve_u32(start, params)?;
                        (0..rows as u32).map(|row| start.wrapping_add(row)).collect()
                    }
                    RowPositions::PerRow(pos) => crate::access::u32s(reg, "ROPE", pos)?.into_owned(),
                };
                ops::rope::run(reg, r, base, &positions)
            }
            Instruction::KvWrite(k) => ops::kv_write::run(reg, program, params, k),
            Instruction::Attention(a) => ops::attention::run(reg, program, params, a),
            Instruction::Argmax(a) => ops::argmax::run(reg, a),
            Instruction::TopK(t) => ops::top_k::run(reg, t),
        }
    }
}

/// Copies a tensor's exact byte image into it.
fn write_bytes(reg: &mut Registry, op: &'static str, id: TensorId, bytes: &[u8]) -> Result<(), ExecError> {
    let name = reg.name(id).to_string();
    let dst = reg.get_mut(id).map_err(mem(op))?.bytes_mut();
    if dst.len() != bytes.len() {
        return Err(ExecError::Memory {
            op,
            source: MemoryError::SizeMismatch { name, expected: dst.len(), got: bytes.len() },
        });
    }
    dst.copy_from_slice(bytes);
    Ok(())
}

impl Engine for RefEngine {
    fn name(&self) -> &'static str {
        "ref"
    }

    fn memory(&self) -> &Registry {
        &self.memory
    }

    fn memory_mut(&mut self) -> &mut Registry {
        &mut self.memory
    }

    fn execute(&mut self, program: &Program, params: &[ParamValue]) -> Result<(), ExecError> {
        program.check_params(params)?;
        for i in program.instructions() {
            self.run(program, i, params)?;
        }
        Ok(())
    }

    fn write(&mut self, tensor: TensorId, bytes: &[u8]) -> Result<(), ExecError> {
        write_bytes(&mut self.memory, "GRID_WRITE", tensor, bytes)
    }

    fn read(&mut self, tensor: TensorId) -> Result<Vec<u8>, ExecError> {
        Ok(self.memory.get(tensor).map_err(mem("GRID_READ"))?.bytes().to_vec())
    }

    fn sync(&mut self) -> Result<(), ExecError> {
        Ok(())
    }
}
