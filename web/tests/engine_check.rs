//! The engine check (the page's proof of its engine against the reference) passes natively on
//! the CPU engine and on the GPU engine (lavapipe in CI), so a failure in a browser is the
//! browser's; and it fails on an engine that computes something else.

use purebee_engine_cpu::{CpuEngine, CpuOptions};
use purebee_engine_gpu::{GpuEngine, GpuOptions};
use purebee_isa::Engine;
use purebee_web::engine_check::{CaseOutcome, EngineCheck};

/// Runs every case on `engine`, as the page does (begin, wait until ready, finish).
fn run_all(engine: &mut dyn Engine) -> Vec<CaseOutcome> {
    let mut check = EngineCheck::new().expect("the cases build");
    let mut outcomes = Vec::new();
    while !check.done() {
        check.begin(engine).expect("the case runs");
        while !check.ready(engine) {
            std::thread::yield_now();
        }
        outcomes.push(check.finish(engine).expect("the case finishes"));
    }
    outcomes
}

fn failures(outcomes: &[CaseOutcome]) -> Vec<String> {
    outcomes.iter().filter_map(|o| o.failure.as_ref().map(|f| format!("{}: {f}", o.name))).collect()
}

#[test]
fn every_case_passes_on_the_cpu_engine() {
    let mut engine = CpuEngine::new(&CpuOptions { threads: Some(1), simd: None }).expect("cpu engine");
    let outcomes = run_all(&mut engine);
    assert!(outcomes.len() >= 20, "{} cases", outcomes.len());
    assert_eq!(failures(&outcomes), Vec::<String>::new());
}

#[test]
fn every_case_passes_on_the_gpu_engine() {
    if purebee_testenv::gpu_tests_skipped() {
        return;
    }
    for fuse in [true, false] {
        let options = GpuOptions {
            allow_cpu_adapter: true,
            use_subgroups: false,
            gpu_kernels: true,
            fuse,
            ..GpuOptions::default()
        };
        let mut engine = GpuEngine::new(&options).expect("a wgpu adapter");
        assert_eq!(failures(&run_all(&mut engine)), Vec::<String>::new(), "fuse {fuse}");
    }
}
