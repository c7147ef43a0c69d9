//! What a program needs and does to tensor lifetimes, worked out once per program so that
//! each run only checks a short list (no per-run maps or scans of the instructions).
//!
//! Kernels cannot report errors, so the run-time checks of KV_WRITE and ATTENTION are made
//! here, on the host, before anything runs: consecutive positions against the cache, and
//! paged rows with the ISA's own `PagedRows::check`, from the host's copies of the index
//! tensors (`host_index.rs`) as the program's own instructions change them on the way.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};

use purebee_isa::ops::{CacheRows, PagedRows};
use purebee_isa::{ExecError, Instruction, ParamValue, Program, U32Arg};
use purebee_memory::{DType, Registry, TensorId};

use crate::host_index::{words, HostCopies, MAX_WORDS};
use crate::tensors::Liveness;
use crate::GpuError;

/// A KV_WRITE or ATTENTION whose positions must fit its cache (kernels cannot report
/// errors, so this is checked on the host before anything runs).
struct PositionCheck {
    op: &'static str,
    pos: U32Arg,
    rows: usize,
    cache: TensorId,
    n_ctx: usize,
}

/// A KV_WRITE or ATTENTION of paged rows: `PagedRows::check` against a cache of `n_ctx`
/// rows, every page up to each row's position (`whole_prefix`, ATTENTION) or its own only.
#[derive(Clone, Copy, PartialEq)]
struct PagedCheck {
    op: &'static str,
    rows: PagedRows,
    max_pages: usize,
    n_ctx: usize,
    whole_prefix: bool,
}

/// What a U32 tensor holds after an instruction.
#[derive(Clone, Copy)]
enum Contents {
    /// GRID_ALLOC: this many zero words.
    Zeroed(usize),
    /// GRID_WRITE: the data of the program's instruction at this index.
    Constant(usize),
    /// A kernel wrote it, or FREE.
    Unknown,
}

/// One step of a run's host checks, in program order.
enum Event {
    Fits(PositionCheck),
    Paged(PagedCheck),
    /// A U32 tensor's new contents.
    Contents(TensorId, Contents),
}

/// The lifetime facts of one program.
pub(crate) struct RunPlan {
    /// Tensors the program uses (or frees) before allocating them, with the first
    /// instruction that does: they must be live when a run starts.
    pub needs_live: Vec<(&'static str, TensorId)>,
    /// GRID_ALLOC and FREE in program order: the states to apply after a run.
    pub effects: Vec<(TensorId, Liveness)>,
    events: Vec<Event>,
    /// Whether `events` holds a paged check (otherwise contents need no tracking during the
    /// checks).
    paged: bool,
}

/// The U32 tensors instruction `i` writes (a kernel's output, or FREE).
fn u32_outputs(i: &Instruction, reg: &Registry) -> Vec<TensorId> {
    let outputs = match i {
        Instruction::GridAlloc(_) | Instruction::GridWrite(_) | Instruction::Sync => vec![],
        Instruction::TopK(k) => vec![k.values, k.ids],
        // operands() lists the output first (a KV_WRITE's cache, an F32 tensor); FREE's
        // only operand is the tensor it frees.
        other => other.operands().into_iter().take(1).collect(),
    };
    outputs.into_iter().filter(|&t| is_u32(reg, t)).collect()
}

fn is_u32(reg: &Registry, t: TensorId) -> bool {
    reg.desc(t).is_ok_and(|d| d.dtype == DType::U32)
}

impl RunPlan {
    pub fn new(program: &Program, reg: &Registry) -> Result<RunPlan, ExecError> {
        let mut allocated = HashSet::new();
        let mut seen = HashSet::new();
        let mut plan = RunPlan { needs_live: Vec::new(), effects: Vec::new(), events: Vec::new(), paged: false };
        for (index, i) in program.instructions().iter().enumerate() {
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
            let desc = |t: TensorId| reg.desc(t).map_err(|source| ExecError::Memory { op, source });
            let check = match i {
                Instruction::KvWrite(k) => Some((&k.rows, k.src, k.cache, false)),
                Instruction::Attention(a) => Some((&a.rows, a.q, a.k_cache, true)),
                _ => None,
            };
            if let Some((rows_of, src, cache, whole_prefix)) = check {
                let n_ctx = desc(cache)?.shape.rows();
                match *rows_of {
                    CacheRows::Consecutive(pos) => {
                        let rows = desc(src)?.shape.rows();
                        plan.events.push(Event::Fits(PositionCheck { op, pos, rows, cache, n_ctx }));
                    }
                    CacheRows::Paged(rows) => {
                        let max_pages = desc(rows.pages)?.shape.cols();
                        plan.push_paged(PagedCheck { op, rows, max_pages, n_ctx, whole_prefix });
                    }
                }
            }
            // The U32 tensors this instruction changes, after its own check.
            match i {
                // Copies are kept up to MAX_WORDS: a larger tensor is not known.
                Instruction::GridAlloc(a) if is_u32(reg, a.tensor) => {
                    let words = desc(a.tensor)?.shape.numel();
                    let contents = if words <= MAX_WORDS { Contents::Zeroed(words) } else { Contents::Unknown };
                    plan.events.push(Event::Contents(a.tensor, contents));
                }
                Instruction::GridWrite(w) if is_u32(reg, w.tensor) => {
                    let contents =
                        if w.data.len() / 4 <= MAX_WORDS { Contents::Constant(index) } else { Contents::Unknown };
                    plan.events.push(Event::Contents(w.tensor, contents));
                }
                other => {
                    for t in u32_outputs(other, reg) {
                        plan.events.push(Event::Contents(t, Contents::Unknown));
                    }
                }
            }
        }
        Ok(plan)
    }

