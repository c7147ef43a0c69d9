//! What a dispatch costs on this adapter apart from what its kernel does, and the two
//! latencies a one-token kernel is made of: a dependent memory load and a workgroup barrier.
//!
//! `cargo run --release -p purebee-engine-gpu --example dispatch_floor [-- --quick]`
//!
//! A decode token is a chain of about 300 dispatches, each reading what the one before
//! wrote. On an H100 the engine's lightest kernels take about 5 µs a call and its norms
//! 11–14 µs (docs/benchmarks.md): this splits such a time into the launch, wgpu's barrier
//! between dependent dispatches, workgroup memory's setup, memory round trips and barriers,
//! with kernels that do nothing else (`dispatch_floor.wgsl`).
//!
//! Each figure is wall time around one submit and the wait for it, taken for a chain of n
//! and of 2n steps, the median of several repetitions: (t(2n) − t(n)) / n, so that the
//! submit and the wait cancel. Every kernel but the empty one leaves a count the host
//! checks; a wrong one fails the run (exit status 1), so a driver that skipped work cannot
//! pass for fast.

use std::sync::mpsc;
use std::time::Instant;

/// Mirrors `Params` in `dispatch_floor.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    steps: u32,
    start: u32,
    _pad: [u32; 2],
}

const SOURCE: &str = include_str!("dispatch_floor.wgsl");

/// Workgroups of `bump_wide`: more than an H100 holds at once (132 SMs).
const WIDE_GRID: u32 = 1024;
/// Buffers the chain over several buffers takes in turn.
const ROTATION: usize = 16;

struct Probe {
    device: wgpu::Device,
    queue: wgpu::Queue,
    module: wgpu::ShaderModule,
    params: wgpu::Buffer,
    /// Repetitions of each timing (the median is kept).
    reps: usize,
}

/// One chain step: the pipeline, its bind group (none for `idle`) and the workgroups.
struct Step<'a> {
    pipeline: &'a wgpu::ComputePipeline,
    bind: Option<&'a wgpu::BindGroup>,
    workgroups: u32,
}

