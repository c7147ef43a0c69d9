//! Tensors larger than one binding (the 2B model's 657 MB F16 embedding and LM head exceed
//! lavapipe's 128 MiB `max_storage_buffer_binding_size`) are bound as row windows, one
//! dispatch each, transparently to the ISA. Here the GPU engine's binding cap is lowered to
//! 256 KiB so that tables of a few hundred KiB are split, and the results are compared with
//! the reference engine. The data are small integers, so every sum is exact in f32 and the
//! comparison is exact.

use purebee_isa::DType;
use purebee_memory::quant::encode::encode_tq2_0_row;
use purebee_memory::{HostTensor, Shape};
use purebee_tests::differential::{f32s, gpu_tests_skipped, windowed_pair};

/// An F16 [rows, cols] table of small integers (exact in f16), from a simple hash.
fn f16_table(rows: usize, cols: usize) -> HostTensor {
    let bytes: Vec<u8> =
        (0..rows * cols).flat_map(|i| half::f16::from_f32(((i * 7919 + 13) % 9) as f32 - 4.0).to_le_bytes()).collect();
    HostTensor::from_bytes("t", DType::F16, Shape::new(&[rows, cols]).expect("shape"), &bytes).expect("size")
}

fn x_of(n: usize, k: usize) -> HostTensor {
    let v: Vec<f32> = (0..n * k).map(|i| ((i * 31 + 7) % 7) as f32 - 3.0).collect();
    HostTensor::from_f32("x", Shape::new(&[n, k]).expect("shape"), v).expect("size")
}

#[test]
fn linear_over_an_f16_weight_split_in_windows() {
    if gpu_tests_skipped() {
        return;
    }
    // 1000 rows of 512 bytes: 512 KB, two windows of at most 512 rows.
    for n in [1, 3] {
        let inputs = [("w", f16_table(1000, 256)), ("x", x_of(n, 256))];
        let (gpu, reference) = windowed_pair().run(&inputs, &[], |b, name, ids| {
            let out = b.alloc(&name("out"), DType::F32, &[n, 1000])?;
            b.linear(out, ids[1], ids[0])?;
            Ok(vec![out])
        });
        assert_eq!(f32s(&gpu[0]), f32s(&reference[0]), "LINEAR F16 [1000, 256], n = {n}");
    }
}

#[test]
fn linear_over_a_ternary_weight_split_in_windows() {
    if gpu_tests_skipped() {
        return;
    }
    // TQ2_0 [5000, 256]: 64 bytes of codes and 4 of scales per row, 340 KB: two windows.
    let rows = 5000;
    let mut bytes = Vec::new();
    for r in 0..rows {
        let trits: Vec<i8> = (0..256).map(|i| ((r * 257 + i * 11) % 3) as i8 - 1).collect();
        bytes.extend(encode_tq2_0_row(&trits, half::f16::from_f32(0.5)).expect("whole blocks"));
    }
    let w = HostTensor::from_bytes("w", DType::TQ2_0, Shape::new(&[rows, 256]).expect("shape"), &bytes).expect("size");
    let inputs = [("w", w), ("x", x_of(1, 256))];
    let (gpu, reference) = windowed_pair().run(&inputs, &[], |b, name, ids| {
        let out = b.alloc(&name("out"), DType::F32, &[1, rows])?;
        b.linear(out, ids[1], ids[0])?;
        Ok(vec![out])
    });
    assert_eq!(f32s(&gpu[0]), f32s(&reference[0]), "LINEAR TQ2_0 [5000, 256]");
}

#[test]
fn embed_from_an_f16_table_split_in_windows() {
    if gpu_tests_skipped() {
        return;
    }
    let ids = vec![0u32, 999, 511, 512, 700, 3];
    let n = ids.len();
    let inputs =
        [("t", f16_table(1000, 256)), ("ids", HostTensor::from_u32("ids", Shape::vector(n), ids).expect("size"))];
    let (gpu, reference) = windowed_pair().run(&inputs, &[], |b, name, t| {
        let out = b.alloc(&name("out"), DType::F32, &[n, 256])?;
        b.embed(out, t[0], t[1])?;
        Ok(vec![out])
    });
    assert_eq!(f32s(&gpu[0]), f32s(&reference[0]), "EMBED F16 [1000, 256] ids in both windows");
}

#[test]
fn embed_and_linear_from_a_q8_0_table_whose_last_window_is_not_whole_words() {
    if gpu_tests_skipped() {
        return;
    }
    // Q8_0 [1001, 288]: 9 blocks of 34 bytes, 306 bytes a row (2 mod 4), 306 KB: two
    // windows, the last of an odd number of rows, so its byte count is not a multiple of 4
    // (a binding's size must be).
    let (rows, cols) = (1001, 288);
    let bytes: Vec<u8> = (0..rows * cols / 32)
        .flat_map(|b| {
            let codes = (0..32).map(move |i| (((b * 7919 + i * 31) % 9) as i8 - 4) as u8);
            half::f16::from_f32(0.5).to_le_bytes().into_iter().chain(codes)
        })
        .collect();
    let table =
        HostTensor::from_bytes("t", DType::Q8_0, Shape::new(&[rows, cols]).expect("shape"), &bytes).expect("size");
    let ids = vec![0u32, 1000, 999, 512, 700, 3];
    let n = ids.len();
    let inputs = [("t", table.clone()), ("ids", HostTensor::from_u32("ids", Shape::vector(n), ids).expect("size"))];
    let (gpu, reference) = windowed_pair().run(&inputs, &[], |b, name, t| {
        let out = b.alloc(&name("out"), DType::F32, &[n, cols])?;
        b.embed(out, t[0], t[1])?;
        Ok(vec![out])
    });
    assert_eq!(f32s(&gpu[0]), f32s(&reference[0]), "EMBED Q8_0 [1001, 288]");
    let inputs = [("w", table), ("x", x_of(1, cols))];
    let (gpu, reference) = windowed_pair().run(&inputs, &[], |b, name, ids| {
        let out = b.alloc(&name("out"), DType::F32, &[1, rows])?;
        b.linear(out, ids[1], ids[0])?;
        Ok(vec![out])
    });
    assert_eq!(f32s(&gpu[0]), f32s(&reference[0]), "LINEAR Q8_0 [1001, 288]");
}
