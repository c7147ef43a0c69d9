//! TENSOR_ADD, ELEMENT_MUL, SILU, RELU2, GELU: one invocation per element
//! (`elementwise.wgsl`). Reads `4n` bytes per input and writes `4n`.

use purebee_isa::ops::{Binary, Unary};

use super::{KernelCall, RecordCtx, Shader, Storage};
use crate::pipelines::PipelineKey;
use crate::GpuError;

/// Threads per workgroup.
pub(crate) const WG: u32 = 256;

/// Mirrors `Params` in `elementwise.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub(crate) struct Params {
    pub n: u32,
    pub _pad: [u32; 3],
}

/// The binary operations (`BINARY_OP` in the shader).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BinaryOp {
    Add = 0,
    Mul = 1,
}

/// The unary operations (`UNARY_OP` in the shader).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum UnaryOp {
    Silu = 0,
    Relu2 = 1,
    Gelu = 2,
}

fn call(
    ctx: &RecordCtx,
    entry: &'static str,
    constant: (&'static str, u32),
    n: usize,
    storage: Vec<(u32, Storage)>,
) -> KernelCall {
    KernelCall {
        key: PipelineKey { shader: Shader::Elementwise, entry, constants: vec![("WG", WG), constant] },
        params: bytemuck::bytes_of(&Params { n: n as u32, _pad: [0; 3] }).to_vec(),
        storage,
        workgroups: ctx.grid_1d(n, WG),
    }
}

pub(crate) fn binary(ctx: &RecordCtx, op: BinaryOp, i: &Binary) -> Result<Vec<KernelCall>, GpuError> {
    let n = ctx.desc(i.out)?.shape.numel();
    let t = |id| Storage::Tensor(id, 0);
    let c = ("BINARY_OP", op as u32);
    let call = match (i.out == i.a, i.out == i.b) {
        (false, false) => call(ctx, "binary", c, n, vec![(1, t(i.a)), (2, t(i.b)), (3, t(i.out))]),
        (true, false) => call(ctx, "binary_inplace", c, n, vec![(2, t(i.b)), (3, t(i.out))]),
        (false, true) => call(ctx, "binary_inplace_b", c, n, vec![(1, t(i.a)), (3, t(i.out))]),
        (true, true) => call(ctx, "binary_self", c, n, vec![(3, t(i.out))]),
    };
    Ok(vec![call])
}

pub(crate) fn unary(ctx: &RecordCtx, op: UnaryOp, i: &Unary) -> Result<Vec<KernelCall>, GpuError> {
    let n = ctx.desc(i.out)?.shape.numel();
    let t = |id| Storage::Tensor(id, 0);
    let c = ("UNARY_OP", op as u32);
    let call = if i.out == i.x {
        call(ctx, "unary_inplace", c, n, vec![(3, t(i.out))])
    } else {
        call(ctx, "unary", c, n, vec![(1, t(i.x)), (3, t(i.out))])
    };
    Ok(vec![call])
}
