//! Programs: validated lists of instructions, built once and run many times.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use purebee_memory::{DType, Registry, Shape, TensorId};

use crate::ops::*;
use crate::validate::Checker;
use crate::{ExecError, F32Arg, Instruction, IsaError, ParamDecl, ParamId, ParamKind, ParamValue, U32Arg};

/// A program's identity, unique in the process: engines cache per-program state (buffers,
/// bind groups, pipelines) under it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ProgramId(u64);

/// A recorded, validated list of instructions and the run-time parameters it reads.
///
/// Its tensor handles belong to the registry it was built against; run it on the engine
/// that owns that registry.
#[derive(Clone, Debug)]
pub struct Program {
    id: ProgramId,
    name: String,
    params: Vec<ParamDecl>,
    instructions: Vec<Instruction>,
}

impl Program {
    /// The program's identity.
    pub fn id(&self) -> ProgramId {
        self.id
    }

    /// The name given to the builder.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The instructions, in order.
    pub fn instructions(&self) -> &[Instruction] {
        &self.instructions
    }

    /// The parameters, in the order their values are passed.
    pub fn params(&self) -> &[ParamDecl] {
        &self.params
    }

    /// The slot of a parameter by name.
    pub fn param(&self, name: &str) -> Option<ParamId> {
        self.params.iter().position(|p| p.name == name).map(|i| ParamId(i as u16))
    }

    /// Checks that `values` match the declared parameters, in count and type.
    pub fn check_params(&self, values: &[ParamValue]) -> Result<(), ExecError> {
        if values.len() != self.params.len() {
            return Err(ExecError::ParamCount { expected: self.params.len(), got: values.len() });
        }
        for (d, v) in self.params.iter().zip(values) {
            if d.kind != v.kind() {
                return Err(ExecError::ParamKind { name: d.name.clone(), expected: d.kind, got: v.kind() });
            }
        }
        Ok(())
    }

    /// The value of a u32 argument (values already checked by [`Program::check_params`]).
    pub fn resolve_u32(&self, arg: U32Arg, values: &[ParamValue]) -> Result<u32, ExecError> {
        match arg {
            U32Arg::Const(v) => Ok(v),
            U32Arg::Param(p) => match values.get(p.index()) {
                Some(ParamValue::U32(v)) => Ok(*v),
                _ => Err(self.param_error(p, ParamKind::U32, values)),
            },
        }
    }

    /// The value of an f32 argument (values already checked by [`Program::check_params`]).
    pub fn resolve_f32(&self, arg: F32Arg, values: &[ParamValue]) -> Result<f32, ExecError> {
        match arg {
            F32Arg::Const(v) => Ok(v),
            F32Arg::Param(p) => match values.get(p.index()) {
                Some(ParamValue::F32(v)) => Ok(*v),
                _ => Err(self.param_error(p, ParamKind::F32, values)),
            },
        }
    }

    fn param_error(&self, p: ParamId, expected: ParamKind, values: &[ParamValue]) -> ExecError {
        match (self.params.get(p.index()), values.get(p.index())) {
            (Some(d), Some(v)) => ExecError::ParamKind { name: d.name.clone(), expected, got: v.kind() },
            _ => ExecError::ParamCount { expected: self.params.len(), got: values.len() },
        }
    }
}

/// Records a [`Program`], validating each instruction against the registry's tensor
/// descriptions as it is added: a wrong shape, dtype or name fails here, at build time,
/// never while running.
pub struct ProgramBuilder<'r> {
    registry: &'r mut Registry,
    name: String,
    params: Vec<ParamDecl>,
    instructions: Vec<Instruction>,
    /// Tensors this program has freed (and not allocated again) so far.
    freed: HashSet<TensorId>,
}

