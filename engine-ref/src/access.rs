//! Reading operands from and storing results into the registry, with errors that name the
//! instruction and the tensor.

use std::borrow::Cow;

use purebee_isa::ExecError;
use purebee_memory::quant::QuantMatrix;
use purebee_memory::{HostTensor, MemoryError, Registry, TensorId};

/// Wraps a registry error with the instruction's name.
pub(crate) fn mem(op: &'static str) -> impl Fn(MemoryError) -> ExecError {
    move |source| ExecError::Memory { op, source }
}

/// The elements of a live F32 tensor.
pub(crate) fn f32s<'a>(reg: &'a Registry, op: &'static str, id: TensorId) -> Result<Cow<'a, [f32]>, ExecError> {
    reg.get(id).and_then(|t| t.f32s(reg.name(id))).map_err(mem(op))
}

/// The elements of a live U32 tensor.
pub(crate) fn u32s<'a>(reg: &'a Registry, op: &'static str, id: TensorId) -> Result<Cow<'a, [u32]>, ExecError> {
    reg.get(id).and_then(|t| t.u32s(reg.name(id))).map_err(mem(op))
}

/// A live tensor of any dtype viewed as a `[rows, cols]` matrix of its layout.
pub(crate) fn matrix<'a>(reg: &'a Registry, op: &'static str, id: TensorId) -> Result<QuantMatrix<'a>, ExecError> {
    let t = reg.get(id).map_err(mem(op))?;
    QuantMatrix::from_tensor(t).map_err(|e| decode_error(reg, op, id, e))
}

/// A decoding failure of tensor `id`'s bytes.
pub(crate) fn decode_error(reg: &Registry, op: &'static str, id: TensorId, e: impl std::fmt::Display) -> ExecError {
    ExecError::Decode { op, tensor: reg.name(id).to_string(), reason: e.to_string() }
}

/// Overwrites a live F32 tensor with `values` (exactly its element count).
pub(crate) fn store_f32(reg: &mut Registry, op: &'static str, id: TensorId, values: &[f32]) -> Result<(), ExecError> {
    store(reg, op, id, values, HostTensor::f32s_mut)
}

/// Overwrites a live U32 tensor with `values` (exactly its element count).
pub(crate) fn store_u32(reg: &mut Registry, op: &'static str, id: TensorId, values: &[u32]) -> Result<(), ExecError> {
    store(reg, op, id, values, HostTensor::u32s_mut)
}

/// Overwrites the elements of a live tensor, viewed through `view`, with `values`.
fn store<T: Copy>(
    reg: &mut Registry,
    op: &'static str,
    id: TensorId,
    values: &[T],
    view: for<'t> fn(&'t mut HostTensor, &str) -> Result<&'t mut [T], MemoryError>,
) -> Result<(), ExecError> {
    let name = reg.name(id).to_string();
    let dst = reg.get_mut(id).and_then(|t| view(t, &name)).map_err(mem(op))?;
    if dst.len() != values.len() {
        let (expected, got) = (dst.len() * 4, values.len() * 4);
        return Err(ExecError::Memory { op, source: MemoryError::SizeMismatch { name, expected, got } });
    }
    dst.copy_from_slice(values);
    Ok(())
}

/// Fails unless `n` rows starting at position `pos` fit the rows of `cache`.
pub(crate) fn check_fits(
    reg: &Registry,
    op: &'static str,
    cache: TensorId,
    pos: u32,
    n: usize,
) -> Result<(), ExecError> {
    let (n_ctx, _) = dims(reg, op, cache)?;
    let end = pos as u64 + n as u64;
    if end > n_ctx as u64 {
        return Err(ExecError::ContextOverflow {
            op,
            tensor: reg.name(cache).to_string(),
            pos: pos as u64,
            end,
            n_ctx,
        });
    }
    Ok(())
}

/// The `[rows, cols]` of a tensor as the registry declares it.
pub(crate) fn dims(reg: &Registry, op: &'static str, id: TensorId) -> Result<(usize, usize), ExecError> {
    let d = reg.desc(id).map_err(mem(op))?;
    Ok((d.shape.rows(), d.shape.cols()))
}

/// `Σ a_i · b_i` accumulated in f64, in index order.
pub(crate) fn dot_f64(a: &[f32], b: &[f32]) -> f64 {
    a.iter().zip(b).map(|(&x, &y)| x as f64 * y as f64).sum()
}
