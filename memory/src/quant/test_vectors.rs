//! Test vectors: raw bytes cut from the committed fixtures and from gguf-py, under `testdata/`.
//!
//! Two sets, each written by a script quoted in full below (regenerate a script with
//! `sed -n '/BEGIN NAME/,/END NAME/p' memory/src/quant/test_vectors.rs | sed '1d;$d;s|^// \{0,1\}||'`,
//! NAME being the script's file name):
//!
//! 1. **Fixture rows** (`extract_fixture_rows.py`, Python standard library only, run as
//!    `python3 extract_fixture_rows.py fixtures/bitnet-tiny memory/src/quant/testdata`): for
//!    `blk.0.attn_q.weight` (ne [256, 256]: 256 rows of 256) and `blk.0.ffn_down.weight`
//!    (ne [512, 256]: 256 rows of 512), the bytes of rows 0 and 1 as stored in
//!    `tiny_b158_f32.gguf`, `tiny_b158_i2_s.gguf` (plus its 32-byte scale trailer, read at
//!    n/4 past the tensor start), `tiny_b158_tq1_0.gguf`, `tiny_b158_tq2_0.gguf` and
//!    `tiny_bitnet_tq2_0_scaletensors.gguf` (d = 1, plus its `<name>.scale` F32 [1] tensor).
//!    All the fixture files hold the same weights W = s·T (fixtures/README.md § 1), so every
//!    ternary row must decode to the F32 rows bit for bit. Before committing, the bytes were
//!    also decoded with the fixture tools' own decoder (`decode_i2_s`, `decode_tq1_0`,
//!    `decode_tq2_0` of `ref_bitnet_numpy.py`), which gave the F32 rows exactly.
//! 2. **gguf-py oracle** (`gguf_py_oracle.py`, numpy + `gguf==0.19.0`, the gguf-py version that
//!    wrote the fixtures, run as `python3 gguf_py_oracle.py memory/src/quant/testdata`):
//!    seeded random blocks of Q4_0, Q4_1, Q8_0 (4 blocks each), TQ1_0 and TQ2_0 (3 blocks
//!    each), with the f16 scales set to a subnormal, a negative and a positive normal value
//!    and then random finite ones, and gguf-py's `quants.dequantize` of them as little-endian
//!    f32. gguf-py's numpy decoders are written independently of this crate (and match ggml's
//!    C reference); random bytes include TQ2_0 code 3 and TQ1_0 bytes no encoder writes.
//!
// ---- BEGIN extract_fixture_rows.py ----
// # Writes the first two rows of two weights of the tiny BitNet fixtures as raw bytes.
// # Usage: python3 extract_fixture_rows.py FIXTURE_DIR OUT_DIR   (Python 3 standard library only)
// import pathlib, struct, sys
//
// fix, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
// FILES = {"f32": "tiny_b158_f32.gguf", "i2_s": "tiny_b158_i2_s.gguf", "tq1_0": "tiny_b158_tq1_0.gguf",
//          "tq2_0": "tiny_b158_tq2_0.gguf", "tq2_0_d1": "tiny_bitnet_tq2_0_scaletensors.gguf"}
// TYPES = {"f32": 0, "i2_s": 36, "tq1_0": 34, "tq2_0": 35, "tq2_0_d1": 35}
// ROW_BYTES = {0: lambda c: 4 * c, 36: lambda c: c // 4, 34: lambda c: c // 256 * 54, 35: lambda c: c // 256 * 66}
// SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
//
// def read_gguf(path):
//     """-> (file bytes, {name: (type id, ne, absolute data offset)}), following docs/formats.md's GGUF section."""
//     b, pos = path.read_bytes(), 0
//     def take(fmt):
//         nonlocal pos
//         v = struct.unpack_from(fmt, b, pos)[0]
//         pos += struct.calcsize(fmt)
//         return v
//     def string():
//         nonlocal pos
//         n = take("<Q")
//         pos += n
//         return b[pos - n:pos].decode()
//     def value(vt):
//         if vt in SCALAR:
//             return take(SCALAR[vt])
//         if vt == 8:
//             return string()
//         et, n = take("<I"), take("<Q")
//         return [value(et) for _ in range(n)]
//     assert b[:4] == b"GGUF"
//     pos = 4
//     assert take("<I") in (2, 3)
//     n_tensors, n_kv = take("<Q"), take("<Q")
//     align = 32
//     for _ in range(n_kv):
//         key = string()
//         v = value(take("<I"))
//         if key == "general.alignment":
//             align = v
//     infos = []
//     for _ in range(n_tensors):
//         name = string()
//         ne = [take("<Q") for _ in range(take("<I"))]
//         infos.append((name, take("<I"), ne, take("<Q")))
//     data0 = (pos + align - 1) // align * align
//     return b, {name: (tid, ne, data0 + off) for name, tid, ne, off in infos}
//
// for short in ("attn_q", "ffn_down"):
//     name = f"blk.0.{short}.weight"
//     for fmt, file in FILES.items():
//         b, ts = read_gguf(fix / file)
//         tid, (cols, rows), start = ts[name]
//         assert tid == TYPES[fmt], (file, name, tid)
//         rb = ROW_BYTES[tid](cols)
//         (out / f"{short}_{fmt}_rows01.bin").write_bytes(b[start:start + 2 * rb])
//         if fmt == "i2_s":
//             n = rows * cols
//             (out / f"{short}_i2_s_trailer.bin").write_bytes(b[start + n // 4:start + n // 4 + 32])
//         if fmt == "tq2_0_d1":
//             stid, sne, sstart = ts[f"blk.0.{short}.scale"]
//             assert stid == 0 and sne == [1]
//             (out / f"{short}_tq2_0_d1_scale.bin").write_bytes(b[sstart:sstart + 4])
//         print(f"{file} {name} ne={[cols, rows]} type={tid} data offset={start} row bytes={rb}")
// ---- END extract_fixture_rows.py ----
//
// ---- BEGIN gguf_py_oracle.py ----
// # Random blocks of Q4_0, Q4_1, Q8_0, TQ1_0 and TQ2_0 and gguf-py's dequantization of them.
// # Usage: python3 gguf_py_oracle.py OUT_DIR   (needs numpy and gguf==0.19.0; seeded, so reruns match)
// import pathlib, sys
// import numpy as np
// from gguf import GGMLQuantizationType as T, quants
//
// out = pathlib.Path(sys.argv[1])
// rng = np.random.default_rng(20250101)
// # Per block, the f16 bit patterns of d (and of Q4_1's m): a subnormal, a negative normal, a
// # positive normal, then random finite values.
// SPECIAL = [0x0201, 0xB555, 0x3C00]
// for name, qt, n_blocks, block_bytes, f16_fields in (("q4_0", T.Q4_0, 4, 18, [0]), ("q4_1", T.Q4_1, 4, 20, [0, 2]),
//                                                    ("q8_0", T.Q8_0, 4, 34, [0]), ("tq1_0", T.TQ1_0, 3, 54, [52]),
//                                                    ("tq2_0", T.TQ2_0, 3, 66, [64])):
//     blocks = rng.integers(0, 256, size=(n_blocks, block_bytes), dtype=np.uint8)
//     for b in range(n_blocks):
//         for k, at in enumerate(f16_fields):
//             bits = SPECIAL[(b + k) % 3] if b < 3 else int(np.float16(rng.uniform(-4, 4)).view(np.uint16))
//             blocks[b, at:at + 2] = np.array([bits], dtype="<u2").view(np.uint8)
//     values = quants.dequantize(blocks.reshape(-1), qt).astype("<f4")
//     (out / f"{name}_random_blocks.bin").write_bytes(blocks.tobytes())
//     (out / f"{name}_random_blocks_gguf_py.f32.bin").write_bytes(values.tobytes())
//     print(name, blocks.shape, values.shape, values[:4])
// ---- END gguf_py_oracle.py ----

