//! GGUF metadata arrays, stored compactly.
//!
//! A tokenizer's arrays are the bulk of a GGUF file's metadata: SmolLM2's 49,152 tokens,
//! 48,900 merges and 49,152 token types. Held as one [`MetaValue`] per element they took
//! 32 bytes apiece plus a heap string each, 5.5 MB for a 98 MB model. Here scalars are kept
//! as their little-endian bytes (as in the file) and strings end to end in one buffer.

use super::cursor::Cursor;
use super::metadata::{read_type, MetaType, MetaValue, MAX_ARRAY_NESTING};
use super::{GgufError, MetaArrayTypeMismatch};

/// An array value: every element has type [`MetaArray::elem_type`]; elements may
/// themselves be arrays. Equality compares scalars bit for bit (a NaN equals the same NaN;
/// 0.0 and -0.0 differ), as a file round trip must.
#[derive(Clone, Debug, PartialEq)]
pub struct MetaArray {
    elem_type: MetaType,
    items: Items,
}

#[derive(Clone, Debug, PartialEq)]
enum Items {
    /// Each scalar's little-endian bytes, [`scalar_size`] apiece; a bool is one byte, 0 or 1.
    Scalars(Vec<u8>),
    /// The strings end to end; string `i` ends at `ends[i]`.
    Strings { text: String, ends: Vec<usize> },
    /// Arrays.
    Arrays(Vec<MetaArray>),
}

/// The bytes one scalar of `t` takes in a file and in [`Items::Scalars`]; `None` for
/// strings and arrays.
fn scalar_size(t: MetaType) -> Option<usize> {
    match t {
        MetaType::U8 | MetaType::I8 | MetaType::Bool => Some(1),
        MetaType::U16 | MetaType::I16 => Some(2),
        MetaType::U32 | MetaType::I32 | MetaType::F32 => Some(4),
        MetaType::U64 | MetaType::I64 | MetaType::F64 => Some(8),
        MetaType::String | MetaType::Array => None,
    }
}

/// A scalar's little-endian bytes; `None` for strings and arrays.
fn scalar_bytes(v: &MetaValue) -> Option<Vec<u8>> {
    Some(match *v {
        MetaValue::U8(x) => x.to_le_bytes().to_vec(),
        MetaValue::I8(x) => x.to_le_bytes().to_vec(),
        MetaValue::U16(x) => x.to_le_bytes().to_vec(),
        MetaValue::I16(x) => x.to_le_bytes().to_vec(),
        MetaValue::U32(x) => x.to_le_bytes().to_vec(),
        MetaValue::I32(x) => x.to_le_bytes().to_vec(),
        MetaValue::U64(x) => x.to_le_bytes().to_vec(),
        MetaValue::I64(x) => x.to_le_bytes().to_vec(),
        MetaValue::F32(x) => x.to_le_bytes().to_vec(),
        MetaValue::F64(x) => x.to_le_bytes().to_vec(),
        MetaValue::Bool(x) => vec![u8::from(x)],
        MetaValue::String(_) | MetaValue::Array(_) => return None,
    })
}

/// The scalar of type `t` whose little-endian bytes are `b` (`b.len()` is `t`'s size).
fn scalar_from(t: MetaType, b: &[u8]) -> Option<MetaValue> {
    fn le<const N: usize>(b: &[u8]) -> Option<[u8; N]> {
        b.try_into().ok()
    }
    Some(match t {
        MetaType::U8 => MetaValue::U8(u8::from_le_bytes(le(b)?)),
        MetaType::I8 => MetaValue::I8(i8::from_le_bytes(le(b)?)),
        MetaType::U16 => MetaValue::U16(u16::from_le_bytes(le(b)?)),
        MetaType::I16 => MetaValue::I16(i16::from_le_bytes(le(b)?)),
        MetaType::U32 => MetaValue::U32(u32::from_le_bytes(le(b)?)),
        MetaType::I32 => MetaValue::I32(i32::from_le_bytes(le(b)?)),
        MetaType::U64 => MetaValue::U64(u64::from_le_bytes(le(b)?)),
        MetaType::I64 => MetaValue::I64(i64::from_le_bytes(le(b)?)),
        MetaType::F32 => MetaValue::F32(f32::from_le_bytes(le(b)?)),
        MetaType::F64 => MetaValue::F64(f64::from_le_bytes(le(b)?)),
        MetaType::Bool => MetaValue::Bool(b.first()? != &0),
        MetaType::String | MetaType::Array => return None,
    })
}

impl MetaArray {
    /// An empty array of `elem_type`.
    pub fn empty(elem_type: MetaType) -> MetaArray {
        let items = match elem_type {
            MetaType::String => Items::Strings { text: String::new(), ends: Vec::new() },
            MetaType::Array => Items::Arrays(Vec::new()),
            _ => Items::Scalars(Vec::new()),
        };
        MetaArray { elem_type, items }
    }

