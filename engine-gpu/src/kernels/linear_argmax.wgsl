// A one-token LINEAR with the first pass of the ARGMAX of its output (fuse/, pattern
// ArgmaxPartials), after linear.wgsl (gemv_total, rows_total) and
// argmax_key.wgsl:
//
//     LINEAR(y, x, W) ; ARGMAX(id, y)      (y one row)
//
// Each workgroup computes PART_ROWS consecutive outputs exactly as the unfused kernel does
// (gemv_argmax: gemv's chunks and reduction, one row after another; gemv_rows_argmax:
// gemv_rows' workgroup, whose WG / LANES rows are PART_ROWS), writes them (unless the fusion
// pass proved that write dead: WRITE_OUT = 0), and writes the (key, index) of their largest
// value into slot (row0 + its first row) / PART_ROWS of `parts`: argmax.wgsl's rule on the
// same f32 values (NaN key 0, never chosen; the lowest index among equal keys; (0, NONE) when
// none). A weight bound as row windows has row0 a multiple of PART_ROWS, so the windows'
// slots tile the buffer. argmax.wgsl's argmax_partials then reduces the slots to the index.

@group(0) @binding(6) var<storage, read_write> parts: array<u32>;

// 1 when the LINEAR's own output must be written.
override WRITE_OUT: u32 = 1u;
// Rows per workgroup (and per slot) of gemv_argmax.
override PART_ROWS: u32 = 8u;

// gemv_rows_argmax: the key of each row of the workgroup.
var<workgroup> row_keys: array<u32, 256>;

fn write_part(slot: u32, key: u32, idx: u32) {
    parts[2u * slot] = key;
    parts[2u * slot + 1u] = idx;
}

@compute @workgroup_size(WG)
fn gemv_argmax(ids: Ids, grid: Grid) {
    let wg = grid_index(grid);
    // Rows increase, so a strict `>` keeps the lowest index of the best.
    var best_key = 0u;
    var best_idx = NONE;
    for (var r = 0u; r < PART_ROWS; r = r + 1u) {
        let row = wg * PART_ROWS + r;
        let total = gemv_total(row, 0u, ids);
        if (row < p.m && ids.lidx == 0u) {
            if (WRITE_OUT == 1u) {
                out[p.row0 + row] = total;
            }
            let k = argmax_key(bitcast<u32>(total));
            if (k > best_key) {
                best_key = k;
                best_idx = p.row0 + row;
            }
        }
    }
    // Workgroups past the last row (a grid rounded up in y) write nothing.
    if (ids.lidx == 0u && wg * PART_ROWS < p.m) {
        write_part(p.row0 / PART_ROWS + wg, best_key, best_idx);
    }
}

@compute @workgroup_size(WG)
fn gemv_rows_argmax(@builtin(local_invocation_index) lidx: u32, @builtin(workgroup_id) wid: vec3<u32>,
                    @builtin(num_workgroups) nwg: vec3<u32>) {
    let rows = WG / LANES;
    let wg = wid.y * nwg.x + wid.x;
    let row = wg * rows + lidx / LANES;
    let total = rows_total(row, 0u, lidx);
    if (lidx % LANES == 0u) {
        var key = 0u;
        if (row < p.m) {
            if (WRITE_OUT == 1u) {
                out[p.row0 + row] = total;
            }
            key = argmax_key(bitcast<u32>(total));
        }
        row_keys[lidx / LANES] = key;
    }
    workgroupBarrier();
    if (lidx == 0u && wg * rows < p.m) {
        var best_key = 0u;
        var best_idx = NONE;
        for (var r = 0u; r < rows; r = r + 1u) {
            if (row_keys[r] > best_key) {
                best_key = row_keys[r];
                best_idx = p.row0 + wg * rows + r;
            }
        }
        write_part(p.row0 / rows + wg, best_key, best_idx);
    }
}
