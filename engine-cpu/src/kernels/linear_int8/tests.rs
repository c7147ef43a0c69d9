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

/// A xorshift stream of test data.
fn xorshift(mut seed: u64) -> impl FnMut() -> u64 {
    move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    }
}

/// `blocks` weight blocks of `dtype`: random codes with sane scales (and Q4_1 offsets).
fn weight_blocks(dtype: DType, blocks: usize, next: &mut impl FnMut() -> u64) -> Vec<u8> {
    let bb = dtype.block_bytes();
    let mut bytes: Vec<u8> = (0..blocks * bb).map(|_| next() as u8).collect();
    for b in bytes.chunks_exact_mut(bb) {
        b[0..2].copy_from_slice(&half::f16::from_f32(0.01 * (next() % 100) as f32 - 0.5).to_le_bytes());
        if dtype == DType::Q4_1 {
            b[2..4].copy_from_slice(&half::f16::from_f32(0.02 * (next() % 100) as f32 - 1.0).to_le_bytes());
        }
    }
    bytes
}

/// `blocks` blocks of activation codes in −127..=127 and their `1 / s_b`.
fn activations(blocks: usize, next: &mut impl FnMut() -> u64) -> (Vec<i8>, Vec<f32>) {
    let q = (0..blocks * BLOCK).map(|_| (next() % 255) as i8).map(|v| v.max(-127)).collect();
    (q, (0..blocks).map(|_| 1.0 / (1.0 + (next() % 1000) as f32)).collect())
}

/// Every level's kernels agree with the formula computed in f64 on random blocks (seven:
/// an odd count, and not a multiple of four).
#[test]
fn kernels_match_the_block_formula() {
    let mut next = xorshift(0x9e37_79b9_7f4a_7c15);
    for dtype in [DType::Q8_0, DType::Q4_0, DType::Q4_1] {
        let nb = 7;
        let row = weight_blocks(dtype, nb, &mut next);
        let (q, inv) = activations(nb, &mut next);
        let buf = Int8RowBuf::new(q.clone(), inv.clone());
        let a = buf.row();
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

/// Several tokens at once give each token the bits of the one-token kernel, on every level,
/// dtype, token count, and block counts that are odd or not a multiple of four.
#[test]
fn several_tokens_give_each_the_bits_it_gets_alone() {
    let mut next = xorshift(0x2545_f491_4f6c_dd1d);
    for dtype in [DType::Q8_0, DType::Q4_0, DType::Q4_1] {
        for nb in [1, 2, 5, 18] {
            let m = 3;
            let rows = weight_blocks(dtype, m * nb, &mut next);
            let tokens: Vec<Int8RowBuf> = (0..MAX_TOKENS)
                .map(|_| {
                    let (q, inv) = activations(nb, &mut next);
                    Int8RowBuf::new(q, inv)
                })
                .collect();
            let rows_of: Vec<Int8Row> = tokens.iter().map(Int8RowBuf::row).collect();
            for level in Simd::all_supported() {
                for n in 1..=MAX_TOKENS {
                    let mut got = vec![0f32; n * m];
                    dot_rows_tokens(level, dtype, &rows, &rows_of[..n], &mut got);
                    for (t, a) in rows_of[..n].iter().enumerate() {
                        let mut want = vec![0f32; m];
                        dot_rows(level, dtype, &rows, *a, &mut want);
                        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                        assert_eq!(
                            bits(&got[t * m..(t + 1) * m]),
                            bits(&want),
                            "{dtype} {level}: {nb} blocks, token {t} of {n}"
                        );
                    }
                }
            }
        }
    }
}
