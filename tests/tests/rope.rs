//! ROPE: the GPU engine and the CPU engine (every SIMD path this CPU runs) vs the reference
//! engine over random shapes (head dims odd or even, rot_dim
//! below head_dim, row counts and widths that are not multiples of the 256-thread
//! workgroup), both pairings, in place and not, with position and base as run-time
//! parameters or constants; one compiled program runs at several positions up to 4600
//! (a 4096 context plus a 512-row prefill).
//!
//! Tolerance, per rotated element (u = 2^-24; derivation in `rope.wgsl`'s header): the
//! kernel's angle is within 11u·|θ| + 2u of the exact θ (frequency 8u, the rounding of θ
//! itself u·|θ|, the reduction by π/2 2u plus u·|θ| past 2^16), its sine and cosine within
//! 2u more, and the rotation `a·cos − b·sin` rounds twice: so
//! `|got − want| ≤ (|a| + |b|)·(11u·|θ| + 6u) + u·|want|`, the last term for the reference's
//! own rounding of its f64 result. |θ| comes from the reference's f64 angle. At position
//! 4600 with θ_0 = 4600 this allows 3e-3·(|a| + |b|): the precision f32 has for such an
//! angle, no more (its spacing there is 4.9e-4). Elements past rot_dim are copies: exact.
//!
//! The CPU engine computes the angle, its sine and cosine and the rotation in f64 exactly as
//! the reference does and rounds once, so on the CPU every element must be bit for bit the
//! reference's.

use proptest::prelude::*;
use purebee_isa::ops::{Rope, RopeStyle};
use purebee_isa::{DType, Engine, F32Arg, ParamValue, ProgramBuilder, U32Arg};
use purebee_memory::{HostTensor, Shape};
use purebee_tests::differential::{f32s, gpu_tests_skipped, on_cpu_levels, pair, Pair};

const U: f64 = 1.0 / (1u64 << 24) as f64;

/// One ROPE problem.
#[derive(Clone, Debug)]
struct Case {
    rows: usize,
    n_heads: usize,
    head_dim: usize,
    rot_dim: usize,
    style: RopeStyle,
    in_place: bool,
    /// The base is a run-time parameter (else a constant).
    base_param: bool,
    base: f32,
    /// The position is a run-time parameter (else the constant `positions[0]`).
    pos_param: bool,
    positions: Vec<u32>,
    x: Vec<f32>,
}

impl Case {
    fn shape(&self) -> String {
        format!(
            "rows={} n_heads={} head_dim={} rot_dim={} {:?} in_place={} base={} (param: {}) pos param: {}",
            self.rows,
            self.n_heads,
            self.head_dim,
            self.rot_dim,
            self.style,
            self.in_place,
            self.base,
            self.base_param,
            self.pos_param
        )
    }
}

/// The elements of pair `i` of a head, as the ISA pairs them.
fn pair_of(style: RopeStyle, rot_dim: usize, i: usize) -> (usize, usize) {
    match style {
        RopeStyle::Neox => (i, i + rot_dim / 2),
        RopeStyle::Normal => (2 * i, 2 * i + 1),
    }
}

/// What the engine under test is held to.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Expect {
    /// The bound of the module docs for rotated elements (the GPU engine).
    Bound,
    /// The reference's bits for every element (the CPU engine).
    Exact,
}

/// Compares one run's output with the reference's, element by element, within the bound
/// the module documents (or exactly).
fn compare(c: &Case, pos: u32, got: &[f32], want: &[f32], expect: Expect) -> Result<(), String> {
    let width = c.n_heads * c.head_dim;
    if got.len() != want.len() {
        return Err(format!("{}: {} values, expected {}", c.shape(), got.len(), want.len()));
    }
    for r in 0..c.rows {
        let p = pos as f64 + r as f64;
        for h in 0..c.n_heads {
            let head = r * width + h * c.head_dim;
            for i in 0..c.rot_dim / 2 {
                let theta = p * (c.base as f64).powf(-2.0 * i as f64 / c.rot_dim as f64);
                let (a, b) = pair_of(c.style, c.rot_dim, i);
                let (xa, xb) = (c.x[head + a] as f64, c.x[head + b] as f64);
                for e in [head + a, head + b] {
                    let (g, w) = (got[e] as f64, want[e] as f64);
                    let bound = (xa.abs() + xb.abs()) * (11.0 * U * theta.abs() + 6.0 * U) + U * w.abs();
                    let within = match expect {
                        // Written so that a NaN fails.
                        Expect::Bound => (g - w).abs() <= bound,
                        Expect::Exact => got[e].to_bits() == want[e].to_bits(),
                    };
                    if !within {
                        return Err(format!(
                            "{} at pos {pos}: index {e} (row {r}, head {h}, pair {i}, θ = {theta}): got {g}, \
                             expected {w}, difference {:e}, bound {}",
                            c.shape(),
                            (g - w).abs(),
                            match expect {
                                Expect::Bound => format!("{bound:e}"),
                                Expect::Exact => "0 (bit for bit)".into(),
                            }
                        ));
                    }
                }
            }
            for d in c.rot_dim..c.head_dim {
                let e = head + d;
                if got[e].to_bits() != want[e].to_bits() {
                    return Err(format!(
                        "{} at pos {pos}: index {e} (row {r}, head {h}, tail element {d}): got {}, expected {} \
                         (a copy must be exact), difference {:e}",
                        c.shape(),
                        got[e],
                        want[e],
                        (got[e] - want[e]).abs()
                    ));
                }
            }
        }
    }
    Ok(())
}

