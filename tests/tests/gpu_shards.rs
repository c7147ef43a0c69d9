//! Tensors larger than the largest buffer, and reads that never block.
//!
//! **Shards.** Under WebGPU's default limits a buffer holds at most 256 MiB, and the 2B
//! model's F16 `token_embd.weight` (656 MB, read by EMBED and by the tied LM head's LINEAR)
//! does not fit one. The GPU engine stores such a tensor as several buffers of whole row
//! windows (`engine-gpu/src/tensors.rs`). Here its caps are lowered so that tables of a few
//! hundred KiB are cut: bindings of at most [`BINDING`] bytes (row windows of at most 64 KiB)
//! and buffers of at most [`BUFFER`] (shards of two windows or more), with WebGPU's default
//! limits requested. Each case checks that the tensor was sharded, and compares with two
//! oracles: the reference engine (EMBED is exact, as in `embed.rs`; LINEAR's data are small
//! integers whose every partial sum is exact in f32, as in `linear.rs`'s
//! `integer_data_is_exact`, so both compare exactly), and a GPU engine with the same binding
//! cap but no buffer cap, which dispatches the same kernels over the same windows from one
//! buffer: sharding must not change a bit. A whole tiny model must give the same tokens
//! sharded as not.
//!
//! **The read seam** a browser uses (`read_later`, then `read_ready` until true, then
//! `finish_read`) must give the bytes `read` gives, for one-buffer, ternary (two parts) and
//! sharded tensors, and GRID_READ of a sharded tensor must give the file layout's bytes.

use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use proptest::prelude::*;
use purebee_engine_gpu::{GpuEngine, GpuOptions};
use purebee_engine_ref::RefEngine;
use purebee_isa::{DType, Engine, IsaError, PendingRead, Program, ProgramBuilder, TensorId};
use purebee_memory::gguf::GgufFile;
use purebee_memory::{HostTensor, Shape};
use purebee_runtime::Model;
use purebee_tests::differential::{f32s, gpu_tests_skipped, new_gpu_engine, u32s};
use purebee_tests::rng::SplitMix64;
use purebee_tests::{case_ids, greedy_ignoring_eos, tiny};

/// The sharded engine's binding cap: row windows of at most 64 KiB.
const BINDING: u64 = 64 * 1024;
/// The sharded engine's buffer cap: not a whole number of 64 KiB windows, so a shard is the
/// windows that fit (two of 64 KiB, more of shorter ones).
const BUFFER: u64 = 160 * 1024;
/// Rows per window step (`kernels::WINDOW_ROW_STEP` in the engine).
const WINDOW_ROW_STEP: usize = 256;

/// The engines every case runs on, created once for the test binary.
struct Engines {
    /// Caps [`BINDING`] and [`BUFFER`], WebGPU's default limits.
    sharded: GpuEngine,
    /// The same binding cap and limits, no buffer cap: the same windows, one buffer each.
    windowed: GpuEngine,
    reference: RefEngine,
    case: u64,
}

fn engines() -> MutexGuard<'static, Engines> {
    static ENGINES: OnceLock<Mutex<Engines>> = OnceLock::new();
    let m = ENGINES.get_or_init(|| {
        let options = GpuOptions { max_binding: Some(BINDING), default_limits: true, ..GpuOptions::default() };
        let sharded = new_gpu_engine(&GpuOptions { max_buffer: Some(BUFFER), ..options.clone() });
        let windowed = new_gpu_engine(&options);
        Mutex::new(Engines { sharded, windowed, reference: RefEngine::new(), case: 0 })
    });
    // A failed case poisons the lock; the engines are still usable.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

type Outputs = Vec<Vec<u8>>;

/// Builds a case's program from the input handles; returns the handles to read.
type Build<'a> =
    dyn Fn(&mut ProgramBuilder, &dyn Fn(&str) -> String, &[TensorId]) -> Result<Vec<TensorId>, IsaError> + 'a;

