//! Ternarization as BitNet b1.58 trains its weights (its `weight_quant`): one absmean scale
//! per tensor, then each weight rounded to the nearest multiple of it and clipped to
//! {−1, 0, +1}. Written once here, beside the encoders that store the trits.
//!
//! In f32, as llama.cpp's converter computes it (`conversion/bitnet.py`, after 1bitLLM's
//! `utils_quant.py`):
//!
//! ```text
//! scale  = max(mean |w|, 1e-5)
//! iscale = 1 / scale
//! t      = clip(round(w · iscale), −1, 1)     (round half to even, as torch.round)
//! value  = t / iscale
//! ```
//!
//! Two differences:
//! - the mean is taken in f64 and rounded once to f32, where torch sums in f32 in its own
//!   order. The two agree but for the last bit of the mean, and then only weights within an
//!   ulp of a rounding boundary could fall differently;
//! - a tensor that is already ternary (every non-zero |w| the same α) keeps its values
//!   `t · α` exactly. The formula would store `t · α · p` instead (p the share of non-zero
//!   weights: the mean is α·p), changing a model that was ternary already.

/// The smallest mean |w| the scale uses (an all-zero tensor stays finite).
pub const MIN_MEAN: f32 = 1e-5;

/// A tensor's ternarization: `t = clip(round(w · iscale), −1, 1)`, stored as `t / iscale`,
/// or as `t · α` for a tensor that was ternary already.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Ternarizer {
    /// `1 / max(mean |w|, 1e-5)`, in f32 (or `1 / α`).
    pub iscale: f32,
    /// α, when every non-zero |w| of the tensor is α.
    pub kept: Option<f32>,
}

impl Ternarizer {
    /// The ternarizer of a tensor whose weights are `values` (all of them, in any order).
    pub fn absmean(values: impl IntoIterator<Item = f32>) -> Ternarizer {
        let (mut sum, mut n) = (0.0f64, 0u64);
        // The one non-zero magnitude seen so far; NaN once two differ.
        let mut alpha: Option<f32> = None;
        for v in values {
            let a = v.abs();
            sum += f64::from(a);
            n += 1;
            if a != 0.0 {
                alpha = match alpha {
                    None => Some(a),
                    Some(x) if x == a => Some(x),
                    Some(_) => Some(f32::NAN),
                };
            }
        }
        let kept = alpha.filter(|a| a.is_finite());
        if let Some(a) = kept {
            return Ternarizer { iscale: 1.0 / a, kept };
        }
        let mean = if n == 0 { 0.0 } else { (sum / n as f64) as f32 };
        Ternarizer { iscale: 1.0 / mean.max(MIN_MEAN), kept: None }
    }

    /// The trit of weight `w`. NaN becomes 0 (it compares with nothing; a checkpoint with
    /// NaN weights has a NaN mean, and then every trit is 0).
    pub fn trit(&self, w: f32) -> i8 {
        if let Some(a) = self.kept {
            return if w == a {
                1
            } else if w == -a {
                -1
            } else {
                0
            };
        }
        let r = (w * self.iscale).round_ties_even();
        if r >= 1.0 {
            1
        } else if r <= -1.0 {
            -1
        } else {
            0
        }
    }

    /// The value weight `w` is stored as: `t / iscale` (a 0 keeps the sign torch gives it),
    /// or `t · α`.
    pub fn value(&self, w: f32) -> f32 {
        if let Some(a) = self.kept {
            return f32::from(self.trit(w)) * a;
        }
        let r = (w * self.iscale).round_ties_even().clamp(-1.0, 1.0);
        r / self.iscale
    }

    /// The magnitude every non-zero trit is stored with: `1 / iscale`, or α.
    pub fn magnitude(&self) -> f32 {
        self.kept.unwrap_or(1.0 / self.iscale)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scale_is_the_mean_magnitude() {
        let t = Ternarizer::absmean([0.5, -1.0, 1.5, 0.0]);
        assert_eq!(t.iscale, 1.0 / 0.75);
        assert_eq!(t.kept, None);
        assert_eq!(Ternarizer::absmean([0.0; 4]).iscale, 1.0 / MIN_MEAN);
        assert_eq!(Ternarizer::absmean([]).iscale, 1.0 / MIN_MEAN);
    }

    #[test]
    fn weights_round_half_to_even_and_clip() {
        // iscale 2: w · 2 = 0.5 rounds to 0, 1.5 to 2 → clipped to 1, −0.6 · 2 = −1.2 to −1.
        let t = Ternarizer { iscale: 2.0, kept: None };
        for (w, want) in [(0.25, 0), (0.75, 1), (-0.6, -1), (10.0, 1), (-10.0, -1), (0.2, 0), (f32::NAN, 0)] {
            assert_eq!(t.trit(w), want, "w = {w}");
        }
        assert_eq!(t.value(0.75), 0.5);
        assert_eq!(t.value(-3.0), -0.5);
        assert_eq!(t.value(0.1), 0.0);
    }

    #[test]
    fn an_already_ternary_tensor_keeps_its_values() {
        // w = t · 0.125 with mean |w| exactly 0.125 · (share of non-zeros).
        let trits = [1i8, -1, 0, 1, 1, -1, 0, 0];
        let w: Vec<f32> = trits.iter().map(|&t| f32::from(t) * 0.125).collect();
        let t = Ternarizer::absmean(w.iter().copied());
        // mean = 0.125 · 5/8, but the tensor is kept: its trits and its values.
        assert_eq!(t.kept, Some(0.125));
        for (&wi, &ti) in w.iter().zip(&trits) {
            assert_eq!(t.trit(wi), ti);
            assert_eq!(t.value(wi).to_bits(), wi.to_bits());
        }
        assert_eq!(t.magnitude(), 0.125);
        // A second magnitude makes it an ordinary tensor.
        assert_eq!(Ternarizer::absmean([0.125, -0.25]).kept, None);
    }
}
