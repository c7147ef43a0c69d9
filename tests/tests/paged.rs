//! Rows of several sequences in one instruction: ROPE with per-row positions, KV_WRITE and
//! ATTENTION over a KV cache shared in pages. The GPU engine and the CPU engine (every SIMD
//! path this CPU runs) vs the reference engine, over random layouts: 1 to 17 rows of 1 to 4
//! sequences, pages of 1 to 40 positions (odd sizes included) placed in the cache in a
//! shuffled order (so a sequence's cache rows are not in order, and no two sequences' rows
//! are next to each other by design), page-table entries no row reaches holding anything
//! (even pages past the cache), positions up to 700 (past the CPU's 256-position parts and
//! the GPU's 128-position splits), some rows of a sequence consecutive as in a prefill
//! chunk, others far apart; head dims odd and even up to 128, 1 to 3 kv heads with 1 to 4
//! query heads each. Cache rows no row may read hold NaN, so reading one fails the test.
//!
//! Tolerances:
//! - KV_WRITE is a copy: the whole cache must be the reference's bit for bit (random 32-bit
//!   patterns, NaN payloads included); into an F16 cache (every case is run both ways) it
//!   rounds, bit-exact too.
//! - ROPE: `tests/tests/rope.rs`'s bound on the GPU (the same kernel code, with the row's
//!   own position as the angle's multiplier), bit for bit on the CPU.
//! - ATTENTION: `tests/tests/attention.rs`'s bound, unchanged: the engines accumulate the same
//!   kinds of sums (f32 dot products for the scores, running maxima with rescaled sums over
//!   chunks of positions, a merge of the chunks' (max, sum, values) with one factor each),
//!   only the chunks differ. The bound counts `N` chunks on one row's chain; here
//!   `N = max(ceil(L / 32), parts)`, where `parts` are the CPU's (one per page boundary and
//!   per 256 positions: with pages of one position, one per position), so that the bound's
//!   per-chunk terms (a rescaling and two roundings each) cover the longest chain either
//!   engine has. The GPU's paged chain is no longer than its consecutive one (tiles of 32
//!   within a split, at most 64 splits merged). Half the cases (by seed, the invariance
//!   cases too) have F16 caches: every engine reads the same f16 values widened exactly,
//!   so the case's `k` and `v` hold those values and the same bound holds.
//!
//! Batch invariance (the ISA's promise for paged ATTENTION): on each engine, every row's
//! output in a multi-row instruction must be bit for bit the same as the row computed alone
//! (same sequence, page table and caches), with the rows in reverse order, and with the rows
//! split into two instructions; on the CPU also with one thread against two.
//!
//! Errors: a sequence out of range, a position past `max_pages · page_size`, a page outside
//! the cache (the row's own, or one of its prefix: ATTENTION only) must be the same
//! `ExecError::IndexOutOfRange` on every engine, with nothing written (the cache or output
//! unchanged), whether the bad table came from the host (`Engine::write`) or from a
//! GRID_WRITE in the program. On the GPU, which checks the tables on the host, a table that
//! a kernel wrote is a typed error.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};

use proptest::prelude::*;
use purebee_engine_cpu::{CpuEngine, CpuOptions};
use purebee_isa::ops::{Attention, CacheRows, PagedRows, Rope, RopeStyle, RowPositions};
use purebee_isa::{DType, Engine, F32Arg, IsaError, ParamValue, ProgramBuilder, TensorId};
use purebee_memory::{HostTensor, Shape};
use purebee_tests::differential::{
    cpu_levels, cpu_test_threads, f32s, gpu_tests_skipped, on_cpu_levels, pair, u32s, Pair,
};
use purebee_tests::rng::SplitMix64;

/// Bad tables: the same error on every engine, nothing written.
#[path = "paged/errors.rs"]
mod errors;

const U: f64 = 1.0 / (1u64 << 24) as f64;

/// Positions per tile of the GPU kernel, and the most positions of one CPU part.
const TILE: usize = 32;
const CPU_PART: usize = 256;

/// Rows of several sequences over a paged cache.
#[derive(Clone, Debug)]
struct Rows {
    page_size: usize,
    max_pages: usize,
    n_seq: usize,
    /// The cache's rows: every page in use, a few spare, and a partial page past them.
    n_ctx: usize,
    /// `[n_seq, max_pages]`.
    pages: Vec<u32>,
    pos: Vec<u32>,
    seq: Vec<u32>,
}

impl Rows {
    fn n(&self) -> usize {
        self.pos.len()
    }

    /// The cache row of position `t` of sequence `s`.
    fn cache_row(&self, s: usize, t: usize) -> usize {
        self.pages[s * self.max_pages + t / self.page_size] as usize * self.page_size + t % self.page_size
    }

