// Workgroup reductions in workgroup memory (no subgroup operations): the portable prelude of
// the kernels that reduce across a workgroup (LINEAR, BITLINEAR, RMS_NORM, SOFTMAX, ARGMAX;
// see `Shader::source`). reduce_subgroup.wgsl defines the same names with subgroup
// operations; the kernel file that follows uses only `Ids`, `Grid` and the reduce_* functions, and
// defines the override WG (a power of two, ≤ 256).
//
// Every reduce_* function must be called by the whole workgroup in uniform control flow; it
// returns the result to every invocation and leaves the workgroup memory free for the next
// call (a barrier after the final read).

// The builtins a kernel entry point takes (subgroup builtins only in the subgroup prelude).
struct Ids {
    @builtin(local_invocation_index) lidx: u32,
}

// The workgroup's place in the dispatch grid, apart from `Ids`: an entry point's struct
// parameter is uniform only when all its members are, and a row index must be uniform for
// the barriers that follow a `row >= rows` return (WGSL's uniformity analysis; Tint, a
// browser's compiler, enforces it).
struct Grid {
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
}

// The workgroup's index in a grid of (x, y) workgroups, row-major.
fn grid_index(grid: Grid) -> u32 {
    return grid.wid.y * grid.nwg.x + grid.wid.x;
}

var<workgroup> red_f: array<f32, 256>;
var<workgroup> red_u: array<u32, 256>;
var<workgroup> red_idx: array<u32, 256>;

// Σ v over the workgroup, as a tree (pairs at distance WG/2, WG/4, ...).
fn reduce_add_f32(v: f32, ids: Ids) -> f32 {
    red_f[ids.lidx] = v;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s / 2u) {
        if (ids.lidx < s) {
            red_f[ids.lidx] = red_f[ids.lidx] + red_f[ids.lidx + s];
        }
        workgroupBarrier();
    }
    let r = red_f[0];
    workgroupBarrier();
    return r;
}

// Σ v over the workgroup in exact two's-complement integer arithmetic.
fn reduce_add_i32(v: i32, ids: Ids) -> i32 {
    red_u[ids.lidx] = bitcast<u32>(v);
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s / 2u) {
        if (ids.lidx < s) {
            red_u[ids.lidx] = red_u[ids.lidx] + red_u[ids.lidx + s];
        }
        workgroupBarrier();
    }
    let r = bitcast<i32>(red_u[0]);
    workgroupBarrier();
    return r;
}

// max v over the workgroup.
fn reduce_max_u32(v: u32, ids: Ids) -> u32 {
    red_u[ids.lidx] = v;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s / 2u) {
        if (ids.lidx < s) {
            red_u[ids.lidx] = max(red_u[ids.lidx], red_u[ids.lidx + s]);
        }
        workgroupBarrier();
    }
    let r = red_u[0];
    workgroupBarrier();
    return r;
}


// max v over the workgroup (no NaN may be passed: `max` with NaN is not portable).
fn reduce_max_f32(v: f32, ids: Ids) -> f32 {
    red_f[ids.lidx] = v;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s / 2u) {
        if (ids.lidx < s) {
            red_f[ids.lidx] = max(red_f[ids.lidx], red_f[ids.lidx + s]);
        }
        workgroupBarrier();
    }
    let r = red_f[0];
    workgroupBarrier();
    return r;
}

// The index of the workgroup's best (key, index) pair: the largest key, the lowest index among
// equal keys. Pairs are integers, so the result does not depend on the order of combination.
fn reduce_argmax(key: u32, idx: u32, ids: Ids) -> u32 {
    red_u[ids.lidx] = key;
    red_idx[ids.lidx] = idx;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s / 2u) {
        if (ids.lidx < s) {
            let k = red_u[ids.lidx + s];
            let i = red_idx[ids.lidx + s];
            if (k > red_u[ids.lidx] || (k == red_u[ids.lidx] && i < red_idx[ids.lidx])) {
                red_u[ids.lidx] = k;
                red_idx[ids.lidx] = i;
            }
        }
        workgroupBarrier();
    }
    let best = red_idx[0];
    workgroupBarrier();
    return best;
}
