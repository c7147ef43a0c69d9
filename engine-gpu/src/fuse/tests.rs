//! The plans of small programs: which patterns match, and which writes are dead.

use purebee_isa::ops::LinearActivations;
use purebee_isa::{Program, ProgramBuilder};
use purebee_memory::{DType, Registry};

use super::group::{Group, RopePart};
use super::liveness::write_is_dead;
use super::*;
use crate::context::Capabilities;
use crate::kernels::bitlinear::{self, Epilogue};
use crate::kernels::{linear, rope_qkv, RecordCtx};

fn ctx(reg: &Registry) -> RecordCtx<'_> {
    RecordCtx { reg, caps: Capabilities::default(), max_workgroups: 65535, max_binding: 1 << 27 }
}

const LIMITS: Limits = Limits { max_storage_buffers: 8 };

/// The ternary block runtime/src/forward.rs writes (without the attention part's
/// ROPE/KV_WRITE/ATTENTION, which the pass leaves alone: `att` stands in), repeated
/// `blocks` times; returns the program and the registry.
fn ternary_blocks(blocks: usize) -> (Program, Registry) {
    let mut reg = Registry::new();
    let (d, ff) = (128, 256);
    let t = DType::I2_S;
    let mut b = ProgramBuilder::new("block", &mut reg);
    let f = DType::F32;
    let x = b.declare("x", f, &[1, d]).expect("valid");
    let h = b.declare("h", f, &[1, d]).expect("valid");
    let q = b.declare("q", f, &[1, d]).expect("valid");
    let k = b.declare("k", f, &[1, d]).expect("valid");
    let v = b.declare("v", f, &[1, d]).expect("valid");
    let att = b.declare("att", f, &[1, d]).expect("valid");
    let proj = b.declare("proj", f, &[1, d]).expect("valid");
    let gate = b.declare("gate", f, &[1, ff]).expect("valid");
    let up = b.declare("up", f, &[1, ff]).expect("valid");
    let nw = b.declare("nw", f, &[d]).expect("valid");
    let fw = b.declare("fw", f, &[ff]).expect("valid");
    let wd = b.declare("wd", t, &[d, d]).expect("valid");
    let wu = b.declare("wu", t, &[ff, d]).expect("valid");
    let wdn = b.declare("wdn", t, &[d, ff]).expect("valid");
    for _ in 0..blocks {
        b.rms_norm(h, x, nw, 1e-5).expect("valid");
        b.bitlinear(q, h, wd, None).expect("valid");
        b.bitlinear(k, h, wd, None).expect("valid");
        b.bitlinear(v, h, wd, None).expect("valid");
        b.add(att, q, k).expect("valid"); // stands in for ROPE .. ATTENTION (reads q, k)
        b.rms_norm(att, att, nw, 1e-5).expect("valid");
        b.bitlinear(proj, att, wd, None).expect("valid");
        b.add(x, x, proj).expect("valid");
        b.rms_norm(h, x, nw, 1e-5).expect("valid");
        b.bitlinear(gate, h, wu, None).expect("valid");
        b.bitlinear(up, h, wu, None).expect("valid");
        b.relu2(gate, gate).expect("valid");
        b.mul(gate, gate, up).expect("valid");
        b.rms_norm(gate, gate, fw, 1e-5).expect("valid");
        b.bitlinear(proj, gate, wdn, None).expect("valid");
        b.add(x, x, proj).expect("valid");
    }
    (b.finish(), reg)
}

#[test]
fn a_ternary_block_matches_every_pattern() {
    let (p, reg) = ternary_blocks(2);
    let plan = plan(&ctx(&reg), &LIMITS, p.instructions());
    use Pattern::*;
    // Per group: SharedQuantization, NormQuantization, then the epilogue.
    let mut want = Vec::new();
    for _ in 0..2 {
        want.extend([
            SharedQuantization,
            NormQuantization,
            NormQuantization,
            ResidualEpilogue,
            SharedQuantization,
            NormQuantization,
            ActMulEpilogue,
            NormQuantization,
            ResidualEpilogue,
        ]);
    }
    assert_eq!(plan.patterns(), want);
    // Units per block: 4 groups + ADD(att) = 5.
    assert_eq!(plan.units.len(), 10);
}

