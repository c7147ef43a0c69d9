//! The kernels: one `.wgsl` file per kernel family beside the Rust that dispatches it.
//!
//! Each dispatcher turns one instruction into [`KernelCall`]s: which pipeline, the bytes of
//! its uniform parameters (a `#[repr(C)]` Pod struct mirroring the WGSL struct), the storage
//! buffers in binding order, and the workgroup counts. Binding 0 is always the uniform;
//! bindings 1.. are the storage buffers, in the order listed.

pub(crate) mod argmax;
pub(crate) mod attention;
pub(crate) mod bitlinear;
pub(crate) mod elementwise;
pub(crate) mod embed;
pub(crate) mod epilogue;
pub(crate) mod kv_write;
pub(crate) mod layout;
pub(crate) mod linear;
pub(crate) mod norm_quant;
#[cfg(test)]
mod params_layout;
pub(crate) mod rms_norm;
pub(crate) mod rope;
pub(crate) mod rope_kv;
pub(crate) mod rope_qkv;
pub(crate) mod row_reduce;
pub(crate) mod softmax;
pub(crate) mod top_k;
#[cfg(test)]
mod wgsl_rules;

use purebee_isa::{F32Arg, Instruction, U32Arg};
use purebee_memory::{Registry, TensorDesc, TensorId};

use crate::context::Capabilities;
use crate::pipelines::PipelineKey;
use crate::GpuError;

/// Every WGSL file of the engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Shader {
    /// `elementwise.wgsl` after `elementwise_ops.wgsl`: TENSOR_ADD, ELEMENT_MUL, SILU, RELU2,
    /// GELU.
    Elementwise,
    /// `rms_norm.wgsl` after `reduce_portable.wgsl`: RMS_NORM, portable reductions.
    RmsNorm,
    /// `rms_norm.wgsl` after `reduce_subgroup.wgsl`: RMS_NORM, subgroup reductions.
    RmsNormSubgroup,
    /// `softmax.wgsl` after `reduce_portable.wgsl`: SOFTMAX, portable reductions.
    Softmax,
    /// `softmax.wgsl` after `reduce_subgroup.wgsl`: SOFTMAX, subgroup reductions.
    SoftmaxSubgroup,
    /// `argmax.wgsl` after `reduce_portable.wgsl`: ARGMAX, portable reductions.
    Argmax,
    /// `argmax.wgsl` after `reduce_subgroup.wgsl`: ARGMAX, subgroup reductions.
    ArgmaxSubgroup,
    /// `top_k.wgsl`: TOP_K.
    TopK,
    /// `embed.wgsl`: EMBED.
    Embed,
    /// `linear.wgsl` with the `residual_add.wgsl` epilogue (fused LINEAR + TENSOR_ADD),
    /// portable reductions.
    LinearAdd,
    /// `linear.wgsl` with the `residual_add.wgsl` epilogue, subgroup reductions.
    LinearAddSubgroup,
    /// `linear.wgsl` with the `act_mul.wgsl` epilogue (fused up LINEAR + SILU/RELU2/GELU +
    /// ELEMENT_MUL), portable reductions.
    LinearActMul,
    /// `linear.wgsl` with the `act_mul.wgsl` epilogue, subgroup reductions.
    LinearActMulSubgroup,
    /// `linear_argmax.wgsl` after `linear.wgsl`, `product_store.wgsl` and `argmax_key.wgsl` (a one-token LINEAR
    /// with the first pass of the ARGMAX of its output), portable reductions.
    LinearArgmax,
    /// `linear_argmax.wgsl`, subgroup reductions.
    LinearArgmaxSubgroup,
    /// `linear_multi.wgsl` after `linear.wgsl`, `product_store.wgsl` and
    /// `elementwise_ops.wgsl`, then `rope_math.wgsl` and `rope_qkv.wgsl` (several one-token
    /// LINEAR products in one dispatch, q/k/v with their ROPE epilogue), portable reductions.
    LinearMulti,
    /// `linear_multi.wgsl`, subgroup reductions.
    LinearMultiSubgroup,
    /// `linear.wgsl` after `reduce_portable.wgsl` and `act_quant.wgsl`: LINEAR, portable
    /// reductions.
    Linear,
    /// `linear.wgsl` after `reduce_subgroup.wgsl` and `act_quant.wgsl`: LINEAR, subgroup
    /// reductions.
    LinearSubgroup,
    /// `bitlinear.wgsl` after `reduce_portable.wgsl` and `act_quant.wgsl`: BITLINEAR,
    /// portable reductions.
    Bitlinear,
    /// `bitlinear.wgsl` after `reduce_subgroup.wgsl` and `act_quant.wgsl`: BITLINEAR,
    /// subgroup reductions.
    BitlinearSubgroup,
    /// `rope.wgsl` after `rope_math.wgsl`: ROPE.
    Rope,
    /// `kv_write.wgsl`: KV_WRITE.
    KvWrite,
    /// `attention.wgsl` after `attention_consecutive.wgsl`: ATTENTION of consecutive rows.
    Attention,
    /// `attention.wgsl` after `attention_paged.wgsl`: ATTENTION of paged rows.
    AttentionPaged,
    /// `bitlinear.wgsl` with the `residual_add.wgsl` epilogue (fused BITLINEAR +
    /// TENSOR_ADD), portable reductions.
    BitlinearAdd,
    /// `bitlinear.wgsl` with the `residual_add.wgsl` epilogue, subgroup reductions.
    BitlinearAddSubgroup,
    /// `bitlinear.wgsl` with the `act_mul.wgsl` epilogue (fused up BITLINEAR + SILU/RELU2 +
    /// ELEMENT_MUL), portable reductions.
    BitlinearActMul,
    /// `bitlinear.wgsl` with the `act_mul.wgsl` epilogue, subgroup reductions.
    BitlinearActMulSubgroup,
    /// `bitlinear_multi.wgsl` after `bitlinear.wgsl`, `product_store.wgsl` and
    /// `elementwise_ops.wgsl`, then `rope_math.wgsl` and `rope_qkv.wgsl` (several one-token
    /// BITLINEAR products in one dispatch, q/k/v with their ROPE epilogue), portable
    /// reductions.
    BitlinearMulti,
    /// `bitlinear_multi.wgsl`, subgroup reductions.
    BitlinearMultiSubgroup,
    /// `rope_kv.wgsl` after `rope_math.wgsl` (fused ROPE q, k + KV_WRITE k, v).
    RopeKv,
    /// `norm_quant.wgsl` after `rms_norm.wgsl` (fused RMS_NORM + BITLINEAR quantization),
    /// portable reductions.
    NormQuant,
    /// `norm_quant.wgsl`, subgroup reductions.
    NormQuantSubgroup,
}

