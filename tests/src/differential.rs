//! Running one instruction (or a small program) on an engine under test and on the
//! reference engine with the same inputs, for the differential tests.
//!
//! A [`Pair`] holds the engine under test and a reference engine. Two engines are tested:
//!
//! - **The GPU engine** (`Pair<GpuEngine>`, the default): [`pair`] with the adapter's
//!   capabilities (subgroups where it has them); [`portable_pair`] with subgroups off, so
//!   that tests cover the portable kernels as well as the subgroup ones; [`pair_for`] picks
//!   one of the two; [`windowed_pair`] binds at most 256 KiB at once (row windows).
//! - **The CPU engine** (`Pair<CpuEngine>`), once per SIMD path: [`cpu_pair`] for one
//!   [`SimdLevel`], [`cpu_levels`] for the levels this CPU runs, and [`on_cpu_levels`] to run
//!   a check on every one of them. Each CPU engine has two threads (one on a one-CPU machine),
//!   so that instructions are split over the thread pool. A level this CPU cannot run is
//!   reported on stderr as NOT tested.
//!
//! One pair of each kind serves the whole test binary (creating a device per proptest case
//! would dominate the run time); each case's tensors get unique names and are freed
//! afterwards.
//!
//! [`Pair::run_inspect`] gives a test the engine under test and the compiled program after
//! the run (on the GPU, to read a kernel's scratch buffers). [`Pair::run_each`] runs one
//! compiled program at several run-time parameter values (positions).
//!
//! With no GPU adapter the GPU tests fail with a message saying how to install one. Setting
//! `PUREBEE_SKIP_GPU_TESTS=1` opts out of them explicitly (never in CI, which installs
//! lavapipe); the CPU tests run regardless.

use std::sync::{Mutex, MutexGuard, OnceLock};

use purebee_engine_cpu::{CpuEngine, CpuOptions, SimdLevel};
use purebee_engine_gpu::{GpuEngine, GpuOptions};
use purebee_engine_ref::RefEngine;
use purebee_isa::{Engine, IsaError, ParamValue, Program, ProgramBuilder, TensorId};
use purebee_memory::HostTensor;

/// An engine under test, the reference engine, and a counter that keeps tensor names
/// unique.
pub struct Pair<E: Engine = GpuEngine> {
    /// The engine under test.
    pub engine: E,
    /// The oracle.
    pub reference: RefEngine,
    case: u64,
}

pub use purebee_testenv::gpu_tests_skipped;

/// A GPU engine with `options`. Panics (failing the test) with instructions when no adapter
/// exists.
pub fn new_gpu_engine(options: &GpuOptions) -> GpuEngine {
    GpuEngine::new(options).unwrap_or_else(|e| {
        panic!("GPU tests need a wgpu adapter: {e}\n(set PUREBEE_SKIP_GPU_TESTS=1 to opt out explicitly)")
    })
}

/// The process-wide GPU pair, created on first use. Panics (failing the test) with
/// instructions when no adapter exists.
pub fn pair() -> MutexGuard<'static, Pair> {
    static PAIR: OnceLock<Mutex<Pair>> = OnceLock::new();
    lock(PAIR.get_or_init(|| new_pair(GpuOptions::default())))
}

/// A second process-wide GPU pair whose engine has subgroups off
/// (`GpuOptions { use_subgroups: false, .. }`): the portable kernels.
pub fn portable_pair() -> MutexGuard<'static, Pair> {
    static PAIR: OnceLock<Mutex<Pair>> = OnceLock::new();
    lock(PAIR.get_or_init(|| new_pair(GpuOptions { use_subgroups: false, ..GpuOptions::default() })))
}

/// A GPU pair whose engine may bind at most 256 KiB at once, so that tensors of a few
/// hundred KiB take the windowed path that the 2B model's 657 MB embedding takes on a real
/// device (`max_storage_buffer_binding_size` is 128 MiB on lavapipe).
pub fn windowed_pair() -> MutexGuard<'static, Pair> {
    static PAIR: OnceLock<Mutex<Pair>> = OnceLock::new();
    lock(PAIR.get_or_init(|| new_pair(GpuOptions { max_binding: Some(256 * 1024), ..GpuOptions::default() })))
}

/// [`windowed_pair`] with the compiler's fusion pass off, for comparing fused programs over
/// row windows with unfused ones.
pub fn windowed_unfused_pair() -> MutexGuard<'static, Pair> {
    static PAIR: OnceLock<Mutex<Pair>> = OnceLock::new();
    lock(
        PAIR.get_or_init(|| {
            new_pair(GpuOptions { max_binding: Some(256 * 1024), fuse: false, ..GpuOptions::default() })
        }),
    )
}

