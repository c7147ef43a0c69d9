//! Programs are validated when they are built: every malformed instruction is a typed
//! error that names the instruction and the tensor.

use purebee_isa::ops::{Attention, Rope, RopeStyle};
use purebee_isa::{ExecError, IsaError, ParamValue, ProgramBuilder, U32Arg};
use purebee_memory::{DType, MemoryError, Registry};

fn registry() -> Registry {
    Registry::new()
}

#[test]
fn shape_and_dtype_errors_name_the_operand() {
    let mut reg = registry();
    let mut b = ProgramBuilder::new("t", &mut reg);
    let x = b.alloc("x", DType::F32, &[3, 64]).expect("declare");
    let w = b.declare("w", DType::F32, &[10, 63]).expect("declare");
    let y = b.alloc("y", DType::F32, &[3, 10]).expect("declare");
    match b.linear(y, x, w) {
        Err(IsaError::Shape { op: "LINEAR", operand: "weight", tensor, .. }) => assert_eq!(tensor, "w"),
        other => panic!("expected a shape error, got {other:?}"),
    }
    let wt = b.declare("wt", DType::F16, &[10, 64]).expect("declare");
    match b.bitlinear(y, x, wt, None) {
        Err(IsaError::DType { op: "BITLINEAR", operand: "weight", got: DType::F16, .. }) => {}
        other => panic!("expected a dtype error, got {other:?}"),
    }
    let ids = b.alloc("ids", DType::F32, &[3]).expect("declare");
    assert!(matches!(b.embed(x, wt, ids), Err(IsaError::DType { op: "EMBED", operand: "ids", .. })));
    let norm_w = b.declare("nw", DType::F32, &[65]).expect("declare");
    assert!(matches!(b.rms_norm(x, x, norm_w, 1e-5), Err(IsaError::Shape { op: "RMS_NORM", operand: "weight", .. })));
    let bad_out = b.alloc("am", DType::U32, &[2]).expect("declare");
    assert!(matches!(b.argmax(bad_out, x), Err(IsaError::Shape { op: "ARGMAX", operand: "out", .. })));
}

#[test]
fn in_place_is_allowed_only_where_documented() {
    let mut reg = registry();
    let mut b = ProgramBuilder::new("t", &mut reg);
    let x = b.alloc("x", DType::F32, &[2, 8]).expect("declare");
    let w = b.declare("w", DType::F32, &[8, 8]).expect("declare");
    b.add(x, x, x).expect("residual add in place");
    b.silu(x, x).expect("activation in place");
    b.softmax(x, x).expect("softmax in place");
    assert_eq!(b.linear(x, x, w), Err(IsaError::Alias { op: "LINEAR", tensor: "x".into() }));
}

#[test]
fn use_after_free_and_double_free_fail_at_build_time() {
    let mut reg = registry();
    let mut b = ProgramBuilder::new("t", &mut reg);
    let x = b.alloc("x", DType::F32, &[2, 8]).expect("declare");
    b.free(x).expect("live");
    assert_eq!(b.silu(x, x), Err(IsaError::UseAfterFree { op: "SILU", tensor: "x".into() }));
    assert_eq!(b.free(x), Err(IsaError::UseAfterFree { op: "FREE", tensor: "x".into() }));
    b.push(purebee_isa::Instruction::GridAlloc(purebee_isa::ops::GridAlloc { tensor: x })).expect("realloc");
    b.silu(x, x).expect("live again");
}

#[test]
fn unknown_and_duplicate_names_are_errors() {
    let mut reg = registry();
    let mut b = ProgramBuilder::new("t", &mut reg);
    assert_eq!(
        b.tensor("blk.0.attn_q.weight"),
        Err(IsaError::Memory {
            op: "LOOKUP",
            source: MemoryError::UnknownTensor { name: "blk.0.attn_q.weight".into() }
        })
    );
    b.declare("x", DType::F32, &[1]).expect("declare");
    assert!(matches!(
        b.declare("x", DType::F32, &[1]),
        Err(IsaError::Memory { source: MemoryError::DuplicateTensor { .. }, .. })
    ));
    assert!(matches!(
        b.declare("y", DType::Q8_0, &[4, 33]),
        Err(IsaError::Memory { source: MemoryError::NotWholeBlocks { .. }, .. })
    ));
    assert!(matches!(b.declare("z", DType::F32, &[]), Err(IsaError::Invalid { op: "DECLARE", .. })));
}

