// Workgroup reductions of the one-workgroup-per-row kernels (RMS_NORM, SOFTMAX, ARGMAX),
// portable form: a pairwise tree in workgroup memory, log2(WG) barrier steps.
//
// This file is a prefix: `kernels/mod.rs` prepends it (or `row_reduce_subgroup.wgsl`, the
// subgroup form with the same functions) to the kernel's source. The kernel declares
// `override WG` (a power of two), takes a `Lane` as an entry-point parameter, and calls the
// reductions in workgroup-uniform control flow. Every invocation gets the same result.

// Where an invocation sits in its workgroup.
struct Lane {
    @builtin(local_invocation_index) lid: u32,
}

var<workgroup> red_f: array<f32, WG>;
var<workgroup> red_key: array<u32, WG>;
var<workgroup> red_idx: array<u32, WG>;

// The sum of `v` over the workgroup (the tree adds pairs (i, i + s) for s = WG/2, ..., 1).
fn wg_sum(v: f32, lane: Lane) -> f32 {
    red_f[lane.lid] = v;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s / 2u) {
        if (lane.lid < s) {
            red_f[lane.lid] = red_f[lane.lid] + red_f[lane.lid + s];
        }
        workgroupBarrier();
    }
    let total = red_f[0];
    workgroupBarrier();
    return total;
}

// The maximum of `v` over the workgroup (no NaN may be passed: `max` with NaN is not portable).
fn wg_max(v: f32, lane: Lane) -> f32 {
    red_f[lane.lid] = v;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s / 2u) {
        if (lane.lid < s) {
            red_f[lane.lid] = max(red_f[lane.lid], red_f[lane.lid + s]);
        }
        workgroupBarrier();
    }
    let total = red_f[0];
    workgroupBarrier();
    return total;
}

// The index of the workgroup's best (key, index) pair: the largest key, the lowest index among
// equal keys. Pairs are integers, so the result does not depend on the order of combination.
fn wg_argmax(key: u32, idx: u32, lane: Lane) -> u32 {
    red_key[lane.lid] = key;
    red_idx[lane.lid] = idx;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s / 2u) {
        if (lane.lid < s) {
            let k = red_key[lane.lid + s];
            let i = red_idx[lane.lid + s];
            if (k > red_key[lane.lid] || (k == red_key[lane.lid] && i < red_idx[lane.lid])) {
                red_key[lane.lid] = k;
                red_idx[lane.lid] = i;
            }
        }
        workgroupBarrier();
    }
    let best = red_idx[0];
    workgroupBarrier();
    return best;
}
