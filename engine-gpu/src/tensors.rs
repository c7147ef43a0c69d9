//! One GPU buffer set per tensor, its lifetime state, and a generation counter that tells
//! compiled programs when a buffer they bound was replaced.
//!
//! **Shards.** A tensor has one or more parts (`kernels::layout`), each normally one buffer.
//! A part larger than the largest buffer (`GpuContext::max_buffer`: 256 MiB under WebGPU's
//! default limits, where a 656 MB F16 table of 128256 rows would not fit) is stored as
//! several buffers, its *shards*: consecutive runs of whole rows, each but the last holding
//! exactly `shard_bytes` bytes. A shard is a whole number of row windows
//! (`kernels::window_rows`: what one binding holds, cut at the same rows in every part), so
//! each window a kernel binds (`Storage::TensorRange`, `RecordCtx::row_windows`) lies inside
//! one shard, at its offset in the part less the shard's start ([`PartBuffers::window`]).
//! Only kernels that bind row windows (EMBED's table, LINEAR's weight, TOP_K's input) can
//! read a sharded tensor; binding one whole is `GpuError::TooLarge`, as it was before shards.
//! Writes split the bytes at the same offsets; reads concatenate the shards, so GRID_READ
//! returns the file layout's bytes exactly.

use purebee_memory::{HostTensor, Registry, TensorDesc, TensorId};

use crate::kernels::{layout, window_rows};
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

/// One part of a tensor on the GPU: one buffer, or the shards of a part larger than the
/// largest buffer (see the module documentation).
pub(crate) struct PartBuffers {
    /// The buffers in order; each but the last holds exactly `shard_bytes` bytes.
    pub shards: Vec<wgpu::Buffer>,
    /// Bytes per shard (the part's size when it has one buffer): whole row windows, so a
    /// multiple of 256 bytes when there are several.
    pub shard_bytes: u64,
}

impl PartBuffers {
    /// The part's one buffer; `None` when it is sharded.
    pub fn whole(&self) -> Option<&wgpu::Buffer> {
        match self.shards.as_slice() {
            [only] => Some(only),
            _ => None,
        }
    }

    /// The shard holding bytes `offset .. offset + size` of the part, with the offset of
    /// those bytes inside it; `None` when they are not inside one shard.
    pub fn window(&self, offset: u64, size: u64) -> Option<(&wgpu::Buffer, u64)> {
        let i = offset.checked_div(self.shard_bytes)?;
        let shard = self.shards.get(usize::try_from(i).ok()?)?;
        let inside = offset - i * self.shard_bytes;
        (inside + size <= shard.size()).then_some((shard, inside))
    }

    /// Every shard with its byte offset in the part.
    pub fn shards_at(&self) -> impl Iterator<Item = (u64, &wgpu::Buffer)> {
        self.shards.iter().enumerate().map(|(i, b)| (i as u64 * self.shard_bytes, b))
    }

    /// Writes `data` (at most the part's size; the rest of it is left as it is, but the bytes
    /// up to the next whole word are zeroed) from the start of the part, each shard its own
    /// slice, through the queue: nothing waits.
    pub fn write(&self, queue: &wgpu::Queue, data: &[u8]) {
        for (offset, shard) in self.shards_at() {
            let start = usize::try_from(offset).map_or(data.len(), |o| o.min(data.len()));
            let end = usize::try_from(offset + shard.size()).map_or(data.len(), |e| e.min(data.len()));
            let chunk = &data[start..end];
            let words = chunk.len() / 4 * 4;
            if words > 0 {
                queue.write_buffer(shard, 0, &chunk[..words]);
            }
            if words < chunk.len() {
                // A write's size must be a multiple of 4: the last bytes with zeros after them.
                let mut tail = chunk[words..].to_vec();
                tail.resize(4, 0);
                queue.write_buffer(shard, words as u64, &tail);
            }
        }
    }
}

