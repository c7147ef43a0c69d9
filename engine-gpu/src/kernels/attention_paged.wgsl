// ATTENTION's rows of several sequences over a cache shared in pages (concatenated before
// attention.wgsl): query row r is at position row_pos[r] of sequence row_seq[r], and
// position t of sequence s is in cache row pages[s · max_pages + t / page_size] · page_size
// + t % page_size. The host checked the tables (PagedRows::check) before anything ran; the
// lookups clamp the sequence, the position and the page into the tables and the cache all
// the same.
//
// Each tile's cache rows are looked up once, at its start, into workgroup memory: the
// scores and the value sums then read them as they read t0 + j for consecutive rows.

@group(0) @binding(5) var<storage, read> row_pos: array<u32>;
@group(0) @binding(9) var<storage, read> row_seq: array<u32>;
@group(0) @binding(10) var<storage, read> pages: array<u32>;

// The cache rows of the current tile's positions.
var<workgroup> tile_rows: array<u32, TILE>;

// The positions query row r attends to: its position + 1 (at most the table's).
fn positions(r: u32) -> u32 {
    return min(row_pos[r], p.max_pos) + 1u;
}

// The cache row holding position t of row r's sequence.
fn cache_row(r: u32, t: u32) -> u32 {
    let s = min(row_seq[r], p.n_seq - 1u);
    let page = min(pages[s * p.max_pages + min(t / p.page_size, p.max_pages - 1u)], p.pages_in_cache - 1u);
    return page * p.page_size + t % p.page_size;
}

// The cache rows of positions t0 .. t0 + count (the tile's slots past count repeat its last
// row), one per invocation, then a barrier: called by every invocation of the workgroup at
// the start of each tile, after the previous tile's last read of them (its closing barrier).
fn load_tile_rows(r: u32, t0: u32, count: u32, lid: u32) {
    if (lid < TILE) {
        tile_rows[lid] = cache_row(r, t0 + min(lid, count - 1u));
    }
    workgroupBarrier();
}

// The cache row of position t0 + j (j < TILE) of the current tile.
fn tile_row(t0: u32, j: u32) -> u32 {
    return tile_rows[min(j, TILE - 1u)];
}