impl Shader {
    /// Every variant (for tests over all shaders, and [`crate::wgsl_modules`]).
    pub const ALL: [Shader; 34] = [
        Shader::Elementwise,
        Shader::RmsNorm,
        Shader::RmsNormSubgroup,
        Shader::Softmax,
        Shader::SoftmaxSubgroup,
        Shader::Argmax,
        Shader::ArgmaxSubgroup,
        Shader::TopK,
        Shader::Embed,
        Shader::LinearAdd,
        Shader::LinearAddSubgroup,
        Shader::LinearActMul,
        Shader::LinearActMulSubgroup,
        Shader::LinearArgmax,
        Shader::LinearArgmaxSubgroup,
        Shader::LinearMulti,
        Shader::LinearMultiSubgroup,
        Shader::Linear,
        Shader::LinearSubgroup,
        Shader::Bitlinear,
        Shader::BitlinearSubgroup,
        Shader::Rope,
        Shader::KvWrite,
        Shader::Attention,
        Shader::AttentionPaged,
        Shader::BitlinearAdd,
        Shader::BitlinearAddSubgroup,
        Shader::BitlinearActMul,
        Shader::BitlinearActMulSubgroup,
        Shader::BitlinearMulti,
        Shader::BitlinearMultiSubgroup,
        Shader::RopeKv,
        Shader::NormQuant,
        Shader::NormQuantSubgroup,
    ];

