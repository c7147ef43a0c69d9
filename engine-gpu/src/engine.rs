//! The GPU engine: the registry, the tensors' buffers, compiled programs, and the `Engine`
//! operations.

use std::collections::{HashSet, VecDeque};
use std::sync::mpsc;

use purebee_isa::{
    DispatchCounters, Engine, ExecError, KernelProfile, ParamValue, PendingRead, ProfileSupport, Program,
};
use purebee_memory::{MemoryError, Registry, TensorDesc, TensorId};

use crate::cache::Lru;
use crate::compile::{compile, Compiled, Step};
use crate::context::CAN_WAIT;
use crate::host_index::HostCopies;
use crate::kernels::{layout, ScratchKey};
use crate::pipelines::PipelineCache;
use crate::plan::RunPlan;
use crate::profile::Profiler;
use crate::tensors::{Liveness, TensorStore};
use crate::{GpuContext, GpuError, GpuOptions};

/// Reads begun with `read_later` and not finished; beyond this many the oldest are
/// abandoned (a caller that drops a `PendingRead` never finishes it).
const MAX_READS_IN_FLIGHT: usize = 8;

/// A GRID_READ in flight (`Engine::read_later`): a staging buffer per buffer of the tensor
/// (one, unless it is ternary or sharded), the submission that copies into them, and how
/// their bytes make the tensor's.
struct InFlightRead {
    ticket: u64,
    staged: Vec<Staged>,
    assembly: Assembly,
    submission: wgpu::SubmissionIndex,
}

/// One staging buffer of a read in flight.
struct Staged {
    /// Reused from earlier reads, so possibly larger than this read: only its first
    /// `copied` bytes are copied and mapped.
    staging: wgpu::Buffer,
    copied: u64,
    /// The mapping callback's result, once it has run: taken from `mapped` by
    /// `Engine::read_ready` (or a native `finish_read`, which may wait for it).
    mapped: mpsc::Receiver<Result<(), wgpu::BufferAsyncError>>,
    outcome: Option<Result<(), String>>,
}

impl Staged {
    /// Takes the mapping's result if its callback has run; true once it is known.
    fn poll(&mut self) -> bool {
        if self.outcome.is_none() {
            self.outcome = match self.mapped.try_recv() {
                Ok(r) => Some(r.map_err(|e| e.to_string())),
                Err(mpsc::TryRecvError::Empty) => None,
                Err(mpsc::TryRecvError::Disconnected) => Some(Err("the callback was dropped".to_string())),
            };
        }
        self.outcome.is_some()
    }
}

/// How the bytes of a tensor's buffers, in order (every shard of every part), make its
/// file-layout bytes (GRID_READ).
struct Assembly {
    /// The tensor's size in its file layout.
    len: usize,
    /// The number of buffers of each part, in order.
    buffers_per_part: Vec<usize>,
    /// A ternary tensor's description: its parts are repacked (`kernels::layout`).
    ternary: Option<TensorDesc>,
}

impl Assembly {
    /// The file-layout bytes of the tensor from the bytes of each of its buffers, in order.
    fn file_bytes(&self, mut chunks: Vec<Vec<u8>>) -> Result<Vec<u8>, GpuError> {
        let Some(desc) = &self.ternary else {
            // The file's bytes, padded: one buffer (the common case, no copy) or shards.
            let mut bytes = if chunks.len() == 1 { chunks.pop().unwrap_or_default() } else { chunks.concat() };
            bytes.truncate(self.len);
            return Ok(bytes);
        };
        let mut chunks = chunks.into_iter();
        let parts: Vec<Vec<u8>> =
            self.buffers_per_part.iter().map(|&n| chunks.by_ref().take(n).flatten().collect()).collect();
        layout::file_bytes(desc, &parts)
    }
}

/// Compiled programs kept at most (the least recently run beyond it are dropped, with their
/// buffers and bind groups, and compiled again when they run again).
pub const COMPILED_PROGRAMS: usize = 32;

