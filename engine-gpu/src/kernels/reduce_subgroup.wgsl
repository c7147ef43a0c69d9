// Workgroup reductions with subgroup operations: the subgroup prelude of linear.wgsl and
// bitlinear.wgsl (Shader::LinearSubgroup, Shader::BitlinearSubgroup), used when the device
// has wgpu's SUBGROUP feature. Same names and contracts as reduce_portable.wgsl: each
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
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(subgroup_invocation_id) sg_lane: u32,
    @builtin(subgroup_id) sg_id: u32,
    @builtin(num_subgroups) n_sg: u32,
}

var<workgroup> red_f: array<f32, 256>;
var<workgroup> red_u: array<u32, 256>;

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