impl Probe {
    fn open(reps: usize) -> Result<Probe, String> {
        // Vulkan, Metal or DX12, as the engine prefers them (GL only where none exists),
        // and the high-performance adapter among them.
        let adapter_of = |backends: wgpu::Backends| {
            let mut desc = wgpu::InstanceDescriptor::new_without_display_handle_from_env();
            desc.backends &= backends;
            pollster::block_on(wgpu::Instance::new(desc).request_adapter(&wgpu::RequestAdapterOptions {
                power_preference: wgpu::PowerPreference::HighPerformance,
                ..Default::default()
            }))
        };
        let adapter = adapter_of(wgpu::Backends::PRIMARY)
            .or_else(|_| adapter_of(wgpu::Backends::GL))
            .map_err(|e| format!("no adapter: {e}"))?;
        let info = adapter.get_info();
        println!(
            "adapter: {} ({:?}, {:?}), driver {} {}",
            info.name, info.backend, info.device_type, info.driver, info.driver_info
        );
        let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("dispatch_floor"),
            required_features: wgpu::Features::empty(),
            required_limits: adapter.limits(),
            experimental_features: wgpu::ExperimentalFeatures::disabled(),
            memory_hints: wgpu::MemoryHints::Performance,
            trace: wgpu::Trace::Off,
        }))
        .map_err(|e| format!("opening {}: {e}", info.name))?;
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some("dispatch_floor.wgsl"),
            source: wgpu::ShaderSource::Wgsl(SOURCE.into()),
        });
        let params = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("params"),
            size: std::mem::size_of::<Params>() as u64,
            usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        Ok(Probe { device, queue, module, params, reps })
    }

    fn pipeline(&self, entry: &str, zero_workgroup_memory: bool) -> wgpu::ComputePipeline {
        self.device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(entry),
            layout: None,
            module: &self.module,
            entry_point: Some(entry),
            compilation_options: wgpu::PipelineCompilationOptions {
                constants: &[],
                zero_initialize_workgroup_memory: zero_workgroup_memory,
            },
            cache: None,
        })
    }

    /// A storage buffer of `words` u32, zeroed, that can be read back.
    fn storage(&self, words: u64) -> wgpu::Buffer {
        self.device.create_buffer(&wgpu::BufferDescriptor {
            label: None,
            size: words * 4,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        })
    }

    /// The bind group of `pipeline` (auto layout: only the bindings its entry point uses).
    fn bind(&self, pipeline: &wgpu::ComputePipeline, entries: &[(u32, &wgpu::Buffer)]) -> wgpu::BindGroup {
        let entries: Vec<wgpu::BindGroupEntry> = entries
            .iter()
            .map(|&(binding, buffer)| wgpu::BindGroupEntry { binding, resource: buffer.as_entire_binding() })
            .collect();
        self.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &pipeline.get_bind_group_layout(0),
            entries: &entries,
        })
    }

    /// Seconds from the submit of `steps`, recorded in one pass (or one pass per step), to
    /// the end of its wait.
    fn run(&self, steps: &[Step], pass_per_step: bool) -> Result<f64, String> {
        let mut encoder = self.device.create_command_encoder(&wgpu::CommandEncoderDescriptor::default());
        let mut pass: Option<wgpu::ComputePass> = None;
        for step in steps {
            if pass_per_step {
                drop(pass.take());
            }
            let p = pass.get_or_insert_with(|| {
                encoder.begin_compute_pass(&wgpu::ComputePassDescriptor::default()).forget_lifetime()
            });
            p.set_pipeline(step.pipeline);
            if let Some(bind) = step.bind {
                p.set_bind_group(0, bind, &[]);
            }
            p.dispatch_workgroups(step.workgroups, 1, 1);
        }
        drop(pass);
        let commands = encoder.finish();
        let start = Instant::now();
        self.queue.submit([commands]);
        self.wait()?;
        Ok(start.elapsed().as_secs_f64())
    }

    fn wait(&self) -> Result<(), String> {
        self.device.poll(wgpu::PollType::wait_indefinitely()).map(|_| ()).map_err(|e| e.to_string())
    }

    /// The median of `reps` timings of `steps`.
    fn median(&self, steps: &[Step], pass_per_step: bool) -> Result<f64, String> {
        let mut times = Vec::with_capacity(self.reps);
        for _ in 0..self.reps {
            times.push(self.run(steps, pass_per_step)?);
        }
        times.sort_by(f64::total_cmp);
        Ok(times[times.len() / 2])
    }

    /// Seconds per step of a chain: (t(2n) − t(n)) / n, each the median of `reps`, after one
    /// untimed run of the longer chain (pipeline creation, first-use costs).
    fn per_step<'a>(&self, step: impl Fn(usize) -> Step<'a>, n: usize, pass_per_step: bool) -> Result<f64, String> {
        let long: Vec<Step> = (0..2 * n).map(&step).collect();
        self.run(&long, pass_per_step)?;
        let short = self.median(&long[..n], pass_per_step)?;
        let long = self.median(&long, pass_per_step)?;
        Ok((long - short) / n as f64)
    }

    /// Seconds per step of one dispatch whose kernel loops `p.steps` times: (t(2s) − t(s)) / s.
    fn per_loop_step(&self, step: &Step, start: u32, steps: u32) -> Result<f64, String> {
        let time = |s: u32| -> Result<f64, String> {
            self.queue.write_buffer(&self.params, 0, bytemuck::bytes_of(&Params { steps: s, start, _pad: [0; 2] }));
            self.median(std::slice::from_ref(step), false)
        };
        time(2 * steps)?;
        let short = time(steps)?;
        let long = time(2 * steps)?;
        Ok((long - short) / steps as f64)
    }

    /// Word 0 of `buffer`.
    fn read_word(&self, buffer: &wgpu::Buffer) -> Result<u32, String> {
        let staging = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: None,
            size: 4,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let mut encoder = self.device.create_command_encoder(&wgpu::CommandEncoderDescriptor::default());
        encoder.copy_buffer_to_buffer(buffer, 0, &staging, 0, 4);
        self.queue.submit([encoder.finish()]);
        let (tx, rx) = mpsc::channel();
        staging.slice(..).map_async(wgpu::MapMode::Read, move |r| tx.send(r).unwrap_or(()));
        self.wait()?;
        rx.recv().map_err(|e| e.to_string())?.map_err(|e| e.to_string())?;
        let view = staging.get_mapped_range(0..4).map_err(|e| e.to_string())?;
        let word = u32::from_le_bytes([view[0], view[1], view[2], view[3]]);
        Ok(word)
    }

    fn clear(&self, buffer: &wgpu::Buffer) -> Result<(), String> {
        let mut encoder = self.device.create_command_encoder(&wgpu::CommandEncoderDescriptor::default());
        encoder.clear_buffer(buffer, 0, None);
        self.queue.submit([encoder.finish()]);
        self.wait()
    }
}

/// Fails unless the kernels left `expected` in `buffer`.
fn check(probe: &Probe, buffer: &wgpu::Buffer, expected: u64, what: &str) -> Result<(), String> {
    let got = probe.read_word(buffer)?;
    if u64::from(got) != expected {
        return Err(format!("{what}: the kernels left {got}, expected {expected}"));
    }
    Ok(())
}

/// A permutation of 0..len forming one cycle (Sattolo's shuffle, xorshift64), so that a
/// chase visits every index before it returns.
fn cycle(len: usize) -> Vec<u32> {
    let mut next: Vec<u32> = (0..len as u32).collect();
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    for i in (1..len).rev() {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let j = (state % i as u64) as usize;
        next.swap(i, j);
    }
    next
}

fn report(what: &str, seconds: f64, unit: &str, scale: f64) {
    println!("{what:<58} {:>9.3} {unit}", seconds * scale);
}

