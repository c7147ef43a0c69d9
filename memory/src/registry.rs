//! The named-tensor registry: names resolve to handles once; lifetimes are explicit.

use std::collections::HashMap;
use std::fmt;

use crate::tensor::expected_bytes;
use crate::{DType, HostTensor, MemoryError, Shape};

/// A handle to a tensor of one [`Registry`]. Programs and engines use handles, never names.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TensorId(u32);

impl TensorId {
    /// The handle's index, dense from 0 in registration order (for engines' side tables).
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Debug for TensorId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "t{}", self.0)
    }
}

/// What a tensor is: its name, dtype and shape. Known from declaration on, whether or not
/// the tensor holds data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorDesc {
    /// The unique name.
    pub name: String,
    /// The element type.
    pub dtype: DType,
    /// The row-major shape.
    pub shape: Shape,
}

/// The lifetime state of one tensor.
#[derive(Clone, Debug)]
enum State {
    /// Declared (name, dtype, shape known) but holding no data.
    Declared,
    /// Holding data.
    Live(HostTensor),
    /// Freed: its data is gone; using it is an error until it is allocated again.
    Freed,
}

/// Tensors addressed by name, resolved once to [`TensorId`] handles.
///
/// A tensor is first declared (or inserted with data), then allocated, used, and freed.
/// Using a freed, unallocated or unknown tensor is a [`MemoryError`] that names it.
#[derive(Debug, Default)]
pub struct Registry {
    descs: Vec<TensorDesc>,
    states: Vec<State>,
    by_name: HashMap<String, TensorId>,
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Registry {
        Registry::default()
    }

    /// Declares a tensor without data. Fails when the name is taken or the shape's rows are
    /// not whole blocks of `dtype`.
    pub fn declare(&mut self, name: &str, dtype: DType, shape: Shape) -> Result<TensorId, MemoryError> {
        if self.by_name.contains_key(name) {
            return Err(MemoryError::DuplicateTensor { name: name.to_string() });
        }
        expected_bytes(name, dtype, &shape)?;
        let id = TensorId(
            u32::try_from(self.descs.len())
                .map_err(|_| MemoryError::ForeignId { id: u32::MAX, count: self.descs.len() })?,
        );
        self.descs.push(TensorDesc { name: name.to_string(), dtype, shape });
        self.states.push(State::Declared);
        self.by_name.insert(name.to_string(), id);
        Ok(id)
    }

    /// Declares a tensor and gives it `tensor`'s data (zero-copy when the tensor is mapped).
    pub fn insert(&mut self, name: &str, tensor: HostTensor) -> Result<TensorId, MemoryError> {
        let id = self.declare(name, tensor.dtype(), tensor.shape().clone())?;
        self.states[id.index()] = State::Live(tensor);
        Ok(id)
    }

    /// The handle of a registered name.
    pub fn id(&self, name: &str) -> Result<TensorId, MemoryError> {
        self.by_name.get(name).copied().ok_or_else(|| MemoryError::UnknownTensor { name: name.to_string() })
    }

    /// The description of a tensor.
    pub fn desc(&self, id: TensorId) -> Result<&TensorDesc, MemoryError> {
        self.descs.get(id.index()).ok_or(MemoryError::ForeignId { id: id.0, count: self.descs.len() })
    }

    /// The tensor's name (for error messages).
    pub fn name(&self, id: TensorId) -> &str {
        self.descs.get(id.index()).map_or("<foreign tensor id>", |d| d.name.as_str())
    }

