//! Per-kernel profiling (`Engine::set_profiling`, `bench --profile`).
//!
//! Off (the default), it costs nothing: runs record every dispatch into one compute pass and
//! no query exists. On, each run adds its dispatches to per-family totals (dispatches, bytes
//! read); where the device has timestamp queries (`wgpu::Features::TIMESTAMP_QUERY`, see
//! [`crate::context::Capabilities::timestamps`]), each dispatch gets its own compute pass
//! whose `timestamp_writes` mark its start and end, the timestamps are resolved into a buffer
//! by the same command encoder (still one submit per run), and the run waits for them. So a
//! profiled run is slower than an unprofiled one (one pass per dispatch, a wait); the
//! per-family times are the device's own, from pass start to pass end.
//!
//! The bytes of a dispatch are the sizes of the storage bindings its entry point loads from,
//! as naga's analysis of the shader says (declared `read`, or `read_write` and read, as an
//! in-place kernel's; a binding bound twice counts once; see
//! `compile::Step::Dispatch::read_bytes`). That estimate is exact for kernels that read
//! each input once, an upper bound for those that read part of a binding (ATTENTION and
//! KV_WRITE's caches are bound whole; EMBED binds its whole table to read a few rows, so its
//! GB/s means nothing), a lower bound for those that read an input more than once (the
//! prefill `tiled` BITLINEAR reads its codes once per 32 tokens). Writes are not counted.

use std::collections::HashMap;

use purebee_isa::{KernelProfile, ProfileSupport};

use crate::kernels::Shader;
use crate::{GpuContext, GpuError};

/// Queries per query set (wgpu's `QUERY_SET_MAX_QUERIES`); two per timed dispatch.
const QUERIES_PER_SET: u32 = 4096;

