//! Times the GEMV kernels on a weight matrix that fits the L2 cache and on one that does
//! not (compute- vs memory-bound): `cargo run --release -p purebee-engine-cpu --example
//! kernel_speed`.

use std::time::Instant;

use purebee_engine_cpu::kernels::linear::{dot_row, dot_rows_tokens};
use purebee_engine_cpu::kernels::linear_int8;
use purebee_engine_cpu::kernels::norm::rms_norm_row;
use purebee_engine_cpu::kernels::silu::silu;
use purebee_engine_cpu::kernels::ternary::tokens::{packed_rows_tokens, ChunkLayout};
use purebee_engine_cpu::kernels::ternary::{quantize_row, tq2_0_row_sum, tq2_0_rows_sum};
use purebee_engine_cpu::Simd;
use purebee_memory::DType;

fn main() {
    // One spread-and-join of the thread pool, as every large instruction pays it.
    let threads = purebee_engine_cpu::physical_cores();
    let pool = purebee_engine_cpu::kernels::pool::Pool::new(threads).expect("threads");
    let joins = 200_000;
    let t = Instant::now();
    for _ in 0..joins {
        pool.run(threads, &|i| {
            std::hint::black_box(i);
        });
    }
    println!("pool of {threads}: {:.2} us per spread-and-join", t.elapsed().as_secs_f64() / joins as f64 * 1e6);
    drop(pool);

    let level = Simd::detect();
    let k = 576;
    for (dtype, bb) in [(DType::Q4_1, 20), (DType::Q8_0, 34), (DType::F16, 64)] {
        for rows in [512usize, 150_000] {
            let row_bytes = k / 32 * bb;
            let w: Vec<u8> = (0..rows * row_bytes).map(|i| (i * 7 % 251) as u8 & 0x3b).collect();
            let x: Vec<f32> = (0..k).map(|i| i as f32 * 0.001).collect();
            let reps = (200_000_000 / (rows * k)).max(1);
            let mut s = 0f32;
            let secs = best_of(5, || {
                for _ in 0..reps {
                    for r in 0..rows {
                        s += dot_row(level, dtype, &w[r * row_bytes..(r + 1) * row_bytes], &x);
                    }
                }
            });
            let elems = (reps * rows * k) as f64;
            println!(
                "{dtype:?} {rows} rows: {:.2} ns/block of 32, {:.1} GB/s ({s})",
                secs / (elems / 32.0) * 1e9,
                (reps * rows * row_bytes) as f64 / secs / 1e9
            );
            if !linear_int8::supports(dtype) {
                continue;
            }
            // The same rows against int8-block activations.
            let q: Vec<i8> = (0..k).map(|i| (i * 13 % 255) as i8).map(|v| v.max(-127)).collect();
            let inv_scale = vec![0.01f32; k / 32];
            let buf = linear_int8::Int8RowBuf::new(q, inv_scale);
            let a = buf.row();
            let mut out = vec![0f32; rows];
            let secs = best_of(5, || {
                for _ in 0..reps {
                    linear_int8::dot_rows(level, dtype, &w, a, &mut out);
                    s += out[rows - 1];
                }
            });
            println!(
                "{dtype:?} {rows} rows, int8 activations: {:.2} ns/block of 32, {:.1} GB/s ({s})",
                secs / (elems / 32.0) * 1e9,
                (reps * rows * row_bytes) as f64 / secs / 1e9
            );
            // Four tokens at once: the cost per token of a block once its bytes are in cache.
            let mut out4 = vec![0f32; 4 * rows];
            let secs = best_of(5, || {
                for _ in 0..reps {
                    linear_int8::dot_rows_tokens(level, dtype, &w, &[a, a, a, a], &mut out4);
                    s += out4[rows - 1];
                }
            });
            println!(
                "{dtype:?} {rows} rows, int8 activations, 4 tokens: {:.2} ns/block of 32 per token ({s})",
                secs / (4.0 * elems / 32.0) * 1e9,
            );
        }
    }
    several_tokens(level);
    prefill_tiles(level);
    decode_attention(level);
    activation_rounding(level);
    rms_norm(level);
    silu_row(level);
    let k = 2560;
    for (scales, d_hi) in [("one scale per row", None), ("a scale per block", Some(0x3cu8))] {
        for rows in [256usize, 100_000] {
            let row_bytes = k / 256 * 66;
            // Random codes; scales 1.0 (f16 0x3c00), or 1.0 + b/1024 for block b.
            let w: Vec<u8> = (0..rows * row_bytes)
                .map(|i| match (i % 66, d_hi) {
                    (64, None) => 0x00,
                    (64, Some(_)) => (i % row_bytes / 66) as u8,
                    (65, _) => 0x3c,
                    _ => (i * 7 % 251) as u8,
                })
                .collect();
            let q: Vec<i8> = (0..k).map(|i| (i * 13 % 255) as i8).collect();
            let reps = (500_000_000 / (rows * k)).max(1);
            let qsums = vec![7i32; k / 256];
            let mut s = 0f64;
            let secs = best_of(5, || {
                for _ in 0..reps {
                    for r in 0..rows {
                        s += tq2_0_row_sum(level, &w[r * row_bytes..(r + 1) * row_bytes], &q, &qsums);
                    }
                }
            });
            println!(
                "TQ2_0 {rows} rows, {scales}: {:.2} ns/block of 256, {:.1} GB/s ({s})",
                secs / ((reps * rows * k / 256) as f64) * 1e9,
                (reps * rows * row_bytes) as f64 / secs / 1e9
            );
            // The same rows 64 at a time, as the decode GEMV calls them.
            let mut ys = [0f64; 64];
            let secs = best_of(5, || {
                for _ in 0..reps {
                    for (run, n) in w.chunks(64 * row_bytes).map(|run| (run, run.len() / row_bytes)) {
                        tq2_0_rows_sum(level, run, row_bytes, &q, &qsums, &mut ys[..n]);
                        s += ys[0];
                    }
                }
            });
            println!(
                "TQ2_0 {rows} rows in runs of 64, {scales}: {:.2} ns/block of 256, {:.1} GB/s ({s})",
                secs / ((reps * rows * k / 256) as f64) * 1e9,
                (reps * rows * row_bytes) as f64 / secs / 1e9
            );
        }
    }
}

