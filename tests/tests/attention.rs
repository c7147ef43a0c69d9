//! ATTENTION: the GPU engine and the CPU engine (every SIMD path this CPU runs) vs the
//! reference engine over random shapes: head dims 32 ..= 128 half
//! the time and 1 ..= 31 otherwise (odd ones included), 1 to 3 kv heads with 1 to 4 query
//! heads each, decode (one row, contexts up to 4200, the kernel's split-K path) and prefill
//! (up to 24 rows, its direct path when the cache is short; on the CPU 2 to 32 rows, its
//! row-by-row path, and 33 to 40, its tiles), each compiled program run at
//! up to three run-time positions. Cache
//! rows past the last position any run may read hold NaN, so reading one fails the test.
//! One test records KV_WRITE and ATTENTION of two layers in one program, as a model does.
//! One checks that a head too wide for the GPU kernel's workgroup memory is a typed error.
//!
//! Tolerance, per output element (u = 2^-24), from the length of the sums (for a row at
//! position p, L = p + 1 positions; N = ceil(L / 32) tiles of the kernel on one chain):
//! - a score is a dot product of head_dim terms, times a rounded 1/sqrt(head_dim): off by
//!   at most E = (head_dim + 3)·u·A, A = max over positions of Σ_i |q_i·k_i| / sqrt(head_dim);
//! - each weight e^(s − m) then carries relative error E from its score, plus WGSL's exp
//!   error (3 + 2|x| ULP = (6 + 4|x|)u relative) and the rounding of its argument (|x|u) for
//!   the exp that made it, for each rescaling e^(m_old − m_new) on its way (one per tile:
//!   6u each, plus 5u·|Δm| summing to at most 5u·R), and for the split merge's factor; |x|
//!   and the sum of the |Δm| are at most the score range R: δ = E + (12 + 15R + 6N)u. Weights
//!   off by a relative δ move the output by at most δ·max_t |v_t − out|;
//! - the sums Σ w·v and Σ w pass each term through at most K = 132 + 2N roundings: the
//!   product, at most 32 additions in a tile and 32 more adding the kernel's row groups
//!   (64 in all), two (rescale and add) per tile, the merge's factor and its ≤ 64
//!   additions, the division (γ_K bound, any data);
//!
//! so `|got − want| ≤ 1.01·(δ + K·u)·(V + |want|) + u·|want|`, V = max_t |v_t| in that
//! dimension, the last term for the reference's own rounding of its f64 result, 1.01 for
//! the second-order terms. For the 2B decode shape at position 4095 this is about
//! 1.4e-4·(V + |want|), nearly all of it the worst case of the 128-term scores in f32.
//!
//! The CPU engine is held to the same bound. It also accumulates in f32 (scores as dot
//! products of eight partial sums, e^x within 2 ulp; at decode and in passes of at most 32
//! rows the sums of one row's positions in index order, split over parts of 256 positions
//! merged as above for one row over a long context; in longer prefills, Σ w·v as eight partial sums over the positions, then
//! one division), which the bound's γ-style terms cover for the contexts tested here.
//!
//! F16 caches (k, v or both, a quarter of the random cases each, and pinned cases): every
//! engine reads the same f16 values widened exactly to f32, so the problem is the F32 one
//! over those values (the case's `k` and `v` are rounded to f16 before the bound reads
//! them), and the same bound holds. The two-layer test writes its F16 caches with
//! KV_WRITE, whose rounding is bit-exact on every engine, so it checks the caches
//! equal first, as for F32.

use proptest::prelude::*;
use purebee_isa::ops::Attention;
use purebee_isa::{DType, Engine, ParamValue, ProgramBuilder, U32Arg};
use purebee_memory::{HostTensor, Shape};
use purebee_testenv::proptest_cases;
use purebee_tests::differential::{f32s, gpu_tests_skipped, on_cpu_levels, pair, Pair};

const U: f64 = 1.0 / (1u64 << 24) as f64;