/// Two blocks of: q/k/v products of one token (BITLINEAR, or LINEAR with int8 blocks)
/// after a norm, then ROPE q, ROPE k and the two KV_WRITEs, then an ATTENTION reading q
/// and the caches; `cache_is_weight` writes k into the k weight's tensor instead of a
/// cache (F32 LINEAR weights).
fn qkv_rope(bitlinear: bool, cache_is_weight: bool) -> (Program, Registry) {
    use purebee_isa::ops::{Attention, Rope, RopeStyle};
    use purebee_isa::U32Arg;
    let mut reg = Registry::new();
    let mut b = ProgramBuilder::new("qkv", &mut reg);
    let f = DType::F32;
    // A weight of the caches' width when it stands in for the k cache.
    let (d, kvw) = if cache_is_weight { (128, 128) } else { (256, 128) };
    let x = b.declare("x", f, &[1, d]).expect("valid");
    let h = b.declare("h", f, &[1, d]).expect("valid");
    let nw = b.declare("nw", f, &[d]).expect("valid");
    let (q, k, v) = (b.declare("q", f, &[1, d]), b.declare("k", f, &[1, kvw]), b.declare("v", f, &[1, kvw]));
    let (q, k, v) = (q.expect("valid"), k.expect("valid"), v.expect("valid"));
    let wt = match (bitlinear, cache_is_weight) {
        (true, _) => DType::TQ2_0,
        (false, false) => DType::Q8_0,
        (false, true) => f,
    };
    let wq = b.declare("wq", wt, &[d, d]).expect("valid");
    let wk = b.declare("wk", wt, &[kvw, d]).expect("valid");
    let wv = b.declare("wv", wt, &[kvw, d]).expect("valid");
    let kc = if cache_is_weight { wk } else { b.declare("kc", f, &[8, kvw]).expect("valid") };
    let n_ctx = if cache_is_weight { kvw } else { 8 };
    let vc = b.declare("vc", f, &[n_ctx, kvw]).expect("valid");
    let att = b.declare("att", f, &[1, d]).expect("valid");
    for _ in 0..2 {
        b.rms_norm(h, x, nw, 1e-5).expect("valid");
        for (out, w) in [(q, wq), (k, wk), (v, wv)] {
            if bitlinear {
                b.bitlinear(out, h, w, None).expect("valid");
            } else {
                b.linear_with(out, h, w, LinearActivations::Int8Blocks).expect("valid");
            }
        }
        let pos = U32Arg::Const(3);
        let rope = |t| Rope {
            out: t,
            x: t,
            head_dim: 64,
            rot_dim: 64,
            style: RopeStyle::Neox,
            base: 1e4f32.into(),
            pos: pos.into(),
        };
        b.rope(rope(q)).expect("valid");
        b.rope(rope(k)).expect("valid");
        b.kv_write(kc, k, pos).expect("valid");
        b.kv_write(vc, v, pos).expect("valid");
        b.attention(Attention { out: att, q, k_cache: kc, v_cache: vc, head_dim: 64, rows: pos.into() })
            .expect("valid");
    }
    (b.finish(), reg)
}

#[test]
fn q_k_v_products_carry_rope_and_the_cache_writes() {
    use Pattern::*;
    for bitlinear in [true, false] {
        let (p, reg) = qkv_rope(bitlinear, false);
        let plan = |max_storage_buffers| plan(&ctx(&reg), &Limits { max_storage_buffers }, p.instructions());
        // norm, q, k, v, ROPE, ROPE, KV_WRITE, KV_WRITE in one group; ATTENTION alone.
        let fused = plan(32);
        let want = [SharedQuantization, NormQuantization, MultiProduct, RopeEpilogue];
        assert_eq!(fused.patterns(), [want, want].concat(), "bitlinear: {bitlinear}");
        assert_eq!(fused.units.len(), 4, "{:?}", fused.units);
        let rope = |u: &Unit| match u {
            Unit::Group(g) => g.rope,
            other => panic!("{other:?}"),
        };
        // The first block's k and v are overwritten by the second block's products,
        // unread: only the caches get them. The second block's are the program's last
        // writes of k and v, kept.
        let part = |first, write| RopePart { first, write_k: write, write_v: write, k_f16: false, v_f16: false };
        assert_eq!(rope(&fused.units[0]), Some(part(4, false)));
        assert_eq!(rope(&fused.units[2]), Some(part(13, true)));
        // Too few storage buffers for the epilogue's three: the products stay merged and
        // the ROPE/KV_WRITE dispatch of its own follows.
        let products =
            if bitlinear { bitlinear::multi_rope_storage_buffers(false) } else { linear::MULTI_STORAGE_BUFFERS };
        let fewer = plan(products + rope_qkv::STORAGE_BUFFERS - 1);
        assert!(fewer.patterns().contains(&RopeKvWrite), "{:?}", fewer.patterns());
        assert!(!fewer.patterns().contains(&RopeEpilogue));
    }
    // A cache that is also a product's weight (bound read-only there) is not fused.
    let (p, reg) = qkv_rope(false, true);
    let plan = plan(&ctx(&reg), &Limits { max_storage_buffers: 32 }, p.instructions());
    assert!(plan.patterns().contains(&MultiProduct), "{:?}", plan.patterns());
    assert!(!plan.patterns().contains(&RopeEpilogue), "{:?}", plan.patterns());
}

