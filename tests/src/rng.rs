//! The deterministic stream every test here draws its data from (SplitMix64), so that a
//! failing case is reproduced from its seed alone, on every platform.

pub use purebee_rng::SplitMix64;
