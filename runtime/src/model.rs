//! A model loaded on an engine (its weights, once) and the sessions that run it (each its
//! own KV cache and forward programs).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use purebee_isa::{
    DType, Engine, ExecError, KernelProfile, ParamValue, PendingRead, ProfileSupport, Program, ProgramBuilder, TensorId,
};
use purebee_memory::gguf::{FileWatch, GgufFile};

use crate::forward::{record_forward, ForwardIo, Head, LogitsRows, Place};
use crate::in_flight::{Received, Want};
use crate::weights::Weights;
use crate::{ModelConfig, ModelError};

/// The dtypes of the key and value caches (llama.cpp's `--cache-type-k` and
/// `--cache-type-v`): F16 by default, as llama.cpp's, half the memory and the memory
/// traffic of ATTENTION; F32 to compare with F32 references. Set with
/// [`Model::set_kv_cache_types`]; sessions and shared caches opened after take it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvCacheTypes {
    /// The key cache: F16 or F32.
    pub k: DType,
    /// The value cache: F16 or F32.
    pub v: DType,
}

impl KvCacheTypes {
    /// Both caches F32.
    pub const F32: KvCacheTypes = KvCacheTypes { k: DType::F32, v: DType::F32 };
    /// Both caches F16 (the default).
    pub const F16: KvCacheTypes = KvCacheTypes { k: DType::F16, v: DType::F16 };
}

impl Default for KvCacheTypes {
    fn default() -> KvCacheTypes {
        KvCacheTypes::F16
    }
}

/// The key and value caches of every layer, `[n_ctx, n_kv_head · head_dim]` each, of the
/// model's [`KvCacheTypes`] when they were allocated.
#[derive(Clone, Debug)]
pub struct KvCache {
    pub(crate) k: Vec<TensorId>,
    pub(crate) v: Vec<TensorId>,
}

/// What a caller reads after a forward pass (copied, so nothing is cloned per token).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Outputs {
    pub(crate) logits: TensorId,
    pub(crate) argmax: TensorId,
}

impl From<Outputs> for (TensorId, TensorId) {
    /// `(argmax, logits)`, as [`Model::read_row_outputs`] takes them.
    fn from(o: Outputs) -> (TensorId, TensorId) {
        (o.argmax, o.logits)
    }
}

/// A forward pass for one batch size: its programs and tensors.
pub(crate) struct Forward {
    /// Allocates the tensors and writes their constants.
    pub setup: Program,
    /// The pass itself; allocates nothing.
    pub pass: Program,
    /// Frees the tensors.
    pub teardown: Program,
    pub io: ForwardIo,
    pub live: bool,
}

/// TOP_K over the logits of one forward program: the candidates a sampler needs
/// ([`Model::forward_top_k`]). A session keeps at most one of these allocated at a time.
pub(crate) struct Candidates {
    /// Allocates `values` and `ids`.
    pub setup: Program,
    /// TOP_K of the forward's logits.
    pub pass: Program,
    /// Frees `values` and `ids`.
    pub teardown: Program,
    /// F32 `[rows, k]`.
    pub values: TensorId,
    /// U32 `[rows, k]`.
    pub ids: TensorId,
    /// F32 `[rows]`: each row's log-sum-exp, when asked for.
    pub lse: Option<TensorId>,
    pub live: bool,
}

/// TOP_K's outputs read back: values and ids (`[rows, k]`), and the rows' log-sum-exps
/// (empty when not asked for).
pub(crate) type TopKRead = (Vec<f32>, Vec<u32>, Vec<f32>);