/// Inserts `inputs`, builds and runs the program, reads the outputs, calls `inspect` with the
/// engine, the program and the input handles, and frees everything the case made.
fn run_on<E: Engine, T>(
    engine: &mut E,
    prefix: &str,
    inputs: &[(&str, HostTensor)],
    build: &Build,
    inspect: impl FnOnce(&mut E, &Program, &[TensorId]) -> T,
) -> (Outputs, T) {
    let name = |n: &str| format!("{prefix}.{n}");
    let ids: Vec<TensorId> =
        inputs.iter().map(|(n, t)| engine.memory_mut().insert(&name(n), t.clone()).expect("unique name")).collect();
    let mut b = ProgramBuilder::new(prefix, engine.memory_mut());
    let outs = build(&mut b, &name, &ids).expect("the program builds");
    let program = b.finish();
    engine.execute(&program, &[]).unwrap_or_else(|e| panic!("{} engine: {e}", engine.name()));
    let got =
        outs.iter().map(|&o| engine.read(o).unwrap_or_else(|e| panic!("{} engine: {e}", engine.name()))).collect();
    let seen = inspect(engine, &program, &ids);
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

/// What one case produced on each engine.
struct Ran {
    sharded: Outputs,
    windowed: Outputs,
    reference: Outputs,
    /// The buffers of each part of the first input on the sharded engine.
    buffers: Vec<usize>,
    /// The kernels the sharded engine dispatched.
    kernels: Vec<String>,
}

impl Engines {
    fn run(
        &mut self,
        inputs: &[(&str, HostTensor)],
        build: impl Fn(&mut ProgramBuilder, &dyn Fn(&str) -> String, &[TensorId]) -> Result<Vec<TensorId>, IsaError>,
    ) -> Ran {
        self.case += 1;
        let prefix = format!("case{}", self.case);
        let (sharded, (buffers, kernels)) = run_on(&mut self.sharded, &prefix, inputs, &build, |e, p, ids| {
            (e.tensor_buffers(ids[0]), e.dispatched_kernels(p).unwrap_or_default())
        });
        let (windowed, ()) = run_on(&mut self.windowed, &prefix, inputs, &build, |_, _, _| ());
        let (reference, ()) = run_on(&mut self.reference, &prefix, inputs, &build, |_, _, _| ());
        Ran { sharded, windowed, reference, buffers, kernels }
    }
}

/// Requires equal bits (or NaN on both sides); names the index, both values and their bits.
fn assert_bits_equal(got: &[f32], want: &[f32], what: &str) -> Result<(), String> {
    if got.len() != want.len() {
        return Err(format!("{what}: {} values, expected {}", got.len(), want.len()));
    }
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        if g.to_bits() != w.to_bits() && !(g.is_nan() && w.is_nan()) {
            return Err(format!(
                "{what}: index {i}: got {g} ({:#010x}), expected {w} ({:#010x}), difference {}",
                g.to_bits(),
                w.to_bits(),
                g - w
            ));
        }
    }
    Ok(())
}

/// Every output of the sharded engine bit-equal to the unsharded windowed engine's and to the
/// reference's, and the first input in more than one buffer.
fn check_ran(ran: &Ran, what: &str) -> Result<(), String> {
    if ran.buffers.iter().all(|&n| n < 2) {
        return Err(format!("{what}: not sharded (buffers per part {:?})", ran.buffers));
    }
    for (o, ((s, w), r)) in ran.sharded.iter().zip(&ran.windowed).zip(&ran.reference).enumerate() {
        assert_bits_equal(&f32s(s), &f32s(w), &format!("{what}: output {o}, sharded vs one buffer"))?;
        assert_bits_equal(&f32s(s), &f32s(r), &format!("{what}: output {o}, sharded vs the reference engine"))?;
    }
    Ok(())
}

/// Bytes per row of the widest part of a `[rows, cols]` tensor's GPU layout: the ternary
/// codes, or the file's row.
fn widest_row(dtype: DType, cols: usize) -> usize {
    if dtype.is_ternary() {
        cols / 4
    } else {
        dtype.row_bytes(cols).expect("whole blocks")
    }
}

/// Rows per shard of a tensor whose widest part has `widest` bytes a row: the whole windows
/// of the sharded engine's binding cap that fit its buffer cap (as `tensors.rs` says).
fn shard_rows(widest: usize) -> usize {
    let window = (BINDING as usize / widest) / WINDOW_ROW_STEP * WINDOW_ROW_STEP;
    window * (BUFFER as usize / (window * widest))
}

