//! How the x86 decode kernels sum a run of rows: two rows at a time, each activation load
//! serving both, the pair's bytes prefetched as one stream, and the run's first bytes asked
//! for at its start.

use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};

/// `out[i]` for row `i` of the run `rows` (rows of `row_bytes`): two rows per `pair` call,
/// the odd last row through `one`, after asking for the run's first bytes
/// ([`prefetch_run_start`]). The x86 rows kernels call it inside their `target_feature`
/// functions, so that their pair kernels inline into this loop.
#[inline(always)]
pub(super) fn in_row_pairs<T: Copy>(
    rows: &[u8],
    row_bytes: usize,
    out: &mut [T],
    pair: impl Fn([&[u8]; 2]) -> [T; 2],
    one: impl Fn(&[u8]) -> T,
) {
    // SAFETY: SSE is part of x86_64.
    unsafe { prefetch_run_start(rows) };
    let row = |i: usize| &rows[i * row_bytes..(i + 1) * row_bytes];
    let last = out.len().saturating_sub(1);
    let mut pairs = out.chunks_exact_mut(2);
    for (p, two) in (&mut pairs).enumerate() {
        two.copy_from_slice(&pair([row(2 * p), row(2 * p + 1)]));
    }
    if let [y] = pairs.into_remainder() {
        *y = one(row(last));
    }
}

/// How the x86 pair kernels prefetch: the two rows of a pair are consecutive rows of one
/// matrix, read together, so the bytes of this pair and the next form one stream, which
/// these kernels fetch `PAIR_STREAM_AHEAD` bytes ahead: `lines` cache lines from `at`, the
/// bytes of the pair read so far (both rows': twice one row's offset). Prefetching each row on
/// its own, as the one-row kernels do, left the AVX-512 TQ2_0 pair kernel at 5.8–6.3 ns per
/// 256 weights from memory (one thread), against 2.7–2.9 for the stream and 3.2–5.3 for
/// one row at a time.
#[target_feature(enable = "sse")]
#[inline]
pub(super) fn prefetch_pair_stream(first_row: &[u8], at: usize, lines: usize) {
    for line in 0..lines {
        // A hint: an address past the matrix is harmless (wrapping_add, never dereferenced).
        _mm_prefetch::<_MM_HINT_T0>(first_row.as_ptr().wrapping_add(at + 64 * line + PAIR_STREAM_AHEAD).cast());
    }
}

/// The first `PAIR_STREAM_AHEAD` bytes of a run of rows, which the kernels' prefetches, that
/// far ahead of what they read, never ask for: without this they arrive one demand miss
/// after another at the start of every run. (A decode of 2560- and 6912-element TQ2_0 rows,
/// 6 alternated rounds: BITLINEAR 34.5 -> 36.1 GB/s in a 2-vCPU VM's fast-memory phases,
/// 27.6 -> 29.1 in its slow ones.)
#[target_feature(enable = "sse")]
#[inline]
fn prefetch_run_start(rows: &[u8]) {
    for at in (0..rows.len().min(PAIR_STREAM_AHEAD)).step_by(64) {
        // A hint, for an address inside `rows`.
        _mm_prefetch::<_MM_HINT_T0>(rows.as_ptr().wrapping_add(at).cast());
    }
}

/// See [`prefetch_pair_stream`] (2 to 6 KiB measured alike).
const PAIR_STREAM_AHEAD: usize = 2048;
