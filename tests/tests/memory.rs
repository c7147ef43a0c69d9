//! The memory instructions on the GPU engine and on the CPU engine (every SIMD path this
//! CPU runs): GRID_ALLOC zero-fills (again on every run), GRID_WRITE of constant data, host
//! GRID_WRITE / GRID_READ, FREE, SYNC, and the typed errors for using a freed or never
//! allocated tensor, for a write of the wrong size, for a position past a KV cache, for
//! wrong run-time parameters, and (CPU) for an EMBED id past the vocabulary. The values must
//! be bit-identical to the reference engine's, and the errors equal to its errors.

use purebee_engine_gpu::GpuOptions;
use purebee_engine_ref::RefEngine;
use purebee_isa::{DType, Engine, ExecError, ParamValue, ProgramBuilder};
use purebee_memory::{HostTensor, MemoryError, Shape};
use purebee_tests::differential::{cpu_levels, gpu_tests_skipped, new_cpu_engine, new_gpu_engine};

/// The engines to check, each with a label: the reference engine first, then the CPU engine
/// on every SIMD path this CPU runs, then the GPU engine (unless GPU tests are skipped).
fn engines() -> Vec<(String, Box<dyn Engine>)> {
    let mut engines: Vec<(String, Box<dyn Engine>)> = vec![("reference".into(), Box::new(RefEngine::new()))];
    for level in cpu_levels() {
        engines.push((format!("cpu ({level})"), Box::new(new_cpu_engine(level))));
    }
    if !gpu_tests_skipped() {
        let gpu = new_gpu_engine(&GpuOptions::default());
        engines.push(("gpu".into(), Box::new(gpu)));
    }
    engines
}

#[test]
fn alloc_write_read_free_and_sync_behave_like_the_reference() {
    let mut seen = Vec::new();
    for (label, mut e) in engines() {
        let mut b = ProgramBuilder::new("p", e.memory_mut());
        let x = b.alloc("x", DType::F32, &[5]).expect("declare");
        let c = b.alloc("c", DType::U32, &[3]).expect("declare");
        b.grid_write(c, [7u32, 8, 9].iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>().into())
            .expect("12 bytes");
        b.sync().expect("valid");
        b.add(x, x, x).expect("valid");
        let p = b.finish();
        e.execute(&p, &[]).expect("runs");
        assert_eq!(e.read_f32(x).expect("live"), vec![0.0; 5], "{label}: GRID_ALLOC zero-fills");
        assert_eq!(e.read_u32(c).expect("live"), vec![7, 8, 9], "{label}: GRID_WRITE");
        e.write_f32(x, &[1.0, -2.0, 3.5, 1e-40, f32::MAX]).expect("size");
        let mut b = ProgramBuilder::new("double", e.memory_mut());
        b.add(x, x, x).expect("valid");
        let double = b.finish();
        e.execute(&double, &[]).expect("runs");
        let doubled = e.read_f32(x).expect("live");
        e.execute(&p, &[]).expect("runs again");
        assert_eq!(e.read_f32(x).expect("live"), vec![0.0; 5], "{label}: GRID_ALLOC zero-fills on every run");
        let mut b = ProgramBuilder::new("free", e.memory_mut());
        b.free(x).expect("live");
        let free = b.finish();
        e.execute(&free, &[]).expect("runs");
        assert_eq!(
            e.read(x),
            Err(ExecError::Memory { op: "GRID_READ", source: MemoryError::Freed { name: "x".into() } }),
            "{label}"
        );
        assert_eq!(
            e.execute(&double, &[]),
            Err(ExecError::Memory { op: "TENSOR_ADD", source: MemoryError::Freed { name: "x".into() } }),
            "{label}"
        );
        assert_eq!(
            e.execute(&free, &[]),
            Err(ExecError::Memory { op: "FREE", source: MemoryError::Freed { name: "x".into() } }),
            "{label}"
        );
        // GRID_ALLOC brings it back (a new buffer on the GPU: the compiled programs rebind).
        e.execute(&p, &[]).expect("runs");
        e.write_f32(x, &[1.0, 1.0, 1.0, 1.0, 1.0]).expect("size");
        e.execute(&double, &[]).expect("runs after a new GRID_ALLOC");
        assert_eq!(e.read_f32(x).expect("live"), vec![2.0; 5], "{label}");
        seen.push((label, doubled.iter().map(|v| v.to_bits()).collect::<Vec<_>>()));
    }
    let (_, want) = &seen[0];
    for (label, got) in &seen[1..] {
        assert_eq!(got, want, "{label} and the reference agree bit for bit (subnormal and overflow included)");
    }
}

#[test]
fn errors_name_the_tensor_the_instruction_and_the_positions() {
    let mut size_errors = Vec::new();
    for (label, mut e) in engines() {
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
            "{label}"
        );
        assert_eq!(e.execute(&step, &[]), Err(ExecError::ParamCount { expected: 1, got: 0 }), "{label}");
        assert!(matches!(e.execute(&step, &[ParamValue::F32(1.0)]), Err(ExecError::ParamKind { .. })), "{label}");
        let mut b = ProgramBuilder::new("use-never", e.memory_mut());
        b.silu(never, src).expect("valid");
        let use_never = b.finish();
        assert_eq!(
            e.execute(&use_never, &[]),
            Err(ExecError::Memory { op: "SILU", source: MemoryError::NotAllocated { name: "never".into() } }),
            "{label}"
        );
        let size_error = e.write_f32(src, &[1.0]);
        assert!(
            matches!(size_error, Err(ExecError::Memory { source: MemoryError::SizeMismatch { .. }, .. })),
            "{label}: {size_error:?}"
        );
        size_errors.push((label, size_error));
    }
    // The CPU engine's errors are the reference's exactly (the GPU's only in kind).
    let (_, want) = &size_errors[0];
    for (label, got) in size_errors.iter().filter(|(l, _)| l.starts_with("cpu")) {
        assert_eq!(got, want, "{label}: a write of the wrong size");
    }
}

