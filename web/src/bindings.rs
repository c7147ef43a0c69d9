//! The JavaScript API (wasm-bindgen). A page fills a [`ModelBytes`] with the file's chunks
//! as they download, hands it to [`load_model`] with the engine to use, then drives a
//! generation:
//!
//! ```js
//! model.startCompletion(prompt, maxTokens, temperature, topK, topP, minP, seed);
//! while (!model.done()) {
//!   model.beginStep();
//!   while (!model.stepReady()) await nextTask();  // lets WebGPU's mapAsync resolve
//!   show(model.finishStep());
//! }
//! ```

use purebee_engine_cpu::{CpuEngine, CpuOptions};
use purebee_engine_gpu::{GpuEngine, GpuOptions};
use purebee_isa::Engine;
use purebee_runtime::sampler::SamplerConfig;
use wasm_bindgen::prelude::*;

use crate::engine_check::EngineCheck;
use crate::{GenerateRequest, WebError, WebModel};

impl From<WebError> for JsValue {
    fn from(e: WebError) -> JsValue {
        JsError::new(&e.to_string()).into()
    }
}

/// A model file's bytes, gathered chunk by chunk in the module's memory (so the file is
/// never held twice, once in JavaScript and once here).
#[wasm_bindgen]
pub struct ModelBytes {
    bytes: Vec<u8>,
}

#[wasm_bindgen]
impl ModelBytes {
    /// Room for a file of `expected` bytes (0 when unknown).
    #[wasm_bindgen(constructor)]
    pub fn new(expected: f64) -> Result<ModelBytes, JsValue> {
        let mut bytes = Vec::new();
        // A length past the 4 GiB a wasm32 module can address fails here, by name.
        let expected = expected.max(0.0) as usize;
        bytes
            .try_reserve_exact(expected)
            .map_err(|_| JsError::new(&format!("a model of {expected} bytes does not fit in this tab's memory")))?;
        Ok(ModelBytes { bytes })
    }

    /// Appends a chunk.
    pub fn push(&mut self, chunk: &[u8]) -> Result<(), JsValue> {
        self.bytes.try_reserve(chunk.len()).map_err(|_| JsError::new("the model does not fit in this tab's memory"))?;
        self.bytes.extend_from_slice(chunk);
        Ok(())
    }

    /// Bytes gathered so far.
    #[wasm_bindgen(getter)]
    pub fn length(&self) -> f64 {
        self.bytes.len() as f64
    }
}

/// Whether this browser offers a WebGPU adapter.
#[wasm_bindgen(js_name = webgpuAvailable)]
pub async fn webgpu_available() -> bool {
    GpuEngine::new_async(&web_gpu_options()).await.is_ok()
}

fn web_gpu_options() -> GpuOptions {
    // A browser's adapter may be a software one (SwiftShader): accept it when asked for.
    GpuOptions { allow_cpu_adapter: true, ..GpuOptions::default() }
}

/// Loads the model in `bytes` (named `name` in errors) on `engine` (`"webgpu"` or `"cpu"`)
/// with a context of at most `n_ctx` positions. `"webgpu"` where no adapter exists is an
/// error, never a silent fall back to the CPU. `default_limits` asks WebGPU for its default
/// limits (128 MiB per binding, 256 MiB per buffer) instead of the adapter's own, as a
/// check that a model runs within them (tensors larger than a buffer are sharded).
#[wasm_bindgen(js_name = loadModel)]
pub async fn load_model(
    name: String,
    bytes: ModelBytes,
    engine: String,
    n_ctx: u32,
    default_limits: bool,
) -> Result<Model, JsValue> {
    let (engine, engine_name) = new_engine(&engine, default_limits).await?;
    let inner = WebModel::load(&name, bytes.bytes, engine, engine_name, n_ctx as usize)?;
    Ok(Model { inner })
}

/// The engine named `engine` (`"webgpu"` or `"cpu"`) and its name; `"webgpu"` without an
/// adapter is an error. `default_limits`: see [`load_model`].
async fn new_engine(engine: &str, default_limits: bool) -> Result<(Box<dyn Engine>, &'static str), WebError> {
    match engine {
        "webgpu" => {
            let options = GpuOptions { default_limits, ..web_gpu_options() };
            let gpu = GpuEngine::new_async(&options).await.map_err(|e| WebError::Engine(format!("WebGPU: {e}")))?;
            Ok((Box::new(gpu), "webgpu"))
        }
        "cpu" => {
            // One thread: a tab's threads need cross-origin isolation headers.
            let cpu = CpuEngine::new(&CpuOptions { threads: Some(1), simd: None })
                .map_err(|e| WebError::Engine(format!("cpu: {e}")))?;
            Ok((Box::new(cpu), "cpu"))
        }
        other => Err(WebError::Engine(format!("engine '{other}': use 'webgpu' or 'cpu'"))),
    }
}

/// Starts the engine check on `engine` (`"webgpu"` or `"cpu"`): each instruction family
/// against the reference engine, one case at a time, driven as a generation is:
///
/// ```js
/// const check = await startEngineCheck("webgpu");
/// while (!check.done()) {
///   check.begin();
///   while (!check.ready()) await nextTask();
///   const failure = check.finish();  // "" when the case agrees with the reference
/// }
/// ```
#[wasm_bindgen(js_name = startEngineCheck)]
pub async fn start_engine_check(engine: String) -> Result<Check, JsValue> {
    let (engine, _) = new_engine(&engine, false).await?;
    Ok(Check { check: EngineCheck::new()?, engine, last: String::new() })
}