impl Candidates {
    /// Its outputs: values, ids, and the log-sum-exps when it has them.
    pub(crate) fn tensors(&self) -> Vec<TensorId> {
        [self.values, self.ids].into_iter().chain(self.lse).collect()
    }
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

/// Tells the models of one process apart, so a session is never run on another's engine.
static NEXT_MODEL_ID: AtomicU64 = AtomicU64::new(0);

/// A model's weights loaded once on an engine. Running it needs a [`Session`]
/// ([`Model::new_session`]); several sessions share the weights, each with its own KV
/// cache, so one engine serves several conversations.
pub struct Model<E: Engine> {
    pub(crate) engine: E,
    pub(crate) config: ModelConfig,
    pub(crate) weights: Weights,
    pub(crate) activations: QuantizedActivations,
    /// The file the weights are mapped from, checked before every pass.
    pub(crate) source: FileWatch,
    pub(crate) id: u64,
    /// Sessions and shared caches opened so far: names their tensors uniquely in the
    /// registry.
    pub(crate) sessions_opened: u64,
    /// The dtypes of the caches sessions and shared caches get.
    pub(crate) kv_types: KvCacheTypes,
}

/// One sequence's state on a [`Model`]: its KV cache, the ids the cache holds, and the
/// forward programs recorded against it (one per batch size met; the single-token decode
/// program stays allocated, larger (prefill) ones are freed after use).
pub struct Session {
    model_id: u64,
    /// The prefix of this session's tensor names.
    pub(crate) name: String,
    kv: KvCache,
    n_ctx: usize,
    /// The model's training context (for messages).
    n_ctx_train: usize,
    forwards: HashMap<(usize, LogitsRows), Forward>,
    /// TOP_K programs by forward and `k` (at most one allocated).
    pub(crate) candidates: HashMap<((usize, LogitsRows), usize), Candidates>,
    /// The ids at KV positions `0..ids.len()`.
    ids: Vec<u32>,
    /// The position whose id the decode pass left on the engine (its greedy token), after a
    /// decode step at the position before.
    token_on_engine: Option<usize>,
    /// A position run with the id on the engine, whose value the host has not received yet
    /// (it joins `ids` when [`Model::receive_greedy`] delivers it).
    awaiting: Option<usize>,
    /// The verify pass (`Model::forward_rows`) whose tensors stay allocated: one at a time,
    /// since each holds every row's logits.
    pub(crate) live_verify: Option<(usize, LogitsRows)>,
}

/// A greedy decode step submitted by [`Model::submit_greedy`]; [`Model::receive_greedy`]
/// gives its token. Dropping it abandons the read (the step still ran).
#[derive(Debug)]
pub struct PendingToken {
    pub(crate) read: PendingRead,
    /// The position the step ran at: the token is the id for `pos + 1`.
    pos: usize,
}

impl PendingToken {
    /// The position the step ran at.
    pub(crate) fn pos(&self) -> usize {
        self.pos
    }
}

/// The ids a forward pass runs: written by the host, or the greedy token the decode pass
/// left on the engine.
#[derive(Clone, Copy)]
pub(crate) enum Input<'a> {
    Host(&'a [u32]),
    OnEngine,
}

impl Session {
    /// The KV cache's size in positions.
    pub fn n_ctx(&self) -> usize {
        self.n_ctx
    }

    /// The model's training context, the most a session may be given.
    pub fn n_ctx_train(&self) -> usize {
        self.n_ctx_train
    }

    /// The ids whose keys and values the KV cache holds, at positions `0..len`.
    pub fn cached_ids(&self) -> &[u32] {
        &self.ids
    }

    /// How many leading ids of `prompt` the KV cache already holds.
    pub fn common_prefix(&self, prompt: &[u32]) -> usize {
        prompt.iter().zip(&self.ids).take_while(|(a, b)| a == b).count()
    }

    /// Forgets what the KV cache holds: the next pass may start at position 0 only.
    pub fn clear(&mut self) {
        self.ids.clear();
        self.awaiting = None;
    }
}

impl<E: Engine> Model<E> {
    /// Loads the weights of `file` onto `engine` (zero-copy where the engine allows).
    pub fn load(engine: E, file: &GgufFile) -> Result<Model<E>, ModelError> {
        Model::load_with(engine, file, QuantizedActivations::default())
    }