#[test]
fn rope_and_kv_writes_fuse_only_when_they_agree() {
    use purebee_isa::ops::{Rope, RopeStyle};
    use purebee_isa::U32Arg;
    let build_with = |rot_dim: u32, v_pos: u32, (k_dtype, v_dtype): (DType, DType)| {
        let mut reg = Registry::new();
        let mut b = ProgramBuilder::new("p", &mut reg);
        let f = DType::F32;
        let q = b.declare("q", f, &[2, 128]).expect("valid");
        let k = b.declare("k", f, &[2, 64]).expect("valid");
        let v = b.declare("v", f, &[2, 64]).expect("valid");
        let kc = b.declare("kc", k_dtype, &[8, 64]).expect("valid");
        let vc = b.declare("vc", v_dtype, &[8, 64]).expect("valid");
        let pos = U32Arg::Const(3);
        let rope = |t| Rope {
            out: t,
            x: t,
            head_dim: 32,
            rot_dim,
            style: RopeStyle::Neox,
            base: 1e4f32.into(),
            pos: pos.into(),
        };
        b.rope(rope(q)).expect("valid");
        b.rope(rope(k)).expect("valid");
        b.kv_write(kc, k, pos).expect("valid");
        b.kv_write(vc, v, U32Arg::Const(v_pos)).expect("valid");
        let p = b.finish();
        let plan = plan(&ctx(&reg), &LIMITS, p.instructions());
        plan
    };
    let build = |rot_dim, v_pos| build_with(rot_dim, v_pos, (DType::F32, DType::F32));
    // F16 caches (either or both) fuse too: the kernel rounds into them.
    for caches in [(DType::F16, DType::F32), (DType::F32, DType::F16), (DType::F16, DType::F16)] {
        assert_eq!(build_with(32, 3, caches).units, [Unit::RopeKv { first: 0, write_k: true }]);
    }
    // k is not written again in the program: the rotated k is its last write, kept.
    assert_eq!(build(32, 3).units, [Unit::RopeKv { first: 0, write_k: true }]);
    assert_eq!(build(32, 3).patterns(), [Pattern::RopeKvWrite]);
    // A rotary width below head_dim, or another position for v: unfused.
    assert_eq!(build(16, 3), Plan::unfused(4));
    assert_eq!(build(32, 4), Plan::unfused(4));
}

#[test]
fn enough_storage_buffers_merge_the_products() {
    let (p, reg) = ternary_blocks(1);
    let plan = plan(&ctx(&reg), &Limits { max_storage_buffers: 14 }, p.instructions());
    use Pattern::*;
    let want = [
        SharedQuantization,
        NormQuantization,
        MultiProduct,
        NormQuantization,
        ResidualEpilogue,
        SharedQuantization,
        NormQuantization,
        ActMulEpilogue,
        GatedPair,
        NormQuantization,
        ResidualEpilogue,
    ];
    assert_eq!(plan.patterns(), want);
    // 11 storage buffers: the gated pair, not the three products.
    let plan = super::plan(&ctx(&reg), &Limits { max_storage_buffers: 11 }, p.instructions());
    assert!(plan.patterns().contains(&GatedPair) && !plan.patterns().contains(&MultiProduct));
}

