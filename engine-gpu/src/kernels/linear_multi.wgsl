// Several one-token LINEAR products in one dispatch (fuse/, patterns MultiProduct and
// GatedPair), after linear.wgsl, in place of linear_weight.wgsl; then product_store.wgsl and
// elementwise_ops.wgsl (unary_op, binary_op). All weights have one dtype (DTYPE) and one row
// length k, each fits one binding (no row windows), and n = 1.
//
// Weight 0 is linear.wgsl's (bindings 2, 3, output `out`, `p.m` rows); weights 1 and 2 are
// bound below. The decoders read the weight `wsel` names, a private variable each entry point
// sets before it decodes (uniform across the workgroup, so the branch in wword costs no
// divergence), and every row is computed by linear.wgsl's own gemv_total or rows_total: every
// output is bit-identical to the LINEAR's own kernel.
//
// - gemv_multi / gemv_rows_multi: LINEAR(q, x, Wq) ; LINEAR(k, x, Wk) ; LINEAR(v, x, Wv). One
//   grid: workgroups [0, wg1) compute weight 0's rows, [wg1, wg2) weight 1's, the rest
//   weight 2's, as gemv (a workgroup per row) or gemv_rows (WG / LANES rows per workgroup).
// - gemv_multi_rope / gemv_rows_multi_rope: the same three products with ROPE of q and k and
//   KV_WRITE of k and v as their epilogue (rope_qkv.wgsl, concatenated after this file):
//   one workgroup (gemv) or row group (gemv_rows) per rotation pair of q or k, or per row
//   of v.
// - gemv_gated / gemv_rows_gated: LINEAR(g, x, W0) ; LINEAR(u, x, W1) ; ACT(g, g) ;
//   ELEMENT_MUL(g, g, u), W0 and W1 of the same shape: row j of both in one workgroup, one
//   after the other, then g[j] = act(y_g) · y_u with the elementwise kernels' operations
//   (act_mul.wgsl's), and u[j] = y_u unless that write is dead (WRITE_OUT = 0).

@group(0) @binding(10) var<storage, read> w1: array<u32>;
@group(0) @binding(11) var<storage, read> ws1: array<f32>;
@group(0) @binding(12) var<storage, read> w2: array<u32>;
@group(0) @binding(13) var<storage, read> ws2: array<f32>;
@group(0) @binding(14) var<storage, read_write> out1: array<f32>;
@group(0) @binding(15) var<storage, read_write> out2: array<f32>;

// gemv_gated: 1 when u must be written.
override WRITE_OUT: u32 = 1u;

// The weight the decoders read: 0, 1 or 2.
var<private> wsel: u32;

fn wword(i: u32) -> u32 {
    if (wsel == 0u) {
        return w[i];
    }
    if (wsel == 1u) {
        return w1[i];
    }
    return w2[i];
}

fn wscale(i: u32) -> f32 {
    if (wsel == 0u) {
        return ws[i];
    }
    if (wsel == 1u) {
        return ws1[i];
    }
    return ws2[i];
}

fn weight_rows() -> u32 {
    if (wsel == 0u) {
        return p.m;
    }
    if (wsel == 1u) {
        return p.m1;
    }
    return p.m2;
}

// Selects the weight of workgroup `wg` of a gemv_multi grid; its first workgroup.
fn select_weight(wg: u32) -> u32 {
    if (wg >= p.wg2) {
        wsel = 2u;
        return p.wg2;
    }
    if (wg >= p.wg1) {
        wsel = 1u;
        return p.wg1;
    }
    wsel = 0u;
    return 0u;
}

fn store_multi(row: u32, v: f32) {
    if (wsel == 0u) {
        out[row] = v;
    } else if (wsel == 1u) {
        out1[row] = v;
    } else {
        out2[row] = v;
    }
}

@compute @workgroup_size(WG)
fn gemv_multi(ids: Ids, grid: Grid) {
    round_prologue(ids);
    let wg = grid_index(grid);
    let row = wg - select_weight(wg);
    let total = gemv_total(row, 0u, ids);
    if (row < weight_rows() && ids.lidx == 0u) {
        store_multi(row, total);
    }
}