/// Run plans kept at most (they are small and cheap to work out again).
const RUN_PLANS: usize = 256;

/// The wgpu engine.
///
/// A program's commands are submitted with whatever comes next (a read's copy joins the
/// same submission, so a decode step that reads its token back costs one submit), or
/// before anything that writes to the queue.
///
/// Compiled programs live in a cache of [`COMPILED_PROGRAMS`] entries, least recently run
/// first out. A program that FREEs a tensor drops every compiled program that bound the
/// tensor's buffers, so that the buffers are returned (a bind group holds its buffers alive).
///
/// Profiling (`Engine::set_profiling`) is described in `profile.rs`: per kernel family
/// (`file:entry`), dispatches, device time where the adapter has timestamp queries, and bytes
/// read, counted as the sizes of the storage bindings each dispatch's entry point loads from.
pub struct GpuEngine {
    ctx: GpuContext,
    memory: Registry,
    store: TensorStore,
    pipelines: PipelineCache,
    compiled: Lru<Compiled>,
    /// Each program's lifetime facts, worked out on its first run (they do not depend on
    /// buffers, so they outlive recompilations).
    plans: Lru<RunPlan>,
    /// The U32 tensors as the host knows them, for the checks of paged rows.
    host: HostCopies,
    /// A reusable MAP_READ buffer for GRID_READ, grown as needed.
    staging: Option<wgpu::Buffer>,
    /// Dispatches and submits so far (`Engine::counters`).
    counters: DispatchCounters,
    /// The commands of the programs run since the last submit, in order: a program that
    /// writes nothing to the queue (no parameters, nothing to compile or upload) joins them,
    /// so a decode step and the programs and reads after it go out as one submission.
    unsubmitted: Vec<wgpu::CommandBuffer>,
    reads_in_flight: VecDeque<InFlightRead>,
    next_ticket: u64,
    /// Staging buffers of finished `read_later`s, for reuse.
    spare_staging: Vec<wgpu::Buffer>,
    profiler: Profiler,
}

impl GpuEngine {
    /// Opens a device (see [`GpuContext::new`]), blocking until it exists. Not in a browser:
    /// there, await [`GpuEngine::new_async`].
    #[cfg(not(target_arch = "wasm32"))]
    pub fn new(options: &GpuOptions) -> Result<GpuEngine, GpuError> {
        pollster::block_on(GpuEngine::new_async(options))
    }

    /// Opens a device (see [`GpuContext::new_async`]): the constructor a browser tab awaits.
    pub async fn new_async(options: &GpuOptions) -> Result<GpuEngine, GpuError> {
        Ok(GpuEngine::with_context(GpuContext::new_async(options).await?))
    }

    /// An engine on an open device.
    fn with_context(ctx: GpuContext) -> GpuEngine {
        GpuEngine {
            ctx,
            memory: Registry::new(),
            store: TensorStore::default(),
            pipelines: PipelineCache::default(),
            compiled: Lru::new(COMPILED_PROGRAMS),
            plans: Lru::new(RUN_PLANS),
            host: HostCopies::default(),
            staging: None,
            counters: DispatchCounters::default(),
            unsubmitted: Vec::new(),
            reads_in_flight: VecDeque::new(),
            next_ticket: 0,
            spare_staging: Vec::new(),
            profiler: Profiler::default(),
        }
    }

    /// The device in use.
    pub fn context(&self) -> &GpuContext {
        &self.ctx
    }

    /// Fails with the error of the first instruction that uses a tensor that is not live
    /// when the run starts.
    fn check_liveness(&self, plan: &RunPlan) -> Result<(), ExecError> {
        for &(op, id) in &plan.needs_live {
            self.live(op, id)?;
        }
        Ok(())
    }

