//! Errors: [`IsaError`] when a program is built, [`ExecError`] when it runs.

use purebee_memory::{DType, MemoryError};

use crate::ParamKind;

/// A program that cannot be built: every variant names the instruction and the tensor.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum IsaError {
    /// A tensor lookup or declaration failed (unknown name, duplicate name, ...).
    #[error("{op}: {source}")]
    Memory {
        /// The instruction (or "DECLARE").
        op: &'static str,
        /// What the registry said.
        #[source]
        source: MemoryError,
    },
    /// An operand of the wrong dtype.
    #[error("{op}: operand {operand} ('{tensor}') is {got}, expected {expected}")]
    DType {
        /// The instruction.
        op: &'static str,
        /// The operand's role (`x`, `weight`, ...).
        operand: &'static str,
        /// The tensor's name.
        tensor: String,
        /// What the instruction takes.
        expected: String,
        /// What the tensor is.
        got: DType,
    },
    /// An operand of the wrong shape.
    #[error("{op}: operand {operand} ('{tensor}') has shape {got}, expected {expected}")]
    Shape {
        /// The instruction.
        op: &'static str,
        /// The operand's role.
        operand: &'static str,
        /// The tensor's name.
        tensor: String,
        /// The shape the instruction needs, described.
        expected: String,
        /// The shape found, formatted.
        got: String,
    },
    /// An output that is also an input where the instruction cannot work in place.
    #[error("{op}: output '{tensor}' is also an input; this instruction cannot work in place")]
    Alias {
        /// The instruction.
        op: &'static str,
        /// The tensor's name.
        tensor: String,
    },
    /// A tensor used after this program freed it.
    #[error("{op}: tensor '{tensor}' is used after the program freed it")]
    UseAfterFree {
        /// The instruction.
        op: &'static str,
        /// The tensor's name.
        tensor: String,
    },
    /// An invalid constant field (head counts that do not divide, an odd rotary width, ...).
    #[error("{op}: {reason}")]
    Invalid {
        /// The instruction.
        op: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// A constant field of an instruction outside its range (TOP_K's `k`).
    #[error("{op}: field {field} = {value} is invalid: {expected}")]
    Field {
        /// The instruction.
        op: &'static str,
        /// The field's name.
        field: &'static str,
        /// The value given.
        value: String,
        /// What is allowed.
        expected: String,
    },
    /// A parameter used as the wrong type, declared twice, or not of this program.
    #[error("{op}: parameter {reason}")]
    Param {
        /// The instruction (or "PARAM").
        op: &'static str,
        /// What is wrong.
        reason: String,
    },
}

/// A run that failed. Execution stops at the failing instruction.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ExecError {
    /// A tensor was freed, never allocated or of the wrong size.
    #[error("{op}: {source}")]
    Memory {
        /// The instruction (or the engine operation).
        op: &'static str,
        /// What the registry said.
        #[source]
        source: MemoryError,
    },
    /// The run-time values do not match the program's parameters.
    #[error("program takes {expected} parameters, got {got}")]
    ParamCount {
        /// Declared parameters.
        expected: usize,
        /// Values given.
        got: usize,
    },
    /// A run-time value of the wrong type.
    #[error("parameter '{name}' is {expected}, got a {got} value")]
    ParamKind {
        /// The parameter's name.
        name: String,
        /// Its declared type.
        expected: ParamKind,
        /// The value's type.
        got: ParamKind,
    },
    /// [`crate::Engine::finish_read`] with a ticket this engine did not give or that was
    /// already finished or abandoned.
    #[error("GRID_READ: no read in flight with ticket {ticket} (finished, abandoned, or from another engine)")]
    UnknownRead {
        /// The ticket.
        ticket: u64,
    },
    /// A token id outside the embedding table.
    #[error("EMBED: token id {id} at row {row} of '{tensor}' is outside the vocabulary of {vocab}")]
    TokenOutOfRange {
        /// The ids tensor's name.
        tensor: String,
        /// The row of the id.
        row: usize,
        /// The id.
        id: u32,
        /// The table's row count.
        vocab: usize,
    },
    /// Positions past the end of a KV cache.
    #[error("{op}: positions {pos}..{end} do not fit the {n_ctx} rows of '{tensor}'")]
    ContextOverflow {
        /// The instruction.
        op: &'static str,
        /// The cache's name.
        tensor: String,
        /// The first position.
        pos: u64,
        /// One past the last position.
        end: u64,
        /// The cache's rows.
        n_ctx: usize,
    },
    /// A per-row index (a sequence, a position, a page) outside what it indexes.
    #[error("{op}: row {row} of '{tensor}' holds {value}, expected {expected}")]
    IndexOutOfRange {
        /// The instruction.
        op: &'static str,
        /// The index tensor's name.
        tensor: String,
        /// The row of the index tensor.
        row: usize,
        /// The value found.
        value: u64,
        /// What it must be.
        expected: String,
    },
    /// Weight bytes the engine could not decode.
    #[error("{op}: tensor '{tensor}': {reason}")]
    Decode {
        /// The instruction.
        op: &'static str,
        /// The tensor's name.
        tensor: String,
        /// What failed.
        reason: String,
    },
    /// A device or driver failure (engines with a device).
    #[error("{engine} engine: {reason}")]
    Device {
        /// The engine.
        engine: &'static str,
        /// What failed.
        reason: String,
    },
}
