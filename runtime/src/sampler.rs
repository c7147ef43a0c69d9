//! Choosing the next token from logits: greedy, or temperature sampling with top-k, top-p,
//! min-p and a repeat penalty, reproducible from a seed.
//!
//! The chain follows llama.cpp's default order: penalties (repeat, frequency, presence) →
//! top-k → top-p → min-p → temperature → draw. Greedy (temperature 0) applies the
//! penalties, then takes the lowest id among the largest logits.
//!
//! Logits are ranked by value, larger first, equal values (`−0 == +0`) by lower id, NaN
//! never: the rank order of the ISA's TOP_K and ARGMAX. So when no penalty can raise a logit
//! (repeat ≥ 1, frequency ≥ 0, presence ≥ 0), the draw needs only the row's
//! `top_k + repeat_last_n` largest logits ([`SamplerConfig::candidates`],
//! [`Sampler::sample_candidates`]): a penalty lowers at most `repeat_last_n` distinct
//! logits, and lowering a logit never lifts another one into the top `top_k`. Proof: a token
//! outside the `K ≥ top_k + |P|` largest (`P` the penalised tokens) has at least
//! `K − |P| ≥ top_k` unpenalised tokens ranked above it before the penalties, and they stay
//! above it after them (their logits are unchanged, its own can only fall); so the top
//! `top_k` after the penalties all lie among the `K` candidates, and their order there is
//! their order in the row. Greedy with penalties needs `1 + repeat_last_n` the same way.

use purebee_rng::SplitMix64;
use std::cmp::Ordering;
use std::collections::VecDeque;

/// Sampling settings, with llama.cpp's defaults.
#[derive(Clone, Debug, PartialEq)]
pub struct SamplerConfig {
    /// 0 for greedy; otherwise logits are divided by it before the draw.
    pub temperature: f32,
    /// Keep the k most likely tokens (must be ≥ 1 when sampling).
    pub top_k: usize,
    /// Keep the smallest set of most likely tokens whose probability reaches p, in (0, 1].
    pub top_p: f32,
    /// Drop tokens whose probability is below min_p × the top probability, in [0, 1].
    pub min_p: f32,
    /// Divide positive (multiply negative) logits of recently seen tokens by this; 1 is off.
    pub repeat_penalty: f32,
    /// Subtract this × its count in the window from each recent token's logit (OpenAI's
    /// and llama.cpp's `frequency_penalty`); 0 is off.
    pub frequency_penalty: f32,
    /// Subtract this from the logit of each token in the window once (OpenAI's and
    /// llama.cpp's `presence_penalty`); 0 is off.
    pub presence_penalty: f32,
    /// How many of the most recent tokens the penalties look at.
    pub repeat_last_n: usize,
    /// The seed of the draw: the same seed and logits give the same tokens.
    pub seed: u64,
}

impl Default for SamplerConfig {
    fn default() -> SamplerConfig {
        SamplerConfig {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            repeat_penalty: 1.0,
            frequency_penalty: 0.0,
            presence_penalty: 0.0,
            repeat_last_n: 64,
            seed: 0,
        }
    }
}

/// An invalid sampler setting; each names the flag.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SamplerError {
    /// A setting outside its range.
    #[error("--{flag} {value} is invalid: {expected}")]
    Invalid {
        /// The CLI flag.
        flag: &'static str,
        /// The value given.
        value: String,
        /// What is allowed.
        expected: &'static str,
    },
}

impl SamplerConfig {
    /// Checks every setting's range.
    pub fn validate(&self) -> Result<(), SamplerError> {
        let bad = |flag, value: String, expected| Err(SamplerError::Invalid { flag, value, expected });
        if !(self.temperature.is_finite() && self.temperature >= 0.0) {
            return bad("temp", self.temperature.to_string(), "must be a finite number >= 0 (0 is greedy)");
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return bad("top-p", self.top_p.to_string(), "must be in (0, 1]");
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return bad("min-p", self.min_p.to_string(), "must be in [0, 1]");
        }
        if !(self.repeat_penalty.is_finite() && self.repeat_penalty > 0.0) {
            return bad("repeat-penalty", self.repeat_penalty.to_string(), "must be a finite number > 0 (1 is off)");
        }
        if !(self.frequency_penalty.is_finite() && (-2.0..=2.0).contains(&self.frequency_penalty)) {
            return bad("frequency-penalty", self.frequency_penalty.to_string(), "must be in [-2, 2] (0 is off)");
        }
        if !(self.presence_penalty.is_finite() && (-2.0..=2.0).contains(&self.presence_penalty)) {
            return bad("presence-penalty", self.presence_penalty.to_string(), "must be in [-2, 2] (0 is off)");
        }
        if self.temperature > 0.0 && self.top_k == 0 {
            return bad("top-k", "0".to_string(), "must be >= 1 when sampling (use --temp 0 for greedy)");
        }
        Ok(())
    }

