//! TENSOR_ADD, ELEMENT_MUL, SILU, RELU2, GELU: the GPU engine and the CPU engine (every SIMD
//! path this CPU runs) vs the reference engine over random shapes (sizes that are not
//! multiples of the 256-thread workgroup nor of a SIMD width) and random data, in place and
//! not.
//!
//! Tolerances: add, mul and relu2 are one or two correctly rounded f32 operations in every
//! engine (the reference computes relu2 in f64 and rounds once, which is the same value
//! as squaring an f32 exactly rounded), so they must agree exactly. SILU computes its own
//! e^x to about one ulp (`exp_accurate` in `elementwise.wgsl`), then one add and one division
//! (WGSL allows 2.5 ulp for the division): 4 ulp relative (2.4e-7), plus 1e-37 absolute for
//! results that underflow to subnormals. Measured on lavapipe over 200,000 points in
//! [−12, 12]: at most 2 ulp. GELU uses WGSL's `tanh`, which may be off by a few ulp more,
//! and a cubic: 1e-5 relative for |x| ≤ 8, and 1e-6 absolute for results near zero.
//!
//! The CPU engine is held to the same SILU tolerance (its e^x is within 2 ulp, then a
//! product, an add and a correctly rounded division), and to exact equality for GELU: it
//! evaluates the reference's f64 formula and rounds once.

use proptest::prelude::*;
use purebee_isa::{DType, Engine, ProgramBuilder};
use purebee_memory::{HostTensor, Shape};
use purebee_tests::differential::{assert_close, f32s, gpu_tests_skipped, on_cpu_levels, pair, Pair};

fn input(n: usize, values: Vec<f32>) -> HostTensor {
    HostTensor::from_f32("x", Shape::vector(n), values).expect("sizes agree")
}

#[derive(Clone, Copy, Debug)]
enum Op {
    Add,
    Mul,
    Silu,
    Relu2,
    Gelu,
}

/// The (absolute, relative) tolerance of `op` on the GPU engine (module docs).
fn gpu_tolerance(op: Op) -> (f32, f32) {
    match op {
        Op::Add | Op::Mul | Op::Relu2 => (0.0, 0.0),
        Op::Silu => (1e-37, 2.4e-7),
        Op::Gelu => (1e-6, 1e-5),
    }
}

/// The (absolute, relative) tolerance of `op` on the CPU engine (module docs).
fn cpu_tolerance(op: Op) -> (f32, f32) {
    match op {
        Op::Add | Op::Mul | Op::Relu2 | Op::Gelu => (0.0, 0.0),
        Op::Silu => (1e-37, 2.4e-7),
    }
}

/// Runs `op` on both engines of `pair` and compares within `(abs, rel)`.
fn check<E: Engine>(
    pair: &mut Pair<E>,
    op: Op,
    a: &[f32],
    b: &[f32],
    place: Place,
    (tol_abs, tol_rel): (f32, f32),
) -> Result<(), String> {
    let n = a.len();
    let inputs = [("a", input(n, a.to_vec())), ("b", input(n, b.to_vec()))];
    let (got, reference) = pair.run(&inputs, &[], |bld: &mut ProgramBuilder, name, ids| {
        let (x, y) = (ids[0], if place == Place::AllOne { ids[0] } else { ids[1] });
        let out = match (place, op) {
            (Place::Apart, _) => bld.alloc(&name("out"), DType::F32, &[n])?,
            (Place::IntoB, Op::Add | Op::Mul) => y,
            _ => x,
        };
        match op {
            Op::Add => bld.add(out, x, y)?,
            Op::Mul => bld.mul(out, x, y)?,
            Op::Silu => bld.silu(out, x)?,
            Op::Relu2 => bld.relu2(out, x)?,
            Op::Gelu => bld.gelu(out, x)?,
        }
        Ok(if out == x { vec![x] } else { vec![out, x] })
    });
    let what = format!("{} engine: {op:?} n={n} {place:?}", pair.engine.name());
    assert_close(&f32s(&got[0]), &f32s(&reference[0]), tol_abs, tol_rel, &what)
}

/// Where the output goes: a tensor of its own, or one of the inputs (IntoB and AllOne only
/// differ from IntoA for the binary ops; AllOne also passes `a` as both inputs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Place {
    Apart,
    IntoA,
    IntoB,
    AllOne,
}

/// `op` on the GPU engine.
fn check_gpu(op: Op, a: Vec<f32>, b: Vec<f32>, place: Place) -> Result<(), String> {
    check(&mut pair(), op, &a, &b, place, gpu_tolerance(op))
}

/// `op` on the CPU engine, every SIMD path.
fn check_cpu(op: Op, a: Vec<f32>, b: Vec<f32>, place: Place) -> Result<(), String> {
    on_cpu_levels(|p| check(p, op, &a, &b, place, cpu_tolerance(op)))
}

fn values(n: usize) -> impl Strategy<Value = Vec<f32>> {
    prop::collection::vec(-8.0f32..8.0, n)
}

