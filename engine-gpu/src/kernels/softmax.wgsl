// SOFTMAX: out_i = e^(x_i − max x) / Σ_j e^(x_j − max x), one workgroup per row.
//
// Prefixed by `reduce_portable.wgsl` or `reduce_subgroup.wgsl` (`Ids`, `reduce_max_f32`, `reduce_add_f32`).
// Three passes over the row: the maximum, the sum of exponentials (f32), the quotients.
// A row holding NaN or +inf, or only -inf, is all NaN (as the ISA and the reference say); the
// kernel decides that from bits and a flag, not from NaN arithmetic, which GPUs may not
// preserve. The in-place entry point reads `out` instead of `x`; every element is read and
// written by the same invocation.

struct Params {
    rows: u32,
    cols: u32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;

// Threads per workgroup, a power of two.
override WG: u32 = 256u;

const POS_INF_BITS: u32 = 0x7f800000u;
const NEG_INF_BITS: u32 = 0xff800000u;
const NAN_BITS: u32 = 0x7fc00000u;

// The f32 of `bits`, at run time: a bitcast of a constant is a constant expression, and
// Chrome's WGSL compiler (Tint) rejects a constant NaN or infinity.
fn f32_of_bits(bits: u32) -> f32 {
    return bitcast<f32>(bits);
}

// The value the maximum sees: NaN and +inf become +inf (so a row holding either has maximum
// +inf and is written as NaN); everything else, -inf included, is itself.
fn max_key(v: f32) -> f32 {
    let b = bitcast<u32>(v);
    if ((b & 0x7fffffffu) >= POS_INF_BITS && b != NEG_INF_BITS) {
        return f32_of_bits(POS_INF_BITS);
    }
    return v;
}

// True when the row's maximum is ±inf: the row holds NaN or +inf, or is all -inf.
fn is_bad(m: f32) -> bool {
    return (bitcast<u32>(m) & 0x7fffffffu) == POS_INF_BITS;
}

// e^(v − m), exactly 0 below −104 (where the f32 result is 0 anyway), so -inf gives 0
// without relying on exp(-inf).
fn weight(v: f32, m: f32) -> f32 {
    let t = v - m;
    return select(exp(t), 0.0, t < -104.0);
}

// out = softmax(x)
@compute @workgroup_size(WG)
fn softmax(ids: Ids, grid: Grid) {
    let row = grid_index(grid);
    if (row >= p.rows) {
        return;
    }
    let base = row * p.cols;
    var m = f32_of_bits(NEG_INF_BITS);
    for (var i = ids.lidx; i < p.cols; i = i + WG) {
        m = max(m, max_key(x[base + i]));
    }
    let mx = reduce_max_f32(m, ids);
    let bad = is_bad(mx);
    var s = 0.0;
    if (!bad) {
        for (var i = ids.lidx; i < p.cols; i = i + WG) {
            s = s + weight(x[base + i], mx);
        }
    }
    let total = reduce_add_f32(s, ids);
    for (var i = ids.lidx; i < p.cols; i = i + WG) {
        out[base + i] = select(weight(x[base + i], mx) / total, f32_of_bits(NAN_BITS), bad);
    }
}

// out = softmax(out)
@compute @workgroup_size(WG)
fn softmax_inplace(ids: Ids, grid: Grid) {
    let row = grid_index(grid);
    if (row >= p.rows) {
        return;
    }
    let base = row * p.cols;
    var m = f32_of_bits(NEG_INF_BITS);
    for (var i = ids.lidx; i < p.cols; i = i + WG) {
        m = max(m, max_key(out[base + i]));
    }
    let mx = reduce_max_f32(m, ids);
    let bad = is_bad(mx);
    var s = 0.0;
    if (!bad) {
        for (var i = ids.lidx; i < p.cols; i = i + WG) {
            s = s + weight(out[base + i], mx);
        }
    }
    let total = reduce_add_f32(s, ids);
    for (var i = ids.lidx; i < p.cols; i = i + WG) {
        out[base + i] = select(weight(out[base + i], mx) / total, f32_of_bits(NAN_BITS), bad);
    }
}
