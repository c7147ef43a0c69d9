// Workgroup reductions of the one-workgroup-per-row kernels (RMS_NORM, SOFTMAX, ARGMAX),
// subgroup form: a subgroup operation within each subgroup, one slot per subgroup in
// workgroup memory, then the slots combined by each subgroup (lane l reads slots l, l + size,
// ...) and a second subgroup operation. Two barriers per reduction instead of log2(WG) + 1.
//
// A prefix, like `row_reduce.wgsl` (same `Lane` name and functions), used only when the
// device has the SUBGROUP feature. Every invocation gets the same result.

// Where an invocation sits in its workgroup and its subgroup.
struct Lane {
    @builtin(local_invocation_index) lid: u32,
    @builtin(subgroup_invocation_id) sgi: u32,
    @builtin(subgroup_size) sgs: u32,
    @builtin(subgroup_id) sg: u32,
    @builtin(num_subgroups) nsg: u32,
}

var<workgroup> red_f: array<f32, WG>;
var<workgroup> red_key: array<u32, WG>;
var<workgroup> red_idx: array<u32, WG>;

// The sum of `v` over the workgroup.
fn wg_sum(v: f32, lane: Lane) -> f32 {
    let s = subgroupAdd(v);
    if (lane.sgi == 0u) {
        red_f[lane.sg] = s;
    }
    workgroupBarrier();
    var t = 0.0;
    for (var k = lane.sgi; k < lane.nsg; k = k + lane.sgs) {
        t = t + red_f[k];
    }
    let total = subgroupAdd(t);
    workgroupBarrier();
    return total;
}

// The maximum of `v` over the workgroup (no NaN may be passed).
fn wg_max(v: f32, lane: Lane) -> f32 {
    let s = subgroupMax(v);
    if (lane.sgi == 0u) {
        red_f[lane.sg] = s;
    }
    workgroupBarrier();
    var t = bitcast<f32>(0xff800000u); // -inf
    for (var k = lane.sgi; k < lane.nsg; k = k + lane.sgs) {
        t = max(t, red_f[k]);
    }
    let total = subgroupMax(t);
    workgroupBarrier();
    return total;
}

// The best (key, index) pair of a subgroup: its largest key, then the lowest index holding it.
fn sg_argmax(key: u32, idx: u32) -> vec2<u32> {
    let k = subgroupMax(key);
    let i = subgroupMin(select(0xffffffffu, idx, key == k));
    return vec2<u32>(k, i);
}

// The index of the workgroup's best (key, index) pair: the largest key, the lowest index among
// equal keys (integers: the result does not depend on the order of combination).
fn wg_argmax(key: u32, idx: u32, lane: Lane) -> u32 {
    let s = sg_argmax(key, idx);
    if (lane.sgi == 0u) {
        red_key[lane.sg] = s.x;
        red_idx[lane.sg] = s.y;
    }
    workgroupBarrier();
    var k = 0u;
    var i = 0xffffffffu;
    for (var j = lane.sgi; j < lane.nsg; j = j + lane.sgs) {
        if (red_key[j] > k || (red_key[j] == k && red_idx[j] < i)) {
            k = red_key[j];
            i = red_idx[j];
        }
    }
    let best = sg_argmax(k, i).y;
    workgroupBarrier();
    return best;
}
