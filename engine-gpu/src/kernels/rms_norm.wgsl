// RMS_NORM: out_i = x_i / sqrt(mean(x²) + eps) · weight_i, one workgroup per row.
//
// Prefixed by `reduce_portable.wgsl` or `reduce_subgroup.wgsl` (`Ids`, `Grid`, `reduce_add_f32`) and
// `rms_sum.wgsl` (`sum_squares`, `inv_rms_of`, shared with linear.wgsl). Each
// invocation sums the squares of elements lid, lid + WG, ... of its row in f32 (in that
// order, four loads at a time), the workgroup adds the partial sums, then each invocation
// scales its elements. The in-place entry point reads `out` instead of `x` (one buffer cannot
// be bound read-only and read-write at once; the dispatcher binds the weight as the unread
// `x`); every element is read and written by the same invocation, so in place is safe.

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

// 1 / sqrt(mean + eps) from the row's sum of squares (rms_sum.wgsl).
fn inv_rms(sum_sq: f32) -> f32 {
    return inv_rms_of(sum_sq, p.cols, p.eps);
}

// Element i of the row source: `out` in place, else `x`.
fn load(inplace: bool, i: u32) -> f32 {
    if (inplace) {
        return out[i];
    }
    return x[i];
}

// rms_sum.wgsl's row source.
fn norm_src(inplace: bool, i: u32) -> f32 {
    return load(inplace, i);
}

// Elements i, i + WG, i + 2·WG, i + 3·WG of the row source at `base`, and of the weight:
// four loads issued together. On a GPU every load waits hundreds of cycles, and a loop that
// used each value as it came waited once per element (norm_quant took 15–21 µs per
// 2560-wide row on an H200 that way).
fn load4(inplace: bool, base: u32, i: u32) -> vec4<f32> {
    return vec4<f32>(load(inplace, base + i), load(inplace, base + i + WG), load(inplace, base + i + 2u * WG),
                     load(inplace, base + i + 3u * WG));
}

fn weight4(i: u32) -> vec4<f32> {
    return vec4<f32>(weight[i], weight[i + WG], weight[i + 2u * WG], weight[i + 3u * WG]);
}

// out = rms_norm(src) for the invocation's elements, four at a time as in sum_squares.
fn scale_row(inplace: bool, base: u32, lidx: u32, inv: f32) {
    var i = lidx;
    for (; i + 3u * WG < p.cols; i = i + 4u * WG) {
        let v = load4(inplace, base, i);
        let w = weight4(i);
        out[base + i] = v.x * inv * w.x;
        out[base + i + WG] = v.y * inv * w.y;
        out[base + i + 2u * WG] = v.z * inv * w.z;
        out[base + i + 3u * WG] = v.w * inv * w.w;
    }
    for (; i < p.cols; i = i + WG) {
        out[base + i] = load(inplace, base + i) * inv * weight[i];
    }
}

// out = rms_norm(x)
@compute @workgroup_size(WG)
fn rms_norm(ids: Ids, grid: Grid) {
    let row = grid_index(grid);
    if (row >= p.rows) {
        return;
    }
    let base = row * p.cols;
    let inv = inv_rms(reduce_add_f32(sum_squares(false, base, ids.lidx, p.cols), ids));
    scale_row(false, base, ids.lidx, inv);
}

// out = rms_norm(out)
@compute @workgroup_size(WG)
fn rms_norm_inplace(ids: Ids, grid: Grid) {
    let row = grid_index(grid);
    if (row >= p.rows) {
        return;
    }
    let base = row * p.cols;
    let inv = inv_rms(reduce_add_f32(sum_squares(true, base, ids.lidx, p.cols), ids));
    scale_row(true, base, ids.lidx, inv);
}
