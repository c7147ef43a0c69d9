//! Element types: plain scalars and the block-quantized layouts of GGUF.
//!
//! A quantized type stores `block_len()` consecutive elements in `block_bytes()` bytes.
//! Plain types are blocks of one element. I2_S (Microsoft bitnet.cpp) is the one odd type:
//! its 128-element blocks carry no scale; one f32 scale for the whole tensor follows the
//! packed bytes in a 32-byte trailer, so its tensor size is `n/4 + 32`, not a multiple of
//! its block size. The byte layouts themselves live in [`crate::quant`].

use std::fmt;

/// The element type of a tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(non_camel_case_types)] // The ggml names (Q4_0, TQ2_0, I2_S) are what users search for.
pub enum DType {
    /// IEEE 754 binary32.
    F32,
    /// IEEE 754 binary16.
    F16,
    /// bfloat16 (the top 16 bits of an f32).
    BF16,
    /// Signed 8-bit integer.
    I8,
    /// Signed 16-bit integer.
    I16,
    /// Signed 32-bit integer.
    I32,
    /// Unsigned 32-bit integer. Not a GGUF type: token ids and ARGMAX results.
    U32,
    /// 32 elements in 18 bytes: f16 scale, 16 bytes of 4-bit codes; value (q − 8)·d.
    Q4_0,
    /// 32 elements in 20 bytes: f16 scale d, f16 min m, 16 bytes of 4-bit codes; value q·d + m.
    Q4_1,
    /// 32 elements in 34 bytes: f16 scale, 32 × i8; value q·d.
    Q8_0,
    /// Ternary, base-3 packed: 256 elements in 54 bytes (`qs[48]`, `qh[4]`, f16 `d`).
    TQ1_0,
    /// Ternary, 2-bit packed: 256 elements in 66 bytes (`qs[64]`, f16 `d`).
    TQ2_0,
    /// Ternary, Microsoft bitnet.cpp x86 layout: 128 elements in 32 bytes, per-tensor f32
    /// scale in a 32-byte trailer after the packed data.
    I2_S,
}

/// Every dtype, in GGUF type-id order with [`DType::U32`] last.
pub const ALL_DTYPES: [DType; 13] = [
    DType::F32,
    DType::F16,
    DType::Q4_0,
    DType::Q4_1,
    DType::Q8_0,
    DType::I8,
    DType::I16,
    DType::I32,
    DType::BF16,
    DType::TQ1_0,
    DType::TQ2_0,
    DType::I2_S,
    DType::U32,
];

impl DType {
    /// `general.file_type` for a model whose linear weights have this type (llama.cpp's
    /// `llama_ftype`: 0 F32, 1 F16, 2 Q4_0, 3 Q4_1, 7 Q8_0, 32 BF16, 36 TQ1_0, 37 TQ2_0;
    /// bitnet.cpp's 40 I2_S); `None` for a type with no such number.
    pub fn llama_file_type(self) -> Option<u32> {
        Some(match self {
            DType::F32 => 0,
            DType::F16 => 1,
            DType::Q4_0 => 2,
            DType::Q4_1 => 3,
            DType::Q8_0 => 7,
            DType::BF16 => 32,
            DType::TQ1_0 => 36,
            DType::TQ2_0 => 37,
            DType::I2_S => 40,
            _ => return None,
        })
    }

    /// The GGUF / ggml type id, or `None` for types GGUF does not define ([`DType::U32`]).
    pub fn gguf_type_id(self) -> Option<u32> {
        Some(match self {
            DType::F32 => 0,
            DType::F16 => 1,
            DType::Q4_0 => 2,
            DType::Q4_1 => 3,
            DType::Q8_0 => 8,
            DType::I8 => 24,
            DType::I16 => 25,
            DType::I32 => 26,
            DType::BF16 => 30,
            DType::TQ1_0 => 34,
            DType::TQ2_0 => 35,
            DType::I2_S => 36,
            DType::U32 => return None,
        })
    }

    /// The dtype for a GGUF type id, or `None` when purebee does not support it
    /// (see [`ggml_type_name`] for a name to put in the error).
    pub fn from_gguf_type_id(id: u32) -> Option<DType> {
        ALL_DTYPES.into_iter().find(|d| d.gguf_type_id() == Some(id))
    }

