//! TENSOR_ADD, ELEMENT_MUL (exactly rounded f32 operations, bit for bit the reference's),
//! SILU (the kernels' vectorized loop), RELU2 (one f32 product: the reference's f64 square rounded once is the
//! same value), GELU (the reference's f64 formula; no model here runs it in a hot loop).

use purebee_isa::ops::{Binary, Unary};
use purebee_isa::ExecError;

use super::{f32s_mut, input, maybe_aliased, Exec};

/// Elements per task: one decode step's vectors (a few thousand) stay on the calling
/// thread; a prefill's (tokens × width) are spread over the pool.
const CHUNK: usize = 1 << 15;

/// `out_i = f(a_i, b_i)`; `out` may be `a` or `b`, whose values are then read from `out`
/// itself (each element before it is written). `f` is inlined, so the loops vectorize.
pub(crate) fn binary(
    e: &mut Exec,
    op: &'static str,
    i: &Binary,
    f: impl Fn(f32, f32) -> f32 + Sync,
) -> Result<(), ExecError> {
    // The inputs are checked first, as the reference reads them.
    let len = e.store.f32s(e.reg, op, i.a)?.len();
    e.store.f32s(e.reg, op, i.b)?;
    let (reg, pool) = (e.reg, e.pool);
    e.store.with_output(reg, op, i.out, |store, words| {
        let a = if i.a == i.out { None } else { Some(store.f32s(reg, op, i.a)?) };
        let b = if i.b == i.out { None } else { Some(store.f32s(reg, op, i.b)?) };
        let out = f32s_mut(words, len);
        pool.for_each_chunk(out, CHUNK, &|c, o| {
            let at = c * CHUNK..c * CHUNK + o.len();
            match (a, b) {
                (Some(a), Some(b)) => {
                    for ((o, &x), &y) in o.iter_mut().zip(&a[at.clone()]).zip(&b[at]) {
                        *o = f(x, y);
                    }
                }
                (None, Some(b)) => o.iter_mut().zip(&b[at]).for_each(|(o, &y)| *o = f(*o, y)),
                (Some(a), None) => o.iter_mut().zip(&a[at]).for_each(|(o, &x)| *o = f(x, *o)),
                (None, None) => o.iter_mut().for_each(|o| *o = f(*o, *o)),
            }
        });
        Ok(())
    })
}

/// `out = f(x)` element by element (`f` maps a run of `x` to the same run of `out`);
/// `out` may be `x`.
pub(crate) fn unary(
    e: &mut Exec,
    op: &'static str,
    i: &Unary,
    f: &(dyn Fn(&[f32], &mut [f32]) + Sync),
) -> Result<(), ExecError> {
    let x_copy = maybe_aliased(e, op, i.x, i.out)?;
    let (reg, pool) = (e.reg, e.pool);
    e.store.with_output(reg, op, i.out, |store, words| {
        let x = input(store, reg, op, i.x, &x_copy)?;
        let out = f32s_mut(words, x.len());
        pool.for_each_chunk(out, CHUNK, &|c, o| f(&x[c * CHUNK..c * CHUNK + o.len()], o));
        Ok(())
    })
}

/// `out_i = f(x_i)` (`f` inlined).
pub(crate) fn map(x: &[f32], out: &mut [f32], f: impl Fn(f32) -> f32) {
    for (o, &v) in out.iter_mut().zip(x) {
        *o = f(v);
    }
}

/// RELU2 `max(x, 0)²`.
pub(crate) fn relu2(x: f32) -> f32 {
    let r = x.max(0.0);
    r * r
}

/// GELU, tanh approximation, evaluated in f64 and rounded once (as the reference).
pub(crate) fn gelu(x: f32) -> f32 {
    const SQRT_2_OVER_PI: f64 = 0.797_884_560_802_865_4;
    let x = x as f64;
    (0.5 * x * (1.0 + (SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)).tanh())) as f32
}
