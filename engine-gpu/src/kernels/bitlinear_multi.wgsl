// Several BITLINEAR products of one token in one dispatch (fuse/, patterns MultiProduct
// and GatedPair), after bitlinear.wgsl (dot16, acts, act_scales, Params), a store file and
// elementwise_ops.wgsl (unary_op, binary_op):
//
// - gemv_multi: the products of three BITLINEARs that read the same quantized x (q, k, v):
//   one grid of m0 + m1 + m2 workgroups, rows [0, split1) of weight 0, [split1, split2) of
//   weight 1, the rest of weight 2; each workgroup is bitlinear.wgsl's gemv on its weight's
//   row (the weight chosen by a workgroup-uniform branch), so every output is bit-identical.
// - gemv_multi_rope (without output scales) / gemv_multi_rope_scaled: gemv_multi with ROPE
//   of q and k and KV_WRITE of k and v as its epilogue (rope_qkv.wgsl, concatenated after
//   this file): one workgroup per rotation pair of q or k (both rows, one after the other)
//   or per row of v.
// - gemv_gated: BITLINEAR(g, ·, W0) ; BITLINEAR(u, ·, W1) ; ACT(g, g) ; ELEMENT_MUL(g, g, u):
//   one workgroup per row j with two accumulators (row j of both weights, the same
//   activation words), each reduced as gemv reduces it, then g[j] = act(y_g) · y_u with the
//   elementwise kernels' operations and u[j] = y_u (unless dead: WRITE_OUT = 0).
//
// Both need one token (n = 1), one ternary type and one HAS_SCALE for all their weights.

@group(0) @binding(10) var<storage, read> codes0: array<u32>;
@group(0) @binding(11) var<storage, read> codes1: array<u32>;
@group(0) @binding(12) var<storage, read> codes2: array<u32>;
@group(0) @binding(13) var<storage, read> wscales0: array<f32>;
@group(0) @binding(14) var<storage, read> wscales1: array<f32>;
@group(0) @binding(15) var<storage, read> wscales2: array<f32>;
@group(0) @binding(16) var<storage, read> out_scale0: array<f32>;
@group(0) @binding(17) var<storage, read> out_scale1: array<f32>;
@group(0) @binding(18) var<storage, read> out_scale2: array<f32>;
@group(0) @binding(19) var<storage, read_write> out0: array<f32>;
@group(0) @binding(20) var<storage, read_write> out1: array<f32>;
@group(0) @binding(21) var<storage, read_write> out2: array<f32>;

// gemv_gated: 1 when u must be written.
override WRITE_OUT: u32 = 1u;

fn mcode(w: u32, i: u32) -> u32 {
    if (w == 0u) {
        return codes0[i];
    }
    if (w == 1u) {
        return codes1[i];
    }
    return codes2[i];
}

fn mscale(w: u32, i: u32) -> f32 {
    if (w == 0u) {
        return wscales0[i];
    }
    if (w == 1u) {
        return wscales1[i];
    }
    return wscales2[i];
}

// bitlinear.wgsl's finish for token 0 with weight w's output scale.
fn mfinish(w: u32, y: f32) -> f32 {
    var r = y / act_scales[0];
    if (HAS_SCALE == 1u) {
        if (w == 0u) {
            r = r * out_scale0[0];
        } else if (w == 1u) {
            r = r * out_scale1[0];
        } else {
            r = r * out_scale2[0];
        }
    }
    return r;
}

// Row `row` of weight w's product (0 past its rows) as gemv computes it, before its
// finish; the whole workgroup calls it (a reduction), in uniform control flow.
fn multi_sum(w: u32, row: u32, m: u32, ids: Ids) -> f32 {
    var facc = 0.0;
    var iacc = 0i;
    if (row < m) {
        let cb = row * p.words;
        for (var wi = ids.lidx; wi < p.words; wi = wi + WG) {
            let a = 4u * wi;
            let part = dot16(mcode(w, cb + wi), acts[a], acts[a + 1u], acts[a + 2u], acts[a + 3u]);
            if (ROW_SCALE == 1u) {
                iacc = iacc + part;
            } else {
                facc = facc + mscale(w, row * p.scale_stride + wi / 16u) * f32(part);
            }
        }
    }
    if (ROW_SCALE == 1u) {
        return f32(reduce_add_i32(iacc, ids)) * mscale(w, 0u);
    }
    return reduce_add_f32(facc, ids);
}