/// The engine check in progress (see [`start_engine_check`]).
#[wasm_bindgen]
pub struct Check {
    check: EngineCheck,
    engine: Box<dyn Engine>,
    last: String,
}

#[wasm_bindgen]
impl Check {
    /// Whether every case has finished.
    pub fn done(&self) -> bool {
        self.check.done()
    }

    /// How many cases there are.
    #[wasm_bindgen(getter)]
    pub fn total(&self) -> u32 {
        self.check.progress().1 as u32
    }

    /// Submits the next case (never waits).
    pub fn begin(&mut self) -> Result<(), JsValue> {
        Ok(self.check.begin(self.engine.as_mut())?)
    }

    /// Whether the case's results have arrived (never waits).
    pub fn ready(&mut self) -> bool {
        self.check.ready(self.engine.as_mut())
    }

    /// Compares the case with the reference: `""` when it agrees, else how it differs. Its
    /// name is then [`Check::last`].
    pub fn finish(&mut self) -> Result<String, JsValue> {
        let outcome = self.check.finish(self.engine.as_mut())?;
        self.last = outcome.name;
        Ok(outcome.failure.unwrap_or_default())
    }

    /// The name of the case [`Check::finish`] last compared.
    #[wasm_bindgen(getter)]
    pub fn last(&self) -> String {
        self.last.clone()
    }
}

/// A loaded model and its generation (see the module's example).
#[wasm_bindgen]
pub struct Model {
    inner: WebModel,
}

fn request(max_tokens: u32, temperature: f32, top_k: u32, top_p: f32, min_p: f32, seed: f64) -> GenerateRequest {
    let sampler = SamplerConfig {
        temperature,
        top_k: top_k as usize,
        top_p,
        min_p,
        seed: seed as u64,
        ..SamplerConfig::default()
    };
    GenerateRequest { max_tokens: max_tokens as usize, sampler }
}

#[wasm_bindgen]
impl Model {
    /// The engine that runs the model: `"webgpu"` or `"cpu"`.
    #[wasm_bindgen(getter)]
    pub fn engine(&self) -> String {
        self.inner.engine().to_string()
    }

    /// The model's architecture and size.
    pub fn describe(&self) -> String {
        self.inner.describe()
    }

    /// Whether the model has a chat template.
    #[wasm_bindgen(js_name = hasChatTemplate)]
    pub fn has_chat_template(&self) -> bool {
        self.inner.has_chat_template()
    }

    /// Starts completing `prompt` as `purebee-rs run -p PROMPT` does.
    #[allow(clippy::too_many_arguments)]
    #[wasm_bindgen(js_name = startCompletion)]
    pub fn start_completion(
        &mut self,
        prompt: &str,
        max_tokens: u32,
        temperature: f32,
        top_k: u32,
        top_p: f32,
        min_p: f32,
        seed: f64,
    ) -> Result<(), JsValue> {
        Ok(self.inner.start_completion(prompt, &request(max_tokens, temperature, top_k, top_p, min_p, seed))?)
    }

    /// Starts the assistant's reply to the conversation `roles[i]: contents[i]`.
    #[allow(clippy::too_many_arguments)]
    #[wasm_bindgen(js_name = startChat)]
    pub fn start_chat(
        &mut self,
        roles: Vec<String>,
        contents: Vec<String>,
        max_tokens: u32,
        temperature: f32,
        top_k: u32,
        top_p: f32,
        min_p: f32,
        seed: f64,
    ) -> Result<(), JsValue> {
        let messages: Vec<(String, String)> = roles.into_iter().zip(contents).collect();
        Ok(self.inner.start_chat(&messages, &request(max_tokens, temperature, top_k, top_p, min_p, seed))?)
    }

    /// Whether the generation has ended.
    pub fn done(&self) -> bool {
        self.inner.done()
    }

    /// Why it ended: `stop`, `length` or `context` (empty while it runs).
    #[wasm_bindgen(js_name = finishReason)]
    pub fn finish_reason(&self) -> String {
        self.inner.finish_reason().map_or("", |f| f.name()).to_string()
    }

    /// Tokens generated so far.
    #[wasm_bindgen(js_name = generatedTokens)]
    pub fn generated_tokens(&self) -> u32 {
        self.inner.generated().len() as u32
    }

    /// The prompt's length in tokens.
    #[wasm_bindgen(js_name = promptTokens)]
    pub fn prompt_tokens(&self) -> u32 {
        self.inner.prompt_tokens() as u32
    }

    /// Ends the generation now.
    pub fn stop(&mut self) {
        self.inner.stop();
    }

    /// Runs the next step and begins reading its result.
    #[wasm_bindgen(js_name = beginStep)]
    pub fn begin_step(&mut self) -> Result<(), JsValue> {
        Ok(self.inner.begin_step()?)
    }

    /// Whether the step's result has arrived (never waits).
    #[wasm_bindgen(js_name = stepReady)]
    pub fn step_ready(&mut self) -> bool {
        self.inner.step_ready()
    }

    /// Takes the step's result: the text it completes.
    #[wasm_bindgen(js_name = finishStep)]
    pub fn finish_step(&mut self) -> Result<String, JsValue> {
        Ok(self.inner.finish_step()?)
    }
}
