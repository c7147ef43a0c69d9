//! The memory instructions on the GPU engine: GRID_ALLOC zero-fills (again on every run),
//! GRID_WRITE of constant data, host GRID_WRITE / GRID_READ, FREE, SYNC, and the typed
//! errors for using a freed or never allocated tensor, for a position past a KV cache, and
//! for wrong run-time parameters. The values must be bit-identical to the reference engine's.

use purebee_engine_gpu::{GpuEngine, GpuOptions};
use purebee_engine_ref::RefEngine;
use purebee_isa::{DType, Engine, ExecError, ParamValue, ProgramBuilder};
use purebee_memory::MemoryError;
use purebee_tests::differential::gpu_tests_skipped;

fn engines() -> Vec<Box<dyn Engine>> {
    let gpu = GpuEngine::new(&GpuOptions::default()).unwrap_or_else(|e| {
        panic!("GPU tests need a wgpu adapter: {e}\n(set PUREBEE_SKIP_GPU_TESTS=1 to opt out explicitly)")
    });
    vec![Box::new(gpu), Box::new(RefEngine::new())]
}

#[test]
fn alloc_write_read_free_and_sync_behave_like_the_reference() {
    if gpu_tests_skipped() {
        return;
    }
    let mut seen = Vec::new();
    for mut e in engines() {
        let mut b = ProgramBuilder::new("p", e.memory_mut());
        let x = b.alloc("x", DType::F32, &[5]).expect("declare");
        let c = b.alloc("c", DType::U32, &[3]).expect("declare");
        b.grid_write(c, [7u32, 8, 9].iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>().into())
            .expect("12 bytes");
        b.sync().expect("valid");
        b.add(x, x, x).expect("valid");
        let p = b.finish();
        e.execute(&p, &[]).expect("runs");
        assert_eq!(e.read_f32(x).expect("live"), vec![0.0; 5], "{}: GRID_ALLOC zero-fills", e.name());
        assert_eq!(e.read_u32(c).expect("live"), vec![7, 8, 9], "{}: GRID_WRITE", e.name());
        e.write_f32(x, &[1.0, -2.0, 3.5, 1e-40, f32::MAX]).expect("size");
        let mut b = ProgramBuilder::new("double", e.memory_mut());
        b.add(x, x, x).expect("valid");
        let double = b.finish();
        e.execute(&double, &[]).expect("runs");
        let doubled = e.read_f32(x).expect("live");
        e.execute(&p, &[]).expect("runs again");
        assert_eq!(e.read_f32(x).expect("live"), vec![0.0; 5], "{}: GRID_ALLOC zero-fills on every run", e.name());
        let mut b = ProgramBuilder::new("free", e.memory_mut());
        b.free(x).expect("live");
        let free = b.finish();
        e.execute(&free, &[]).expect("runs");
        assert_eq!(
            e.read(x),
            Err(ExecError::Memory { op: "GRID_READ", source: MemoryError::Freed { name: "x".into() } })
        );
        assert_eq!(
            e.execute(&double, &[]),
            Err(ExecError::Memory { op: "TENSOR_ADD", source: MemoryError::Freed { name: "x".into() } })
        );
        assert_eq!(
            e.execute(&free, &[]),
            Err(ExecError::Memory { op: "FREE", source: MemoryError::Freed { name: "x".into() } })
        );
        // GRID_ALLOC brings it back (a new buffer on the GPU: the compiled programs rebind).
        e.execute(&p, &[]).expect("runs");
        e.write_f32(x, &[1.0, 1.0, 1.0, 1.0, 1.0]).expect("size");
        e.execute(&double, &[]).expect("runs after a new GRID_ALLOC");
        assert_eq!(e.read_f32(x).expect("live"), vec![2.0; 5]);
        seen.push(doubled.iter().map(|v| v.to_bits()).collect::<Vec<_>>());
    }
    assert_eq!(seen[0], seen[1], "GPU and reference agree bit for bit (subnormal and overflow included)");
}

#[test]
fn errors_name_the_tensor_the_instruction_and_the_positions() {
    if gpu_tests_skipped() {
        return;
    }
    for mut e in engines() {
        let mut b = ProgramBuilder::new("p", e.memory_mut());
        let cache = b.alloc("cache", DType::F32, &[4, 2]).expect("declare");
        let src = b.alloc("src", DType::F32, &[2, 2]).expect("declare");
        let never = b.declare("never", DType::F32, &[2, 2]).expect("declare");
        let setup = b.finish();
        let mut b = ProgramBuilder::new("step", e.memory_mut());
        let pos2 = b.param_u32("pos").expect("param");
        b.kv_write(cache, src, pos2).expect("valid");
        let step = b.finish();
        e.execute(&setup, &[]).expect("allocates");
        e.execute(&step, &[ParamValue::U32(2)]).expect("fits");
        assert_eq!(
            e.execute(&step, &[ParamValue::U32(3)]),
            Err(ExecError::ContextOverflow { op: "KV_WRITE", tensor: "cache".into(), pos: 3, end: 5, n_ctx: 4 }),
            "{}",
            e.name()
        );
        assert_eq!(e.execute(&step, &[]), Err(ExecError::ParamCount { expected: 1, got: 0 }));
        assert!(matches!(e.execute(&step, &[ParamValue::F32(1.0)]), Err(ExecError::ParamKind { .. })));
        let mut b = ProgramBuilder::new("use-never", e.memory_mut());
        b.silu(never, src).expect("valid");
        let use_never = b.finish();
        assert_eq!(
            e.execute(&use_never, &[]),
            Err(ExecError::Memory { op: "SILU", source: MemoryError::NotAllocated { name: "never".into() } })
        );
        assert!(matches!(
            e.write_f32(src, &[1.0]),
            Err(ExecError::Memory { source: MemoryError::SizeMismatch { .. }, .. })
        ));
    }
}
