//! Times the GEMV kernels on a weight matrix that fits the L2 cache and on one that does
//! not (compute- vs memory-bound): `cargo run --release -p purebee-engine-cpu --example
//! kernel_speed`.

use std::time::Instant;

use purebee_engine_cpu::kernels::linear::dot_row;
use purebee_engine_cpu::kernels::ternary::tq2_0_row_sum;
use purebee_engine_cpu::SimdLevel;
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

    let level = SimdLevel::detect();
    let k = 576;
    for (dtype, bb) in [(DType::Q4_1, 20), (DType::Q8_0, 34), (DType::F16, 64)] {
        for rows in [512usize, 150_000] {
            let row_bytes = k / 32 * bb;
            let w: Vec<u8> = (0..rows * row_bytes).map(|i| (i * 7 % 251) as u8 & 0x3b).collect();
            let x: Vec<f32> = (0..k).map(|i| i as f32 * 0.001).collect();
            let reps = (200_000_000 / (rows * k)).max(1);
            let t = Instant::now();
            let mut s = 0f32;
            for _ in 0..reps {
                for r in 0..rows {
                    s += dot_row(level, dtype, &w[r * row_bytes..(r + 1) * row_bytes], &x);
                }
            }
            let secs = t.elapsed().as_secs_f64();
            let elems = (reps * rows * k) as f64;
            println!(
                "{dtype:?} {rows} rows: {:.2} ns/block of 32, {:.1} GB/s ({s})",
                secs / (elems / 32.0) * 1e9,
                (reps * rows * row_bytes) as f64 / secs / 1e9
            );
        }
    }
    let k = 2560;
    for rows in [256usize, 100_000] {
        let row_bytes = k / 256 * 66;
        // Random codes; every block's scale d = 1.0 (f16 0x3c00) so the checksum is finite.
        let w: Vec<u8> = (0..rows * row_bytes)
            .map(|i| match i % 66 {
                64 => 0x00,
                65 => 0x3c,
                _ => (i * 7 % 251) as u8,
            })
            .collect();
        let q: Vec<i8> = (0..k).map(|i| (i * 13 % 255) as i8).collect();
        let reps = (500_000_000 / (rows * k)).max(1);
        let t = Instant::now();
        let mut s = 0f64;
        let qsums = vec![7i32; k / 256];
        for _ in 0..reps {
            for r in 0..rows {
                s += tq2_0_row_sum(level, &w[r * row_bytes..(r + 1) * row_bytes], &q, &qsums);
            }
        }
        let secs = t.elapsed().as_secs_f64();
        println!(
            "TQ2_0 {rows} rows: {:.2} ns/block of 256, {:.1} GB/s ({s})",
            secs / ((reps * rows * k / 256) as f64) * 1e9,
            (reps * rows * row_bytes) as f64 / secs / 1e9
        );
    }
}
