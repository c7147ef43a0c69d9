//! The speed line `run` and `chat` print on stderr after generating.

use purebee_runtime::Generation;

/// Says on stderr how fast `engine` prefilled `prompt` (a description such as "12
/// tokens") of `n_prefilled` tokens and decoded the generated ones.
pub fn report(engine: &str, prompt: &str, n_prefilled: usize, g: &Generation) {
    let prompt_tps = g.prompt_tokens_per_s(n_prefilled);
    let decode_tps = g.decode_tokens_per_s();
    let ms_per_token = if decode_tps > 0.0 { 1000.0 / decode_tps } else { 0.0 };
    eprintln!(
        "purebee-rs: engine {engine}: prompt {prompt}, {prompt_tps:.1} tokens/s; generated {} tokens, {decode_tps:.1} tokens/s ({ms_per_token:.2} ms/token)",
        g.generated.len(),
    );
    let spec = g.speculation;
    if spec.passes > 0 {
        eprintln!(
            "purebee-rs: speculation: {} verify passes, {} drafted tokens, {} accepted ({:.1} %)",
            spec.passes,
            spec.drafted,
            spec.accepted,
            100.0 * spec.acceptance()
        );
    }
}