    fn live(&self, op: &'static str, id: TensorId) -> Result<(), ExecError> {
        let name = || self.memory.name(id).to_string();
        match self.store.state(&self.memory, id) {
            Liveness::Live => Ok(()),
            Liveness::Freed => Err(ExecError::Memory { op, source: MemoryError::Freed { name: name() } }),
            Liveness::Declared => Err(ExecError::Memory { op, source: MemoryError::NotAllocated { name: name() } }),
        }
    }

    /// Submits the pending programs' commands, then `extra`, in one submission.
    fn submit(&mut self, extra: Option<wgpu::CommandBuffer>) -> wgpu::SubmissionIndex {
        self.counters.submits += 1;
        self.ctx.queue.submit(std::mem::take(&mut self.unsubmitted).into_iter().chain(extra))
    }

    /// Submits the pending programs' commands, if any: before a queue write (which would
    /// otherwise land ahead of them) and before waiting.
    fn flush(&mut self) {
        if !self.unsubmitted.is_empty() {
            self.submit(None);
        }
    }

    /// A MAP_READ staging buffer of at least `size` bytes for `read_later`.
    fn staging_buffer(&mut self, size: u64) -> wgpu::Buffer {
        if let Some(i) = self.spare_staging.iter().position(|b| b.size() >= size) {
            return self.spare_staging.swap_remove(i);
        }
        self.ctx.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("GRID_READ (later) staging"),
            size,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        })
    }

    /// Copies a whole buffer back to the host (through the reusable staging buffer), waiting
    /// for it: [`GpuError::WouldBlock`] naming `op` in a browser, before anything is done.
    fn read_buffer(&mut self, src: &wgpu::Buffer, what: &str, op: &'static str) -> Result<Vec<u8>, GpuError> {
        if !CAN_WAIT {
            return Err(GpuError::WouldBlock { op });
        }
        let size = src.size();
        if self.staging.as_ref().is_none_or(|s| s.size() < size) {
            self.staging = Some(self.ctx.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("GRID_READ staging"),
                size,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            }));
        }
        let Some(staging) = self.staging.as_ref() else { return Ok(Vec::new()) };
        let mut encoder =
            self.ctx.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("GRID_READ") });
        encoder.copy_buffer_to_buffer(src, 0, staging, 0, size);
        let staging = staging.clone();
        self.submit(Some(encoder.finish()));
        let (tx, rx) = mpsc::channel();
        staging.map_async(wgpu::MapMode::Read, 0..size, move |r| {
            let _ = tx.send(r);
        });
        self.ctx.wait(op)?;
        self.ctx.wait_mapped(&rx, &format!("'{what}'"))?;
        let out = {
            let view = staging.get_mapped_range(0..size).map_err(|e| GpuError::Wgpu(e.to_string()))?;
            view.to_vec()
        };
        staging.unmap();
        Ok(out)
    }

    /// The bytes of a compiled program's scratch buffer (GPU-only working memory such as
    /// BITLINEAR's int8 activations), after everything submitted so far; for tests and
    /// debugging. The buffer is sized for the largest use in the program and holds what
    /// the last dispatch that wrote it left. Fails when `program` has not run on this engine
    /// or uses no such buffer.
    pub fn read_scratch(&mut self, program: &Program, key: ScratchKey) -> Result<Vec<u8>, ExecError> {
        let buffer = self
            .compiled
            .peek(&program.id())
            .and_then(|c| c.scratch.get(&key))
            .cloned()
            .ok_or_else(|| GpuError::Wgpu(format!("program '{}' has no scratch buffer {key:?}", program.name())))?;
        Ok(self.read_buffer(&buffer, &format!("scratch {key:?}"), "reading a scratch buffer")?)
    }

    /// The kernels a run of `program` dispatches, in order, as `file:entry` (for example
    /// `bitlinear.wgsl:gemv`); `None` until the program has run on this engine. For tests
    /// and profiles: what the compiler made of a program.
    pub fn dispatched_kernels(&self, program: &Program) -> Option<Vec<String>> {
        let c = self.compiled.peek(&program.id())?;
        let kernels = c.steps.iter().filter_map(|s| match s {
            Step::Dispatch { kernel: (shader, entry), .. } => Some(format!("{}:{entry}", shader.name())),
            _ => None,
        });
        Some(kernels.collect())
    }

    /// The compiled programs the engine keeps (at most [`COMPILED_PROGRAMS`]); for tests.
    pub fn compiled_programs(&self) -> usize {
        self.compiled.len()
    }

    /// Whether a compiled program of `program` is kept; for tests.
    pub fn is_compiled(&self, program: &Program) -> bool {
        self.compiled.contains(&program.id())
    }

    /// The buffers of each part of `tensor` on the GPU: 1 per part, more for a part stored
    /// in shards (larger than the largest buffer); empty when it has no buffers yet. For
    /// tests.
    pub fn tensor_buffers(&self, tensor: TensorId) -> Vec<usize> {
        self.store.get(tensor).map_or_else(Vec::new, |t| t.parts.iter().map(|p| p.shards.len()).collect())
    }

    /// The compiled programs whose bind groups hold buffers of `tensor`; for tests (0 after
    /// a FREE of it).
    pub fn programs_binding(&self, tensor: TensorId) -> usize {
        self.compiled.values().filter(|c| c.bound.iter().any(|&(id, _)| id == tensor)).count()
    }

    /// A live tensor's buffers in order (created now if missing) and how to rebuild its bytes
    /// from theirs.
    fn read_plan(&mut self, op: &'static str, id: TensorId) -> Result<(Vec<wgpu::Buffer>, Assembly), ExecError> {
        self.live(op, id)?;
        let len = self.byte_len(op, id)?;
        let desc = self.memory.desc(id).map_err(|source| ExecError::Memory { op, source })?;
        let ternary = desc.dtype.is_ternary().then(|| desc.clone());
        let t = self.store.ensure(&self.ctx, &self.memory, id)?;
        let buffers = t.parts.iter().flat_map(|p| p.shards.iter().cloned()).collect();
        let buffers_per_part = t.parts.iter().map(|p| p.shards.len()).collect();
        Ok((buffers, Assembly { len, buffers_per_part, ternary }))
    }

    fn byte_len(&self, op: &'static str, id: TensorId) -> Result<usize, ExecError> {
        let d = self.memory.desc(id).map_err(|source| ExecError::Memory { op, source })?;
        Ok(d.dtype.tensor_bytes(d.shape.rows(), d.shape.cols()).unwrap_or(0))
    }
}

