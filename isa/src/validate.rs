//! The checks instructions run when a program is built (shapes, dtypes, aliasing, params).

use purebee_memory::{DType, Registry, TensorDesc, TensorId};

use crate::{F32Arg, IsaError, ParamDecl, ParamKind, U32Arg};

/// Validation context of one instruction: the registry's tensor descriptions, the program's
/// parameters and the instruction's name for error messages.
pub struct Checker<'a> {
    reg: &'a Registry,
    params: &'a [ParamDecl],
    op: &'static str,
}

impl<'a> Checker<'a> {
    pub(crate) fn new(reg: &'a Registry, params: &'a [ParamDecl], op: &'static str) -> Checker<'a> {
        Checker { reg, params, op }
    }

    /// The description of an operand.
    pub fn desc(&self, _operand: &'static str, id: TensorId) -> Result<&'a TensorDesc, IsaError> {
        self.reg.desc(id).map_err(|source| IsaError::Memory { op: self.op, source })
    }

    /// An operand that must be F32.
    pub fn f32(&self, operand: &'static str, id: TensorId) -> Result<&'a TensorDesc, IsaError> {
        self.dtype(operand, id, |d| d == DType::F32, "F32")
    }

    /// An operand whose dtype must satisfy `ok` (described by `expected`).
    pub fn dtype(
        &self,
        operand: &'static str,
        id: TensorId,
        ok: fn(DType) -> bool,
        expected: &str,
    ) -> Result<&'a TensorDesc, IsaError> {
        let d = self.desc(operand, id)?;
        if !ok(d.dtype) {
            return Err(IsaError::DType {
                op: self.op,
                operand,
                tensor: d.name.clone(),
                expected: expected.to_string(),
                got: d.dtype,
            });
        }
        Ok(d)
    }

    /// Fails unless `d` has exactly `dims`.
    pub fn shape(&self, operand: &'static str, d: &TensorDesc, dims: &[usize]) -> Result<(), IsaError> {
        if d.shape.dims() != dims {
            return Err(self.shape_error(operand, d, format!("{dims:?}")));
        }
        Ok(())
    }

    /// Fails unless `d` is 2-D.
    pub fn matrix(&self, operand: &'static str, d: &TensorDesc) -> Result<(usize, usize), IsaError> {
        match d.shape.dims() {
            &[rows, cols] => Ok((rows, cols)),
            _ => Err(self.shape_error(operand, d, "a 2-D shape [rows, cols]".to_string())),
        }
    }

    /// A shape error for operand `d`, `expected` describing what was needed.
    pub fn shape_error(&self, operand: &'static str, d: &TensorDesc, expected: String) -> IsaError {
        IsaError::Shape { op: self.op, operand, tensor: d.name.clone(), expected, got: d.shape.to_string() }
    }

    /// Fails when `out` is one of `inputs` (for instructions that cannot work in place).
    pub fn distinct(&self, out: TensorId, inputs: &[TensorId]) -> Result<(), IsaError> {
        if inputs.contains(&out) {
            return Err(IsaError::Alias { op: self.op, tensor: self.reg.name(out).to_string() });
        }
        Ok(())
    }

    /// An invalid-field error.
    pub fn invalid(&self, reason: impl Into<String>) -> IsaError {
        IsaError::Invalid { op: self.op, reason: reason.into() }
    }

    /// An error for constant field `field` holding `value`, `expected` describing what is
    /// allowed.
    pub fn field(&self, field: &'static str, value: impl ToString, expected: impl Into<String>) -> IsaError {
        IsaError::Field { op: self.op, field, value: value.to_string(), expected: expected.into() }
    }

    /// Fails unless a u32 argument is a constant or a u32 parameter of this program.
    pub fn u32_arg(&self, arg: U32Arg) -> Result<(), IsaError> {
        match arg {
            U32Arg::Const(_) => Ok(()),
            U32Arg::Param(p) => self.param(p.index(), ParamKind::U32),
        }
    }

    /// Fails unless an f32 argument is a constant or an f32 parameter of this program.
    pub fn f32_arg(&self, arg: F32Arg) -> Result<(), IsaError> {
        match arg {
            F32Arg::Const(_) => Ok(()),
            F32Arg::Param(p) => self.param(p.index(), ParamKind::F32),
        }
    }

    fn param(&self, index: usize, kind: ParamKind) -> Result<(), IsaError> {
        match self.params.get(index) {
            Some(d) if d.kind == kind => Ok(()),
            Some(d) => {
                Err(IsaError::Param { op: self.op, reason: format!("'{}' is {}, used as {kind}", d.name, d.kind) })
            }
            None => Err(IsaError::Param { op: self.op, reason: format!("#{index} is not declared by this program") }),
        }
    }
}
