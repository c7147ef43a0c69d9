//! The GPU engine's memory hygiene: a bounded cache of compiled programs (least recently run
//! out first) and FREE dropping every compiled program that bound the freed tensor's
//! buffers. Runs on any adapter (Mesa's lavapipe in CI); skipped with
//! `PUREBEE_SKIP_GPU_TESTS=1`, like every GPU test.

use purebee_engine_gpu::{GpuEngine, GpuOptions, COMPILED_PROGRAMS};
use purebee_isa::{DType, Engine, ProfileSupport, Program, ProgramBuilder, TensorId};

fn engine() -> Option<GpuEngine> {
    if purebee_testenv::gpu_tests_skipped() {
        return None;
    }
    Some(GpuEngine::new(&GpuOptions::default()).unwrap_or_else(|e| {
        panic!("GPU tests need a wgpu adapter: {e}\n(set PUREBEE_SKIP_GPU_TESTS=1 to opt out explicitly)")
    }))
}

/// `out = a + b`, a program of its own.
fn add(e: &mut GpuEngine, name: &str, out: TensorId, a: TensorId, b: TensorId) -> Program {
    let mut p = ProgramBuilder::new(name, e.memory_mut());
    p.add(out, a, b).expect("valid");
    p.finish()
}

#[test]
fn the_compiled_program_cache_is_bounded_and_an_evicted_program_runs_again() {
    let Some(mut e) = engine() else { return };
    let mut b = ProgramBuilder::new("setup", e.memory_mut());
    let x = b.alloc("x", DType::F32, &[4]).expect("declare");
    let y = b.alloc("y", DType::F32, &[4]).expect("declare");
    let setup = b.finish();
    e.execute(&setup, &[]).expect("runs");
    e.write_f32(x, &[1.0, 2.0, 3.0, 4.0]).expect("size");
    let programs: Vec<Program> = (0..COMPILED_PROGRAMS + 8).map(|i| add(&mut e, &format!("add{i}"), y, x, x)).collect();
    for p in &programs {
        e.execute(p, &[]).expect("runs");
        assert!(e.compiled_programs() <= COMPILED_PROGRAMS);
    }
    assert_eq!(e.compiled_programs(), COMPILED_PROGRAMS);
    // The least recently run went first: the setup and the first eight additions.
    assert!(!e.is_compiled(&setup));
    assert!(programs[..8].iter().all(|p| !e.is_compiled(p)));
    assert!(programs[8..].iter().all(|p| e.is_compiled(p)));
    assert_eq!(e.read_f32(y).expect("live"), vec![2.0, 4.0, 6.0, 8.0]);
    // An evicted program is compiled again and computes the same; the cache stays bounded,
    // now without the least recently run of the others.
    e.write_f32(x, &[-1.0, 0.5, 10.0, 0.0]).expect("size");
    e.execute(&programs[0], &[]).expect("runs again");
    assert_eq!(e.read_f32(y).expect("live"), vec![-2.0, 1.0, 20.0, 0.0]);
    assert!(e.is_compiled(&programs[0]) && !e.is_compiled(&programs[8]));
    assert_eq!(e.compiled_programs(), COMPILED_PROGRAMS);
    // A program run again is the most recently used: it survives the next insertions.
    e.execute(&programs[9], &[]).expect("runs");
    e.execute(&programs[1], &[]).expect("runs");
    assert!(e.is_compiled(&programs[9]) && !e.is_compiled(&programs[10]));
    assert_eq!(e.dispatched_kernels(&programs[0]).map(|k| k.len()), Some(1));
}