/// Row lengths of `dtype` whose widest part has 40 ..= 256 bytes a row (windows of at least
/// 256 rows under [`BINDING`], and at most 16384 rows, whose one-token LINEAR output fits
/// one binding): any length for the plain types (most not a multiple of 8), whole blocks
/// otherwise.
fn cols_for(dtype: DType) -> BoxedStrategy<usize> {
    match dtype {
        DType::F32 => (10usize..=64).boxed(),
        DType::F16 | DType::BF16 => (20usize..=128).boxed(),
        DType::Q4_0 => (3usize..=14).prop_map(|b| 32 * b).boxed(),
        DType::Q4_1 => (2usize..=12).prop_map(|b| 32 * b).boxed(),
        DType::Q8_0 => (2usize..=7).prop_map(|b| 32 * b).boxed(),
        DType::I2_S => (2usize..=8).prop_map(|b| 128 * b).boxed(),
        _ => (1usize..=4).prop_map(|b| 256 * b).boxed(),
    }
}

/// A shape of `dtype` whose table is 2.2 to 3.6 buffers: (dtype, rows, cols), rows rarely a
/// multiple of anything.
fn shape() -> impl Strategy<Value = (DType, usize, usize)> {
    prop::sample::select(purebee_tests::WEIGHT_DTYPES.to_vec())
        .prop_flat_map(|dtype| (Just(dtype), cols_for(dtype), 22usize..=36))
        .prop_map(|(dtype, cols, tenths)| {
            let rows = BUFFER as usize * tenths / 10 / widest_row(dtype, cols) + 1;
            (dtype, rows, cols)
        })
}

/// Random table bytes (every bit pattern, NaN and infinities included), but for I2_S a normal
/// scale (as `embed.rs` explains: a GPU may flush a subnormal scale's products).
fn random_table(dtype: DType, rows: usize, cols: usize, rng: &mut SplitMix64) -> HostTensor {
    let mut bytes: Vec<u8> = (0..dtype.tensor_bytes(rows, cols).expect("whole blocks")).map(|_| rng.byte()).collect();
    if dtype == DType::I2_S {
        let at = rows * cols / 4;
        bytes[at..at + 4].copy_from_slice(&(rng.range(0.25, 4.0) as f32).to_le_bytes());
    }
    HostTensor::from_bytes("table", dtype, Shape::matrix(rows, cols).expect("shape"), &bytes).expect("sizes agree")
}

/// The f16 bits of a small integer.
fn f16_int(v: i32) -> [u8; 2] {
    half::f16::from_f32(v as f32).to_le_bytes()
}

/// A weight that decodes to integers of at most 8 in magnitude (Q8_0: 128; ternary: the
/// trits, code 3 included): random codes with a scale of 1 (and Q4_1's minimum an integer).
fn integer_weight(dtype: DType, rows: usize, cols: usize, rng: &mut SplitMix64) -> HostTensor {
    let n = rows * cols;
    let small = |rng: &mut SplitMix64| rng.below(17) as i32 - 8;
    let mut out = Vec::with_capacity(dtype.tensor_bytes(rows, cols).expect("whole blocks"));
    match dtype {
        DType::F32 => (0..n).for_each(|_| out.extend_from_slice(&(small(rng) as f32).to_le_bytes())),
        DType::F16 => (0..n).for_each(|_| out.extend_from_slice(&f16_int(small(rng)))),
        DType::BF16 => {
            (0..n).for_each(|_| out.extend_from_slice(&(((small(rng) as f32).to_bits() >> 16) as u16).to_le_bytes()))
        }
        DType::I2_S => {
            out.extend((0..n / 4).map(|_| rng.byte()));
            (0..8).for_each(|_| out.extend_from_slice(&1f32.to_le_bytes()));
        }
        _ => {
            let (len, bytes) = (dtype.block_len(), dtype.block_bytes());
            for _ in 0..n / len {
                let mut block: Vec<u8> = (0..bytes).map(|_| rng.byte()).collect();
                match dtype {
                    DType::Q4_0 | DType::Q8_0 => block[..2].copy_from_slice(&f16_int(1)),
                    DType::Q4_1 => {
                        block[..2].copy_from_slice(&f16_int(1));
                        block[2..4].copy_from_slice(&f16_int(small(rng)));
                    }
                    _ => block[bytes - 2..].copy_from_slice(&f16_int(1)),
                }
                out.extend_from_slice(&block);
            }
        }
    }
    HostTensor::from_bytes("w", dtype, Shape::matrix(rows, cols).expect("shape"), &out).expect("sizes agree")
}