/// The errors of every run of `program` at each position, and of reading `tensor` after
/// each, on `e`.
fn positions_and_reads(
    e: &mut dyn Engine,
    program: &purebee_isa::Program,
    positions: &[u32],
    tensor: purebee_isa::TensorId,
) -> Vec<Result<Vec<u8>, ExecError>> {
    positions.iter().map(|&p| e.execute(program, &[ParamValue::U32(p)]).and_then(|()| e.read(tensor))).collect()
}

#[test]
fn the_cpu_engine_fails_as_the_reference_does() {
    // Context overflows at, past and far past the end (u32::MAX), of KV_WRITE and ATTENTION;
    // FREE, then a use of a freed operand and a second FREE; an EMBED id past the
    // vocabulary; a host write of the wrong size; GRID_READ of a never allocated tensor.
    // Each must be the reference's error (or output), value for value.
    let mut seen = Vec::new();
    for (label, mut e) in engines().into_iter().filter(|(l, _)| !l.starts_with("gpu")) {
        let e = e.as_mut();
        let mut got: Vec<Result<Vec<u8>, ExecError>> = Vec::new();
        let mut b = ProgramBuilder::new("setup", e.memory_mut());
        let cache = b.alloc("cache", DType::F32, &[8, 4]).expect("declare");
        let vcache = b.alloc("vcache", DType::F32, &[8, 4]).expect("declare");
        let src = b.alloc("src", DType::F32, &[2, 4]).expect("declare");
        let q = b.alloc("q", DType::F32, &[2, 8]).expect("declare");
        let out = b.alloc("out", DType::F32, &[2, 8]).expect("declare");
        let never = b.declare("never", DType::F32, &[2, 4]).expect("declare");
        let setup = b.finish();
        e.execute(&setup, &[]).expect("allocates");

        let mut b = ProgramBuilder::new("kv", e.memory_mut());
        let pos = b.param_u32("pos").expect("param");
        b.kv_write(cache, src, pos).expect("valid");
        let kv = b.finish();
        got.extend(positions_and_reads(e, &kv, &[0, 6, 7, 8, u32::MAX - 1, u32::MAX], cache));

        let mut b = ProgramBuilder::new("attend", e.memory_mut());
        let pos = b.param_u32("pos").expect("param");
        b.attention(purebee_isa::ops::Attention {
            out,
            q,
            k_cache: cache,
            v_cache: vcache,
            head_dim: 4,
            rows: pos.into(),
        })
        .expect("valid");
        let attend = b.finish();
        got.extend(positions_and_reads(e, &attend, &[0, 6, 7, 8, u32::MAX], out));

        // An EMBED id past the vocabulary (the GPU writes zeros instead, embed.rs).
        let table = HostTensor::from_f32("t", Shape::matrix(3, 4).expect("shape"), vec![1.0; 12]).expect("size");
        let table = e.memory_mut().insert("table", table).expect("unique");
        let ids = HostTensor::from_u32("ids", Shape::vector(2), vec![1, 3]).expect("size");
        let ids = e.memory_mut().insert("ids", ids).expect("unique");
        let mut b = ProgramBuilder::new("embed", e.memory_mut());
        let rows = b.alloc("rows", DType::F32, &[2, 4]).expect("declare");
        b.embed(rows, table, ids).expect("valid");
        let embed = b.finish();
        got.push(e.execute(&embed, &[]).map(|()| Vec::new()));

        // A host write of the wrong size; GRID_READ of what was never allocated.
        got.push(e.write(src, &[0u8; 7]).map(|()| Vec::new()));
        got.push(e.read(never));

        // FREE, then each operand freed in turn.
        let mut b = ProgramBuilder::new("free-src", e.memory_mut());
        b.free(src).expect("live");
        let free = b.finish();
        got.push(e.execute(&free, &[]).map(|()| Vec::new()));
        got.push(e.execute(&kv, &[ParamValue::U32(0)]).map(|()| Vec::new()));
        got.push(e.execute(&free, &[]).map(|()| Vec::new()));
        let mut b = ProgramBuilder::new("free-cache", e.memory_mut());
        b.free(cache).expect("live");
        let free = b.finish();
        got.push(e.execute(&free, &[]).map(|()| Vec::new()));
        got.push(e.execute(&attend, &[ParamValue::U32(0)]).map(|()| Vec::new()));
        got.push(e.read(cache));
        seen.push((label, got));
    }
    let (_, want) = &seen[0];
    assert!(want.iter().any(|r| matches!(r, Err(ExecError::ContextOverflow { .. }))), "{want:?}");
    assert!(want.iter().any(|r| matches!(r, Err(ExecError::TokenOutOfRange { .. }))), "{want:?}");
    for (label, got) in &seen[1..] {
        assert_eq!(got.len(), want.len());
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            assert_eq!(g, w, "{label}, step {i}: the reference gives {w:?}");
        }
    }
}