    /// The cache rows row `r` attends to, positions `0 ..= pos[r]` in order.
    fn attended(&self, r: usize) -> Vec<usize> {
        (0..=self.pos[r] as usize).map(|t| self.cache_row(self.seq[r] as usize, t)).collect()
    }

    /// The rows `which`, in that order.
    fn subset(&self, which: &[usize]) -> Rows {
        Rows {
            pos: which.iter().map(|&r| self.pos[r]).collect(),
            seq: which.iter().map(|&r| self.seq[r]).collect(),
            ..self.clone()
        }
    }

    fn describe(&self) -> String {
        format!(
            "page_size={} max_pages={} n_seq={} n_ctx={} pos={:?} seq={:?}",
            self.page_size, self.max_pages, self.n_seq, self.n_ctx, self.pos, self.seq
        )
    }

    /// The three index tensors, as the host writes them.
    fn tables(&self) -> [(Vec<u32>, Shape); 3] {
        [
            (self.pos.clone(), Shape::vector(self.n())),
            (self.seq.clone(), Shape::vector(self.n())),
            (self.pages.clone(), Shape::matrix(self.n_seq, self.max_pages).expect("shape")),
        ]
    }
}

/// A random layout from `seed`: `n_seq` sequences of 1 ..= `max_len` positions, pages of
/// `page_size` positions shuffled over the cache, and up to `n` rows at distinct (sequence,
/// position) pairs, half of them in runs of up to six consecutive positions.
fn layout(seed: u64, n: usize, n_seq: usize, page_size: usize, max_len: usize) -> Rows {
    let mut rng = SplitMix64(seed);
    let lens: Vec<usize> = (0..n_seq).map(|_| 1 + rng.below(max_len as u64) as usize).collect();
    let need: Vec<usize> = lens.iter().map(|l| l.div_ceil(page_size)).collect();
    let max_pages = need.iter().copied().max().unwrap_or(1) + rng.below(3) as usize;
    let total = need.iter().sum::<usize>() + rng.below(3) as usize;
    let mut order: Vec<u32> = (0..total as u32).collect();
    for i in (1..order.len()).rev() {
        order.swap(i, rng.below(i as u64 + 1) as usize);
    }
    let n_ctx = total * page_size + rng.below(page_size as u64) as usize;
    let mut order = order.into_iter();
    let mut pages = Vec::with_capacity(n_seq * max_pages);
    for &need in &need {
        for j in 0..max_pages {
            // Entries no row reaches may hold anything, even a page past the cache.
            pages.push(if j < need { order.next().expect("enough pages") } else { rng.bits32() });
        }
    }
    let n = n.min(lens.iter().sum());
    let (mut pos, mut seq, mut taken) = (Vec::new(), Vec::new(), HashSet::new());
    while pos.len() < n {
        let s = rng.below(n_seq as u64) as usize;
        let run = if rng.below(2) == 0 { 1 + rng.below(6) as usize } else { 1 };
        let start = rng.below(lens[s] as u64) as usize;
        for t in start..(start + run).min(lens[s]) {
            if pos.len() < n && taken.insert((s, t)) {
                pos.push(t as u32);
                seq.push(s as u32);
            }
        }
    }
    Rows { page_size, max_pages, n_seq, n_ctx, pages, pos, seq }
}

/// The layout's parameters: seed, rows, sequences, page size, longest sequence.
fn layout_params(max_len: usize) -> impl Strategy<Value = (u64, usize, usize, usize, usize)> {
    (any::<u64>(), 1usize..=17, 1usize..=4, 1usize..=40, 1usize..=max_len)
}

static NAMES: AtomicU64 = AtomicU64::new(0);

/// A name no other tensor of this test binary has.
fn unique(name: &str) -> String {
    format!("paged{}.{name}", NAMES.fetch_add(1, Ordering::Relaxed))
}

fn f32_matrix(rows: usize, cols: usize, values: Vec<f32>) -> HostTensor {
    HostTensor::from_f32("x", Shape::matrix(rows, cols).expect("shape"), values).expect("sizes agree")
}

fn f16_matrix(rows: usize, cols: usize, halves: Vec<u16>) -> HostTensor {
    let bytes: Vec<u8> = halves.iter().flat_map(|h| h.to_le_bytes()).collect();
    HostTensor::from_bytes("x", DType::F16, Shape::matrix(rows, cols).expect("shape"), &bytes).expect("sizes agree")
}

fn u32_tensor((values, shape): (Vec<u32>, Shape)) -> HostTensor {
    HostTensor::from_u32("x", shape, values).expect("sizes agree")
}

