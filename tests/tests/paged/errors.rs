//! The errors of paged rows (see the parent module's docs): a bad sequence, position or
//! page is the same `ExecError::IndexOutOfRange` on every engine, with nothing written; on
//! the GPU a table a kernel wrote is a typed error.

use std::sync::Arc;

use purebee_engine_cpu::{CpuEngine, CpuOptions};
use purebee_engine_ref::RefEngine;
use purebee_isa::ops::Attention;
use purebee_isa::{DType, Engine, ExecError, ProgramBuilder, TensorId};
use purebee_memory::HostTensor;
use purebee_tests::differential::{cpu_levels, cpu_test_threads, gpu_tests_skipped, new_gpu_engine, pair};
use purebee_tests::rng::SplitMix64;

use super::{bytes_of, f32_matrix, paged, u32_tensor, unique, Rows};

/// What is wrong with the tables of a failing run.
#[derive(Clone, Copy, Debug)]
enum Bad {
    /// A row's sequence past the page table's rows.
    Seq,
    /// A row's position past `max_pages · page_size`.
    Position,
    /// The page holding a row's own position lies outside the cache.
    OwnPage,
    /// A page before a row's own lies outside the cache (only ATTENTION reads it).
    PrefixPage,
}

/// The instruction under test.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Op {
    KvWrite,
    Attention,
}

/// Pages of 3 positions; two sequences of 7 and 10 positions over a 26-row cache (8 whole
/// pages, page 4 spare); rows at (seq 0, 6), (seq 1, 9), (seq 1, 3).
fn error_rows() -> Rows {
    Rows {
        page_size: 3,
        max_pages: 4,
        n_seq: 2,
        n_ctx: 26,
        pages: vec![5, 2, 7, 0xdead, 1, 6, 0, 3],
        pos: vec![6, 9, 3],
        seq: vec![0, 1, 1],
    }
}

/// The tables of [`error_rows`] made `bad`: (which table, its new words).
fn corrupt(bad: Bad) -> (usize, Vec<u32>) {
    let rows = error_rows();
    match bad {
        Bad::Seq => (1, vec![0, 2, 1]),
        Bad::Position => (0, vec![12, 9, 3]),
        Bad::OwnPage => {
            let mut pages = rows.pages;
            pages[4 + 3] = 8;
            (2, pages)
        }
        Bad::PrefixPage => {
            let mut pages = rows.pages;
            pages[4] = 9;
            (2, pages)
        }
    }
}

/// On `e`: allocates the tables, writes them from the host, runs `op` (which must succeed),
/// then makes the tables `bad` (through `Engine::write`, or `via_grid_write` in the program
/// that runs `op` again) and runs again. Returns that run's result, after checking that a
/// failed run left the tensor it writes (the cache, or the output) as it was.
fn bad_run<E: Engine>(e: &mut E, op: Op, bad: Bad, via_grid_write: bool) -> Result<Result<(), ExecError>, String> {
    let rows = error_rows();
    let (n, w, hd) = (rows.n(), 4, 2);
    let values = |len: usize, seed: u64| {
        let mut rng = SplitMix64(seed);
        (0..len).map(|_| rng.symmetric_f32()).collect::<Vec<_>>()
    };
    let mut made = Vec::new();
    let mut insert = |e: &mut E, t: HostTensor| {
        let id = e.memory_mut().insert(&unique("t"), t).expect("unique name");
        made.push(id);
        id
    };
    let src = insert(e, f32_matrix(n, w, values(n * w, 1)));
    let k = insert(e, f32_matrix(rows.n_ctx, w, values(rows.n_ctx * w, 2)));
    let v = insert(e, f32_matrix(rows.n_ctx, w, values(rows.n_ctx * w, 3)));
    let out = insert(e, f32_matrix(n, w, vec![7.0; n * w]));
    let mut b = ProgramBuilder::new(&unique("setup"), e.memory_mut());
    let tables = rows.tables();
    // Names the same on every engine (the errors name them), and not used twice on one.
    let prefix = format!("bad.{op:?}.{bad:?}.{via_grid_write}");
    let ids: Vec<TensorId> = ["pos", "seq", "pages"]
        .iter()
        .zip(&tables)
        .map(|(name, (_, shape))| b.alloc(&format!("{prefix}.{name}"), DType::U32, shape.dims()).expect("alloc"))
        .collect();
    let setup = b.finish();
    made.extend(&ids);
    let err = |e: ExecError| e.to_string();
    e.execute(&setup, &[]).map_err(err)?;
    for (&id, (words, _)) in ids.iter().zip(&tables) {
        e.write(id, &bytes_of(words)).map_err(err)?;
    }
    let (table, words) = corrupt(bad);
    let record = |b: &mut ProgramBuilder| match op {
        Op::KvWrite => b.kv_write(k, src, paged(&ids, rows.page_size)),
        Op::Attention => b.attention(Attention {
            out,
            q: src,
            k_cache: k,
            v_cache: v,
            head_dim: hd,
            rows: paged(&ids, rows.page_size),
        }),
    };
    let mut b = ProgramBuilder::new(&unique("good"), e.memory_mut());
    record(&mut b).map_err(|e| e.to_string())?;
    let good = b.finish();
    e.execute(&good, &[]).map_err(err)?;
    let written = if op == Op::KvWrite { k } else { out };
    let before = e.read(written).map_err(err)?;
    let result = if via_grid_write {
        let mut b = ProgramBuilder::new(&unique("bad"), e.memory_mut());
        b.grid_write(ids[table], Arc::from(bytes_of(&words))).map_err(|e| e.to_string())?;
        record(&mut b).map_err(|e| e.to_string())?;
        let bad = b.finish();
        e.execute(&bad, &[])
    } else {
        e.write(ids[table], &bytes_of(&words)).map_err(err)?;
        e.execute(&good, &[])
    };
    if result.is_err() && e.read(written).map_err(err)? != before {
        return Err(format!("{}: {op:?} with {bad:?} failed but changed '{}'", e.name(), e.memory().name(written)));
    }
    let mut b = ProgramBuilder::new(&unique("free"), e.memory_mut());
    for id in made {
        b.free(id).map_err(|e| e.to_string())?;
    }
    let free = b.finish();
    e.execute(&free, &[]).map_err(err)?;
    Ok(result)
}