    /// An array of `elem_type` holding `values`, or which value has another type.
    pub fn new(elem_type: MetaType, values: Vec<MetaValue>) -> Result<MetaArray, MetaArrayTypeMismatch> {
        let mut a = MetaArray::empty(elem_type);
        values.into_iter().try_for_each(|v| a.push(v))?;
        Ok(a)
    }

    /// Appends `value`, which must have the array's element type.
    pub fn push(&mut self, value: MetaValue) -> Result<(), MetaArrayTypeMismatch> {
        let mismatch = MetaArrayTypeMismatch { index: self.len(), expected: self.elem_type, found: value.meta_type() };
        match (&mut self.items, value) {
            _ if mismatch.found != mismatch.expected => return Err(mismatch),
            (Items::Strings { text, ends }, MetaValue::String(s)) => {
                text.push_str(&s);
                ends.push(text.len());
            }
            (Items::Arrays(arrays), MetaValue::Array(a)) => arrays.push(a),
            (Items::Scalars(bytes), v) => bytes.extend(scalar_bytes(&v).ok_or(mismatch)?),
            // The element type chose the items' kind, so no other pair has equal types.
            _ => return Err(mismatch),
        }
        Ok(())
    }

    /// An array of strings.
    pub fn of_strings<S: Into<String>>(values: impl IntoIterator<Item = S>) -> MetaArray {
        let (mut text, mut ends) = (String::new(), Vec::new());
        for s in values {
            text.push_str(&s.into());
            ends.push(text.len());
        }
        MetaArray { elem_type: MetaType::String, items: Items::Strings { text, ends } }
    }

    /// An array of i32.
    pub fn of_i32(values: impl IntoIterator<Item = i32>) -> MetaArray {
        let bytes = values.into_iter().flat_map(i32::to_le_bytes).collect();
        MetaArray { elem_type: MetaType::I32, items: Items::Scalars(bytes) }
    }

    /// An array of u32.
    pub fn of_u32(values: impl IntoIterator<Item = u32>) -> MetaArray {
        let bytes = values.into_iter().flat_map(u32::to_le_bytes).collect();
        MetaArray { elem_type: MetaType::U32, items: Items::Scalars(bytes) }
    }

    /// An array of f32.
    pub fn of_f32(values: impl IntoIterator<Item = f32>) -> MetaArray {
        let bytes = values.into_iter().flat_map(f32::to_le_bytes).collect();
        MetaArray { elem_type: MetaType::F32, items: Items::Scalars(bytes) }
    }

    /// The type of every element.
    pub fn elem_type(&self) -> MetaType {
        self.elem_type
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        match &self.items {
            Items::Scalars(bytes) => bytes.len() / scalar_size(self.elem_type).unwrap_or(1),
            Items::Strings { ends, .. } => ends.len(),
            Items::Arrays(arrays) => arrays.len(),
        }
    }

    /// True when the array has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Element `i` as a value of its own (a string or an array is copied); `None` past the end.
    pub fn get(&self, i: usize) -> Option<MetaValue> {
        match &self.items {
            Items::Scalars(bytes) => {
                let size = scalar_size(self.elem_type)?;
                scalar_from(self.elem_type, bytes.get(i.checked_mul(size)?..)?.get(..size)?)
            }
            Items::Strings { .. } => self.str_at(i).map(|s| MetaValue::String(s.to_string())),
            Items::Arrays(arrays) => arrays.get(i).cloned().map(MetaValue::Array),
        }
    }

    /// Every element, in file order, as [`MetaArray::get`] gives them.
    pub fn iter(&self) -> impl Iterator<Item = MetaValue> + '_ {
        (0..self.len()).filter_map(|i| self.get(i))
    }

    /// String `i` of an array of strings; `None` past the end or for other arrays.
    pub fn str_at(&self, i: usize) -> Option<&str> {
        let Items::Strings { text, ends } = &self.items else { return None };
        let start = if i == 0 { 0 } else { *ends.get(i - 1)? };
        text.get(start..*ends.get(i)?)
    }

    /// The strings of an array of strings, in order; `None` for other arrays.
    pub fn strs(&self) -> Option<Strs<'_>> {
        matches!(self.items, Items::Strings { .. }).then_some(Strs { array: self, next: 0, end: self.len() })
    }

    /// The elements of an array of arrays; `None` for other arrays.
    pub fn arrays(&self) -> Option<&[MetaArray]> {
        match &self.items {
            Items::Arrays(arrays) => Some(arrays),
            _ => None,
        }
    }

    /// The elements' little-endian bytes, as a file stores them, for an array of scalars;
    /// `None` for strings and arrays.
    pub(crate) fn scalar_bytes(&self) -> Option<&[u8]> {
        match &self.items {
            Items::Scalars(bytes) => Some(bytes),
            _ => None,
        }
    }

    /// How deep arrays nest in this array: 1 for an array of scalars, 2 for an array of
    /// arrays of scalars. An empty array of arrays still declares a second level.
    pub fn nesting_depth(&self) -> usize {
        let inner = self.arrays().map_or(0, |arrays| arrays.iter().map(MetaArray::nesting_depth).max().unwrap_or(1));
        inner.saturating_add(1)
    }
}

