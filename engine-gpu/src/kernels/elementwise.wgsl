// Element-wise kernels: TENSOR_ADD, ELEMENT_MUL (binary) and SILU, RELU2, GELU (unary).
// One invocation per element. The operation is an override constant, so each op is its
// own pipeline without a branch per element. In-place forms exist because one buffer cannot
// be bound as read-only and read-write in the same dispatch. Preceded by
// elementwise_ops.wgsl (binary_op, unary_op), which the fused kernels share.

struct Params {
    n: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

override WG: u32 = 256u;

fn index(wid: vec3<u32>, lid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return (wid.y * nwg.x + wid.x) * WG + lid.x;
}

// out = a ∘ b
@compute @workgroup_size(WG)
fn binary(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
          @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = index(wid, lid, nwg);
    if (i < p.n) {
        out[i] = binary_op(a[i], b[i]);
    }
}

// out = out ∘ b (out was a)
@compute @workgroup_size(WG)
fn binary_inplace(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
                  @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = index(wid, lid, nwg);
    if (i < p.n) {
        out[i] = binary_op(out[i], b[i]);
    }
}

// out = b ∘ out (out was b; the order matters for neither op, but is kept exact)
@compute @workgroup_size(WG)
fn binary_inplace_b(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
                    @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = index(wid, lid, nwg);
    if (i < p.n) {
        out[i] = binary_op(a[i], out[i]);
    }
}

// out = out ∘ out (a, b and out are one tensor)
@compute @workgroup_size(WG)
fn binary_self(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
               @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = index(wid, lid, nwg);
    if (i < p.n) {
        let v = out[i];
        out[i] = binary_op(v, v);
    }
}

// out = f(a)
@compute @workgroup_size(WG)
fn unary(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
         @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = index(wid, lid, nwg);
    if (i < p.n) {
        out[i] = unary_op(a[i]);
    }
}

// out = f(out)
@compute @workgroup_size(WG)
fn unary_inplace(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
                 @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = index(wid, lid, nwg);
    if (i < p.n) {
        out[i] = unary_op(out[i]);
    }
}