/// Prefill's BITLINEAR tile: 8 unpacked rows of 6912 codes against 128 tokens, in panels
/// of 1024 elements, with one scale per row (one block of k) or a scale per 256.
fn prefill_tiles(level: Simd) {
    use purebee_engine_cpu::kernels::ternary::{tiles_2x4, RowPair, TileSums};
    let (rows, k, n) = (8usize, 6912usize, 128usize);
    let codes: Vec<u8> = (0..rows * k).map(|i| (i * 7 % 251 % 3) as u8).collect();
    let q: Vec<i8> = (0..n * k).map(|i| (i * 13 % 255) as i8).collect();
    let groups = n / 4;
    for block in [k, 256] {
        let d = vec![1.0f64; k / block];
        let qsums = vec![[7i32; 4]; groups * (k / block)];
        let pairs: Vec<RowPair> = (0..rows / 2)
            .map(|p| RowPair {
                c: [&codes[2 * p * k..(2 * p + 1) * k], &codes[(2 * p + 1) * k..(2 * p + 2) * k]],
                block,
                d: [&d, &d],
                qsums: &qsums,
            })
            .collect();
        let mut sums = vec![TileSums::default(); pairs.len() * groups];
        let reps = 20;
        let secs = best_of(5, || {
            for _ in 0..reps {
                for p0 in (0..k).step_by(1024) {
                    tiles_2x4(level, &pairs, &mut sums, &q, k, p0..(p0 + 1024).min(k));
                }
            }
        });
        let macs = (reps * rows * k * n) as f64;
        println!("BITLINEAR prefill tiles, blocks of {block}: {:.1} GMAC/s ({})", macs / secs / 1e9, sums[0].y[0]);
    }
}

/// The fastest of `runs` timings of `work`, in seconds: this machine is shared, and the
/// minimum is the run least disturbed by others.
/// BITLINEAR's activation rounding of one decode row (each BITLINEAR input, on the calling
/// thread before the pool job).
fn activation_rounding(level: Simd) {
    for k in [2560usize, 6912] {
        let x: Vec<f32> = (0..k).map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.173).collect();
        let (mut q, mut sums) = (vec![0i8; k], vec![0i32; k / 128]);
        let reps = 10_000;
        let mut s = 0f32;
        let secs = best_of(5, || {
            for _ in 0..reps {
                s += quantize_row(level, &x, &mut q, &mut sums);
            }
        });
        println!("BITLINEAR activations, a row of {k}: {:.2} us ({s})", secs / reps as f64 * 1e6);
    }
}

/// RMS_NORM of one decode row, on the portable level and on this CPU's.
fn rms_norm(level: Simd) {
    for lvl in [Simd::PORTABLE, level] {
        let k = 2560;
        let x: Vec<f32> = (0..k).map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.173).collect();
        let w = vec![1.5f32; k];
        let mut out = vec![0f32; k];
        let reps = 10_000;
        let secs = best_of(5, || {
            for _ in 0..reps {
                rms_norm_row(lvl, &x, &w, 1e-6, &mut out);
            }
        });
        println!("RMS_NORM ({lvl}), a row of {k}: {:.2} us ({})", secs / reps as f64 * 1e6, out[7]);
    }
}

