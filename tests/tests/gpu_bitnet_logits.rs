//! BitNet b1.58 end to end on the GPU engine: every acceptance check of the reference
//! engine (llama.cpp on the F32 models, the f64 reference on the ternary ones, decode vs
//! prefill by the ternary rules), and GPU logits against reference-engine logits: within
//! 1e-4 on the F32 fixtures, by the fixture README's ternary rules on the others
//! (summation order differs between engines, so an int8 rounding can flip; the
//! per-instruction proptests are where exactness is demanded).

use purebee_engine_gpu::{GpuEngine, GpuOptions};
use purebee_engine_ref::RefEngine;
use purebee_tests::bitnet_checks::{assert_ternary_rules, case_logits, check_f32_model, check_ternary_model, CASES};
use purebee_tests::differential::{gpu_tests_skipped, new_gpu_engine};

fn gpu() -> GpuEngine {
    new_gpu_engine(&GpuOptions::default())
}

#[test]
fn f32_models_match_llama_cpp_and_the_reference_engine() {
    if gpu_tests_skipped() {
        return;
    }
    for model in ["tiny_b158_f32", "tiny_bitnet_f32"] {
        check_f32_model(model, gpu());
        let (g, r) = (case_logits(model, gpu()), case_logits(model, RefEngine::new()));
        for (c, (g, r)) in CASES.iter().zip(g.iter().zip(&r)) {
            let max = g.data.iter().zip(&r.data).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
            assert!(max <= 1e-4, "{model} {c}: GPU vs reference engine max abs {max} > 1e-4");
        }
    }
}

#[test]
fn ternary_models_match_the_f64_reference_and_the_reference_engine() {
    if gpu_tests_skipped() {
        return;
    }
    for model in
        ["tiny_b158_i2_s", "tiny_b158_tq2_0", "tiny_b158_tq1_0", "tiny_bitnet_tq2_0", "tiny_bitnet_tq2_0_scaletensors"]
    {
        check_ternary_model(model, gpu(), false);
        let (g, r) = (case_logits(model, gpu()), case_logits(model, RefEngine::new()));
        for (c, (g, r)) in CASES.iter().zip(g.iter().zip(&r)) {
            assert_ternary_rules(g, r, &format!("{model} {c}: GPU vs reference engine"));
        }
    }
}
