//! The forward pass of the supported decoder-only models as ISA instructions (docs/formats.md § Models).
//! One graph; what differs by architecture comes from `Architecture` (config.rs):
//! BitNet b1.58 has sub-norms before the attention output and FFN down projections, NEOX
//! RoPE and a relu² (or silu) FFN, with ternary weights through BITLINEAR; Llama has no
//! sub-norms, normal RoPE and a silu FFN, with float or block-quantized weights through
//! LINEAR. Both: GQA attention, RMS norms, `output.weight` or the tied embedding.

use purebee_isa::ops::{Attention, CacheRows, LinearActivations, PagedRows, Rope, RowPositions};
use purebee_isa::{DType, IsaError, ProgramBuilder, TensorId, U32Arg};

use crate::config::FfnActivation;
use crate::weights::{LinearWeight, Weights};
use crate::{KvCache, ModelConfig, QuantizedActivations};

/// Which rows of logits a forward program computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LogitsRows {
    /// Every position's logits (`[n, vocab]`): for `purebee-rs logits` and checks.
    All,
    /// Only the last position's (`[1, vocab]`): for generation.
    Last,
}

/// Which rows a forward program computes logits for, as it is recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Head {
    /// As [`LogitsRows`] says.
    Rows(LogitsRows),
    /// `m` rows named per run by the host in a U32 `[m]` tensor (`ForwardIo::selected`): the
    /// rows of a batched step whose sessions sample a token.
    Selected(usize),
}

/// Where the rows of a forward program sit.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Place {
    /// One session: row `r` at position `pos + r` of its own cache.
    Consecutive(U32Arg),
    /// Rows of several sessions in a cache they share in pages.
    Paged(PagedRows),
}

/// The tensors of one forward program: what its caller writes and reads, and what the
/// setup program must allocate (the forward program itself allocates nothing, so that it
/// can run once per token without touching memory).
#[derive(Clone, Debug)]
pub(crate) struct ForwardIo {
    /// Token ids, U32 `[n]` (written before each run).
    pub ids: TensorId,
    /// Logits, F32 `[rows, vocab]`.
    pub logits: TensorId,
    /// The greedy token of each logits row, U32 `[rows]`; for a single-token pass of the
    /// last row, the `ids` tensor itself.
    pub argmax: TensorId,
    /// Every tensor the program uses besides weights and caches (ids, logits and argmax
    /// included), for the setup and teardown programs.
    pub tensors: Vec<TensorId>,
    /// Constant contents the setup program writes after allocating.
    pub constants: Vec<(TensorId, Vec<u8>)>,
    /// The rows whose logits are computed, U32 `[m]`, written per run ([`Head::Selected`]).
    pub selected: Option<TensorId>,
}

/// Declares a tensor of the forward program under `prefix` and records it in `io`.
fn declare(
    b: &mut ProgramBuilder,
    tensors: &mut Vec<TensorId>,
    prefix: &str,
    name: &str,
    dtype: DType,
    dims: &[usize],
) -> Result<TensorId, IsaError> {
    let id = b.declare(&format!("{prefix}.{name}"), dtype, dims)?;
    tensors.push(id);
    Ok(id)
}