    /// True when the sampler only needs the argmax (no penalty, temperature 0).
    pub fn is_plain_greedy(&self) -> bool {
        self.temperature == 0.0 && !self.has_penalties()
    }

    fn has_penalties(&self) -> bool {
        self.repeat_penalty != 1.0 || self.frequency_penalty != 0.0 || self.presence_penalty != 0.0
    }

    /// How many of a row's largest logits decide the next token exactly, when fewer than the
    /// whole row of `n_vocab` (module docs): `top_k` (1 for greedy) plus `repeat_last_n`
    /// when a penalty is on, capped at `n_vocab`. `None` when the sampler needs the whole row:
    /// plain greedy (ARGMAX is cheaper), or a penalty that can raise a logit (a repeat
    /// penalty below 1, a negative frequency or presence penalty).
    pub fn candidates(&self, n_vocab: usize) -> Option<usize> {
        if self.is_plain_greedy()
            || self.repeat_penalty < 1.0
            || self.frequency_penalty < 0.0
            || self.presence_penalty < 0.0
        {
            return None;
        }
        let keep = if self.temperature == 0.0 { 1 } else { self.top_k.max(1) };
        let penalised = if self.has_penalties() { self.repeat_last_n } else { 0 };
        Some(keep.saturating_add(penalised).min(n_vocab))
    }
}

/// A sampler: settings, the recent-token window and the random stream.
#[derive(Clone, Debug)]
pub struct Sampler {
    config: SamplerConfig,
    recent: VecDeque<u32>,
    rng: SplitMix64,
}

impl Sampler {
    /// A sampler with validated settings.
    pub fn new(config: SamplerConfig) -> Result<Sampler, SamplerError> {
        config.validate()?;
        let rng = SplitMix64(config.seed);
        Ok(Sampler { config, recent: VecDeque::new(), rng })
    }

    /// The settings.
    pub fn config(&self) -> &SamplerConfig {
        &self.config
    }

    /// Records a token (prompt or generated) for the penalties.
    pub fn accept(&mut self, token: u32) {
        if self.config.repeat_last_n == 0 {
            return;
        }
        if self.recent.len() == self.config.repeat_last_n {
            self.recent.pop_front();
        }
        self.recent.push_back(token);
    }

    /// Picks the next token from one row of logits.
    pub fn sample(&mut self, logits: &[f32]) -> u32 {
        let mut logits = logits.to_vec();
        for (token, count) in self.penalised() {
            if let Some(l) = logits.get_mut(token as usize) {
                *l = self.penalise(*l, count);
            }
        }
        self.draw(logits.iter().enumerate().map(|(i, &l)| (i as u32, l)).collect())
    }

    /// Picks the next token from the candidates of TOP_K: `values[j]` is the logit of token
    /// `ids[j]`, for at least the [`SamplerConfig::candidates`] largest logits of the row
    /// (in any order; NaN values are ignored). Gives the token [`Sampler::sample`] gives on
    /// the whole row, and advances the random stream the same way, whenever
    /// [`SamplerConfig::candidates`] is `Some` (module docs).
    pub fn sample_candidates(&mut self, values: &[f32], ids: &[u32]) -> u32 {
        let mut cand: Vec<(u32, f32)> = ids.iter().copied().zip(values.iter().copied()).collect();
        for (token, count) in self.penalised() {
            if let Some(c) = cand.iter_mut().find(|c| c.0 == token) {
                c.1 = self.penalise(c.1, count);
            }
        }
        self.draw(cand)
    }

    /// The chain after the penalties, over (id, logit) candidates.
    fn draw(&mut self, cand: Vec<(u32, f32)>) -> u32 {
        let dist = self.distribution_of(cand);
        if self.config.temperature == 0.0 {
            return dist.first().map_or(0, |c| c.0);
        }
        self.draw_from(&dist)
    }

    /// The distribution [`Sampler::sample`] draws the next token from, after the penalties
    /// of the recent window, top-k, top-p, min-p and temperature: (id, probability) in rank
    /// order, probabilities summing to 1. Greedy gives its one token with probability 1.
    pub fn distribution(&self, logits: &[f32]) -> Vec<(u32, f64)> {
        let mut logits = logits.to_vec();
        for (token, count) in self.penalised() {
            if let Some(l) = logits.get_mut(token as usize) {
                *l = self.penalise(*l, count);
            }
        }
        self.distribution_of(logits.iter().enumerate().map(|(i, &l)| (i as u32, l)).collect())
    }