    /// Every tensor handle, in registration order.
    pub fn ids(&self) -> impl Iterator<Item = TensorId> + '_ {
        (0..self.descs.len() as u32).map(TensorId)
    }

    /// True when the tensor holds data.
    pub fn is_live(&self, id: TensorId) -> bool {
        matches!(self.states.get(id.index()), Some(State::Live(_)))
    }

    /// The tensor's data.
    pub fn get(&self, id: TensorId) -> Result<&HostTensor, MemoryError> {
        match self.state(id)? {
            State::Live(t) => Ok(t),
            State::Declared => Err(MemoryError::NotAllocated { name: self.name(id).to_string() }),
            State::Freed => Err(MemoryError::Freed { name: self.name(id).to_string() }),
        }
    }

    /// The tensor's data, writable.
    pub fn get_mut(&mut self, id: TensorId) -> Result<&mut HostTensor, MemoryError> {
        let name = self.name(id).to_string();
        match self.states.get_mut(id.index()) {
            Some(State::Live(t)) => Ok(t),
            Some(State::Declared) => Err(MemoryError::NotAllocated { name }),
            Some(State::Freed) => Err(MemoryError::Freed { name }),
            None => Err(MemoryError::ForeignId { id: id.0, count: self.descs.len() }),
        }
    }

    /// GRID_ALLOC: gives a declared or freed tensor zero-filled owned storage. Allocating a
    /// live tensor zero-fills it again.
    pub fn allocate(&mut self, id: TensorId) -> Result<(), MemoryError> {
        let d = self.desc(id)?;
        let t = HostTensor::zeros(&d.name, d.dtype, d.shape.clone())?;
        self.states[id.index()] = State::Live(t);
        Ok(())
    }

    /// Replaces the tensor's data with `tensor`, which must match its declared dtype and shape.
    pub fn set(&mut self, id: TensorId, tensor: HostTensor) -> Result<(), MemoryError> {
        let d = self.desc(id)?;
        if tensor.dtype() != d.dtype {
            return Err(MemoryError::WrongDType { name: d.name.clone(), expected: d.dtype, got: tensor.dtype() });
        }
        if tensor.shape() != &d.shape {
            return Err(MemoryError::ShapeMismatch {
                name: d.name.clone(),
                expected: d.shape.to_string(),
                got: tensor.shape().to_string(),
            });
        }
        self.states[id.index()] = State::Live(tensor);
        Ok(())
    }

    /// FREE: drops the tensor's data. The name stays reserved; using the tensor before it is
    /// allocated again is a [`MemoryError::Freed`]. Freeing twice is an error too.
    pub fn free(&mut self, id: TensorId) -> Result<(), MemoryError> {
        self.get(id)?;
        self.states[id.index()] = State::Freed;
        Ok(())
    }

    /// Bytes of tensor data the registry holds (mapped views counted at their size).
    pub fn bytes_held(&self) -> usize {
        self.states.iter().map(|s| if let State::Live(t) = s { t.byte_len() } else { 0 }).sum()
    }

    /// Bytes of owned (not mapped) tensor data the registry holds.
    pub fn owned_bytes_held(&self) -> usize {
        self.states
            .iter()
            .map(|s| match s {
                State::Live(t) if !t.is_mapped() => t.byte_len(),
                _ => 0,
            })
            .sum()
    }

    /// The number of registered tensors.
    pub fn len(&self) -> usize {
        self.descs.len()
    }

    /// True when no tensor is registered.
    pub fn is_empty(&self) -> bool {
        self.descs.is_empty()
    }

    fn state(&self, id: TensorId) -> Result<&State, MemoryError> {
        self.states.get(id.index()).ok_or(MemoryError::ForeignId { id: id.0, count: self.descs.len() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(d: &[usize]) -> Shape {
        Shape::new(d).expect("valid shape")
    }

    #[test]
    fn lifetimes_are_explicit_and_errors_name_the_tensor() {
        let mut r = Registry::new();
        let x = r.declare("x", DType::F32, shape(&[2, 4])).expect("new name");
        assert_eq!(r.id("x"), Ok(x));
        assert_eq!(r.get(x).err(), Some(MemoryError::NotAllocated { name: "x".into() }));
        r.allocate(x).expect("declared");
        assert_eq!(r.bytes_held(), 32);
        r.get_mut(x).expect("live").f32s_mut("x").expect("f32")[3] = 7.0;
        assert_eq!(r.get(x).expect("live").f32s("x").expect("f32")[3], 7.0);
        r.free(x).expect("live");
        assert_eq!(r.bytes_held(), 0);
        assert_eq!(r.get(x).err(), Some(MemoryError::Freed { name: "x".into() }));
        assert_eq!(r.free(x).err(), Some(MemoryError::Freed { name: "x".into() }));
        r.allocate(x).expect("freed tensors can be allocated again");
        assert_eq!(r.get(x).expect("live").f32s("x").expect("f32")[3], 0.0);

        assert_eq!(r.id("nope").err(), Some(MemoryError::UnknownTensor { name: "nope".into() }));
        assert_eq!(
            r.declare("x", DType::F16, shape(&[1])).err(),
            Some(MemoryError::DuplicateTensor { name: "x".into() })
        );
        let foreign = TensorId(99);
        assert!(matches!(r.get(foreign), Err(MemoryError::ForeignId { id: 99, .. })));
    }

    #[test]
    fn set_checks_dtype_and_shape() {
        let mut r = Registry::new();
        let ids = r.declare("ids", DType::U32, shape(&[3])).expect("new");
        let wrong = HostTensor::from_f32("ids", shape(&[3]), vec![0.0; 3]).expect("valid");
        assert!(matches!(r.set(ids, wrong), Err(MemoryError::WrongDType { .. })));
        let wrong = HostTensor::from_u32("ids", shape(&[4]), vec![0; 4]).expect("valid");
        assert!(matches!(r.set(ids, wrong), Err(MemoryError::ShapeMismatch { .. })));
        let ok = HostTensor::from_u32("ids", shape(&[3]), vec![1, 2, 3]).expect("valid");
        r.set(ids, ok).expect("matches");
        assert_eq!(&*r.get(ids).expect("live").u32s("ids").expect("u32"), &[1, 2, 3]);
    }
}
