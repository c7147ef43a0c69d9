//! ROPE: each head rotated by its row's position, computed exactly as the reference does
//! (the angle, sine and cosine and the rotation in f64, rounded once), so results are bit
//! for bit equal. The cos/sin table of one set of positions is kept, so every ROPE of a step
//! (at the same positions, base and width) computes it once.

use purebee_isa::ops::{Rope, RopeStyle, RowPositions};
use purebee_isa::{ExecError, ParamValue, Program};

use super::{f32s_mut, input, maybe_aliased, Exec};
use crate::store::dims;

/// `(sin θ, cos θ)` per row and pair, for one `(base, rot_dim)` and the rows' positions.
#[derive(Default)]
pub(crate) struct Table {
    key: Option<(u32, u32)>,
    positions: Vec<u32>,
    sin_cos: Vec<(f64, f64)>,
}

impl Table {
    fn get(&mut self, base: f32, rot: usize, positions: &[u32]) -> &[(f64, f64)] {
        let key = (base.to_bits(), rot as u32);
        if self.key != Some(key) || self.positions != positions {
            self.sin_cos.clear();
            self.positions.clear();
            self.positions.extend_from_slice(positions);
            for &p in positions {
                let p = p as f64;
                for i in 0..rot / 2 {
                    // θ_i = p · base^(−2i/rot_dim), as the reference computes it.
                    let theta = p * (base as f64).powf(-2.0 * i as f64 / rot as f64);
                    self.sin_cos.push(theta.sin_cos());
                }
            }
            self.key = Some(key);
        }
        &self.sin_cos
    }
}

pub(crate) fn run(
    e: &mut Exec,
    program: &Program,
    params: &[ParamValue],
    r: &Rope,
    base: f32,
) -> Result<(), ExecError> {
    const OP: &str = "ROPE";
    let (rows, width) = dims(e.reg, OP, r.x)?;
    let positions: Vec<u32> = match r.pos {
        RowPositions::Consecutive(start) => {
            let start = program.resolve_u32(start, params)?;
            (0..rows as u32).map(|row| start.wrapping_add(row)).collect()
        }
        RowPositions::PerRow(pos) => e.store.u32s(e.reg, OP, pos)?.to_vec(),
    };
    let x_copy = maybe_aliased(e, OP, r.x, r.out)?;
    let (hd, rot) = (r.head_dim as usize, r.rot_dim as usize);
    let table = e.caches.rope.get(base, rot, &positions);
    let reg = e.reg;
    e.store.with_output(reg, OP, r.out, |store, words| {
        let x = input(store, reg, OP, r.x, &x_copy)?;
        let out = f32s_mut(words, x.len());
        out.copy_from_slice(x); // elements past rot_dim stay
        for row in 0..rows {
            let sc = &table[row * (rot / 2)..(row + 1) * (rot / 2)];
            for head in (0..width).step_by(hd.max(1)) {
                for (i, &(sin, cos)) in sc.iter().enumerate() {
                    let (a, b) = match r.style {
                        RopeStyle::Neox => (i, i + rot / 2),
                        RopeStyle::Normal => (2 * i, 2 * i + 1),
                    };
                    let (ia, ib) = (row * width + head + a, row * width + head + b);
                    let (xa, xb) = (x[ia] as f64, x[ib] as f64);
                    out[ia] = (xa * cos - xb * sin) as f32;
                    out[ib] = (xa * sin + xb * cos) as f32;
                }
            }
        }
        Ok(())
    })
}