    /// Adds a paged check, unless the same check already comes earlier with none of its
    /// tables changed since (many KV_WRITEs and ATTENTIONs of a program share them).
    fn push_paged(&mut self, check: PagedCheck) {
        self.paged = true;
        let tables = check.rows.operands();
        for e in self.events.iter().rev() {
            match e {
                Event::Paged(earlier) if *earlier == check => return,
                Event::Contents(t, _) if tables.contains(t) => break,
                _ => {}
            }
        }
        self.events.push(Event::Paged(check));
    }

    /// Fails when a run with `params` would put positions past a cache, or when paged rows
    /// name a sequence, position or page out of range (`ExecError::IndexOutOfRange`, as
    /// every engine fails), in program order; `copies` are the index tensors as the host
    /// knows them before the run.
    pub fn check_positions(
        &self,
        program: &Program,
        params: &[ParamValue],
        reg: &Registry,
        copies: &HostCopies,
    ) -> Result<(), ExecError> {
        // The index tensors this program changed so far in the run (None: unknown).
        let mut changed: HashMap<TensorId, Option<Cow<[u32]>>> = HashMap::new();
        for e in &self.events {
            match e {
                Event::Fits(c) => {
                    let pos = program.resolve_u32(c.pos, params)? as u64;
                    let end = pos + c.rows as u64;
                    if end > c.n_ctx as u64 {
                        let tensor = reg.name(c.cache).to_string();
                        return Err(ExecError::ContextOverflow { op: c.op, tensor, pos, end, n_ctx: c.n_ctx });
                    }
                }
                Event::Contents(t, contents) if self.paged => {
                    changed.insert(*t, contents_of(program, *contents).map(Cow::Owned));
                }
                Event::Contents(..) => {}
                Event::Paged(c) => {
                    let table = |t: TensorId| -> Result<Cow<[u32]>, ExecError> {
                        let known = match changed.get(&t) {
                            Some(c) => c.as_deref().map(Cow::Borrowed),
                            None => copies.contents(reg, t),
                        };
                        let unknown = || GpuError::IndicesUnknown { op: c.op, tensor: reg.name(t).to_string() };
                        Ok(known.ok_or_else(unknown)?)
                    };
                    let [pos, seq, pages] = c.rows.operands().map(table);
                    let (pos, seq, pages) = (pos?, seq?, pages?);
                    let names = c.rows.operands().map(|t| reg.name(t));
                    c.rows.check(c.op, names, &pos, &seq, &pages, c.max_pages, c.n_ctx, c.whole_prefix)?;
                }
            }
        }
        Ok(())
    }

    /// After a run: the U32 tensors it changed, as the host now knows them.
    pub fn apply_contents(&self, program: &Program, copies: &mut HostCopies) {
        for e in &self.events {
            if let Event::Contents(t, contents) = e {
                copies.set(*t, contents_of(program, *contents));
            }
        }
    }
}

/// The words a U32 tensor holds after an instruction, `None` when a kernel wrote them.
fn contents_of(program: &Program, contents: Contents) -> Option<Vec<u32>> {
    match contents {
        Contents::Zeroed(n) => Some(vec![0; n]),
        Contents::Constant(i) => match program.instructions().get(i) {
            Some(Instruction::GridWrite(w)) => Some(words(&w.data)),
            _ => None,
        },
        Contents::Unknown => None,
    }
}
