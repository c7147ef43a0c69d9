//! KV_WRITE: `cache[pos + r] = src[r]`.

use purebee_isa::ops::KvWrite;
use purebee_isa::ExecError;
use purebee_memory::Registry;

use crate::access::{check_fits, dims, f32s, mem};

pub(crate) fn run(reg: &mut Registry, k: &KvWrite, pos: u32) -> Result<(), ExecError> {
    const OP: &str = "KV_WRITE";
    let (n, w) = dims(reg, OP, k.src)?;
    check_fits(reg, OP, k.cache, pos, n)?;
    let src = f32s(reg, OP, k.src)?.into_owned(); // [n, w]
    let name = reg.name(k.cache).to_string();
    let cache = reg.get_mut(k.cache).and_then(|t| t.f32s_mut(&name)).map_err(mem(OP))?; // [n_ctx, w]
    let start = pos as usize * w;
    cache[start..start + n * w].copy_from_slice(&src);
    Ok(())
}
