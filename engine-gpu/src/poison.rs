//! Poisoned workgroup memory: a test facility that proves the kernels never read workgroup
//! memory before writing it.
//!
//! Pipelines are created without WebGPU's zero-initialization of `var<workgroup>` memory
//! (it costs every workgroup of every dispatch), which is sound only while no kernel reads
//! workgroup memory it has not written. Under `PUREBEE_GPU_POISON_WORKGROUP=1` every shader
//! module goes through [`poison`] before it is created: each compute entry point starts by
//! filling every workgroup variable it uses with [`POISON`], so a kernel that reads before
//! writing computes NaN (or a huge count) and the differential tests fail.

/// The pattern: a quiet NaN as f32, larger than any index or count as u32, negative as i32.
const POISON: &str = "0xffc0deadu";

/// `source` with, at the start of each compute entry point that uses workgroup variables,
/// a fill of all of them with [`POISON`] strided over the workgroup's invocations, then one
/// `workgroupBarrier()`. An entry point without a `local_invocation_index` builtin gets one as
/// a new parameter. Fails, rather than leave a variable unpoisoned, on a source that does
/// not validate and on a variable type it does not handle.
pub(crate) fn poison(source: &str) -> Result<String, String> {
    let (module, info) = crate::kernels::analyse(source)?;
    // (byte offset, text) insertions into `source`.
    let mut edits: Vec<(usize, String)> = Vec::new();
    for (index, ep) in module.entry_points.iter().enumerate() {
        let uses = info.get_entry_point(index);
        let vars: Vec<_> = module
            .global_variables
            .iter()
            .filter(|&(h, var)| var.space == naga::AddressSpace::WorkGroup && !uses[h].is_empty())
            .map(|(_, var)| var)
            .collect();
        if ep.stage != naga::ShaderStage::Compute || vars.is_empty() {
            continue;
        }
        let (open_paren, open_brace) = entry_function(source, &ep.name)?;
        let lidx = match local_invocation_index(&module, &ep.function) {
            Some(lidx) => lidx,
            None => {
                edits.push((open_paren + 1, "@builtin(local_invocation_index) poison_lidx: u32, ".to_string()));
                "poison_lidx".to_string()
            }
        };
        // The workgroup's invocations: the product of its sizes (overrides by name).
        let mut sizes = Vec::new();
        for d in 0..3 {
            match ep.workgroup_size_overrides.and_then(|o| o[d]) {
                Some(expr) => sizes.push(expression_text(&module, source, expr)?),
                None if ep.workgroup_size[d] != 1 => sizes.push(format!("{}u", ep.workgroup_size[d])),
                None => {}
            }
        }
        let stride = sizes.join(" * ");
        let stride = if stride.is_empty() { "1u".to_string() } else { stride };
        let mut fill = String::from("\n    // PUREBEE_GPU_POISON_WORKGROUP (poison.rs)\n");
        for var in vars {
            let name = var.name.as_deref().ok_or("an unnamed workgroup variable")?;
            let unsupported = || format!("entry point {}: workgroup variable {name}: type not handled", ep.name);
            match module.types[var.ty].inner {
                naga::TypeInner::Array { base, size, .. } => {
                    let len = match size {
                        naga::ArraySize::Constant(n) => format!("{n}u"),
                        naga::ArraySize::Pending(o) => override_text(&module, source, o)?,
                        naga::ArraySize::Dynamic => return Err(unsupported()),
                    };
                    let store = store(&module, base, &format!("{name}[poison_i]")).ok_or_else(unsupported)?;
                    fill += &format!(
                        "    for (var poison_i = {lidx}; poison_i < {len}; poison_i += {stride}) {{ {store} }}\n"
                    );
                }
                _ => {
                    let store = store(&module, var.ty, name).ok_or_else(unsupported)?;
                    fill += &format!("    if ({lidx} == 0u) {{ {store} }}\n");
                }
            }
        }
        fill.push_str("    workgroupBarrier();\n");
        edits.push((open_brace + 1, fill));
    }
    let mut out = source.to_string();
    edits.sort_by_key(|&(at, _)| std::cmp::Reverse(at));
    for (at, text) in edits {
        out.insert_str(at, &text);
    }
    Ok(out)
}

/// The statement storing the poison into `place` of type `ty`, if the type is a 32-bit
/// scalar, a vector of them, or an atomic.
fn store(module: &naga::Module, ty: naga::Handle<naga::Type>, place: &str) -> Option<String> {
    let scalar = |s: naga::Scalar| match s {
        naga::Scalar::F32 => Some("f32"),
        naga::Scalar::U32 => Some("u32"),
        naga::Scalar::I32 => Some("i32"),
        _ => None,
    };
    match module.types[ty].inner {
        naga::TypeInner::Scalar(s) => Some(format!("{place} = bitcast<{}>({POISON});", scalar(s)?)),
        naga::TypeInner::Vector { size, scalar: s } => {
            let t = scalar(s)?;
            Some(format!("{place} = vec{}<{t}>(bitcast<{t}>({POISON}));", size as u8))
        }
        naga::TypeInner::Atomic(s) => Some(format!("atomicStore(&{place}, bitcast<{}>({POISON}));", scalar(s)?)),
        _ => None,
    }
}