@compute @workgroup_size(WG)
fn gemv_rows_multi(@builtin(local_invocation_index) lidx: u32, @builtin(workgroup_id) wid: vec3<u32>,
                   @builtin(num_workgroups) nwg: vec3<u32>) {
    let wg = wid.y * nwg.x + wid.x;
    let row = (wg - select_weight(wg)) * (WG / LANES) + lidx / LANES;
    let total = rows_total(row, 0u, lidx);
    if (row < weight_rows() && lidx % LANES == 0u) {
        store_multi(row, total);
    }
}

// Element `row` of output w (rope_qkv.wgsl's qkv_store).
fn qkv_out(w: u32, row: u32, v: f32) {
    if (w == 0u) {
        out[row] = v;
    } else if (w == 1u) {
        out1[row] = v;
    } else {
        out2[row] = v;
    }
}

// gemv_multi with ROPE and KV_WRITE as its epilogue (rope_qkv.wgsl, concatenated after this
// file): one workgroup per item, the two rows of a pair one after the other.
@compute @workgroup_size(WG)
fn gemv_multi_rope(ids: Ids, grid: Grid) {
    round_prologue(ids);
    let it = qkv_item(grid_index(grid), p.m, p.m1, p.m2);
    wsel = min(it.w, 2u);
    let ya = gemv_total(it.a, 0u, ids);
    let yb = gemv_total(it.b, 0u, ids);
    if (ids.lidx == 0u) {
        qkv_store(it, ya, yb, p.m1, p.m2);
    }
}

// gemv_rows_multi with the same epilogue: WG / LANES items per workgroup, LANES invocations
// each (the items of one workgroup may belong to different weights: wsel is per invocation).
@compute @workgroup_size(WG)
fn gemv_rows_multi_rope(@builtin(local_invocation_index) lidx: u32, @builtin(workgroup_id) wid: vec3<u32>,
                        @builtin(num_workgroups) nwg: vec3<u32>) {
    let g = (wid.y * nwg.x + wid.x) * (WG / LANES) + lidx / LANES;
    let it = qkv_item(g, p.m, p.m1, p.m2);
    wsel = min(it.w, 2u);
    let ya = rows_total(it.a, 0u, lidx);
    // rows_total's lane 0 reads its row's partials after the barrier inside it: the second
    // call must not overwrite them before.
    workgroupBarrier();
    let yb = rows_total(it.b, 0u, lidx);
    if (lidx % LANES == 0u) {
        qkv_store(it, ya, yb, p.m1, p.m2);
    }
}

// g[row] = act(y_g) · y_u, and u[row] = y_u (WRITE_OUT).
fn store_gated(row: u32, yg: f32, yu: f32) {
    if (WRITE_OUT == 1u) {
        out1[row] = yu;
    }
    out[row] = binary_op(unary_op(yg), yu);
}

@compute @workgroup_size(WG)
fn gemv_gated(ids: Ids, grid: Grid) {
    round_prologue(ids);
    let row = grid_index(grid);
    wsel = 0u;
    let yg = gemv_total(row, 0u, ids);
    wsel = 1u;
    let yu = gemv_total(row, 0u, ids);
    if (row < p.m && ids.lidx == 0u) {
        store_gated(row, yg, yu);
    }
}

@compute @workgroup_size(WG)
fn gemv_rows_gated(@builtin(local_invocation_index) lidx: u32, @builtin(workgroup_id) wid: vec3<u32>,
                   @builtin(num_workgroups) nwg: vec3<u32>) {
    let row = (wid.y * nwg.x + wid.x) * (WG / LANES) + lidx / LANES;
    wsel = 0u;
    let yg = rows_total(row, 0u, lidx);
    // rows_total's lane 0 reads its row's partials after the barrier inside it: the second
    // call must not overwrite them before.
    workgroupBarrier();
    wsel = 1u;
    let yu = rows_total(row, 0u, lidx);
    if (row < p.m && lidx % LANES == 0u) {
        store_gated(row, yg, yu);
    }
}
