// KV_WRITE: cache[pos + r] = src[r]. One invocation per element, copied as a u32 word so
// that every f32 bit pattern (NaN payloads, subnormals) arrives unchanged.
//
// The host checked pos + n <= n_ctx before anything ran (GpuEngine::check_positions); the
// kernel checks it again, without overflow, so that it never writes out of bounds.

struct Params {
    // n · w: the words to copy.
    n_words: u32,
    // w: words per row.
    width: u32,
    // n: the rows of src.
    n_rows: u32,
    // The rows of the cache.
    n_ctx: u32,
    // The position of src's row 0: a constant, or run-time parameter `pos_param`.
    pos_value: u32,
    pos_param: u32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> src: array<u32>;
@group(0) @binding(2) var<storage, read_write> cache: array<u32>;
@group(0) @binding(3) var<storage, read> run: array<u32>;

override WG: u32 = 256u;

@compute @workgroup_size(WG)
fn kv_write(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
            @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = (wid.y * nwg.x + wid.x) * WG + lid.x;
    let pos = select(p.pos_value, run[p.pos_param], p.pos_param != 0xffffffffu);
    // pos + n <= n_ctx, written so that nothing wraps; then pos · w + i < n_ctx · w.
    if (i >= p.n_words || pos > p.n_ctx || p.n_rows > p.n_ctx - pos) {
        return;
    }
    cache[pos * p.width + i] = src[i];
}
