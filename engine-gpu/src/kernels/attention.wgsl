// ATTENTION: causal grouped-query softmax attention, as an online ("flash") softmax over
// tiles of TILE cache positions, split over the positions when there are too few query
// rows to fill the GPU (split-K / flash-decoding).
//
// Where the rows are comes from a file concatenated before this one:
// attention_consecutive.wgsl (one sequence, row r at position pos + r, position t in cache
// row t) or attention_paged.wgsl (each row its own sequence and position, position t in the
// cache row its sequence's page table gives). Each defines `positions(r)`, the positions row
// r attends to; `load_tile_rows`, called at the start of every tile; and `tile_row(t0, j)`,
// the cache row of position t0 + j of the current tile.
//
// `partial`: one workgroup per (query row r, kv head, chunk of up to HEADS of its query
// heads, split s < stride). Row r attends to positions 0 ..= p (p = pos + r, or its own
// position); split s takes the s-th chunk of them, chunks of ceil((p + 1) / splits)
// positions but at least min_chunk (a TILE for consecutive rows; so at short positions fewer
// splits have work: the rest return at once and `combine` reads only the splits that have).
// The chunks depend only on the row's position and the constants splits and min_chunk,
// never on the other rows: with paged rows (whose splits and min_chunk are fixed, and which
// always run `combine`) a row's result is the same bits whatever rows share the dispatch.
// The workgroup's query heads share every key and value row it loads (a kv head's group
// reads the cache once, not once per query head). Per tile:
//   1. scores: LANES threads per position, each summing q·k over the dimensions
//      lane, lane + LANES, ... (the key row read straight from memory, eight loads issued
//      before any is used), for each of the workgroup's heads;
//   2. the lanes' sums are added (lane order) and scaled;
//   3. per head, the tile's maximum against the running one, and each position's
//      unnormalized weight e^(s − m);
//   4. values: thread (column c, row group g) sums w·v over the tile's positions
//      g, g + ROWG, ... for the dimensions c, c + COLS, ..., and rescales what it had by
//      e^(m_old − m_new); the sums live in workgroup memory, one row per row group, each
//      element owned by one thread.
// Every load of a tile is issued at most two batches deep, so a tile costs a few memory
// round trips rather than one per staged element. No cross-lane reduction instruction is
// used, so the kernel is the same with or without subgroups.
//
// At the end the row groups' sums are added; the result goes to `out`, normalized, when
// splits == 1 (DIRECT), or to the split's slot [m, l, o_0 .. o_{HD−1}] of the scratch buffer.
//
// `combine` (splits > 1): one workgroup per (row, head) merges the splits' slots:
// M = max m_s, L = Σ l_s e^(m_s − M), out[d] = Σ o_s[d] e^(m_s − M) / L. `combine_rounded`
// also rounds the head's blocks of 32 for the LINEAR that reads `out` (act_quant.wgsl,
// concatenated before this file).
//
// Positions are clamped to the cache so that nothing is read out of bounds even if the
// host check (pos + n <= n_ctx, GpuEngine::check_positions; PagedRows::check for paged
// rows) were skipped.

