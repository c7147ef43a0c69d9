//! LINEAR's int8-block kernels on aarch64 NEON, for [`SimdLevel::Neon`] (widening
//! multiplies) and [`SimdLevel::NeonDot`] (`sdot`).
//!
//! [`SimdLevel::Neon`]: crate::kernels::SimdLevel::Neon
//! [`SimdLevel::NeonDot`]: crate::kernels::SimdLevel::NeonDot

use std::arch::aarch64::*;

use purebee_memory::DType;

use super::super::f16::f16_at;
use super::super::neon::{dot16, i8x16, nibbles, sdot, u8x16};
use super::super::Simd;
use super::layout::{Int8Row, BLOCK};

/// `linear_int8::dot_rows`: per block the exact `Σ c·q` of the weight codes and the int8
/// activations (`dot16`: `sdot`, or widening multiplies), its four lanes converted to f32
/// (exact: below 2²⁴) and scaled by `d / s_b` into one FMA chain per row; the constant
/// terms (Q4_1's `m`, Q4_0's codes stored as `c + 8`) as `f · (Σq_b / s_b)` summed apart,
/// as the AVX2 kernel does. Two rows at a time share each activation load.
#[target_feature(enable = "neon")]
pub(super) fn dot_rows(level: Simd, dtype: DType, rows: &[u8], a: Int8Row, out: &mut [f32]) {
    if sdot(level) {
        int8_rows::<true>(dtype, rows, a, out)
    } else {
        int8_rows::<false>(dtype, rows, a, out)
    }
}

#[inline]
#[target_feature(enable = "neon")]
fn int8_rows<const SDOT: bool>(dtype: DType, rows: &[u8], a: Int8Row, out: &mut [f32]) {
    let (bb, nb, m) = (dtype.block_bytes(), a.inv_scale.len(), out.len());
    let row_bytes = nb * bb;
    assert!(rows.len() >= m * row_bytes && a.q.len() >= nb * BLOCK && a.sum.len() >= nb);
    // One weight block `b` against the activation block `q`: the lanes of `Σ c·q`, `d`, and
    // the factor `f` of its constant term (Q8_0: none).
    let block = |b: &[u8], q: [int8x16_t; 2]| {
        let d = f16_at(b, 0);
        let (codes, f) = match dtype {
            DType::Q8_0 => ([2, 18].map(|o| vreinterpretq_s8_u8(u8x16(&b[o..]))), 0.0),
            DType::Q4_0 => (nibbles(&b[2..]), d),
            _ => (nibbles(&b[4..]), f16_at(b, 2)),
        };
        let sums = dot16::<SDOT>(dot16::<SDOT>(vdupq_n_s32(0), codes[0], q[0]), codes[1], q[1]);
        (vcvtq_f32_s32(sums), d, f)
    };
    for j in (0..m).step_by(2) {
        let j1 = (j + 1).min(m - 1);
        let r = [&rows[j * row_bytes..][..row_bytes], &rows[j1 * row_bytes..][..row_bytes]];
        let (mut acc, mut constant) = ([vdupq_n_f32(0.0); 2], [0f32; 2]);
        for i in 0..nb {
            let q = [i8x16(&a.q[BLOCK * i..]), i8x16(&a.q[BLOCK * i + 16..])];
            let (inv, qsum) = (a.inv_scale[i], a.sum[i] * a.inv_scale[i]);
            for (u, row) in r.iter().enumerate() {
                let (sums, d, f) = block(&row[i * bb..][..bb], q);
                acc[u] = vfmaq_n_f32(acc[u], sums, d * inv);
                constant[u] += f * qsum;
            }
        }
        let total = |u: usize| {
            let c = if dtype == DType::Q4_0 { -8.0 * constant[u] } else { constant[u] };
            vaddvq_f32(acc[u]) + c
        };
        out[j] = total(0);
        if j1 > j {
            out[j1] = total(1);
        }
    }
}
