//! ROPE: rotary position embedding, NEOX or normal pairing.

use purebee_memory::TensorId;

use crate::ops::RowPositions;
use crate::validate::Checker;
use crate::{F32Arg, IsaError};

/// Which elements of a head RoPE rotates together.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeStyle {
    /// Pairs `(i, i + rot_dim/2)`: GPT-NeoX, BitNet (llama.cpp `LLAMA_ROPE_TYPE_NEOX`).
    Neox,
    /// Adjacent pairs `(2i, 2i + 1)`: Llama GGUFs, whose converter permuted Q/K for it
    /// (llama.cpp `LLAMA_ROPE_TYPE_NORM`).
    Normal,
}

/// ROPE: rotates each head of each row by its position.
///
/// - `x`, `out`: F32 `[n, n_heads · head_dim]`; `out` may be `x`.
/// - Row `r` is at position `p`: `start + r` for [`RowPositions::Consecutive`], `pos[r]`
///   for [`RowPositions::PerRow`] (U32 `[n]`).
/// - In every head, pair `i` (`0 ≤ i < rot_dim/2`, see [`RopeStyle`] for which two
///   elements `(a, b)` form it) is rotated by `θ_i = p · base^(−2i/rot_dim)`:
///   `a' = a·cos θ_i − b·sin θ_i`, `b' = a·sin θ_i + b·cos θ_i`. Elements at or past
///   `rot_dim` are copied unchanged.
/// - `rot_dim` is even and at most `head_dim` (`rope.dimension_count`).
/// - Engines compute the angle and rotation in f32 or wider (the reference engine: f64)
///   and round once.
#[derive(Clone, Debug, PartialEq)]
pub struct Rope {
    /// The output.
    pub out: TensorId,
    /// The input rows.
    pub x: TensorId,
    /// Elements per head.
    pub head_dim: u32,
    /// Elements per head that are rotated (even, ≤ head_dim).
    pub rot_dim: u32,
    /// The pairing.
    pub style: RopeStyle,
    /// The frequency base (`rope.freq_base`, 10000 by default).
    pub base: F32Arg,
    /// The position of each row.
    pub pos: RowPositions,
}

impl Rope {
    pub(crate) fn validate(&self, c: &Checker) -> Result<(), IsaError> {
        let x = c.f32("x", self.x)?;
        let (n, cols) = c.matrix("x", x)?;
        let out = c.f32("out", self.out)?;
        c.shape("out", out, x.shape.dims())?;
        let hd = self.head_dim as usize;
        if hd == 0 || cols % hd != 0 {
            return Err(c.invalid(format!("head_dim {hd} does not divide the {cols} columns of x")));
        }
        if self.rot_dim == 0 || !self.rot_dim.is_multiple_of(2) || self.rot_dim > self.head_dim {
            return Err(c.invalid(format!("rot_dim {} must be even, > 0 and <= head_dim {hd}", self.rot_dim)));
        }
        if let F32Arg::Const(b) = self.base {
            if !(b.is_finite() && b > 0.0) {
                return Err(c.invalid(format!("base must be finite and > 0, got {b}")));
            }
        }
        c.f32_arg(self.base)?;
        if let Some(pos) = self.pos.tensor() {
            c.distinct(self.out, &[pos])?;
        }
        self.pos.validate(c, n)
    }
}
