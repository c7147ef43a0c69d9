//! Host tensors: a dtype, a shape and bytes, owned or borrowed zero-copy from a mapped file.

use std::borrow::Cow;
use std::ops::Range;
use std::sync::Arc;

use crate::gguf::GuardedMap;
use crate::{DType, MemoryError, Shape};

/// A tensor in host memory.
///
/// Its bytes are either a view into a memory-mapped file (weights read from GGUF: no copy)
/// or an owned buffer of 4-byte words (activations, written by an engine). Owned storage is
/// word-aligned so that F32/U32/I32 tensors can be viewed as typed slices without copying.
#[derive(Clone, Debug)]
pub struct HostTensor {
    dtype: DType,
    shape: Shape,
    data: TensorData,
}

#[derive(Clone, Debug)]
enum TensorData {
    /// A byte range of a mapped file, checked to lie inside the map at construction.
    Mapped { map: Arc<GuardedMap>, range: Range<usize> },
    /// Owned storage; `len` bytes of `words` are the tensor's bytes.
    Owned { words: Vec<u32>, len: usize },
}

impl HostTensor {
    /// A zero-copy view of `range` of `map`. Fails when the range lies outside the map or its
    /// length is not the size that `dtype` and `shape` need.
    pub fn mapped(
        name: &str,
        dtype: DType,
        shape: Shape,
        map: Arc<GuardedMap>,
        range: Range<usize>,
    ) -> Result<HostTensor, MemoryError> {
        let expected = expected_bytes(name, dtype, &shape)?;
        if range.start > range.end || range.end > map.len() {
            return Err(MemoryError::OutOfBounds {
                name: name.to_string(),
                start: range.start,
                end: range.end,
                len: map.len(),
            });
        }
        if range.len() != expected {
            return Err(MemoryError::SizeMismatch { name: name.to_string(), expected, got: range.len() });
        }
        Ok(HostTensor { dtype, shape, data: TensorData::Mapped { map, range } })
    }

    /// An owned tensor holding a copy of `bytes`, which must be exactly the size that `dtype`
    /// and `shape` need.
    pub fn from_bytes(name: &str, dtype: DType, shape: Shape, bytes: &[u8]) -> Result<HostTensor, MemoryError> {
        let mut t = HostTensor::zeros(name, dtype, shape)?;
        if bytes.len() != t.byte_len() {
            return Err(MemoryError::SizeMismatch { name: name.to_string(), expected: t.byte_len(), got: bytes.len() });
        }
        t.bytes_mut().copy_from_slice(bytes);
        Ok(t)
    }

    /// An owned, zero-filled tensor.
    pub fn zeros(name: &str, dtype: DType, shape: Shape) -> Result<HostTensor, MemoryError> {
        let len = expected_bytes(name, dtype, &shape)?;
        Ok(HostTensor { dtype, shape, data: TensorData::Owned { words: vec![0u32; len.div_ceil(4)], len } })
    }

    /// An owned F32 tensor. `values.len()` must equal the shape's element count.
    pub fn from_f32(name: &str, shape: Shape, values: Vec<f32>) -> Result<HostTensor, MemoryError> {
        if values.len() != shape.numel() {
            return Err(MemoryError::SizeMismatch {
                name: name.to_string(),
                expected: shape.numel() * 4,
                got: values.len() * 4,
            });
        }
        let words: Vec<u32> = values.into_iter().map(f32::to_bits).collect();
        let len = words.len() * 4;
        Ok(HostTensor { dtype: DType::F32, shape, data: TensorData::Owned { words, len } })
    }

