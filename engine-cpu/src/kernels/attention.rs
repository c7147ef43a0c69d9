//! ATTENTION's decode products over cache rows read in place and in order: row `j` of the
//! cache holds every kv head (`n_kv · hd` floats at `j · stride`), and query head `h` reads kv
//! head `h / group`. Both kernels walk the rows once, front to back, every kv head of a row
//! before the next row, so that the hardware prefetcher streams them: one kv head at a time
//! over all rows (`hd` floats every `stride`) read 10 GB/s from memory on one Zen 4 thread,
//! with or without software prefetch, against 12.7 for the keys in order.
//!
//! - [`scores`]: `q_h · k_j` for every head and row; each key chunk is loaded once for the
//!   heads that share it.
//! - [`weighted_values`]: `Σ_j w_hj · v_j` for every head, into sums kept in `out` (in L1);
//!   each value chunk is loaded once for the heads that share it.
//!
//! Sums are in f32 (the ISA allows f32 or wider, in any order): a key product in lanes of 8
//! added at the end (the portable path: `linear::dot`), a value sum row after row.
//!
//! The cache rows are f32, or the bits of f16 values ([`CacheElem`]): F16C's `vcvtph2ps`
//! widens eight at a time as they are loaded on AVX2 (exactly, so an F16 cache gives the
//! bits its widened F32 copy would); the portable path widens one row at a time.

#[cfg(target_arch = "x86_64")]
use super::SimdLevel;
use super::{math, Simd};

/// An element of a KV cache row as the kernels read it: an f32, or the bits of an f16
/// (`u16`), widened exactly.
pub trait CacheElem: Copy + Send + Sync + 'static {
    /// The value as f32 (exact).
    fn widen(self) -> f32;

    /// `row` as f32s: itself for f32, else widened into `buf` (resized to fit).
    fn row<'a>(row: &'a [Self], buf: &'a mut Vec<f32>) -> &'a [f32];

    /// Eight elements from `p` as f32 lanes.
    ///
    /// # Safety
    /// Eight elements are readable from `p`, and the CPU has AVX2 and F16C.
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a contract for callers (above); each impl's body says how it keeps it.
    unsafe fn load8(p: *const Self) -> std::arch::x86_64::__m256;
}

impl CacheElem for f32 {
    #[inline(always)]
    fn widen(self) -> f32 {
        self
    }

    fn row<'a>(row: &'a [f32], _: &'a mut Vec<f32>) -> &'a [f32] {
        row
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    // SAFETY: the trait's contract: eight f32 readable at `p`, AVX2 present.
    unsafe fn load8(p: *const f32) -> std::arch::x86_64::__m256 {
        // SAFETY: the caller's promise.
        unsafe { std::arch::x86_64::_mm256_loadu_ps(p) }
    }
}

impl CacheElem for u16 {
    #[inline(always)]
    fn widen(self) -> f32 {
        half::f16::from_bits(self).to_f32()
    }

    fn row<'a>(row: &'a [u16], buf: &'a mut Vec<f32>) -> &'a [f32] {
        buf.clear();
        buf.extend(row.iter().map(|&h| h.widen()));
        buf
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    // SAFETY: the trait's contract: eight halves readable at `p`, F16C present.
    unsafe fn load8(p: *const u16) -> std::arch::x86_64::__m256 {
        use std::arch::x86_64::*;
        // SAFETY: the caller's promise (8 halves: 16 bytes).
        unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p.cast())) }
    }
}

/// The shapes both kernels take: `hd` floats per head, `group` query heads per kv head, and
/// cache rows `stride` floats apart.
#[derive(Clone, Copy, Debug)]
pub struct Heads {
    /// Floats per head.
    pub hd: usize,
    /// Query heads per kv head.
    pub group: usize,
    /// Floats from one cache row to the next (at least `n_kv · hd`).
    pub stride: usize,
}

impl Heads {
    /// Checks that `rows` holds `len` rows of `n_head / group` kv heads.
    fn check<T>(self, n_head: usize, len: usize, rows: &[T]) {
        assert!(self.hd > 0 && self.group > 0 && n_head.is_multiple_of(self.group), "attention kernels: heads");
        let n_kv = n_head / self.group;
        assert!(len == 0 || rows.len() >= (len - 1) * self.stride + n_kv * self.hd, "attention kernels: short rows");
    }
}

