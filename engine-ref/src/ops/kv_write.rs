//! KV_WRITE: each row of `src` into the cache row that holds its position.

use purebee_isa::ops::{f16_bits, KvWrite};
use purebee_isa::{ExecError, ParamValue, Program};
use purebee_memory::{DType, Registry};

use crate::access::{dims, f32s, mem};
use crate::ops::rows::cache_rows;

pub(crate) fn run(reg: &mut Registry, program: &Program, params: &[ParamValue], k: &KvWrite) -> Result<(), ExecError> {
    const OP: &str = "KV_WRITE";
    let (n, w) = dims(reg, OP, k.src)?;
    let targets = cache_rows(reg, OP, program, params, &k.rows, n, k.cache, false)?;
    let src = f32s(reg, OP, k.src)?.into_owned(); // [n, w]
    let name = reg.name(k.cache).to_string();
    let f16 = reg.desc(k.cache).map_err(mem(OP))?.dtype == DType::F16;
    let tensor = reg.get_mut(k.cache).map_err(mem(OP))?;
    if f16 {
        // Each value rounded to the nearest f16, ties to even, stored little-endian.
        let cache = tensor.bytes_mut(); // [n_ctx, w] of 2 bytes
        for (r, rows) in targets.iter().enumerate() {
            let at = rows[rows.len() - 1];
            for (i, &x) in src[r * w..(r + 1) * w].iter().enumerate() {
                let o = 2 * (at * w + i);
                cache[o..o + 2].copy_from_slice(&f16_bits(x).to_le_bytes());
            }
        }
        return Ok(());
    }
    let cache = tensor.f32s_mut(&name).map_err(mem(OP))?; // [n_ctx, w]
    for (r, rows) in targets.iter().enumerate() {
        let at = rows[rows.len() - 1]; // the row's own position
        cache[at * w..(at + 1) * w].copy_from_slice(&src[r * w..(r + 1) * w]);
    }
    Ok(())
}