    /// The file name, for labels and messages.
    pub fn name(self) -> &'static str {
        match self {
            Shader::Elementwise => "elementwise.wgsl",
            Shader::RmsNorm => "rms_norm.wgsl",
            Shader::RmsNormSubgroup => "rms_norm.wgsl (subgroups)",
            Shader::Softmax => "softmax.wgsl",
            Shader::SoftmaxSubgroup => "softmax.wgsl (subgroups)",
            Shader::Argmax => "argmax.wgsl",
            Shader::ArgmaxSubgroup => "argmax.wgsl (subgroups)",
            Shader::TopK => "top_k.wgsl",
            Shader::Embed => "embed.wgsl",
            Shader::LinearAdd => "linear.wgsl+residual_add.wgsl",
            Shader::LinearAddSubgroup => "linear.wgsl+residual_add.wgsl (subgroups)",
            Shader::LinearActMul => "linear.wgsl+act_mul.wgsl",
            Shader::LinearActMulSubgroup => "linear.wgsl+act_mul.wgsl (subgroups)",
            Shader::LinearArgmax => "linear_argmax.wgsl",
            Shader::LinearArgmaxSubgroup => "linear_argmax.wgsl (subgroups)",
            Shader::LinearMulti => "linear_multi.wgsl",
            Shader::LinearMultiSubgroup => "linear_multi.wgsl (subgroups)",
            Shader::Linear => "linear.wgsl",
            Shader::LinearSubgroup => "linear.wgsl (subgroups)",
            Shader::Bitlinear => "bitlinear.wgsl",
            Shader::BitlinearSubgroup => "bitlinear.wgsl (subgroups)",
            Shader::Rope => "rope.wgsl",
            Shader::KvWrite => "kv_write.wgsl",
            Shader::Attention => "attention.wgsl",
            Shader::AttentionPaged => "attention.wgsl (paged)",
            Shader::BitlinearAdd => "bitlinear.wgsl+residual_add.wgsl",
            Shader::BitlinearAddSubgroup => "bitlinear.wgsl+residual_add.wgsl (subgroups)",
            Shader::BitlinearActMul => "bitlinear.wgsl+act_mul.wgsl",
            Shader::BitlinearActMulSubgroup => "bitlinear.wgsl+act_mul.wgsl (subgroups)",
            Shader::BitlinearMulti => "bitlinear_multi.wgsl",
            Shader::BitlinearMultiSubgroup => "bitlinear_multi.wgsl (subgroups)",
            Shader::RopeKv => "rope_kv.wgsl",
            Shader::NormQuant => "norm_quant.wgsl",
            Shader::NormQuantSubgroup => "norm_quant.wgsl (subgroups)",
        }
    }

    /// Whether the module uses subgroup operations (created only on a device with wgpu's
    /// SUBGROUP feature, never in a browser build).
    pub fn uses_subgroups(self) -> bool {
        self.source().contains("subgroup_invocation_id")
    }

    /// The WGSL source.
    pub fn source(self) -> &'static str {
        match self {
            Shader::Elementwise => concat!(include_str!("elementwise_ops.wgsl"), include_str!("elementwise.wgsl")),
            Shader::RmsNorm => concat!(
                include_str!("reduce_portable.wgsl"),
                include_str!("rms_sum.wgsl"),
                include_str!("rms_norm.wgsl")
            ),
            Shader::RmsNormSubgroup => concat!(
                include_str!("reduce_subgroup.wgsl"),
                include_str!("rms_sum.wgsl"),
                include_str!("rms_norm.wgsl")
            ),
            Shader::Softmax => concat!(include_str!("reduce_portable.wgsl"), include_str!("softmax.wgsl")),
            Shader::SoftmaxSubgroup => concat!(include_str!("reduce_subgroup.wgsl"), include_str!("softmax.wgsl")),
            Shader::Argmax => concat!(
                include_str!("reduce_portable.wgsl"),
                include_str!("argmax_key.wgsl"),
                include_str!("argmax.wgsl")
            ),
            Shader::ArgmaxSubgroup => concat!(
                include_str!("reduce_subgroup.wgsl"),
                include_str!("argmax_key.wgsl"),
                include_str!("argmax.wgsl")
            ),
            Shader::TopK => concat!(include_str!("argmax_key.wgsl"), include_str!("top_k.wgsl")),
            Shader::LinearAdd => concat!(
                include_str!("reduce_portable.wgsl"),
                include_str!("act_quant.wgsl"),
                include_str!("rms_sum.wgsl"),
                include_str!("linear.wgsl"),
                include_str!("linear_weight.wgsl"),
                include_str!("residual_add.wgsl")
            ),
            Shader::LinearAddSubgroup => concat!(
                include_str!("reduce_subgroup.wgsl"),
                include_str!("act_quant.wgsl"),
                include_str!("rms_sum.wgsl"),
                include_str!("linear.wgsl"),
                include_str!("linear_weight.wgsl"),
                include_str!("residual_add.wgsl")
            ),
            Shader::LinearActMul => concat!(
                include_str!("reduce_portable.wgsl"),
                include_str!("act_quant.wgsl"),
                include_str!("rms_sum.wgsl"),
                include_str!("linear.wgsl"),
                include_str!("linear_weight.wgsl"),
                include_str!("elementwise_ops.wgsl"),
                include_str!("act_mul.wgsl")
            ),
            Shader::LinearActMulSubgroup => concat!(
                include_str!("reduce_subgroup.wgsl"),
                include_str!("act_quant.wgsl"),
                include_str!("rms_sum.wgsl"),
                include_str!("linear.wgsl"),
                include_str!("linear_weight.wgsl"),
                include_str!("elementwise_ops.wgsl"),
                include_str!("act_mul.wgsl")
            ),
            Shader::LinearArgmax => concat!(
                include_str!("reduce_portable.wgsl"),
                include_str!("act_quant.wgsl"),
                include_str!("rms_sum.wgsl"),
                include_str!("linear.wgsl"),
                include_str!("linear_weight.wgsl"),
                include_str!("product_store.wgsl"),
                include_str!("argmax_key.wgsl"),
                include_str!("linear_argmax.wgsl")
            ),
            Shader::LinearArgmaxSubgroup => concat!(
                include_str!("reduce_subgroup.wgsl"),
                include_str!("act_quant.wgsl"),
                include_str!("rms_sum.wgsl"),
                include_str!("linear.wgsl"),
                include_str!("linear_weight.wgsl"),
                include_str!("product_store.wgsl"),
                include_str!("argmax_key.wgsl"),
                include_str!("linear_argmax.wgsl")
            ),
            Shader::Embed => include_str!("embed.wgsl"),
            Shader::LinearMulti => concat!(
                include_str!("reduce_portable.wgsl"),
                include_str!("act_quant.wgsl"),
                include_str!("rms_sum.wgsl"),
                include_str!("linear.wgsl"),
                include_str!("linear_multi.wgsl"),
                include_str!("product_store.wgsl"),
                include_str!("elementwise_ops.wgsl"),
                include_str!("rope_math.wgsl"),
                include_str!("f16_bits.wgsl"),
                include_str!("rope_qkv.wgsl")
            ),
            Shader::LinearMultiSubgroup => concat!(
                include_str!("reduce_subgroup.wgsl"),
                include_str!("act_quant.wgsl"),
                include_str!("rms_sum.wgsl"),
                include_str!("linear.wgsl"),
                include_str!("linear_multi.wgsl"),
                include_str!("product_store.wgsl"),
                include_str!("elementwise_ops.wgsl"),
                include_str!("rope_math.wgsl"),
                include_str!("f16_bits.wgsl"),
                include_str!("rope_qkv.wgsl")
            ),
            Shader::Linear => concat!(
                include_str!("reduce_portable.wgsl"),
                include_str!("act_quant.wgsl"),
                include_str!("rms_sum.wgsl"),
                include_str!("linear.wgsl"),
                include_str!("linear_weight.wgsl"),
                include_str!("product_store.wgsl")
            ),
            Shader::LinearSubgroup => concat!(
                include_str!("reduce_subgroup.wgsl"),
                include_str!("act_quant.wgsl"),
                include_str!("rms_sum.wgsl"),
                include_str!("linear.wgsl"),
                include_str!("linear_weight.wgsl"),
                include_str!("product_store.wgsl")
            ),
            Shader::Bitlinear => concat!(
                include_str!("reduce_portable.wgsl"),
                include_str!("act_quant.wgsl"),
                include_str!("bitlinear.wgsl"),
                include_str!("product_store.wgsl")
            ),
            Shader::BitlinearSubgroup => {
                concat!(
                    include_str!("reduce_subgroup.wgsl"),
                    include_str!("act_quant.wgsl"),
                    include_str!("bitlinear.wgsl"),
                    include_str!("product_store.wgsl")
                )
            }
            Shader::BitlinearAdd => concat!(
                include_str!("reduce_portable.wgsl"),
                include_str!("act_quant.wgsl"),
                include_str!("bitlinear.wgsl"),
                include_str!("residual_add.wgsl")
            ),
            Shader::BitlinearAddSubgroup => concat!(
                include_str!("reduce_subgroup.wgsl"),
                include_str!("act_quant.wgsl"),
                include_str!("bitlinear.wgsl"),
                include_str!("residual_add.wgsl")
            ),
            Shader::BitlinearActMul => concat!(
                include_str!("reduce_portable.wgsl"),
                include_str!("act_quant.wgsl"),
                include_str!("bitlinear.wgsl"),
                include_str!("elementwise_ops.wgsl"),
                include_str!("act_mul.wgsl")
            ),
            Shader::BitlinearActMulSubgroup => concat!(
                include_str!("reduce_subgroup.wgsl"),
                include_str!("act_quant.wgsl"),
                include_str!("bitlinear.wgsl"),
                include_str!("elementwise_ops.wgsl"),
                include_str!("act_mul.wgsl")
            ),
            Shader::BitlinearMulti => concat!(
                include_str!("reduce_portable.wgsl"),
                include_str!("act_quant.wgsl"),
                include_str!("bitlinear.wgsl"),
                include_str!("product_store.wgsl"),
                include_str!("elementwise_ops.wgsl"),
                include_str!("bitlinear_multi.wgsl"),
                include_str!("rope_math.wgsl"),
                include_str!("f16_bits.wgsl"),
                include_str!("rope_qkv.wgsl")
            ),
            Shader::BitlinearMultiSubgroup => concat!(
                include_str!("reduce_subgroup.wgsl"),
                include_str!("act_quant.wgsl"),
                include_str!("bitlinear.wgsl"),
                include_str!("product_store.wgsl"),
                include_str!("elementwise_ops.wgsl"),
                include_str!("bitlinear_multi.wgsl"),
                include_str!("rope_math.wgsl"),
                include_str!("f16_bits.wgsl"),
                include_str!("rope_qkv.wgsl")
            ),
            Shader::NormQuant => concat!(
                include_str!("reduce_portable.wgsl"),
                include_str!("act_quant.wgsl"),
                include_str!("rms_sum.wgsl"),
                include_str!("rms_norm.wgsl"),
                include_str!("norm_quant.wgsl")
            ),
            Shader::NormQuantSubgroup => concat!(
                include_str!("reduce_subgroup.wgsl"),
                include_str!("act_quant.wgsl"),
                include_str!("rms_sum.wgsl"),
                include_str!("rms_norm.wgsl"),
                include_str!("norm_quant.wgsl")
            ),
            Shader::Rope => concat!(include_str!("rope_math.wgsl"), include_str!("rope.wgsl")),
            Shader::RopeKv => {
                concat!(include_str!("rope_math.wgsl"), include_str!("f16_bits.wgsl"), include_str!("rope_kv.wgsl"))
            }
            Shader::KvWrite => concat!(include_str!("f16_bits.wgsl"), include_str!("kv_write.wgsl")),
            // act_quant.wgsl: combine_rounded's int8-block rounding.
            Shader::Attention => concat!(
                include_str!("act_quant.wgsl"),
                include_str!("attention_consecutive.wgsl"),
                include_str!("attention.wgsl")
            ),
            Shader::AttentionPaged => concat!(
                include_str!("act_quant.wgsl"),
                include_str!("attention_paged.wgsl"),
                include_str!("attention.wgsl")
            ),
        }
    }
}

