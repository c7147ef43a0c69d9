//! BitNet b1.58 end to end on the reference engine, against llama.cpp's logits and the
//! independent float64 reference (the checks live in `purebee_tests::bitnet_checks`).

use purebee_engine_ref::RefEngine;
use purebee_tests::bitnet_checks::{check_f32_model, check_ternary_model};

#[test]
fn b158_f32_matches_llama_cpp() {
    check_f32_model("tiny_b158_f32", RefEngine::new());
}

#[test]
fn bitnet_f32_matches_llama_cpp() {
    check_f32_model("tiny_bitnet_f32", RefEngine::new());
}

#[test]
fn b158_i2_s_matches_the_reference() {
    check_ternary_model("tiny_b158_i2_s", RefEngine::new(), true);
}

#[test]
fn b158_tq2_0_matches_the_reference() {
    check_ternary_model("tiny_b158_tq2_0", RefEngine::new(), true);
}

#[test]
fn b158_tq1_0_matches_the_reference() {
    check_ternary_model("tiny_b158_tq1_0", RefEngine::new(), true);
}

#[test]
fn bitnet_tq2_0_matches_the_reference() {
    check_ternary_model("tiny_bitnet_tq2_0", RefEngine::new(), true);
}

#[test]
fn bitnet_tq2_0_with_scale_tensors_matches_the_reference() {
    check_ternary_model("tiny_bitnet_tq2_0_scaletensors", RefEngine::new(), true);
}