/// Small integers `[n, k]`.
fn integer_x(n: usize, k: usize, rng: &mut SplitMix64) -> HostTensor {
    let v = (0..n * k).map(|_| rng.below(17) as f32 - 8.0).collect();
    HostTensor::from_f32("x", Shape::matrix(n, k).expect("shape"), v).expect("sizes agree")
}

/// Ids: the first and last rows, the rows on both sides of every shard boundary, and
/// random ones.
fn ids_across_shards(rows: usize, widest: usize, rng: &mut SplitMix64) -> Vec<u32> {
    let mut ids = vec![0, rows - 1];
    let step = shard_rows(widest);
    for boundary in (step..rows).step_by(step) {
        ids.extend([boundary - 1, boundary]);
    }
    ids.extend((0..8).map(|_| rng.below(rows as u64) as usize));
    ids.into_iter().map(|i| i as u32).collect()
}

fn embed_case(dtype: DType, rows: usize, cols: usize, seed: u64) -> Result<(), String> {
    let mut rng = SplitMix64::new(seed);
    let table = random_table(dtype, rows, cols, &mut rng);
    let mut ids = ids_across_shards(rows, widest_row(dtype, cols), &mut rng);
    // The output [n, cols] is bound whole: at most one binding.
    ids.truncate(BINDING as usize / (4 * cols));
    let n = ids.len();
    let inputs = [("table", table), ("ids", HostTensor::from_u32("ids", Shape::vector(n), ids).expect("size"))];
    let ran = engines().run(&inputs, |b, name, t| {
        let out = b.alloc(&name("out"), DType::F32, &[n, cols])?;
        b.embed(out, t[0], t[1])?;
        Ok(vec![out])
    });
    check_ran(&ran, &format!("EMBED {dtype} [{rows}, {cols}] seed {seed}"))
}