    /// [`Sampler::distribution`] from TOP_K's candidates, exact under the same condition as
    /// [`Sampler::sample_candidates`].
    pub fn distribution_candidates(&self, values: &[f32], ids: &[u32]) -> Vec<(u32, f64)> {
        let mut cand: Vec<(u32, f32)> = ids.iter().copied().zip(values.iter().copied()).collect();
        for (token, count) in self.penalised() {
            if let Some(c) = cand.iter_mut().find(|c| c.0 == token) {
                c.1 = self.penalise(c.1, count);
            }
        }
        self.distribution_of(cand)
    }

    /// The chain after the penalties, over (id, logit) candidates, as probabilities.
    fn distribution_of(&self, mut cand: Vec<(u32, f32)>) -> Vec<(u32, f64)> {
        // Candidates in rank order: by logit, descending, ties (-0 == +0) by lower id.
        cand.retain(|c| !c.1.is_nan());
        cand.sort_by(|a, b| b.1.partial_cmp(&a.1).unwrap_or(Ordering::Equal).then(a.0.cmp(&b.0)));
        if self.config.temperature == 0.0 || cand.is_empty() {
            return cand.first().map(|c| (c.0, 1.0)).into_iter().collect();
        }
        cand.truncate(self.config.top_k.max(1));
        // top-p and min-p act on the probabilities at temperature 1, as in llama.cpp.
        let probs = softmax(&cand.iter().map(|c| c.1).collect::<Vec<_>>());
        let mut keep = cand.len();
        let mut cum = 0.0;
        for (i, p) in probs.iter().enumerate() {
            cum += p;
            if cum >= self.config.top_p as f64 {
                keep = i + 1;
                break;
            }
        }
        let threshold = probs[0] * self.config.min_p as f64;
        keep = keep.min(probs.iter().take_while(|&&p| p >= threshold).count().max(1));
        cand.truncate(keep);
        let scaled: Vec<f32> = cand.iter().map(|c| c.1 / self.config.temperature).collect();
        cand.iter().map(|c| c.0).zip(softmax(&scaled)).collect()
    }

    /// Draws a token from `dist` ((id, probability) pairs summing to 1, as
    /// [`Sampler::distribution`] gives) with the next number of the random stream; 0 when
    /// `dist` is empty (an all-NaN row), without drawing.
    pub fn draw_from(&mut self, dist: &[(u32, f64)]) -> u32 {
        if dist.is_empty() {
            return 0;
        }
        let r = self.rng.uniform();
        let mut cum = 0.0;
        for &(id, p) in dist {
            cum += p;
            if r < cum {
                return id;
            }
        }
        dist.last().map_or(0, |c| c.0)
    }

    /// The next number of the random stream, uniform in [0, 1): for accepting a drafted
    /// token with some probability.
    pub fn uniform(&mut self) -> f64 {
        self.rng.uniform()
    }

    /// The distinct tokens of the recent window with their counts, when a penalty is on.
    fn penalised(&self) -> Vec<(u32, usize)> {
        if !self.config.has_penalties() {
            return Vec::new();
        }
        let mut seen: Vec<u32> = self.recent.iter().copied().collect();
        seen.sort_unstable();
        seen.chunk_by(|a, b| a == b).map(|run| (run[0], run.len())).collect()
    }

    /// llama.cpp's penalties of one token seen `count` times in the window: the repeat
    /// penalty scales its logit, then `count × frequency + presence` is subtracted.
    fn penalise(&self, l: f32, count: usize) -> f32 {
        let c = &self.config;
        let mut l = l;
        if c.repeat_penalty != 1.0 {
            l = if l > 0.0 { l / c.repeat_penalty } else { l * c.repeat_penalty };
        }
        l - (count as f32 * c.frequency_penalty + c.presence_penalty)
    }

    /// The penalties of the recent window applied to a whole row (tests).
    #[cfg(test)]
    fn apply_penalties(&self, logits: &mut [f32]) {
        for (token, count) in self.penalised() {
            if let Some(l) = logits.get_mut(token as usize) {
                *l = self.penalise(*l, count);
            }
        }
    }
}

