// ATTENTION: causal grouped-query softmax attention, as an online ("flash") softmax over
// tiles of WG cache positions, split over the positions when there are few query rows
// (split-K / flash-decoding).
//
// `partial`: one workgroup per (query row r, head h, split s). Row r attends to positions
// 0 ..= p, p = pos + r; split s takes the s-th of `splits` equal chunks of them. Per tile of
// WG positions: the workgroup stages the tile's keys in workgroup memory, KB dimensions at a
// time (consecutive threads load consecutive floats of a key row, so the loads coalesce),
// and thread j accumulates the score of position t0 + j from there (rows padded to KB + 1
// floats so that the threads' reads fall in different banks); every thread then reads the
// tile's scores to find the running maximum, thread j turns its score into an unnormalized
// weight, and thread d accumulates Σ_j w_j · v_j[d] for its dimensions (consecutive threads,
// consecutive floats of a value row), rescaling what it had by e^(m_old − m_new). No
// cross-lane reduction is needed: the tile's max and weight sum are read from workgroup
// memory by every thread (a broadcast), so the kernel is the same with or without subgroups.
// Each thread owns its output dimensions, so the accumulator lives in the destination
// buffer: `out` itself when splits == 1 (DIRECT, normalized at the end), or the split's
// slot [m, l, o_0 .. o_{head_dim−1}] of the scratch buffer otherwise.
//
// `combine` (splits > 1): one workgroup per (row, head) merges the splits' slots:
// M = max m_s, L = Σ l_s e^(m_s − M), out[d] = Σ o_s[d] e^(m_s − M) / L.
//
// Positions are clamped to the cache so that nothing is read out of bounds even if the
// host check (pos + n <= n_ctx, GpuEngine::check_positions) were skipped.

