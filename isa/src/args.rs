//! Run-time parameters: values a program reads when it runs, not when it is built.
//!
//! A program is built once and run many times; what changes between runs (the position of
//! the first token, a RoPE base a caller wants to vary) is a parameter. An instruction field
//! that may change takes a [`U32Arg`] or [`F32Arg`]: a constant fixed at build time or a
//! declared parameter read from the values passed to [`crate::Engine::execute`].

use std::fmt;

/// A parameter slot of one program: the index into the values passed at run time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ParamId(pub(crate) u16);

impl ParamId {
    /// The index into the run-time values.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// The type of a parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ParamKind {
    /// An unsigned 32-bit integer (positions, counts).
    U32,
    /// A 32-bit float.
    F32,
}

impl fmt::Display for ParamKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ParamKind::U32 => "u32",
            ParamKind::F32 => "f32",
        })
    }
}

/// A parameter declared by a program.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParamDecl {
    /// The name, for error messages and lookup.
    pub name: String,
    /// Its type.
    pub kind: ParamKind,
}

/// A run-time value of a parameter.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ParamValue {
    /// A u32 value.
    U32(u32),
    /// An f32 value.
    F32(f32),
}

impl ParamValue {
    /// The type of the value.
    pub fn kind(self) -> ParamKind {
        match self {
            ParamValue::U32(_) => ParamKind::U32,
            ParamValue::F32(_) => ParamKind::F32,
        }
    }
}

/// A u32 instruction field: fixed at build time or read at run time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum U32Arg {
    /// A constant.
    Const(u32),
    /// A u32 parameter of the program.
    Param(ParamId),
}

/// An f32 instruction field: fixed at build time or read at run time.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum F32Arg {
    /// A constant.
    Const(f32),
    /// An f32 parameter of the program.
    Param(ParamId),
}

impl From<u32> for U32Arg {
    fn from(v: u32) -> U32Arg {
        U32Arg::Const(v)
    }
}

impl From<f32> for F32Arg {
    fn from(v: f32) -> F32Arg {
        F32Arg::Const(v)
    }
}