/// `out[h · len + j] = scale · Σ_d q[h·hd + d] · keys[j·stride + (h / group)·hd + d]` for every
/// head `h < q.len() / hd` and row `j < len` (`out.len() = n_head · len`).
pub fn scores<T: CacheElem>(level: Simd, heads: Heads, q: &[f32], keys: &[T], scale: f32, out: &mut [f32]) {
    let n_head = q.len() / heads.hd.max(1);
    let len = out.len() / n_head.max(1);
    assert!(q.len() == n_head * heads.hd && out.len() == n_head * len, "attention scores: shapes");
    heads.check(n_head, len, keys);
    match level.get() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a `Simd` of level `Avx2` or `Avx512Vnni` exists only where the CPU has AVX2/FMA/F16C.
        SimdLevel::Avx2 | SimdLevel::Avx512Vnni => unsafe { x86::scores(heads, q, keys, scale, out) },
        _ => {
            let hd = heads.hd;
            let mut buf = Vec::new();
            for j in 0..len {
                for (kvh, qs) in q.chunks_exact(hd * heads.group).enumerate() {
                    let key = T::row(&keys[j * heads.stride + kvh * hd..][..hd], &mut buf);
                    for (i, qh) in qs.chunks_exact(hd).enumerate() {
                        out[(kvh * heads.group + i) * len + j] = scale * super::linear::dot(level, qh, key);
                    }
                }
            }
        }
    }
}

/// `out[h · hd + d] = Σ_j w[h·len + j] · values[j·stride + (h / group)·hd + d]` for every head
/// `h < out.len() / hd` (`w.len() = n_head · len`).
pub fn weighted_values<T: CacheElem>(level: Simd, heads: Heads, w: &[f32], len: usize, values: &[T], out: &mut [f32]) {
    let n_head = out.len() / heads.hd.max(1);
    assert!(w.len() == n_head * len && out.len() == n_head * heads.hd, "attention values: shapes");
    heads.check(n_head, len, values);
    match level.get() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as in `scores`.
        SimdLevel::Avx2 | SimdLevel::Avx512Vnni => unsafe { x86::weighted_values(heads, w, len, values, out) },
        _ => {
            out.fill(0.0);
            let hd = heads.hd;
            for j in 0..len {
                for (h, o) in out.chunks_exact_mut(hd).enumerate() {
                    let (wj, v) = (w[h * len + j], &values[j * heads.stride + h / heads.group * hd..][..hd]);
                    for (o, &x) in o.iter_mut().zip(v) {
                        *o += wj * x.widen();
                    }
                }
            }
        }
    }
}

/// Softmax numerators of one row in place, `x_i ← e^(x_i − max)` with the value of
/// `math::exp` for each element, and their sum in 8 lanes (added at the end).
pub fn exp_shifted(level: Simd, row: &mut [f32], max: f32) -> f32 {
    match level.get() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as in `scores`.
        SimdLevel::Avx2 | SimdLevel::Avx512Vnni => unsafe { x86::exp_shifted(row, max) },
        _ => exp_shifted_lanes(row, max),
    }
}

/// [`exp_shifted`] as loops the compiler vectorizes, 64 elements at a time: the
/// exponential's in-range path for every element, then the elements outside it (below
/// −87, or NaN) redone one by one (`x − max ≤ 0`, so none is above it).
#[inline(always)]
fn exp_shifted_lanes(row: &mut [f32], max: f32) -> f32 {
    let mut lanes = [0f32; 8];
    let mut shifted = [0f32; 64];
    for chunk in row.chunks_mut(64) {
        let shifted = &mut shifted[..chunk.len()];
        for (d, x) in shifted.iter_mut().zip(chunk.iter_mut()) {
            *d = *x - max;
            *x = math::exp_in_range(d.max(-87.0));
        }
        // (A separate loop: a branch in the one above would keep it scalar.)
        for (&d, x) in shifted.iter().zip(chunk.iter_mut()) {
            if d <= -87.0 || d.is_nan() {
                *x = math::exp(d);
            }
        }
        let mut eights = chunk.chunks_exact(8);
        for e in &mut eights {
            for l in 0..8 {
                lanes[l] += e[l];
            }
        }
        for (l, &e) in eights.remainder().iter().enumerate() {
            lanes[l] += e;
        }
    }
    lanes.iter().sum()
}

