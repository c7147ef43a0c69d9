//! A loaded model on an engine: its weights, KV cache and forward programs.

use std::collections::HashMap;

use purebee_isa::{DType, Engine, ParamValue, Program, ProgramBuilder, TensorId};
use purebee_memory::gguf::{FileWatch, GgufFile};

use crate::forward::{record_forward, ForwardIo, LogitsRows};
use crate::weights::Weights;
use crate::{ModelConfig, ModelError};

/// The key and value caches of every layer, F32 `[n_ctx, n_kv_head · head_dim]` each.
#[derive(Clone, Debug)]
pub struct KvCache {
    pub(crate) k: Vec<TensorId>,
    pub(crate) v: Vec<TensorId>,
}

/// What a caller reads after a forward pass (copied, so nothing is cloned per token).
#[derive(Clone, Copy, Debug)]
struct Outputs {
    logits: TensorId,
    argmax: TensorId,
}

/// A forward pass for one batch size: its programs and tensors.
struct Forward {
    /// Allocates the tensors and writes their constants.
    setup: Program,
    /// The pass itself; allocates nothing.
    pass: Program,
    /// Frees the tensors.
    teardown: Program,
    io: ForwardIo,
    live: bool,
}

/// How the forward pass feeds activations to block-quantized (Q4_0, Q4_1, Q8_0) weights.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum QuantizedActivations {
    /// Rounded to int8 in blocks of 32 (LINEAR's `Int8Blocks`), as llama.cpp's CPU backend
    /// rounds them: engines multiply integers, and the logits are the ones llama.cpp's are
    /// closest to (`docs/accuracy.md`).
    #[default]
    Int8,
    /// The f32 activations as they are (LINEAR's `F32`): slower on the CPU, exact.
    F32,
}

/// A model loaded on an engine. Programs are built once per batch size and kept; the
/// single-token decode program stays allocated, larger (prefill) ones are freed after use.
pub struct Model<E: Engine> {
    engine: E,
    config: ModelConfig,
    weights: Weights,
    kv: KvCache,
    n_ctx: usize,
    activations: QuantizedActivations,
    forwards: HashMap<(usize, LogitsRows), Forward>,
    /// The file the weights are mapped from, checked before every pass.
    source: FileWatch,
}

impl<E: Engine> Model<E> {
    /// Loads the model of `file` onto `engine` (zero-copy where the engine allows) with a KV
    /// cache of `n_ctx` positions (0: the model's training context).
    pub fn load(engine: E, file: &GgufFile, n_ctx: usize) -> Result<Model<E>, ModelError> {
        Model::load_with(engine, file, n_ctx, QuantizedActivations::default())
    }

    /// [`Model::load`], with the activations of block-quantized weights as `activations`
    /// says.
    pub fn load_with(
        mut engine: E,
        file: &GgufFile,
        n_ctx: usize,
        activations: QuantizedActivations,
    ) -> Result<Model<E>, ModelError> {
        let config = ModelConfig::from_gguf(file)?;
        let n_ctx = if n_ctx == 0 { config.n_ctx_train } else { n_ctx };
        file.load_into(engine.memory_mut())?;
        let weights = Weights::bind(file, &config, engine.memory())?;
        let mut b = ProgramBuilder::new("kv-cache", engine.memory_mut());
        let (mut k, mut v) = (Vec::new(), Vec::new());
        for l in 0..config.n_layer {
            k.push(b.alloc(&format!("cache.{l}.k"), DType::F32, &[n_ctx, config.kv_width()])?);
            v.push(b.alloc(&format!("cache.{l}.v"), DType::F32, &[n_ctx, config.kv_width()])?);
        }
        let alloc = b.finish();
        engine.execute(&alloc, &[])?;
        Ok(Model {
            engine,
            config,
            weights,
            kv: KvCache { k, v },
            n_ctx,
            activations,
            forwards: HashMap::new(),
            source: file.watch(),
        })
    }

    /// The hyper-parameters.
    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// The KV cache's size in positions.
    pub fn n_ctx(&self) -> usize {
        self.n_ctx
    }

    /// The engine.
    pub fn engine(&self) -> &E {
        &self.engine
    }