fn main() -> Result<(), String> {
    let quick = std::env::args().any(|a| a == "--quick");
    // Chain length, loop steps of the single-dispatch kernels, and the large ring's bytes.
    let (n, loops, reps, big_ring) = if quick { (64, 256, 3, 4 << 20) } else { (2000, 8192, 5, 256 << 20) };
    let probe = Probe::open(reps)?;
    let limit = probe.device.limits().max_storage_buffer_binding_size;
    let counter = probe.storage(1);

    // Launch and barrier.
    let idle = probe.pipeline("idle", false);
    let t = probe.per_step(|_| Step { pipeline: &idle, bind: None, workgroups: 1 }, n, false)?;
    report("empty kernel, no bindings (nothing orders it)", t, "µs per dispatch", 1e6);

    let bump = probe.pipeline("bump", false);
    let bind = probe.bind(&bump, &[(1, &counter)]);
    let t = probe.per_step(|_| Step { pipeline: &bump, bind: Some(&bind), workgroups: 1 }, n, false)?;
    report("1 workgroup, each dispatch after the last (a barrier)", t, "µs per dispatch", 1e6);
    // What `per_step` runs: 2n untimed, then n and 2n, `reps` times each (a multiple of
    // ROTATION, as n is).
    let chained = (2 + 3 * probe.reps as u64) * n as u64;
    check(&probe, &counter, chained, "bump")?;

    let counters: Vec<wgpu::Buffer> = (0..ROTATION).map(|_| probe.storage(1)).collect();
    let binds: Vec<wgpu::BindGroup> = counters.iter().map(|c| probe.bind(&bump, &[(1, c)])).collect();
    let t = probe.per_step(|i| Step { pipeline: &bump, bind: Some(&binds[i % ROTATION]), workgroups: 1 }, n, false)?;
    report(
        &format!("1 workgroup, {ROTATION} buffers in turn (barrier, little to wait for)"),
        t,
        "µs per dispatch",
        1e6,
    );
    for (i, c) in counters.iter().enumerate() {
        check(&probe, c, chained / ROTATION as u64, &format!("bump, buffer {i} of {ROTATION}"))?;
    }

    probe.clear(&counter)?;
    let t = probe.per_step(|_| Step { pipeline: &bump, bind: Some(&bind), workgroups: 1 }, n, true)?;
    report("1 workgroup, dependent, one pass each (as bench --profile)", t, "µs per dispatch", 1e6);
    check(&probe, &counter, chained, "bump, a pass each")?;

    let wide = probe.pipeline("bump_wide", false);
    let wide_count = probe.storage(1);
    let bind = probe.bind(&wide, &[(2, &wide_count)]);
    let t = probe.per_step(|_| Step { pipeline: &wide, bind: Some(&bind), workgroups: WIDE_GRID }, n, false)?;
    report(&format!("{WIDE_GRID} workgroups, dependent"), t, "µs per dispatch", 1e6);
    check(&probe, &wide_count, chained * u64::from(WIDE_GRID), "bump_wide")?;

    // Workgroup memory: WebGPU zeroes it for every workgroup unless the pipeline opts out.
    for zeroed in [true, false] {
        let shared = probe.pipeline("shared_bump", zeroed);
        probe.clear(&counter)?;
        let bind = probe.bind(&shared, &[(1, &counter)]);
        let t = probe.per_step(|_| Step { pipeline: &shared, bind: Some(&bind), workgroups: 1 }, n, false)?;
        let how = if zeroed { "zeroed by WebGPU" } else { "not zeroed" };
        report(&format!("1 workgroup of 256, 8 KiB workgroup memory {how}"), t, "µs per dispatch", 1e6);
        check(&probe, &counter, chained, "shared_bump")?;
    }

    // Latencies inside one dispatch.
    let chase = probe.pipeline("chase", false);
    for bytes in [1u64 << 20, big_ring.min(limit) & !3] {
        let len = (bytes / 4) as usize;
        let ring = probe.storage(len as u64);
        let next = cycle(len);
        probe.queue.write_buffer(&ring, 0, bytemuck::cast_slice(&next));
        let bind = probe.bind(&chase, &[(0, &probe.params), (1, &counter), (3, &ring)]);
        let step = Step { pipeline: &chase, bind: Some(&bind), workgroups: 1 };
        let t = probe.per_loop_step(&step, 0, loops)?;
        report(&format!("dependent load, one invocation, {} KiB ring", bytes >> 10), t, "ns per load", 1e9);
        let mut i = 0usize;
        for _ in 0..2 * loops {
            i = next[i] as usize;
        }
        check(&probe, &counter, i as u64, "chase")?;
    }

    let barriers = probe.pipeline("barriers", false);
    let bind = probe.bind(&barriers, &[(0, &probe.params), (1, &counter)]);
    let step = Step { pipeline: &barriers, bind: Some(&bind), workgroups: 1 };
    let t = probe.per_loop_step(&step, 0, loops)?;
    report("workgroup of 256: store, barrier, load, barrier", t, "ns per step", 1e9);
    let s = 2 * u64::from(loops);
    check(&probe, &counter, s + s % 256, "barriers")?;
    Ok(())
}
