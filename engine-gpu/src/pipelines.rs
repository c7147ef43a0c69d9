//! Compute pipelines, cached by kernel identity and specialization (never by a free-form
//! string), and the shader modules they come from.

use std::collections::HashMap;

use crate::kernels::Shader;
use crate::{GpuContext, GpuError};

/// A pipeline's identity: the shader file, its entry point, and the values of its
/// `override` constants (workgroup size, variant switches).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct PipelineKey {
    pub shader: Shader,
    pub entry: &'static str,
    pub constants: Vec<(&'static str, u32)>,
}

/// Every pipeline and shader module created so far.
#[derive(Default)]
pub(crate) struct PipelineCache {
    modules: HashMap<Shader, wgpu::ShaderModule>,
    pipelines: HashMap<PipelineKey, wgpu::ComputePipeline>,
    /// The storage bindings each entry point reads (`kernels::bindings_read`).
    reads: HashMap<(Shader, &'static str), u64>,
}

impl PipelineCache {
    /// The storage bindings entry point `entry` of `shader` reads, as a bit mask (bit `n`:
    /// `@binding(n)`).
    pub fn bindings_read(&mut self, shader: Shader, entry: &'static str) -> u64 {
        *self.reads.entry((shader, entry)).or_insert_with(|| crate::kernels::bindings_read(shader.source(), entry))
    }

    /// The pipeline for `key`, created on first use. Fails only under
    /// `PUREBEE_GPU_POISON_WORKGROUP=1`, on a shader `poison.rs` cannot rewrite.
    pub fn get(&mut self, ctx: &GpuContext, key: &PipelineKey) -> Result<wgpu::ComputePipeline, GpuError> {
        if let Some(p) = self.pipelines.get(key) {
            return Ok(p.clone());
        }
        let module = match self.modules.get(&key.shader) {
            Some(module) => module.clone(),
            None => {
                let source: std::borrow::Cow<'static, str> = if ctx.poison_workgroup {
                    crate::poison::poison(key.shader.source())
                        .map_err(|e| GpuError::Wgpu(format!("poisoning {}: {e}", key.shader.name())))?
                        .into()
                } else {
                    key.shader.source().into()
                };
                let module = ctx.device.create_shader_module(wgpu::ShaderModuleDescriptor {
                    label: Some(key.shader.name()),
                    source: wgpu::ShaderSource::Wgsl(source),
                });
                self.modules.insert(key.shader, module.clone());
                module
            }
        };
        let constants: Vec<(&str, f64)> = key.constants.iter().map(|&(k, v)| (k, v as f64)).collect();
        let pipeline = ctx.device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(key.entry),
            layout: None,
            module: &module,
            entry_point: Some(key.entry),
            compilation_options: wgpu::PipelineCompilationOptions {
                constants: &constants,
                // No kernel reads workgroup memory before writing it, so WebGPU's zeroing
                // of it (on every workgroup of every dispatch) is waste. Tests check it with
                // `PUREBEE_GPU_POISON_WORKGROUP=1` (poison.rs).
                zero_initialize_workgroup_memory: false,
            },
            cache: None,
        });
        self.pipelines.insert(key.clone(), pipeline.clone());
        Ok(pipeline)
    }
}