/// Runs the case's program once per position on both engines of `pair` and compares each
/// run.
fn check<E: Engine>(pair: &mut Pair<E>, c: &Case, expect: Expect) -> Result<(), String> {
    let width = c.n_heads * c.head_dim;
    let shape = Shape::matrix(c.rows, width).expect("shape");
    let x = HostTensor::from_f32("x", shape.clone(), c.x.clone()).expect("sizes agree");
    let zeros = HostTensor::from_f32("zeros", shape, vec![0.0; c.rows * width]).expect("sizes agree");
    let positions: Vec<u32> = if c.pos_param { c.positions.clone() } else { c.positions[..1].to_vec() };
    let runs: Vec<Vec<ParamValue>> = positions
        .iter()
        .map(|&p| {
            let mut v = Vec::new();
            if c.pos_param {
                v.push(ParamValue::U32(p));
            }
            if c.base_param {
                v.push(ParamValue::F32(c.base));
            }
            v
        })
        .collect();
    let inputs = [("x", x), ("zeros", zeros)];
    let results = pair.run_each(&inputs, &runs, |b: &mut ProgramBuilder, name, ids| {
        let pos = if c.pos_param { b.param_u32("pos")? } else { U32Arg::Const(c.positions[0]) };
        let base = if c.base_param { b.param_f32("base")? } else { F32Arg::Const(c.base) };
        // In place, each run first copies x into `out` (adding exact zeros), so that every
        // run rotates the same input.
        let out = b.alloc(&name("out"), DType::F32, &[c.rows, width])?;
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
            pos: pos.into(),
        })?;
        Ok(vec![out])
    });
    for (run, (got, reference)) in results.iter().enumerate() {
        compare(c, positions[run], &f32s(&got[0]), &f32s(&reference[0]), expect)
            .map_err(|e| format!("{} engine: {e}", pair.engine.name()))?;
    }
    Ok(())
}

/// The case on the GPU engine, within the bound.
fn check_gpu(c: &Case) -> Result<(), String> {
    check(&mut pair(), c, Expect::Bound)
}

/// The case on the CPU engine, every SIMD path, bit for bit.
fn check_cpu(c: &Case) -> Result<(), String> {
    on_cpu_levels(|p| check(p, c, Expect::Exact))
}

fn style() -> impl Strategy<Value = RopeStyle> {
    prop_oneof![Just(RopeStyle::Neox), Just(RopeStyle::Normal)]
}

