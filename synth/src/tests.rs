//! The synthetic models against the shapes they copy and the fixtures they mimic.

use purebee_memory::gguf::GgufFile;
use purebee_memory::DType;
use purebee_rng::SplitMix64;
use purebee_runtime::tokenizer::Tokenizer;
use purebee_runtime::ModelConfig;

use crate::draws::ternary_scale;
use crate::*;

/// Sums of the planned tensors: (tensor count, parameters, bytes) per dtype.
fn totals(tensors: &[PlannedTensor], dtype: DType) -> (usize, usize, usize) {
    let of = tensors.iter().filter(|t| t.dtype == dtype);
    (of.clone().count(), of.clone().map(|t| t.n_elements()).sum(), of.map(|t| t.n_bytes().expect("small")).sum())
}

#[test]
fn bitnet_2b_plan_has_the_2b_4t_shapes_and_sizes() {
    let s = &BITNET_2B;
    assert_eq!((s.n_vocab, s.n_embd, s.n_layer, s.n_head, s.n_kv_head), (128_256, 2560, 30, 20, 5));
    assert_eq!((s.head_dim(), s.kv_width(), s.n_ff, s.n_ctx), (128, 640, 6912, 4096));
    assert_eq!((s.rope_base, s.rms_eps), (500_000.0, 1e-5));
    let p = plan(&ModelSpec::bitnet(s.clone(), DType::I2_S));
    assert_eq!(p.len(), 1 + 30 * 11 + 1);
    let ne = |name: &str| p.iter().find(|t| t.name == name).map(|t| (t.dtype, t.ne.clone()));
    assert_eq!(ne("token_embd.weight"), Some((DType::F16, vec![2560, 128_256])));
    assert_eq!(ne("blk.29.attn_q.weight"), Some((DType::I2_S, vec![2560, 2560])));
    assert_eq!(ne("blk.0.attn_k.weight"), Some((DType::I2_S, vec![2560, 640])));
    assert_eq!(ne("blk.0.attn_v.weight"), Some((DType::I2_S, vec![2560, 640])));
    assert_eq!(ne("blk.0.attn_output.weight"), Some((DType::I2_S, vec![2560, 2560])));
    assert_eq!(ne("blk.0.ffn_gate.weight"), Some((DType::I2_S, vec![2560, 6912])));
    assert_eq!(ne("blk.0.ffn_up.weight"), Some((DType::I2_S, vec![2560, 6912])));
    assert_eq!(ne("blk.0.ffn_down.weight"), Some((DType::I2_S, vec![6912, 2560])));
    assert_eq!(ne("blk.0.ffn_sub_norm.weight"), Some((DType::F32, vec![6912])));
    assert_eq!(ne("blk.0.attn_sub_norm.weight"), Some((DType::F32, vec![2560])));
    assert_eq!(ne("output_norm.weight"), Some((DType::F32, vec![2560])));
    assert_eq!(ne("output.weight"), None, "the LM head is tied");
    // Linear elements per layer: q, o 2560·2560; k, v 2560·640; gate, up, down 2560·6912
    // = 13,107,200 + 3,276,800 + 53,084,160 = 69,468,160. I2_S: n/4 + 32 per tensor.
    assert_eq!(totals(&p, DType::I2_S), (210, 30 * 69_468_160, 30 * (69_468_160 / 4 + 7 * 32)));
    assert_eq!(totals(&p, DType::I2_S).2, 521_017_920);
    // Norms per layer: 3·2560 + 6912 = 14,592, plus output_norm's 2560.
    assert_eq!(totals(&p, DType::F32), (121, 30 * 14_592 + 2560, 4 * (30 * 14_592 + 2560)));
    assert_eq!(totals(&p, DType::F16), (1, 328_335_360, 656_670_720));
    let all: usize = p.iter().map(|t| t.n_bytes().expect("small")).sum();
    assert_eq!(all, 1_179_449_920);
    assert_eq!(p.iter().map(PlannedTensor::n_elements).sum::<usize>(), 2_412_820_480);
    // The block formats: 69,468,160 / 256 = 271,360 blocks per layer.
    assert_eq!(totals(&plan(&ModelSpec::bitnet(s.clone(), DType::TQ2_0)), DType::TQ2_0).2, 30 * 271_360 * 66);
    assert_eq!(totals(&plan(&ModelSpec::bitnet(s.clone(), DType::TQ1_0)), DType::TQ1_0).2, 30 * 271_360 * 54);
}