#[test]
fn gating_and_merging_need_their_preconditions() {
    use Pattern::*;
    // a gated pair of `tokens` tokens, weight types (g, u), an in-place activation or not.
    let build = |tokens: usize, (tg, tu): (DType, DType), in_place: bool| {
        let mut reg = Registry::new();
        let mut b = ProgramBuilder::new("p", &mut reg);
        let f = DType::F32;
        let h = b.declare("h", f, &[tokens, 256]).expect("valid");
        let g = b.declare("g", f, &[tokens, 256]).expect("valid");
        let g2 = b.declare("g2", f, &[tokens, 256]).expect("valid");
        let u = b.declare("u", f, &[tokens, 256]).expect("valid");
        let wg = b.declare("wg", tg, &[256, 256]).expect("valid");
        let wu = b.declare("wu", tu, &[256, 256]).expect("valid");
        b.bitlinear(g, h, wg, None).expect("valid");
        b.bitlinear(u, h, wu, None).expect("valid");
        b.silu(if in_place { g } else { g2 }, g).expect("valid");
        b.mul(g, u, g).expect("valid"); // the operands in the other order
        let p = b.finish();
        plan(&ctx(&reg), &Limits { max_storage_buffers: 32 }, p.instructions()).patterns()
    };
    let (tq, i2) = (DType::TQ2_0, DType::I2_S);
    assert_eq!(build(1, (tq, tq), true), [SharedQuantization, ActMulEpilogue, GatedPair]);
    // Two tokens (tiled products) or two weight types: the epilogue, not the pair.
    assert_eq!(build(2, (tq, tq), true), [SharedQuantization, ActMulEpilogue]);
    assert_eq!(build(1, (tq, i2), true), [SharedQuantization, ActMulEpilogue]);
    // An activation out of place: only the shared quantization.
    assert_eq!(build(1, (tq, tq), false), [SharedQuantization]);
}

#[test]
fn dead_stores_follow_the_rule() {
    let (p, reg) = ternary_blocks(2);
    let plan = plan(&ctx(&reg), &LIMITS, p.instructions());
    let groups: Vec<&Group> = plan
        .units
        .iter()
        .filter_map(|u| match u {
            Unit::Group(g) => Some(g),
            Unit::Single(_) | Unit::RopeKv { .. } | Unit::HeadArgmax { .. } => None,
        })
        .collect();
    assert_eq!(groups.len(), 8);
    let norm_writes: Vec<bool> = groups.iter().map(|g| g.norm().is_some_and(|n| n.write_out)).collect();
    // Block 1: h dead (the second norm overwrites it), att dead (block 2's ADD(att) writes
    // it), h dead, gate dead (block 2's gate BITLINEAR). Block 2: h dead (second norm),
    // att kept (last write), h kept (last write), gate kept (last write).
    assert_eq!(norm_writes, [false, false, false, false, false, true, true, true]);
    let proj_writes: Vec<bool> = groups
        .iter()
        .filter_map(|g| match g.tail.map(|t| t.epilogue) {
            Some(Epilogue::Add { write_out, .. }) => Some(write_out),
            _ => None,
        })
        .collect();
    let up_writes: Vec<bool> = groups
        .iter()
        .filter_map(|g| match g.tail.map(|t| t.epilogue) {
            Some(Epilogue::ActMul { write_out, .. }) => Some(write_out),
            _ => None,
        })
        .collect();
    // up: overwritten by the next block's up BITLINEAR; kept in the last block.
    assert_eq!(up_writes, [false, true]);
    // proj: overwritten by the next BITLINEAR(proj) each time except the very last.
    assert_eq!(proj_writes, [false, false, false, true]);
}

#[test]
fn a_read_between_keeps_the_write() {
    let mut reg = Registry::new();
    let mut b = ProgramBuilder::new("p", &mut reg);
    let f = DType::F32;
    let x = b.declare("x", f, &[2, 128]).expect("valid");
    let h = b.declare("h", f, &[2, 128]).expect("valid");
    let y = b.declare("y", f, &[2, 128]).expect("valid");
    let nw = b.declare("nw", f, &[128]).expect("valid");
    let w = b.declare("w", DType::I2_S, &[128, 128]).expect("valid");
    b.rms_norm(h, x, nw, 1e-5).expect("valid");
    b.bitlinear(y, h, w, None).expect("valid");
    b.relu2(y, h).expect("valid"); // reads h: its write is live
    b.rms_norm(h, x, nw, 1e-5).expect("valid");
    b.bitlinear(y, h, w, None).expect("valid");
    b.free(h).expect("valid"); // then h dies
    let p = b.finish();
    let plan = plan(&ctx(&reg), &LIMITS, p.instructions());
    let writes: Vec<bool> = plan
        .units
        .iter()
        .filter_map(|u| match u {
            Unit::Group(g) => g.norm().map(|n| n.write_out),
            Unit::Single(_) | Unit::RopeKv { .. } | Unit::HeadArgmax { .. } => None,
        })
        .collect();
    assert_eq!(writes, [true, false]);
    // The last write of a tensor is kept: y's, with nothing after it.
    assert!(!write_is_dead(p.instructions(), 4, y, &[]));
}

