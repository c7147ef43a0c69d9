//! LINEAR's portable kernels, and the decoders every level shares: each weight decoded
//! exactly as memory's `QuantMatrix::dequantize_row` decodes it, a 32-element group at a
//! time.

use purebee_memory::DType;

use super::super::f16::f16_at;

pub(super) fn dot_row_portable(dtype: DType, row: &[u8], x: &[f32]) -> f32 {
    let mut w = [0f32; 32];
    let mut acc = [0f32; 8];
    let mut tail = 0f32;
    let (len, bytes) = group(dtype);
    for (block, xs) in row.chunks_exact(bytes).zip(x.chunks(len)) {
        decode_group(dtype, block, &mut w);
        if xs.len() == 32 {
            for (i, (&xi, &wi)) in xs.iter().zip(&w).enumerate() {
                acc[i % 8] += xi * wi;
            }
        } else {
            tail += xs.iter().zip(&w).map(|(&a, &b)| a * b).sum::<f32>();
        }
    }
    // A float row whose length is not a multiple of 32 ends in a partial group.
    let done = row.len() / bytes * len;
    if done < x.len() {
        decode_partial(dtype, &row[row.len() / bytes * bytes..], &mut w);
        tail += x[done..].iter().zip(&w).map(|(&a, &b)| a * b).sum::<f32>();
    }
    acc.iter().sum::<f32>() + tail
}

/// Decodes row `row` of a [`supports`](super::supports) dtype into `out` (`out.len()` elements).
pub fn decode_row(dtype: DType, row: &[u8], out: &mut [f32]) {
    let (len, bytes) = group(dtype);
    let mut w = [0f32; 32];
    let whole = out.len() / len;
    for (block, o) in row.chunks_exact(bytes).zip(out.chunks_exact_mut(len)) {
        decode_group(dtype, block, &mut w);
        o.copy_from_slice(&w[..len]);
    }
    if whole * len < out.len() {
        decode_partial(dtype, &row[whole * bytes..], &mut w);
        let rest = out.len() - whole * len;
        out[whole * len..].copy_from_slice(&w[..rest]);
    }
}

/// Elements and bytes of the unit the decoders work in: a 32-element block, or 32 floats.
fn group(dtype: DType) -> (usize, usize) {
    match dtype {
        DType::F32 => (32, 128),
        DType::F16 | DType::BF16 => (32, 64),
        DType::Q8_0 => (32, 34),
        DType::Q4_0 => (32, 18),
        DType::Q4_1 => (32, 20),
        _ => (32, usize::MAX),
    }
}

/// Decodes one 32-element group (a block, or 32 floats).
#[inline(always)]
fn decode_group(dtype: DType, b: &[u8], w: &mut [f32; 32]) {
    match dtype {
        DType::F32 => {
            for (o, c) in w.iter_mut().zip(b.chunks_exact(4)) {
                *o = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            }
        }
        DType::F16 => {
            for (i, o) in w.iter_mut().enumerate() {
                *o = f16_at(b, 2 * i);
            }
        }
        DType::BF16 => {
            for (o, c) in w.iter_mut().zip(b.chunks_exact(2)) {
                *o = f32::from_bits((u16::from_le_bytes([c[0], c[1]]) as u32) << 16);
            }
        }
        DType::Q8_0 => {
            let d = f16_at(b, 0);
            for (o, &q) in w.iter_mut().zip(&b[2..34]) {
                *o = (q as i8) as f32 * d;
            }
        }
        DType::Q4_0 => {
            let d = f16_at(b, 0);
            for i in 0..16 {
                w[i] = ((b[2 + i] & 15) as i32 - 8) as f32 * d;
                w[i + 16] = ((b[2 + i] >> 4) as i32 - 8) as f32 * d;
            }
        }
        DType::Q4_1 => {
            let (d, m) = (f16_at(b, 0), f16_at(b, 2));
            for i in 0..16 {
                w[i] = (b[4 + i] & 15) as f32 * d + m;
                w[i + 16] = (b[4 + i] >> 4) as f32 * d + m;
            }
        }
        _ => w.fill(0.0),
    }
}

/// Decodes the last partial group of a float row (fewer than 32 elements).
pub(super) fn decode_partial(dtype: DType, b: &[u8], w: &mut [f32; 32]) {
    let size = match dtype {
        DType::F32 => 4,
        _ => 2,
    };
    for (o, c) in w.iter_mut().zip(b.chunks_exact(size)) {
        *o = match dtype {
            DType::F32 => f32::from_le_bytes([c[0], c[1], c[2], c[3]]),
            DType::F16 => f16_at(c, 0),
            _ => f32::from_bits((u16::from_le_bytes([c[0], c[1]]) as u32) << 16),
        };
    }
}

#[inline(always)]
pub(super) fn dot_tile_portable(w: &[f32], x: &[f32], k: usize, out: &mut [f32]) {
    let rows = w.len() / k.max(1);
    for (t, xt) in x.chunks_exact(k.max(1)).enumerate() {
        for (r, wr) in w.chunks_exact(k.max(1)).enumerate() {
            let mut acc = [0f32; 8];
            let (xc, wc) = (xt.chunks_exact(8), wr.chunks_exact(8));
            let tail: f32 = xc.remainder().iter().zip(wc.remainder()).map(|(&a, &b)| a * b).sum();
            for (a, b) in xc.zip(wc) {
                for l in 0..8 {
                    acc[l] += a[l] * b[l];
                }
            }
            out[t * rows + r] = acc.iter().sum::<f32>() + tail;
        }
    }
}