/// A WGSL source parsed and validated by naga (every capability allowed: the device decides
/// which it takes), with what each entry point uses; the error as naga prints it.
pub(crate) fn analyse(source: &str) -> Result<(naga::Module, naga::valid::ModuleInfo), String> {
    let module = naga::front::wgsl::parse_str(source).map_err(|e| e.emit_to_string(source))?;
    let info = naga::valid::Validator::new(naga::valid::ValidationFlags::all(), naga::valid::Capabilities::all())
        .validate(&module)
        .map_err(|e| e.emit_to_string(source))?;
    Ok((module, info))
}

/// The storage bindings of group 0 that entry point `entry` of a WGSL source reads (loads
/// from, whether declared `read` or `read_write`), as a bit mask (bit `n` for `@binding(n)`,
/// up to 63), from naga's analysis of the module. Profiles count the bytes of these bindings
/// as the bytes a dispatch reads. When the source does not validate (it would not compile
/// either), the bindings declared `var<storage, read>`.
pub(crate) fn bindings_read(source: &str, entry: &str) -> u64 {
    let analysed = analyse(source).ok().and_then(|(module, info)| {
        let index = module.entry_points.iter().position(|e| e.name == entry)?;
        let uses = info.get_entry_point(index);
        let mut mask = 0u64;
        for (handle, var) in module.global_variables.iter() {
            let Some(binding) = &var.binding else { continue };
            let storage = matches!(var.space, naga::AddressSpace::Storage { .. });
            if storage
                && binding.group == 0
                && binding.binding < 64
                && uses[handle].contains(naga::valid::GlobalUse::READ)
            {
                mask |= 1 << binding.binding;
            }
        }
        Some(mask)
    });
    analysed.unwrap_or_else(|| read_only_bindings(source))
}