    /// [`Model::load`], with the activations of block-quantized weights as `activations`
    /// says.
    pub fn load_with(
        mut engine: E,
        file: &GgufFile,
        activations: QuantizedActivations,
    ) -> Result<Model<E>, ModelError> {
        let config = ModelConfig::from_gguf(file)?;
        file.load_into(engine.memory_mut())?;
        let weights = Weights::bind(file, &config, engine.memory())?;
        Ok(Model {
            engine,
            config,
            weights,
            activations,
            source: file.watch(),
            id: NEXT_MODEL_ID.fetch_add(1, Ordering::Relaxed),
            sessions_opened: 0,
            kv_types: KvCacheTypes::default(),
        })
    }

    /// The dtypes of the KV caches that sessions and shared caches opened from now on get
    /// (F16 both by default). Those opened before keep theirs. Each must be F32 or F16
    /// (`purebee_isa::ops::is_cache_dtype`): the first pass over a cache of another dtype is
    /// refused when it is recorded (KV_WRITE's validation, a [`ModelError::Isa`]).
    pub fn set_kv_cache_types(&mut self, types: KvCacheTypes) {
        self.kv_types = types;
    }

    /// The dtypes of the KV caches sessions opened from now on get.
    pub fn kv_cache_types(&self) -> KvCacheTypes {
        self.kv_types
    }

    /// The hyper-parameters.
    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// The engine.
    pub fn engine(&self) -> &E {
        &self.engine
    }

    /// Turns the engine's per-kernel profiling on or off (`Engine::set_profiling`).
    pub fn set_profiling(&mut self, on: bool) -> ProfileSupport {
        self.engine.set_profiling(on)
    }

    /// The engine's kernel profile since the last call (`Engine::take_profile`).
    pub fn take_profile(&mut self) -> Vec<KernelProfile> {
        self.engine.take_profile()
    }

    /// A new session with a KV cache of `n_ctx` positions (0: the model's training
    /// context), allocated on the engine now.
    pub fn new_session(&mut self, n_ctx: usize) -> Result<Session, ModelError> {
        let n_ctx = if n_ctx == 0 { self.config.n_ctx_train } else { n_ctx };
        let name = format!("s{}", self.sessions_opened);
        self.sessions_opened += 1;
        let mut b = ProgramBuilder::new(&format!("{name}.kv-cache"), self.engine.memory_mut());
        let (mut k, mut v) = (Vec::new(), Vec::new());
        for l in 0..self.config.n_layer {
            let dims = [n_ctx, self.config.kv_width()];
            k.push(b.alloc(&format!("{name}.cache.{l}.k"), self.kv_types.k, &dims)?);
            v.push(b.alloc(&format!("{name}.cache.{l}.v"), self.kv_types.v, &dims)?);
        }
        let alloc = b.finish();
        self.engine.execute(&alloc, &[])?;
        Ok(Session {
            model_id: self.id,
            name,
            kv: KvCache { k, v },
            n_ctx,
            n_ctx_train: self.config.n_ctx_train,
            forwards: HashMap::new(),
            candidates: HashMap::new(),
            ids: Vec::new(),
            token_on_engine: None,
            awaiting: None,
            live_verify: None,
        })
    }

    /// Frees a session's KV cache and the tensors of its programs on the engine.
    pub fn free_session(&mut self, session: Session) -> Result<(), ModelError> {
        self.check_owner(&session)?;
        let mut b = ProgramBuilder::new(&format!("{}.free", session.name), self.engine.memory_mut());
        for f in session.forwards.values().filter(|f| f.live) {
            for &t in &f.io.tensors {
                b.free(t)?;
            }
        }
        for c in session.candidates.values().filter(|c| c.live) {
            for t in c.tensors() {
                b.free(t)?;
            }
        }
        for &t in session.kv.k.iter().chain(&session.kv.v) {
            b.free(t)?;
        }
        let free = b.finish();
        self.engine.execute(&free, &[])?;
        Ok(())
    }

    /// Runs `tokens` at positions `pos..` of `session` and returns the logits of every
    /// position (`rows = All`, `[n, vocab]` row-major) or of the last one (`[vocab]`).
    pub fn forward(
        &mut self,
        session: &mut Session,
        tokens: &[u32],
        pos: usize,
        rows: LogitsRows,
    ) -> Result<Vec<f32>, ModelError> {
        let flight = self.submit_forward(session, tokens, pos, Want::Logits(rows))?;
        match self.receive_forward(session, flight)? {
            Received::Logits(values) => Ok(values),
            other => Err(received_wrong(&other)),
        }
    }