use crate::DType;

/// Rows 0 and 1 of one fixture weight, in every format the fixtures hold.
pub(crate) struct FixtureRows {
    /// The tensor name in the fixtures.
    pub name: &'static str,
    /// Its row length (ne0).
    pub cols: usize,
    /// Rows 0 and 1 of `tiny_b158_f32.gguf`: 2·cols little-endian f32.
    pub f32: &'static [u8],
    /// Rows 0 and 1 of `tiny_b158_i2_s.gguf`: 2·cols/4 bytes.
    pub i2_s: &'static [u8],
    /// The 32-byte trailer of the whole I2_S tensor.
    pub i2_s_trailer: &'static [u8],
    /// Rows 0 and 1 of `tiny_b158_tq1_0.gguf`.
    pub tq1_0: &'static [u8],
    /// Rows 0 and 1 of `tiny_b158_tq2_0.gguf`.
    pub tq2_0: &'static [u8],
    /// Rows 0 and 1 of `tiny_bitnet_tq2_0_scaletensors.gguf` (every block d = 1).
    pub tq2_0_d1: &'static [u8],
    /// That file's `<name>.scale` tensor: one little-endian f32.
    pub tq2_0_d1_scale: &'static [u8],
}

macro_rules! fixture_rows {
    ($name:literal, $short:literal, $cols:literal) => {
        FixtureRows {
            name: $name,
            cols: $cols,
            f32: include_bytes!(concat!("testdata/", $short, "_f32_rows01.bin")),
            i2_s: include_bytes!(concat!("testdata/", $short, "_i2_s_rows01.bin")),
            i2_s_trailer: include_bytes!(concat!("testdata/", $short, "_i2_s_trailer.bin")),
            tq1_0: include_bytes!(concat!("testdata/", $short, "_tq1_0_rows01.bin")),
            tq2_0: include_bytes!(concat!("testdata/", $short, "_tq2_0_rows01.bin")),
            tq2_0_d1: include_bytes!(concat!("testdata/", $short, "_tq2_0_d1_rows01.bin")),
            tq2_0_d1_scale: include_bytes!(concat!("testdata/", $short, "_tq2_0_d1_scale.bin")),
        }
    };
}

