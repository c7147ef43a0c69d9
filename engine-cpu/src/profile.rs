//! Per-instruction profiling (`Engine::set_profiling`, `bench --profile --engine cpu`).
//!
//! Off (the default), it costs one branch per instruction. On, each instruction is timed
//! on the calling thread with the monotonic clock. An instruction returns only after its
//! pool job has joined, so that is its whole wall time, every thread's work and the join
//! included. Instructions are grouped into families: the ISA name, and the weight's dtype
//! for LINEAR, BITLINEAR and EMBED (`BITLINEAR TQ2_0`, `LINEAR F16`), since that is what
//! decides which kernel runs. GRID_ALLOC, GRID_WRITE, FREE and SYNC run no kernel and are
//! not counted.
//!
//! The bytes are what the instruction must read at least:
//! - LINEAR and BITLINEAR: the whole weight (and `.scale`) plus the activations;
//! - EMBED: the ids and the rows they select;
//! - ATTENTION: the queries and the cache rows the query rows attend to;
//! - the rest: every input tensor.
//!
//! Cache hits count like memory reads. So a family's GB/s is a memory bandwidth only where
//! its inputs are larger than the caches (the weights of a decode GEMV, for example).

use std::collections::HashMap;
use std::time::Instant;

use purebee_isa::{Instruction, KernelProfile};
use purebee_memory::{Registry, TensorId};

#[derive(Default)]
struct Totals {
    instructions: u64,
    bytes: u64,
    seconds: f64,
}

/// Off, or the totals per family since it was turned on or last taken.
#[derive(Default)]
pub(crate) struct Profiler {
    on: bool,
    /// Totals per family, in the order each family first ran.
    families: Vec<(String, Totals)>,
    index: HashMap<String, usize>,
}

impl Profiler {
    /// Turns profiling on or off (dropping the totals when off).
    pub fn set(&mut self, on: bool) {
        self.on = on;
        if !on {
            self.families.clear();
            self.index.clear();
        }
    }

    /// True when on.
    pub fn is_on(&self) -> bool {
        self.on
    }

    /// Runs `f`, the instruction `i`, timing it when profiling is on. `attended` is the cache
    /// rows an ATTENTION reads from each cache (`None` for other instructions).
    pub fn run<T>(&mut self, reg: &Registry, i: &Instruction, attended: Option<u64>, f: impl FnOnce() -> T) -> T {
        if !self.on {
            return f();
        }
        let Some(family) = family(reg, i) else {
            return f();
        };
        let start = Instant::now();
        let result = f();
        let seconds = start.elapsed().as_secs_f64();
        let slot = match self.index.get(&family) {
            Some(&slot) => slot,
            None => {
                self.families.push((family.clone(), Totals::default()));
                self.index.insert(family, self.families.len() - 1);
                self.families.len() - 1
            }
        };
        let totals = &mut self.families[slot].1;
        totals.instructions += 1;
        totals.bytes += bytes_read(reg, i, attended);
        totals.seconds += seconds;
        result
    }

    /// The totals per family (each instruction counts as one dispatch), reset to zero.
    pub fn take(&mut self) -> Vec<KernelProfile> {
        self.index.clear();
        std::mem::take(&mut self.families)
            .into_iter()
            .map(|(family, t)| KernelProfile {
                family,
                dispatches: t.instructions,
                seconds: Some(t.seconds),
                bytes_read: t.bytes,
            })
            .collect()
    }
}

/// The family of `i`, or `None` for instructions that run no kernel.
fn family(reg: &Registry, i: &Instruction) -> Option<String> {
    let weight = match i {
        Instruction::GridAlloc(_) | Instruction::GridWrite(_) | Instruction::Free(_) | Instruction::Sync => {
            return None
        }
        Instruction::Linear(l) => Some(l.weight),
        Instruction::BitLinear(b) => Some(b.weight),
        Instruction::Embed(e) => Some(e.table),
        _ => None,
    };
    let dtype = weight.and_then(|w| reg.desc(w).ok()).map(|d| d.dtype.name());
    Some(match dtype {
        Some(dtype) => format!("{} {dtype}", i.name()),
        None => i.name().to_string(),
    })
}

/// The bytes of `id` as stored (0 for a tensor the registry does not know).
fn tensor_bytes(reg: &Registry, id: TensorId) -> u64 {
    reg.desc(id).ok().and_then(|d| d.dtype.tensor_bytes(d.shape.rows(), d.shape.cols())).unwrap_or(0) as u64
}

/// The bytes `i` must read (see the module's documentation).
fn bytes_read(reg: &Registry, i: &Instruction, attended: Option<u64>) -> u64 {
    match i {
        Instruction::Embed(e) => {
            let rows = reg.desc(e.ids).map(|d| d.shape.numel()).unwrap_or(0) as u64;
            let row = reg.desc(e.table).ok().and_then(|d| d.dtype.row_bytes(d.shape.cols())).unwrap_or(0) as u64;
            tensor_bytes(reg, e.ids) + rows * row
        }
        Instruction::Attention(a) => {
            let positions = attended.unwrap_or(0);
            let cache_row = |id| {
                reg.desc(id).ok().and_then(|d| d.dtype.row_bytes(d.shape.cols())).map_or(0, |b| b as u64 * positions)
            };
            tensor_bytes(reg, a.q) + cache_row(a.k_cache) + cache_row(a.v_cache)
        }
        // KV_WRITE's first operand is the cache it writes.
        Instruction::KvWrite(k) => tensor_bytes(reg, k.src),
        _ => {
            let outputs = if let Instruction::TopK(t) = i { 2 + usize::from(t.lse.is_some()) } else { 1 };
            let mut inputs = i.operands().split_off(outputs);
            inputs.dedup();
            inputs.iter().map(|&id| tensor_bytes(reg, id)).sum()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use purebee_isa::ops::{Attention, Linear, LinearActivations};
    use purebee_isa::U32Arg;
    use purebee_memory::{DType, Shape};

    #[test]
    fn bytes_count_whole_weights_and_the_attended_cache_rows() {
        let mut reg = Registry::new();
        let mut t = |name: &str, dtype, dims: &[usize]| {
            reg.declare(name, dtype, Shape::new(dims).expect("shape")).expect("declare")
        };
        let (x, w, y) = (t("x", DType::F32, &[1, 64]), t("w", DType::F16, &[10, 64]), t("y", DType::F32, &[1, 10]));
        let (q, k, v, o) = (
            t("q", DType::F32, &[2, 8]),
            t("k", DType::F32, &[100, 4]),
            t("v", DType::F32, &[100, 4]),
            t("o", DType::F32, &[2, 8]),
        );
        let linear = Instruction::Linear(Linear { out: y, x, weight: w, activations: LinearActivations::F32 });
        assert_eq!(family(&reg, &linear).as_deref(), Some("LINEAR F16"));
        assert_eq!(bytes_read(&reg, &linear, None), 64 * 4 + 10 * 64 * 2);
        let attention = Instruction::Attention(Attention {
            out: o,
            q,
            k_cache: k,
            v_cache: v,
            head_dim: 4,
            rows: U32Arg::Const(5).into(),
        });
        // Rows at positions 5 and 6 attend to positions 0..=6: 7 rows of each cache.
        assert_eq!(bytes_read(&reg, &attention, Some(7)), 2 * 8 * 4 + 2 * 7 * 4 * 4);
    }
}