/// Positions per tile in the GPU kernel, for the bound's tile count.
const TILE: usize = 32;

/// One ATTENTION problem.
#[derive(Clone, Debug)]
struct Case {
    n: usize,
    n_head: usize,
    n_kv: usize,
    head_dim: usize,
    n_ctx: usize,
    /// The position is a run-time parameter (else the constant `positions[0]`).
    pos_param: bool,
    positions: Vec<u32>,
    /// `[n, n_head·head_dim]`.
    q: Vec<f32>,
    /// `[n_ctx, n_kv·head_dim]` each; rows no run reads are NaN.
    k: Vec<f32>,
    v: Vec<f32>,
    /// The key and value caches are F16 (`k`, `v` then hold f16 values).
    f16: (bool, bool),
}

impl Case {
    fn shape(&self) -> String {
        format!(
            "n={} n_head={} n_kv={} head_dim={} n_ctx={} (pos param: {}, f16 k/v caches: {:?})",
            self.n, self.n_head, self.n_kv, self.head_dim, self.n_ctx, self.pos_param, self.f16
        )
    }

    /// The case with F16 key (`k`) and value (`v`) caches: their values rounded to f16.
    fn in_f16(mut self, k: bool, v: bool) -> Case {
        let round = |x: &mut Vec<f32>| x.iter_mut().for_each(|x| *x = half::f16::from_f32(*x).to_f32());
        if k {
            round(&mut self.k);
        }
        if v {
            round(&mut self.v);
        }
        self.f16 = (k, v);
        self
    }

    /// Fills cache rows at or past `pos + n` for every position with NaN.
    fn poison(mut self) -> Case {
        let end = self.positions.iter().map(|&p| p as usize + self.n).max().unwrap_or(0);
        let kv_width = self.n_kv * self.head_dim;
        for x in self.k[end * kv_width..].iter_mut().chain(&mut self.v[end * kv_width..]) {
            *x = f32::NAN;
        }
        self
    }
}

/// Compares one run's output with the reference's within the bound the module documents.
fn compare(c: &Case, pos: u32, got: &[f32], want: &[f32]) -> Result<(), String> {
    let (hd, q_width, kv_width) = (c.head_dim, c.n_head * c.head_dim, c.n_kv * c.head_dim);
    if got.len() != want.len() || want.len() != c.n * q_width {
        return Err(format!("{}: {} outputs, expected {}", c.shape(), got.len(), want.len()));
    }
    let scale = 1.0 / (hd as f64).sqrt();
    for r in 0..c.n {
        let len = pos as usize + r + 1;
        let tiles = len.div_ceil(TILE) as f64;
        for h in 0..c.n_head {
            let kvh = h / (c.n_head / c.n_kv);
            let q = &c.q[r * q_width + h * hd..][..hd];
            let (mut a, mut lo, mut hi) = (0f64, f64::INFINITY, f64::NEG_INFINITY);
            for t in 0..len {
                let k = &c.k[t * kv_width + kvh * hd..][..hd];
                let s: f64 = q.iter().zip(k).map(|(&x, &y)| x as f64 * y as f64).sum::<f64>() * scale;
                let abs: f64 = q.iter().zip(k).map(|(&x, &y)| (x as f64 * y as f64).abs()).sum::<f64>() * scale;
                a = a.max(abs);
                lo = lo.min(s);
                hi = hi.max(s);
            }
            let e = (hd as f64 + 3.0) * U * a;
            let range = hi - lo + 2.0 * e;
            let delta = e + (12.0 + 15.0 * range + 6.0 * tiles) * U;
            let k_roundings = 132.0 + 2.0 * tiles;
            for d in 0..hd {
                let v_max = (0..len).map(|t| (c.v[t * kv_width + kvh * hd + d] as f64).abs()).fold(0.0, f64::max);
                let i = r * q_width + h * hd + d;
                let (g, w) = (got[i] as f64, want[i] as f64);
                let bound = 1.01 * (delta + k_roundings * U) * (v_max + w.abs()) + U * w.abs();
                // Written so that a NaN fails.
                let within = (g - w).abs() <= bound;
                if !within {
                    return Err(format!(
                        "{} at pos {pos}: index {i} (row {r}, head {h}, dim {d}): got {g}, expected {w}, difference \
                         {:e}, bound {bound:e}",
                        c.shape(),
                        (g - w).abs()
                    ));
                }
            }
        }
    }
    Ok(())
}

