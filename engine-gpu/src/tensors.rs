//! One GPU buffer set per tensor, its lifetime state, and a generation counter that tells
//! compiled programs when a buffer they bound was replaced.

use purebee_memory::{HostTensor, Registry, TensorId};

use crate::kernels::layout;
use crate::GpuError;

/// The lifetime of a tensor on the GPU (mirrors the ISA's GRID_ALLOC / FREE).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Liveness {
    /// Declared; no data yet (a buffer may exist, created for a compiled program).
    Declared,
    /// Holding data.
    Live,
    /// Freed by FREE; using it is an error until GRID_ALLOC.
    Freed,
}

/// A tensor's buffers in its GPU layout (see `kernels::layout`): one part for most dtypes,
/// several where a layout splits a tensor (codes and scales).
pub(crate) struct GpuTensor {
    pub parts: Vec<wgpu::Buffer>,
    /// Bumped whenever the buffers are replaced, so bind groups that hold the old ones are
    /// rebuilt.
    pub generation: u64,
}

#[derive(Default)]
struct Slot {
    gpu: Option<GpuTensor>,
    state: Option<Liveness>,
}

/// The engine's GPU side of the registry, indexed like it by [`TensorId`].
#[derive(Default)]
pub(crate) struct TensorStore {
    slots: Vec<Slot>,
    next_generation: u64,
}

impl TensorStore {
    fn slot(&mut self, id: TensorId) -> &mut Slot {
        if self.slots.len() <= id.index() {
            self.slots.resize_with(id.index() + 1, Slot::default);
        }
        &mut self.slots[id.index()]
    }

    /// The tensor's state. A tensor the program never touched is live exactly when the
    /// registry holds host data for it (a weight), which is then uploaded on first use.
    pub fn state(&self, reg: &Registry, id: TensorId) -> Liveness {
        match self.slots.get(id.index()).and_then(|s| s.state) {
            Some(s) => s,
            None if reg.is_live(id) => Liveness::Live,
            None => Liveness::Declared,
        }
    }

    pub fn set_state(&mut self, id: TensorId, state: Liveness) {
        self.slot(id).state = Some(state);
    }

    /// The buffers of a tensor, if it has them.
    pub fn get(&self, id: TensorId) -> Option<&GpuTensor> {
        self.slots.get(id.index()).and_then(|s| s.gpu.as_ref())
    }

    /// The tensor's buffers, created now if missing: uploaded from the registry's host data
    /// for a weight, zero-filled otherwise.
    pub fn ensure(&mut self, ctx: &crate::GpuContext, reg: &Registry, id: TensorId) -> Result<&GpuTensor, GpuError> {
        if self.get(id).is_none() {
            let desc = reg.desc(id).map_err(|e| GpuError::Wgpu(e.to_string()))?;
            let host: Option<&HostTensor> = if reg.is_live(id) { reg.get(id).ok() } else { None };
            let parts = layout::gpu_parts(desc, host)?;
            let mut buffers = Vec::with_capacity(parts.len());
            for (i, part) in parts.iter().enumerate() {
                let size = part.size();
                // Larger than one binding is fine (kernels that take big weights bind row
                // windows); larger than the device's largest buffer is not.
                if size > ctx.max_buffer() {
                    return Err(GpuError::TooLarge { tensor: desc.name.clone(), bytes: size, limit: ctx.max_buffer() });
                }
                let buffer = ctx.device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some(&format!("{}#{i}", desc.name)),
                    size,
                    usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC,
                    mapped_at_creation: false,
                });
                if let layout::Part::Data(bytes) = part {
                    ctx.queue.write_buffer(&buffer, 0, bytes);
                }
                buffers.push(buffer);
            }
            let generation = self.next_generation;
            self.next_generation += 1;
            self.slot(id).gpu = Some(GpuTensor { parts: buffers, generation });
        }
        self.get(id).ok_or_else(|| GpuError::Wgpu("buffer vanished".to_string()))
    }

    /// Drops a tensor's buffers (after FREE); compiled programs that bound them rebuild.
    pub fn release(&mut self, id: TensorId) {
        self.slot(id).gpu = None;
    }
}