    /// Runs `tokens` at positions `pos..` of `session` and returns the greedy next token
    /// after the last one, reading back only the 4 bytes of ARGMAX.
    pub fn forward_greedy(&mut self, session: &mut Session, tokens: &[u32], pos: usize) -> Result<u32, ModelError> {
        let flight = self.submit_forward(session, tokens, pos, Want::Argmax)?;
        match self.receive_forward(session, flight)? {
            Received::Argmax(id) => Ok(id),
            other => Err(received_wrong(&other)),
        }
    }

    /// Runs `tokens` at positions `pos..` of `session` and returns the `k` largest logits of
    /// the last position with their token ids, in the ISA's TOP_K rank order (larger first,
    /// ties by lower id, NaN last), reading back `8·k` bytes instead of the whole row.
    /// `k` is capped at the vocabulary (and must be at least 1); an engine with a smaller
    /// [`Engine::top_k_limit`] fails the run. Returns `(logits, ids)`.
    pub fn forward_top_k(
        &mut self,
        session: &mut Session,
        tokens: &[u32],
        pos: usize,
        k: usize,
    ) -> Result<(Vec<f32>, Vec<u32>), ModelError> {
        let k = k.clamp(1, self.config.n_vocab);
        let flight = self.submit_forward(session, tokens, pos, Want::TopK(k))?;
        match self.receive_forward(session, flight)? {
            Received::TopK { values, ids } => Ok((values, ids)),
            other => Err(received_wrong(&other)),
        }
    }

    /// TOP_K with `k` of the `rows` rows of `logits`, through the program kept in
    /// `candidates` under `key` (built the first time; at most one of `candidates` keeps its
    /// outputs allocated), its reads begun and not waited for: values, ids, and with
    /// `with_lse` each row's log-sum-exp from the same TOP_K ([`top_k_values`] decodes their
    /// bytes into `[rows, k]` row-major). `key` must tell programs with and without it apart.
    pub(crate) fn begin_top_k<K: std::hash::Hash + Eq>(
        &mut self,
        candidates: &mut HashMap<K, Candidates>,
        key: K,
        prefix: &str,
        logits: TensorId,
        (rows, k): (usize, usize),
        with_lse: bool,
    ) -> Result<Vec<PendingRead>, ModelError> {
        let c = match candidates.remove(&key) {
            Some(c) => c,
            None => self.build_candidates(prefix, logits, rows, k, with_lse)?,
        };
        // At most one TOP_K's outputs stay allocated.
        for other in candidates.values_mut().filter(|o| o.live) {
            self.engine.execute(&other.teardown, &[])?;
            other.live = false;
        }
        let c = candidates.entry(key).or_insert(c);
        if !c.live {
            self.engine.execute(&c.setup, &[])?;
            c.live = true;
        }
        self.engine.execute(&c.pass, &[])?;
        // Every read in one go: one submission on a GPU.
        let tensors = c.tensors();
        let pending = self.engine.read_later_all(&tensors)?;
        if pending.len() != tensors.len() {
            let reason = "read_later_all returned fewer reads than tensors".to_string();
            return Err(ExecError::Device { engine: self.engine.name(), reason }.into());
        }
        Ok(pending)
    }

