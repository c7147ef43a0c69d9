//! Opening a model, the one way every front end does it: the GGUF file (from a path or from
//! bytes in memory), its tokenizer and chat template, the engine, the weights on it and the
//! KV cache the front end asked for.

use std::path::Path;
use std::time::Instant;

use purebee_memory::gguf::GgufFile;
use purebee_runtime::chat::{ChatError, ChatTemplate};
use purebee_runtime::tokenizer::Tokenizer;
use purebee_runtime::Model;

use crate::{ContextRequest, CreatedEngine, DynEngine, EngineSpec, LoadError};

/// Where a model's bytes are.
#[derive(Clone, Copy, Debug)]
pub enum ModelSource<'a> {
    /// A GGUF file, mapped (or read into memory with [`EngineSpec::no_mmap`]).
    Path(&'a Path),
    /// A GGUF image already in memory (a browser has no files), copied once; `name` stands
    /// for the path in errors.
    Bytes {
        /// What errors call it.
        name: &'a str,
        /// The image.
        bytes: &'a [u8],
    },
}

/// How text becomes the model's tokens.
#[derive(Debug)]
pub struct ModelText {
    /// The tokenizer.
    pub tokenizer: Tokenizer,
    /// The chat template, or why there is none (missing, unparsable, failing on one
    /// message): a front end that needs it reports this error.
    pub template: Result<ChatTemplate, ChatError>,
}

impl ModelText {
    fn read(file: &GgufFile) -> Result<ModelText, LoadError> {
        let tokenizer = Tokenizer::from_gguf(file)?;
        let template = ChatTemplate::from_gguf(file, &tokenizer);
        Ok(ModelText { tokenizer, template })
    }
}

/// A model file opened and checked, not loaded yet.
pub struct ModelFile {
    file: GgufFile,
    text: Option<ModelText>,
}

/// A model loaded on its engine, with everything a front end needs.
pub struct LoadedModel<C> {
    /// The GGUF file the weights are read from.
    pub file: GgufFile,
    /// The tokenizer.
    pub tokenizer: Tokenizer,
    /// The chat template, or why there is none.
    pub template: Result<ChatTemplate, ChatError>,
    /// Which engine runs the model, on what (`"cpu (avx2 kernels, 2 threads)"`).
    pub engine: String,
    /// What the user should know about the engine (a clamped thread count, a fallback).
    pub notes: Vec<String>,
    /// The model.
    pub model: Model<DynEngine>,
    /// The KV cache asked for: a `Session`, a `SharedCache` or `()`.
    pub cache: C,
    /// Seconds from the engine's creation to the model and its cache being ready.
    pub load_seconds: f64,
}

impl ModelFile {
    /// Maps (or reads) and checks the GGUF file of `source`. Nothing is loaded yet.
    pub fn open(source: ModelSource<'_>, spec: &EngineSpec) -> Result<ModelFile, LoadError> {
        let file = match source {
            ModelSource::Path(path) if spec.no_mmap => GgufFile::read(path)?,
            ModelSource::Path(path) => GgufFile::open(path)?,
            ModelSource::Bytes { name, bytes } => GgufFile::from_bytes(name, bytes)?,
        };
        Ok(ModelFile { file, text: None })
    }

    /// The GGUF file.
    pub fn gguf(&self) -> &GgufFile {
        &self.file
    }

    /// The tokenizer and chat template, built now. A front end that encodes its prompt
    /// before the weights load calls this first; otherwise [`ModelFile::load`] builds them
    /// after the weights, so that a file that is no model says so first.
    pub fn text(&mut self) -> Result<&ModelText, LoadError> {
        let text = match self.text.take() {
            Some(text) => text,
            None => ModelText::read(&self.file)?,
        };
        Ok(self.text.insert(text))
    }

    /// Creates the engine `spec` asks for, tells `on_engine` (before the weights load, which
    /// can take a while), loads the weights on it and opens the KV cache `context` asks for.
    pub fn load<C: ContextRequest>(
        self,
        spec: &EngineSpec,
        context: C,
        on_engine: impl FnOnce(&CreatedEngine),
    ) -> Result<LoadedModel<C::Cache>, LoadError> {
        let created = spec.create()?;
        on_engine(&created);
        let CreatedEngine { engine, description, notes } = created;
        let start = Instant::now();
        let mut model = Model::load_with(engine, &self.file, spec.activations)?;
        model.set_kv_cache_types(spec.kv_cache);
        let cache = context.open(&mut model)?;
        let load_seconds = start.elapsed().as_secs_f64();
        let ModelText { tokenizer, template } = match self.text {
            Some(text) => text,
            None => ModelText::read(&self.file)?,
        };
        Ok(LoadedModel { file: self.file, tokenizer, template, engine: description, notes, model, cache, load_seconds })
    }
}

/// [`ModelFile::open`] then [`ModelFile::load`], for a front end with nothing to say
/// between them.
pub fn open<C: ContextRequest>(
    source: ModelSource<'_>,
    spec: &EngineSpec,
    context: C,
) -> Result<LoadedModel<C::Cache>, LoadError> {
    ModelFile::open(source, spec)?.load(spec, context, |_| {})
}
