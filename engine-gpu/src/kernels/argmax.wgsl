// ARGMAX: per row, the lowest index of the largest element; NaN never wins; a row of only NaN
// (or no elements) gives 0. One workgroup per row.
//
// Prefixed by `reduce_portable.wgsl` or `reduce_subgroup.wgsl` (`Ids`, `Grid`, `reduce_argmax`), then
// `argmax_key.wgsl` (`argmax_key`, `NONE`: the row is read as raw bits and compared as
// order-preserving integer keys).
//
// Entry points:
// - argmax: one workgroup per row of x.
// - argmax_partials: the second pass of an ARGMAX fused into a LINEAR (fuse/, pattern
//   ArgmaxPartials):
//   one workgroup reduces the p.cols (key, index) slots that linear_argmax.wgsl wrote
//   (two words each, in x) to out[0], by the same rule.

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

@compute @workgroup_size(WG)
fn argmax(ids: Ids, grid: Grid) {
    let row = grid_index(grid);
    if (row >= p.rows) {
        return;
    }
    let base = row * p.cols;
    // Each invocation's indices increase, so a strict `>` keeps the lowest index of its best.
    var best_key = 0u;
    var best_idx = NONE;
    for (var i = ids.lidx; i < p.cols; i = i + WG) {
        let k = argmax_key(x[base + i]);
        if (k > best_key) {
            best_key = k;
            best_idx = i;
        }
    }
    let best = reduce_argmax(best_key, best_idx, ids);
    if (ids.lidx == 0u) {
        out[row] = select(best, 0u, best == NONE);
    }
}

@compute @workgroup_size(WG)
fn argmax_partials(ids: Ids) {
    // Slots hold increasing row indices, and a strict `>` keeps each invocation's lowest.
    var best_key = 0u;
    var best_idx = NONE;
    for (var i = ids.lidx; i < p.cols; i = i + WG) {
        let k = x[2u * i];
        if (k > best_key) {
            best_key = k;
            best_idx = x[2u * i + 1u];
        }
    }
    let best = reduce_argmax(best_key, best_idx, ids);
    if (ids.lidx == 0u) {
        out[0] = select(best, 0u, best == NONE);
    }
}