fn case() -> impl Strategy<Value = (Vec<f32>, Vec<f32>, Place)> {
    let place = prop_oneof![Just(Place::Apart), Just(Place::IntoA), Just(Place::IntoB), Just(Place::AllOne)];
    (1usize..3000).prop_flat_map(move |n| (values(n), values(n), place.clone()))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn add_matches_the_reference((a, b, place) in case()) {
        if gpu_tests_skipped() { return Ok(()); }
        check_gpu(Op::Add, a, b, place).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn mul_matches_the_reference((a, b, place) in case()) {
        if gpu_tests_skipped() { return Ok(()); }
        check_gpu(Op::Mul, a, b, place).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn silu_matches_the_reference((a, b, place) in case()) {
        if gpu_tests_skipped() { return Ok(()); }
        check_gpu(Op::Silu, a, b, place).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn relu2_matches_the_reference((a, b, place) in case()) {
        if gpu_tests_skipped() { return Ok(()); }
        check_gpu(Op::Relu2, a, b, place).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn gelu_matches_the_reference((a, b, place) in case()) {
        if gpu_tests_skipped() { return Ok(()); }
        check_gpu(Op::Gelu, a, b, place).map_err(TestCaseError::fail)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn cpu_add_matches_the_reference((a, b, place) in case()) {
        check_cpu(Op::Add, a, b, place).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn cpu_mul_matches_the_reference((a, b, place) in case()) {
        check_cpu(Op::Mul, a, b, place).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn cpu_silu_matches_the_reference((a, b, place) in case()) {
        check_cpu(Op::Silu, a, b, place).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn cpu_relu2_matches_the_reference((a, b, place) in case()) {
        check_cpu(Op::Relu2, a, b, place).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn cpu_gelu_matches_the_reference((a, b, place) in case()) {
        check_cpu(Op::Gelu, a, b, place).map_err(TestCaseError::fail)?;
    }
}

/// `a + a` into `a` itself, on both engines of `pair`.
fn residual_add_of_a_tensor_to_itself<E: Engine>(pair: &mut Pair<E>) -> Result<(), String> {
    let v: Vec<f32> = (0..257).map(|i| i as f32 * 0.37 - 20.0).collect();
    let inputs = [("a", input(257, v.clone()))];
    let (got, reference) = pair.run(&inputs, &[], |b, _, ids| {
        b.add(ids[0], ids[0], ids[0])?;
        Ok(vec![ids[0]])
    });
    let (got, want) = (f32s(&got[0]), f32s(&reference[0]));
    if got != want || got[256] != v[256] * 2.0 {
        return Err(format!("{} engine: a + a in place: got {got:?}, expected {want:?}", pair.engine.name()));
    }
    Ok(())
}

#[test]
fn residual_add_of_a_tensor_to_itself_on_the_gpu() {
    if gpu_tests_skipped() {
        return;
    }
    residual_add_of_a_tensor_to_itself(&mut pair()).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn residual_add_of_a_tensor_to_itself_on_the_cpu() {
    on_cpu_levels(residual_add_of_a_tensor_to_itself).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn cpu_silu_and_gelu_over_a_dense_grid_and_special_values() {
    // Every 1/64 in [−100, 100] (the fast e^x's range edges at −87 and 88 included), and
    // the values no random case draws: ±0, subnormals, infinities, NaN, the extremes.
    let mut x: Vec<f32> = (-6400..=6400).map(|i| i as f32 / 64.0).collect();
    x.extend([0.0, -0.0, 1e-40, -1e-40, f32::MIN_POSITIVE, f32::MAX, f32::MIN, f32::INFINITY, f32::NEG_INFINITY]);
    x.extend([f32::NAN, -87.5, -87.0, -86.99, 87.99, 88.0, 88.5, -104.0, -150.0]);
    let zeros = vec![0.0; x.len()];
    for op in [Op::Silu, Op::Gelu, Op::Relu2] {
        check_cpu(op, x.clone(), zeros.clone(), Place::Apart).unwrap_or_else(|e| panic!("{e}"));
    }
}

/// A prefill-sized vector (more than one 32K-element task of the CPU engine's pool, and a
/// partial last task), every operation, in place and not.
#[test]
fn cpu_vectors_spread_over_the_pool() {
    let n: usize = 3 * (1 << 15) + 17;
    let a: Vec<f32> = (0..n).map(|i| ((i * 7919 % 20011) as f32 - 10005.0) * 1e-3).collect();
    let b: Vec<f32> = (0..n).map(|i| ((i * 104729 % 30011) as f32 - 15005.0) * 7e-4).collect();
    for op in [Op::Add, Op::Mul, Op::Silu, Op::Relu2, Op::Gelu] {
        for place in [Place::Apart, Place::IntoA, Place::IntoB, Place::AllOne] {
            check_cpu(op, a.clone(), b.clone(), place).unwrap_or_else(|e| panic!("{e}"));
        }
    }
}