/// `dst[i] = src[i]` widened from f16 bits (exact): F16C's `vcvtph2ps` on AVX2, `half`
/// elsewhere (which uses the hardware conversion where it has one).
pub fn widen_f16(level: Simd, src: &[u16], dst: &mut [f32]) {
    assert!(src.len() == dst.len(), "widen_f16: lengths");
    match level.get() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as in `scores`.
        SimdLevel::Avx2 | SimdLevel::Avx512Vnni => unsafe { x86::widen_f16(src, dst) },
        _ => {
            for (d, &h) in dst.iter_mut().zip(src) {
                *d = half::f16::from_bits(h).to_f32();
            }
        }
    }
}

/// `dst[i]` = the bits of the f16 nearest `src[i]`, ties to even (KV_WRITE's rounding, ISA
/// `f16_bits`): F16C's `vcvtps2ph` on AVX2 (its NaN is the ISA's: the sign, quiet, the top
/// payload bits), `half` elsewhere.
pub fn round_f16(level: Simd, src: &[f32], dst: &mut [u16]) {
    assert!(src.len() == dst.len(), "round_f16: lengths");
    match level.get() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as in `scores`.
        SimdLevel::Avx2 | SimdLevel::Avx512Vnni => unsafe { x86::round_f16(src, dst) },
        _ => {
            for (d, &x) in dst.iter_mut().zip(src) {
                *d = if x.is_nan() {
                    // `half` keeps the payload's top bits and sets the quiet bit; spelled out
                    // so as not to depend on which of its paths runs.
                    let b = x.to_bits();
                    ((b >> 16) & 0x8000) as u16 | 0x7e00 | ((b & 0x7f_ffff) >> 13) as u16
                } else {
                    half::f16::from_f32(x).to_bits()
                };
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::{CacheElem, Heads};

    /// See `attention::exp_shifted`.
    #[target_feature(enable = "avx2,fma")]
    pub(super) fn exp_shifted(row: &mut [f32], max: f32) -> f32 {
        super::exp_shifted_lanes(row, max)
    }

    /// See `attention::widen_f16`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn widen_f16(src: &[u16], dst: &mut [f32]) {
        let wide = src.len() / 8 * 8;
        for i in (0..wide).step_by(8) {
            // SAFETY: i + 8 ≤ wide ≤ the length of both slices.
            unsafe {
                let h = _mm_loadu_si128(src.as_ptr().add(i).cast());
                _mm256_storeu_ps(dst.as_mut_ptr().add(i), _mm256_cvtph_ps(h));
            }
        }
        for i in wide..src.len() {
            dst[i] = half::f16::from_bits(src[i]).to_f32();
        }
    }

    /// See `attention::round_f16`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn round_f16(src: &[f32], dst: &mut [u16]) {
        let mut i = 0;
        while i < src.len() {
            let mut x = [0f32; 8];
            let n = (src.len() - i).min(8);
            x[..n].copy_from_slice(&src[i..i + n]);
            let mut h = [0u16; 8];
            // SAFETY: 8 floats read from and 8 halves written to local arrays.
            unsafe {
                let v = _mm256_loadu_ps(x.as_ptr());
                _mm_storeu_si128(h.as_mut_ptr().cast(), _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v));
            }
            dst[i..i + n].copy_from_slice(&h[..n]);
            i += n;
        }
    }

    /// The sum of the eight lanes.
    #[target_feature(enable = "avx2,fma")]
    fn hsum(v: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
    }

    /// See `attention::scores` (which checked the shapes): row after row, each kv head's key
    /// against its query heads in blocks of up to four.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn scores<T: CacheElem>(heads: Heads, q: &[f32], keys: &[T], scale: f32, out: &mut [f32]) {
        let Heads { hd, group, stride } = heads;
        let n_head = q.len() / hd;
        let len = out.len() / n_head.max(1);
        for j in 0..len {
            for kvh in 0..n_head / group {
                let key = &keys[j * stride + kvh * hd..][..hd];
                let mut h = kvh * group;
                while h < (kvh + 1) * group {
                    let block = ((kvh + 1) * group - h).min(4);
                    let qb = &q[h * hd..];
                    let sums = match block {
                        4 => score_block::<4, T>(qb, hd, key),
                        3 => pad(score_block::<3, T>(qb, hd, key)),
                        2 => pad(score_block::<2, T>(qb, hd, key)),
                        _ => pad(score_block::<1, T>(qb, hd, key)),
                    };
                    for (i, s) in sums[..block].iter().enumerate() {
                        out[(h + i) * len + j] = scale * s;
                    }
                    h += block;
                }
            }
        }
    }

    /// `N` sums as four (the rest zero).
    fn pad<const N: usize>(s: [f32; N]) -> [f32; 4] {
        std::array::from_fn(|i| if i < N { s[i] } else { 0.0 })
    }

    /// `q_i · key` for the `N` heads at the start of `q`.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    fn score_block<const N: usize, T: CacheElem>(q: &[f32], hd: usize, key: &[T]) -> [f32; N] {
        assert!(q.len() >= N * hd && key.len() == hd);
        let mut acc = [_mm256_setzero_ps(); N];
        let mut d = 0;
        while d + 8 <= hd {
            // SAFETY: d + 8 ≤ hd: inside `key` and inside each head's hd floats of `q`
            // (asserted above).
            let k = unsafe { T::load8(key.as_ptr().add(d)) };
            for (i, a) in acc.iter_mut().enumerate() {
                // SAFETY: as above.
                let qv = unsafe { _mm256_loadu_ps(q.as_ptr().add(i * hd + d)) };
                *a = _mm256_fmadd_ps(qv, k, *a);
            }
            d += 8;
        }
        let mut sums = [0f32; N];
        for (i, s) in sums.iter_mut().enumerate() {
            let tail: f32 = (d..hd).map(|e| q[i * hd + e] * key[e].widen()).sum();
            *s = hsum(acc[i]) + tail;
        }
        sums
    }

    /// See `attention::weighted_values` (which checked the shapes): row after row, each kv
    /// head's value chunks loaded once for its query heads, the sums in `out`. (Two rows per
    /// step halve the loads and stores of `out` but interleave two streams of rows, which
    /// the hardware prefetcher follows worse: 8 against 12 GB/s from memory on one Zen 4
    /// thread.)
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn weighted_values<T: CacheElem>(heads: Heads, w: &[f32], len: usize, values: &[T], out: &mut [f32]) {
        let Heads { hd, group, stride } = heads;
        let n_head = out.len() / hd;
        let wide = hd / 8 * 8;
        out.fill(0.0);
        for j in 0..len {
            for kvh in 0..n_head / group {
                let v = &values[j * stride + kvh * hd..][..hd];
                for h in kvh * group..(kvh + 1) * group {
                    let a = w[h * len + j];
                    let wa = _mm256_set1_ps(a);
                    let o = &mut out[h * hd..(h + 1) * hd];
                    for d in (0..wide).step_by(8) {
                        // SAFETY: d + 8 ≤ wide ≤ hd: inside `o` and `v` (hd floats each).
                        unsafe {
                            let acc = _mm256_loadu_ps(o.as_ptr().add(d));
                            let acc = _mm256_fmadd_ps(wa, T::load8(v.as_ptr().add(d)), acc);
                            _mm256_storeu_ps(o.as_mut_ptr().add(d), acc);
                        }
                    }
                    for d in wide..hd {
                        o[d] += a * v[d].widen();
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every element is `math::exp(x − max)`, bit for bit, on every level: in range, below
    /// −87 (subnormal and zero results), NaN, and rows of every length up to past a chunk.
    #[test]
    fn exp_shifted_is_the_scalar_exponential_on_every_level() {
        let mut x: Vec<f32> = (0..150).map(|i| -(i as f32) * 0.731).collect();
        x.extend([-86.99, -87.0, -87.01, -100.0, -104.0, -1e30, f32::NEG_INFINITY, 0.0, -0.0, -1e-40]);
        for len in [0, 1, 7, 8, 63, 64, 65, x.len()] {
            let row = &x[..len];
            let want: Vec<f32> = row.iter().map(|&v| math::exp(v - 0.0)).collect();
            for level in Simd::all_supported() {
                let mut got = row.to_vec();
                let sum = exp_shifted(level, &mut got, 0.0);
                for (g, w) in got.iter().zip(&want) {
                    assert!(g.to_bits() == w.to_bits(), "{level}: {g} vs {w}");
                }
                let exact: f64 = want.iter().map(|&v| v as f64).sum();
                assert!((sum as f64 - exact).abs() <= 1e-5 * exact.max(1.0), "{level} sum {sum} vs {exact}");
            }
        }
        // NaN in, NaN out.
        let mut row = [f32::NAN, -1.0];
        assert!(exp_shifted(Simd::PORTABLE, &mut row, f32::NAN).is_nan() && row[1].is_nan());
    }

    /// Every level against f64 sums (and F16 rows against the same rows widened, bit for
    /// bit), for group sizes and head sizes that leave partial
    /// blocks (3 and 5 heads per kv head, 13 and 40 dimensions), odd row counts, and rows
    /// with room past their kv heads.
    #[test]
    fn every_level_matches_the_f64_products() {
        let mut seed = 0x2545_f491u64;
        let mut next = || {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((seed >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        };
        for (n_kv, group, hd, len) in
            [(5, 4, 128, 37), (1, 3, 64, 5), (2, 5, 40, 17), (3, 1, 13, 3), (1, 2, 16, 0), (2, 4, 8, 1)]
        {
            let n_head = n_kv * group;
            let heads = Heads { hd, group, stride: n_kv * hd + 3 };
            let q: Vec<f32> = (0..n_head * hd).map(|_| next()).collect();
            let rows: Vec<f32> = (0..len * heads.stride).map(|_| next()).collect();
            let w: Vec<f32> = (0..n_head * len).map(|_| next().abs()).collect();
            let at = |j: usize, h: usize, d: usize| rows[j * heads.stride + h / group * hd + d] as f64;
            let want_scores: Vec<f64> = (0..n_head * len)
                .map(|i| {
                    let (h, j) = (i / len, i % len);
                    0.5 * (0..hd).map(|d| q[h * hd + d] as f64 * at(j, h, d)).sum::<f64>()
                })
                .collect();
            let want_values: Vec<f64> = (0..n_head * hd)
                .map(|i| {
                    let (h, d) = (i / hd, i % hd);
                    (0..len).map(|j| w[h * len + j] as f64 * at(j, h, d)).sum::<f64>()
                })
                .collect();
            for level in Simd::all_supported() {
                let mut s = vec![f32::NAN; n_head * len];
                scores(level, heads, &q, &rows, 0.5, &mut s);
                let mut o = vec![f32::NAN; n_head * hd];
                weighted_values(level, heads, &w, len, &rows, &mut o);
                // f32 sums of at most 128 products of magnitude ≤ 1: within 128 · 2⁻²³ of the
                // exact sum, with room to spare (1e-4).
                for (got, want) in s.iter().zip(&want_scores).chain(o.iter().zip(&want_values)) {
                    let ok = (*got as f64 - want).abs() <= 1e-4;
                    assert!(ok, "{level} {n_kv}×{group} heads of {hd}, {len} rows: {got} vs {want}");
                }
                // F16 rows: the bits of the same kernels over the rows widened to f32.
                let halves: Vec<u16> = rows.iter().map(|&x| half::f16::from_f32(x).to_bits()).collect();
                let widened: Vec<f32> = halves.iter().map(|&h| h.widen()).collect();
                let (mut s16, mut s32) = (vec![f32::NAN; n_head * len], vec![f32::NAN; n_head * len]);
                scores(level, heads, &q, &halves, 0.5, &mut s16);
                scores(level, heads, &q, &widened, 0.5, &mut s32);
                let (mut o16, mut o32) = (vec![f32::NAN; n_head * hd], vec![f32::NAN; n_head * hd]);
                weighted_values(level, heads, &w, len, &halves, &mut o16);
                weighted_values(level, heads, &w, len, &widened, &mut o32);
                let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&s16), bits(&s32), "{level} f16 scores");
                assert_eq!(bits(&o16), bits(&o32), "{level} f16 values");
                let mut wide = vec![0f32; halves.len()];
                widen_f16(level, &halves, &mut wide);
                assert_eq!(bits(&wide), bits(&widened), "{level} widen_f16");
            }
        }
    }
}
