//! Rules every kernel's WGSL keeps beyond what naga checks, for the browsers' compilers.

use super::Shader;

/// Every function-scope `var` has an initializer. WGSL gives a bare `var x: T;` the zero
/// value each time its declaration runs, but Chromium's WGSL compiler (Tint, on SwiftShader)
/// was seen to keep the last iteration's value for one declared in a loop, so that an
/// accumulator declared that way summed across iterations (BITLINEAR's `tiled`).
#[test]
fn every_function_var_is_initialized() {
    let mut bare = Vec::new();
    for shader in Shader::ALL {
        for (n, line) in shader.source().lines().enumerate() {
            let code = line.split("//").next().unwrap_or("").trim_end();
            let indented = line.starts_with(' ');
            if indented && code.trim_start().starts_with("var ") && !code.contains('=') {
                bare.push(format!("{} line {}: {}", shader.name(), n + 1, code.trim()));
            }
        }
    }
    assert!(bare.is_empty(), "function-scope vars without an initializer:\n{}", bare.join("\n"));
}