/// Runs the case's program once per position on both engines of `pair` and compares each
/// run.
fn check<E: Engine>(pair: &mut Pair<E>, c: &Case) -> Result<(), String> {
    let (q_width, kv_width) = (c.n_head * c.head_dim, c.n_kv * c.head_dim);
    let matrix = |rows, cols, v: &Vec<f32>| {
        HostTensor::from_f32("x", Shape::matrix(rows, cols).expect("shape"), v.clone()).expect("sizes agree")
    };
    let cache =
        |v: &Vec<f32>, f16: bool| if f16 { matrix_f16(c.n_ctx, kv_width, v) } else { matrix(c.n_ctx, kv_width, v) };
    let inputs = [("q", matrix(c.n, q_width, &c.q)), ("k", cache(&c.k, c.f16.0)), ("v", cache(&c.v, c.f16.1))];
    let positions: Vec<u32> = if c.pos_param { c.positions.clone() } else { c.positions[..1].to_vec() };
    let runs: Vec<Vec<ParamValue>> =
        positions.iter().map(|&p| if c.pos_param { vec![ParamValue::U32(p)] } else { vec![] }).collect();
    let results = pair.run_each(&inputs, &runs, |b: &mut ProgramBuilder, name, ids| {
        let pos = if c.pos_param { b.param_u32("pos")? } else { U32Arg::Const(c.positions[0]) };
        let out = b.alloc(&name("out"), DType::F32, &[c.n, q_width])?;
        b.attention(Attention {
            out,
            q: ids[0],
            k_cache: ids[1],
            v_cache: ids[2],
            head_dim: c.head_dim as u32,
            rows: pos.into(),
        })?;
        Ok(vec![out])
    });
    for (run, (got, reference)) in results.iter().enumerate() {
        compare(c, positions[run], &f32s(&got[0]), &f32s(&reference[0]))
            .map_err(|e| format!("{} engine: {e}", pair.engine.name()))?;
    }
    Ok(())
}

/// An F16 `[rows, cols]` matrix of `values` rounded to f16.
fn matrix_f16(rows: usize, cols: usize, values: &[f32]) -> HostTensor {
    let bytes: Vec<u8> = values.iter().flat_map(|&x| half::f16::from_f32(x).to_le_bytes()).collect();
    HostTensor::from_bytes("x", DType::F16, Shape::matrix(rows, cols).expect("shape"), &bytes).expect("sizes agree")
}

/// F16 bytes widened to f32.
fn widen(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(2).map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32()).collect()
}

/// The case on the GPU engine.
fn check_gpu(c: &Case) -> Result<(), String> {
    check(&mut pair(), c)
}

/// The case on the CPU engine, every SIMD path.
fn check_cpu(c: &Case) -> Result<(), String> {
    on_cpu_levels(|p| check(p, c))
}

fn head_dim() -> impl Strategy<Value = usize> {
    // The models' head dims (32 .. 128, odd ones between) and small odd ones.
    prop_oneof![32usize..=128, 1usize..=31]
}

