// ARGMAX: per row, the lowest index of the largest element; NaN never wins; a row of only NaN
// (or no elements) gives 0. One workgroup per row.
//
// Prefixed by `reduce_portable.wgsl` or `reduce_subgroup.wgsl` (`Ids`, `reduce_argmax`). The row
// is read as raw bits and compared as integers: each non-NaN value maps to an order-preserving
// u32 key (-0 first folded onto +0, since -0 == +0), so subnormals, infinities and signed
// zeros compare exactly as IEEE `>` does, whatever the device's float modes. Key 0 is below
// every real key (the smallest, -inf, maps to 0x007fffff): (0, NONE) means "no candidate".

struct Params {
    rows: u32,
    cols: u32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<u32>;
@group(0) @binding(2) var<storage, read_write> out: array<u32>;

// Threads per workgroup, a power of two.
override WG: u32 = 256u;

const NONE: u32 = 0xffffffffu;

// The order-preserving key of a non-NaN f32's bits.
fn order_key(bits: u32) -> u32 {
    let b = select(bits, 0u, bits == 0x80000000u);
    if ((b & 0x80000000u) != 0u) {
        return ~b;
    }
    return b | 0x80000000u;
}

@compute @workgroup_size(WG)
fn argmax(ids: Ids) {
    let row = ids.wid.y * ids.nwg.x + ids.wid.x;
    if (row >= p.rows) {
        return;
    }
    let base = row * p.cols;
    // Each invocation's indices increase, so a strict `>` keeps the lowest index of its best.
    var best_key = 0u;
    var best_idx = NONE;
    for (var i = ids.lidx; i < p.cols; i = i + WG) {
        let b = x[base + i];
        if ((b & 0x7fffffffu) <= 0x7f800000u) {
            let k = order_key(b);
            if (k > best_key) {
                best_key = k;
                best_idx = i;
            }
        }
    }
    let best = reduce_argmax(best_key, best_idx, ids);
    if (ids.lidx == 0u) {
        out[row] = select(best, 0u, best == NONE);
    }
}