/// The WGSL expression of the entry point's `local_invocation_index` builtin: a parameter,
/// or a member of a struct parameter (`ids.lidx`).
fn local_invocation_index(module: &naga::Module, function: &naga::Function) -> Option<String> {
    let is_lidx =
        |b: &Option<naga::Binding>| matches!(b, Some(naga::Binding::BuiltIn(naga::BuiltIn::LocalInvocationIndex)));
    function.arguments.iter().find_map(|arg| {
        let name = arg.name.as_deref()?;
        if is_lidx(&arg.binding) {
            return Some(name.to_string());
        }
        match &module.types[arg.ty].inner {
            naga::TypeInner::Struct { members, .. } => members
                .iter()
                .find(|m| is_lidx(&m.binding))
                .and_then(|m| Some(format!("{name}.{}", m.name.as_deref()?))),
            _ => None,
        }
    })
}

/// The text of an override expression (a workgroup size): an override's name, or the
/// expression as the source writes it.
fn expression_text(
    module: &naga::Module,
    source: &str,
    expr: naga::Handle<naga::Expression>,
) -> Result<String, String> {
    match module.global_expressions[expr] {
        naga::Expression::Override(o) => override_text(module, source, o),
        _ => span_text(source, module.global_expressions.get_span(expr)),
    }
}

/// The text of an override: its name, or for an anonymous one (an array length such as
/// `HEADS * HD`) its expression as the source writes it.
fn override_text(module: &naga::Module, source: &str, o: naga::Handle<naga::Override>) -> Result<String, String> {
    match &module.overrides[o].name {
        Some(name) => Ok(name.clone()),
        None => span_text(source, module.overrides.get_span(o)),
    }
}

/// The source text of `span`, parenthesized.
fn span_text(source: &str, span: naga::Span) -> Result<String, String> {
    let text = span.to_range().and_then(|r| source.get(r)).ok_or("an override expression without its source")?;
    Ok(format!("({text})"))
}