#[test]
fn a_one_token_head_and_its_argmax_fuse() {
    // LINEAR of `tokens` tokens then ARGMAX; `overwrite`: the logits written again after.
    let build = |tokens: usize, overwrite: bool| {
        let mut reg = Registry::new();
        let mut b = ProgramBuilder::new("p", &mut reg);
        let f = DType::F32;
        let h = b.declare("h", f, &[tokens, 64]).expect("valid");
        let w = b.declare("w", DType::F16, &[300, 64]).expect("valid");
        let logits = b.declare("logits", f, &[tokens, 300]).expect("valid");
        let id = b.declare("id", DType::U32, &[tokens]).expect("valid");
        b.linear(logits, h, w).expect("valid");
        b.argmax(id, logits).expect("valid");
        if overwrite {
            b.linear(logits, h, w).expect("valid");
        }
        let p = b.finish();
        plan(&ctx(&reg), &LIMITS, p.instructions())
    };
    // The logits are the program's last write: kept.
    assert_eq!(build(1, false).units, [Unit::HeadArgmax { first: 0, write_out: true }]);
    assert_eq!(build(1, false).patterns(), [Pattern::ArgmaxPartials]);
    // Overwritten with no read between but the ARGMAX the kernel serves: dead.
    assert_eq!(build(1, true).units[0], Unit::HeadArgmax { first: 0, write_out: false });
    // Several tokens (the tiled kernel): unfused.
    assert_eq!(build(2, false), Plan::unfused(2));
}

#[test]
fn a_float_block_matches_its_patterns() {
    use Pattern::*;
    // The block runtime/src/forward.rs writes for float or block-quantized weights (the
    // attention part stood in for by an ADD), with f32 or int8-block activations.
    let build = |acts: LinearActivations, limits: &Limits, cpu: bool| {
        let mut reg = Registry::new();
        let mut b = ProgramBuilder::new("p", &mut reg);
        let (f, d, ff) = (DType::F32, 64, 96);
        let x = b.declare("x", f, &[1, d]).expect("valid");
        let h = b.declare("h", f, &[1, d]).expect("valid");
        let q = b.declare("q", f, &[1, d]).expect("valid");
        let k = b.declare("k", f, &[1, d]).expect("valid");
        let v = b.declare("v", f, &[1, d]).expect("valid");
        let att = b.declare("att", f, &[1, d]).expect("valid");
        let proj = b.declare("proj", f, &[1, d]).expect("valid");
        let gate = b.declare("gate", f, &[1, ff]).expect("valid");
        let up = b.declare("up", f, &[1, ff]).expect("valid");
        let nw = b.declare("nw", f, &[d]).expect("valid");
        let wd = b.declare("wd", DType::Q8_0, &[d, d]).expect("valid");
        let wu = b.declare("wu", DType::Q8_0, &[ff, d]).expect("valid");
        let wdn = b.declare("wdn", DType::Q8_0, &[d, ff]).expect("valid");
        b.rms_norm(h, x, nw, 1e-5).expect("valid");
        for (out, w) in [(q, wd), (k, wd), (v, wd)] {
            b.linear_with(out, h, w, acts).expect("valid");
        }
        b.add(att, q, k).expect("valid");
        b.linear_with(proj, att, wd, acts).expect("valid");
        b.add(x, x, proj).expect("valid");
        b.rms_norm(h, x, nw, 1e-5).expect("valid");
        b.linear_with(gate, h, wu, acts).expect("valid");
        b.linear_with(up, h, wu, acts).expect("valid");
        b.silu(gate, gate).expect("valid");
        b.mul(gate, gate, up).expect("valid");
        b.linear_with(proj, gate, wdn, acts).expect("valid");
        b.add(x, x, proj).expect("valid");
        let p = b.finish();
        let caps = Capabilities { cpu, ..Capabilities::default() };
        plan(&RecordCtx { caps, ..ctx(&reg) }, limits, p.instructions())
    };
    // 8 storage buffers: the products stay separate dispatches (gemv_multi binds 10,
    // gemv_gated 9).
    let int8 = build(LinearActivations::Int8Blocks, &LIMITS, false);
    let want = [
        SharedQuantization,
        NormQuantization,
        ResidualEpilogue,
        SharedQuantization,
        NormQuantization,
        ActMulEpilogue,
        ResidualEpilogue,
    ];
    assert_eq!(int8.patterns(), want);
    // RMS_NORM + q/k/v, ADD(att), o + add, RMS_NORM + g/u + act + mul, product + add.
    assert_eq!(int8.units.len(), 5);
    // f32 activations: q, k and v share no rounding, but each applies the first norm
    // itself (the second norm overwrites h unread); the second norm writes h for the
    // last time in the program (the host may read it), so it keeps its dispatch.
    let f32 = build(LinearActivations::F32, &LIMITS, false);
    assert_eq!(f32.patterns(), [NormInProduct, ResidualEpilogue, ActMulEpilogue, ResidualEpilogue]);
    // RMS_NORM + q, k, v; ADD(att); o + add; RMS_NORM; g/u + act + mul; product + add.
    assert_eq!(f32.units.len(), 6);
    // A CPU adapter's products leave every norm its own dispatch.
    let f32 = build(LinearActivations::F32, &LIMITS, true);
    assert_eq!(f32.patterns(), [ResidualEpilogue, ActMulEpilogue, ResidualEpilogue]);
    assert_eq!(f32.units.len(), 9);
    // 16 storage buffers: q, k and v in one dispatch, g and u in another.
    let wide = Limits { max_storage_buffers: 16 };
    let int8 = build(LinearActivations::Int8Blocks, &wide, false);
    let merged: Vec<Pattern> = int8.patterns().into_iter().filter(|p| [MultiProduct, GatedPair].contains(p)).collect();
    assert_eq!(merged, [MultiProduct, GatedPair]);
    let f32 = build(LinearActivations::F32, &wide, false);
    assert_eq!(
        f32.patterns(),
        [NormInProduct, MultiProduct, ResidualEpilogue, ActMulEpilogue, GatedPair, ResidualEpilogue]
    );
    assert_eq!(f32.units.len(), 6);
}

