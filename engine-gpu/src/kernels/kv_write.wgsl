// KV_WRITE: cache[row of r] = src[r]. One invocation per element, copied as a u32 word so
// that every f32 bit pattern (NaN payloads, subnormals) arrives unchanged.
//
// `kv_write`, consecutive rows: row r goes to cache row pos + r. The host checked
// pos + n <= n_ctx before anything ran (GpuEngine::check_positions); the kernel checks it
// again, without overflow, so that it never writes out of bounds.
//
// `kv_write_paged`, rows of several sequences in a paged cache: row r, position
// t = row_pos[r] of sequence s = row_seq[r], goes to cache row
// pages[s · max_pages + t / page_size] · page_size + t % page_size. The host checked the
// tables (PagedRows::check, from its copies of them) before anything ran; the kernel skips
// a row whose sequence, page index or page is out of range, so it never writes out of
// bounds either.
//
// `kv_write_f16` and `kv_write_paged_f16`: the same into an F16 cache (binding 7, two
// elements to a word, element i in the low half of word i / 2 when i is even). Each
// element is rounded to the nearest f16, ties to even, with integer operations on its bits
// (`f16_bits`, the ISA's rounding: no shader-f16 feature, no pack2x16float, whose rounding
// WGSL leaves to the backend), and stored into its half of the word with an atomicAnd that
// clears that half and an atomicOr that sets it: the other half may be another row's
// element (an odd width) written in the same dispatch, and the two commute.

struct Params {
    // n · w: the words to copy.
    n_words: u32,
    // w: words per row.
    width: u32,
    // n: the rows of src.
    n_rows: u32,
    // The rows of the cache.
    n_ctx: u32,
    // The position of src's row 0: a constant, or run-time parameter `pos_param`
    // (consecutive rows).
    pos_value: u32,
    pos_param: u32,
    // Paged rows: positions per page, the page table's columns and rows, and the pages that
    // lie wholly inside the cache (n_ctx / page_size).
    page_size: u32,
    max_pages: u32,
    n_seq: u32,
    pages_in_cache: u32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> src: array<u32>;
@group(0) @binding(2) var<storage, read_write> cache: array<u32>;
@group(0) @binding(3) var<storage, read> run: array<u32>;
// Paged rows: each row's position and sequence, and the page table [n_seq, max_pages].
@group(0) @binding(4) var<storage, read> row_pos: array<u32>;
@group(0) @binding(5) var<storage, read> row_seq: array<u32>;
@group(0) @binding(6) var<storage, read> pages: array<u32>;

@group(0) @binding(7) var<storage, read_write> cache_h: array<atomic<u32>>;

override WG: u32 = 256u;

// Element `at` of the F16 cache = src element i, rounded.
fn store_f16(at: u32, i: u32) {
    let shift = 16u * (at & 1u);
    let word = at >> 1u;
    atomicAnd(&cache_h[word], ~(0xffffu << shift));
    atomicOr(&cache_h[word], f16_bits(src[i]) << shift);
}

// No element: the invocation is past the rows, or its row is out of range.
const NONE: u32 = 0xffffffffu;

// The cache element of src element `i` at consecutive positions, or NONE.
fn consecutive_element(i: u32) -> u32 {
    let pos = select(p.pos_value, run[p.pos_param], p.pos_param != 0xffffffffu);
    // pos + n <= n_ctx, written so that nothing wraps; then pos · w + i < n_ctx · w.
    if (i >= p.n_words || pos > p.n_ctx || p.n_rows > p.n_ctx - pos) {
        return NONE;
    }
    return pos * p.width + i;
}

// The cache element of src element `i` through its row's page, or NONE.
fn paged_element(i: u32) -> u32 {
    if (i >= p.n_words) {
        return NONE;
    }
    let r = i / p.width;
    let t = row_pos[r];
    let s = row_seq[r];
    let page_index = t / p.page_size;
    if (s >= p.n_seq || page_index >= p.max_pages) {
        return NONE;
    }
    let page = pages[s * p.max_pages + page_index];
    if (page >= p.pages_in_cache) {
        return NONE;
    }
    // page · page_size + t % page_size < pages_in_cache · page_size <= n_ctx.
    return (page * p.page_size + t % p.page_size) * p.width + i % p.width;
}

fn invocation(wid: vec3<u32>, lid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return (wid.y * nwg.x + wid.x) * WG + lid.x;
}

@compute @workgroup_size(WG)
fn kv_write(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
            @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = invocation(wid, lid, nwg);
    let at = consecutive_element(i);
    if (at != NONE) {
        cache[at] = src[i];
    }
}

@compute @workgroup_size(WG)
fn kv_write_paged(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
                  @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = invocation(wid, lid, nwg);
    let at = paged_element(i);
    if (at != NONE) {
        cache[at] = src[i];
    }
}

@compute @workgroup_size(WG)
fn kv_write_f16(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
                @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = invocation(wid, lid, nwg);
    let at = consecutive_element(i);
    if (at != NONE) {
        store_f16(at, i);
    }
}

@compute @workgroup_size(WG)
fn kv_write_paged_f16(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
                      @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = invocation(wid, lid, nwg);
    let at = paged_element(i);
    if (at != NONE) {
        store_f16(at, i);
    }
}