/// SILU of one decode row of the 2B shape's FFN.
fn silu_row(level: Simd) {
    let k = 6912;
    let x: Vec<f32> = (0..k).map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.173).collect();
    let mut out = vec![0f32; k];
    let reps = 10_000;
    let secs = best_of(5, || {
        for _ in 0..reps {
            silu(level, &x, &mut out);
        }
    });
    println!("SILU, a row of {k}: {:.2} us ({})", secs / reps as f64 * 1e6, out[7]);
}

fn best_of(runs: usize, mut work: impl FnMut()) -> f64 {
    (0..runs)
        .map(|_| {
            let t = Instant::now();
            work();
            t.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

/// ATTENTION's decode kernels on the 2B shape (5 kv heads of 128, 4 query heads each), over
/// 256 cache rows at a time: rows that stay in cache, and rows from memory.
fn decode_attention(level: Simd) {
    use purebee_engine_cpu::kernels::attention::{scores, weighted_values, Heads};
    let heads = Heads { hd: 128, group: 4, stride: 5 * 128 };
    let (n_head, len) = (20, 256);
    let q: Vec<f32> = (0..n_head * heads.hd).map(|i| (i % 13) as f32 * 0.1).collect();
    let (mut s, mut o) = (vec![0f32; n_head * len], vec![0f32; n_head * heads.hd]);
    for rows in [len, 1 << 17] {
        let keys: Vec<f32> = (0..rows * heads.stride).map(|i| (i % 97) as f32 * 0.01).collect();
        let values: Vec<f32> = (0..rows * heads.stride).map(|i| (i % 91) as f32 * 0.01).collect();
        let reps = (1 << 23) / rows + 1;
        let part = len * heads.stride;
        let score_secs = best_of(5, || {
            for _ in 0..reps {
                for k in keys.chunks_exact(part) {
                    scores(level, heads, &q, k, 0.1, &mut s);
                }
            }
        });
        let value_secs = best_of(5, || {
            for _ in 0..reps {
                for v in values.chunks_exact(part) {
                    weighted_values(level, heads, &s, len, v, &mut o);
                }
            }
        });
        let bytes = (reps * rows * heads.stride * 4) as f64;
        println!(
            "ATTENTION decode, {rows} cache rows: scores {:.1} GB/s, weighted values {:.1} GB/s ({})",
            bytes / score_secs / 1e9,
            bytes / value_secs / 1e9,
            o[0]
        );
    }
}

/// A batched decode step's kernels on one thread, 1 to 4 tokens: the 2B shape's F16 LM
/// head rows and TQ2_0 rows of 2560, in cache and from memory. The time per token falls as
/// long as the row's bytes, not the arithmetic, bind.
fn several_tokens(level: Simd) {
    let k = 2560;
    let x: Vec<f32> = (0..4 * k).map(|i| (i % 97) as f32 * 0.01).collect();
    let q: Vec<i8> = (0..4 * k).map(|i| (i * 13 % 255) as i8).collect();
    let xs: Vec<&[f32]> = x.chunks_exact(k).collect();
    let qs: Vec<&[i8]> = q.chunks_exact(k).collect();
    for rows in [64usize, 60_000] {
        for tokens in 1..=4 {
            let (row_bytes, label) = (2 * k, "F16");
            let w: Vec<u8> = (0..rows * row_bytes).map(|i| (i * 7 % 251) as u8 & 0x3b).collect();
            let mut out = vec![0f32; rows * tokens];
            let reps = (100_000_000 / (rows * row_bytes)).max(1);
            let secs = best_of(3, || {
                for _ in 0..reps {
                    dot_rows_tokens(level, DType::F16, &w, row_bytes, &xs[..tokens], &mut out);
                }
            });
            let gbs = (reps * rows * row_bytes) as f64 / secs / 1e9;
            let layout = ChunkLayout::tq2_0(k);
            let tq_bytes = 66 * k / 256;
            let wt: Vec<u8> = (0..rows * tq_bytes).map(|i| (i * 7 % 251) as u8).collect();
            let mut raws = vec![0i32; rows * tokens];
            let tq_secs = best_of(3, || {
                for _ in 0..reps {
                    packed_rows_tokens(level, &wt, tq_bytes, &layout, &qs[..tokens], &mut raws);
                }
            });
            let tq_gbs = (reps * rows * tq_bytes) as f64 / tq_secs / 1e9;
            println!(
                "{tokens} tokens, {rows} rows of {k}: {label} {gbs:.1} GB/s, TQ2_0 {tq_gbs:.1} GB/s ({} {})",
                out[0], raws[0]
            );
        }
    }
}