/// The storage bindings of group 0 that a WGSL source declares read-only
/// (`var<storage, read>` or `var<storage>`), as a bit mask (bit `n` for `@binding(n)`).
pub(crate) fn read_only_bindings(source: &str) -> u64 {
    let mut mask = 0u64;
    for (_, rest) in source.match_indices("@binding(").map(|(i, _)| source.split_at(i + "@binding(".len())) {
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        let Ok(binding) = digits.parse::<u32>() else { continue };
        let declaration: String = rest.split(';').next().unwrap_or("").chars().filter(|c| !c.is_whitespace()).collect();
        let read_only = declaration.contains("var<storage,read>") || declaration.contains("var<storage>");
        if read_only && binding < 64 {
            mask |= 1 << binding;
        }
    }
    mask
}

/// A storage buffer bound to a kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Storage {
    /// Part `1` of tensor `0`'s GPU layout.
    Tensor(TensorId, usize),
    /// A window of a part: bytes `offset .. offset + size` of part `1` of tensor `0` (for
    /// tensors larger than one binding; see [`RecordCtx::row_windows`]), offsets in the whole
    /// part: the compiler binds the shard holding the window (`tensors.rs`).
    TensorRange(TensorId, usize, u64, u64),
    /// The program's run-time parameter values, one u32 word each (f32 as bits).
    RunParams,
    /// A GPU-only buffer that is no ISA tensor, of at least this many bytes (see
    /// [`ScratchKey`]).
    Scratch(ScratchKey, u64),
}