#[test]
fn tiny_model_matches_the_fixture_layout() {
    let fixture = GgufFile::open(concat!(env!("CARGO_MANIFEST_DIR"), "/../fixtures/bitnet-tiny/tiny_b158_i2_s.gguf"))
        .expect("fixture");
    let planned = plan(&ModelSpec::bitnet(TINY, DType::I2_S));
    let theirs: Vec<(&str, DType, &[u64])> =
        fixture.tensors().iter().map(|t| (t.name.as_str(), t.dtype, t.ne.as_slice())).collect();
    let ours: Vec<(&str, DType, &[u64])> =
        planned.iter().map(|t| (t.name.as_str(), t.dtype, t.ne.as_slice())).collect();
    assert_eq!(ours, theirs);

    let ours =
        GgufFile::from_bytes("synthetic", &build(&ModelSpec::bitnet(TINY, DType::I2_S), 7).expect("builds").to_bytes())
            .expect("reads back");
    // Every fixture key but the merges' content and the chat template, plus ours.
    let keys = |f: &GgufFile| f.metadata().iter().map(|(k, _)| k.clone()).collect::<Vec<_>>();
    let mut expected: Vec<String> = keys(&fixture).into_iter().filter(|k| k != "tokenizer.chat_template").collect();
    expected.push("general.synthetic".into());
    expected.sort();
    let mut got = keys(&ours);
    got.sort();
    assert_eq!(got, expected);
    assert_eq!(ModelConfig::from_gguf(&ours).expect("config"), ModelConfig::from_gguf(&fixture).expect("config"));
    assert!(ours.get_bool("general.synthetic").expect("bool"));
    assert_eq!(ours.get_u64("synthetic.seed").expect("u64"), 7);
}

#[test]
fn the_tokenizer_loads_and_spells_bytes() {
    let f = GgufFile::from_bytes(
        "synthetic",
        &build(&ModelSpec::bitnet(TINY, DType::TQ2_0), 1).expect("builds").to_bytes(),
    )
    .expect("reads back");
    let tok = Tokenizer::from_gguf(&f).expect("a valid gpt2 tokenizer");
    assert_eq!(tok.token_count(), 8192);
    assert_eq!((tok.bos(), tok.eos(), tok.add_bos()), (Some(256), Some(257), true));
    assert_eq!(tok.encode("Hi é", true, true), vec![256, 72, 105, 32, 0xc3, 0xa9]);
    assert_eq!(tok.decode(&[72, 105, 32, 0xc3, 0xa9, 300]), "Hi é<synthetic_300>");
    assert!(tok.is_control(256) && tok.is_control(257) && !tok.is_control(258));
    assert!(tok.is_eog(257));
}

#[test]
fn the_draws_have_the_documented_distributions() {
    let mut rng = SplitMix64::new(99);
    let trits = rng.trits(1_000_003);
    assert_eq!(trits.len(), 1_000_003);
    let share = |v: i8| trits.iter().filter(|&&t| t == v).count() as f64 / trits.len() as f64;
    for (v, p) in [(-1, 0.3), (0, 0.4), (1, 0.3)] {
        assert!((share(v) - p).abs() < 0.003, "P({v}) = {}", share(v));
    }
    let z: Vec<f64> = (0..200_000).map(|_| rng.normal()).collect();
    let mean = z.iter().sum::<f64>() / z.len() as f64;
    let var = z.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / z.len() as f64;
    assert!(mean.abs() < 0.01 && (var - 1.0).abs() < 0.01, "mean {mean}, variance {var}");
    assert!(z.iter().all(|x| x.abs() < 6.0));
    // Vigna's splitmix64.c from state 0: the first output.
    assert_eq!(SplitMix64::new(0).next_u64(), 0xE220_A839_7B1D_CDAF);
    // The scale is exact in f16 and of the size that keeps outputs near unit variance.
    let s = ternary_scale(&mut rng, 2560);
    let expected = 1.0 / (0.6f64 * 2560.0).sqrt();
    assert!((f64::from(s.to_f32()) / expected - 1.0).abs() <= 0.11, "{s} vs {expected}");
}
