//! GGUF metadata values: the 13 value types (arrays are in `meta_array.rs`), typed conversions,
//! and the bounds-checked decoder the reader uses.

use std::fmt;

use super::cursor::Cursor;
use super::meta_array::{read_array, MetaArray};
use super::GgufError;

/// The deepest nesting of arrays the reader and writer accept: an array of arrays of u8
/// nests 2 deep. The limit keeps a hostile file from overflowing the stack.
pub const MAX_ARRAY_NESTING: usize = 16;

/// A GGUF metadata value type, with its type id as the discriminant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MetaType {
    /// 0: unsigned 8-bit integer.
    U8 = 0,
    /// 1: signed 8-bit integer.
    I8 = 1,
    /// 2: unsigned 16-bit integer.
    U16 = 2,
    /// 3: signed 16-bit integer.
    I16 = 3,
    /// 4: unsigned 32-bit integer.
    U32 = 4,
    /// 5: signed 32-bit integer.
    I32 = 5,
    /// 6: IEEE 754 binary32.
    F32 = 6,
    /// 7: boolean, one byte 0 or 1.
    Bool = 7,
    /// 8: u64 length and UTF-8 bytes.
    String = 8,
    /// 9: u32 element type, u64 count, elements.
    Array = 9,
    /// 10: unsigned 64-bit integer.
    U64 = 10,
    /// 11: signed 64-bit integer.
    I64 = 11,
    /// 12: IEEE 754 binary64.
    F64 = 12,
}

impl MetaType {
    /// The type for a GGUF type id, or `None` for ids outside 0..=12.
    pub fn from_id(id: u32) -> Option<MetaType> {
        Some(match id {
            0 => MetaType::U8,
            1 => MetaType::I8,
            2 => MetaType::U16,
            3 => MetaType::I16,
            4 => MetaType::U32,
            5 => MetaType::I32,
            6 => MetaType::F32,
            7 => MetaType::Bool,
            8 => MetaType::String,
            9 => MetaType::Array,
            10 => MetaType::U64,
            11 => MetaType::I64,
            12 => MetaType::F64,
            _ => return None,
        })
    }

    /// The GGUF type id.
    pub fn id(self) -> u32 {
        self as u32
    }

    /// The lowercase name (`"u32"`, `"string"`, `"array"`, ...), as gguf-py and llama.cpp
    /// print it.
    pub fn name(self) -> &'static str {
        match self {
            MetaType::U8 => "u8",
            MetaType::I8 => "i8",
            MetaType::U16 => "u16",
            MetaType::I16 => "i16",
            MetaType::U32 => "u32",
            MetaType::I32 => "i32",
            MetaType::F32 => "f32",
            MetaType::Bool => "bool",
            MetaType::String => "string",
            MetaType::Array => "array",
            MetaType::U64 => "u64",
            MetaType::I64 => "i64",
            MetaType::F64 => "f64",
        }
    }

    /// The fewest bytes one value of this type occupies in a file (a string is at least its
    /// 8-byte length, an array at least its 12-byte header). Used to bound counts.
    pub fn min_encoded_size(self) -> u64 {
        match self {
            MetaType::U8 | MetaType::I8 | MetaType::Bool => 1,
            MetaType::U16 | MetaType::I16 => 2,
            MetaType::U32 | MetaType::I32 | MetaType::F32 => 4,
            MetaType::U64 | MetaType::I64 | MetaType::F64 | MetaType::String => 8,
            MetaType::Array => 12,
        }
    }

    /// True for the eight integer types.
    pub fn is_integer(self) -> bool {
        matches!(
            self,
            MetaType::U8
                | MetaType::I8
                | MetaType::U16
                | MetaType::I16
                | MetaType::U32
                | MetaType::I32
                | MetaType::U64
                | MetaType::I64
        )
    }
}