struct Params {
    // Query rows.
    n: u32,
    n_head: u32,
    // Query heads per kv head: n_head / n_kv_head.
    group: u32,
    // Workgroups per (row, kv head): ceil(group / HEADS).
    chunks: u32,
    // n_head · HD.
    q_width: u32,
    // n_kv_head · HD.
    kv_width: u32,
    // Rows of the caches.
    n_ctx: u32,
    // Chunks the positions of each row are split into (1: DIRECT, no combine pass).
    splits: u32,
    // 1 / sqrt(HD).
    scale: f32,
    // The position of query row 0: a constant, or run-time parameter `pos_param`
    // (consecutive rows).
    pos_value: u32,
    pos_param: u32,
    // Floats per split slot in the scratch buffer: HD + 2.
    slot: u32,
    // Slots per (row, head) in the scratch buffer: at least the splits any row can use.
    stride: u32,
    // The fewest positions of a chunk (but a row's last).
    min_chunk: u32,
    // Paged rows: positions per page, the page table's columns and rows, the largest
    // position the table holds (max_pages · page_size − 1, at most 2^32 − 1), and the pages
    // wholly inside the cache (n_ctx / page_size).
    page_size: u32,
    max_pages: u32,
    n_seq: u32,
    max_pos: u32,
    pages_in_cache: u32,
    _pad0: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> q: array<f32>;
// The caches as words: F32 elements (K_F16 / V_F16 = 0), or F16 elements two to a word,
// element i in the low half of word i / 2 when i is even (little-endian), widened exactly
// with integer operations (no shader-f16 feature, no reliance on a backend's subnormals).
@group(0) @binding(2) var<storage, read> k: array<u32>;
@group(0) @binding(3) var<storage, read> v: array<u32>;
// `partial`'s destination: `out` (DIRECT) or the scratch buffer.
@group(0) @binding(4) var<storage, read_write> acc: array<f32>;
// Binding 5 (and 9, 10) are the rows' positions: see the file before this one.
// `combine`'s input (the scratch buffer) and output.
@group(0) @binding(6) var<storage, read> parts: array<f32>;
@group(0) @binding(7) var<storage, read_write> out: array<f32>;
// combine_rounded: the int8-block scratch buffer of the LINEAR reading `out`
// (act_quant.wgsl's layout).
@group(0) @binding(8) var<storage, read_write> xq: array<u32>;

// Elements per head.
override HD: u32 = 64u;
// Query heads per workgroup (at most MAX_HEADS).
override HEADS: u32 = 1u;
// Value columns taken at once, min(HD, WG), and the row groups beside them,
// min(WG / COLS, TILE).
override COLS: u32 = 64u;
override ROWG: u32 = 2u;
// 1 when splits == 1: `partial` writes the normalized output itself.
override DIRECT: u32 = 0u;
// 1 when the key (value) cache is F16.
override K_F16: u32 = 0u;
override V_F16: u32 = 0u;

// The f32 of the f16 with bits `h` (low 16 bits), exactly: normals and infinities/NaN by
// moving the fields, subnormals as man · 2^-24 (exact: a normal f32).
fn widen_f16(h: u32) -> f32 {
    let sign = (h & 0x8000u) << 16u;
    let e = (h >> 10u) & 0x1fu;
    let man = h & 0x3ffu;
    if (e == 0u) {
        let mag = f32(man) * 5.9604644775390625e-8;
        return bitcast<f32>(bitcast<u32>(mag) | sign);
    }
    if (e == 0x1fu) {
        return bitcast<f32>(sign | 0x7f800000u | (man << 13u));
    }
    return bitcast<f32>(sign | ((e + 112u) << 23u) | (man << 13u));
}

// Element i of a cache of words `w` at index i (F32) or i / 2 (F16).
fn key_at(i: u32) -> f32 {
    if (K_F16 != 0u) {
        return widen_f16(k[i >> 1u] >> (16u * (i & 1u)));
    }
    return bitcast<f32>(k[i]);
}

fn value_at(i: u32) -> f32 {
    if (V_F16 != 0u) {
        return widen_f16(v[i >> 1u] >> (16u * (i & 1u)));
    }
    return bitcast<f32>(v[i]);
}

// Threads per workgroup.
const WG: u32 = 128u;
// Cache positions per tile, and threads per position for the scores.
const TILE: u32 = 32u;
const LANES: u32 = WG / TILE;
// The per-thread head sums are private arrays of this size.
const MAX_HEADS: u32 = 8u;

// The score of positions past a chunk's end; also the `m` of an empty split.
const LOWEST: f32 = -0x1.fffffep+127f;

var<workgroup> queries: array<f32, HEADS * HD>;
// Per (head, position, lane): that lane's part of the score.
var<workgroup> lane_dots: array<f32, HEADS * WG>;
// Per (head, position): the scaled score, and its weight.
var<workgroup> scores: array<f32, HEADS * TILE>;
var<workgroup> weights: array<f32, HEADS * TILE>;
// Per (row group, head, dimension): Σ w·v so far, against the running maximum.
var<workgroup> sums: array<f32, ROWG * HEADS * HD>;
// Per head: the running maximum and weight sum, and the current tile's maximum.
var<workgroup> m_run: array<f32, HEADS>;
var<workgroup> l_run: array<f32, HEADS>;
var<workgroup> m_tile: array<f32, HEADS>;
// combine: per split, its m and l, and its weight e^(m_s − M) (attention.rs: MAX_SPLITS).
const MAX_SPLITS: u32 = 64u;
var<workgroup> split_m: array<f32, MAX_SPLITS>;
var<workgroup> split_l: array<f32, MAX_SPLITS>;
var<workgroup> split_w: array<f32, MAX_SPLITS>;
// combine: the head's merged outputs; combine_rounded: each of its blocks' scale bits.
var<workgroup> merged: array<f32, HD>;
var<workgroup> head_scales: array<u32, (HD + ACT_BLOCK - 1u) / ACT_BLOCK>;

// Positions per split of a row attending to `len` positions: an equal share, but at least
// min_chunk. `splits` is sized for the whole cache at compile time; early in a long context
// an equal share would give every split a few positions and `combine` as many slots to merge.
fn split_chunk(len: u32) -> u32 {
    return max((len + p.splits - 1u) / p.splits, p.min_chunk);
}

// The splits of such a row that hold positions: the first ceil(len / chunk).
fn active_splits(len: u32) -> u32 {
    let chunk = split_chunk(len);
    return (len + chunk - 1u) / chunk;
}

// Dimension d of the key row at `row`, or 0 past the head (d ≥ HD). The load is
// unconditional (dimension 0 stands in) so that a caller's eight are issued together.
fn key(row: u32, d: u32) -> f32 {
    return select(0.0, key_at(row + select(0u, d, d < HD)), d < HD);
}

// Query dimension d of head h (clamped; its key is 0 past the head).
fn query(h: u32, d: u32) -> f32 {
    return queries[h * HD + min(d, HD - 1u)];
}

@compute @workgroup_size(WG)
fn partial(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
           @builtin(num_workgroups) nwg: vec3<u32>) {
    let n_kv = p.n_head / p.group;
    let g = wid.y * nwg.x + wid.x;
    if (g >= p.stride * p.chunks * n_kv * p.n) {
        return;
    }
    let s = g % p.stride;
    let chunk_of_group = (g / p.stride) % p.chunks;
    let kv_head = (g / (p.stride * p.chunks)) % n_kv;
    let r = g / (p.stride * p.chunks * n_kv);
    // This workgroup's query heads: h0 .. h0 + heads.
    let h0 = kv_head * p.group + chunk_of_group * HEADS;
    let heads = min(HEADS, p.group - chunk_of_group * HEADS);
    let kv_off = kv_head * HD;
    let len = positions(r);
    if (s >= active_splits(len)) {
        // No positions: `combine` does not read this split's slot. (Uniform per workgroup.)
        return;
    }
    let chunk = split_chunk(len);
    let start = s * chunk;
    let end = min(start + chunk, len);

    for (var e = lid.x; e < HEADS * HD; e += WG) {
        let inside = e / HD < heads;
        queries[e] = select(0.0, q[select(0u, r * p.q_width + h0 * HD + e, inside)], inside);
    }
    if (lid.x < HEADS) {
        m_run[lid.x] = LOWEST;
        l_run[lid.x] = 0.0;
    }
    workgroupBarrier();

    // Step 1's position and lane; step 4's column and row group.
    let at = lid.x / LANES;
    let lane = lid.x % LANES;
    let col = lid.x % COLS;
    let row_group = lid.x / COLS;
    for (var t0 = start; t0 < end; t0 += TILE) {
        let count = min(TILE, end - t0);
        let first = t0 == start;
        load_tile_rows(r, t0, count, lid.x);

        // 1. This lane's part of each head's score for position t0 + at.
        var dots = array<f32, MAX_HEADS>();
        let key_row = select(0u, tile_row(t0, at) * p.kv_width + kv_off, at < count);
        for (var d = lane; d < HD; d += 8u * LANES) {
            let k0 = key(key_row, d);
            let k1 = key(key_row, d + LANES);
            let k2 = key(key_row, d + 2u * LANES);
            let k3 = key(key_row, d + 3u * LANES);
            let k4 = key(key_row, d + 4u * LANES);
            let k5 = key(key_row, d + 5u * LANES);
            let k6 = key(key_row, d + 6u * LANES);
            let k7 = key(key_row, d + 7u * LANES);
            for (var h = 0u; h < HEADS; h++) {
                var dot = dots[h];
                dot += query(h, d) * k0;
                dot += query(h, d + LANES) * k1;
                dot += query(h, d + 2u * LANES) * k2;
                dot += query(h, d + 3u * LANES) * k3;
                dot += query(h, d + 4u * LANES) * k4;
                dot += query(h, d + 5u * LANES) * k5;
                dot += query(h, d + 6u * LANES) * k6;
                dot += query(h, d + 7u * LANES) * k7;
                dots[h] = dot;
            }
        }
        for (var h = 0u; h < HEADS; h++) {
            lane_dots[h * WG + lid.x] = dots[h];
        }
        workgroupBarrier();

        // 2. Scores, per (head, position).
        for (var e = lid.x; e < HEADS * TILE; e += WG) {
            var dot = 0.0;
            for (var l = 0u; l < LANES; l++) {
                dot += lane_dots[e * LANES + l];
            }
            scores[e] = select(LOWEST, dot * p.scale, e % TILE < count && e / TILE < heads);
        }
        workgroupBarrier();

        // 3. Each head's new maximum, and the weights.
        for (var e = lid.x; e < HEADS * TILE; e += WG) {
            let h = e / TILE;
            var m = m_run[h];
            for (var j = 0u; j < count; j++) {
                m = max(m, scores[h * TILE + j]);
            }
            weights[e] = select(0.0, exp(scores[e] - m), e % TILE < count);
            if (e % TILE == 0u) {
                m_tile[h] = m;
            }
        }
        workgroupBarrier();

        // 4. Σ w·v for this thread's columns over its row group's positions of the tile.
        if (row_group < ROWG) {
            for (var d = col; d < HD; d += COLS) {
                var o = array<f32, MAX_HEADS>();
                var j = row_group;
                let v_col = kv_off + d;
                // Eight value rows per step, loaded before they are used. (Each sum is
                // still taken in position order.)
                for (; j + 7u * ROWG < count; j += 8u * ROWG) {
                    let v0 = value_at(tile_row(t0, j) * p.kv_width + v_col);
                    let v1 = value_at(tile_row(t0, j + ROWG) * p.kv_width + v_col);
                    let v2 = value_at(tile_row(t0, j + 2u * ROWG) * p.kv_width + v_col);
                    let v3 = value_at(tile_row(t0, j + 3u * ROWG) * p.kv_width + v_col);
                    let v4 = value_at(tile_row(t0, j + 4u * ROWG) * p.kv_width + v_col);
                    let v5 = value_at(tile_row(t0, j + 5u * ROWG) * p.kv_width + v_col);
                    let v6 = value_at(tile_row(t0, j + 6u * ROWG) * p.kv_width + v_col);
                    let v7 = value_at(tile_row(t0, j + 7u * ROWG) * p.kv_width + v_col);
                    for (var h = 0u; h < HEADS; h++) {
                        let w = h * TILE + j;
                        var sum = o[h];
                        sum += weights[w] * v0;
                        sum += weights[w + ROWG] * v1;
                        sum += weights[w + 2u * ROWG] * v2;
                        sum += weights[w + 3u * ROWG] * v3;
                        sum += weights[w + 4u * ROWG] * v4;
                        sum += weights[w + 5u * ROWG] * v5;
                        sum += weights[w + 6u * ROWG] * v6;
                        sum += weights[w + 7u * ROWG] * v7;
                        o[h] = sum;
                    }
                }
                for (; j < count; j += ROWG) {
                    let value = value_at(tile_row(t0, j) * p.kv_width + v_col);
                    for (var h = 0u; h < HEADS; h++) {
                        o[h] += weights[h * TILE + j] * value;
                    }
                }
                for (var h = 0u; h < HEADS; h++) {
                    // The first tile has nothing to rescale.
                    let alpha = exp(m_run[h] - m_tile[h]);
                    let i = (row_group * HEADS + h) * HD + d;
                    sums[i] = select(sums[i] * alpha + o[h], o[h], first);
                }
            }
        }
        if (lid.x < HEADS) {
            let h = lid.x;
            var l_tile = 0.0;
            for (var j = 0u; j < count; j++) {
                l_tile += weights[h * TILE + j];
            }
            l_run[h] = select(l_run[h] * exp(m_run[h] - m_tile[h]) + l_tile, l_tile, first);
        }
        workgroupBarrier();
        // Read again only in step 3 of the next tile, two barriers on.
        if (lid.x < HEADS) {
            m_run[lid.x] = m_tile[lid.x];
        }
    }
    workgroupBarrier();

    for (var e = lid.x; e < heads * HD; e += WG) {
        let h = e / HD;
        let d = e % HD;
        var o = 0.0;
        for (var g = 0u; g < ROWG; g++) {
            o += sums[(g * HEADS + h) * HD + d];
        }
        if (DIRECT == 1u) {
            // The only split holds position 0, so l_run > 0.
            acc[r * p.q_width + (h0 + h) * HD + d] = o / l_run[h];
        } else {
            let slot = ((r * p.n_head + h0 + h) * p.stride + s) * p.slot;
            acc[slot + 2u + d] = o;
            if (d == 0u) {
                acc[slot] = m_run[h];
                acc[slot + 1u] = l_run[h];
            }
        }
    }
}

// Output row r, head h (g = r · n_head + h) merged from its splits' slots, element d by
// invocation d, d + WG, ...: written to `out`, and kept in `merged` for combine_rounded.
fn combine_head(g: u32, lid: u32) {
    let first_slot = g * p.stride * p.slot;
    // Only the splits that hold positions wrote their slots: the first `splits`.
    let splits = active_splits(positions(g / p.n_head));
    // Each split's (m, l), loaded by its own invocation: one memory round trip, not one per
    // split (a loop over the splits in every invocation took 11–18 µs a call on an H100).
    // Every slot is loaded, so that these loads need not wait for the position's; those past
    // `splits` hold an earlier run's values and are not read below.
    if (lid < p.stride) {
        let at = first_slot + lid * p.slot;
        split_m[lid] = parts[at];
        split_l[lid] = parts[at + 1u];
    }
    workgroupBarrier();
    var m = LOWEST;
    for (var s = 0u; s < splits; s++) {
        if (split_l[s] > 0.0) {
            m = max(m, split_m[s]);
        }
    }
    // e^(m_s − M), once per split (unused for a split whose l is not positive, skipped below).
    if (lid < splits) {
        split_w[lid] = exp(split_m[lid] - m);
    }
    workgroupBarrier();
    var l = 0.0;
    for (var s = 0u; s < splits; s++) {
        if (split_l[s] > 0.0) {
            l += split_l[s] * split_w[s];
        }
    }
    // out row r, head h starts at r · q_width + h · HD = g · HD. The sums go in split order;
    // four splits' values are loaded before any is added.
    for (var d = lid; d < HD; d += WG) {
        let first = first_slot + 2u + d;
        var o = 0.0;
        var s = 0u;
        for (; s + 4u <= splits; s += 4u) {
            let o4 = vec4<f32>(parts[first + s * p.slot], parts[first + (s + 1u) * p.slot],
                               parts[first + (s + 2u) * p.slot], parts[first + (s + 3u) * p.slot]);
            for (var i = 0u; i < 4u; i++) {
                if (split_l[s + i] > 0.0) {
                    o += o4[i] * split_w[s + i];
                }
            }
        }
        for (; s < splits; s++) {
            if (split_l[s] > 0.0) {
                o += parts[first + s * p.slot] * split_w[s];
            }
        }
        let y = o / l;
        out[g * HD + d] = y;
        merged[d] = y;
    }
}

@compute @workgroup_size(WG)
fn combine(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
           @builtin(num_workgroups) nwg: vec3<u32>) {
    let g = wid.y * nwg.x + wid.x; // r · n_head + h
    if (g >= p.n * p.n_head) {
        return;
    }
    combine_head(g, lid.x);
}

// combine, then the head's int8 blocks of 32 rounded into `xq`, the scratch buffer of the
// LINEAR that reads `out` (fuse/, pattern AttentionRounding; act_quant.wgsl's layout,
// x = out [n, q_width]): bit for bit what linear.wgsl's quantize_blocks computes from `out`
// (the same values, an exact integer maximum per block, the same rounding functions).
// Needs HD to be a multiple of ACT_BLOCK, so a head holds whole blocks.
@compute @workgroup_size(WG)
fn combine_rounded(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
                   @builtin(num_workgroups) nwg: vec3<u32>) {
    let g = wid.y * nwg.x + wid.x;
    if (g >= p.n * p.n_head) {
        return;
    }
    combine_head(g, lid.x);
    workgroupBarrier();
    let r = g / p.n_head;
    let col0 = (g % p.n_head) * HD;
    // One invocation per block: its maximum and scale.
    for (var b = lid.x; b < HD / ACT_BLOCK; b += WG) {
        var mx = 0u;
        for (var i = 0u; i < ACT_BLOCK; i++) {
            mx = max(mx, abs_bits(merged[b * ACT_BLOCK + i]));
        }
        let s_bits = act_scale_bits(mx);
        head_scales[b] = s_bits;
        xq[int8_scale_word(p.n, p.q_width, r, col0 / ACT_BLOCK + b)] = s_bits;
    }
    workgroupBarrier();
    // One invocation per word of four codes (and their x̂ when a product reads it).
    for (var wd = lid.x; wd < HD / 4u; wd += WG) {
        let s_bits = head_scales[4u * wd / ACT_BLOCK];
        let e = 4u * wd;
        let q = quantize4(vec4<f32>(merged[e], merged[e + 1u], merged[e + 2u], merged[e + 3u]), s_bits);
        for (var i = 0u; i < 4u; i++) {
            if (WRITE_XHAT == 1u) {
                xq[r * p.q_width + col0 + e + i] = bitcast<u32>(dequantize1(q[i], s_bits));
            }
        }
        let blk = (col0 + 4u * wd) / ACT_BLOCK;
        xq[int8_code_word(p.n, p.q_width, r, blk, wd % BLOCK_WORDS)] = pack4xI8(q);
    }
}