#[test]
fn free_drops_the_compiled_programs_that_bound_the_tensor() {
    let Some(mut e) = engine() else { return };
    let mut b = ProgramBuilder::new("setup", e.memory_mut());
    let x = b.alloc("x", DType::F32, &[3]).expect("declare");
    let t = b.alloc("t", DType::F32, &[3]).expect("declare");
    let setup = b.finish();
    e.execute(&setup, &[]).expect("runs");
    e.write_f32(x, &[1.0, 2.0, 3.0]).expect("size");
    let double = add(&mut e, "double", t, x, x);
    let keep = add(&mut e, "keep", x, x, x);
    e.execute(&double, &[]).expect("runs");
    e.execute(&keep, &[]).expect("runs");
    assert_eq!(e.read_f32(t).expect("live"), vec![2.0, 4.0, 6.0]);
    // The setup (GRID_ALLOC) and `double` bound t's buffer.
    assert_eq!(e.programs_binding(t), 2);
    let mut b = ProgramBuilder::new("free", e.memory_mut());
    b.free(t).expect("live");
    let free = b.finish();
    e.execute(&free, &[]).expect("runs");
    // No compiled program holds t's buffer any more (a bind group would keep it alive);
    // programs that did not bind it stay compiled.
    assert_eq!(e.programs_binding(t), 0);
    assert!(!e.is_compiled(&double) && !e.is_compiled(&setup));
    assert!(e.is_compiled(&keep));
    // A program that allocates, uses and frees its own tensor keeps nothing of it either.
    let mut b = ProgramBuilder::new("scoped", e.memory_mut());
    b.grid_alloc(t).expect("declared");
    b.add(t, x, x).expect("valid");
    b.add(x, t, x).expect("valid");
    b.free(t).expect("live");
    let scoped = b.finish();
    e.execute(&scoped, &[]).expect("runs");
    assert_eq!(e.programs_binding(t), 0);
    // x was [2, 4, 6] after `keep`; now 2x + x.
    assert_eq!(e.read_f32(x).expect("live"), vec![6.0, 12.0, 18.0]);
    // GRID_ALLOC again: a new buffer, and the dropped program compiles against it.
    e.execute(&setup, &[]).expect("runs");
    e.write_f32(x, &[1.0, 1.0, 1.0]).expect("size");
    e.execute(&double, &[]).expect("runs after a new GRID_ALLOC");
    assert_eq!(e.read_f32(t).expect("live"), vec![2.0, 2.0, 2.0]);
}

#[test]
fn a_profile_counts_every_dispatch_by_family_and_adds_no_submit() {
    let Some(mut e) = engine() else { return };
    let mut b = ProgramBuilder::new("setup", e.memory_mut());
    let x = b.alloc("x", DType::F32, &[1024]).expect("declare");
    let y = b.alloc("y", DType::F32, &[1024]).expect("declare");
    let setup = b.finish();
    e.execute(&setup, &[]).expect("runs");
    let mut b = ProgramBuilder::new("work", e.memory_mut());
    b.add(y, x, x).expect("valid");
    b.silu(y, y).expect("valid");
    b.add(x, y, x).expect("valid");
    let work = b.finish();
    e.execute(&work, &[]).expect("runs");
    assert!(e.take_profile().is_empty(), "no profile while off");
    let timed = match e.set_profiling(true) {
        ProfileSupport::Timed => true,
        ProfileSupport::Untimed(_) => false,
        ProfileSupport::Unsupported => panic!("the GPU engine profiles"),
    };
    // A run's commands wait for whatever comes next; sync submits them, so the count below
    // holds exactly the two profiled runs.
    e.sync().expect("syncs");
    let before = e.counters().expect("counted");
    e.execute(&work, &[]).expect("runs");
    e.execute(&work, &[]).expect("runs");
    e.sync().expect("syncs");
    let spent = e.counters().expect("counted").since(before);
    assert_eq!((spent.dispatches, spent.submits), (6, 2), "profiling adds no submit");
    let profile = e.take_profile();
    let kernels = e.dispatched_kernels(&work).expect("compiled");
    let total: u64 = profile.iter().map(|k| k.dispatches).sum();
    assert_eq!(total, 2 * kernels.len() as u64);
    for k in &profile {
        let runs = kernels.iter().filter(|f| **f == k.family).count() as u64;
        assert_eq!(k.dispatches, 2 * runs, "{k:?}");
        // Each dispatch reads at least its 4 KiB input.
        assert!(k.bytes_read >= k.dispatches * 4096, "{k:?}");
        assert_eq!(k.seconds.is_some(), timed, "{k:?}");
    }
    assert!(e.take_profile().is_empty(), "taken");
    e.set_profiling(false);
    e.execute(&work, &[]).expect("runs");
    assert!(e.take_profile().is_empty(), "off again");
}