fn case() -> impl Strategy<Value = Case> {
    // Head dims up to 130, odd ones included (the ISA allows any with an even rot_dim ≤ it).
    (1usize..=20, 1usize..=6, 2usize..=130)
        .prop_flat_map(|(rows, n_heads, head_dim)| {
            (
                Just(rows),
                Just(n_heads),
                Just(head_dim),
                prop_oneof![Just(head_dim / 2), 1..=head_dim / 2], // half of rot_dim
                style(),
                any::<bool>(),
                any::<bool>(),
                // Bases from 1 to 10^6, log-uniform (10^4, 10^5 and 5·10^5 in real models).
                (0.0f64..6.0).prop_map(|e| 10f64.powf(e) as f32),
                any::<bool>(),
                prop::collection::vec(0u32..=4600 - rows as u32, 1..=3),
                prop::collection::vec(-4.0f32..4.0, rows * n_heads * head_dim),
            )
        })
        .prop_map(|(rows, n_heads, head_dim, half_rot, style, in_place, base_param, base, pos_param, positions, x)| {
            Case {
                rows,
                n_heads,
                head_dim,
                rot_dim: 2 * half_rot,
                style,
                in_place,
                base_param,
                base,
                pos_param,
                positions,
                x,
            }
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn rope_matches_the_reference(c in case()) {
        if gpu_tests_skipped() { return Ok(()); }
        check_gpu(&c).map_err(TestCaseError::fail)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]
    #[test]
    fn cpu_rope_matches_the_reference_bit_for_bit(c in case()) {
        check_cpu(&c).map_err(TestCaseError::fail)?;
    }
}

/// Deterministic values in [−4, 4) for the pinned shapes.
fn values(len: usize, seed: u32) -> Vec<f32> {
    let mut s = seed;
    (0..len)
        .map(|_| {
            s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (s >> 8) as f32 / (1u32 << 24) as f32 * 8.0 - 4.0
        })
        .collect()
}

fn pinned(rows: usize, n_heads: usize, head_dim: usize, rot_dim: usize, style: RopeStyle, base: f32) -> Case {
    Case {
        rows,
        n_heads,
        head_dim,
        rot_dim,
        style,
        in_place: false,
        base_param: true,
        base,
        pos_param: true,
        positions: vec![0],
        x: values(rows * n_heads * head_dim, (rows * head_dim) as u32),
    }
}

/// 20 heads of 128, NEOX, base 500000, both in place (as the runtime does) and not.
fn bitnet_2b_queries(check: impl Fn(&Case) -> Result<(), String>) -> Result<(), String> {
    for in_place in [false, true] {
        check(&Case { in_place, positions: vec![4095, 0, 1, 2047], ..pinned(1, 20, 128, 128, RopeStyle::Neox, 5e5) })?;
    }
    Ok(())
}

#[test]
fn bitnet_2b_queries_decode_at_the_end_of_the_context() {
    if gpu_tests_skipped() {
        return;
    }
    bitnet_2b_queries(check_gpu).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn bitnet_2b_queries_decode_at_the_end_of_the_context_on_the_cpu() {
    bitnet_2b_queries(check_cpu).unwrap_or_else(|e| panic!("{e}"));
}

/// 5 kv heads of 128, rows at positions 3584 ..= 4095.
fn bitnet_2b_keys() -> Case {
    Case { positions: vec![3584, 0], ..pinned(512, 5, 128, 128, RopeStyle::Neox, 5e5) }
}

#[test]
fn bitnet_2b_keys_prefill_of_512_rows() {
    if gpu_tests_skipped() {
        return;
    }
    check_gpu(&bitnet_2b_keys()).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn bitnet_2b_keys_prefill_of_512_rows_on_the_cpu() {
    check_cpu(&bitnet_2b_keys()).unwrap_or_else(|e| panic!("{e}"));
}

/// 9 heads of 64, adjacent pairs, base 100000.
fn smollm2_normal_pairs() -> Case {
    Case { base_param: false, pos_param: false, positions: vec![777], ..pinned(7, 9, 64, 64, RopeStyle::Normal, 1e5) }
}

#[test]
fn smollm2_normal_pairs_with_constant_position_and_base() {
    if gpu_tests_skipped() {
        return;
    }
    check_gpu(&smollm2_normal_pairs()).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn smollm2_normal_pairs_with_constant_position_and_base_on_the_cpu() {
    check_cpu(&smollm2_normal_pairs()).unwrap_or_else(|e| panic!("{e}"));
}

/// head_dim 5, rot_dim 2: one pair and three untouched elements per head, both pairings,
/// in place and not.
fn partial_rotation_of_an_odd_head(check: impl Fn(&Case) -> Result<(), String>) -> Result<(), String> {
    for style in [RopeStyle::Neox, RopeStyle::Normal] {
        for in_place in [false, true] {
            check(&Case { in_place, positions: vec![3, 4000], ..pinned(3, 257, 5, 2, style, 1e4) })?;
        }
    }
    Ok(())
}

#[test]
fn partial_rotation_of_an_odd_head_keeps_the_tail() {
    if gpu_tests_skipped() {
        return;
    }
    partial_rotation_of_an_odd_head(check_gpu).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn partial_rotation_of_an_odd_head_keeps_the_tail_on_the_cpu() {
    partial_rotation_of_an_odd_head(check_cpu).unwrap_or_else(|e| panic!("{e}"));
}