/// The lowest id among the largest logits (NaN never wins; 0 for an all-NaN row).
pub fn greedy(logits: &[f32]) -> u32 {
    let mut best: Option<(usize, f32)> = None;
    for (i, &v) in logits.iter().enumerate() {
        if !v.is_nan() && best.is_none_or(|(_, b)| v > b) {
            best = Some((i, v));
        }
    }
    best.map_or(0, |(i, _)| i as u32)
}

/// Probabilities of sorted logits, computed in f64.
fn softmax(logits: &[f32]) -> Vec<f64> {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let e: Vec<f64> = logits.iter().map(|&l| (l as f64 - max).exp()).collect();
    let sum: f64 = e.iter().sum();
    e.into_iter().map(|x| x / sum).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sampler(f: impl FnOnce(&mut SamplerConfig)) -> Sampler {
        let mut c = SamplerConfig::default();
        f(&mut c);
        Sampler::new(c).expect("valid settings")
    }

    #[test]
    fn greedy_takes_the_lowest_id_on_ties() {
        assert_eq!(greedy(&[1.0, 3.0, 3.0, f32::NAN]), 1);
        assert_eq!(greedy(&[f32::NAN, f32::NAN]), 0);
        let mut s = sampler(|c| c.temperature = 0.0);
        assert_eq!(s.sample(&[0.5, 2.0, 2.0]), 1);
    }

    #[test]
    fn invalid_settings_name_their_flag() {
        let bad = |f: fn(&mut SamplerConfig)| {
            let mut c = SamplerConfig::default();
            f(&mut c);
            match Sampler::new(c) {
                Err(SamplerError::Invalid { flag, .. }) => flag,
                Ok(_) => "accepted",
            }
        };
        assert_eq!(bad(|c| c.temperature = -0.1), "temp");
        assert_eq!(bad(|c| c.top_p = 0.0), "top-p");
        assert_eq!(bad(|c| c.top_p = 1.5), "top-p");
        assert_eq!(bad(|c| c.min_p = -1.0), "min-p");
        assert_eq!(bad(|c| c.repeat_penalty = 0.0), "repeat-penalty");
        assert_eq!(bad(|c| c.top_k = 0), "top-k");
        assert_eq!(bad(|c| c.frequency_penalty = f32::NAN), "frequency-penalty");
        assert_eq!(bad(|c| c.presence_penalty = 2.5), "presence-penalty");
        assert_eq!(
            bad(|c| {
                c.top_k = 0;
                c.temperature = 0.0
            }),
            "accepted"
        );
    }

    #[test]
    fn the_same_seed_gives_the_same_tokens_and_another_seed_differs() {
        let logits: Vec<f32> = (0..50).map(|i| (i % 7) as f32 * 0.3).collect();
        let run = |seed| {
            let mut s = sampler(|c| {
                c.seed = seed;
                c.temperature = 1.5;
                c.top_k = 50;
                c.top_p = 1.0;
                c.min_p = 0.0;
            });
            (0..64).map(|_| s.sample(&logits)).collect::<Vec<_>>()
        };
        assert_eq!(run(7), run(7));
        assert_ne!(run(7), run(8));
    }

    #[test]
    fn top_k_top_p_and_min_p_restrict_the_candidates() {
        let logits = [0.0f32, 5.0, 4.9, -3.0, 4.8];
        let draws = |f: fn(&mut SamplerConfig)| {
            let mut s = sampler(|c| {
                c.temperature = 1.0;
                c.top_p = 1.0;
                c.min_p = 0.0;
                f(c)
            });
            let mut seen: Vec<u32> = (0..400).map(|_| s.sample(&logits)).collect();
            seen.sort_unstable();
            seen.dedup();
            seen
        };
        assert_eq!(draws(|c| c.top_k = 1), vec![1]);
        assert_eq!(draws(|c| c.top_k = 2), vec![1, 2]);
        // Probabilities ≈ [.003, .36, .33, .00004, .30]: top-p 0.5 keeps ids 1 and 2.
        assert_eq!(draws(|c| c.top_p = 0.5), vec![1, 2]);
        // min-p 0.5: ids within half of the top probability.
        assert_eq!(draws(|c| c.min_p = 0.5), vec![1, 2, 4]);
    }

    #[test]
    fn repeat_penalty_divides_positive_and_multiplies_negative_logits() {
        let mut s = sampler(|c| {
            c.temperature = 0.0;
            c.repeat_penalty = 2.0;
        });
        s.accept(0);
        // 3.0 / 2 = 1.5 < 2.0, so id 1 wins once id 0 is penalised.
        assert_eq!(s.sample(&[3.0, 2.0]), 1);
        let mut logits = vec![-1.0, 1.0];
        s.apply_penalties(&mut logits);
        assert_eq!(logits, vec![-2.0, 1.0]);
    }

    #[test]
    fn frequency_and_presence_penalties_subtract_per_count_and_once() {
        let mut s = sampler(|c| {
            c.temperature = 0.0;
            c.frequency_penalty = 0.5;
            c.presence_penalty = 0.25;
        });
        assert!(!s.config().is_plain_greedy());
        for t in [0, 0, 0, 2] {
            s.accept(t);
        }
        let mut logits = vec![1.0, 1.0, 1.0];
        s.apply_penalties(&mut logits);
        assert_eq!(logits, vec![1.0 - 1.5 - 0.25, 1.0, 1.0 - 0.5 - 0.25]);
        assert_eq!(s.sample(&[1.0, 0.9, 1.0]), 1);
    }

    /// The `k` first (id, logit) of a row in TOP_K's rank order.
    fn top_k(logits: &[f32], k: usize) -> (Vec<f32>, Vec<u32>) {
        let mut order: Vec<usize> = (0..logits.len()).collect();
        order.sort_by(|&a, &b| {
            let (x, y) = (logits[a], logits[b]);
            (x.is_nan().cmp(&y.is_nan())).then(y.partial_cmp(&x).unwrap_or(Ordering::Equal)).then(a.cmp(&b))
        });
        order.truncate(k);
        (order.iter().map(|&i| logits[i]).collect(), order.iter().map(|&i| i as u32).collect())
    }

    #[test]
    fn candidates_give_the_tokens_of_the_whole_row() {
        let mut rng = SplitMix64(9);
        // Coarse logits (many ties, signed zeros), a NaN, and a recent window that penalises
        // some of the largest.
        let row = |rng: &mut SplitMix64| -> Vec<f32> {
            let mut l: Vec<f32> = (0..300).map(|_| ((rng.uniform() * 16.0).floor() as f32 - 8.0) / 4.0).collect();
            l[17] = f32::NAN;
            l[3] = -0.0;
            l
        };
        let configs: [fn(&mut SamplerConfig); 5] = [
            |_| {},
            |c| (c.top_k, c.top_p, c.min_p) = (7, 1.0, 0.0),
            |c| (c.repeat_penalty, c.frequency_penalty, c.presence_penalty, c.repeat_last_n) = (1.5, 0.5, 0.25, 6),
            |c| (c.temperature, c.repeat_penalty) = (0.0, 2.0),
            |c| (c.top_k, c.presence_penalty, c.temperature) = (1, 1.0, 3.0),
        ];
        for (n, f) in configs.into_iter().enumerate() {
            let mut c = SamplerConfig { seed: n as u64, temperature: 1.2, ..SamplerConfig::default() };
            f(&mut c);
            let k = c.candidates(300).expect("no penalty raises a logit");
            let (mut whole, mut cands) = (Sampler::new(c.clone()).expect("valid"), Sampler::new(c).expect("valid"));
            for step in 0..200 {
                let logits = row(&mut rng);
                let (values, ids) = top_k(&logits, k);
                let (a, b) = (whole.sample(&logits), cands.sample_candidates(&values, &ids));
                assert_eq!(a, b, "config {n}, step {step}");
                whole.accept(a);
                cands.accept(b);
            }
        }
    }

    #[test]
    fn candidates_are_none_where_the_whole_row_is_needed() {
        let c = |f: fn(&mut SamplerConfig)| {
            let mut c = SamplerConfig::default();
            f(&mut c);
            c.candidates(1000)
        };
        assert_eq!(c(|_| {}), Some(40));
        assert_eq!(c(|c| c.repeat_penalty = 1.1), Some(40 + 64));
        assert_eq!(c(|c| (c.temperature, c.frequency_penalty) = (0.0, 0.5)), Some(1 + 64));
        assert_eq!(c(|c| c.top_k = 5000), Some(1000));
        assert_eq!(c(|c| c.temperature = 0.0), None, "plain greedy reads ARGMAX");
        assert_eq!(c(|c| c.repeat_penalty = 0.9), None);
        assert_eq!(c(|c| c.frequency_penalty = -0.1), None);
        assert_eq!(c(|c| c.presence_penalty = -0.1), None);
    }

    #[test]
    fn the_repeat_window_keeps_the_last_n_tokens() {
        let mut s = sampler(|c| c.repeat_last_n = 2);
        for t in [1, 2, 3] {
            s.accept(t);
        }
        assert_eq!(s.recent.iter().copied().collect::<Vec<_>>(), vec![2, 3]);
    }
}