/// A case of `n` rows from `rows`, with `spare` cache rows past the last one from `spare`.
fn case(rows: std::ops::RangeInclusive<usize>, spare: std::ops::RangeInclusive<usize>) -> impl Strategy<Value = Case> {
    (rows, 1usize..=3, 1usize..=4, head_dim(), spare, any::<bool>(), 0u8..4)
        .prop_flat_map(|(n, n_kv, group, head_dim, spare, pos_param, f16)| {
            let n_ctx = n + spare;
            let (q_len, kv_len) = (n * n_kv * group * head_dim, n_ctx * n_kv * head_dim);
            (
                Just((n, n_kv, group, head_dim, n_ctx, pos_param, f16)),
                // Positions anywhere, and one at the end of the cache.
                prop::collection::vec(0..=(spare as u32), 1..=2).prop_map(move |mut v| {
                    v.push(spare as u32);
                    v
                }),
                prop::collection::vec(-2.0f32..2.0, q_len),
                prop::collection::vec(-2.0f32..2.0, kv_len),
                prop::collection::vec(-4.0f32..4.0, kv_len),
            )
        })
        .prop_map(|((n, n_kv, group, head_dim, n_ctx, pos_param, f16), positions, q, k, v)| {
            Case { n, n_head: n_kv * group, n_kv, head_dim, n_ctx, pos_param, positions, q, k, v, f16: (false, false) }
                .poison()
                .in_f16(f16 & 1 == 1, f16 & 2 == 2)
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]

    #[test]
    fn decode_matches_the_reference(c in case(1..=1, 0..=4200)) {
        if gpu_tests_skipped() { return Ok(()); }
        check_gpu(&c).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn prefill_matches_the_reference(c in case(2..=24, 0..=300)) {
        if gpu_tests_skipped() { return Ok(()); }
        check_gpu(&c).map_err(TestCaseError::fail)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: proptest_cases(96), ..ProptestConfig::default() })]
    #[test]
    fn cpu_decode_matches_the_reference(c in case(1..=1, 0..=4200)) {
        check_cpu(&c).map_err(TestCaseError::fail)?;
    }
}

// The several-row paths in about the time one test of 96 cases took: 48 and 32 cases.
proptest! {
    #![proptest_config(ProptestConfig { cases: proptest_cases(48), ..ProptestConfig::default() })]
    /// At most 32 rows: each row as a one-row pass computes it.
    #[test]
    fn cpu_short_pass_matches_the_reference(c in case(2..=32, 0..=200)) {
        check_cpu(&c).map_err(TestCaseError::fail)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: proptest_cases(32), ..ProptestConfig::default() })]
    /// More than 32 rows: blocks of 16 rows as tile products, a partial block last.
    #[test]
    fn cpu_prefill_matches_the_reference(c in case(33..=40, 0..=150)) {
        check_cpu(&c).map_err(TestCaseError::fail)?;
    }
}

/// Deterministic values in [−amp, amp) for the pinned shapes.
fn values(len: usize, seed: u32, amp: f32) -> Vec<f32> {
    let mut s = seed;
    (0..len)
        .map(|_| {
            s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            ((s >> 8) as f32 / (1u32 << 24) as f32 * 2.0 - 1.0) * amp
        })
        .collect()
}

fn pinned(n: usize, n_head: usize, n_kv: usize, head_dim: usize, n_ctx: usize, positions: Vec<u32>) -> Case {
    let (q_len, kv_len) = (n * n_head * head_dim, n_ctx * n_kv * head_dim);
    Case {
        n,
        n_head,
        n_kv,
        head_dim,
        n_ctx,
        pos_param: true,
        positions,
        q: values(q_len, 1, 2.0),
        k: values(kv_len, 2, 2.0),
        v: values(kv_len, 3, 4.0),
        f16: (false, false),
    }
    .poison()
}

/// 20 heads, 5 kv heads of 128, 4096 positions; the last position, the first, and one
/// between, in one compiled program.
fn bitnet_2b_decode() -> Case {
    pinned(1, 20, 5, 128, 4096, vec![4095, 0, 2500])
}

