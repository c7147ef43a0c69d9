//! Every format variant of the tiny model decodes to exactly the F32 variant's weights.
//!
//! The fixtures hold `W = s·T` with `T ∈ {−1, 0, +1}` and `s` exact in f16 (fixture README
//! §1), so I2_S, TQ1_0 and TQ2_0 (times the separate `.scale` tensor where present) must
//! equal the F32 file bit for bit. This checks every block layout of `memory::quant`
//! against files written by an independent converter.

use purebee_memory::gguf::GgufFile;
use purebee_memory::quant::dequantize;
use purebee_memory::DType;
use purebee_tests::tiny;

fn open(name: &str) -> GgufFile {
    GgufFile::open(tiny(&format!("{name}.gguf"))).expect("fixture opens")
}

/// Compares every `.weight` of `variant` (times its `.scale`) with `reference`'s.
fn assert_same_weights(variant: &str, reference: &str, expected_linear_type: DType) {
    let (v, r) = (open(variant), open(reference));
    let mut linear = 0;
    for info in r.tensors() {
        let want = dequantize(&r.host_tensor(&info.name).expect("tensor")).expect("decodes");
        let got_info = v.tensor_info(&info.name).expect("same tensor names");
        assert_eq!(got_info.shape, info.shape, "{variant}: {} shape", info.name);
        let mut got = dequantize(&v.host_tensor(&info.name).expect("tensor")).expect("decodes");
        if got_info.dtype.is_ternary() {
            assert_eq!(got_info.dtype, expected_linear_type, "{variant}: {}", info.name);
            linear += 1;
            let scale_name = info.name.replace(".weight", ".scale");
            if let Ok(scale) = v.host_tensor(&scale_name) {
                let s = dequantize(&scale).expect("decodes")[0];
                got.iter_mut().for_each(|w| *w *= s);
            }
        }
        for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
            assert!(g.to_bits() == w.to_bits(), "{variant}: {} element {i}: got {g}, expected {w}", info.name);
        }
    }
    // 7 linear weights per layer, 4 layers.
    assert_eq!(linear, 28, "{variant}: every linear weight is ternary");
}

#[test]
fn i2_s_decodes_to_the_f32_weights() {
    assert_same_weights("tiny_b158_i2_s", "tiny_b158_f32", DType::I2_S);
}

#[test]
fn tq2_0_decodes_to_the_f32_weights() {
    assert_same_weights("tiny_b158_tq2_0", "tiny_b158_f32", DType::TQ2_0);
    assert_same_weights("tiny_bitnet_tq2_0", "tiny_bitnet_f32", DType::TQ2_0);
}

#[test]
fn tq1_0_decodes_to_the_f32_weights() {
    assert_same_weights("tiny_b158_tq1_0", "tiny_b158_f32", DType::TQ1_0);
}

#[test]
fn tq2_0_with_separate_scale_tensors_decodes_to_the_f32_weights() {
    assert_same_weights("tiny_bitnet_tq2_0_scaletensors", "tiny_bitnet_f32", DType::TQ2_0);
}