impl Engine for GpuEngine {
    fn name(&self) -> &'static str {
        "gpu"
    }

    fn memory(&self) -> &Registry {
        &self.memory
    }

    fn memory_mut(&mut self) -> &mut Registry {
        &mut self.memory
    }

    fn execute(&mut self, program: &Program, params: &[ParamValue]) -> Result<(), ExecError> {
        program.check_params(params)?;
        if !self.plans.contains(&program.id()) {
            let plan = RunPlan::new(program, &self.memory)?;
            self.plans.insert(program.id(), plan);
        }
        let _ = self.plans.get(&program.id());
        let Some(plan) = self.plans.peek(&program.id()) else {
            return Err(GpuError::Wgpu("run plan missing".to_string()).into());
        };
        self.check_liveness(plan)?;
        plan.check_positions(program, params, &self.memory, &self.host)?;
        let current = self.compiled.peek(&program.id()).is_some_and(|c| c.is_current(&self.store));
        if !current || !params.is_empty() {
            // The earlier programs' commands go first: this one's parameter writes (and the
            // uploads of a compile) would otherwise land ahead of them.
            self.flush();
        }
        if !current {
            let c = compile(&self.ctx, &self.memory, &mut self.store, &mut self.pipelines, program)?;
            self.compiled.insert(program.id(), c);
        }
        let Some(c) = self.compiled.get(&program.id()) else {
            return Err(GpuError::Wgpu("compiled program missing".to_string()).into());
        };
        if !params.is_empty() {
            let words: Vec<u32> = params
                .iter()
                .map(|v| match *v {
                    ParamValue::U32(u) => u,
                    ParamValue::F32(f) => f.to_bits(),
                })
                .collect();
            self.ctx.queue.write_buffer(&c.run_params, 0, bytemuck::cast_slice(&words));
        }
        let mut encoder =
            self.ctx.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some(program.name()) });
        let mut pass: Option<wgpu::ComputePass> = None;
        // Profiling: the family and read bytes of each dispatch; timed, each dispatch in its
        // own pass with timestamps (see `profile.rs`). Off, neither exists.
        let timed = self.profiler.timing(&self.ctx);
        let mut profiled = Vec::new();
        if timed {
            let dispatches = c.steps.iter().filter(|s| matches!(s, Step::Dispatch { .. })).count();
            self.profiler.prepare(&self.ctx, dispatches);
        }
        for step in &c.steps {
            match step {
                Step::Dispatch { pipeline, bind_group, workgroups, kernel, read_bytes } => {
                    if self.profiler.on() {
                        if timed {
                            // End the previous pass before the encoder starts the next.
                            drop(pass.take());
                            pass = Some(
                                encoder
                                    .begin_compute_pass(&wgpu::ComputePassDescriptor {
                                        label: None,
                                        timestamp_writes: self.profiler.writes(profiled.len()),
                                    })
                                    .forget_lifetime(),
                            );
                        }
                        profiled.push((*kernel, *read_bytes));
                    }
                    let p = pass.get_or_insert_with(|| {
                        encoder
                            .begin_compute_pass(&wgpu::ComputePassDescriptor { label: None, timestamp_writes: None })
                            .forget_lifetime()
                    });
                    p.set_pipeline(pipeline);
                    p.set_bind_group(0, bind_group, &[]);
                    p.dispatch_workgroups(workgroups[0], workgroups[1], workgroups[2]);
                    self.counters.dispatches += 1;
                }
                Step::Clear(id) => {
                    pass = None;
                    if let Some(t) = self.store.get(*id) {
                        for b in t.parts.iter().flat_map(|p| &p.shards) {
                            encoder.clear_buffer(b, 0, None);
                        }
                    }
                }
                Step::Copy { srcs, dst } => {
                    pass = None;
                    if let Some(t) = self.store.get(*dst) {
                        for (src, part, shard) in srcs {
                            if let Some(b) = t.parts.get(*part).and_then(|p| p.shards.get(*shard)) {
                                encoder.copy_buffer_to_buffer(src, 0, b, 0, src.size());
                            }
                        }
                    }
                }
            }
        }
        drop(pass);
        if timed {
            self.profiler.resolve(&mut encoder, profiled.len());
        }
        if !c.steps.is_empty() {
            // A program of FREEs only records nothing: no submit for it.
            self.unsubmitted.push(encoder.finish());
        }
        if timed {
            // The profile waits for this run's timestamps.
            self.flush();
        }
        if let Some(plan) = self.plans.peek(&program.id()) {
            plan.apply_contents(program, &mut self.host);
        }
        let mut freed = HashSet::new();
        for &(id, state) in self.plans.peek(&program.id()).map_or(&[][..], |p| &p.effects) {
            self.store.set_state(id, state);
            if state == Liveness::Freed {
                self.store.release(id);
                freed.insert(id);
            }
        }
        if !freed.is_empty() {
            // Their bind groups would keep the freed buffers alive until recompiled.
            self.compiled.retain(|c| !c.bound.iter().any(|(id, _)| freed.contains(id)));
        }
        if self.profiler.on() {
            self.profiler.add_run(&self.ctx, &profiled, timed)?;
        }
        self.ctx.check().map_err(ExecError::from)
    }

    fn write(&mut self, tensor: TensorId, bytes: &[u8]) -> Result<(), ExecError> {
        const OP: &str = "GRID_WRITE";
        self.flush();
        self.live(OP, tensor)?;
        let expected = self.byte_len(OP, tensor)?;
        if bytes.len() != expected {
            let name = self.memory.name(tensor).to_string();
            return Err(ExecError::Memory {
                op: OP,
                source: MemoryError::SizeMismatch { name, expected, got: bytes.len() },
            });
        }
        let t = self.store.ensure(&self.ctx, &self.memory, tensor)?;
        self.host.written(&self.memory, tensor, bytes);
        let desc = self.memory.desc(tensor).map_err(|source| ExecError::Memory { op: OP, source })?;
        // Ternary tensors live repacked on the GPU (see `kernels::layout`); the others as
        // the bytes are. Through the queue, shard by shard: nothing waits.
        for (buffers, part) in t.parts.iter().zip(layout::parts_from_bytes(desc, bytes)?) {
            if let layout::Part::Data(data) = part {
                buffers.write(&self.ctx.queue, &data);
            }
        }
        Ok(())
    }

    /// Waits for the bytes: natively only (in a browser, `GpuError::WouldBlock`: use
    /// `read_later`, `read_ready`, `finish_read`).
    fn read(&mut self, tensor: TensorId) -> Result<Vec<u8>, ExecError> {
        const OP: &str = "GRID_READ";
        if !CAN_WAIT {
            return Err(GpuError::WouldBlock { op: "GRID_READ (Engine::read)" }.into());
        }
        let (buffers, assembly) = self.read_plan(OP, tensor)?;
        let name = self.memory.name(tensor).to_string();
        let mut chunks = Vec::with_capacity(buffers.len());
        for buffer in &buffers {
            chunks.push(self.read_buffer(buffer, &name, OP)?);
        }
        Ok(assembly.file_bytes(chunks)?)
    }

    /// Natively waits for everything submitted; in a browser submits it and fails with
    /// `GpuError::WouldBlock` (nothing may wait there).
    fn sync(&mut self) -> Result<(), ExecError> {
        self.flush();
        self.ctx.wait("SYNC").map_err(ExecError::from)
    }

    fn read_later(&mut self, tensor: TensorId) -> Result<PendingRead, ExecError> {
        let mut pending = self.read_later_all(&[tensor])?;
        pending.pop().ok_or_else(|| ExecError::Device { engine: "gpu", reason: "a read returned nothing".to_string() })
    }

    /// Every copy in one command buffer and one submission (with the programs not yet
    /// submitted), each buffer of a tensor (several when it is ternary or sharded) into a
    /// staging buffer of its own; nothing waits.
    fn read_later_all(&mut self, tensors: &[TensorId]) -> Result<Vec<PendingRead>, ExecError> {
        const OP: &str = "GRID_READ";
        let mut encoder =
            self.ctx.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("GRID_READ later") });
        // Per tensor: its staging buffers with the bytes copied to each, and its assembly.
        let mut reads: Vec<(Vec<(wgpu::Buffer, u64)>, Assembly)> = Vec::with_capacity(tensors.len());
        for &tensor in tensors {
            let (buffers, assembly) = self.read_plan(OP, tensor)?;
            let mut copies = Vec::with_capacity(buffers.len());
            for src in buffers {
                let staging = self.staging_buffer(src.size());
                encoder.copy_buffer_to_buffer(&src, 0, &staging, 0, src.size());
                copies.push((staging, src.size()));
            }
            reads.push((copies, assembly));
        }
        let submission = self.submit(Some(encoder.finish()));
        let mut pending = Vec::with_capacity(reads.len());
        for (copies, assembly) in reads {
            let staged = copies
                .into_iter()
                .map(|(staging, copied)| {
                    let (tx, mapped) = mpsc::channel();
                    staging.map_async(wgpu::MapMode::Read, 0..copied, move |r| {
                        let _ = tx.send(r);
                    });
                    Staged { staging, copied, mapped, outcome: None }
                })
                .collect();
            let ticket = self.next_ticket;
            self.next_ticket += 1;
            let submission = submission.clone();
            self.reads_in_flight.push_back(InFlightRead { ticket, staged, assembly, submission });
            while self.reads_in_flight.len() > MAX_READS_IN_FLIGHT {
                self.reads_in_flight.pop_front();
            }
            pending.push(PendingRead::ticket(ticket));
        }
        self.ctx.check()?;
        Ok(pending)
    }

    /// Never waits when [`Engine::read_ready`] said the read is ready. Otherwise natively
    /// waits for the read's submission; in a browser fails with `GpuError::WouldBlock` and
    /// keeps the read in flight (`PendingRead::ticket` of the same ticket finishes it later).
    fn finish_read(&mut self, pending: PendingRead) -> Result<Vec<u8>, ExecError> {
        let ticket = match pending.into_parts() {
            Ok(bytes) => return Ok(bytes),
            Err(ticket) => ticket,
        };
        let i = self.reads_in_flight.iter().position(|r| r.ticket == ticket);
        let Some(mut read) = i.and_then(|i| self.reads_in_flight.remove(i)) else {
            return Err(ExecError::UnknownRead { ticket });
        };
        if !read.staged.iter_mut().all(|s| s.poll()) {
            if !CAN_WAIT {
                self.reads_in_flight.push_back(read);
                return Err(GpuError::WouldBlock { op: "finish_read of a read that is not ready" }.into());
            }
            let wait = wgpu::PollType::Wait { submission_index: Some(read.submission.clone()), timeout: None };
            self.ctx.device.poll(wait).map_err(|e| GpuError::Wgpu(e.to_string()))?;
            for s in read.staged.iter_mut().filter(|s| s.outcome.is_none()) {
                s.outcome = Some(self.ctx.wait_mapped(&s.mapped, "a read for the host").map_err(|e| e.to_string()));
            }
        }
        self.ctx.check()?;
        let mut chunks = Vec::with_capacity(read.staged.len());
        for s in &read.staged {
            if let Some(Err(e)) = &s.outcome {
                return Err(GpuError::Wgpu(format!("mapping a read for the host: {e}")).into());
            }
            let view = s.staging.get_mapped_range(..s.copied).map_err(|e| GpuError::Wgpu(e.to_string()))?;
            chunks.push(view.to_vec());
        }
        for s in read.staged {
            s.staging.unmap();
            if self.spare_staging.len() < MAX_READS_IN_FLIGHT {
                self.spare_staging.push(s.staging);
            }
        }
        Ok(read.assembly.file_bytes(chunks)?)
    }

    /// Natively polls the device once (without waiting) so that finished copies' mappings
    /// resolve; in a browser they resolve when its event loop runs. Then takes each mapping
    /// callback's result, if it has run, without blocking. An unknown ticket is ready (its
    /// `finish_read` fails at once).
    fn read_ready(&mut self, pending: &PendingRead) -> bool {
        let Some(ticket) = pending.ticket_number() else { return true };
        if !self.reads_in_flight.iter().any(|r| r.ticket == ticket) {
            return true;
        }
        if self.ctx.poll().is_err() {
            // A lost device: finish_read reports it.
            return true;
        }
        let read = self.reads_in_flight.iter_mut().find(|r| r.ticket == ticket);
        read.is_none_or(|r| r.staged.iter_mut().all(Staged::poll))
    }

    fn reads_overlap(&self) -> bool {
        true
    }

    fn top_k_limit(&self) -> Option<u32> {
        Some(crate::kernels::top_k::MAX_K)
    }

    fn counters(&self) -> Option<DispatchCounters> {
        Some(self.counters)
    }

    fn set_profiling(&mut self, on: bool) -> ProfileSupport {
        self.profiler.set(&self.ctx, on)
    }

    fn take_profile(&mut self) -> Vec<KernelProfile> {
        self.profiler.take(&self.ctx)
    }
}
