// The kernels of dispatch_floor.rs. Each does as little as its measurement allows, and
// leaves a result the host checks, so that no driver can skip it.

struct Params {
    // chase: loads to take; barriers: steps to take.
    steps: u32,
    // chase: the index it starts from.
    start: u32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
// bump, shared_bump: one counter, incremented by one invocation per dispatch.
@group(0) @binding(1) var<storage, read_write> data: array<u32>;
// bump_wide: one counter, incremented by every workgroup.
@group(0) @binding(2) var<storage, read_write> count: array<atomic<u32>>;
// chase: a permutation of its indices forming one cycle.
@group(0) @binding(3) var<storage, read> next: array<u32>;

// No bindings and no work: what a launch costs when nothing orders it after the last.
@compute @workgroup_size(64)
fn idle() {
}

// One workgroup; the counter makes each dispatch depend on the one before.
@compute @workgroup_size(64)
fn bump(@builtin(local_invocation_index) lid: u32) {
    if (lid == 0u) {
        data[0] = data[0] + 1u;
    }
}

// Every workgroup of the grid adds one: a grid as wide as a product's.
@compute @workgroup_size(64)
fn bump_wide(@builtin(local_invocation_index) lid: u32) {
    if (lid == 0u) {
        atomicAdd(&count[0], 1u);
    }
}

// bump with 8 KiB of workgroup memory, written by every invocation before it is read.
var<workgroup> tile: array<u32, 2048>;

@compute @workgroup_size(256)
fn shared_bump(@builtin(local_invocation_index) lid: u32) {
    for (var i = 0u; i < 8u; i++) {
        tile[lid * 8u + i] = 1u;
    }
    workgroupBarrier();
    if (lid == 0u) {
        data[0] = data[0] + tile[2047];
    }
}

// One invocation following the cycle: every load's address is the last load's value, so
// each costs a whole memory round trip.
@compute @workgroup_size(1)
fn chase() {
    var i = p.start;
    for (var s = 0u; s < p.steps; s++) {
        i = next[i];
    }
    data[0] = i;
}

// 256 invocations passing values around a ring in workgroup memory: two barriers a step.
// After s steps invocation 0 holds s + (s mod 256).
var<workgroup> ring: array<u32, 256>;

@compute @workgroup_size(256)
fn barriers(@builtin(local_invocation_index) lid: u32) {
    var v = lid;
    for (var s = 0u; s < p.steps; s++) {
        ring[lid] = v;
        workgroupBarrier();
        v = ring[(lid + 1u) % 256u] + 1u;
        workgroupBarrier();
    }
    if (lid == 0u) {
        data[0] = v;
    }
}