    /// Elements per block (1 for plain types).
    pub fn block_len(self) -> usize {
        match self {
            DType::F32 | DType::F16 | DType::BF16 | DType::I8 | DType::I16 | DType::I32 | DType::U32 => 1,
            DType::Q4_0 | DType::Q4_1 | DType::Q8_0 => 32,
            DType::TQ1_0 | DType::TQ2_0 => 256,
            DType::I2_S => 128,
        }
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> usize {
        match self {
            DType::I8 => 1,
            DType::F16 | DType::BF16 | DType::I16 => 2,
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::Q4_0 => 18,
            DType::Q4_1 => 20,
            DType::Q8_0 => 34,
            DType::TQ1_0 => 54,
            DType::TQ2_0 => 66,
            DType::I2_S => 32,
        }
    }

    /// Bytes that follow the blocks of a whole tensor (I2_S's scale trailer; 0 otherwise).
    pub fn tensor_trailer_bytes(self) -> usize {
        match self {
            DType::I2_S => 32,
            _ => 0,
        }
    }

    /// Bytes of one row of `cols` elements, or `None` when `cols` is not a multiple of the
    /// block length or the size overflows. For I2_S this excludes the tensor trailer.
    pub fn row_bytes(self, cols: usize) -> Option<usize> {
        if !cols.is_multiple_of(self.block_len()) {
            return None;
        }
        (cols / self.block_len()).checked_mul(self.block_bytes())
    }

    /// Bytes of a whole tensor of `rows` rows of `cols` elements (trailer included), or
    /// `None` when the row is not whole blocks or the size overflows.
    pub fn tensor_bytes(self, rows: usize, cols: usize) -> Option<usize> {
        self.row_bytes(cols)?.checked_mul(rows)?.checked_add(self.tensor_trailer_bytes())
    }

    /// True for the block-quantized types (including the ternary ones).
    pub fn is_quantized(self) -> bool {
        self.block_len() > 1
    }

    /// True for the ternary types BITLINEAR takes: I2_S, TQ1_0, TQ2_0.
    pub fn is_ternary(self) -> bool {
        matches!(self, DType::I2_S | DType::TQ1_0 | DType::TQ2_0)
    }

    /// True for the types that decode to floats: F32, F16, BF16 and every quantized type.
    pub fn is_float_like(self) -> bool {
        matches!(self, DType::F32 | DType::F16 | DType::BF16) || self.is_quantized()
    }

    /// The name used by ggml and GGUF tools (`"F32"`, `"Q4_0"`, `"TQ2_0"`, `"I2_S"`, ...).
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "F32",
            DType::F16 => "F16",
            DType::BF16 => "BF16",
            DType::I8 => "I8",
            DType::I16 => "I16",
            DType::I32 => "I32",
            DType::U32 => "U32",
            DType::Q4_0 => "Q4_0",
            DType::Q4_1 => "Q4_1",
            DType::Q8_0 => "Q8_0",
            DType::TQ1_0 => "TQ1_0",
            DType::TQ2_0 => "TQ2_0",
            DType::I2_S => "I2_S",
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The ggml name of a GGUF type id purebee may not support, for error messages
/// (`"Q4_K"` for 12), or `None` for ids ggml never defined.
pub fn ggml_type_name(id: u32) -> Option<&'static str> {
    const NAMES: [&str; 37] = [
        "F32", "F16", "Q4_0", "Q4_1", "", "", "Q5_0", "Q5_1", "Q8_0", "Q8_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K",
        "Q8_K", "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS", "I8", "I16", "I32",
        "I64", "F64", "IQ1_M", "BF16", "", "", "", "TQ1_0", "TQ2_0", "I2_S",
    ];
    NAMES.get(id as usize).copied().filter(|n| !n.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gguf_ids_round_trip_and_names_agree_with_ggml() {
        for d in ALL_DTYPES {
            match d.gguf_type_id() {
                Some(id) => {
                    assert_eq!(DType::from_gguf_type_id(id), Some(d));
                    assert_eq!(ggml_type_name(id), Some(d.name()));
                }
                None => assert_eq!(d, DType::U32),
            }
        }
        assert_eq!(DType::from_gguf_type_id(12), None);
        assert_eq!(ggml_type_name(12), Some("Q4_K"));
        assert_eq!(ggml_type_name(4), None);
        assert_eq!(ggml_type_name(999), None);
    }

    #[test]
    fn tensor_sizes_follow_the_block_layouts() {
        assert_eq!(DType::F16.tensor_bytes(3, 5), Some(30));
        assert_eq!(DType::Q4_0.tensor_bytes(2, 64), Some(2 * 2 * 18));
        assert_eq!(DType::TQ2_0.tensor_bytes(256, 256), Some(256 * 66));
        assert_eq!(DType::TQ1_0.tensor_bytes(1, 512), Some(2 * 54));
        // I2_S: n/4 packed bytes plus the 32-byte scale trailer.
        assert_eq!(DType::I2_S.tensor_bytes(256, 256), Some(256 * 256 / 4 + 32));
        assert_eq!(DType::Q8_0.row_bytes(33), None);
        assert_eq!(DType::F32.tensor_bytes(usize::MAX, 2), None);
    }
}