/// Records the forward pass of `n` tokens placed as `place` says into `b`: every layer,
/// the final norm, the LM head over the rows `head` names, and ARGMAX.
#[allow(clippy::too_many_arguments)] // every argument is a distinct input of the graph
pub(crate) fn record_forward(
    b: &mut ProgramBuilder,
    cfg: &ModelConfig,
    w: &Weights,
    kv: &KvCache,
    n: usize,
    head: Head,
    prefix: &str,
    place: Place,
    acts: QuantizedActivations,
) -> Result<ForwardIo, IsaError> {
    let (d, kvw, ff) = (cfg.n_embd, cfg.kv_width(), cfg.n_ff);
    let mut ts = Vec::new();
    let f32 = DType::F32;
    let ids = declare(b, &mut ts, prefix, "ids", DType::U32, &[n])?;
    let x = declare(b, &mut ts, prefix, "x", f32, &[n, d])?; // residual stream
    let h = declare(b, &mut ts, prefix, "h", f32, &[n, d])?; // normed input of a block
    let q = declare(b, &mut ts, prefix, "q", f32, &[n, d])?;
    let k = declare(b, &mut ts, prefix, "k", f32, &[n, kvw])?;
    let v = declare(b, &mut ts, prefix, "v", f32, &[n, kvw])?;
    let att = declare(b, &mut ts, prefix, "att", f32, &[n, d])?;
    let proj = declare(b, &mut ts, prefix, "proj", f32, &[n, d])?; // attn_output / ffn_down out
    let gate = declare(b, &mut ts, prefix, "gate", f32, &[n, ff])?;
    let up = declare(b, &mut ts, prefix, "up", f32, &[n, ff])?;

    let (rope_pos, cache_rows): (RowPositions, CacheRows) = match place {
        Place::Consecutive(pos) => (pos.into(), pos.into()),
        Place::Paged(paged) => (RowPositions::PerRow(paged.pos), CacheRows::Paged(paged)),
    };
    b.embed(x, w.token_embd, ids)?;
    for (l, lw) in w.layers.iter().enumerate() {
        // Attention block.
        b.rms_norm(h, x, lw.attn_norm, cfg.rms_eps)?;
        linear(b, q, h, lw.q, acts)?;
        linear(b, k, h, lw.k, acts)?;
        linear(b, v, h, lw.v, acts)?;
        let rope = |out| Rope {
            out,
            x: out,
            head_dim: cfg.head_dim as u32,
            rot_dim: cfg.rot_dim as u32,
            style: cfg.arch.rope_style(),
            base: cfg.rope_base.into(),
            pos: rope_pos,
        };
        b.rope(rope(q))?;
        b.rope(rope(k))?;
        b.kv_write(kv.k[l], k, cache_rows)?;
        b.kv_write(kv.v[l], v, cache_rows)?;
        let head_dim = cfg.head_dim as u32;
        b.attention(Attention { out: att, q, k_cache: kv.k[l], v_cache: kv.v[l], head_dim, rows: cache_rows })?;
        if let Some(norm) = lw.attn_sub_norm {
            b.rms_norm(att, att, norm, cfg.rms_eps)?; // BitNet: sub-norm before the projection
        }
        linear(b, proj, att, lw.o, acts)?;
        b.add(x, x, proj)?;
        // FFN block.
        b.rms_norm(h, x, lw.ffn_norm, cfg.rms_eps)?;
        linear(b, gate, h, lw.gate, acts)?;
        linear(b, up, h, lw.up, acts)?;
        match cfg.arch.ffn_activation() {
            FfnActivation::Relu2 => b.relu2(gate, gate)?,
            FfnActivation::Silu => b.silu(gate, gate)?,
        }
        b.mul(gate, gate, up)?;
        if let Some(norm) = lw.ffn_sub_norm {
            b.rms_norm(gate, gate, norm, cfg.rms_eps)?; // BitNet: sub-norm before down
        }
        linear(b, proj, gate, lw.down, acts)?;
        b.add(x, x, proj)?;
    }

    // Final norm and LM head, over every row, only the last or the rows the host names
    // (gathered with EMBED when they are not all the rows: one token's row is the last).
    let mut constants = Vec::new();
    let mut selected = None;
    let (last, n_out) = match head {
        Head::Rows(LogitsRows::All) => (x, n),
        Head::Rows(LogitsRows::Last) if n == 1 => (x, 1),
        Head::Rows(LogitsRows::Last) => {
            let sel = declare(b, &mut ts, prefix, "last_row", DType::U32, &[1])?;
            constants.push((sel, ((n - 1) as u32).to_le_bytes().to_vec()));
            let xl = declare(b, &mut ts, prefix, "x_last", f32, &[1, d])?;
            b.embed(xl, x, sel)?;
            (xl, 1)
        }
        Head::Selected(m) => {
            let sel = declare(b, &mut ts, prefix, "selected_rows", DType::U32, &[m])?;
            selected = Some(sel);
            let xs = declare(b, &mut ts, prefix, "x_selected", f32, &[m, d])?;
            b.embed(xs, x, sel)?;
            (xs, m)
        }
    };
    // Into h when the shapes agree: the last block's write of h is then overwritten before
    // anything else reads it, so an engine need not keep it for the host.
    let normed = if n_out == n { h } else { declare(b, &mut ts, prefix, "out_norm", f32, &[n_out, d])? };
    b.rms_norm(normed, last, w.output_norm, cfg.rms_eps)?;
    let logits = declare(b, &mut ts, prefix, "logits", f32, &[n_out, cfg.n_vocab])?;
    linear(b, logits, normed, w.lm_head, acts)?;
    // A single-token pass writes its greedy token over its own input id, so that the next
    // decode step can run it without a round trip through the host (`Model::submit_greedy`).
    let argmax = if n == 1 && head == Head::Rows(LogitsRows::Last) {
        ids
    } else {
        declare(b, &mut ts, prefix, "argmax", DType::U32, &[n_out])?
    };
    b.argmax(argmax, logits)?;
    Ok(ForwardIo { ids, logits, argmax, tensors: ts, constants, selected })
}

/// BITLINEAR for ternary weights, LINEAR for the others: with int8-block activations
/// before Q4_0, Q4_1 and Q8_0 weights unless `acts` asks for f32.
fn linear(
    b: &mut ProgramBuilder,
    out: TensorId,
    x: TensorId,
    w: LinearWeight,
    acts: QuantizedActivations,
) -> Result<(), IsaError> {
    if w.ternary {
        return b.bitlinear(out, x, w.weight, w.scale);
    }
    let int8 = acts == QuantizedActivations::Int8 && matches!(w.dtype, DType::Q4_0 | DType::Q4_1 | DType::Q8_0);
    b.linear_with(out, x, w.weight, if int8 { LinearActivations::Int8Blocks } else { LinearActivations::F32 })
}