/// A tensor's buffers in its GPU layout (see `kernels::layout`): one part for most dtypes,
/// several where a layout splits a tensor (codes and scales), each part in one buffer or in
/// shards.
pub(crate) struct GpuTensor {
    pub parts: Vec<PartBuffers>,
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
    /// for a weight (through the queue, without waiting), zero-filled otherwise.
    pub fn ensure(&mut self, ctx: &crate::GpuContext, reg: &Registry, id: TensorId) -> Result<&GpuTensor, GpuError> {
        if self.get(id).is_none() {
            let desc = reg.desc(id).map_err(|e| GpuError::Wgpu(e.to_string()))?;
            let host: Option<&HostTensor> = if reg.is_live(id) { reg.get(id).ok() } else { None };
            let parts = layout::gpu_parts(desc, host)?;
            let mut buffers = Vec::with_capacity(parts.len());
            for (i, part) in parts.iter().enumerate() {
                let size = part.size();
                let shard_bytes = shard_bytes(ctx, desc, i, size)?;
                let shards = (0..size.div_ceil(shard_bytes))
                    .map(|s| {
                        let label = match size > shard_bytes {
                            true => format!("{}#{i}.{s}", desc.name),
                            false => format!("{}#{i}", desc.name),
                        };
                        ctx.device.create_buffer(&wgpu::BufferDescriptor {
                            label: Some(&label),
                            size: shard_bytes.min(size - s * shard_bytes),
                            usage: wgpu::BufferUsages::STORAGE
                                | wgpu::BufferUsages::COPY_DST
                                | wgpu::BufferUsages::COPY_SRC,
                            mapped_at_creation: false,
                        })
                    })
                    .collect();
                let part_buffers = PartBuffers { shards, shard_bytes };
                if let layout::Part::Data(bytes) = part {
                    part_buffers.write(&ctx.queue, bytes);
                }
                buffers.push(part_buffers);
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

/// Bytes per shard of part `part` (`size` bytes) of a tensor, on `ctx`'s buffers and
/// bindings (see [`shard_bytes_for`]); [`GpuError::TooLarge`] when it cannot be cut.
fn shard_bytes(ctx: &crate::GpuContext, desc: &TensorDesc, part: usize, size: u64) -> Result<u64, GpuError> {
    let row_bytes = layout::part_row_bytes(desc);
    shard_bytes_for(&row_bytes, part, size, ctx.max_binding(), ctx.max_buffer()).ok_or_else(|| GpuError::TooLarge {
        tensor: desc.name.clone(),
        bytes: size,
        limit: ctx.max_buffer(),
    })
}

/// Bytes per shard of part `part` (`size` bytes) of a tensor whose parts have `row_bytes`
/// bytes a row (`layout::part_row_bytes`): the whole part when it fits one buffer of
/// `max_buffer` bytes; else as many whole row windows of `max_binding` bytes as fit in one.
/// Larger than one binding is fine (kernels that take big weights bind row windows); `None`
/// for a part that cannot be cut so (not laid out in rows, or not even one window of rows
/// fits).
fn shard_bytes_for(row_bytes: &[u64], part: usize, size: u64, max_binding: u64, max_buffer: u64) -> Option<u64> {
    if size <= max_buffer {
        return Some(size.max(4));
    }
    let widest = row_bytes.iter().copied().max().unwrap_or(0).max(1);
    let window = window_rows(widest, max_binding) as u64;
    let windows_per_shard = max_buffer / (window * widest).max(1);
    let shard = window * windows_per_shard * row_bytes.get(part).copied().unwrap_or(0);
    (shard > 0).then_some(shard)
}

#[cfg(test)]
mod tests {
    use purebee_memory::{DType, Registry, Shape};

    use super::*;
    use crate::context::Capabilities;
    use crate::kernels::RecordCtx;

    #[test]
    fn every_row_window_of_every_part_lies_inside_one_shard() {
        let shapes = [
            (DType::F16, 5000, 80),
            (DType::F32, 12345, 10),
            (DType::Q8_0, 9001, 32),
            (DType::Q4_1, 4099, 96),
            (DType::TQ2_0, 3001, 512),
            (DType::TQ1_0, 2222, 768),
            (DType::I2_S, 7777, 384),
        ];
        for (dtype, rows, cols) in shapes {
            let mut reg = Registry::new();
            let id = reg.declare("t", dtype, Shape::matrix(rows, cols).expect("shape")).expect("declared");
            let desc = reg.desc(id).expect("declared").clone();
            let parts = layout::gpu_parts(&desc, None).expect("sizes");
            let row_bytes = layout::part_row_bytes(&desc);
            for (max_binding, max_buffer) in [(64 << 10, 160 << 10), (64 << 10, 64 << 10), (100_000, 350_000)] {
                let ctx = RecordCtx { reg: &reg, caps: Capabilities::default(), max_workgroups: 65535, max_binding };
                let windows = ctx.row_windows(&desc).expect("windows of whole rows fit");
                for (p, part) in parts.iter().enumerate() {
                    let what = format!("{dtype} [{rows}, {cols}] part {p}, caps {max_binding} / {max_buffer}");
                    let size = part.size();
                    let shard = shard_bytes_for(&row_bytes, p, size, max_binding, max_buffer).expect("cut");
                    assert!(shard <= max_buffer || size <= max_buffer, "{what}: shard of {shard} bytes");
                    let shards = size.div_ceil(shard);
                    if row_bytes[p] == 0 {
                        assert_eq!(shards, 1, "{what}: a part not in rows is never cut");
                        continue;
                    }
                    assert!(shards == 1 || shard.is_multiple_of(256), "{what}: shards of {shard} bytes");
                    for w in &windows {
                        // As the kernels bind a window (`linear.rs`, `embed.rs`).
                        let offset = w.start as u64 * row_bytes[p];
                        let len = (w.len() as u64 * row_bytes[p]).next_multiple_of(4);
                        let i = offset / shard;
                        let shard_size = shard.min(size - i * shard);
                        assert!(offset - i * shard + len <= shard_size, "{what}: window {w:?} crosses a shard");
                    }
                }
                assert!(windows.len() > 1, "{dtype} [{rows}, {cols}]: several windows");
            }
        }
    }
}