/// What each error scenario gave on one engine: the scenario, the failing run's result.
type Outcomes = Vec<(String, Result<(), ExecError>)>;

/// Every scenario on `e`, in order.
fn bad_runs<E: Engine>(e: &mut E) -> Outcomes {
    let mut results = Vec::new();
    for op in [Op::KvWrite, Op::Attention] {
        for bad in [Bad::Seq, Bad::Position, Bad::OwnPage, Bad::PrefixPage] {
            for via_grid_write in [false, true] {
                let what = format!("{op:?} with {bad:?} (grid write: {via_grid_write})");
                let result = bad_run(e, op, bad, via_grid_write).unwrap_or_else(|m| panic!("{what}: {m}"));
                results.push((what, result));
            }
        }
    }
    results
}

#[test]
fn bad_tables_are_the_same_error_on_every_engine_and_write_nothing() {
    let reference = bad_runs(&mut RefEngine::new());
    for (what, result) in &reference {
        let expect_ok = what.starts_with("KvWrite with PrefixPage");
        match result {
            Ok(()) if expect_ok => {}
            Err(ExecError::IndexOutOfRange { .. }) if !expect_ok => {}
            other => panic!("reference engine: {what}: {other:?}"),
        }
    }
    let mut engines: Vec<(String, Outcomes)> = Vec::new();
    for level in cpu_levels() {
        let mut cpu = CpuEngine::new(&CpuOptions { threads: Some(cpu_test_threads()), simd: Some(level) })
            .unwrap_or_else(|e| panic!("{level}: {e}"));
        engines.push((format!("cpu ({level})"), bad_runs(&mut cpu)));
    }
    if !gpu_tests_skipped() {
        engines.push(("gpu".to_string(), bad_runs(&mut pair().engine)));
    }
    for (engine, results) in engines {
        for ((what, got), (_, want)) in results.iter().zip(&reference) {
            assert_eq!(got, want, "{engine} engine: {what}");
        }
    }
}

/// The GPU engine checks paged tables on the host; one that a kernel wrote (here ARGMAX's
/// output as the positions) is a typed error before anything runs, not a guess.
#[test]
fn a_table_a_kernel_wrote_is_a_typed_error_on_the_gpu() {
    if gpu_tests_skipped() {
        return;
    }
    let mut gpu = new_gpu_engine(&Default::default());
    let rows = error_rows();
    let w = 4;
    let mem = gpu.memory_mut();
    let logits = mem.insert("logits", f32_matrix(3, 10, (0..30).map(|i| (i % 7) as f32).collect())).expect("unique");
    let src = mem.insert("src", f32_matrix(3, w, vec![1.0; 3 * w])).expect("unique");
    let cache = mem.insert("cache", f32_matrix(rows.n_ctx, w, vec![0.0; rows.n_ctx * w])).expect("unique");
    let [_, seq, pages] = rows.tables().map(u32_tensor);
    let seq = mem.insert("seq", seq).expect("unique");
    let pages = mem.insert("pages", pages).expect("unique");
    let mut b = ProgramBuilder::new("argmax positions", mem);
    let pos = b.alloc("pos", DType::U32, &[3]).expect("alloc");
    b.argmax(pos, logits).expect("argmax");
    b.kv_write(cache, src, paged(&[pos, seq, pages], rows.page_size)).expect("kv write");
    let program = b.finish();
    let before = gpu.read(cache).expect("read");
    let err = gpu.execute(&program, &[]).expect_err("positions a kernel wrote").to_string();
    assert!(err.contains("KV_WRITE") && err.contains("'pos'") && err.contains("kernel"), "{err}");
    assert_eq!(gpu.read(cache).expect("read"), before, "nothing written");
}
