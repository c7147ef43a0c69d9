//! ATTENTION: causal grouped-query attention over the cache, in f64.

use std::borrow::Cow;

use purebee_isa::ops::Attention;
use purebee_isa::{ExecError, ParamValue, Program};
use purebee_memory::{DType, Registry, TensorId};

use crate::access::{dims, f32s, mem, store_f32};
use crate::ops::rows::cache_rows;
use crate::ops::softmax::softmax_weights;

pub(crate) fn run(
    reg: &mut Registry,
    program: &Program,
    params: &[ParamValue],
    a: &Attention,
) -> Result<(), ExecError> {
    const OP: &str = "ATTENTION";
    let (n, q_width) = dims(reg, OP, a.q)?;
    let (_, kv_width) = dims(reg, OP, a.k_cache)?;
    let positions = cache_rows(reg, OP, program, params, &a.rows, n, a.k_cache, true)?;
    let q = f32s(reg, OP, a.q)?; // [n, n_head · hd]
    let k = cache_f32s(reg, OP, a.k_cache)?; // [n_ctx, n_kv · hd]
    let v = cache_f32s(reg, OP, a.v_cache)?; // [n_ctx, n_kv · hd]
    let hd = a.head_dim as usize;
    let (n_head, n_kv) = (q_width / hd, kv_width / hd);
    let group = n_head / n_kv;
    let scale = 1.0 / (hd as f64).sqrt();
    let mut out = vec![0f32; n * q_width]; // [n, n_head · hd]
    for (r, cells) in positions.iter().enumerate() {
        // Position t of the row's sequence is in cache row cells[t], for t = 0..=p.
        for h in 0..n_head {
            let kvh = h / group;
            let qh = &q[r * q_width + h * hd..][..hd];
            let scores: Vec<f64> = cells
                .iter()
                .map(|&c| {
                    let kt = &k[c * kv_width + kvh * hd..][..hd];
                    qh.iter().zip(kt).map(|(&x, &y)| x as f64 * y as f64).sum::<f64>() * scale
                })
                .collect();
            let weights = softmax_weights(&scores);
            for i in 0..hd {
                let o: f64 =
                    weights.iter().zip(cells).map(|(&wt, &c)| wt * v[c * kv_width + kvh * hd + i] as f64).sum();
                out[r * q_width + h * hd + i] = o as f32;
            }
        }
    }
    store_f32(reg, OP, a.out, &out)
}

/// A cache's values as f32: an F32 cache as it is, an F16 cache widened (exactly).
fn cache_f32s<'a>(reg: &'a Registry, op: &'static str, id: TensorId) -> Result<Cow<'a, [f32]>, ExecError> {
    if reg.desc(id).map_err(mem(op))?.dtype != DType::F16 {
        return f32s(reg, op, id);
    }
    let bytes = reg.get(id).map_err(mem(op))?.bytes();
    Ok(Cow::Owned(bytes.chunks_exact(2).map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32()).collect()))
}