    /// Runs `tokens` at positions `pos..` and returns the logits of every position
    /// (`rows = All`, `[n, vocab]` row-major) or of the last one (`[vocab]`).
    pub fn forward(&mut self, tokens: &[u32], pos: usize, rows: LogitsRows) -> Result<Vec<f32>, ModelError> {
        let (key, io) = self.run(tokens, pos, rows)?;
        let values = self.engine.read_f32(io.logits)?;
        self.release_prefill(key)?;
        Ok(values)
    }

    /// Runs `tokens` at positions `pos..` and returns the greedy next token after the last
    /// one, reading back only the 4 bytes of ARGMAX.
    pub fn forward_greedy(&mut self, tokens: &[u32], pos: usize) -> Result<u32, ModelError> {
        let (key, io) = self.run(tokens, pos, LogitsRows::Last)?;
        let id = self.engine.read_u32(io.argmax)?.first().copied().unwrap_or(0);
        self.release_prefill(key)?;
        Ok(id)
    }

    /// Checks the request and that the model file is unchanged since it was opened, builds
    /// and allocates the forward for its size if needed, writes the ids and runs it.
    ///
    /// The weights are views of the file's memory map: had the file been truncated since, the
    /// pass would die of SIGBUS, so a changed file is an error naming it instead
    /// (`ModelError::Gguf(GgufError::ChangedSinceOpen)`). A truncation during the pass itself
    /// cannot be caught in safe code.
    fn run(
        &mut self,
        tokens: &[u32],
        pos: usize,
        rows: LogitsRows,
    ) -> Result<((usize, LogitsRows), Outputs), ModelError> {
        if tokens.is_empty() {
            return Err(ModelError::NoTokens);
        }
        if let Some(&id) = tokens.iter().find(|&&t| t as usize >= self.config.n_vocab) {
            return Err(ModelError::TokenOutOfRange { id, vocab: self.config.n_vocab });
        }
        if pos + tokens.len() > self.n_ctx {
            return Err(ModelError::ContextFull {
                tokens: tokens.len(),
                pos,
                n_ctx: self.n_ctx,
                n_ctx_train: self.config.n_ctx_train,
            });
        }
        self.source.check()?;
        let key = (tokens.len(), rows);
        let f = match self.forwards.remove(&key) {
            Some(f) => f,
            None => self.build_forward(tokens.len(), rows)?,
        };
        let f = self.forwards.entry(key).or_insert(f);
        if !f.live {
            self.engine.execute(&f.setup, &[])?;
            f.live = true;
        }
        self.engine.write_u32(f.io.ids, tokens)?;
        self.engine.execute(&f.pass, &[ParamValue::U32(pos as u32)])?;
        Ok((key, Outputs { logits: f.io.logits, argmax: f.io.argmax }))
    }

    /// Frees a multi-token forward's tensors after use; the decode forward stays.
    fn release_prefill(&mut self, key: (usize, LogitsRows)) -> Result<(), ModelError> {
        if key.0 > 1 {
            if let Some(f) = self.forwards.get_mut(&key) {
                self.engine.execute(&f.teardown, &[])?;
                f.live = false;
            }
        }
        Ok(())
    }

    fn build_forward(&mut self, n: usize, rows: LogitsRows) -> Result<Forward, ModelError> {
        let prefix = match rows {
            LogitsRows::All => format!("fwd{n}.all"),
            LogitsRows::Last => format!("fwd{n}.last"),
        };
        let reg = self.engine.memory_mut();
        let mut b = ProgramBuilder::new(&prefix, reg);
        let pos = b.param_u32("pos")?;
        let io =
            record_forward(&mut b, &self.config, &self.weights, &self.kv, n, rows, &prefix, pos, self.activations)?;
        let pass = b.finish();

        let mut b = ProgramBuilder::new(&format!("{prefix}.setup"), self.engine.memory_mut());
        for &t in &io.tensors {
            b.grid_alloc(t)?;
        }
        for (t, bytes) in &io.constants {
            b.grid_write(*t, bytes.clone().into())?;
        }
        let setup = b.finish();
        let mut b = ProgramBuilder::new(&format!("{prefix}.teardown"), self.engine.memory_mut());
        for &t in &io.tensors {
            b.free(t)?;
        }
        let teardown = b.finish();
        Ok(Forward { setup, pass, teardown, io, live: false })
    }
}