#[test]
fn unfusable_programs_stay_unfused() {
    let mut reg = Registry::new();
    let mut b = ProgramBuilder::new("p", &mut reg);
    let f = DType::F32;
    let x = b.declare("x", f, &[1, 128]).expect("valid");
    let h = b.declare("h", f, &[1, 128]).expect("valid");
    let y = b.declare("y", f, &[1, 128]).expect("valid");
    let nw = b.declare("nw", f, &[128]).expect("valid");
    let wf = b.declare("wf", f, &[128, 128]).expect("valid");
    // RMS_NORM then LINEAR, then an add into the LINEAR's own x (bound read-only by the
    // product): nothing to fuse.
    b.rms_norm(h, x, nw, 1e-5).expect("valid");
    b.linear(y, h, wf).expect("valid");
    b.add(h, h, y).expect("valid");
    let p = b.finish();
    let pl = plan(&ctx(&reg), &LIMITS, p.instructions());
    assert_eq!(pl, Plan::unfused(3));
    // A device with too few storage buffers: no residual epilogue.
    let mut reg = Registry::new();
    let mut b = ProgramBuilder::new("p", &mut reg);
    let x = b.declare("x", f, &[1, 128]).expect("valid");
    let y = b.declare("y", f, &[1, 128]).expect("valid");
    let w = b.declare("w", DType::I2_S, &[128, 128]).expect("valid");
    b.bitlinear(y, x, w, None).expect("valid");
    b.add(x, x, y).expect("valid");
    let p = b.finish();
    assert_eq!(plan(&ctx(&reg), &Limits { max_storage_buffers: 7 }, p.instructions()), Plan::unfused(2));
    assert_eq!(plan(&ctx(&reg), &LIMITS, p.instructions()).patterns(), [Pattern::ResidualEpilogue]);
    // A binding cap below the residual's size: unfused.
    let small = RecordCtx { max_binding: 256, ..ctx(&reg) };
    assert_eq!(plan(&small, &LIMITS, p.instructions()), Plan::unfused(2));
}