    fn build_candidates(
        &mut self,
        prefix: &str,
        logits: TensorId,
        rows: usize,
        k: usize,
        with_lse: bool,
    ) -> Result<Candidates, ModelError> {
        let mut b = ProgramBuilder::new(prefix, self.engine.memory_mut());
        let values = b.declare(&format!("{prefix}.values"), DType::F32, &[rows, k])?;
        let ids = b.declare(&format!("{prefix}.ids"), DType::U32, &[rows, k])?;
        let lse = if with_lse {
            let lse = b.declare(&format!("{prefix}.lse"), DType::F32, &[rows])?;
            b.top_k_lse(values, ids, lse, logits, k as u32)?;
            Some(lse)
        } else {
            b.top_k(values, ids, logits, k as u32)?;
            None
        };
        let pass = b.finish();
        let outputs: Vec<TensorId> = [values, ids].into_iter().chain(lse).collect();
        let mut b = ProgramBuilder::new(&format!("{prefix}.setup"), self.engine.memory_mut());
        for &t in &outputs {
            b.grid_alloc(t)?;
        }
        let setup = b.finish();
        let mut b = ProgramBuilder::new(&format!("{prefix}.teardown"), self.engine.memory_mut());
        for &t in &outputs {
            b.free(t)?;
        }
        let teardown = b.finish();
        Ok(Candidates { setup, pass, teardown, values, ids, lse, live: false })
    }

    /// Runs one token at `pos` of `session` and starts reading its greedy next token back
    /// without waiting for it: `token`, or with `None` the greedy token that the decode step
    /// at `pos - 1` left on the engine, which never crosses to the host before it runs.
    /// On an engine whose reads overlap its work ([`Engine::reads_overlap`]) the host can
    /// queue the next step before this one's token arrives; [`Model::receive_greedy`] gives it.
    ///
    /// Errors: as [`Model::forward_greedy`], and [`ModelError::NoTokenOnEngine`] when `token`
    /// is `None` and the session's last step was not a decode step at `pos - 1`.
    pub fn submit_greedy(
        &mut self,
        session: &mut Session,
        token: Option<u32>,
        pos: usize,
    ) -> Result<PendingToken, ModelError> {
        let host_token;
        let input = match token {
            Some(t) => {
                host_token = [t];
                Input::Host(&host_token)
            }
            None => Input::OnEngine,
        };
        let (_, io) = self.run(session, input, pos, LogitsRows::Last)?;
        let read = self.engine.read_later(io.argmax)?;
        Ok(PendingToken { read, pos })
    }

    /// The greedy token of a step begun with [`Model::submit_greedy`] (waits for it).
    pub fn receive_greedy(&mut self, session: &mut Session, pending: PendingToken) -> Result<u32, ModelError> {
        self.check_owner(session)?;
        let bytes = self.engine.finish_read(pending.read)?;
        let token = bytes.get(..4).map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
        // A later step may already have run this token from the engine: it is now known.
        let at = pending.pos + 1;
        if session.awaiting == Some(at) && session.ids.len() == at {
            session.ids.push(token);
            session.awaiting = None;
        }
        Ok(token)
    }

    fn check_owner(&self, session: &Session) -> Result<(), ModelError> {
        if session.model_id != self.id {
            return Err(ModelError::ForeignSession { session: session.name.clone() });
        }
        Ok(())
    }