impl<'r> ProgramBuilder<'r> {
    /// A builder that declares and looks up tensors in `registry`.
    pub fn new(name: &str, registry: &'r mut Registry) -> ProgramBuilder<'r> {
        ProgramBuilder {
            registry,
            name: name.to_string(),
            params: Vec::new(),
            instructions: Vec::new(),
            freed: HashSet::new(),
        }
    }

    /// The registry the program is built against.
    pub fn registry(&self) -> &Registry {
        self.registry
    }

    /// The handle of an existing tensor (a weight, a cache declared by another program).
    pub fn tensor(&self, name: &str) -> Result<TensorId, IsaError> {
        self.registry.id(name).map_err(|source| IsaError::Memory { op: "LOOKUP", source })
    }

    /// Declares a new tensor (no storage until a GRID_ALLOC runs).
    pub fn declare(&mut self, name: &str, dtype: DType, dims: &[usize]) -> Result<TensorId, IsaError> {
        let shape = Shape::new(dims).ok_or_else(|| IsaError::Invalid {
            op: "DECLARE",
            reason: format!("tensor '{name}': shape {dims:?} is empty or its element count overflows"),
        })?;
        self.registry.declare(name, dtype, shape).map_err(|source| IsaError::Memory { op: "DECLARE", source })
    }

    /// Declares a new tensor and records its GRID_ALLOC.
    pub fn alloc(&mut self, name: &str, dtype: DType, dims: &[usize]) -> Result<TensorId, IsaError> {
        let id = self.declare(name, dtype, dims)?;
        self.grid_alloc(id)?;
        Ok(id)
    }

    /// Declares a u32 run-time parameter.
    pub fn param_u32(&mut self, name: &str) -> Result<U32Arg, IsaError> {
        self.param(name, ParamKind::U32).map(U32Arg::Param)
    }

    /// Declares an f32 run-time parameter.
    pub fn param_f32(&mut self, name: &str) -> Result<F32Arg, IsaError> {
        self.param(name, ParamKind::F32).map(F32Arg::Param)
    }

    fn param(&mut self, name: &str, kind: ParamKind) -> Result<ParamId, IsaError> {
        if self.params.iter().any(|p| p.name == name) {
            return Err(IsaError::Param { op: "PARAM", reason: format!("'{name}' is declared twice") });
        }
        let id = u16::try_from(self.params.len())
            .map_err(|_| IsaError::Param { op: "PARAM", reason: "more than 65535 parameters".to_string() })?;
        self.params.push(ParamDecl { name: name.to_string(), kind });
        Ok(ParamId(id))
    }

    /// Validates and records one instruction.
    pub fn push(&mut self, instruction: Instruction) -> Result<(), IsaError> {
        let op = instruction.name();
        instruction.validate(&Checker::new(self.registry, &self.params, op))?;
        match &instruction {
            Instruction::GridAlloc(i) => {
                self.freed.remove(&i.tensor);
            }
            Instruction::Free(i) => {
                if !self.freed.insert(i.tensor) {
                    return Err(IsaError::UseAfterFree { op, tensor: self.registry.name(i.tensor).to_string() });
                }
            }
            other => {
                if let Some(t) = other.operands().into_iter().find(|t| self.freed.contains(t)) {
                    return Err(IsaError::UseAfterFree { op, tensor: self.registry.name(t).to_string() });
                }
            }
        }
        self.instructions.push(instruction);
        Ok(())
    }

    /// The recorded program.
    pub fn finish(self) -> Program {
        static NEXT_ID: AtomicU64 = AtomicU64::new(0);
        Program {
            id: ProgramId(NEXT_ID.fetch_add(1, Ordering::Relaxed)),
            name: self.name,
            params: self.params,
            instructions: self.instructions,
        }
    }

    // One method per instruction, so that a model reads as a list of ISA calls.

    /// GRID_ALLOC of a declared tensor.
    pub fn grid_alloc(&mut self, tensor: TensorId) -> Result<(), IsaError> {
        self.push(Instruction::GridAlloc(GridAlloc { tensor }))
    }
    /// FREE.
    pub fn free(&mut self, tensor: TensorId) -> Result<(), IsaError> {
        self.push(Instruction::Free(Free { tensor }))
    }
    /// GRID_WRITE of constant bytes.
    pub fn grid_write(&mut self, tensor: TensorId, data: Arc<[u8]>) -> Result<(), IsaError> {
        self.push(Instruction::GridWrite(GridWrite { tensor, data }))
    }
    /// SYNC.
    pub fn sync(&mut self) -> Result<(), IsaError> {
        self.push(Instruction::Sync)
    }
    /// EMBED.
    pub fn embed(&mut self, out: TensorId, table: TensorId, ids: TensorId) -> Result<(), IsaError> {
        self.push(Instruction::Embed(Embed { out, table, ids }))
    }
    /// RMS_NORM.
    pub fn rms_norm(&mut self, out: TensorId, x: TensorId, weight: TensorId, eps: f32) -> Result<(), IsaError> {
        self.push(Instruction::RmsNorm(RmsNorm { out, x, weight, eps }))
    }
    /// LINEAR with f32 activations.
    pub fn linear(&mut self, out: TensorId, x: TensorId, weight: TensorId) -> Result<(), IsaError> {
        self.linear_with(out, x, weight, LinearActivations::F32)
    }
    /// LINEAR with the given activation rounding.
    pub fn linear_with(
        &mut self,
        out: TensorId,
        x: TensorId,
        weight: TensorId,
        activations: LinearActivations,
    ) -> Result<(), IsaError> {
        self.push(Instruction::Linear(Linear { out, x, weight, activations }))
    }
    /// BITLINEAR.
    pub fn bitlinear(
        &mut self,
        out: TensorId,
        x: TensorId,
        weight: TensorId,
        scale: Option<TensorId>,
    ) -> Result<(), IsaError> {
        self.push(Instruction::BitLinear(BitLinear { out, x, weight, scale }))
    }
    /// TENSOR_ADD.
    pub fn add(&mut self, out: TensorId, a: TensorId, b: TensorId) -> Result<(), IsaError> {
        self.push(Instruction::TensorAdd(Binary { out, a, b }))
    }
    /// ELEMENT_MUL.
    pub fn mul(&mut self, out: TensorId, a: TensorId, b: TensorId) -> Result<(), IsaError> {
        self.push(Instruction::ElementMul(Binary { out, a, b }))
    }
    /// SILU.
    pub fn silu(&mut self, out: TensorId, x: TensorId) -> Result<(), IsaError> {
        self.push(Instruction::Silu(Unary { out, x }))
    }
    /// RELU2.
    pub fn relu2(&mut self, out: TensorId, x: TensorId) -> Result<(), IsaError> {
        self.push(Instruction::Relu2(Unary { out, x }))
    }
    /// GELU.
    pub fn gelu(&mut self, out: TensorId, x: TensorId) -> Result<(), IsaError> {
        self.push(Instruction::Gelu(Unary { out, x }))
    }
    /// SOFTMAX.
    pub fn softmax(&mut self, out: TensorId, x: TensorId) -> Result<(), IsaError> {
        self.push(Instruction::Softmax(Softmax { out, x }))
    }
    /// ROPE.
    pub fn rope(&mut self, rope: Rope) -> Result<(), IsaError> {
        self.push(Instruction::Rope(rope))
    }
    /// KV_WRITE.
    pub fn kv_write(&mut self, cache: TensorId, src: TensorId, rows: impl Into<CacheRows>) -> Result<(), IsaError> {
        self.push(Instruction::KvWrite(KvWrite { cache, src, rows: rows.into() }))
    }
    /// ATTENTION.
    pub fn attention(&mut self, attention: Attention) -> Result<(), IsaError> {
        self.push(Instruction::Attention(attention))
    }
    /// ARGMAX.
    pub fn argmax(&mut self, out: TensorId, x: TensorId) -> Result<(), IsaError> {
        self.push(Instruction::Argmax(Argmax { out, x }))
    }
    /// TOP_K.
    pub fn top_k(&mut self, values: TensorId, ids: TensorId, x: TensorId, k: u32) -> Result<(), IsaError> {
        self.push(Instruction::TopK(TopK { values, ids, x, k, lse: None }))
    }
    /// TOP_K with each row's log-sum-exp in `lse` (F32 `[rows]` or `[rows, 1]`).
    pub fn top_k_lse(
        &mut self,
        values: TensorId,
        ids: TensorId,
        lse: TensorId,
        x: TensorId,
        k: u32,
    ) -> Result<(), IsaError> {
        self.push(Instruction::TopK(TopK { values, ids, x, k, lse: Some(lse) }))
    }
}