/// The byte offsets of the `(` opening entry function `name`'s parameters and of the `{`
/// opening its body: the one `fn name(` outside a line comment.
fn entry_function(source: &str, name: &str) -> Result<(usize, usize), String> {
    let mut found = Vec::new();
    for (at, _) in source.match_indices("fn ") {
        let line_start = source[..at].rfind('\n').map_or(0, |i| i + 1);
        let after_keyword = at == 0 || source[..at].ends_with(char::is_whitespace);
        let rest = source[at + 3..].trim_start();
        let Some(after_name) = rest.strip_prefix(name) else { continue };
        if after_keyword && !source[line_start..at].contains("//") && after_name.trim_start().starts_with('(') {
            found.push(source.len() - after_name.trim_start().len());
        }
    }
    let [open_paren] = found[..] else {
        return Err(format!("entry point {name}: found {} declarations of it in the source", found.len()));
    };
    let mut depth = 0;
    for (i, c) in source[open_paren..].char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            '{' if depth == 0 => return Ok((open_paren, open_paren + i)),
            _ => {}
        }
    }
    Err(format!("entry point {name}: no body"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::Shader;

    fn validates(source: &str) -> Result<(), String> {
        crate::kernels::analyse(source).map(|_| ())
    }

    #[test]
    fn every_shader_poisoned_validates() {
        for shader in Shader::ALL {
            let poisoned = poison(shader.source()).unwrap_or_else(|e| panic!("{}: {e}", shader.name()));
            if let Err(e) = validates(&poisoned) {
                panic!("{} poisoned does not validate:\n{e}\n{poisoned}", shader.name());
            }
            assert_eq!(poisoned.contains("poison.rs"), shader.source().contains("var<workgroup>"), "{}", shader.name());
        }
    }

    #[test]
    fn a_read_before_write_gets_the_poison() {
        let source = "
override WG: u32 = 64u;
override N: u32 = 4u;
@group(0) @binding(0) var<storage, read_write> out: array<f32>;
var<workgroup> sums: array<f32, N * 2u>;
var<workgroup> count: atomic<u32>;
var<workgroup> lanes: array<vec2<i32>, 16>;
var<workgroup> unused: array<f32, 8>;
@compute @workgroup_size(WG)
fn main(@builtin(local_invocation_id) lid: vec3<u32>) {
    out[lid.x] = sums[lid.x] + f32(atomicLoad(&count)) + f32(lanes[0].x);
}
struct Ids { @builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lidx: u32 }
@compute @workgroup_size(8, 2)
fn other(ids: Ids) {
    out[ids.lidx] = sums[0];
}
";
        let poisoned = poison(source).expect("the test source poisons");
        validates(&poisoned).unwrap_or_else(|e| panic!("{e}\n{poisoned}"));
        for expected in [
            "fn main(@builtin(local_invocation_index) poison_lidx: u32, @builtin(local_invocation_id) lid",
            "for (var poison_i = poison_lidx; poison_i < (N * 2u); poison_i += WG) \
             { sums[poison_i] = bitcast<f32>(0xffc0deadu); }",
            "if (poison_lidx == 0u) { atomicStore(&count, bitcast<u32>(0xffc0deadu)); }",
            "for (var poison_i = poison_lidx; poison_i < 16u; poison_i += WG) \
             { lanes[poison_i] = vec2<i32>(bitcast<i32>(0xffc0deadu)); }",
            "for (var poison_i = ids.lidx; poison_i < (N * 2u); poison_i += 8u * 2u)",
        ] {
            assert!(poisoned.contains(expected), "missing {expected:?} in\n{poisoned}");
        }
        assert!(!poisoned.contains("unused[poison_i]"), "{poisoned}");
        assert_eq!(poisoned.matches("workgroupBarrier();").count(), 2);
    }

    /// On the device (lavapipe in CI; skipped with `PUREBEE_SKIP_GPU_TESTS=1`): a kernel that
    /// reads workgroup memory it never wrote reads the poison, even with zeroing on.
    #[test]
    fn a_read_before_write_reads_the_poison_on_the_device() {
        if purebee_testenv::gpu_tests_skipped() {
            return;
        }
        let source = "
var<workgroup> f: array<f32, 64>;
var<workgroup> u: atomic<u32>;
@group(0) @binding(0) var<storage, read_write> out: array<u32>;
@compute @workgroup_size(64)
fn main(@builtin(local_invocation_id) lid: vec3<u32>) {
    out[lid.x] = bitcast<u32>(f[lid.x]);
    if (lid.x == 0u) { out[64] = atomicLoad(&u); }
}
";
        let ctx = crate::GpuContext::new(&crate::GpuOptions::default()).expect("a wgpu adapter");
        let device = &ctx.device;
        let poisoned = poison(source).expect("the test source poisons");
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: None,
            source: wgpu::ShaderSource::Wgsl(poisoned.into()),
        });
        let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: None,
            layout: None,
            module: &module,
            entry_point: Some("main"),
            compilation_options: wgpu::PipelineCompilationOptions {
                constants: &[],
                zero_initialize_workgroup_memory: true,
            },
            cache: None,
        });
        let size = 65 * 4;
        let buffer = |usage| {
            device.create_buffer(&wgpu::BufferDescriptor { label: None, size, usage, mapped_at_creation: false })
        };
        let out = buffer(wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC);
        let staging = buffer(wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST);
        let bind = device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &pipeline.get_bind_group_layout(0),
            entries: &[wgpu::BindGroupEntry { binding: 0, resource: out.as_entire_binding() }],
        });
        let mut encoder = device.create_command_encoder(&wgpu::CommandEncoderDescriptor::default());
        {
            let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor::default());
            pass.set_pipeline(&pipeline);
            pass.set_bind_group(0, &bind, &[]);
            pass.dispatch_workgroups(1, 1, 1);
        }
        encoder.copy_buffer_to_buffer(&out, 0, &staging, 0, size);
        ctx.queue.submit([encoder.finish()]);
        let (tx, rx) = std::sync::mpsc::channel();
        staging.slice(..).map_async(wgpu::MapMode::Read, move |r| tx.send(r).unwrap_or(()));
        ctx.wait("test").expect("the dispatch runs");
        ctx.wait_mapped(&rx, "out").expect("out maps");
        let view = staging.get_mapped_range(0..size).expect("out's view");
        let words: Vec<u32> = bytemuck::cast_slice(&view).to_vec();
        assert!(words[..64].iter().all(|&w| f32::from_bits(w).is_nan()), "{words:x?}");
        assert_eq!(words[64], 0xffc0_dead);
    }

    #[test]
    fn an_unhandled_type_is_an_error() {
        let source = "
struct Pair { a: f32, b: u32 }
var<workgroup> pairs: array<Pair, 4>;
@compute @workgroup_size(4)
fn main(@builtin(local_invocation_index) i: u32) {
    pairs[i].a = 1.0;
}
";
        let e = poison(source).expect_err("a struct array is not handled");
        assert!(e.contains("main") && e.contains("pairs"), "{e}");
    }
}
