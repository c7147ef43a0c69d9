//! EMBED: rows decoded by memory's layouts, so every dtype is bit for bit the reference's.

use purebee_isa::ops::Embed;
use purebee_isa::ExecError;
use purebee_memory::quant::QuantMatrix;

use super::{f32s_mut, Exec};
use crate::store::dims;

pub(crate) fn run(e: &mut Exec, x: &Embed) -> Result<(), ExecError> {
    const OP: &str = "EMBED";
    let (vocab, d) = dims(e.reg, OP, x.table)?;
    let dtype = e.reg.desc(x.table).map_err(crate::store::mem(OP))?.dtype;
    e.store.bytes(e.reg, OP, x.table)?;
    let ids = e.store.u32s(e.reg, OP, x.ids)?.to_vec();
    if let Some((row, &id)) = ids.iter().enumerate().find(|(_, &id)| id as usize >= vocab) {
        return Err(ExecError::TokenOutOfRange { tensor: e.reg.name(x.ids).to_string(), row, id, vocab });
    }
    let reg = e.reg;
    let decode_error = |err: purebee_memory::quant::QuantError| ExecError::Decode {
        op: OP,
        tensor: reg.name(x.table).to_string(),
        reason: err.to_string(),
    };
    e.store.with_output(reg, OP, x.out, |store, words| {
        let table = QuantMatrix::new(dtype, store.bytes(reg, OP, x.table)?, vocab, d).map_err(decode_error)?;
        let out = f32s_mut(words, ids.len() * d);
        for (&id, o) in ids.iter().zip(out.chunks_exact_mut(d.max(1))) {
            table.dequantize_row(id as usize, o).map_err(decode_error)?;
        }
        Ok(())
    })
}
