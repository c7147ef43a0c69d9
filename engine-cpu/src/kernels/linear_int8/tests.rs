//! LINEAR's int8-block kernels on every level this CPU supports, against the ISA's rounding
//! and the block formula.

use super::*;

/// Every level rounds activations to int8 blocks as the ISA's `quantize_blocks` does,
/// bit for bit.
#[test]
fn quantize_row_matches_the_isa_on_every_level() {
    for x in crate::kernels::rounding::cases() {
        let blocks = x.len().div_ceil(BLOCK);
        let (mut want_q, mut want_s) = (vec![0i8; x.len()], vec![0f32; blocks]);
        purebee_isa::ops::quantize_blocks(&x, &mut want_q, &mut want_s);
        for level in Simd::all_supported() {
            let (mut q, mut s) = (vec![0i8; x.len()], vec![0f32; blocks]);
            quantize_row(level, &x, &mut q, &mut s);
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            assert_eq!((bits(&s), &q), (bits(&want_s), &want_q), "{level}, a row of {}", x.len());
        }
    }
}

/// The portable and AVX2 kernels agree with the formula computed in f64 on random blocks.
#[test]
fn kernels_match_the_block_formula() {
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for dtype in [DType::Q8_0, DType::Q4_0, DType::Q4_1] {
        let nb = 7;
        let bb = dtype.block_bytes();
        let mut row: Vec<u8> = (0..nb * bb).map(|_| next() as u8).collect();
        for b in row.chunks_exact_mut(bb) {
            b[0..2].copy_from_slice(&half::f16::from_f32(0.01 * (next() % 100) as f32 - 0.5).to_le_bytes());
            if dtype == DType::Q4_1 {
                b[2..4].copy_from_slice(&half::f16::from_f32(0.02 * (next() % 100) as f32 - 1.0).to_le_bytes());
            }
        }
        let q: Vec<i8> = (0..nb * BLOCK).map(|_| (next() % 255) as i8).map(|v| v.max(-127)).collect();
        let inv: Vec<f32> = (0..nb).map(|_| 1.0 / (1.0 + (next() % 1000) as f32)).collect();
        let sum: Vec<f32> = q.chunks(BLOCK).map(|c| c.iter().map(|&v| v as f32).sum()).collect();
        let (pl, sl) = pair_layout_len(nb);
        let (mut pairs, mut pair_scales) = (vec![0i8; pl], vec![0f32; sl]);
        pair_layout(&q, &inv, &sum, &mut pairs, &mut pair_scales);
        let a = Int8Row { q: &q, inv_scale: &inv, sum: &sum, pairs: &pairs, pair_scales: &pair_scales };
        let mut want = 0f64;
        let mut w = vec![0f32; nb * BLOCK];
        purebee_memory::quant::QuantMatrix::new(dtype, &row, 1, nb * BLOCK)
            .and_then(|m| m.dequantize_row(0, &mut w))
            .expect("decodes");
        for (i, (&qi, &wi)) in q.iter().zip(&w).enumerate() {
            want += qi as f64 * wi as f64 * inv[i / BLOCK] as f64;
        }
        for level in Simd::all_supported() {
            let mut got = [0f32; 3];
            let rows = [row.clone(), row.clone(), row.clone()].concat();
            dot_rows(level, dtype, &rows, a, &mut got);
            let got = got[2] as f64;
            assert!((got - want).abs() <= 1e-4 * want.abs().max(1.0), "{dtype} {level}: {got} vs {want}");
        }
    }
}