#[test]
fn rope_and_attention_check_their_head_geometry() {
    let mut reg = registry();
    let mut b = ProgramBuilder::new("t", &mut reg);
    let pos = b.param_u32("pos").expect("new param");
    let q = b.alloc("q", DType::F32, &[2, 96]).expect("declare");
    let k = b.alloc("k", DType::F32, &[16, 64]).expect("declare");
    let v = b.alloc("v", DType::F32, &[16, 64]).expect("declare");
    let o = b.alloc("o", DType::F32, &[2, 96]).expect("declare");
    let rope = |rot_dim| Rope {
        out: q,
        x: q,
        head_dim: 32,
        rot_dim,
        style: RopeStyle::Neox,
        base: 1e4.into(),
        pos: pos.into(),
    };
    assert!(matches!(b.rope(rope(31)), Err(IsaError::Invalid { op: "ROPE", .. })));
    assert!(matches!(b.rope(rope(64)), Err(IsaError::Invalid { op: "ROPE", .. })));
    b.rope(rope(32)).expect("valid");
    // 3 query heads over 2 kv heads: not a grouping.
    let att = Attention { out: o, q, k_cache: k, v_cache: v, head_dim: 32, rows: pos.into() };
    assert!(matches!(b.attention(att), Err(IsaError::Invalid { op: "ATTENTION", .. })));
    // A parameter used as the wrong type.
    let base = b.param_f32("base").expect("new param");
    let bad = Rope {
        base: 1e4.into(),
        pos: U32Arg::Param(match base {
            purebee_isa::F32Arg::Param(p) => p,
            purebee_isa::F32Arg::Const(_) => unreachable!("param_f32 returns a parameter"),
        })
        .into(),
        ..rope(32)
    };
    assert!(matches!(b.rope(bad), Err(IsaError::Param { op: "ROPE", .. })));
    assert!(matches!(b.param_u32("pos"), Err(IsaError::Param { .. })));
}

#[test]
fn run_time_values_must_match_the_declared_parameters() {
    let mut reg = registry();
    let mut b = ProgramBuilder::new("t", &mut reg);
    let pos = b.param_u32("pos").expect("new param");
    let p = b.finish();
    assert_eq!(p.check_params(&[]), Err(ExecError::ParamCount { expected: 1, got: 0 }));
    assert!(matches!(p.check_params(&[ParamValue::F32(1.0)]), Err(ExecError::ParamKind { .. })));
    p.check_params(&[ParamValue::U32(7)]).expect("matches");
    assert_eq!(p.resolve_u32(pos, &[ParamValue::U32(7)]), Ok(7));
    assert_eq!(p.param("pos").map(|p| p.index()), Some(0));
}

#[test]
fn top_k_checks_k_its_output_shapes_and_aliasing() {
    let mut reg = registry();
    let mut b = ProgramBuilder::new("t", &mut reg);
    let x = b.alloc("x", DType::F32, &[3, 10]).expect("declare");
    let values = b.alloc("values", DType::F32, &[3, 4]).expect("declare");
    let ids = b.alloc("ids", DType::U32, &[3, 4]).expect("declare");
    b.top_k(values, ids, x, 4).expect("a valid TOP_K");
    for k in [0, 11] {
        match b.top_k(values, ids, x, k) {
            Err(IsaError::Field { op: "TOP_K", field: "k", value, .. }) => assert_eq!(value, k.to_string()),
            other => panic!("k = {k}: expected a field error, got {other:?}"),
        }
    }
    // k must match the outputs' columns, and both outputs need one row per row of x.
    assert!(matches!(b.top_k(values, ids, x, 3), Err(IsaError::Shape { op: "TOP_K", operand: "values", .. })));
    let short_ids = b.alloc("short_ids", DType::U32, &[2, 4]).expect("declare");
    assert!(matches!(b.top_k(values, short_ids, x, 4), Err(IsaError::Shape { op: "TOP_K", operand: "ids", .. })));
    assert!(matches!(b.top_k(values, values, x, 4), Err(IsaError::DType { op: "TOP_K", operand: "ids", .. })));
    let wide = b.alloc("wide", DType::F32, &[3, 10]).expect("declare");
    let wide_ids = b.alloc("wide_ids", DType::U32, &[3, 10]).expect("declare");
    assert_eq!(b.top_k(x, wide_ids, x, 10), Err(IsaError::Alias { op: "TOP_K", tensor: "x".into() }));
    b.top_k(wide, wide_ids, x, 10).expect("k = m keeps the whole row, sorted");
    // One row as a vector.
    let v = b.alloc("v", DType::F32, &[7]).expect("declare");
    let (vv, vi) = (b.alloc("vv", DType::F32, &[2]).expect("declare"), b.alloc("vi", DType::U32, &[1, 2]).expect("d"));
    b.top_k(vv, vi, v, 2).expect("a vector is one row");
    // The log-sum-exp: F32, one element per row ([3] or [3, 1]), distinct from the others.
    let lse = b.alloc("lse", DType::F32, &[3]).expect("declare");
    let lse_col = b.alloc("lse_col", DType::F32, &[3, 1]).expect("declare");
    b.top_k_lse(values, ids, lse, x, 4).expect("lse [3]");
    b.top_k_lse(values, ids, lse_col, x, 4).expect("lse [3, 1]");
    let short = b.alloc("lse_short", DType::F32, &[2]).expect("declare");
    assert!(matches!(b.top_k_lse(values, ids, short, x, 4), Err(IsaError::Shape { op: "TOP_K", operand: "lse", .. })));
    let lse_u = b.alloc("lse_u", DType::U32, &[3]).expect("declare");
    assert!(matches!(b.top_k_lse(values, ids, lse_u, x, 4), Err(IsaError::DType { op: "TOP_K", operand: "lse", .. })));
    assert!(matches!(b.top_k_lse(values, ids, values, x, 4), Err(IsaError::Shape { op: "TOP_K", operand: "lse", .. })));
    let lse1 = b.alloc("lse1", DType::F32, &[1]).expect("declare");
    b.top_k_lse(vv, vi, lse1, v, 2).expect("a vector's lse is [1]");
}