/// A GPU-only working buffer that is not an ISA tensor (BITLINEAR's int8 activations,
/// LINEAR's int8-rounded activations, a fused ARGMAX's partials, ATTENTION's split-K
/// partial results).
///
/// The compiler creates one buffer per key per compiled program, once, sized to the largest
/// request of that key among the program's dispatches; every dispatch naming the key binds
/// that one buffer. Dispatches run in order and each kernel that reads a scratch buffer
/// reads what an earlier dispatch of the same instruction wrote (the one just before it, or
/// for a LINEAR over several row windows, its one rounding dispatch before them all), or of
/// the same fused group (`fuse/`: one quantization read by the products of every
/// BITLINEAR in the group, with no other dispatch between), so sharing one buffer between
/// instructions is safe. Nothing is allocated when the program
/// runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ScratchKey {
    /// BITLINEAR's int8 activations, four per u32 word (element `4w + b` in byte `b` of
    /// word `w`), row-major: row `r` starts at word `r·k/4`.
    BitlinearActivations,
    /// BITLINEAR's per-row activation scales `s = 127 / max(max|x|, 1e-5)`, f32 `[n]`.
    BitlinearScales,
    /// LINEAR's activations rounded to int8 blocks (`LinearActivations::Int8Blocks`), as
    /// the product kernels read them: `x̂ = q / s_b` correctly rounded, f32 `[n, k]`.
    LinearActivations,
    /// An ARGMAX-fused LINEAR's partials (`linear_argmax.wgsl`): per 8 output rows, the
    /// order key of their largest value and its index, two u32 words.
    ArgmaxPartials,
    /// ATTENTION's split-K partial results: per (query row, head, split) a slot of
    /// `head_dim + 2` f32, `[m, l, o_0 .. o_{head_dim−1}]` (see `attention.wgsl`).
    AttentionPartials,
    /// TOP_K's candidates between two levels of its selection, one `(value key, !index)`
    /// pair of u32 per candidate (see `top_k.wgsl`); a level reads one of A and B and
    /// writes the other.
    TopKCandidatesA,
    /// The other buffer of TOP_K's candidates.
    TopKCandidatesB,
}

