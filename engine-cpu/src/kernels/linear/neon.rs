//! LINEAR's aarch64 NEON kernels, for [`SimdLevel::Neon`] and [`SimdLevel::NeonDot`] alike
//! (float work, no `sdot`): weights decoded exactly as the portable decoders decode them,
//! products summed in f32 with FMAs in an order of their own, which LINEAR allows.
//!
//! [`SimdLevel::Neon`]: crate::kernels::SimdLevel::Neon
//! [`SimdLevel::NeonDot`]: crate::kernels::SimdLevel::NeonDot

use std::arch::aarch64::*;
use std::arch::asm;

use purebee_memory::DType;

use super::super::f16::f16_at;
use super::super::neon::{f32x4, nibbles, u8x16};
use super::portable::{decode_row, dot_row_portable};

/// `linear::dot_row`: float rows and 32-element blocks decoded exactly (as `linear`'s
/// decoders), products summed in f32 with FMAs in an order of its own (which LINEAR
/// allows); other dtypes go the portable way.
#[target_feature(enable = "neon")]
pub(super) fn dot_row(dtype: DType, row: &[u8], x: &[f32]) -> f32 {
    match dtype {
        DType::F32 => float_row(dtype, row, x, |b| [0, 16, 32, 48].map(|o| vreinterpretq_f32_u8(u8x16(&b[o..])))),
        DType::F16 => float_row(dtype, row, x, |b| halves(b, |h| f16x8(h))),
        DType::BF16 => float_row(dtype, row, x, |b| halves(b, |h| bf16x8(h))),
        DType::Q8_0 => scaled_blocks(row, x, 34, |b, xs| {
            let w = [2, 18].map(|o| vreinterpretq_s8_u8(u8x16(&b[o..])));
            (vaddq_f32(dot_i8(&xs[..16], w[0]), dot_i8(&xs[16..], w[1])), f16_at(b, 0))
        }),
        DType::Q4_0 => scaled_blocks(row, x, 18, |b, xs| {
            let [lo, hi] = nibbles(&b[2..]).map(|c| vsubq_s8(c, vdupq_n_s8(8)));
            (vaddq_f32(dot_i8(&xs[..16], lo), dot_i8(&xs[16..], hi)), f16_at(b, 0))
        }),
        DType::Q4_1 => q4_1_row(row, x),
        _ => dot_row_portable(dtype, row, x),
    }
}

/// A row of F32, F16 or BF16: 16 weights at a time from `decode` (given the row from their
/// first byte on) into four FMA chains, the last partial 16 decoded by `linear`.
#[inline]
#[target_feature(enable = "neon")]
fn float_row(dtype: DType, row: &[u8], x: &[f32], decode: impl Fn(&[u8]) -> [float32x4_t; 4]) -> f32 {
    let size = if dtype == DType::F32 { 4 } else { 2 };
    let whole = x.len() / 16 * 16;
    let mut acc = [vdupq_n_f32(0.0); 4];
    for i in (0..whole).step_by(16) {
        let w = decode(&row[size * i..]);
        for (u, a) in acc.iter_mut().enumerate() {
            *a = vfmaq_f32(*a, f32x4(&x[i + 4 * u..]), w[u]);
        }
    }
    let mut w = [0f32; 16];
    let w = &mut w[..x.len() - whole];
    decode_row(dtype, &row[size * whole..], w);
    let tail: f32 = x[whole..].iter().zip(w.iter()).map(|(&a, &b)| a * b).sum();
    hsum(acc) + tail
}

/// 16 two-byte floats from the front of `b`, widened eight at a time by `widen`.
#[inline]
#[target_feature(enable = "neon")]
fn halves(b: &[u8], widen: impl Fn(uint16x8_t) -> [float32x4_t; 2]) -> [float32x4_t; 4] {
    let [a, c] = [0, 16].map(|o| widen(vreinterpretq_u16_u8(u8x16(&b[o..]))));
    [a[0], a[1], c[0], c[1]]
}

/// Eight f16 as f32, exactly (a signaling NaN comes out quiet: still NaN). `fcvtl` is
/// written out because the f16 intrinsics (`vcvt_f32_f16`) are stable only from Rust 1.94,
/// after this crate's MSRV.
#[inline]
#[target_feature(enable = "neon")]
fn f16x8(h: uint16x8_t) -> [float32x4_t; 2] {
    let (lo, hi): (float32x4_t, float32x4_t);
    // SAFETY: `fcvtl`/`fcvtl2` are baseline aarch64 SIMD and touch only these registers
    // (`lo` is written before `h` is read again, hence `out`, not `lateout`).
    unsafe {
        asm!(
            "fcvtl {lo:v}.4s, {h:v}.4h",
            "fcvtl2 {hi:v}.4s, {h:v}.8h",
            h = in(vreg) h,
            lo = out(vreg) lo,
            hi = lateout(vreg) hi,
            options(pure, nomem, nostack),
        )
    };
    [lo, hi]
}