fn bytes_of(words: &[u32]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

fn paged(ids: &[TensorId], page_size: usize) -> CacheRows {
    CacheRows::Paged(PagedRows { pos: ids[0], seq: ids[1], pages: ids[2], page_size: page_size as u32 })
}

// ---------------------------------------------------------------------------------------
// ATTENTION

/// One paged ATTENTION problem.
#[derive(Clone, Debug)]
struct AttnCase {
    rows: Rows,
    n_head: usize,
    n_kv: usize,
    head_dim: usize,
    /// `[n, n_head·head_dim]`.
    q: Vec<f32>,
    /// `[n_ctx, n_kv·head_dim]` each; rows no row attends to are NaN.
    k: Vec<f32>,
    v: Vec<f32>,
    /// Both caches are F16 (`k` and `v` hold f16 values).
    f16: bool,
}

impl AttnCase {
    fn new(rows: Rows, n_kv: usize, group: usize, head_dim: usize, seed: u64) -> AttnCase {
        let mut rng = SplitMix64(seed ^ 0x5eed);
        let (n_head, kv_width) = (n_kv * group, n_kv * head_dim);
        let q = (0..rows.n() * n_head * head_dim).map(|_| 2.0 * rng.symmetric_f32()).collect();
        let mut k = vec![f32::NAN; rows.n_ctx * kv_width];
        let mut v = vec![f32::NAN; rows.n_ctx * kv_width];
        let read: HashSet<usize> = (0..rows.n()).flat_map(|r| rows.attended(r)).collect();
        for c in read {
            for i in c * kv_width..(c + 1) * kv_width {
                k[i] = 2.0 * rng.symmetric_f32();
                v[i] = 4.0 * rng.symmetric_f32();
            }
        }
        let f16 = seed & 2 != 0;
        if f16 {
            for x in k.iter_mut().chain(v.iter_mut()) {
                *x = half::f16::from_f32(*x).to_f32();
            }
        }
        AttnCase { rows, n_head, n_kv, head_dim, q, k, v, f16 }
    }

    fn describe(&self) -> String {
        let (nh, nkv, hd, f16) = (self.n_head, self.n_kv, self.head_dim, self.f16);
        format!("n_head={nh} n_kv={nkv} head_dim={hd} f16 caches: {f16} {}", self.rows.describe())
    }

    /// A cache tensor of the case's dtype.
    fn cache(&self, values: &[f32]) -> HostTensor {
        let kv_width = self.n_kv * self.head_dim;
        if self.f16 {
            f16_matrix(self.rows.n_ctx, kv_width, values.iter().map(|&x| half::f16::from_f32(x).to_bits()).collect())
        } else {
            f32_matrix(self.rows.n_ctx, kv_width, values.to_vec())
        }
    }

    fn q_width(&self) -> usize {
        self.n_head * self.head_dim
    }

    /// The case restricted to rows `which` (the caches unchanged).
    fn subset(&self, which: &[usize]) -> AttnCase {
        let w = self.q_width();
        AttnCase {
            rows: self.rows.subset(which),
            q: which.iter().flat_map(|&r| self.q[r * w..(r + 1) * w].iter().copied()).collect(),
            ..self.clone()
        }
    }

    /// The inputs: q, the caches, then the three tables.
    fn inputs(&self) -> Vec<(&'static str, HostTensor)> {
        let n = self.rows.n();
        let [pos, seq, pages] = self.rows.tables().map(u32_tensor);
        vec![
            ("q", f32_matrix(n, self.q_width(), self.q.clone())),
            ("k", self.cache(&self.k)),
            ("v", self.cache(&self.v)),
            ("pos", pos),
            ("seq", seq),
            ("pages", pages),
        ]
    }
}

/// The parts of the CPU engine's chain for a row attending to `len` positions: they end at
/// every page boundary and every [`CPU_PART`] positions.
fn cpu_parts(len: usize, page: usize) -> usize {
    1 + (1..len).filter(|t| t % page == 0 || t % CPU_PART == 0).count()
}

/// `attention.rs`'s bound (module docs), per element, over each row's own positions.
fn compare_attention(c: &AttnCase, got: &[f32], want: &[f32]) -> Result<(), String> {
    let (hd, q_width, kv_width) = (c.head_dim, c.q_width(), c.n_kv * c.head_dim);
    if got.len() != want.len() || want.len() != c.rows.n() * q_width {
        return Err(format!("{}: {} outputs, expected {}", c.describe(), got.len(), want.len()));
    }
    let scale = 1.0 / (hd as f64).sqrt();
    for r in 0..c.rows.n() {
        let cells = c.rows.attended(r);
        let len = cells.len();
        let chain = len.div_ceil(TILE).max(cpu_parts(len, c.rows.page_size)) as f64;
        for h in 0..c.n_head {
            let kvh = h / (c.n_head / c.n_kv);
            let q = &c.q[r * q_width + h * hd..][..hd];
            let (mut a, mut lo, mut hi) = (0f64, f64::INFINITY, f64::NEG_INFINITY);
            for &t in &cells {
                let k = &c.k[t * kv_width + kvh * hd..][..hd];
                let s: f64 = q.iter().zip(k).map(|(&x, &y)| x as f64 * y as f64).sum::<f64>() * scale;
                let abs: f64 = q.iter().zip(k).map(|(&x, &y)| (x as f64 * y as f64).abs()).sum::<f64>() * scale;
                a = a.max(abs);
                lo = lo.min(s);
                hi = hi.max(s);
            }
            let e = (hd as f64 + 3.0) * U * a;
            let range = hi - lo + 2.0 * e;
            let delta = e + (12.0 + 15.0 * range + 6.0 * chain) * U;
            let k_roundings = 132.0 + 2.0 * chain;
            for d in 0..hd {
                let v_max = cells.iter().map(|&t| (c.v[t * kv_width + kvh * hd + d] as f64).abs()).fold(0.0, f64::max);
                let i = r * q_width + h * hd + d;
                let (g, w) = (got[i] as f64, want[i] as f64);
                let bound = 1.01 * (delta + k_roundings * U) * (v_max + w.abs()) + U * w.abs();
                // Written so that a NaN fails.
                let within = (g - w).abs() <= bound;
                if !within {
                    return Err(format!(
                        "{}: index {i} (row {r}, head {h}, dim {d}): got {g}, expected {w}, difference {:e}, bound \
                         {bound:e}",
                        c.describe(),
                        (g - w).abs()
                    ));
                }
            }
        }
    }
    Ok(())
}

/// Builds the case's ATTENTION over the inputs of [`AttnCase::inputs`].
fn build_attention(
    c: &AttnCase,
    b: &mut ProgramBuilder,
    name: &dyn Fn(&str) -> String,
    ids: &[TensorId],
) -> Result<Vec<TensorId>, IsaError> {
    let out = b.alloc(&name("out"), DType::F32, &[c.rows.n(), c.q_width()])?;
    b.attention(Attention {
        out,
        q: ids[0],
        k_cache: ids[1],
        v_cache: ids[2],
        head_dim: c.head_dim as u32,
        rows: paged(&ids[3..6], c.rows.page_size),
    })?;
    Ok(vec![out])
}

fn check_attention<E: Engine>(pair: &mut Pair<E>, c: &AttnCase) -> Result<(), String> {
    let (got, reference) = pair.run(&c.inputs(), &[], |b, name, ids| build_attention(c, b, name, ids));
    compare_attention(c, &f32s(&got[0]), &f32s(&reference[0]))
        .map_err(|e| format!("{} engine: {e}", pair.engine.name()))
}

fn head_dim() -> impl Strategy<Value = usize> {
    prop_oneof![32usize..=128, 1usize..=31]
}

/// A random case; positions up to `max_len`.
fn attention_case(max_len: usize) -> impl Strategy<Value = AttnCase> {
    (layout_params(max_len), 1usize..=3, 1usize..=4, head_dim()).prop_map(
        |((seed, n, n_seq, page, len), n_kv, group, hd)| {
            AttnCase::new(layout(seed, n, n_seq, page, len), n_kv, group, hd, seed)
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn paged_attention_matches_the_reference(c in attention_case(700)) {
        if gpu_tests_skipped() { return Ok(()); }
        check_attention(&mut pair(), &c).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn cpu_paged_attention_matches_the_reference(c in attention_case(700)) {
        on_cpu_levels(|p| check_attention(p, &c)).map_err(TestCaseError::fail)?;
    }
}

/// Two sequences past 8192 positions (where a GPU split takes more than its 128-position
/// minimum) and one short one, pages of 16 in reverse order.
fn long_context() -> AttnCase {
    let (page_size, max_pages, n_seq) = (16, 600, 3);
    let mut pages: Vec<u32> = (0..(n_seq * max_pages) as u32).rev().collect();
    pages[2 * max_pages + 1..].fill(u32::MAX);
    let n_ctx = n_seq * max_pages * page_size + 5;
    let rows = Rows {
        page_size,
        max_pages,
        n_seq,
        n_ctx,
        pages,
        pos: vec![9599, 8191, 8192, 8193, 3, 9000],
        seq: vec![0, 1, 1, 1, 2, 0],
    };
    AttnCase::new(rows, 1, 2, 64, 7)
}

#[test]
fn paged_attention_over_a_long_context() {
    if gpu_tests_skipped() {
        return;
    }
    check_attention(&mut pair(), &long_context()).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn cpu_paged_attention_over_a_long_context() {
    on_cpu_levels(|p| check_attention(p, &long_context())).unwrap_or_else(|e| panic!("{e}"));
}

// ---------------------------------------------------------------------------------------
// Batch invariance

/// Runs one engine on several instructions over the same caches and page table, one per
/// entry of `batches` (the rows of `c` each takes, in order); the outputs, per batch. The
/// tables of each batch are allocated by a program, then written by the host.
fn attend_batches<E: Engine>(e: &mut E, c: &AttnCase, batches: &[Vec<usize>]) -> Result<Vec<Vec<f32>>, String> {
    let kv_width = c.n_kv * c.head_dim;
    let mut made = Vec::new();
    let insert = |e: &mut E, name: &str, t: HostTensor, made: &mut Vec<TensorId>| {
        let id = e.memory_mut().insert(&unique(name), t).expect("unique name");
        made.push(id);
        id
    };
    let k = insert(e, "k", f32_matrix(c.rows.n_ctx, kv_width, c.k.clone()), &mut made);
    let v = insert(e, "v", f32_matrix(c.rows.n_ctx, kv_width, c.v.clone()), &mut made);
    let pages = insert(e, "pages", u32_tensor(c.rows.tables()[2].clone()), &mut made);
    let mut outs = Vec::new();
    for which in batches {
        let sub = c.subset(which);
        let q = insert(e, "q", f32_matrix(which.len(), c.q_width(), sub.q.clone()), &mut made);
        let mut b = ProgramBuilder::new(&unique("setup"), e.memory_mut());
        let pos = b.alloc(&unique("pos"), DType::U32, &[which.len()]).map_err(|e| e.to_string())?;
        let seq = b.alloc(&unique("seq"), DType::U32, &[which.len()]).map_err(|e| e.to_string())?;
        let out = b.alloc(&unique("out"), DType::F32, &[which.len(), c.q_width()]).map_err(|e| e.to_string())?;
        let setup = b.finish();
        made.extend([pos, seq, out]);
        e.execute(&setup, &[]).map_err(|e| e.to_string())?;
        e.write(pos, &bytes_of(&sub.rows.pos)).map_err(|e| e.to_string())?;
        e.write(seq, &bytes_of(&sub.rows.seq)).map_err(|e| e.to_string())?;
        let mut b = ProgramBuilder::new(&unique("attention"), e.memory_mut());
        let rows = paged(&[pos, seq, pages], c.rows.page_size);
        b.attention(Attention { out, q, k_cache: k, v_cache: v, head_dim: c.head_dim as u32, rows })
            .map_err(|e| e.to_string())?;
        let program = b.finish();
        e.execute(&program, &[]).map_err(|e| e.to_string())?;
        outs.push(f32s(&e.read(out).map_err(|e| e.to_string())?));
    }
    let mut b = ProgramBuilder::new(&unique("free"), e.memory_mut());
    for id in made {
        b.free(id).map_err(|e| e.to_string())?;
    }
    let free = b.finish();
    e.execute(&free, &[]).map_err(|e| e.to_string())?;
    Ok(outs)
}

/// The batches every row is compared across: all rows, each alone, all in reverse order,
/// and the rows split into two instructions.
fn batches(n: usize) -> Vec<Vec<usize>> {
    let mut batches = vec![(0..n).collect::<Vec<_>>()];
    batches.extend((0..n).map(|r| vec![r]));
    batches.push((0..n).rev().collect());
    if n > 1 {
        batches.push((0..n / 2).collect());
        batches.push((n / 2..n).collect());
    }
    batches
}

/// Fails unless every row of every batch has the bits that row has in `full` (the output of
/// all rows in order).
fn same_rows(c: &AttnCase, full: &[f32], batches: &[Vec<usize>], outs: &[Vec<f32>], what: &str) -> Result<(), String> {
    let w = c.q_width();
    for (which, out) in batches.iter().zip(outs) {
        for (i, &r) in which.iter().enumerate() {
            let (got, want) = (&out[i * w..(i + 1) * w], &full[r * w..(r + 1) * w]);
            if let Some(d) = got.iter().zip(want).position(|(g, x)| g.to_bits() != x.to_bits()) {
                return Err(format!(
                    "{what}: {}: row {r} computed with rows {which:?} differs from the same row among all rows at \
                     element {d}: {} vs {}",
                    c.describe(),
                    got[d],
                    want[d]
                ));
            }
        }
    }
    Ok(())
}

fn check_invariance<E: Engine>(e: &mut E, c: &AttnCase) -> Result<(), String> {
    let batches = batches(c.rows.n());
    let outs = attend_batches(e, c, &batches)?;
    same_rows(c, &outs[0], &batches, &outs, e.name())
}

/// Random cases for the invariance tests, from fixed seeds.
fn invariance_cases() -> impl Iterator<Item = AttnCase> {
    (0..6u64).map(|i| {
        let mut rng = SplitMix64(1000 + i);
        let seed = rng.next_u64();
        let n = 2 + rng.below(16) as usize;
        let n_seq = 1 + rng.below(4) as usize;
        let page = [1, 3, 16, 17, 40, 7][i as usize];
        let rows = layout(seed, n, n_seq, page, 1 + rng.below(700) as usize);
        let hd = [64, 7, 128, 33, 1, 100][i as usize];
        AttnCase::new(rows, 1 + rng.below(3) as usize, 1 + rng.below(4) as usize, hd, seed)
    })
}

#[test]
fn paged_attention_is_batch_invariant_on_the_gpu() {
    if gpu_tests_skipped() {
        return;
    }
    let mut pair = pair();
    for c in invariance_cases() {
        check_invariance(&mut pair.engine, &c).unwrap_or_else(|e| panic!("{e}"));
    }
}

#[test]
fn paged_attention_is_batch_invariant_on_the_cpu_whatever_the_threads() {
    for level in cpu_levels() {
        let engine = |threads| {
            CpuEngine::new(&CpuOptions { threads: Some(threads), simd: Some(level) })
                .unwrap_or_else(|e| panic!("CPU engine with the {level} kernels: {e}"))
        };
        let (mut one, mut two) = (engine(1), engine(cpu_test_threads()));
        for c in invariance_cases() {
            check_invariance(&mut two, &c).unwrap_or_else(|e| panic!("{level} kernels: {e}"));
            let all = vec![(0..c.rows.n()).collect::<Vec<_>>()];
            let alone = attend_batches(&mut one, &c, &all).unwrap_or_else(|e| panic!("{e}"));
            let together = attend_batches(&mut two, &c, &all).unwrap_or_else(|e| panic!("{e}"));
            let what = format!("{level} kernels, 1 thread vs {}", two.threads());
            same_rows(&c, &together[0], &all, &alone, &what).unwrap_or_else(|e| panic!("{e}"));
        }
    }
}

// ---------------------------------------------------------------------------------------
// A layer on the GPU: the fusion pass leaves per-row forms alone

/// ROPE q and k in place at the rows' own positions, KV_WRITE k and v into paged caches,
/// ATTENTION over them: the instructions a model records per layer, in the order the GPU's
/// ROPE + KV_WRITE fusion matches for consecutive rows. With per-row positions the fusion
/// pass must leave them to their own kernels, and the fused engine must give the unfused
/// one's bits.
#[test]
fn a_layer_of_paged_rows_runs_unfused_on_the_gpu() {
    if gpu_tests_skipped() {
        return;
    }
    let c = invariance_cases().nth(2).expect("a case");
    let (n, kv_width) = (c.rows.n(), c.n_kv * c.head_dim);
    let mut rng = SplitMix64(99);
    let mut values = |len: usize| (0..len).map(|_| rng.symmetric_f32()).collect::<Vec<_>>();
    let mut inputs = c.inputs();
    inputs.push(("k_new", f32_matrix(n, kv_width, values(n * kv_width))));
    inputs.push(("v_new", f32_matrix(n, kv_width, values(n * kv_width))));
    let build = |b: &mut ProgramBuilder, name: &dyn Fn(&str) -> String, ids: &[TensorId]| {
        let rows = paged(&ids[3..6], c.rows.page_size);
        let (q, k, v) = (b.alloc(&name("q_rot"), DType::F32, &[n, c.q_width()])?, ids[6], ids[7]);
        b.add(q, ids[0], ids[0])?;
        let out = b.alloc(&name("out"), DType::F32, &[n, c.q_width()])?;
        for x in [q, k] {
            let (head_dim, style, base) = (c.head_dim as u32, RopeStyle::Neox, F32Arg::Const(1e4));
            b.rope(Rope {
                out: x,
                x,
                head_dim,
                rot_dim: head_dim & !1,
                style,
                base,
                pos: RowPositions::PerRow(ids[3]),
            })?;
        }
        b.kv_write(ids[1], k, rows)?;
        b.kv_write(ids[2], v, rows)?;
        b.attention(Attention { out, q, k_cache: ids[1], v_cache: ids[2], head_dim: c.head_dim as u32, rows })?;
        Ok(vec![out, ids[1], ids[2]])
    };
    let kernels = |g: &mut purebee_engine_gpu::GpuEngine, p: &purebee_isa::Program| g.dispatched_kernels(p);
    let (fused, _, list) = pair().run_inspect(&inputs, &[], build, kernels);
    let (unfused, _, _) = purebee_tests::differential::unfused_pair(false).run_inspect(&inputs, &[], build, kernels);
    assert_eq!(
        list.unwrap_or_default(),
        [
            "elementwise.wgsl:binary",
            "rope.wgsl:rope_rows_inplace",
            "rope.wgsl:rope_rows_inplace",
            "kv_write.wgsl:kv_write_paged",
            "kv_write.wgsl:kv_write_paged",
            "attention.wgsl (paged):partial",
            "attention.wgsl (paged):combine",
        ]
    );
    for (i, (a, b)) in fused.iter().zip(&unfused).enumerate() {
        assert!(a == b, "output {i}: the fused engine's bits differ from the unfused one's");
    }
}

// ---------------------------------------------------------------------------------------
// KV_WRITE

/// Both cache dtypes.
fn check_kv_write<E: Engine>(pair: &mut Pair<E>, rows: &Rows, w: usize, seed: u64) -> Result<(), String> {
    check_kv_write_into(pair, rows, w, seed, DType::F32)?;
    check_kv_write_into(pair, rows, w, seed, DType::F16)
}

fn check_kv_write_into<E: Engine>(
    pair: &mut Pair<E>,
    rows: &Rows,
    w: usize,
    seed: u64,
    dtype: DType,
) -> Result<(), String> {
    let mut rng = SplitMix64(seed);
    let bits = |len: usize, rng: &mut SplitMix64| (0..len).map(|_| f32::from_bits(rng.bits32())).collect::<Vec<_>>();
    let src = bits(rows.n() * w, &mut rng);
    let cache = bits(rows.n_ctx * w, &mut rng);
    let cache = match dtype {
        DType::F16 => f16_matrix(rows.n_ctx, w, cache.iter().map(|x| x.to_bits() as u16).collect()),
        _ => f32_matrix(rows.n_ctx, w, cache),
    };
    let [pos, seq, pages] = rows.tables().map(u32_tensor);
    let inputs =
        [("src", f32_matrix(rows.n(), w, src)), ("cache", cache), ("pos", pos), ("seq", seq), ("pages", pages)];
    let (got, reference) = pair.run(&inputs, &[], |b: &mut ProgramBuilder, _, ids| {
        b.kv_write(ids[1], ids[0], paged(&ids[2..5], rows.page_size))?;
        Ok(vec![ids[1]])
    });
    let (got, want) = match dtype {
        DType::F16 => (halves(&got[0]), halves(&reference[0])),
        _ => (u32s(&got[0]), u32s(&reference[0])),
    };
    if let Some(i) = (0..want.len().max(got.len())).find(|&i| got.get(i) != want.get(i)) {
        return Err(format!(
            "{} engine: {dtype} cache w={w} {}: cache element {i} (row {}, col {}): got {:#010x?}, expected {:#010x?}",
            pair.engine.name(),
            rows.describe(),
            i / w,
            i % w,
            got.get(i),
            want.get(i)
        ));
    }
    Ok(())
}

/// F16 bytes as their bits.
fn halves(bytes: &[u8]) -> Vec<u32> {
    bytes.chunks_exact(2).map(|b| u16::from_le_bytes([b[0], b[1]]) as u32).collect()
}

fn kv_write_case() -> impl Strategy<Value = (Rows, usize, u64)> {
    (layout_params(200), 1usize..=300)
        .prop_map(|((seed, n, n_seq, page, len), w)| (layout(seed, n, n_seq, page, len), w, seed))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn paged_kv_write_matches_the_reference_bit_for_bit((rows, w, seed) in kv_write_case()) {
        if gpu_tests_skipped() { return Ok(()); }
        check_kv_write(&mut pair(), &rows, w, seed).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn cpu_paged_kv_write_matches_the_reference_bit_for_bit((rows, w, seed) in kv_write_case()) {
        on_cpu_levels(|p| check_kv_write(p, &rows, w, seed)).map_err(TestCaseError::fail)?;
    }
}

// ---------------------------------------------------------------------------------------
// ROPE with per-row positions

/// One ROPE of rows at their own positions.
#[derive(Clone, Debug)]
struct RopeCase {
    n_heads: usize,
    head_dim: usize,
    rot_dim: usize,
    style: RopeStyle,
    in_place: bool,
    base_param: bool,
    base: f32,
    pos: Vec<u32>,
    x: Vec<f32>,
}

/// The elements of pair `i` of a head, as the ISA pairs them.
fn pair_of(style: RopeStyle, rot_dim: usize, i: usize) -> (usize, usize) {
    match style {
        RopeStyle::Neox => (i, i + rot_dim / 2),
        RopeStyle::Normal => (2 * i, 2 * i + 1),
    }
}

/// `rope.rs`'s bound (module docs) on the GPU, bit for bit on the CPU; copies exact.
fn compare_rope(c: &RopeCase, got: &[f32], want: &[f32], exact: bool) -> Result<(), String> {
    let width = c.n_heads * c.head_dim;
    if got.len() != want.len() {
        return Err(format!("{c:?}: {} values, expected {}", got.len(), want.len()));
    }
    for (r, &p) in c.pos.iter().enumerate() {
        for h in 0..c.n_heads {
            let head = r * width + h * c.head_dim;
            for i in 0..c.rot_dim / 2 {
                let theta = p as f64 * (c.base as f64).powf(-2.0 * i as f64 / c.rot_dim as f64);
                let (a, b) = pair_of(c.style, c.rot_dim, i);
                let (xa, xb) = (c.x[head + a] as f64, c.x[head + b] as f64);
                for e in [head + a, head + b] {
                    let (g, w) = (got[e] as f64, want[e] as f64);
                    let bound = (xa.abs() + xb.abs()) * (11.0 * U * theta.abs() + 6.0 * U) + U * w.abs();
                    // Written so that a NaN fails.
                    let within = if exact { got[e].to_bits() == want[e].to_bits() } else { (g - w).abs() <= bound };
                    if !within {
                        return Err(format!(
                            "rows at {:?}, {} heads of {} (rot {}), {:?}, in place {}, base {}: index {e} (row {r} at \
                             {p}, head {h}, pair {i}): got {g}, expected {w}, bound {}",
                            c.pos,
                            c.n_heads,
                            c.head_dim,
                            c.rot_dim,
                            c.style,
                            c.in_place,
                            c.base,
                            if exact { "bit for bit".to_string() } else { format!("{bound:e}") }
                        ));
                    }
                }
            }
            for d in c.rot_dim..c.head_dim {
                let e = head + d;
                if got[e].to_bits() != want[e].to_bits() {
                    return Err(format!("row {r}, head {h}: tail element {d} not copied: {} vs {}", got[e], want[e]));
                }
            }
        }
    }
    Ok(())
}

fn check_rope<E: Engine>(pair: &mut Pair<E>, c: &RopeCase, exact: bool) -> Result<(), String> {
    let (rows, width) = (c.pos.len(), c.n_heads * c.head_dim);
    let inputs = [
        ("x", f32_matrix(rows, width, c.x.clone())),
        ("zeros", f32_matrix(rows, width, vec![0.0; rows * width])),
        ("pos", u32_tensor((c.pos.clone(), Shape::vector(rows)))),
    ];
    let params = if c.base_param { vec![ParamValue::F32(c.base)] } else { vec![] };
    let (got, reference) = pair.run(&inputs, &params, |b: &mut ProgramBuilder, name, ids| {
        let base = if c.base_param { b.param_f32("base")? } else { F32Arg::Const(c.base) };
        let out = b.alloc(&name("out"), DType::F32, &[rows, width])?;
        let x = if c.in_place {
            b.add(out, ids[0], ids[1])?;
            out
        } else {
            ids[0]
        };
        b.rope(Rope {
            out,
            x,
            head_dim: c.head_dim as u32,
            rot_dim: c.rot_dim as u32,
            style: c.style,
            base,
            pos: RowPositions::PerRow(ids[2]),
        })?;
        Ok(vec![out])
    });
    compare_rope(c, &f32s(&got[0]), &f32s(&reference[0]), exact)
        .map_err(|e| format!("{} engine: {e}", pair.engine.name()))
}

fn rope_case() -> impl Strategy<Value = RopeCase> {
    (1usize..=20, 1usize..=6, 2usize..=130, any::<u64>()).prop_flat_map(|(rows, n_heads, head_dim, seed)| {
        (
            prop_oneof![Just(head_dim / 2), 1..=head_dim / 2],
            prop_oneof![Just(RopeStyle::Neox), Just(RopeStyle::Normal)],
            any::<bool>(),
            any::<bool>(),
            (0.0f64..6.0).prop_map(|e| 10f64.powf(e) as f32),
        )
            .prop_map(move |(half_rot, style, in_place, base_param, base)| {
                let mut rng = SplitMix64(seed);
                // Positions anywhere up to 4600, some runs of consecutive ones, repeats allowed.
                let mut pos = Vec::new();
                while pos.len() < rows {
                    let start = rng.below(4600) as u32;
                    let run = 1 + rng.below(4) as u32;
                    pos.extend((start..start + run).take(rows - pos.len()));
                }
                let x = (0..rows * n_heads * head_dim).map(|_| 4.0 * rng.symmetric_f32()).collect();
                RopeCase { n_heads, head_dim, rot_dim: 2 * half_rot, style, in_place, base_param, base, pos, x }
            })
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn per_row_rope_matches_the_reference(c in rope_case()) {
        if gpu_tests_skipped() { return Ok(()); }
        check_rope(&mut pair(), &c, false).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn cpu_per_row_rope_matches_the_reference_bit_for_bit(c in rope_case()) {
        on_cpu_levels(|p| check_rope(p, &c, true)).map_err(TestCaseError::fail)?;
    }
}