#[test]
fn bitnet_2b_decode_over_the_whole_context() {
    if gpu_tests_skipped() {
        return;
    }
    check_gpu(&bitnet_2b_decode()).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn bitnet_2b_decode_over_the_whole_context_on_the_cpu() {
    check_cpu(&bitnet_2b_decode()).unwrap_or_else(|e| panic!("{e}"));
}

/// One kv head and one row over a long context: the CPU engine splits the positions.
fn bitnet_2b_one_kv_head_decode() -> Case {
    pinned(1, 4, 1, 128, 4096, vec![4095, 255, 256, 3000])
}

#[test]
fn one_kv_head_decode_over_the_whole_context_on_the_cpu() {
    check_cpu(&bitnet_2b_one_kv_head_decode()).unwrap_or_else(|e| panic!("{e}"));
}

fn smollm2_decode() -> Case {
    pinned(1, 9, 3, 64, 2048, vec![1999, 63, 64, 65])
}

#[test]
fn smollm2_decode_with_three_query_heads_per_kv_head() {
    if gpu_tests_skipped() {
        return;
    }
    check_gpu(&smollm2_decode()).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn smollm2_decode_with_three_query_heads_per_kv_head_on_the_cpu() {
    check_cpu(&smollm2_decode()).unwrap_or_else(|e| panic!("{e}"));
}

/// SmolLM2's decode and the 512-row prefill over F16 caches (the runtime's default), and
/// one with only the values in F16.
fn in_f16() -> [Case; 3] {
    [smollm2_decode().in_f16(true, true), prefill_of_512().in_f16(true, true), bitnet_2b_decode().in_f16(false, true)]
}

#[test]
fn f16_caches_match() {
    if gpu_tests_skipped() {
        return;
    }
    for c in in_f16() {
        check_gpu(&c).unwrap_or_else(|e| panic!("{e}"));
    }
}

#[test]
fn f16_caches_match_on_the_cpu() {
    for c in in_f16() {
        check_cpu(&c).unwrap_or_else(|e| panic!("{e}"));
    }
}

/// Enough (row, head) pairs that the positions are not split; rows at 0 ..= 511, then at
/// 200 ..= 711 of a 712-row cache.
fn prefill_of_512() -> Case {
    pinned(512, 4, 1, 64, 712, vec![0, 200])
}

#[test]
fn prefill_of_512_rows() {
    if gpu_tests_skipped() {
        return;
    }
    check_gpu(&prefill_of_512()).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn prefill_of_512_rows_on_the_cpu() {
    check_cpu(&prefill_of_512()).unwrap_or_else(|e| panic!("{e}"));
}

/// Scores in the hundreds: e^score overflows f32 unless the maximum is subtracted.
fn large_scores() -> Case {
    let mut c = pinned(3, 2, 1, 32, 300, vec![290, 5]);
    c.q = values(c.q.len(), 7, 64.0);
    c
}

#[test]
fn large_scores_need_the_maximum_subtracted() {
    if gpu_tests_skipped() {
        return;
    }
    check_gpu(&large_scores()).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn large_scores_need_the_maximum_subtracted_on_the_cpu() {
    check_cpu(&large_scores()).unwrap_or_else(|e| panic!("{e}"));
    // One row over a split context, too.
    let mut c = pinned(1, 2, 1, 32, 1000, vec![999, 600]);
    c.q = values(c.q.len(), 8, 64.0);
    check_cpu(&c).unwrap_or_else(|e| panic!("{e}"));
}

/// Twelve query heads per kv head: the GPU kernel takes them in two workgroups (8 and 4).
fn twelve_heads_per_kv_head() -> Case {
    pinned(1, 24, 2, 40, 300, vec![299, 31, 32, 33])
}

#[test]
fn twelve_query_heads_per_kv_head() {
    if gpu_tests_skipped() {
        return;
    }
    check_gpu(&twelve_heads_per_kv_head()).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn twelve_query_heads_per_kv_head_on_the_cpu() {
    check_cpu(&twelve_heads_per_kv_head()).unwrap_or_else(|e| panic!("{e}"));
}

/// Heads of 256 (more dimensions than the GPU kernel's threads) and 1000, decode and a few
/// rows of prefill.
fn wide_heads() -> [Case; 2] {
    [pinned(1, 4, 2, 256, 200, vec![199, 0, 70]), pinned(3, 2, 1, 1000, 90, vec![0, 87])]
}

#[test]
fn wide_heads_match() {
    if gpu_tests_skipped() {
        return;
    }
    for c in wide_heads() {
        check_gpu(&c).unwrap_or_else(|e| panic!("{e}"));
    }
}

#[test]
fn wide_heads_match_on_the_cpu() {
    for c in wide_heads() {
        check_cpu(&c).unwrap_or_else(|e| panic!("{e}"));
    }
}

fn one_element_heads() -> Case {
    pinned(2, 1, 1, 1, 130, vec![0, 128, 77])
}

#[test]
fn one_head_of_one_element() {
    if gpu_tests_skipped() {
        return;
    }
    check_gpu(&one_element_heads()).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn one_head_of_one_element_on_the_cpu() {
    check_cpu(&one_element_heads()).unwrap_or_else(|e| panic!("{e}"));
}

/// Per layer, KV_WRITE of 4 key and value rows at `pos`, then ATTENTION of 4 query rows
/// at `pos`, as a model records them; the program runs at positions 0, 4, 8, ..., so each
/// run reads the rows the runs before it wrote. The caches start as NaN: an ATTENTION
/// that ran before its KV_WRITE finished, or read past it, would show. The two layers'
/// shapes differ, so (on the GPU) their split-K partials ask for different scratch sizes
/// and share the larger buffer.
fn chunked_prefill_of_two_layers<E: Engine>(pair: &mut Pair<E>, cache_dtype: DType) -> Result<(), String> {
    let f16 = cache_dtype == DType::F16;
    let (n, n_ctx) = (4, 200);
    let layers = [(4usize, 2usize, 48usize), (6, 3, 100)]; // (n_head, n_kv, head_dim)
    let mut inputs = Vec::new();
    for (l, &(n_head, n_kv, hd)) in layers.iter().enumerate() {
        let seed = 10 * l as u32;
        let matrix = |rows, cols, v: Vec<f32>| {
            HostTensor::from_f32("x", Shape::matrix(rows, cols).expect("shape"), v).expect("sizes agree")
        };
        inputs.push((format!("q{l}"), matrix(n, n_head * hd, values(n * n_head * hd, seed + 1, 2.0))));
        inputs.push((format!("k{l}"), matrix(n, n_kv * hd, values(n * n_kv * hd, seed + 2, 2.0))));
        inputs.push((format!("v{l}"), matrix(n, n_kv * hd, values(n * n_kv * hd, seed + 3, 4.0))));
        let nan = vec![f32::NAN; n_ctx * n_kv * hd];
        let cache = if f16 { matrix_f16(n_ctx, n_kv * hd, &nan) } else { matrix(n_ctx, n_kv * hd, nan) };
        inputs.push((format!("kc{l}"), cache.clone()));
        inputs.push((format!("vc{l}"), cache));
    }
    let inputs: Vec<(&str, HostTensor)> = inputs.iter().map(|(name, t)| (name.as_str(), t.clone())).collect();
    let positions: Vec<u32> = (0..12).map(|i| 4 * i).collect();
    let runs: Vec<Vec<ParamValue>> = positions.iter().map(|&p| vec![ParamValue::U32(p)]).collect();
    let results = pair.run_each(&inputs, &runs, |b: &mut ProgramBuilder, name, ids| {
        let pos = b.param_u32("pos")?;
        let mut outs = Vec::new();
        for (l, &(n_head, _, hd)) in layers.iter().enumerate() {
            let [q, k, v, kc, vc] = [0, 1, 2, 3, 4].map(|i| ids[5 * l + i]);
            b.kv_write(kc, k, pos)?;
            b.kv_write(vc, v, pos)?;
            let out = b.alloc(&name(&format!("out{l}")), DType::F32, &[n, n_head * hd])?;
            b.attention(Attention { out, q, k_cache: kc, v_cache: vc, head_dim: hd as u32, rows: pos.into() })?;
            outs.extend([out, kc, vc]);
        }
        Ok(outs)
    });
    let engine = pair.engine.name();
    for (run, (got, reference)) in results.iter().enumerate() {
        for (l, &(n_head, n_kv, head_dim)) in layers.iter().enumerate() {
            // KV_WRITE is exact, so both engines attend over the same caches: the
            // reference's, which the bound reads.
            if got[3 * l + 1] != reference[3 * l + 1] {
                return Err(format!("{engine} engine: run {run}, layer {l}: key caches differ"));
            }
            if got[3 * l + 2] != reference[3 * l + 2] {
                return Err(format!("{engine} engine: run {run}, layer {l}: value caches differ"));
            }
            let c = Case {
                n,
                n_head,
                n_kv,
                head_dim,
                n_ctx,
                pos_param: true,
                positions: vec![positions[run]],
                q: f32s(inputs[5 * l].1.bytes()),
                k: if f16 { widen(&reference[3 * l + 1]) } else { f32s(&reference[3 * l + 1]) },
                v: if f16 { widen(&reference[3 * l + 2]) } else { f32s(&reference[3 * l + 2]) },
                f16: (f16, f16),
            };
            compare(&c, positions[run], &f32s(&got[3 * l]), &f32s(&reference[3 * l]))
                .map_err(|e| format!("{engine} engine: run {run}, layer {l}: {e}"))?;
        }
    }
    Ok(())
}

#[test]
fn chunked_prefill_of_two_layers_in_one_program() {
    if gpu_tests_skipped() {
        return;
    }
    for dtype in [DType::F32, DType::F16] {
        chunked_prefill_of_two_layers(&mut pair(), dtype).unwrap_or_else(|e| panic!("{e}"));
    }
}

#[test]
fn chunked_prefill_of_two_layers_in_one_program_on_the_cpu() {
    for dtype in [DType::F32, DType::F16] {
        on_cpu_levels(|p| chunked_prefill_of_two_layers(p, dtype)).unwrap_or_else(|e| panic!("{e}"));
    }
}

/// A head too wide for the GPU kernel's workgroup memory (4096 elements) is a typed error
/// naming ATTENTION and the head, not a panic or a wrong answer.
#[test]
fn a_head_too_wide_for_the_gpu_kernel_is_an_error() {
    if gpu_tests_skipped() {
        return;
    }
    let mut gpu =
        purebee_engine_gpu::GpuEngine::new(&purebee_engine_gpu::GpuOptions::default()).expect("a wgpu adapter");
    let hd = 4096;
    let tensor = |name: &str, rows| {
        HostTensor::from_f32(name, Shape::matrix(rows, hd).expect("shape"), vec![0.5; rows * hd]).expect("sizes agree")
    };
    let q = gpu.memory_mut().insert("wide.q", tensor("q", 1)).expect("unique");
    let k = gpu.memory_mut().insert("wide.k", tensor("k", 4)).expect("unique");
    let v = gpu.memory_mut().insert("wide.v", tensor("v", 4)).expect("unique");
    let mut b = ProgramBuilder::new("wide", gpu.memory_mut());
    let out = b.alloc("wide.out", DType::F32, &[1, hd]).expect("alloc");
    b.attention(Attention { out, q, k_cache: k, v_cache: v, head_dim: hd as u32, rows: (U32Arg::Const(3)).into() })
        .expect("a valid ATTENTION");
    let program = b.finish();
    let err = gpu.execute(&program, &[]).expect_err("a head of 4096 does not fit the kernel").to_string();
    assert!(err.contains("ATTENTION") && err.contains("4096"), "{err}");
}
