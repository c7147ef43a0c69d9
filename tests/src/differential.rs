//! Running one instruction (or a small program) on the GPU engine and the reference engine
//! with the same inputs, for the differential tests.
//!
//! One GPU engine serves the whole test binary (creating a device per proptest case would
//! dominate the run time); each case's tensors get unique names and are freed afterwards.
//!
//! A second pair, [`portable_pair`], runs the GPU engine with subgroups off, so that tests
//! cover the portable kernels as well as the subgroup ones on adapters that have subgroups.
//! [`Pair::run_inspect`] gives a test the GPU engine and the compiled program after the run
//! (to read a kernel's scratch buffers). [`Pair::run_each`] runs one compiled program at
//! several run-time parameter values (positions).
//!
//! With no adapter the tests fail with a message saying how to install one. Setting
//! `PUREBEE_SKIP_GPU_TESTS=1` opts out explicitly (never in CI, which installs lavapipe).

use std::sync::{Mutex, MutexGuard, OnceLock};

use purebee_engine_gpu::{GpuEngine, GpuOptions};
use purebee_engine_ref::RefEngine;
use purebee_isa::{Engine, IsaError, ParamValue, Program, ProgramBuilder, TensorId};
use purebee_memory::HostTensor;

/// The two engines and a counter that keeps tensor names unique.
pub struct Pair {
    /// The engine under test.
    pub gpu: GpuEngine,
    /// The oracle.
    pub reference: RefEngine,
    case: u64,
}

/// True when the user opted out of GPU tests explicitly.
pub fn gpu_tests_skipped() -> bool {
    if std::env::var("PUREBEE_SKIP_GPU_TESTS").is_ok_and(|v| v == "1") {
        eprintln!("PUREBEE_SKIP_GPU_TESTS=1: GPU tests NOT run");
        return true;
    }
    false
}

/// The process-wide engine pair, created on first use. Panics (failing the test) with
/// instructions when no adapter exists.
pub fn pair() -> MutexGuard<'static, Pair> {
    static PAIR: OnceLock<Mutex<Pair>> = OnceLock::new();
    lock(PAIR.get_or_init(|| new_pair(GpuOptions::default())))
}

/// A second process-wide pair whose GPU engine has subgroups off
/// (`GpuOptions { use_subgroups: false, .. }`): the portable kernels.
pub fn portable_pair() -> MutexGuard<'static, Pair> {
    static PAIR: OnceLock<Mutex<Pair>> = OnceLock::new();
    lock(PAIR.get_or_init(|| new_pair(GpuOptions { use_subgroups: false, ..GpuOptions::default() })))
}

/// A pair whose GPU engine may bind at most 256 KiB at once, so that tensors of a few
/// hundred KiB take the windowed path that the 2B model's 657 MB embedding takes on a real
/// device (`max_storage_buffer_binding_size` is 128 MiB on lavapipe).
pub fn windowed_pair() -> MutexGuard<'static, Pair> {
    static PAIR: OnceLock<Mutex<Pair>> = OnceLock::new();
    lock(PAIR.get_or_init(|| new_pair(GpuOptions { max_binding: Some(256 * 1024), ..GpuOptions::default() })))
}

/// [`pair`] when `portable` is false, [`portable_pair`] when it is true.
pub fn pair_for(portable: bool) -> MutexGuard<'static, Pair> {
    if portable {
        portable_pair()
    } else {
        pair()
    }
}

fn new_pair(options: GpuOptions) -> Mutex<Pair> {
    let gpu = GpuEngine::new(&options).unwrap_or_else(|e| {
        panic!("GPU tests need a wgpu adapter: {e}\n(set PUREBEE_SKIP_GPU_TESTS=1 to opt out explicitly)")
    });
    eprintln!("GPU tests on {} ({:?})", gpu.context().describe(), gpu.context().capabilities());
    Mutex::new(Pair { gpu, reference: RefEngine::new(), case: 0 })
}