/// The strings of an array of strings, borrowed ([`MetaArray::strs`]).
#[derive(Clone, Debug)]
pub struct Strs<'a> {
    array: &'a MetaArray,
    next: usize,
    end: usize,
}

impl<'a> Iterator for Strs<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        let s = self.array.str_at(self.next).filter(|_| self.next < self.end)?;
        self.next += 1;
        Some(s)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.end.saturating_sub(self.next);
        (n, Some(n))
    }
}

impl ExactSizeIterator for Strs<'_> {}

/// Reads an array header and its elements; `level` is this array's nesting level (1 for a
/// top-level array).
pub(crate) fn read_array(cur: &mut Cursor<'_>, key: &str, level: usize) -> Result<MetaArray, GgufError> {
    let type_offset = cur.offset();
    let elem_type = read_type(cur, key, "array element type")?;
    if elem_type == MetaType::Array && level >= MAX_ARRAY_NESTING {
        return Err(GgufError::NestingTooDeep {
            path: cur.path().to_path_buf(),
            offset: type_offset,
            key: key.to_string(),
            max: MAX_ARRAY_NESTING,
        });
    }
    let count_offset = cur.offset();
    let count = cur.u64(&|| format!("the array length of key '{key}'"))?;
    let n = cur.check_count(count, elem_type.min_encoded_size(), count_offset, &|| {
        format!("the array length of key '{key}'")
    })?;
    let what = || format!("the value of key '{key}'");
    let items = match elem_type {
        MetaType::String => {
            let (mut text, mut ends) = (String::new(), Vec::with_capacity(n));
            for _ in 0..n {
                text.push_str(cur.string(&what)?);
                ends.push(text.len());
            }
            text.shrink_to_fit();
            Items::Strings { text, ends }
        }
        MetaType::Array => {
            let mut arrays = Vec::with_capacity(n);
            for _ in 0..n {
                arrays.push(read_array(cur, key, level.saturating_add(1))?);
            }
            Items::Arrays(arrays)
        }
        MetaType::Bool => {
            let start = cur.offset();
            let bytes = cur.take(n as u64, &what)?;
            if let Some((i, &value)) = bytes.iter().enumerate().find(|(_, &b)| b > 1) {
                return Err(GgufError::InvalidBool {
                    path: cur.path().to_path_buf(),
                    offset: start.saturating_add(i as u64),
                    key: key.to_string(),
                    value,
                });
            }
            Items::Scalars(bytes.to_vec())
        }
        t => {
            // check_count bounded `n` by the bytes left at `t`'s size, so the product fits.
            let size = scalar_size(t).unwrap_or(1) as u64;
            Items::Scalars(cur.take(n as u64 * size, &what)?.to_vec())
        }
    };
    Ok(MetaArray { elem_type, items })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn elements_read_back_as_they_were_pushed() {
        let scalars = [
            MetaValue::U8(255),
            MetaValue::I8(-1),
            MetaValue::U16(65535),
            MetaValue::I16(-2),
            MetaValue::U32(7),
            MetaValue::I32(i32::MIN),
            MetaValue::U64(u64::MAX),
            MetaValue::I64(-3),
            MetaValue::F32(-0.5),
            MetaValue::F64(1e300),
            MetaValue::Bool(true),
        ];
        for v in scalars {
            let values = vec![v.clone(), v.clone(), v.clone()];
            let a = MetaArray::new(v.meta_type(), values.clone()).expect("one type");
            assert_eq!((a.len(), a.iter().collect::<Vec<_>>()), (3, values), "{v}");
            assert_eq!((a.get(3), a.str_at(0), a.strs().is_none(), a.arrays()), (None, None, true, None));
        }
        let strings = MetaArray::of_strings(["", "ü", "", "ab"]);
        assert_eq!(strings.strs().expect("strings").collect::<Vec<_>>(), ["", "ü", "", "ab"]);
        assert_eq!((strings.len(), strings.str_at(1), strings.str_at(4)), (4, Some("ü"), None));
        assert_eq!(strings.get(3), Some(MetaValue::String("ab".into())));
        let nested = MetaArray::new(MetaType::Array, vec![strings.clone().into(), MetaArray::of_u32([]).into()]);
        let nested = nested.expect("arrays");
        assert_eq!((nested.len(), nested.nesting_depth(), nested.get(0)), (2, 2, Some(strings.into())));
        assert_eq!(MetaArray::empty(MetaType::Array).nesting_depth(), 2);
    }

    #[test]
    fn scalars_compare_bit_for_bit() {
        assert_ne!(MetaArray::of_f32([0.0]), MetaArray::of_f32([-0.0]));
        assert_eq!(MetaArray::of_f32([f32::NAN]), MetaArray::of_f32([f32::NAN]));
        assert_ne!(MetaArray::of_i32([1]), MetaArray::of_u32([1]));
    }
}
