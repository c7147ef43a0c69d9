//! The CPU engine: the registry, the owned tensors, the thread pool, and the `Engine`
//! operations. Instructions run one after another, each spread over the pool's threads
//! where it is large enough to pay for it.

use std::collections::HashSet;

use purebee_isa::{
    DispatchCounters, Engine, ExecError, Instruction, KernelProfile, ParamValue, ProfileSupport, Program, ProgramId,
};
use purebee_memory::{DType, MemoryError, Registry, TensorId};

use crate::kernels::pool::Pool;
use crate::kernels::{Simd, SimdLevel};
use crate::ops::{self, Caches, Exec};
use crate::profile::Profiler;
use crate::store::{byte_len, Store};

/// How to build a [`CpuEngine`].
#[derive(Clone, Debug, Default)]
pub struct CpuOptions {
    /// Threads in all (the caller's included); `None`: the machine's physical cores.
    pub threads: Option<usize>,
    /// The SIMD path; `None`: the fastest this CPU supports ([`SimdLevel::detect`]).
    pub simd: Option<SimdLevel>,
}

/// Why a CPU engine could not be built.
#[derive(Debug, thiserror::Error)]
pub enum CpuError {
    /// A thread count of 0, or more threads than the machine has logical CPUs (workers
    /// spin between instructions, so oversubscribing the cores would stall every join).
    #[error("--threads {requested}: must be between 1 and the {available} logical CPUs of this machine")]
    Threads {
        /// What was asked for.
        requested: usize,
        /// Logical CPUs.
        available: usize,
    },
    /// A SIMD path this CPU cannot run.
    #[error("the {level} kernels need CPU features this machine lacks (it supports up to {supported})")]
    Simd {
        /// What was asked for.
        level: SimdLevel,
        /// The fastest path this CPU supports.
        supported: SimdLevel,
    },
    /// The operating system refused a thread.
    #[error("starting the CPU engine's threads: {0}")]
    Spawn(#[from] std::io::Error),
}

/// The native CPU engine.
pub struct CpuEngine {
    memory: Registry,
    store: Store,
    pool: Pool,
    level: Simd,
    caches: Caches,
    /// Programs whose registry operands were checked for alignment (once per program).
    prepared: HashSet<ProgramId>,
    profiler: Profiler,
}

/// Logical CPUs of this machine.
pub fn logical_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Physical cores (distinct `(package, core)` pairs in sysfs), or the logical CPUs where
/// sysfs does not say.
pub fn physical_cores() -> usize {
    let mut cores = HashSet::new();
    for cpu in 0..logical_cpus() {
        let topo = format!("/sys/devices/system/cpu/cpu{cpu}/topology");
        let read = |f: &str| std::fs::read_to_string(format!("{topo}/{f}")).ok().map(|s| s.trim().to_string());
        match (read("physical_package_id"), read("core_id")) {
            (Some(p), Some(c)) => {
                cores.insert((p, c));
            }
            _ => return logical_cpus(),
        }
    }
    cores.len().max(1)
}

impl CpuEngine {
    /// An engine with an empty registry.
    pub fn new(options: &CpuOptions) -> Result<CpuEngine, CpuError> {
        let available = logical_cpus();
        let threads = options.threads.unwrap_or_else(physical_cores);
        if threads == 0 || threads > available {
            return Err(CpuError::Threads { requested: threads, available });
        }
        let supported = SimdLevel::detect();
        let requested = options.simd.unwrap_or(supported);
        let level = Simd::new(requested).ok_or(CpuError::Simd { level: requested, supported })?;
        Ok(CpuEngine {
            memory: Registry::new(),
            store: Store::default(),
            pool: Pool::new(threads)?,
            level,
            caches: Caches::default(),
            prepared: HashSet::new(),
            profiler: Profiler::default(),
        })
    }

    /// The SIMD path in use.
    pub fn simd(&self) -> SimdLevel {
        self.level.get()
    }

    /// Threads in use, the caller's included.
    pub fn threads(&self) -> usize {
        self.pool.threads()
    }

    /// Copies registry tensors that kernels view as f32/u32 words but whose bytes are not
    /// word-aligned (once per program).
    fn prepare(&mut self, program: &Program) {
        if self.prepared.insert(program.id()) {
            for id in program.instructions().iter().flat_map(Instruction::operands) {
                let word_typed = self.memory.desc(id).is_ok_and(|d| matches!(d.dtype, DType::F32 | DType::U32));
                if word_typed {
                    self.store.align(&self.memory, id);
                }
            }
        }
    }
}

impl Engine for CpuEngine {
    fn name(&self) -> &'static str {
        "cpu"
    }

    fn memory(&self) -> &Registry {
        &self.memory
    }

    fn memory_mut(&mut self) -> &mut Registry {
        &mut self.memory
    }

    fn execute(&mut self, program: &Program, params: &[ParamValue]) -> Result<(), ExecError> {
        program.check_params(params)?;
        self.prepare(program);
        let mut exec = Exec {
            reg: &self.memory,
            store: &mut self.store,
            pool: &self.pool,
            level: self.level,
            caches: &mut self.caches,
        };
        for i in program.instructions() {
            let attended = match i {
                Instruction::Attention(a) if self.profiler.is_on() => {
                    Some(ops::attended_positions(&exec, program, params, a)?)
                }
                _ => None,
            };
            self.profiler.run(&self.memory, i, attended, || ops::run(&mut exec, program, i, params))?;
        }
        Ok(())
    }

    /// Times every instruction on the calling thread (see `profile`).
    fn set_profiling(&mut self, on: bool) -> ProfileSupport {
        self.profiler.set(on);
        ProfileSupport::Timed
    }

    fn take_profile(&mut self) -> Vec<KernelProfile> {
        self.profiler.take()
    }

    fn write(&mut self, tensor: TensorId, bytes: &[u8]) -> Result<(), ExecError> {
        const OP: &str = "GRID_WRITE";
        ops::write_bytes(&self.memory, &mut self.store, OP, tensor, bytes)
    }

    fn read(&mut self, tensor: TensorId) -> Result<Vec<u8>, ExecError> {
        Ok(self.store.bytes(&self.memory, "GRID_READ", tensor)?.to_vec())
    }

    fn sync(&mut self) -> Result<(), ExecError> {
        Ok(())
    }

    /// The thread pool's jobs as dispatches (each one wakes the workers and joins them; work
    /// too small to split runs on the caller and is not counted), and no submits.
    fn counters(&self) -> Option<DispatchCounters> {
        Some(DispatchCounters { dispatches: self.pool.jobs(), submits: 0 })
    }
}

/// A size-mismatch error for a write of `got` bytes into `id`.
pub(crate) fn size_mismatch(reg: &Registry, op: &'static str, id: TensorId, got: usize) -> ExecError {
    let expected = byte_len(reg, op, id).unwrap_or(0);
    ExecError::Memory { op, source: MemoryError::SizeMismatch { name: reg.name(id).to_string(), expected, got } }
}
