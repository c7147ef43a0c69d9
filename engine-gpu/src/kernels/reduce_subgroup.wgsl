// Workgroup reductions with subgroup operations: the subgroup prelude of the kernels that
// reduce across a workgroup (the `…Subgroup` shaders), used when the device has wgpu's
// SUBGROUP feature. Same names and contracts as reduce_portable.wgsl: each
// subgroup reduces in registers, its first invocation writes one partial per subgroup to
// workgroup memory (indexed by subgroup_id, so nothing assumes how invocations map to
// subgroups), and every invocation adds the num_subgroups partials in index order.
//
// Every reduce_* function must be called by the whole workgroup in uniform control flow.
// (No `enable subgroups;`: naga 30 rejects the directive and gates subgroup operations on
// the device's SUBGROUP feature instead.)

// The builtins a kernel entry point takes.
struct Ids {
    @builtin(local_invocation_index) lidx: u32,
    @builtin(subgroup_invocation_id) sg_lane: u32,
    @builtin(subgroup_id) sg_id: u32,
    @builtin(num_subgroups) n_sg: u32,
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

fn reduce_add_f32(v: f32, ids: Ids) -> f32 {
    let s = subgroupAdd(v);
    if (ids.sg_lane == 0u) {
        red_f[ids.sg_id] = s;
    }
    workgroupBarrier();
    var r = 0.0;
    for (var i = 0u; i < ids.n_sg; i = i + 1u) {
        r = r + red_f[i];
    }
    workgroupBarrier();
    return r;
}

fn reduce_add_i32(v: i32, ids: Ids) -> i32 {
    let s = subgroupAdd(v);
    if (ids.sg_lane == 0u) {
        red_u[ids.sg_id] = bitcast<u32>(s);
    }
    workgroupBarrier();
    var r = 0i;
    for (var i = 0u; i < ids.n_sg; i = i + 1u) {
        r = r + bitcast<i32>(red_u[i]);
    }
    workgroupBarrier();
    return r;
}

fn reduce_max_u32(v: u32, ids: Ids) -> u32 {
    let s = subgroupMax(v);
    if (ids.sg_lane == 0u) {
        red_u[ids.sg_id] = s;
    }
    workgroupBarrier();
    var r = 0u;
    for (var i = 0u; i < ids.n_sg; i = i + 1u) {
        r = max(r, red_u[i]);
    }
    workgroupBarrier();
    return r;
}


// max v over the workgroup (no NaN may be passed).
fn reduce_max_f32(v: f32, ids: Ids) -> f32 {
    let s = subgroupMax(v);
    if (ids.sg_lane == 0u) {
        red_f[ids.sg_id] = s;
    }
    workgroupBarrier();
    // Through a `let`: a bitcast of a constant is a constant expression, and Chrome's WGSL
    // compiler (Tint) rejects a constant NaN or infinity.
    let neg_inf_bits = 0xff800000u;
    var r = bitcast<f32>(neg_inf_bits); // -inf
    for (var i = 0u; i < ids.n_sg; i = i + 1u) {
        r = max(r, red_f[i]);
    }
    workgroupBarrier();
    return r;
}

// The best (key, index) pair of a subgroup: its largest key, then the lowest index holding it.
fn subgroup_argmax(key: u32, idx: u32) -> vec2<u32> {
    let k = subgroupMax(key);
    let i = subgroupMin(select(0xffffffffu, idx, key == k));
    return vec2<u32>(k, i);
}

// The index of the workgroup's best (key, index) pair: the largest key, the lowest index among
// equal keys (integers: the result does not depend on the order of combination).
fn reduce_argmax(key: u32, idx: u32, ids: Ids) -> u32 {
    let s = subgroup_argmax(key, idx);
    if (ids.sg_lane == 0u) {
        red_u[ids.sg_id] = s.x;
        red_idx[ids.sg_id] = s.y;
    }
    workgroupBarrier();
    var k = 0u;
    var best = 0xffffffffu;
    for (var i = 0u; i < ids.n_sg; i = i + 1u) {
        if (red_u[i] > k || (red_u[i] == k && red_idx[i] < best)) {
            k = red_u[i];
            best = red_idx[i];
        }
    }
    workgroupBarrier();
    return best;
}