/// A GPU pair whose engine has the compiler's fusion pass off (`GpuOptions { fuse: false,
/// .. }`), subgroups as [`pair_for`]'s `portable` says: every instruction on its own
/// kernels, for comparing fused programs with unfused ones.
pub fn unfused_pair(portable: bool) -> MutexGuard<'static, Pair> {
    static PAIRS: [OnceLock<Mutex<Pair>>; 2] = [const { OnceLock::new() }; 2];
    lock(
        PAIRS[usize::from(portable)]
            .get_or_init(|| new_pair(GpuOptions { fuse: false, use_subgroups: !portable, ..GpuOptions::default() })),
    )
}

/// A GPU pair whose engine chooses its kernels as on a GPU even on a CPU adapter
/// (`GpuOptions { gpu_kernels: true, .. }`: `gemv` on short rows, products that round their
/// own x), subgroups as [`pair_for`]'s `portable` says, the fusion pass as `fuse` says.
pub fn gpu_kernels_pair(portable: bool, fuse: bool) -> MutexGuard<'static, Pair> {
    static PAIRS: [OnceLock<Mutex<Pair>>; 4] = [const { OnceLock::new() }; 4];
    lock(PAIRS[2 * usize::from(portable) + usize::from(fuse)].get_or_init(|| {
        new_pair(GpuOptions { gpu_kernels: true, fuse, use_subgroups: !portable, ..GpuOptions::default() })
    }))
}

/// A GPU pair whose fused norms take their held-row variant (`GpuOptions { held_norm: true,
/// .. }`), subgroups as [`pair_for`]'s `portable` says, kernels as a GPU's when `gpu`
/// ([`gpu_kernels_pair`]).
pub fn held_norm_pair(portable: bool, gpu: bool) -> MutexGuard<'static, Pair> {
    static PAIRS: [OnceLock<Mutex<Pair>>; 4] = [const { OnceLock::new() }; 4];
    lock(PAIRS[2 * usize::from(portable) + usize::from(gpu)].get_or_init(|| {
        new_pair(GpuOptions { held_norm: true, gpu_kernels: gpu, use_subgroups: !portable, ..GpuOptions::default() })
    }))
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
    let gpu = new_gpu_engine(&options);
    eprintln!("GPU tests on {} ({:?})", gpu.context().describe(), gpu.context().capabilities());
    Mutex::new(Pair { engine: gpu, reference: RefEngine::new(), case: 0 })
}