impl fmt::Display for MetaType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One metadata value.
#[derive(Clone, Debug, PartialEq)]
pub enum MetaValue {
    /// u8.
    U8(u8),
    /// i8.
    I8(i8),
    /// u16.
    U16(u16),
    /// i16.
    I16(i16),
    /// u32.
    U32(u32),
    /// i32.
    I32(i32),
    /// u64.
    U64(u64),
    /// i64.
    I64(i64),
    /// f32.
    F32(f32),
    /// f64.
    F64(f64),
    /// bool.
    Bool(bool),
    /// A UTF-8 string.
    String(String),
    /// An array of values of one type.
    Array(MetaArray),
}

macro_rules! from_scalar {
    ($($t:ty => $v:ident),*) => {$(
        impl From<$t> for MetaValue {
            fn from(x: $t) -> MetaValue {
                MetaValue::$v(x)
            }
        }
    )*};
}
from_scalar!(u8 => U8, i8 => I8, u16 => U16, i16 => I16, u32 => U32, i32 => I32, u64 => U64, i64 => I64,
             f32 => F32, f64 => F64, bool => Bool, String => String, MetaArray => Array);

impl From<&str> for MetaValue {
    fn from(s: &str) -> MetaValue {
        MetaValue::String(s.to_string())
    }
}

/// Why a value could not be converted to what a caller asked for; the file layer adds the
/// path and key.
#[derive(Debug)]
pub(crate) enum Mismatch {
    /// Another type.
    WrongType { expected: String, found: String },
    /// An integer that does not fit.
    OutOfRange { value: String, target: &'static str },
}

impl MetaValue {
    /// The value's type.
    pub fn meta_type(&self) -> MetaType {
        match self {
            MetaValue::U8(_) => MetaType::U8,
            MetaValue::I8(_) => MetaType::I8,
            MetaValue::U16(_) => MetaType::U16,
            MetaValue::I16(_) => MetaType::I16,
            MetaValue::U32(_) => MetaType::U32,
            MetaValue::I32(_) => MetaType::I32,
            MetaValue::U64(_) => MetaType::U64,
            MetaValue::I64(_) => MetaType::I64,
            MetaValue::F32(_) => MetaType::F32,
            MetaValue::F64(_) => MetaType::F64,
            MetaValue::Bool(_) => MetaType::Bool,
            MetaValue::String(_) => MetaType::String,
            MetaValue::Array(_) => MetaType::Array,
        }
    }

    /// The type for messages: `"u32"`, or `"array of string"` for arrays.
    pub fn type_description(&self) -> String {
        match self {
            MetaValue::Array(a) => format!("array of {}", a.elem_type()),
            v => v.meta_type().name().to_string(),
        }
    }

    /// Any integer value, widened; `None` for other types.
    pub fn as_i128(&self) -> Option<i128> {
        Some(match *self {
            MetaValue::U8(x) => x.into(),
            MetaValue::I8(x) => x.into(),
            MetaValue::U16(x) => x.into(),
            MetaValue::I16(x) => x.into(),
            MetaValue::U32(x) => x.into(),
            MetaValue::I32(x) => x.into(),
            MetaValue::U64(x) => x.into(),
            MetaValue::I64(x) => x.into(),
            _ => return None,
        })
    }

    /// An F32 or F64 value as f64; `None` for other types.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            MetaValue::F32(x) => Some(x.into()),
            MetaValue::F64(x) => Some(x),
            _ => None,
        }
    }

    /// A string value.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            MetaValue::String(s) => Some(s),
            _ => None,
        }
    }

    /// A bool value.
    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            MetaValue::Bool(b) => Some(b),
            _ => None,
        }
    }

    /// An array value.
    pub fn as_array(&self) -> Option<&MetaArray> {
        match self {
            MetaValue::Array(a) => Some(a),
            _ => None,
        }
    }

    /// Any integer value whose value fits `T` (named `target` in errors).
    pub(crate) fn to_int<T: TryFrom<i128>>(&self, target: &'static str) -> Result<T, Mismatch> {
        let v = self.as_i128().ok_or_else(|| Mismatch::WrongType {
            expected: format!("an integer that fits in {target}"),
            found: self.type_description(),
        })?;
        T::try_from(v).map_err(|_| Mismatch::OutOfRange { value: v.to_string(), target })
    }

    /// An F32 value, or an F64 value that is within f32's range (rounded to nearest).
    pub(crate) fn to_f32(&self) -> Result<f32, Mismatch> {
        let v = self.as_f64().ok_or_else(|| Mismatch::WrongType {
            expected: "f32 or f64".to_string(),
            found: self.type_description(),
        })?;
        let x = v as f32;
        if v.is_finite() && !x.is_finite() {
            return Err(Mismatch::OutOfRange { value: format!("{v:e}"), target: "f32" });
        }
        Ok(x)
    }
}