fn lock(m: &'static Mutex<Pair>) -> MutexGuard<'static, Pair> {
    // A failed case poisons the lock; the engines are still usable for the next case.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// What one engine produced: the bytes of each output, in order.
pub type Outputs = Vec<Vec<u8>>;

/// Builds a case's program: given the builder, a function that makes names unique to the
/// case, and the input handles, it returns the handles to read.
pub type Build<'a> =
    dyn Fn(&mut ProgramBuilder, &dyn Fn(&str) -> String, &[TensorId]) -> Result<Vec<TensorId>, IsaError> + 'a;

impl Pair {
    /// Inserts `inputs` into both engines, builds the program with `build` (given the input
    /// handles, it returns the handles to read; `b.alloc` names are prefixed automatically
    /// through `name`), runs it with `params` and reads the outputs. Everything the case
    /// created is freed afterwards. Returns (gpu, reference) outputs.
    pub fn run(
        &mut self,
        inputs: &[(&str, HostTensor)],
        params: &[ParamValue],
        build: impl Fn(&mut ProgramBuilder, &dyn Fn(&str) -> String, &[TensorId]) -> Result<Vec<TensorId>, IsaError>,
    ) -> (Outputs, Outputs) {
        let (gpu, reference, ()) = self.run_inspect(inputs, params, build, |_, _| ());
        (gpu, reference)
    }

    /// [`Pair::run`], and `inspect` called with the GPU engine and the program right after
    /// the GPU engine ran it (before anything is freed), e.g. to read scratch buffers.
    pub fn run_inspect<T>(
        &mut self,
        inputs: &[(&str, HostTensor)],
        params: &[ParamValue],
        build: impl Fn(&mut ProgramBuilder, &dyn Fn(&str) -> String, &[TensorId]) -> Result<Vec<TensorId>, IsaError>,
        inspect: impl FnOnce(&mut GpuEngine, &Program) -> T,
    ) -> (Outputs, Outputs, T) {
        self.case += 1;
        let prefix = format!("case{}", self.case);
        let runs = [params.to_vec()];
        let (mut gpu, seen) = run_on(&mut self.gpu, &prefix, inputs, &runs, &build, inspect);
        let (mut reference, ()) = run_on(&mut self.reference, &prefix, inputs, &runs, &build, |_, _| ());
        (gpu.pop().unwrap_or_default(), reference.pop().unwrap_or_default(), seen)
    }

    /// Like [`Pair::run`], but builds the program once and runs it once per entry of
    /// `runs` (the run-time parameter values of that run), reading the outputs after each:
    /// the same compiled program at several positions. State carries over from one run to
    /// the next on both engines (a cache written by one run is read by the next). Returns
    /// (gpu, reference) outputs per run.
    pub fn run_each(
        &mut self,
        inputs: &[(&str, HostTensor)],
        runs: &[Vec<ParamValue>],
        build: impl Fn(&mut ProgramBuilder, &dyn Fn(&str) -> String, &[TensorId]) -> Result<Vec<TensorId>, IsaError>,
    ) -> Vec<(Outputs, Outputs)> {
        self.case += 1;
        let prefix = format!("case{}", self.case);
        let (gpu, ()) = run_on(&mut self.gpu, &prefix, inputs, runs, &build, |_, _| ());
        let (reference, ()) = run_on(&mut self.reference, &prefix, inputs, runs, &build, |_, _| ());
        gpu.into_iter().zip(reference).collect()
    }
}

fn run_on<E: Engine, T>(
    engine: &mut E,
    prefix: &str,
    inputs: &[(&str, HostTensor)],
    runs: &[Vec<ParamValue>],
    build: &Build,
    inspect: impl FnOnce(&mut E, &Program) -> T,
) -> (Vec<Outputs>, T) {
    let name = |n: &str| format!("{prefix}.{n}");
    let ids: Vec<TensorId> =
        inputs.iter().map(|(n, t)| engine.memory_mut().insert(&name(n), t.clone()).expect("unique name")).collect();
    let mut b = ProgramBuilder::new(prefix, engine.memory_mut());
    let outs = build(&mut b, &name, &ids).expect("the program builds");
    let program = b.finish();
    let mut got = Vec::with_capacity(runs.len());
    for params in runs {
        engine.execute(&program, params).unwrap_or_else(|e| panic!("{} engine: {e}", engine.name()));
        got.push(
            outs.iter()
                .map(|&o| engine.read(o).unwrap_or_else(|e| panic!("{} engine: {e}", engine.name())))
                .collect::<Outputs>(),
        );
    }
    let seen = inspect(engine, &program);
    // Free what the case made, on the engine (FREE releases GPU buffers) and in the registry.
    let mut made: Vec<TensorId> = ids.iter().chain(&outs).copied().collect();
    made.sort();
    made.dedup();
    let mut b = ProgramBuilder::new("free", engine.memory_mut());
    for id in made {
        b.free(id).expect("live");
    }
    let free = b.finish();
    engine.execute(&free, &[]).unwrap_or_else(|e| panic!("{} engine: freeing: {e}", engine.name()));
    (got, seen)
}

/// Bytes as f32 values.
pub fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

/// Bytes as u32 values.
pub fn u32s(bytes: &[u8]) -> Vec<u32> {
    bytes.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

/// Compares `got` with `want` element by element: `|got − want| ≤ abs + rel·|want|`. On
/// failure, the message names the index, got, expected and difference, and `what` (the
/// shape).
pub fn assert_close(got: &[f32], want: &[f32], abs: f32, rel: f32, what: &str) -> Result<(), String> {
    if got.len() != want.len() {
        return Err(format!("{what}: {} values, expected {}", got.len(), want.len()));
    }
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let diff = (g - w).abs();
        let ok = diff <= abs + rel * w.abs() || (g.is_nan() && w.is_nan()) || g == w;
        if !ok {
            return Err(format!("{what}: index {i}: got {g}, expected {w}, difference {diff}"));
        }
    }
    Ok(())
}