/// One dispatch of one pipeline.
#[derive(Clone, Debug)]
pub(crate) struct KernelCall {
    pub key: PipelineKey,
    /// The uniform parameters (binding 0), a Pod struct's bytes.
    pub params: Vec<u8>,
    /// Storage buffers with their binding numbers (1, 2, ...; an entry point may skip some).
    pub storage: Vec<(u32, Storage)>,
    pub workgroups: [u32; 3],
}

/// What a dispatcher may look at: tensor descriptions and the adapter's capabilities and
/// limits. (Run-time arguments become parameter slots without the program: a `ParamId` is
/// already the slot.)
pub(crate) struct RecordCtx<'a> {
    pub reg: &'a Registry,
    pub caps: Capabilities,
    pub max_workgroups: u32,
    /// `max_storage_buffer_binding_size`: the most bytes one binding may address.
    pub max_binding: u64,
}

/// Window starts are multiples of this many rows, so that every window's byte offset is a
/// multiple of 256, the largest `min_storage_buffer_offset_alignment` adapters report.
const WINDOW_ROW_STEP: usize = 256;

/// A u32 or f32 argument as a kernel reads it: a constant, or a slot of the run-time
/// parameters (`param == ARG_CONST` means the constant).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub(crate) struct ArgSlot {
    pub value: u32,
    pub param: u32,
}

/// The `param` of an [`ArgSlot`] that holds a constant.
pub(crate) const ARG_CONST: u32 = u32::MAX;

/// Rows per row window of a tensor whose widest part has `widest` bytes per row: the most
/// rows, a multiple of `WINDOW_ROW_STEP`, whose bytes fit one binding of `max_binding`
/// bytes; 0 when not even `WINDOW_ROW_STEP` rows fit. Shards (`tensors.rs`) are whole
/// numbers of these windows.
pub(crate) fn window_rows(widest: u64, max_binding: u64) -> usize {
    (max_binding / widest.max(1)) as usize / WINDOW_ROW_STEP * WINDOW_ROW_STEP
}

