//! What the pass returns: a [`Plan`] of [`Unit`]s, and the one fused-group type,
//! [`Group`], for BITLINEAR and LINEAR products alike.

use std::ops::Range;

use crate::kernels::bitlinear::Epilogue;

use super::Pattern;

/// The products of a [`Group`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ProductKind {
    /// BITLINEARs: one int8 quantization of `x` (a scale per row) serves them all.
    BitLinear,
    /// LINEARs of one activations option. `int8` (int8-block activations): the first
    /// LINEAR's rounding of `x` (or the rounder's) serves them all; f32 activations share
    /// nothing.
    Linear { int8: bool },
}

impl ProductKind {
    /// Whether the products share one rounding of `x`.
    pub fn shares_rounding(self) -> bool {
        match self {
            ProductKind::BitLinear => true,
            ProductKind::Linear { int8 } => int8,
        }
    }
}

/// A fused RMS_NORM at the head of a [`Group`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct NormPart {
    pub index: usize,
    /// Whether the normed tensor is written (its write is not dead).
    pub write_out: bool,
}

/// The instruction before a [`Group`]'s products that produces their `x` and rounds it
/// for them, so that no product rounds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Rounder {
    /// An RMS_NORM ([`Pattern::NormQuantization`]; [`Pattern::NormInProduct`] before
    /// LINEARs with f32 activations).
    Norm(NormPart),
    /// The ATTENTION at this index, whose merge rounds ([`Pattern::AttentionRounding`];
    /// LINEARs with int8-block activations only).
    Attention(usize),
}

impl Rounder {
    fn index(&self) -> usize {
        match *self {
            Rounder::Norm(n) => n.index,
            Rounder::Attention(i) => i,
        }
    }
}

/// The instructions fused into the last product of a [`Group`] (a TENSOR_ADD, an
/// activation and an ELEMENT_MUL, or the ARGMAX of its output), as its epilogue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TailPart {
    /// The last instruction absorbed.
    pub last: usize,
    pub epilogue: Epilogue,
}

impl TailPart {
    /// The pattern this epilogue applies.
    fn pattern(&self) -> Pattern {
        match self.epilogue {
            Epilogue::Add { .. } => Pattern::ResidualEpilogue,
            Epilogue::ActMul { .. } => Pattern::ActMulEpilogue,
            Epilogue::Argmax { .. } => Pattern::ArgmaxPartials,
        }
    }
}

/// A fused [`Pattern::RopeEpilogue`] at the end of a merged q/k/v group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RopePart {
    /// The first ROPE; the last instruction absorbed is `first + 3`.
    pub first: usize,
    /// Whether the rotated k and v are written to their tensors.
    pub write_k: bool,
    pub write_v: bool,
    /// Whether the k and v caches are F16 (the epilogue rounds into them).
    pub k_f16: bool,
    pub v_f16: bool,
}

/// Consecutive products of one kind that read one `x` (LINEARs: with one activations
/// option), after an optional instruction that produces `x` and rounds it for them, and
/// with an optional epilogue after the last of them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Group {
    pub kind: ProductKind,
    pub rounder: Option<Rounder>,
    /// The products' instruction indices, consecutive.
    pub products: Vec<usize>,
    pub tail: Option<TailPart>,
    /// The products run as one dispatch ([`Pattern::MultiProduct`] or
    /// [`Pattern::GatedPair`]).
    pub merged: bool,
    /// The merged q/k/v products' ROPE epilogue.
    pub rope: Option<RopePart>,
}

impl Group {
    /// The instructions the group covers.
    pub fn range(&self) -> Range<usize> {
        let first = self.rounder.map_or(self.products[0], |r| r.index());
        let last = match (self.rope, self.tail) {
            (Some(r), _) => r.first + 3,
            (None, Some(t)) => t.last,
            (None, None) => self.products[self.products.len() - 1],
        };
        first..last + 1
    }

    /// The fused RMS_NORM before the products, if any.
    pub fn norm(&self) -> Option<NormPart> {
        match self.rounder {
            Some(Rounder::Norm(n)) => Some(n),
            _ => None,
        }
    }

    /// Whether the group ends with an ARGMAX of its one-token LINEAR's output.
    pub fn is_head(&self) -> bool {
        matches!(self.tail, Some(TailPart { epilogue: Epilogue::Argmax { .. }, .. }))
    }

    /// The merged products carry an epilogue: a gated pair ([`Pattern::GatedPair`]).
    pub fn is_gated_pair(&self) -> bool {
        self.merged && self.tail.is_some()
    }

    /// The patterns the group applies.
    pub fn patterns(&self) -> Vec<Pattern> {
        let mut p = Vec::new();
        let shared = self.kind.shares_rounding();
        if shared && self.products.len() > 1 {
            p.push(Pattern::SharedQuantization);
        }
        p.extend(self.rounder.map(|r| match r {
            Rounder::Norm(_) if !shared => Pattern::NormInProduct,
            Rounder::Norm(_) => Pattern::NormQuantization,
            Rounder::Attention(_) => Pattern::AttentionRounding,
        }));
        p.extend(self.tail.map(|t| t.pattern()));
        if self.merged {
            p.push(if self.tail.is_some() { Pattern::GatedPair } else { Pattern::MultiProduct });
        }
        p.extend(self.rope.map(|_| Pattern::RopeEpilogue));
        p
    }
}

/// One step of a [`Plan`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Unit {
    /// One instruction on the unfused path (`kernels::record`, or the compiler's own
    /// handling of memory instructions).
    Single(usize),
    /// Products of one `x` with what the pass fused around them.
    Group(Group),
    /// [`Pattern::RopeKvWrite`]: the four instructions from `first`.
    RopeKv { first: usize, write_k: bool },
    /// [`Pattern::ArgmaxPartials`]: the LINEAR at `first`, then its ARGMAX.
    HeadArgmax { first: usize, write_out: bool },
}

/// The fusion plan of a program: units covering every instruction once, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Plan {
    pub units: Vec<Unit>,
}

impl Plan {
    /// Every instruction on its own (fusion off).
    pub fn unfused(len: usize) -> Plan {
        Plan { units: (0..len).map(Unit::Single).collect() }
    }

    /// The patterns applied, one entry per group and pattern, in program order.
    #[cfg(test)]
    pub fn patterns(&self) -> Vec<Pattern> {
        self.units
            .iter()
            .flat_map(|u| match u {
                Unit::Group(g) => g.patterns(),
                Unit::RopeKv { .. } => vec![Pattern::RopeKvWrite],
                Unit::HeadArgmax { .. } => vec![Pattern::ArgmaxPartials],
                Unit::Single(_) => vec![],
            })
            .collect()
    }
}