    /// Checks the request and that the model file is unchanged since it was opened, builds
    /// and allocates the forward for its size if needed, writes the ids and runs it.
    ///
    /// The weights are views of the file's memory map: had the file been truncated since, the
    /// pass would die of SIGBUS, so a changed file is an error naming it instead
    /// (`ModelError::Gguf(GgufError::ChangedSinceOpen)`). A truncation during the pass itself
    /// is caught by `memory`'s SIGBUS guard.
    pub(crate) fn run(
        &mut self,
        session: &mut Session,
        input: Input,
        pos: usize,
        rows: LogitsRows,
    ) -> Result<((usize, LogitsRows), Outputs), ModelError> {
        self.check_owner(session)?;
        let n = match input {
            Input::Host(tokens) => {
                if tokens.is_empty() {
                    return Err(ModelError::NoTokens);
                }
                if let Some(&id) = tokens.iter().find(|&&t| t as usize >= self.config.n_vocab) {
                    return Err(ModelError::TokenOutOfRange { id, vocab: self.config.n_vocab });
                }
                tokens.len()
            }
            Input::OnEngine => {
                if session.token_on_engine != Some(pos) || rows != LogitsRows::Last {
                    return Err(ModelError::NoTokenOnEngine { session: session.name.clone(), pos });
                }
                1
            }
        };
        if pos + n > session.n_ctx {
            return Err(ModelError::ContextFull {
                tokens: n,
                pos,
                n_ctx: session.n_ctx,
                n_ctx_train: session.n_ctx_train,
            });
        }
        self.source.check()?;
        let key = (n, rows);
        let f = match session.forwards.remove(&key) {
            Some(f) => f,
            None => self.build_forward(session, n, rows)?,
        };
        let f = session.forwards.entry(key).or_insert(f);
        if !f.live {
            self.engine.execute(&f.setup, &[])?;
            f.live = true;
        }
        if let Input::Host(tokens) = input {
            self.engine.write_u32(f.io.ids, tokens)?;
        }
        // Positions from `pos` on are overwritten; until the pass succeeds they hold nothing
        // known.
        session.ids.truncate(pos.min(session.ids.len()));
        session.awaiting = None;
        session.token_on_engine = None;
        let held = session.ids.len();
        self.engine.execute(&f.pass, &[ParamValue::U32(pos as u32)])?;
        match input {
            Input::Host(tokens) if held == pos => session.ids.extend_from_slice(tokens),
            Input::OnEngine if held == pos => session.awaiting = Some(pos),
            _ => {}
        }
        // The single-token pass leaves its greedy token in its own input (forward.rs).
        if key == (1, LogitsRows::Last) {
            session.token_on_engine = Some(pos + 1);
        }
        Ok((key, Outputs { logits: f.io.logits, argmax: f.io.argmax }))
    }

    /// Frees a multi-token forward's tensors after use; the decode forward stays.
    pub(crate) fn release_prefill(
        &mut self,
        session: &mut Session,
        key: (usize, LogitsRows),
    ) -> Result<(), ModelError> {
        if key.0 > 1 {
            if let Some(f) = session.forwards.get_mut(&key).filter(|f| f.live) {
                self.engine.execute(&f.teardown, &[])?;
                f.live = false;
            }
        }
        Ok(())
    }

    fn build_forward(&mut self, session: &Session, n: usize, rows: LogitsRows) -> Result<Forward, ModelError> {
        let prefix = match rows {
            LogitsRows::All => format!("{}.fwd{n}.all", session.name),
            LogitsRows::Last => format!("{}.fwd{n}.last", session.name),
        };
        let reg = self.engine.memory_mut();
        let mut b = ProgramBuilder::new(&prefix, reg);
        let pos = Place::Consecutive(b.param_u32("pos")?);
        let (cfg, w, acts) = (&self.config, &self.weights, self.activations);
        let io = record_forward(&mut b, cfg, w, &session.kv, n, Head::Rows(rows), &prefix, pos, acts)?;
        let pass = b.finish();
        self.forward_programs(&prefix, pass, io)
    }

    /// A recorded forward `pass` with its setup (allocate, write constants) and teardown
    /// (free) programs.
    pub(crate) fn forward_programs(
        &mut self,
        prefix: &str,
        pass: Program,
        io: ForwardIo,
    ) -> Result<Forward, ModelError> {
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

/// TOP_K's read bytes as `(values, ids, lse)` (`lse` empty when it was not read).
pub(crate) fn top_k_values(bytes: &[Vec<u8>]) -> TopKRead {
    let word = |c: &[u8]| [c[0], c[1], c[2], c[3]];
    let f32s = |b: &[u8]| b.chunks_exact(4).map(|c| f32::from_le_bytes(word(c))).collect::<Vec<f32>>();
    let ids = bytes.get(1).map_or_else(Vec::new, |b| b.chunks_exact(4).map(|c| u32::from_le_bytes(word(c))).collect());
    let values = bytes.first().map_or_else(Vec::new, |b| f32s(b));
    (values, ids, bytes.get(2).map_or_else(Vec::new, |b| f32s(b)))
}

/// [`Model::receive_forward`] gave another kind of output than its pass asked for (a bug).
fn received_wrong(got: &Received) -> ModelError {
    let reason = format!("a forward pass received {got:?}, not what it asked for");
    ModelError::Exec(ExecError::Device { engine: "runtime", reason })
}