/// LINEAR of `n` tokens, fewer where the output `[n, rows]` would not fit one binding (the
/// engine binds a LINEAR's output whole).
fn linear_case(dtype: DType, rows: usize, cols: usize, n: usize, seed: u64) -> Result<(), String> {
    let n = n.min(BINDING as usize / (4 * rows)).max(1);
    let mut rng = SplitMix64::new(seed);
    let inputs = [("w", integer_weight(dtype, rows, cols, &mut rng)), ("x", integer_x(n, cols, &mut rng))];
    let ran = engines().run(&inputs, |b, name, ids| {
        let out = b.alloc(&name("out"), DType::F32, &[n, rows])?;
        b.linear(out, ids[1], ids[0])?;
        Ok(vec![out])
    });
    check_ran(&ran, &format!("LINEAR {dtype} [{rows}, {cols}] n = {n} seed {seed}"))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn embed_from_a_sharded_table_matches_the_reference_bit_for_bit((dtype, rows, cols) in shape(), seed in any::<u64>()) {
        if gpu_tests_skipped() { return Ok(()); }
        embed_case(dtype, rows, cols, seed).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn linear_over_a_sharded_weight_matches_the_reference_exactly(
        (dtype, rows, cols) in shape(),
        n in prop_oneof![Just(1usize), 2usize..=5],
        seed in any::<u64>(),
    ) {
        if gpu_tests_skipped() { return Ok(()); }
        linear_case(dtype, rows, cols, n, seed).map_err(TestCaseError::fail)?;
    }
}

#[test]
fn every_weight_dtype_embeds_and_multiplies_from_shards() {
    if gpu_tests_skipped() {
        return;
    }
    for (i, dtype) in purebee_tests::WEIGHT_DTYPES.into_iter().enumerate() {
        // Widest parts of 96 .. 204 bytes a row.
        let cols = match dtype {
            DType::F32 => 48,
            DType::F16 | DType::BF16 => 96,
            d if d.is_ternary() => 768,
            _ => 192,
        };
        let rows = BUFFER as usize * 3 / widest_row(dtype, cols) + 37;
        embed_case(dtype, rows, cols, i as u64).unwrap_or_else(|e| panic!("{e}"));
        linear_case(dtype, rows, cols, 1, i as u64).unwrap_or_else(|e| panic!("{e}"));
        linear_case(dtype, rows, cols, 3, i as u64).unwrap_or_else(|e| panic!("{e}"));
    }
}

#[test]
fn the_lm_head_with_its_argmax_fused_over_a_sharded_f16_weight() {
    if gpu_tests_skipped() {
        return;
    }
    // F16 [5001, 80]: 160 bytes a row, windows of 256 rows, shards of 1024: 5 shards. The
    // largest value is made unique so that the reference's first-index rule is not needed.
    let (rows, cols) = (5001, 80);
    let mut rng = SplitMix64::new(7);
    let mut w = integer_weight(DType::F16, rows, cols, &mut rng);
    let x = HostTensor::from_f32("x", Shape::matrix(1, cols).expect("shape"), vec![1.0; cols]).expect("size");
    for (row, v) in [(1023, 9), (4097, 10)] {
        w.bytes_mut()[row * cols * 2..(row + 1) * cols * 2].copy_from_slice(&f16_int(v).repeat(cols));
    }
    let inputs = [("w", w), ("x", x)];
    let ran = engines().run(&inputs, |b, name, ids| {
        let logits = b.alloc(&name("logits"), DType::F32, &[1, rows])?;
        let token = b.alloc(&name("token"), DType::U32, &[1])?;
        b.linear(logits, ids[1], ids[0])?;
        b.argmax(token, logits)?;
        Ok(vec![logits, token])
    });
    assert!(ran.kernels.iter().any(|k| k.contains("linear_argmax")), "the fused LM head ran: {:?}", ran.kernels);
    assert_eq!(u32s(&ran.sharded[1]), vec![4097]);
    check_ran(&ran, "LINEAR + ARGMAX F16 [5001, 80]").unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn top_k_over_a_sharded_input_written_by_the_host() {
    if gpu_tests_skipped() {
        return;
    }
    // F32 [3000, 40]: 160 bytes a row, 480 KB: three shards; distinct values, so the order
    // is the values'.
    let (rows, cols, k) = (3000, 40, 5);
    let mut rng = SplitMix64::new(11);
    let mut values: Vec<f32> = (0..rows * cols).map(|i| i as f32).collect();
    for i in (1..values.len()).rev() {
        values.swap(i, rng.below(i as u64 + 1) as usize);
    }
    let x = HostTensor::from_f32("x", Shape::matrix(rows, cols).expect("shape"), values).expect("size");
    let ran = engines().run(&[("x", x)], |b, name, ids| {
        let v = b.alloc(&name("values"), DType::F32, &[rows, k])?;
        let i = b.alloc(&name("ids"), DType::U32, &[rows, k])?;
        b.top_k(v, i, ids[0], k as u32)?;
        Ok(vec![v, i])
    });
    check_ran(&ran, "TOP_K F32 [3000, 40]").unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn int8_block_activations_over_a_sharded_q8_0_weight_give_the_unsharded_bits() {
    if gpu_tests_skipped() {
        return;
    }
    // Int8-block rounding makes the products inexact; the windowed engine (same windows,
    // one buffer) is the oracle here, and `linear_int8_gpu.rs` holds it to the reference.
    let (rows, cols) = (4001, 160);
    let mut rng = SplitMix64::new(3);
    let x: Vec<f32> = (0..2 * cols).map(|_| rng.range(-2.0, 2.0) as f32).collect();
    for n in [1, 2] {
        let inputs = [
            ("w", integer_weight(DType::Q8_0, rows, cols, &mut rng)),
            (
                "x",
                HostTensor::from_f32("x", Shape::matrix(n, cols).expect("shape"), x[..n * cols].to_vec())
                    .expect("size"),
            ),
        ];
        let ran = engines().run(&inputs, |b, name, ids| {
            let out = b.alloc(&name("out"), DType::F32, &[n, rows])?;
            b.linear_with(out, ids[1], ids[0], purebee_isa::ops::LinearActivations::Int8Blocks)?;
            Ok(vec![out])
        });
        assert!(ran.buffers[0] > 1, "sharded: {:?}", ran.buffers);
        assert_bits_equal(&f32s(&ran.sharded[0]), &f32s(&ran.windowed[0]), &format!("n = {n}"))
            .unwrap_or_else(|e| panic!("{e}"));
    }
}

/// Finishes `pending` the way a browser must: `read_ready` until true (polled here with
/// short sleeps, where a page would yield to its event loop), then `finish_read`.
fn finish_when_ready(engine: &mut GpuEngine, pending: PendingRead) -> Vec<u8> {
    let start = Instant::now();
    while !engine.read_ready(&pending) {
        assert!(start.elapsed() < Duration::from_secs(60), "a read not ready after 60 s");
        std::thread::sleep(Duration::from_millis(1));
    }
    engine.finish_read(pending).expect("a ready read finishes")
}

#[test]
fn reads_later_when_ready_give_what_read_gives_and_the_file_bytes() {
    if gpu_tests_skipped() {
        return;
    }
    let mut e = engines();
    let engine = &mut e.sharded;
    let mut rng = SplitMix64::new(5);
    // One buffer (F32), two parts (TQ2_0, repacked: its file bytes are rebuilt), shards of
    // F16 rows (3 of them) and of Q8_0 rows whose byte count is not whole words.
    let f32_t = HostTensor::from_f32("a", Shape::matrix(3, 5).expect("shape"), (0..15).map(|i| i as f32).collect())
        .expect("size");
    let tensors = [
        ("seam.f32", f32_t),
        ("seam.tq2_0", integer_weight(DType::TQ2_0, 7, 512, &mut rng)),
        ("seam.f16", integer_weight(DType::F16, 1700, 120, &mut rng)),
        ("seam.q8_0", integer_weight(DType::Q8_0, 9001, 32, &mut rng)),
    ];
    let ids: Vec<TensorId> =
        tensors.iter().map(|(n, t)| engine.memory_mut().insert(n, t.clone()).expect("unique name")).collect();
    for (&id, (name, t)) in ids.iter().zip(&tensors) {
        let read = engine.read(id).expect("reads");
        assert_eq!(read, t.bytes(), "{name}: GRID_READ gives the file layout's bytes");
        let pending = engine.read_later(id).expect("begins");
        assert!(pending.ticket_number().is_some(), "{name}: a read in flight");
        assert_eq!(finish_when_ready(engine, pending), read, "{name}: read_later, read_ready, finish_read");
    }
    assert!(engine.tensor_buffers(ids[2])[0] >= 3 && engine.tensor_buffers(ids[3])[0] >= 3, "sharded");
    // Several at once, in one submission, finished in another order.
    let mut pending = engine.read_later_all(&ids).expect("begins");
    for i in [2, 0, 3, 1] {
        let p = std::mem::replace(&mut pending[i], PendingRead::ready(Vec::new()));
        assert_eq!(finish_when_ready(engine, p), tensors[i].1.bytes(), "{}: read_later_all", tensors[i].0);
    }
    // A host write into a sharded tensor lands in every shard.
    let mut bytes = tensors[3].1.bytes().to_vec();
    bytes.iter_mut().step_by(7).for_each(|b| *b = b.wrapping_add(1));
    engine.write(ids[3], &bytes).expect("writes");
    let pending = engine.read_later(ids[3]).expect("begins");
    assert_eq!(finish_when_ready(engine, pending), bytes, "a write, then a read");
    // A finished ticket is unknown.
    let pending = engine.read_later(ids[0]).expect("begins");
    let ticket = pending.ticket_number().expect("in flight");
    finish_when_ready(engine, pending);
    assert!(engine.finish_read(PendingRead::ticket(ticket)).is_err(), "a ticket finishes once");
}

#[test]
fn grid_write_of_constant_data_into_a_sharded_tensor_then_embed() {
    if gpu_tests_skipped() {
        return;
    }
    // F16 [2500, 100]: 200 bytes a row, windows of 256 rows (51 KB), shards of 768.
    let (rows, cols) = (2500, 100);
    let mut rng = SplitMix64::new(9);
    let table = integer_weight(DType::F16, rows, cols, &mut rng);
    let data: Arc<[u8]> = table.bytes().into();
    let ids = vec![0u32, 767, 768, 1535, 1536, 2499, 1234];
    let n = ids.len();
    let mut e = engines();
    let engine = &mut e.sharded;
    let ids_t = engine
        .memory_mut()
        .insert("gw.ids", HostTensor::from_u32("ids", Shape::vector(n), ids.clone()).expect("size"))
        .expect("unique");
    let mut b = ProgramBuilder::new("grid write", engine.memory_mut());
    let t = b.declare("gw.table", DType::F16, &[rows, cols]).expect("declares");
    let out = b.alloc("gw.out", DType::F32, &[n, cols]).expect("allocates");
    b.grid_alloc(t).expect("allocates");
    b.grid_write(t, data).expect("writes");
    b.embed(out, t, ids_t).expect("embeds");
    let program = b.finish();
    engine.execute(&program, &[]).expect("runs");
    assert!(engine.tensor_buffers(t)[0] >= 3, "sharded: {:?}", engine.tensor_buffers(t));
    assert_eq!(engine.read(t).expect("reads"), table.bytes(), "GRID_WRITE, then GRID_READ");
    let got = f32s(&engine.read(out).expect("reads"));
    let f16s: Vec<f32> =
        table.bytes().chunks_exact(2).map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32()).collect();
    let want: Vec<f32> = ids.iter().flat_map(|&i| f16s[i as usize * cols..(i as usize + 1) * cols].to_vec()).collect();
    assert_bits_equal(&got, &want, "EMBED of the written rows").unwrap_or_else(|e| panic!("{e}"));
}

/// The greedy tokens of a tiny model's `p16` prompt on `engine`.
fn greedy_tokens(model_name: &str, engine: GpuEngine, tokens: usize) -> (Vec<u32>, Vec<usize>) {
    let file = GgufFile::open(tiny(&format!("{model_name}.gguf"))).expect("fixture opens");
    let mut model = Model::load(engine, &file).expect("model loads");
    let mut session = model.new_session(64).expect("session allocates");
    let prompt = case_ids(model_name, "p16", "prompt_token_ids");
    let g =
        purebee_runtime::generate(&mut model, &mut session, &prompt, &greedy_ignoring_eos(tokens), |_| false, |_| {})
            .expect("generates");
    let embd = model.engine().memory().id("token_embd.weight").expect("the embedding");
    (g.generated, model.engine().tensor_buffers(embd))
}

#[test]
fn a_tiny_model_gives_the_same_tokens_with_its_embedding_sharded() {
    if gpu_tests_skipped() {
        return;
    }
    // The tied embedding and LM head, F16 [8192, 256] (4 MiB) or F32 (8 MiB), in windows of
    // 512 KiB (the F32 model's largest BITLINEAR weight, bound whole) and buffers of 1 MiB,
    // under WebGPU's default limits: 4 or 8 shards.
    let sharded = GpuOptions {
        max_binding: Some(512 * 1024),
        max_buffer: Some(1024 * 1024),
        default_limits: true,
        ..GpuOptions::default()
    };
    for model in ["tiny_b158_i2_s", "tiny_b158_f32"] {
        let (want, whole) = greedy_tokens(model, new_gpu_engine(&GpuOptions::default()), 20);
        let (got, buffers) = greedy_tokens(model, new_gpu_engine(&sharded), 20);
        assert_eq!(whole, vec![1], "{model}: one buffer without caps");
        assert!(buffers[0] >= 4, "{model}: the embedding in shards: {buffers:?}");
        assert_eq!(got, want, "{model}: sharded vs one buffer");
    }
}