    /// An owned U32 tensor. `values.len()` must equal the shape's element count.
    pub fn from_u32(name: &str, shape: Shape, values: Vec<u32>) -> Result<HostTensor, MemoryError> {
        if values.len() != shape.numel() {
            return Err(MemoryError::SizeMismatch {
                name: name.to_string(),
                expected: shape.numel() * 4,
                got: values.len() * 4,
            });
        }
        let len = values.len() * 4;
        Ok(HostTensor { dtype: DType::U32, shape, data: TensorData::Owned { words: values, len } })
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The shape.
    pub fn shape(&self) -> &Shape {
        &self.shape
    }

    /// True when the bytes are a view into a mapped file rather than owned.
    pub fn is_mapped(&self) -> bool {
        matches!(self.data, TensorData::Mapped { .. })
    }

    /// Size of the tensor's bytes.
    pub fn byte_len(&self) -> usize {
        match &self.data {
            TensorData::Mapped { range, .. } => range.len(),
            TensorData::Owned { len, .. } => *len,
        }
    }

    /// The raw bytes in the dtype's layout.
    pub fn bytes(&self) -> &[u8] {
        match &self.data {
            TensorData::Mapped { map, range } => &map[range.clone()],
            TensorData::Owned { words, len } => &bytemuck::cast_slice(words)[..*len],
        }
    }

    /// The raw bytes, writable. A mapped tensor is first copied into owned storage
    /// (copy-on-write), so a mapped file is never modified.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        if let TensorData::Mapped { map, range } = &self.data {
            let src = &map[range.clone()];
            let mut words = vec![0u32; src.len().div_ceil(4)];
            bytemuck::cast_slice_mut::<u32, u8>(&mut words)[..src.len()].copy_from_slice(src);
            self.data = TensorData::Owned { words, len: src.len() };
        }
        match &mut self.data {
            TensorData::Owned { words, len } => &mut bytemuck::cast_slice_mut(words)[..*len],
            TensorData::Mapped { .. } => unreachable!("converted to owned above"),
        }
    }

    /// The elements of an F32 tensor; borrowed when aligned, copied otherwise.
    pub fn f32s(&self, name: &str) -> Result<Cow<'_, [f32]>, MemoryError> {
        self.expect_dtype(name, DType::F32)?;
        Ok(match bytemuck::try_cast_slice(self.bytes()) {
            Ok(s) => Cow::Borrowed(s),
            Err(_) => {
                Cow::Owned(self.bytes().chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
            }
        })
    }

    /// The elements of a U32 tensor; borrowed when aligned, copied otherwise.
    pub fn u32s(&self, name: &str) -> Result<Cow<'_, [u32]>, MemoryError> {
        self.expect_dtype(name, DType::U32)?;
        Ok(match bytemuck::try_cast_slice(self.bytes()) {
            Ok(s) => Cow::Borrowed(s),
            Err(_) => {
                Cow::Owned(self.bytes().chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
            }
        })
    }

    /// The elements of an F32 tensor, writable (a mapped tensor is copied first).
    pub fn f32s_mut(&mut self, name: &str) -> Result<&mut [f32], MemoryError> {
        self.expect_dtype(name, DType::F32)?;
        Ok(bytemuck::cast_slice_mut(self.words_mut()))
    }

    /// The elements of a U32 tensor, writable (a mapped tensor is copied first).
    pub fn u32s_mut(&mut self, name: &str) -> Result<&mut [u32], MemoryError> {
        self.expect_dtype(name, DType::U32)?;
        Ok(self.words_mut())
    }

    fn words_mut(&mut self) -> &mut [u32] {
        self.bytes_mut();
        match &mut self.data {
            TensorData::Owned { words, .. } => words,
            TensorData::Mapped { .. } => unreachable!("bytes_mut converts to owned"),
        }
    }

    fn expect_dtype(&self, name: &str, dtype: DType) -> Result<(), MemoryError> {
        if self.dtype != dtype {
            return Err(MemoryError::WrongDType { name: name.to_string(), expected: dtype, got: self.dtype });
        }
        Ok(())
    }
}

/// The byte size `dtype` needs for `shape`, or an error naming the tensor.
pub(crate) fn expected_bytes(name: &str, dtype: DType, shape: &Shape) -> Result<usize, MemoryError> {
    dtype.tensor_bytes(shape.rows(), shape.cols()).ok_or_else(|| MemoryError::NotWholeBlocks {
        name: name.to_string(),
        dtype,
        cols: shape.cols(),
        block_len: dtype.block_len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owned_tensors_round_trip_typed_views() {
        let s = Shape::matrix(2, 3).expect("valid");
        let mut t = HostTensor::from_f32("x", s.clone(), vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]).expect("sizes agree");
        assert_eq!(t.f32s("x").expect("f32")[4], 5.0);
        t.f32s_mut("x").expect("f32")[4] = -1.0;
        assert_eq!(&t.bytes()[16..20], &(-1.0f32).to_le_bytes());
        assert!(matches!(t.u32s("x"), Err(MemoryError::WrongDType { .. })));
        assert!(matches!(HostTensor::from_f32("y", s, vec![0.0; 5]), Err(MemoryError::SizeMismatch { .. })));
        // Odd byte counts keep their exact length.
        let i8s = HostTensor::zeros("q", DType::I8, Shape::vector(5)).expect("valid");
        assert_eq!(i8s.bytes().len(), 5);
        assert!(matches!(
            HostTensor::zeros("w", DType::Q8_0, Shape::vector(33)),
            Err(MemoryError::NotWholeBlocks { block_len: 32, .. })
        ));
    }
}
