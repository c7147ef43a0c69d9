// TOP_K: per row, the first k elements in the ISA's rank order (numbers before NaN, larger
// values first, equal values by lower index), as values (x's bits, copied) and indices.
//
// Every element is a distinct 64-bit key (hi, lo) whose lexicographic unsigned order is the
// rank order: hi is the order-preserving key of the value (as in argmax.wgsl; NaN is 0, below
// every number), lo is !index (a lower index is a larger lo). (0, 0) is below every real key
// (an index is never 0xffffffff) and stands for "nothing".
//
// One level of a selection: the input of each row (x itself, FROM_X = 1, or the candidates of
// the previous level) is cut into slices of WG·E keys, one workgroup each. A workgroup loads E
// keys per invocation, each invocation sorts its own keys (descending, private memory), then
// min(k, slice length) rounds each take the largest head over the workgroup (a tree in
// workgroup memory) and advance the invocation that held it. A slice's winners go to
// cand_out in rank order; at the last level (FINAL = 1, one slice per row) to values and ids.

struct Params {
    // Rows of this dispatch (a window of x's rows).
    rows: u32,
    // The window's first row, for the outputs.
    row0: u32,
    // Elements per row of x.
    m: u32,
    // Input keys per row (m at the first level).
    count: u32,
    k: u32,
    // Output keys per row of a non-final level.
    out_count: u32,
    // Workgroups per row.
    slices: u32,
    _pad: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<u32>;
@group(0) @binding(2) var<storage, read> cand_in: array<vec2<u32>>;
@group(0) @binding(3) var<storage, read_write> cand_out: array<vec2<u32>>;
@group(0) @binding(4) var<storage, read_write> values: array<u32>;
@group(0) @binding(5) var<storage, read_write> ids: array<u32>;

// Invocations per workgroup, a power of two ≤ 256.
override WG: u32 = 256u;
// 1: the input is x; 0: the candidates of the previous level.
override FROM_X: u32 = 1u;
// 1: one slice per row, write values and ids; 0: write candidates.
override FINAL: u32 = 1u;

// Keys per invocation.
const E: u32 = 16u;

var<workgroup> red: array<vec2<u32>, 256>;

// Keys are (argmax_key of the value, !index): larger first, then lower index.
fn above(a: vec2<u32>, b: vec2<u32>) -> bool {
    return a.x > b.x || (a.x == b.x && a.y > b.y);
}

@compute @workgroup_size(WG)
fn top_k(
    @builtin(local_invocation_index) lidx: u32,
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
) {
    let g = wid.y * nwg.x + wid.x;
    let row = g / p.slices;
    let slice = g % p.slices;
    if (row >= p.rows) {
        return;
    }
    let start = slice * (WG * E);
    let len = min(WG * E, p.count - start);

    var keys = array<vec2<u32>, E>();
    for (var e = 0u; e < E; e = e + 1u) {
        let j = lidx + e * WG;
        var key = vec2<u32>(0u, 0u);
        if (j < len) {
            let i = start + j;
            if (FROM_X == 1u) {
                key = vec2<u32>(argmax_key(x[row * p.m + i]), ~i);
            } else {
                key = cand_in[row * p.count + i];
            }
        }
        keys[e] = key;
    }
    // Insertion sort, largest first. keys[b − 1] is read only after b > 0 is known: written
    // as `while (b > 0u && above(v, keys[b - 1u]))` (a call on the right of `&&`, whose
    // argument indexes 0xffffffff at b = 0), llvmpipe through wgpu's GL backend returned
    // ties out of rank order (tests/tests/top_k.rs failed there; Vulkan was right).
    for (var a = 1u; a < E; a = a + 1u) {
        let v = keys[a];
        var b = a;
        loop {
            if (b == 0u) {
                break;
            }
            let prev = keys[b - 1u];
            if (!above(v, prev)) {
                break;
            }
            keys[b] = prev;
            b = b - 1u;
        }
        keys[b] = v;
    }

    let n_out = min(p.k, len);
    var next = 0u;
    for (var j = 0u; j < n_out; j = j + 1u) {
        var head = vec2<u32>(0u, 0u);
        if (next < E) {
            head = keys[next];
        }
        red[lidx] = head;
        workgroupBarrier();
        for (var s = WG / 2u; s > 0u; s = s / 2u) {
            if (lidx < s && above(red[lidx + s], red[lidx])) {
                red[lidx] = red[lidx + s];
            }
            workgroupBarrier();
        }
        let win = red[0];
        // Keys are distinct: exactly one invocation holds the winner.
        if (next < E && all(head == win)) {
            next = next + 1u;
            if (FINAL == 1u) {
                let i = ~win.y;
                let o = (p.row0 + row) * p.k + j;
                values[o] = x[row * p.m + i];
                ids[o] = i;
            } else {
                cand_out[row * p.out_count + slice * p.k + j] = win;
            }
        }
        workgroupBarrier();
    }
}

// The `lse` entry: each row's log-sum-exp (TOP_K's optional output), one workgroup per row.
// Invocation i folds elements i, i + WG, i + 2·WG, ... into a running (max, Σ e^(x − max))
// (online: a new maximum rescales the sum); the WG partial pairs are then merged in a fixed
// tree in workgroup memory, so a row's bits depend only on its length. NaN and +inf are
// flags (bit 0, bit 1), −inf elements add nothing; a sum of 0 means "no finite element"
// (a non-empty sum is at least 1: its largest term is e^0). The result is NaN, +inf, −inf
// (no finite element) or max + log(sum), as TOP_K's rustdoc states, as bits.
@group(0) @binding(6) var<storage, read_write> lse_out: array<u32>;

var<workgroup> lse_m: array<f32, 256>;
var<workgroup> lse_s: array<f32, 256>;
var<workgroup> lse_f: array<u32, 256>;

// Merges (m2, s2) into (m1, s1); a sum of 0 is empty.
fn lse_merge(a: vec2<f32>, b: vec2<f32>) -> vec2<f32> {
    if (b.y == 0.0) {
        return a;
    }
    if (a.y == 0.0) {
        return b;
    }
    let m = max(a.x, b.x);
    return vec2<f32>(m, a.y * exp(a.x - m) + b.y * exp(b.x - m));
}

@compute @workgroup_size(WG)
fn lse(
    @builtin(local_invocation_index) lidx: u32,
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
) {
    let row = wid.y * nwg.x + wid.x;
    // Uniform per workgroup: every invocation of a workgroup returns, or none does.
    if (row >= p.rows) {
        return;
    }
    var acc = vec2<f32>(0.0, 0.0);
    var flags = 0u;
    for (var i = lidx; i < p.m; i = i + WG) {
        let bits = x[row * p.m + i];
        if ((bits & 0x7fffffffu) > 0x7f800000u) {
            flags = flags | 1u;
        } else if (bits == 0x7f800000u) {
            flags = flags | 2u;
        } else if (bits != 0xff800000u) {
            let v = bitcast<f32>(bits);
            if (acc.y == 0.0) {
                acc = vec2<f32>(v, 1.0);
            } else if (v > acc.x) {
                acc = vec2<f32>(v, acc.y * exp(acc.x - v) + 1.0);
            } else {
                acc.y = acc.y + exp(v - acc.x);
            }
        }
    }
    lse_m[lidx] = acc.x;
    lse_s[lidx] = acc.y;
    lse_f[lidx] = flags;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s / 2u) {
        if (lidx < s) {
            let merged = lse_merge(vec2<f32>(lse_m[lidx], lse_s[lidx]), vec2<f32>(lse_m[lidx + s], lse_s[lidx + s]));
            lse_m[lidx] = merged.x;
            lse_s[lidx] = merged.y;
            lse_f[lidx] = lse_f[lidx] | lse_f[lidx + s];
        }
        workgroupBarrier();
    }
    if (lidx == 0u) {
        let f = lse_f[0];
        var out = 0xff800000u;
        if ((f & 1u) != 0u) {
            out = 0x7fc00000u;
        } else if ((f & 2u) != 0u) {
            out = 0x7f800000u;
        } else if (lse_s[0] != 0.0) {
            out = bitcast<u32>(lse_m[0] + log(lse_s[0]));
        }
        lse_out[p.row0 + row] = out;
    }
}