/// `blk.0.attn_q.weight` (256 × 256) and `blk.0.ffn_down.weight` (256 rows of 512).
pub(crate) const FIXTURE_ROWS: [FixtureRows; 2] =
    [fixture_rows!("blk.0.attn_q.weight", "attn_q", 256), fixture_rows!("blk.0.ffn_down.weight", "ffn_down", 512)];

/// Random blocks of one dtype and gguf-py's dequantization of them.
pub(crate) struct OracleBlocks {
    /// The dtype.
    pub dtype: DType,
    /// Whole blocks, back to back.
    pub blocks: &'static [u8],
    /// gguf-py's values: little-endian f32, `block_len` per block.
    pub values: &'static [u8],
}

macro_rules! oracle {
    ($dtype:expr, $short:literal) => {
        OracleBlocks {
            dtype: $dtype,
            blocks: include_bytes!(concat!("testdata/", $short, "_random_blocks.bin")),
            values: include_bytes!(concat!("testdata/", $short, "_random_blocks_gguf_py.f32.bin")),
        }
    };
}

/// One entry per block format gguf-py 0.19.0 can dequantize (it has no I2_S).
pub(crate) const ORACLE: [OracleBlocks; 5] = [
    oracle!(DType::Q4_0, "q4_0"),
    oracle!(DType::Q4_1, "q4_1"),
    oracle!(DType::Q8_0, "q8_0"),
    oracle!(DType::TQ1_0, "tq1_0"),
    oracle!(DType::TQ2_0, "tq2_0"),
];

/// Little-endian f32s from bytes (a multiple of 4).
pub(crate) fn le_f32s(bytes: &[u8]) -> Vec<f32> {
    assert_eq!(bytes.len() % 4, 0, "test vector is not whole f32s");
    bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}