struct Params {
    // Query rows.
    n: u32,
    n_head: u32,
    head_dim: u32,
    // Query heads per kv head: n_head / n_kv_head.
    group: u32,
    // n_head · head_dim.
    q_width: u32,
    // n_kv_head · head_dim.
    kv_width: u32,
    // Rows of the caches.
    n_ctx: u32,
    // Chunks the positions of each row are split into (1: DIRECT, no combine pass).
    splits: u32,
    // 1 / sqrt(head_dim).
    scale: f32,
    // The position of query row 0: a constant, or run-time parameter `pos_param`.
    pos_value: u32,
    pos_param: u32,
    // Floats per split slot in the scratch buffer: head_dim + 2.
    slot: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> q: array<f32>;
@group(0) @binding(2) var<storage, read> k: array<f32>;
@group(0) @binding(3) var<storage, read> v: array<f32>;
// `partial`'s accumulator: `out` (DIRECT) or the scratch buffer.
@group(0) @binding(4) var<storage, read_write> acc: array<f32>;
@group(0) @binding(5) var<storage, read> run: array<u32>;
// `combine`'s input (the scratch buffer) and output.
@group(0) @binding(6) var<storage, read> parts: array<f32>;
@group(0) @binding(7) var<storage, read_write> out: array<f32>;

// Threads per workgroup, and positions per tile.
override WG: u32 = 64u;
// Key dimensions staged per step.
const KB: u32 = 32u;
// 1 when splits == 1: `partial` writes the normalized output itself.
override DIRECT: u32 = 0u;

// The score of positions past a chunk's end; also the `m` of an empty split.
const LOWEST: f32 = -3.40282347e38;

// WG key rows of KB dimensions, padded to KB + 1.
var<workgroup> keys: array<f32, WG * (KB + 1u)>;
// The query's KB dimensions of the current step (read by every thread: a broadcast).
var<workgroup> q_chunk: array<f32, KB>;
var<workgroup> scores: array<f32, WG>;
var<workgroup> weights: array<f32, WG>;

// The positions query row r attends to: pos + r + 1, clamped to the cache.
fn positions(r: u32) -> u32 {
    let pos = select(p.pos_value, run[p.pos_param], p.pos_param != 0xffffffffu);
    if (pos >= p.n_ctx || r >= p.n_ctx - pos) {
        return p.n_ctx;
    }
    return pos + r + 1u;
}

// Element e of a tile's key staging (row e / KB of the tile, dimension e % KB of the step,
// whose first dimension is cache column `first`):
// the cache's float, or 0 past the step's width or the staging's end (e ≥ staged, which
// put_key drops). The load is unconditional (element 0 of the cache stands in outside), so
// that the caller's eight are issued together rather than each behind its own branch.
fn stage_key(e: u32, staged: u32, t0: u32, first: u32, width: u32) -> f32 {
    let inside = e < staged && e % KB < width;
    let key = k[select(0u, (t0 + e / KB) * p.kv_width + first + e % KB, inside)];
    return select(0.0, key, inside);
}

fn put_key(e: u32, staged: u32, key: f32) {
    if (e < staged) {
        keys[(e / KB) * (KB + 1u) + e % KB] = key;
    }
}

@compute @workgroup_size(WG)
fn partial(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
           @builtin(num_workgroups) nwg: vec3<u32>) {
    let g = wid.y * nwg.x + wid.x;
    if (g >= p.splits * p.n_head * p.n) {
        return;
    }
    let s = g % p.splits;
    let h = (g / p.splits) % p.n_head;
    let r = g / (p.splits * p.n_head);
    let q_off = r * p.q_width + h * p.head_dim;
    let kv_off = (h / p.group) * p.head_dim;
    let len = positions(r);
    let chunk = (len + p.splits - 1u) / p.splits;
    let start = min(s * chunk, len);
    let end = min(start + chunk, len);
    var acc_off = ((r * p.n_head + h) * p.splits + s) * p.slot + 2u;
    if (DIRECT == 1u) {
        acc_off = q_off;
    }

    var m_run = LOWEST;
    var l_run = 0.0;
    for (var t0 = start; t0 < end; t0 += WG) {
        let t = t0 + lid.x;
        // The tile's positions: a short split's last (or only) tile stages only those
        // rows. The rows past them keep stale values, whose scores the select below
        // replaces (t ≥ end).
        let count = min(WG, end - t0);
        var dot = 0.0;
        for (var d0 = 0u; d0 < p.head_dim; d0 += KB) {
            let width = min(KB, p.head_dim - d0);
            // Eight loads per step, issued before any of them is used: on a GPU each load
            // waits hundreds of cycles, and with one load per step the staging of a tile was
            // a chain of count · KB / WG of those waits (most of the kernel's 78 µs a call on
            // an H200 at 576 positions). Named loads, not a private array: eight loads
            // batched through a private array measured slower there (1.07 → 1.38 ms of a 2B
            // token at 32 positions).
            let staged = count * KB;
            let first = kv_off + d0;
            for (var e = lid.x; e < staged; e += 8u * WG) {
                let k0 = stage_key(e, staged, t0, first, width);
                let k1 = stage_key(e + WG, staged, t0, first, width);
                let k2 = stage_key(e + 2u * WG, staged, t0, first, width);
                let k3 = stage_key(e + 3u * WG, staged, t0, first, width);
                let k4 = stage_key(e + 4u * WG, staged, t0, first, width);
                let k5 = stage_key(e + 5u * WG, staged, t0, first, width);
                let k6 = stage_key(e + 6u * WG, staged, t0, first, width);
                let k7 = stage_key(e + 7u * WG, staged, t0, first, width);
                put_key(e, staged, k0);
                put_key(e + WG, staged, k1);
                put_key(e + 2u * WG, staged, k2);
                put_key(e + 3u * WG, staged, k3);
                put_key(e + 4u * WG, staged, k4);
                put_key(e + 5u * WG, staged, k5);
                put_key(e + 6u * WG, staged, k6);
                put_key(e + 7u * WG, staged, k7);
            }
            if (lid.x < width) {
                q_chunk[lid.x] = q[q_off + d0 + lid.x];
            }
            workgroupBarrier();
            for (var c = 0u; c < width; c++) {
                dot += q_chunk[c] * keys[lid.x * (KB + 1u) + c];
            }
            workgroupBarrier();
        }
        let score = select(LOWEST, dot * p.scale, t < end);
        scores[lid.x] = score;
        workgroupBarrier();
        var m_new = m_run;
        for (var j = 0u; j < count; j++) {
            m_new = max(m_new, scores[j]);
        }
        weights[lid.x] = select(0.0, exp(score - m_new), t < end);
        workgroupBarrier();
        // The first tile has nothing to rescale (and the accumulator holds stale data).
        let first = t0 == start;
        let alpha = exp(m_run - m_new);
        var l_tile = 0.0;
        for (var j = 0u; j < count; j++) {
            l_tile += weights[j];
        }
        l_run = select(l_run * alpha + l_tile, l_tile, first);
        for (var d = lid.x; d < p.head_dim; d += WG) {
            var o = 0.0;
            var v_off = t0 * p.kv_width + kv_off + d;
            var j = 0u;
            // Eight value rows per step, loaded before they are used: on a GPU each load
            // waits hundreds of cycles, so one load per iteration would wait `count` times.
            // (The sum is still taken in position order.)
            for (; j + 8u <= count; j += 8u) {
                let v0 = v[v_off];
                let v1 = v[v_off + p.kv_width];
                let v2 = v[v_off + 2u * p.kv_width];
                let v3 = v[v_off + 3u * p.kv_width];
                let v4 = v[v_off + 4u * p.kv_width];
                let v5 = v[v_off + 5u * p.kv_width];
                let v6 = v[v_off + 6u * p.kv_width];
                let v7 = v[v_off + 7u * p.kv_width];
                o += weights[j] * v0;
                o += weights[j + 1u] * v1;
                o += weights[j + 2u] * v2;
                o += weights[j + 3u] * v3;
                o += weights[j + 4u] * v4;
                o += weights[j + 5u] * v5;
                o += weights[j + 6u] * v6;
                o += weights[j + 7u] * v7;
                v_off += 8u * p.kv_width;
            }
            for (; j < count; j++) {
                o += weights[j] * v[v_off];
                v_off += p.kv_width;
            }
            acc[acc_off + d] = select(acc[acc_off + d] * alpha + o, o, first);
        }
        m_run = m_new;
    }

    if (DIRECT == 1u) {
        // The only split holds position 0, so l_run > 0.
        for (var d = lid.x; d < p.head_dim; d += WG) {
            acc[acc_off + d] = acc[acc_off + d] / l_run;
        }
    } else if (lid.x == 0u) {
        // An empty split (start == end) records m = LOWEST, l = 0; `combine` skips it.
        acc[acc_off - 2u] = m_run;
        acc[acc_off - 1u] = l_run;
    }
}

@compute @workgroup_size(WG)
fn combine(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
           @builtin(num_workgroups) nwg: vec3<u32>) {
    let g = wid.y * nwg.x + wid.x; // r · n_head + h
    if (g >= p.n * p.n_head) {
        return;
    }
    let first_slot = g * p.splits * p.slot;
    var m = LOWEST;
    for (var s = 0u; s < p.splits; s++) {
        let at = first_slot + s * p.slot;
        if (parts[at + 1u] > 0.0) {
            m = max(m, parts[at]);
        }
    }
    var l = 0.0;
    for (var s = 0u; s < p.splits; s++) {
        let at = first_slot + s * p.slot;
        if (parts[at + 1u] > 0.0) {
            l += parts[at + 1u] * exp(parts[at] - m);
        }
    }
    // out row r, head h starts at r · q_width + h · head_dim = g · head_dim.
    for (var d = lid.x; d < p.head_dim; d += WG) {
        var o = 0.0;
        for (var s = 0u; s < p.splits; s++) {
            let at = first_slot + s * p.slot;
            if (parts[at + 1u] > 0.0) {
                o += parts[at + 2u + d] * exp(parts[at] - m);
            }
        }
        out[g * p.head_dim + d] = o / l;
    }
}
