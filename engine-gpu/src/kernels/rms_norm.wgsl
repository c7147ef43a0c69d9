// RMS_NORM: out_i = x_i / sqrt(mean(x²) + eps) · weight_i, one workgroup per row.
//
// Prefixed by `reduce_portable.wgsl` or `reduce_subgroup.wgsl` (`Ids`, `reduce_add_f32`). Each
// invocation sums the squares of elements lid, lid + WG, ... of its row in f32, the workgroup
// adds the partial sums, then each invocation scales its elements. The in-place entry point
// reads `out` instead of `x` (one buffer cannot be bound read-only and read-write at once);
// every element is read and written by the same invocation, so in place is safe.

struct Params {
    rows: u32,
    cols: u32,
    eps: f32,
    _pad: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> weight: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

// Threads per workgroup, a power of two.
override WG: u32 = 256u;

// 1 / sqrt(mean + eps) from the row's sum of squares.
fn inv_rms(sum_sq: f32) -> f32 {
    return inverseSqrt(sum_sq / f32(p.cols) + p.eps);
}

// out = rms_norm(x)
@compute @workgroup_size(WG)
fn rms_norm(ids: Ids) {
    let row = ids.wid.y * ids.nwg.x + ids.wid.x;
    if (row >= p.rows) {
        return;
    }
    let base = row * p.cols;
    var acc = 0.0;
    for (var i = ids.lidx; i < p.cols; i = i + WG) {
        let v = x[base + i];
        acc = acc + v * v;
    }
    let inv = inv_rms(reduce_add_f32(acc, ids));
    for (var i = ids.lidx; i < p.cols; i = i + WG) {
        out[base + i] = x[base + i] * inv * weight[i];
    }
}

// out = rms_norm(out)
@compute @workgroup_size(WG)
fn rms_norm_inplace(ids: Ids) {
    let row = ids.wid.y * ids.nwg.x + ids.wid.x;
    if (row >= p.rows) {
        return;
    }
    let base = row * p.cols;
    var acc = 0.0;
    for (var i = ids.lidx; i < p.cols; i = i + WG) {
        let v = out[base + i];
        acc = acc + v * v;
    }
    let inv = inv_rms(reduce_add_f32(acc, ids));
    for (var i = ids.lidx; i < p.cols; i = i + WG) {
        out[base + i] = out[base + i] * inv * weight[i];
    }
}
