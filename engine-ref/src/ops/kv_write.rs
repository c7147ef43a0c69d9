//! KV_WRITE: each row of `src` into the cache row that holds its position.

use purebee_isa::ops::KvWrite;
use purebee_isa::{ExecError, ParamValue, Program};
use purebee_memory::Registry;

use crate::access::{dims, f32s, mem};
use crate::ops::rows::cache_rows;

pub(crate) fn run(reg: &mut Registry, program: &Program, params: &[ParamValue], k: &KvWrite) -> Result<(), ExecError> {
    const OP: &str = "KV_WRITE";
    let (n, w) = dims(reg, OP, k.src)?;
    let targets = cache_rows(reg, OP, program, params, &k.rows, n, k.cache, false)?;
    let src = f32s(reg, OP, k.src)?.into_owned(); // [n, w]
    let name = reg.name(k.cache).to_string();
    let cache = reg.get_mut(k.cache).and_then(|t| t.f32s_mut(&name)).map_err(mem(OP))?; // [n_ctx, w]
    for (r, rows) in targets.iter().enumerate() {
        let at = rows[rows.len() - 1]; // the row's own position
        cache[at * w..(at + 1) * w].copy_from_slice(&src[r * w..(r + 1) * w]);
    }
    Ok(())
}