/// Eight bf16 as f32: each is the high half of its f32.
#[inline]
#[target_feature(enable = "neon")]
fn bf16x8(h: uint16x8_t) -> [float32x4_t; 2] {
    [vshll_n_u16::<16>(vget_low_u16(h)), vshll_high_n_u16::<16>(h)].map(|w| vreinterpretq_f32_u32(w))
}

/// The 16 i8 of `w` as f32 (exact), four lanes at a time.
#[inline]
#[target_feature(enable = "neon")]
fn i8_to_f32(w: int8x16_t) -> [float32x4_t; 4] {
    let (lo, hi) = (vmovl_s8(vget_low_s8(w)), vmovl_high_s8(w));
    [vmovl_s16(vget_low_s16(lo)), vmovl_high_s16(lo), vmovl_s16(vget_low_s16(hi)), vmovl_high_s16(hi)]
        .map(|v| vcvtq_f32_s32(v))
}

/// `Σ x_j · w_j` over 16 elements, as four lane sums (`w`: 16 i8 codes).
#[inline]
#[target_feature(enable = "neon")]
fn dot_i8(x: &[f32], w: int8x16_t) -> float32x4_t {
    let w = i8_to_f32(w);
    let s = vmulq_f32(f32x4(x), w[0]);
    let s = vfmaq_f32(s, f32x4(&x[4..]), w[1]);
    let s = vfmaq_f32(s, f32x4(&x[8..]), w[2]);
    vfmaq_f32(s, f32x4(&x[12..]), w[3])
}

/// `Σ_b d_b · S_b` over a row's blocks of 32 elements (`bytes` each), `block(b, x)` giving
/// a block's four lane sums `S_b` of `x · code` and its `d`: two blocks per step, each
/// into its own total (two FMA chains), as the x86 kernel does.
#[inline]
#[target_feature(enable = "neon")]
fn scaled_blocks(row: &[u8], x: &[f32], bytes: usize, block: impl Fn(&[u8], &[f32]) -> (float32x4_t, f32)) -> f32 {
    let (mut t0, mut t1) = (vdupq_n_f32(0.0), vdupq_n_f32(0.0));
    let (pairs, xs) = (row.chunks_exact(2 * bytes), x.chunks_exact(64));
    let (last, x_last) = (pairs.remainder(), xs.remainder());
    for (b, xs) in pairs.zip(xs) {
        let (s0, d0) = block(&b[..bytes], &xs[..32]);
        let (s1, d1) = block(&b[bytes..], &xs[32..]);
        t0 = vfmaq_n_f32(t0, s0, d0);
        t1 = vfmaq_n_f32(t1, s1, d1);
    }
    if last.len() >= bytes && x_last.len() >= 32 {
        let (s, d) = block(last, x_last);
        t0 = vfmaq_n_f32(t0, s, d);
    }
    hsum([t0, t1])
}

/// A Q4_1 row: each weight decoded as `code · d + m` with one rounding (an FMA; `code · d`
/// is exact), as `linear` decodes it, then one FMA chain per four elements of a block.
#[inline]
#[target_feature(enable = "neon")]
fn q4_1_row(row: &[u8], x: &[f32]) -> f32 {
    let mut acc = [vdupq_n_f32(0.0); 8];
    for (b, xs) in row.chunks_exact(20).zip(x.chunks_exact(32)) {
        let (d, m) = (f16_at(b, 0), f16_at(b, 2));
        let [lo, hi] = nibbles(&b[4..]).map(|c| i8_to_f32(c));
        for (j, code) in lo.into_iter().chain(hi).enumerate() {
            let w = vfmaq_n_f32(vdupq_n_f32(m), code, d);
            acc[j] = vfmaq_f32(acc[j], f32x4(&xs[4 * j..]), w);
        }
    }
    hsum(acc)
}

/// The sum of every lane of `v`.
#[inline]
#[target_feature(enable = "neon")]
fn hsum<const N: usize>(v: [float32x4_t; N]) -> f32 {
    vaddvq_f32(v.into_iter().fold(vdupq_n_f32(0.0), |s, a| vaddq_f32(s, a)))
}