impl RecordCtx<'_> {
    /// Splits a tensor's rows into consecutive windows small enough to bind: for each part,
    /// its window's bytes (rows × `layout::part_row_bytes`) fit one binding. One window when
    /// the whole tensor fits; else windows of [`window_rows`] rows (the last shorter), which
    /// is also what a shard holds a whole number of, so each window lies inside one shard.
    /// Fails when even `WINDOW_ROW_STEP` rows do not fit, naming the tensor.
    pub fn row_windows(&self, desc: &TensorDesc) -> Result<Vec<std::ops::Range<usize>>, GpuError> {
        let rows = desc.shape.rows();
        let widest = layout::part_row_bytes(desc).into_iter().max().unwrap_or(0).max(1);
        if (rows as u64).saturating_mul(widest) <= self.max_binding {
            return Ok(std::iter::once(0..rows).collect());
        }
        let fit = window_rows(widest, self.max_binding);
        if fit == 0 {
            return Err(GpuError::TooLarge {
                tensor: desc.name.clone(),
                bytes: widest * WINDOW_ROW_STEP as u64,
                limit: self.max_binding,
            });
        }
        Ok((0..rows).step_by(fit).map(|r0| r0..(r0 + fit).min(rows)).collect())
    }

    pub fn desc(&self, id: TensorId) -> Result<&TensorDesc, GpuError> {
        self.reg.desc(id).map_err(|e| GpuError::Wgpu(e.to_string()))
    }

    /// The start of consecutive rows (`RowPositions` or `CacheRows`), for the fused kernels,
    /// which take only those (fuse/ matches no per-row form); an error naming the fusion
    /// plan otherwise.
    pub fn consecutive(&self, op: &'static str, start: Option<U32Arg>) -> Result<ArgSlot, GpuError> {
        start
            .map(|s| self.u32_arg(s))
            .ok_or_else(|| GpuError::Wgpu(format!("fusion plan: {op} with per-row positions in a fused kernel")))
    }

    pub fn u32_arg(&self, a: U32Arg) -> ArgSlot {
        match a {
            U32Arg::Const(v) => ArgSlot { value: v, param: ARG_CONST },
            U32Arg::Param(p) => ArgSlot { value: 0, param: p.index() as u32 },
        }
    }

    pub fn f32_arg(&self, a: F32Arg) -> ArgSlot {
        match a {
            F32Arg::Const(v) => ArgSlot { value: v.to_bits(), param: ARG_CONST },
            F32Arg::Param(p) => ArgSlot { value: 0, param: p.index() as u32 },
        }
    }

    /// Workgroup counts covering `n` invocations of `wg` threads: x up to the device's
    /// limit, the rest in y (kernels compute `(wid.y · num_workgroups.x + wid.x) · wg + lid.x`).
    pub fn grid_1d(&self, n: usize, wg: u32) -> [u32; 3] {
        let groups = n.div_ceil(wg as usize).max(1) as u64;
        let x = groups.min(self.max_workgroups as u64);
        [x as u32, groups.div_ceil(x) as u32, 1]
    }
}

/// The dispatches of one instruction. Memory instructions (GRID_ALLOC, GRID_WRITE, FREE,
/// SYNC) are handled by the compiler, not here.
pub(crate) fn record(ctx: &RecordCtx, i: &Instruction) -> Result<Vec<KernelCall>, GpuError> {
    match i {
        Instruction::TensorAdd(b) => elementwise::binary(ctx, elementwise::BinaryOp::Add, b),
        Instruction::ElementMul(b) => elementwise::binary(ctx, elementwise::BinaryOp::Mul, b),
        Instruction::Silu(u) => elementwise::unary(ctx, elementwise::UnaryOp::Silu, u),
        Instruction::Relu2(u) => elementwise::unary(ctx, elementwise::UnaryOp::Relu2, u),
        Instruction::Gelu(u) => elementwise::unary(ctx, elementwise::UnaryOp::Gelu, u),
        Instruction::RmsNorm(n) => rms_norm::record(ctx, n),
        Instruction::Softmax(s) => softmax::record(ctx, s),
        Instruction::Argmax(a) => argmax::record(ctx, a),
        Instruction::TopK(t) => top_k::record(ctx, t),
        Instruction::Embed(e) => embed::record(ctx, e),
        Instruction::Linear(l) => linear::record(ctx, l),
        Instruction::BitLinear(b) => bitlinear::record(ctx, b),
        Instruction::Rope(r) => rope::record(ctx, r),
        Instruction::KvWrite(k) => kv_write::record(ctx, k),
        Instruction::Attention(a) => attention::record(ctx, a),
        Instruction::GridAlloc(_) | Instruction::GridWrite(_) | Instruction::Free(_) | Instruction::Sync => Ok(vec![]),
    }
}
