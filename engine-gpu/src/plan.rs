//! What a program needs and does to tensor lifetimes, worked out once per program so that
//! each run only checks a short list (no per-run maps or scans of the instructions).

use std::collections::HashSet;

use purebee_isa::{ExecError, Instruction, ParamValue, Program, U32Arg};
use purebee_memory::{Registry, TensorId};

use crate::tensors::Liveness;

/// A KV_WRITE or ATTENTION whose positions must fit its cache (kernels cannot report
/// errors, so this is checked on the host before anything runs).
struct PositionCheck {
    op: &'static str,
    pos: U32Arg,
    rows: usize,
    cache: TensorId,
    n_ctx: usize,
}

/// The lifetime facts of one program.
pub(crate) struct RunPlan {
    /// Tensors the program uses (or frees) before allocating them, with the first
    /// instruction that does: they must be live when a run starts.
    pub needs_live: Vec<(&'static str, TensorId)>,
    /// GRID_ALLOC and FREE in program order: the states to apply after a run.
    pub effects: Vec<(TensorId, Liveness)>,
    positions: Vec<PositionCheck>,
}

impl RunPlan {
    pub fn new(program: &Program, reg: &Registry) -> Result<RunPlan, ExecError> {
        let mut allocated = HashSet::new();
        let mut seen = HashSet::new();
        let mut plan = RunPlan { needs_live: Vec::new(), effects: Vec::new(), positions: Vec::new() };
        for i in program.instructions() {
            let op = i.name();
            let mut need = |id: TensorId, plan: &mut RunPlan| {
                if !allocated.contains(&id) && seen.insert(id) {
                    plan.needs_live.push((op, id));
                }
            };
            match i {
                Instruction::GridAlloc(a) => {
                    allocated.insert(a.tensor);
                    plan.effects.push((a.tensor, Liveness::Live));
                }
                Instruction::Free(f) => {
                    need(f.tensor, &mut plan);
                    plan.effects.push((f.tensor, Liveness::Freed));
                }
                other => {
                    for id in other.operands() {
                        need(id, &mut plan);
                    }
                }
            }
            let check = match i {
                Instruction::KvWrite(k) => k.rows.consecutive().map(|pos| (pos, k.src, k.cache)),
                Instruction::Attention(a) => a.rows.consecutive().map(|pos| (pos, a.q, a.k_cache)),
                _ => None,
            };
            if let Some((pos, rows_of, cache)) = check {
                let rows = reg.desc(rows_of).map_err(|source| ExecError::Memory { op, source })?.shape.rows();
                let n_ctx = reg.desc(cache).map_err(|source| ExecError::Memory { op, source })?.shape.rows();
                plan.positions.push(PositionCheck { op, pos, rows, cache, n_ctx });
            }
        }
        Ok(plan)
    }

    /// Fails when a run with `params` would put positions past a cache.
    pub fn check_positions(&self, program: &Program, params: &[ParamValue], reg: &Registry) -> Result<(), ExecError> {
        for c in &self.positions {
            let pos = program.resolve_u32(c.pos, params)? as u64;
            let end = pos + c.rows as u64;
            if end > c.n_ctx as u64 {
                let tensor = reg.name(c.cache).to_string();
                return Err(ExecError::ContextOverflow { op: c.op, tensor, pos, end, n_ctx: c.n_ctx });
            }
        }
        Ok(())
    }
}