impl fmt::Display for MetaValue {
    /// Scalars as Rust prints them, strings quoted and escaped, arrays in full as `[a, b]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MetaValue::U8(x) => write!(f, "{x}"),
            MetaValue::I8(x) => write!(f, "{x}"),
            MetaValue::U16(x) => write!(f, "{x}"),
            MetaValue::I16(x) => write!(f, "{x}"),
            MetaValue::U32(x) => write!(f, "{x}"),
            MetaValue::I32(x) => write!(f, "{x}"),
            MetaValue::U64(x) => write!(f, "{x}"),
            MetaValue::I64(x) => write!(f, "{x}"),
            MetaValue::F32(x) => write!(f, "{x:?}"),
            MetaValue::F64(x) => write!(f, "{x:?}"),
            MetaValue::Bool(x) => write!(f, "{x}"),
            MetaValue::String(s) => write!(f, "{s:?}"),
            MetaValue::Array(a) => {
                f.write_str("[")?;
                for (i, v) in a.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{v}")?;
                }
                f.write_str("]")
            }
        }
    }
}

/// Reads one value of type `ty` for `key`. `level` is how many arrays enclose the value
/// (0 for a top-level value).
pub(crate) fn read_value(cur: &mut Cursor<'_>, ty: MetaType, key: &str, level: usize) -> Result<MetaValue, GgufError> {
    let what = || format!("the value of key '{key}'");
    Ok(match ty {
        MetaType::U8 => MetaValue::U8(cur.u8(&what)?),
        MetaType::I8 => MetaValue::I8(cur.i8(&what)?),
        MetaType::U16 => MetaValue::U16(cur.u16(&what)?),
        MetaType::I16 => MetaValue::I16(cur.i16(&what)?),
        MetaType::U32 => MetaValue::U32(cur.u32(&what)?),
        MetaType::I32 => MetaValue::I32(cur.i32(&what)?),
        MetaType::U64 => MetaValue::U64(cur.u64(&what)?),
        MetaType::I64 => MetaValue::I64(cur.i64(&what)?),
        MetaType::F32 => MetaValue::F32(cur.f32(&what)?),
        MetaType::F64 => MetaValue::F64(cur.f64(&what)?),
        MetaType::Bool => {
            let offset = cur.offset();
            match cur.u8(&what)? {
                0 => MetaValue::Bool(false),
                1 => MetaValue::Bool(true),
                value => {
                    return Err(GgufError::InvalidBool {
                        path: cur.path().to_path_buf(),
                        offset,
                        key: key.to_string(),
                        value,
                    })
                }
            }
        }
        MetaType::String => MetaValue::String(cur.string(&what)?.to_string()),
        MetaType::Array => MetaValue::Array(read_array(cur, key, level.saturating_add(1))?),
    })
}

/// Reads the u32 type id of `key`'s value (`what` names it in messages: "value type",
/// "array element type").
pub(crate) fn read_type(cur: &mut Cursor<'_>, key: &str, what: &str) -> Result<MetaType, GgufError> {
    let offset = cur.offset();
    let type_id = cur.u32(&|| format!("the {what} of key '{key}'"))?;
    MetaType::from_id(type_id).ok_or_else(|| GgufError::UnknownMetaType {
        path: cur.path().to_path_buf(),
        offset,
        key: key.to_string(),
        type_id,
    })
}