/// A kernel family: the shader file and entry point.
pub(crate) type Family = (Shader, &'static str);

#[derive(Default)]
struct Totals {
    dispatches: u64,
    bytes: u64,
    ticks: u64,
}

/// The profiler's state: off, or totals per family and the query sets of timed runs.
#[derive(Default)]
pub(crate) struct Profiler {
    on: bool,
    /// Totals per family, in the order each family was first dispatched.
    families: Vec<(Family, Totals)>,
    index: HashMap<Family, usize>,
    sets: Vec<wgpu::QuerySet>,
    /// Where the query sets are resolved (`QUERY_RESOLVE`), one slice of
    /// `QUERIES_PER_SET` timestamps per set.
    resolve: Option<wgpu::Buffer>,
    /// A `MAP_READ` copy of `resolve`.
    readback: Option<wgpu::Buffer>,
}

impl Profiler {
    /// Turns profiling on or off (dropping the query sets when off).
    pub fn set(&mut self, ctx: &GpuContext, on: bool) -> ProfileSupport {
        self.on = on;
        if !on {
            self.families.clear();
            self.index.clear();
            self.sets.clear();
            self.resolve = None;
            self.readback = None;
        }
        if ctx.caps.timestamps {
            ProfileSupport::Timed
        } else {
            ProfileSupport::Untimed(format!("the adapter {} has no timestamp queries", ctx.describe()))
        }
    }

    /// True while profiling.
    pub fn on(&self) -> bool {
        self.on
    }

    /// True when runs are to time each dispatch.
    pub fn timing(&self, ctx: &GpuContext) -> bool {
        self.on && ctx.caps.timestamps
    }

    /// Makes room for the timestamps of `dispatches` dispatches.
    pub fn prepare(&mut self, ctx: &GpuContext, dispatches: usize) {
        let queries = dispatches as u64 * 2;
        let sets = queries.div_ceil(QUERIES_PER_SET as u64) as usize;
        while self.sets.len() < sets {
            self.sets.push(ctx.device.create_query_set(&wgpu::QuerySetDescriptor {
                label: Some("profile timestamps"),
                ty: wgpu::QueryType::Timestamp,
                count: QUERIES_PER_SET,
            }));
        }
        let bytes = self.sets.len() as u64 * QUERIES_PER_SET as u64 * 8;
        if self.resolve.as_ref().is_none_or(|b| b.size() < bytes) {
            self.resolve = Some(ctx.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("profile resolve"),
                size: bytes,
                usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
                mapped_at_creation: false,
            }));
            self.readback = Some(ctx.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("profile readback"),
                size: bytes,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            }));
        }
    }

    /// The timestamp writes of the `i`-th timed dispatch of a run (after [`Profiler::prepare`]).
    pub fn writes(&self, i: usize) -> Option<wgpu::ComputePassTimestampWrites<'_>> {
        let first = i as u64 * 2;
        let set = self.sets.get((first / QUERIES_PER_SET as u64) as usize)?;
        let index = (first % QUERIES_PER_SET as u64) as u32;
        Some(wgpu::ComputePassTimestampWrites {
            query_set: set,
            beginning_of_pass_write_index: Some(index),
            end_of_pass_write_index: Some(index + 1),
        })
    }

    /// Records the resolution of `dispatches` timed dispatches' timestamps into `encoder`.
    pub fn resolve(&self, encoder: &mut wgpu::CommandEncoder, dispatches: usize) {
        let (Some(resolve), Some(readback)) = (&self.resolve, &self.readback) else { return };
        let mut queries = dispatches as u64 * 2;
        for (s, set) in self.sets.iter().enumerate() {
            if queries == 0 {
                break;
            }
            let n = queries.min(QUERIES_PER_SET as u64);
            let offset = s as u64 * QUERIES_PER_SET as u64 * 8;
            encoder.resolve_query_set(set, 0..n as u32, resolve, offset);
            encoder.copy_buffer_to_buffer(resolve, offset, readback, offset, n * 8);
            queries -= n;
        }
    }

    /// Adds a run's dispatches (`families[i]`: the family and read bytes of dispatch `i`) to
    /// the totals; for a timed run, waits for its timestamps and adds their durations.
    pub fn add_run(&mut self, ctx: &GpuContext, families: &[(Family, u64)], timed: bool) -> Result<(), GpuError> {
        let ticks = if timed && !families.is_empty() { self.read_ticks(ctx, families.len())? } else { Vec::new() };
        for (i, &(family, bytes)) in families.iter().enumerate() {
            let slot = *self.index.entry(family).or_insert_with(|| {
                self.families.push((family, Totals::default()));
                self.families.len() - 1
            });
            let t = &mut self.families[slot].1;
            t.dispatches += 1;
            t.bytes += bytes;
            if let (Some(&start), Some(&end)) = (ticks.get(2 * i), ticks.get(2 * i + 1)) {
                t.ticks += end.saturating_sub(start);
            }
        }
        Ok(())
    }

    /// The resolved timestamps of `dispatches` dispatches, after the run that wrote them.
    fn read_ticks(&self, ctx: &GpuContext, dispatches: usize) -> Result<Vec<u64>, GpuError> {
        let Some(readback) = &self.readback else { return Ok(Vec::new()) };
        let size = (dispatches as u64 * 2 * 8).min(readback.size());
        let (tx, rx) = std::sync::mpsc::channel();
        readback.map_async(wgpu::MapMode::Read, 0..size, move |r| {
            let _ = tx.send(r);
        });
        // Never in a browser, where no timestamps are requested (it would be WouldBlock).
        ctx.wait("reading a timed profile's timestamps")?;
        ctx.wait_mapped(&rx, "the profile's timestamps")?;
        let ticks = {
            let view = readback.get_mapped_range(0..size).map_err(|e| GpuError::Wgpu(e.to_string()))?;
            view.chunks_exact(8).map(|c| u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]])).collect()
        };
        readback.unmap();
        Ok(ticks)
    }

    /// The totals since profiling started or since the last call, which they are cleared by.
    pub fn take(&mut self, ctx: &GpuContext) -> Vec<KernelProfile> {
        let timed = ctx.caps.timestamps;
        let ns_per_tick = ctx.queue.get_timestamp_period() as f64;
        self.index.clear();
        std::mem::take(&mut self.families)
            .into_iter()
            .map(|((shader, entry), t)| KernelProfile {
                family: format!("{}:{entry}", shader.name()),
                dispatches: t.dispatches,
                seconds: timed.then(|| t.ticks as f64 * ns_per_tick / 1e9),
                bytes_read: t.bytes,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use crate::kernels::{bindings_read, read_only_bindings, Shader};

    #[test]
    fn read_only_bindings_are_the_storage_declarations_without_write_access() {
        let src = "@group(0) @binding(0) var<uniform> p: Params;\n\
                   @group(0) @binding(1) var<storage, read> x: array<f32>;\n\
                   @group(0) @binding(2) var<storage,read_write> out: array<f32>;\n\
                   @group(0)\n@binding(3)\nvar<storage> y: array<u32>;\n\
                   @group(0) @binding(5) var < storage , read > z: array<u32>;";
        assert_eq!(read_only_bindings(src), (1 << 1) | (1 << 3) | (1 << 5));
    }

    #[test]
    fn the_bindings_an_entry_point_reads_come_from_naga() {
        // BITLINEAR's quantize reads x (1) and writes the int8 activations (5) and their
        // scales (6); gemv reads the codes (2), weight scales (3), the output scale (4), the
        // activations and their scales, and writes out (7).
        assert_eq!(bindings_read(Shader::Bitlinear.source(), "quantize"), 1 << 1);
        assert_eq!(bindings_read(Shader::BitlinearSubgroup.source(), "gemv") & 0b1000_0000, 0);
        assert_ne!(bindings_read(Shader::BitlinearSubgroup.source(), "gemv") & (1 << 2), 0);
        // An in-place kernel reads the buffer it writes.
        let unary = bindings_read(Shader::Elementwise.source(), "unary_inplace");
        assert_ne!(unary, 0);
        assert_eq!(bindings_read(Shader::Elementwise.source(), "binary") & (1 << 3), 0);
        // An entry point that does not exist: the declared read-only bindings.
        assert_eq!(
            bindings_read(Shader::Elementwise.source(), "nope"),
            read_only_bindings(Shader::Elementwise.source())
        );
    }
}
