//! ROPE: each head of each row rotated by its position, in f64.

use purebee_isa::ops::{Rope, RopeStyle};
use purebee_isa::ExecError;
use purebee_memory::Registry;

use crate::access::{dims, f32s, store_f32};

/// `positions[row]`: the row's position.
pub(crate) fn run(reg: &mut Registry, r: &Rope, base: f32, positions: &[u32]) -> Result<(), ExecError> {
    const OP: &str = "ROPE";
    let (rows, width) = dims(reg, OP, r.x)?;
    let x = f32s(reg, OP, r.x)?; // [rows, n_heads · head_dim]
    let (hd, rot) = (r.head_dim as usize, r.rot_dim as usize);
    let mut out = x.to_vec(); // [rows, n_heads · head_dim]; elements past rot_dim stay
    for (row, &p) in positions.iter().enumerate().take(rows) {
        let p = p as f64;
        for head in (0..width).step_by(hd) {
            for i in 0..rot / 2 {
                // θ_i = p · base^(−2i/rot_dim)
                let theta = p * (base as f64).powf(-2.0 * i as f64 / rot as f64);
                let (sin, cos) = theta.sin_cos();
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
    store_f32(reg, OP, r.out, &out)
}