/// The threads of the CPU engines under test: two, so that the thread pool splits the
/// work, or one on a one-CPU machine (the engine refuses more threads than logical CPUs).
pub fn cpu_test_threads() -> usize {
    2.min(std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// A new CPU engine on the SIMD path `level` with [`cpu_test_threads`] threads. Panics
/// (failing the test) when the engine cannot be built, e.g. for a level this CPU lacks.
pub fn new_cpu_engine(level: SimdLevel) -> CpuEngine {
    CpuEngine::new(&CpuOptions { threads: Some(cpu_test_threads()), simd: Some(level) })
        .unwrap_or_else(|e| panic!("CPU engine with the {level} kernels: {e}"))
}

/// The process-wide CPU pair of SIMD path `level`, created on first use; `None` (and a
/// line on stderr saying so) when this CPU cannot run that level's kernels.
pub fn cpu_pair(level: SimdLevel) -> Option<MutexGuard<'static, Pair<CpuEngine>>> {
    static PAIRS: [OnceLock<Mutex<Pair<CpuEngine>>>; SimdLevel::ALL.len()] =
        [const { OnceLock::new() }; SimdLevel::ALL.len()];
    if !level.is_supported() {
        eprintln!("this CPU lacks the features of the {level} kernels: the CPU engine's {level} path is NOT tested");
        return None;
    }
    let i = SimdLevel::ALL.iter().position(|&l| l == level).expect("every level is in SimdLevel::ALL");
    Some(lock(PAIRS[i].get_or_init(|| {
        let engine = new_cpu_engine(level);
        eprintln!("CPU tests on the {level} kernels, {} threads", engine.threads());
        Mutex::new(Pair { engine, reference: RefEngine::new(), case: 0 })
    })))
}

/// The CPU engine's SIMD paths that this CPU runs (the portable one always), slowest
/// first; each one it cannot run is reported on stderr as NOT tested.
pub fn cpu_levels() -> Vec<SimdLevel> {
    SimdLevel::ALL
        .into_iter()
        .filter(|&level| {
            let supported = level.is_supported();
            if !supported {
                eprintln!(
                    "this CPU lacks the features of the {level} kernels: the CPU engine's {level} path is NOT tested"
                );
            }
            supported
        })
        .collect()
}

/// Runs `check` on the CPU pair of every level of [`cpu_levels`], stopping at the first
/// error, which is prefixed with the level ("avx2 kernels: ...").
pub fn on_cpu_levels<T>(mut check: impl FnMut(&mut Pair<CpuEngine>) -> Result<T, String>) -> Result<(), String> {
    for level in cpu_levels() {
        let Some(mut pair) = cpu_pair(level) else { continue };
        check(&mut pair).map_err(|e| format!("{level} kernels: {e}"))?;
    }
    Ok(())
}

fn lock<E: Engine>(m: &'static Mutex<Pair<E>>) -> MutexGuard<'static, Pair<E>> {
    // A failed case poisons the lock; the engines are still usable for the next case.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// What one engine produced: the bytes of each output, in order.
pub type Outputs = Vec<Vec<u8>>;

/// Builds a case's program: given the builder, a function that makes names unique to the
/// case, and the input handles, it returns the handles to read.
pub type Build<'a> =
    dyn Fn(&mut ProgramBuilder, &dyn Fn(&str) -> String, &[TensorId]) -> Result<Vec<TensorId>, IsaError> + 'a;

impl<E: Engine> Pair<E> {
    /// Inserts `inputs` into both engines, builds the program with `build` (given the input
    /// handles, it returns the handles to read; `b.alloc` names are prefixed automatically
    /// through `name`), runs it with `params` and reads the outputs. Everything the case
    /// created is freed afterwards. Returns (engine under test, reference) outputs.
    pub fn run(
        &mut self,
        inputs: &[(&str, HostTensor)],
        params: &[ParamValue],
        build: impl Fn(&mut ProgramBuilder, &dyn Fn(&str) -> String, &[TensorId]) -> Result<Vec<TensorId>, IsaError>,
    ) -> (Outputs, Outputs) {
        let (got, reference, ()) = self.run_inspect(inputs, params, build, |_, _| ());
        (got, reference)
    }

    /// [`Pair::run`], and `inspect` called with the engine under test and the program right
    /// after that engine ran it (before anything is freed), e.g. to read the GPU's scratch
    /// buffers.
    pub fn run_inspect<T>(
        &mut self,
        inputs: &[(&str, HostTensor)],
        params: &[ParamValue],
        build: impl Fn(&mut ProgramBuilder, &dyn Fn(&str) -> String, &[TensorId]) -> Result<Vec<TensorId>, IsaError>,
        inspect: impl FnOnce(&mut E, &Program) -> T,
    ) -> (Outputs, Outputs, T) {
        self.case += 1;
        let prefix = format!("case{}", self.case);
        let runs = [params.to_vec()];
        let (mut got, seen) = run_on(&mut self.engine, &prefix, inputs, &runs, &build, inspect);
        let (mut reference, ()) = run_on(&mut self.reference, &prefix, inputs, &runs, &build, |_, _| ());
        (got.pop().unwrap_or_default(), reference.pop().unwrap_or_default(), seen)
    }

    /// Like [`Pair::run`], but builds the program once and runs it once per entry of
    /// `runs` (the run-time parameter values of that run), reading the outputs after each:
    /// the same compiled program at several positions. State carries over from one run to
    /// the next on both engines (a cache written by one run is read by the next). Returns
    /// (engine under test, reference) outputs per run.
    pub fn run_each(
        &mut self,
        inputs: &[(&str, HostTensor)],
        runs: &[Vec<ParamValue>],
        build: impl Fn(&mut ProgramBuilder, &dyn Fn(&str) -> String, &[TensorId]) -> Result<Vec<TensorId>, IsaError>,
    ) -> Vec<(Outputs, Outputs)> {
        self.case += 1;
        let prefix = format!("case{}", self.case);
        let (got, ()) = run_on(&mut self.engine, &prefix, inputs, runs, &build, |_, _| ());
        let (reference, ()) = run_on(&mut self.reference, &prefix, inputs, runs, &build, |_, _| ());
        got.into_iter().zip(reference).collect()
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
