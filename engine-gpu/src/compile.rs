//! Compiling a program once: buffers, uniform parameters, pipelines and bind groups for
//! every dispatch, so that running it only records and submits.
//!
//! Scratch buffers (GPU-only working memory that is no ISA tensor, see [`ScratchKey`]) are
//! created here too, one per key per program, sized to the largest request of the key.

use std::collections::HashMap;

use purebee_isa::{Instruction, Program};
use purebee_memory::{Registry, TensorId};
use wgpu::util::DeviceExt;

use crate::fuse;
use crate::kernels::{self, layout, KernelCall, RecordCtx, ScratchKey, Shader, Storage};
use crate::pipelines::PipelineCache;
use crate::tensors::TensorStore;
use crate::{GpuContext, GpuError};

/// One recorded step of a compiled program.
pub(crate) enum Step {
    /// GRID_ALLOC: zero the tensor's buffers.
    Clear(TensorId),
    /// GRID_WRITE of constant data: copy each buffer (made at compile time, in the tensor's
    /// GPU layout) into shard `.2` of part `.1` of the tensor.
    Copy { srcs: Vec<(wgpu::Buffer, usize, usize)>, dst: TensorId },
    /// A kernel dispatch; `kernel` (shader file and entry point) names its family for
    /// profiles, and `read_bytes` is what profiles count as the bytes it reads: the size of
    /// every storage binding its entry point loads from (the bound window of a tensor,
    /// scratch buffer or run-time parameters; see `kernels::bindings_read`; a binding bound
    /// twice counted once), whether or not the kernel reads all of it.
    Dispatch {
        pipeline: wgpu::ComputePipeline,
        bind_group: wgpu::BindGroup,
        workgroups: [u32; 3],
        kernel: (Shader, &'static str),
        read_bytes: u64,
    },
}

/// A program ready to run.
pub(crate) struct Compiled {
    pub steps: Vec<Step>,
    /// The tensors whose buffers the steps hold, with the buffers' generations: when one
    /// changes (FREE then GRID_ALLOC), the program is compiled again.
    pub bound: Vec<(TensorId, u64)>,
    /// The run-time parameter values, one u32 word each (at least one word).
    pub run_params: wgpu::Buffer,
    /// The program's scratch buffers.
    pub scratch: HashMap<ScratchKey, wgpu::Buffer>,
}

impl Compiled {
    /// True while every buffer the program bound is still the tensor's current one.
    pub fn is_current(&self, store: &TensorStore) -> bool {
        self.bound.iter().all(|&(id, g)| store.get(id).is_some_and(|t| t.generation == g))
    }
}

pub(crate) fn compile(
    ctx: &GpuContext,
    reg: &Registry,
    store: &mut TensorStore,
    pipelines: &mut PipelineCache,
    program: &Program,
) -> Result<Compiled, GpuError> {
    let run_params = ctx.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("run params"),
        size: (program.params().len().max(1) * 4) as u64,
        usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let rctx = RecordCtx {
        reg,
        caps: ctx.caps,
        max_workgroups: ctx.limits.max_compute_workgroups_per_dimension,
        max_binding: ctx.max_binding(),
    };
    let mut steps = Vec::new();
    let mut bound = Vec::new();
    let mut bind = |store: &mut TensorStore, id: TensorId| -> Result<(), GpuError> {
        let t = store.ensure(ctx, reg, id)?;
        bound.push((id, t.generation));
        Ok(())
    };
    // Record every kernel call first, so that scratch buffers can be sized before binding.
    // The fusion pass groups instructions; a group's calls are listed under its first
    // instruction, and the other instructions of the group get none.
    let instructions = program.instructions();
    let plan = if ctx.fuse {
        let limits = fuse::Limits { max_storage_buffers: ctx.limits.max_storage_buffers_per_shader_stage };
        fuse::plan(&rctx, &limits, instructions)
    } else {
        fuse::Plan::unfused(instructions.len())
    };
    let mut calls: Vec<Vec<KernelCall>> = vec![Vec::new(); instructions.len()];
    for unit in &plan.units {
        match unit {
            fuse::Unit::Single(i) => {
                calls[*i] = match &instructions[*i] {
                    Instruction::GridAlloc(_)
                    | Instruction::GridWrite(_)
                    | Instruction::Free(_)
                    | Instruction::Sync => {
                        vec![]
                    }
                    other => kernels::record(&rctx, other)?,
                };
            }
            fuse::Unit::Group(g) => calls[g.range().start] = fuse::record(&rctx, instructions, g)?,
            fuse::Unit::RopeKv { first, write_k } => {
                calls[*first] = fuse::record_rope_kv(&rctx, instructions, *first, *write_k)?;
            }
            fuse::Unit::HeadArgmax { first, write_out } => {
                calls[*first] = fuse::record_head_argmax(&rctx, instructions, *first, *write_out)?;
            }
        }
    }
    let mut scratch_sizes: HashMap<ScratchKey, u64> = HashMap::new();
    for (_, s) in calls.iter().flatten().flat_map(|c| &c.storage) {
        if let Storage::Scratch(key, bytes) = *s {
            let size = scratch_sizes.entry(key).or_insert(4);
            *size = (*size).max(bytes.div_ceil(4) * 4);
        }
    }
    let mut scratch = HashMap::new();
    for (key, size) in scratch_sizes {
        if size > ctx.max_binding() {
            return Err(GpuError::TooLarge {
                tensor: format!("scratch {key:?}"),
                bytes: size,
                limit: ctx.max_binding(),
            });
        }
        let buffer = ctx.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(&format!("scratch {key:?}")),
            size,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        });
        scratch.insert(key, buffer);
    }
    for (instruction, calls) in program.instructions().iter().zip(calls) {
        match instruction {
            Instruction::GridAlloc(a) => {
                bind(store, a.tensor)?;
                steps.push(Step::Clear(a.tensor));
            }
            Instruction::GridWrite(w) => {
                bind(store, w.tensor)?;
                let desc = reg.desc(w.tensor).map_err(|e| GpuError::Wgpu(e.to_string()))?;
                let mut srcs = Vec::new();
                let t = store.get(w.tensor).ok_or_else(|| GpuError::Wgpu("GRID_WRITE: no buffers".to_string()))?;
                for (p, (part, buffers)) in
                    layout::parts_from_bytes(desc, &w.data)?.into_iter().zip(&t.parts).enumerate()
                {
                    let layout::Part::Data(data) = part else { continue };
                    // Each shard's bytes, padded to its size (whole words).
                    for (s, (offset, shard)) in buffers.shards_at().enumerate() {
                        let start = (offset as usize).min(data.len());
                        let end = ((offset + shard.size()) as usize).min(data.len());
                        let mut contents = data[start..end].to_vec();
                        contents.resize(shard.size() as usize, 0);
                        let src = ctx.device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
                            label: Some("GRID_WRITE data"),
                            contents: &contents,
                            usage: wgpu::BufferUsages::COPY_SRC,
                        });
                        srcs.push((src, p, s));
                    }
                }
                steps.push(Step::Copy { srcs, dst: w.tensor });
            }
            Instruction::Free(_) | Instruction::Sync => {}
            other => {
                for call in calls {
                    let pipeline = pipelines.get(ctx, &call.key)?;
                    let uniform = ctx.device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
                        label: Some(other.name()),
                        contents: &call.params,
                        usage: wgpu::BufferUsages::UNIFORM,
                    });
                    for (_, s) in &call.storage {
                        if let Storage::Tensor(id, _) | Storage::TensorRange(id, ..) = s {
                            bind(store, *id)?;
                        }
                    }
                    let mut entries = vec![wgpu::BindGroupEntry { binding: 0, resource: uniform.as_entire_binding() }];
                    let reads = pipelines.bindings_read(call.key.shader, call.key.entry);
                    let mut read_bytes = 0;
                    // A binding that repeats another (a kernel variant's unused input bound
                    // to the weight again) is read once.
                    let mut counted: Vec<Storage> = Vec::new();
                    for &(binding, s) in &call.storage {
                        let part = |id: TensorId, part: usize| {
                            store
                                .get(id)
                                .and_then(|t| t.parts.get(part))
                                .ok_or_else(|| GpuError::Wgpu(format!("{}: missing buffer part {part}", other.name())))
                        };
                        let (buffer, window) = match s {
                            Storage::RunParams => (&run_params, None),
                            Storage::Tensor(id, p) => {
                                let part = part(id, p)?;
                                // A sharded part is larger than any binding.
                                let whole = part.whole().ok_or_else(|| GpuError::TooLarge {
                                    tensor: reg.name(id).to_string(),
                                    bytes: part.shards.iter().map(wgpu::Buffer::size).sum(),
                                    limit: ctx.max_binding(),
                                })?;
                                (whole, None)
                            }
                            Storage::TensorRange(id, p, offset, size) => {
                                let (shard, inside) = part(id, p)?.window(offset, size).ok_or_else(|| {
                                    GpuError::Wgpu(format!(
                                        "{}: bytes {offset}..{} of '{}' are not inside one buffer",
                                        other.name(),
                                        offset + size,
                                        reg.name(id)
                                    ))
                                })?;
                                (shard, Some((inside, size)))
                            }
                            Storage::Scratch(key, _) => (
                                scratch.get(&key).ok_or_else(|| {
                                    GpuError::Wgpu(format!("{}: missing scratch buffer {key:?}", other.name()))
                                })?,
                                None,
                            ),
                        };
                        let (offset, size) = window.unwrap_or((0, buffer.size()));
                        if size > ctx.max_binding() {
                            let tensor = match s {
                                Storage::Tensor(id, _) | Storage::TensorRange(id, ..) => reg.name(id).to_string(),
                                _ => format!("{} scratch", other.name()),
                            };
                            return Err(GpuError::TooLarge { tensor, bytes: size, limit: ctx.max_binding() });
                        }
                        if binding < 64 && reads & (1 << binding) != 0 && !counted.contains(&s) {
                            counted.push(s);
                            read_bytes += size;
                        }
                        let size = std::num::NonZeroU64::new(size.max(4));
                        let resource = wgpu::BindingResource::Buffer(wgpu::BufferBinding { buffer, offset, size });
                        entries.push(wgpu::BindGroupEntry { binding, resource });
                    }
                    let bind_group = ctx.device.create_bind_group(&wgpu::BindGroupDescriptor {
                        label: Some(other.name()),
                        layout: &pipeline.get_bind_group_layout(0),
                        entries: &entries,
                    });
                    let kernel = (call.key.shader, call.key.entry);
                    steps.push(Step::Dispatch {
                        pipeline,
                        bind_group,
                        workgroups: call.workgroups,
                        kernel,
                        read_bytes,
                    });
                }
            }
        }
    }
    ctx.check()?;
    Ok(Compiled { steps, bound, run_params, scratch })
}
