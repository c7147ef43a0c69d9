//! Each Rust parameter struct against the WGSL struct it mirrors, as naga lays that out: a
//! field added on one side only changes a size (the uniform's bytes would be misread).

use std::mem::{offset_of, size_of};

use super::{
    argmax, attention, bitlinear, elementwise, embed, kv_write, linear, rms_norm, rope, rope_kv, rope_qkv, softmax,
    top_k, Shader,
};

/// The size of the Rust struct the dispatchers bind as shader `s`'s `Params` (no wildcard:
/// a new shader must name its struct).
fn rust_params_size(s: Shader) -> usize {
    match s {
        Shader::Elementwise => size_of::<elementwise::Params>(),
        // norm_quant.wgsl reads rms_norm.wgsl's Params.
        Shader::RmsNorm | Shader::RmsNormSubgroup | Shader::NormQuant | Shader::NormQuantSubgroup => {
            size_of::<rms_norm::Params>()
        }
        Shader::Softmax | Shader::SoftmaxSubgroup => size_of::<softmax::Params>(),
        Shader::Argmax | Shader::ArgmaxSubgroup => size_of::<argmax::Params>(),
        Shader::TopK => size_of::<top_k::Params>(),
        Shader::Embed => size_of::<embed::Params>(),
        Shader::Linear
        | Shader::LinearSubgroup
        | Shader::LinearAdd
        | Shader::LinearAddSubgroup
        | Shader::LinearActMul
        | Shader::LinearActMulSubgroup
        | Shader::LinearArgmax
        | Shader::LinearArgmaxSubgroup
        | Shader::LinearMulti
        | Shader::LinearMultiSubgroup => size_of::<linear::Params>(),
        Shader::Bitlinear
        | Shader::BitlinearSubgroup
        | Shader::BitlinearAdd
        | Shader::BitlinearAddSubgroup
        | Shader::BitlinearActMul
        | Shader::BitlinearActMulSubgroup
        | Shader::BitlinearMulti
        | Shader::BitlinearMultiSubgroup => size_of::<bitlinear::Params>(),
        Shader::Rope => size_of::<rope::Params>(),
        Shader::KvWrite => size_of::<kv_write::Params>(),
        Shader::Attention | Shader::AttentionPaged => size_of::<attention::Params>(),
        Shader::RopeKv => size_of::<rope_kv::Params>(),
    }
}

/// The size naga computes for struct `name` of a WGSL source, and its members' offsets.
fn wgsl_struct(source: &str, name: &str) -> (u32, Vec<(String, u32)>) {
    let module = naga::front::wgsl::parse_str(source).unwrap_or_else(|e| panic!("{}", e.emit_to_string(source)));
    let mut layouter = naga::proc::Layouter::default();
    layouter.update(module.to_ctx()).expect("the types lay out");
    let (handle, ty) =
        module.types.iter().find(|(_, t)| t.name.as_deref() == Some(name)).unwrap_or_else(|| panic!("no {name}"));
    let naga::TypeInner::Struct { members, .. } = &ty.inner else { panic!("{name} is not a struct") };
    let offsets = members.iter().map(|m| (m.name.clone().unwrap_or_default(), m.offset)).collect();
    (layouter[handle].size, offsets)
}

#[test]
fn params_match_the_wgsl_structs() {
    for shader in Shader::ALL {
        let (size, _) = wgsl_struct(shader.source(), "Params");
        assert_eq!(rust_params_size(shader), size as usize, "{}: Params", shader.name());
    }
}

#[test]
fn rope_args_match_the_wgsl_rope_fields() {
    // RopeArgs mirrors the `rope_*` fields of the product kernels' Params, from
    // rope_head_dim to rope_base_param.
    let cases = [
        (Shader::BitlinearMulti, offset_of!(bitlinear::Params, rope)),
        (Shader::LinearMulti, offset_of!(linear::Params, rope)),
    ];
    for (shader, rust_offset) in cases {
        let (_, members) = wgsl_struct(shader.source(), "Params");
        let offset = |field: &str| {
            members.iter().find(|(n, _)| n == field).unwrap_or_else(|| panic!("{}: no {field}", shader.name())).1
                as usize
        };
        assert_eq!(offset("rope_head_dim"), rust_offset, "{}", shader.name());
        let span = offset("rope_base_param") + 4 - offset("rope_head_dim");
        assert_eq!(span, size_of::<rope_qkv::RopeArgs>(), "{}", shader.name());
    }
}
