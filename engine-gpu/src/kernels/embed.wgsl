// EMBED: out[r, j] = decode(table[ids[r]], j), one invocation per output element.
//
// The table is bound in its GPU layout (`array<u32>`, see `layout.rs`: the file's bytes for
// float and Q4/Q8 types, the repacked 2-bit codes plus f32 scales for ternary types), and
// each element is decoded exactly as `memory/src/quant/*` decodes it: the integer code
// converted to f32 times the scale (an f16 widened, or an f32), plus Q4_1's minimum. Those products are exact in f32, so the result is bit for bit the reference's. F32
// and BF16 rows are copied as bits (no float operation, so no flush of subnormals). The output
// is written as bits too.
//
// An id >= vocab writes a row of zeros instead of reading past the table: the kernel cannot
// report errors, and the host (the runtime) validates ids before writing them.
//
// The dtype is the override constant DTYPE, so each dtype is its own pipeline with one path.
// Blocks of 18, 20, 34, 54 and 66 bytes are not word aligned: bytes and halves are extracted
// from the word holding them (every f16 in every layout sits at an even byte offset, so a half
// never straddles two words).

struct Params {
    // Output elements: ids × cols.
    total: u32,
    cols: u32,
    vocab: u32,
    // Bytes of one table row.
    row_bytes: u32,
    // Ternary tables: elements per scale (256 for TQ1_0 / TQ2_0), or 0 for I2_S's one scale.
    scale_block: u32,
    // The table rows bound in this dispatch: `row0 .. row0 + window_rows` (a table larger
    // than one binding is bound as several row windows, one dispatch each; `embed.rs`).
    row0: u32,
    window_rows: u32,
    _pad0: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> table: array<u32>;
@group(0) @binding(2) var<storage, read> ids: array<u32>;
@group(0) @binding(3) var<storage, read_write> out: array<u32>;
// Ternary tables: their scales (part 1 of the layout); other dtypes bind the table again.
@group(0) @binding(4) var<storage, read> scales: array<f32>;

override WG: u32 = 256u;
// 0 F32, 1 F16, 2 BF16, 3 Q4_0, 4 Q4_1, 5 Q8_0, 6 ternary (TQ1_0, TQ2_0, I2_S) (`embed.rs`).
override DTYPE: u32 = 0u;

// Byte `b` of the table.
fn byte_at(b: u32) -> u32 {
    return (table[b >> 2u] >> ((b & 3u) * 8u)) & 0xffu;
}

// The 16 bits at even byte offset `b` of the table.
fn half_bits(b: u32) -> u32 {
    return (table[b >> 2u] >> ((b & 2u) * 8u)) & 0xffffu;
}

// The f16 at even byte offset `b`, widened to f32 (exact).
fn half_at(b: u32) -> f32 {
    return unpack2x16float(half_bits(b)).x;
}

// A small integer code minus `offset`, as f32 (exact).
fn code_f32(code: u32, offset: i32) -> f32 {
    return f32(i32(code) - offset);
}

// The f32 bits of element `j` of table row `row`.
fn decode(row: u32, j: u32) -> u32 {
    let rb = row * p.row_bytes;
    switch DTYPE {
        case 0u: { // F32
            return table[row * p.cols + j];
        }
        case 1u: { // F16
            return bitcast<u32>(half_at(2u * (row * p.cols + j)));
        }
        case 2u: { // BF16: the top half of an f32
            return half_bits(2u * (row * p.cols + j)) << 16u;
        }
        case 3u: { // Q4_0: 18-byte blocks [d f16][16 bytes]; element k: nibble of byte k % 16
            let b = rb + (j / 32u) * 18u;
            let k = j % 32u;
            let q = (byte_at(b + 2u + k % 16u) >> (4u * (k / 16u))) & 0xfu;
            return bitcast<u32>(code_f32(q, 8) * half_at(b));
        }
        case 4u: { // Q4_1: 20-byte blocks [d f16][m f16][16 bytes]; value q·d + m
            let b = rb + (j / 32u) * 20u;
            let k = j % 32u;
            let q = (byte_at(b + 4u + k % 16u) >> (4u * (k / 16u))) & 0xfu;
            return bitcast<u32>(code_f32(q, 0) * half_at(b) + half_at(b + 2u));
        }
        case 5u: { // Q8_0: 34-byte blocks [d f16][32 × i8]
            let b = rb + (j / 32u) * 34u;
            let q = i32(byte_at(b + 2u + j % 32u) << 24u) >> 24u;
            return bitcast<u32>(f32(q) * half_at(b));
        }
        case 6u: { // TQ1_0, TQ2_0, I2_S, repacked at upload (`layout.rs`): 16 2-bit codes per
                   // word, element e % 16 = 4j + b at bits 8b + 2j; f32 scales in part 1
            let e = row * p.cols + j;
            let shift = 8u * ((e % 16u) % 4u) + 2u * ((e % 16u) / 4u);
            let q = (table[e / 16u] >> shift) & 3u;
            var d = scales[0];
            if (p.scale_block != 0u) {
                d = scales[(row * p.cols + j) / p.scale_block];
            }
            return bitcast<u32>(code_f32(q, 1) * d);
        }
        default: {
            return 0u;
        }
    }
}

@compute @workgroup_size(WG)
fn embed(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
         @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = (wid.y * nwg.x + wid.x) * WG + lid.x;
    if (i >= p.total) {
        return;
    }
    let r = i / p.cols;
    let j = i % p.cols;
    let id = ids[r];
    if (id >= p.vocab) {
        // Written once, by the dispatch of the first window.
        if (p.row0 == 0u) {
            out[i] = 0u;
        }
        return;
    }
    if (id < p.row0 || id - p.row0 >= p.window_rows) {
        return; // another window's row
    }
    out[i] = decode(id - p.row0, j);
}