// Element `row` of output w.
fn qkv_out(w: u32, row: u32, v: f32) {
    if (w == 0u) {
        out0[row] = v;
    } else if (w == 1u) {
        out1[row] = v;
    } else {
        out2[row] = v;
    }
}

// The rows of weight w: [0, split1), [split1, split2), [split2, m) of the grid.
fn multi_rows(w: u32) -> u32 {
    if (w == 0u) {
        return p.split1;
    }
    if (w == 1u) {
        return p.split2 - p.split1;
    }
    return p.m - p.split2;
}

@compute @workgroup_size(WG)
fn gemv_multi(ids: Ids, grid: Grid) {
    let grow = grid_index(grid);
    var w = 0u;
    var row = grow;
    if (grow >= p.split2) {
        w = 2u;
        row = grow - p.split2;
    } else if (grow >= p.split1) {
        w = 1u;
        row = grow - p.split1;
    }
    let y = multi_sum(w, row, multi_rows(w), ids);
    if (row < multi_rows(w) && ids.lidx == 0u) {
        qkv_out(w, row, mfinish(w, y));
    }
}

// gemv_multi with ROPE and KV_WRITE as its epilogue (rope_qkv.wgsl, concatenated after this
// file): one workgroup per item, the two rows of a pair one after the other. Without output
// scales (bitlinear.wgsl's finish with HAS_SCALE = 0, the same division): the three scale
// bindings are not bound, so the dispatch fits 16 storage buffers per stage (14; wgpu's GL
// backend reports 16 on llvmpipe).
@compute @workgroup_size(WG)
fn gemv_multi_rope(ids: Ids, grid: Grid) {
    let g = grid_index(grid);
    let it = qkv_item(g, multi_rows(0u), multi_rows(1u), multi_rows(2u));
    let w = min(it.w, 2u);
    let ya = multi_sum(w, it.a, multi_rows(w), ids) / act_scales[0];
    let yb = multi_sum(w, it.b, multi_rows(w), ids) / act_scales[0];
    if (ids.lidx == 0u) {
        qkv_store(it, ya, yb, multi_rows(1u), multi_rows(2u));
    }
}

// gemv_multi_rope with each weight's output scale (mfinish).
@compute @workgroup_size(WG)
fn gemv_multi_rope_scaled(ids: Ids, grid: Grid) {
    let g = grid_index(grid);
    let it = qkv_item(g, multi_rows(0u), multi_rows(1u), multi_rows(2u));
    let w = min(it.w, 2u);
    let ya = mfinish(w, multi_sum(w, it.a, multi_rows(w), ids));
    let yb = mfinish(w, multi_sum(w, it.b, multi_rows(w), ids));
    if (ids.lidx == 0u) {
        qkv_store(it, ya, yb, multi_rows(1u), multi_rows(2u));
    }
}

@compute @workgroup_size(WG)
fn gemv_gated(ids: Ids, grid: Grid) {
    let row = grid_index(grid);
    var fg = 0.0;
    var fu = 0.0;
    var ig = 0i;
    var iu = 0i;
    if (row < p.m) {
        let cb = row * p.words;
        for (var wi = ids.lidx; wi < p.words; wi = wi + WG) {
            let a = 4u * wi;
            let a0 = acts[a];
            let a1 = acts[a + 1u];
            let a2 = acts[a + 2u];
            let a3 = acts[a + 3u];
            let pg = dot16(codes0[cb + wi], a0, a1, a2, a3);
            let pu = dot16(codes1[cb + wi], a0, a1, a2, a3);
            if (ROW_SCALE == 1u) {
                ig = ig + pg;
                iu = iu + pu;
            } else {
                let si = row * p.scale_stride + wi / 16u;
                fg = fg + wscales0[si] * f32(pg);
                fu = fu + wscales1[si] * f32(pu);
            }
        }
    }
    var yg = 0.0;
    var yu = 0.0;
    if (ROW_SCALE == 1u) {
        yg = f32(reduce_add_i32(ig, ids)) * wscales0[0];
        yu = f32(reduce_add_i32(iu, ids)) * wscales1[0];
    } else {
        yg = reduce_add_f32(fg, ids);
        yu = reduce_add_f32(fu, ids);
    }
    if (row < p.m && ids.lidx == 0u) {
        let g = mfinish(0u, yg);
        let u = mfinish(1u, yu);
        if (WRITE_OUT == 1u) {
            out1[row] = u;
        }
        out0[row] = binary_op(unary_op(g), u);
    }
}
