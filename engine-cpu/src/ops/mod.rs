//! One file per instruction (family): operands checked in the order the reference engine
//! reads them (so a run fails with the same error), then the kernels.

mod attention;
mod bitlinear;
mod cache_rows;
mod elementwise;
mod embed;
mod kv_write;
mod linear;
mod rope;
mod rows;
mod top_k;

use purebee_isa::{ExecError, Instruction, ParamValue, Program};
use purebee_memory::{Registry, TensorId};

use crate::engine::size_mismatch;
use crate::kernels::pool::Pool;
use crate::kernels::Simd;
use crate::store::{byte_len, Store};

/// What one instruction runs with.
pub(crate) struct Exec<'a> {
    pub reg: &'a Registry,
    pub store: &'a mut Store,
    pub pool: &'a Pool,
    pub level: Simd,
    pub caches: &'a mut Caches,
}

/// Derived data kept between instructions and runs, each keyed by what it was derived from.
#[derive(Default)]
pub(crate) struct Caches {
    /// BITLINEAR's int8 activations of the last `x` (the BITLINEARs that read it share them).
    pub activations: bitlinear::Activations,
    /// LINEAR's int8-block activations of the last `x` (likewise shared).
    pub linear_activations: linear::Int8Activations,
    /// ROPE's cos/sin table of the last positions (every ROPE of one step shares it).
    pub rope: rope::Table,
    /// LINEAR prefill's outputs tile by tile, before they are assembled into `out` (kept, up
    /// to 16 MiB, so that each prefill LINEAR does not allocate and zero it again).
    pub gemm_tiles: Vec<f32>,
}

pub(crate) fn run(e: &mut Exec, program: &Program, i: &Instruction, params: &[ParamValue]) -> Result<(), ExecError> {
    match i {
        Instruction::GridAlloc(a) => e.store.allocate(e.reg, a.tensor),
        Instruction::GridWrite(w) => write_bytes(e.reg, e.store, "GRID_WRITE", w.tensor, &w.data),
        Instruction::Free(f) => e.store.free(e.reg, f.tensor),
        // Instructions run one after another: every earlier write is already visible.
        Instruction::Sync => Ok(()),
        Instruction::Embed(x) => embed::run(e, x),
        Instruction::RmsNorm(x) => rows::rms_norm(e, x),
        Instruction::Linear(x) => linear::run(e, x),
        Instruction::BitLinear(x) => bitlinear::run(e, x),
        Instruction::TensorAdd(x) => elementwise::binary(e, "TENSOR_ADD", x, |a, b| a + b),
        Instruction::ElementMul(x) => elementwise::binary(e, "ELEMENT_MUL", x, |a, b| a * b),
        Instruction::Silu(x) => {
            let level = e.level;
            elementwise::unary(e, "SILU", x, &|x, out| crate::kernels::silu::silu(level, x, out))
        }
        Instruction::Relu2(x) => {
            elementwise::unary(e, "RELU2", x, &|x, out| elementwise::map(x, out, elementwise::relu2))
        }
        Instruction::Gelu(x) => elementwise::unary(e, "GELU", x, &|x, out| elementwise::map(x, out, elementwise::gelu)),
        Instruction::Softmax(x) => rows::softmax(e, x),
        Instruction::Rope(r) => {
            let base = program.resolve_f32(r.base, params)?;
            rope::run(e, program, params, r, base)
        }
        Instruction::KvWrite(k) => kv_write::run(e, program, params, k),
        Instruction::Attention(a) => attention::run(e, program, params, a),
        Instruction::Argmax(a) => rows::argmax(e, a),
        Instruction::TopK(t) => top_k::run(e, t),
    }
}

/// The cache positions an ATTENTION reads per kv row, summed over its query rows' distinct
/// prefixes (for the profiler's byte count): `start + n` for consecutive rows, `Σ (pos + 1)`
/// for paged ones.
pub(crate) fn attended_positions(
    e: &Exec,
    program: &Program,
    params: &[ParamValue],
    a: &purebee_isa::ops::Attention,
) -> Result<u64, ExecError> {
    use purebee_isa::ops::CacheRows;
    const OP: &str = "ATTENTION";
    let n = crate::store::dims(e.reg, OP, a.q)?.0 as u64;
    Ok(match &a.rows {
        CacheRows::Consecutive(start) => u64::from(program.resolve_u32(*start, params)?) + n,
        CacheRows::Paged(p) => e.store.u32s(e.reg, OP, p.pos)?.iter().map(|&t| u64::from(t) + 1).sum(),
    })
}

/// GRID_WRITE: a tensor's exact byte image.
pub(crate) fn write_bytes(
    reg: &Registry,
    store: &mut Store,
    op: &'static str,
    id: TensorId,
    bytes: &[u8],
) -> Result<(), ExecError> {
    store.check_live(reg, op, id)?;
    if bytes.len() != byte_len(reg, op, id)? {
        return Err(size_mismatch(reg, op, id, bytes.len()));
    }
    store.with_output(reg, op, id, |_, words| {
        bytemuck::cast_slice_mut::<u32, u8>(words)[..bytes.len()].copy_from_slice(bytes);
        Ok(())
    })
}

/// An F32 view of an output's words (`numel` elements).
pub(crate) fn f32s_mut(words: &mut [u32], numel: usize) -> &mut [f32] {
    &mut bytemuck::cast_slice_mut(words)[..numel]
}

/// An F32 input of an instruction that may work in place: checked live now, and copied when
/// it is the output itself (whose words are taken out while the instruction writes them).
/// Read it inside [`Store::with_output`] with [`input`].
pub(crate) fn maybe_aliased(
    e: &Exec,
    op: &'static str,
    id: TensorId,
    out: TensorId,
) -> Result<Option<Vec<f32>>, ExecError> {
    let values = e.store.f32s(e.reg, op, id)?;
    Ok((id == out).then(|| values.to_vec()))
}

/// The values of an input prepared by [`maybe_aliased`].
pub(crate) fn input<'a>(
    store: &'a Store,
    reg: &'a Registry,
    op: &'static str,
    id: TensorId,
    copy: &'a Option<Vec<f32>>,
) -> Result<&'a [f32], ExecError> {
    match copy {
        Some(v) => Ok(v),
        None => store.f32s(reg, op, id),
    }
}
