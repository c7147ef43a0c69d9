//! EMBED: `out[r] = decode(table[ids[r]])`.

use purebee_isa::ops::Embed;
use purebee_isa::ExecError;
use purebee_memory::Registry;

use crate::access::{decode_error, matrix, store_f32, u32s};

pub(crate) fn run(reg: &mut Registry, e: &Embed) -> Result<(), ExecError> {
    const OP: &str = "EMBED";
    let table = matrix(reg, OP, e.table)?; // [vocab, d], any layout
    let ids = u32s(reg, OP, e.ids)?; // [n]
    let d = table.cols();
    let mut out = vec![0f32; ids.len() * d]; // [n, d]
    for (r, &id) in ids.iter().enumerate() {
        if id as usize >= table.rows() {
            return Err(ExecError::TokenOutOfRange {
                tensor: reg.name(e.ids).to_string(),
                row: r,
                id,
                vocab: table.rows(),
            });
        }
        table
            .dequantize_row(id as usize, &mut out[r * d..(r + 1) * d])
            .map_err(|err| decode_error(reg, OP, e.table, err))?;
    }
    store_f32(reg, OP, e.out, &out)
}
