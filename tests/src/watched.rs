//! The reference engine as the runtime tests watch it: [`WatchedRef`] counts the bytes read
//! back from it, and can claim that its reads overlap its work (they complete at once, which
//! `read_later` allows) so that the runtime takes its run-ahead path without a GPU.

use std::cell::Cell;
use std::rc::Rc;

use purebee_engine_ref::RefEngine;
use purebee_isa::{Engine, ExecError, ParamValue, PendingRead, Program, Registry, TensorId};

/// The reference engine, every call passed through.
pub struct WatchedRef {
    engine: RefEngine,
    overlapping: bool,
    bytes_read: Rc<Cell<usize>>,
}

impl WatchedRef {
    /// A reference engine whose `reads_overlap` answers `overlapping`.
    pub fn new(overlapping: bool) -> WatchedRef {
        WatchedRef { engine: RefEngine::new(), overlapping, bytes_read: Rc::new(Cell::new(0)) }
    }

    /// The bytes read back so far; the caller may reset it.
    pub fn bytes_read(&self) -> Rc<Cell<usize>> {
        Rc::clone(&self.bytes_read)
    }
}

impl Engine for WatchedRef {
    fn name(&self) -> &'static str {
        if self.overlapping {
            "ref (watched, overlapping reads)"
        } else {
            "ref (watched)"
        }
    }
    fn memory(&self) -> &Registry {
        self.engine.memory()
    }
    fn memory_mut(&mut self) -> &mut Registry {
        self.engine.memory_mut()
    }
    fn execute(&mut self, program: &Program, params: &[ParamValue]) -> Result<(), ExecError> {
        self.engine.execute(program, params)
    }
    fn write(&mut self, tensor: TensorId, bytes: &[u8]) -> Result<(), ExecError> {
        self.engine.write(tensor, bytes)
    }
    fn read(&mut self, tensor: TensorId) -> Result<Vec<u8>, ExecError> {
        let bytes = self.engine.read(tensor)?;
        self.bytes_read.set(self.bytes_read.get() + bytes.len());
        Ok(bytes)
    }
    fn read_later(&mut self, tensor: TensorId) -> Result<PendingRead, ExecError> {
        Ok(PendingRead::ready(self.read(tensor)?))
    }
    fn sync(&mut self) -> Result<(), ExecError> {
        self.engine.sync()
    }
    fn reads_overlap(&self) -> bool {
        self.overlapping
    }
}
