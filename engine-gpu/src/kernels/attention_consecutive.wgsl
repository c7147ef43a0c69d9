// ATTENTION's rows at consecutive positions of one sequence (concatenated before
// attention.wgsl): query row r is at position pos + r, and position t is in cache row t.

@group(0) @binding(5) var<storage, read> run: array<u32>;

// The positions query row r attends to: pos + r + 1, clamped to the cache.
fn positions(r: u32) -> u32 {
    let pos = select(p.pos_value, run[p.pos_param], p.pos_param != 0xffffffffu);
    if (pos >= p.n_ctx || r >= p.n_ctx - pos) {
        return p.n_ctx;
    }
    return pos + r + 1u;
}

// Nothing to look up: a tile's positions are consecutive cache rows.
fn load_tile_rows(r: u32, t0: u32, count: u32, lid: u32) {
}

// The cache row of position t0 + j.
fn tile_row(t0: u32, j: u32) -> u32 {
    return t0 + j;
}
