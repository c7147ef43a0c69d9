//! The tab's generation loop, driven natively as the page drives it (begin a step, ask
//! whether it is ready, finish it): the text of `purebee-rs run` (greedy), the stop
//! reasons, a chat that keeps its conversation, and errors named.

use std::path::PathBuf;

use purebee_engine_cpu::{CpuEngine, CpuOptions};
use purebee_engine_ref::RefEngine;
use purebee_isa::Engine;
use purebee_memory::gguf::GgufFile;
use purebee_runtime::sampler::SamplerConfig;
use purebee_runtime::tokenizer::Tokenizer;
use purebee_runtime::{generate, GenerateOptions, Model};
use purebee_web::{Finish, GenerateRequest, WebError, WebModel};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/bitnet-tiny").join(name)
}

fn greedy(max_tokens: usize) -> GenerateRequest {
    GenerateRequest { max_tokens, sampler: SamplerConfig { temperature: 0.0, ..SamplerConfig::default() } }
}

fn cpu() -> Box<dyn Engine> {
    Box::new(CpuEngine::new(&CpuOptions { threads: Some(1), simd: None }).expect("cpu engine"))
}

fn load(name: &str) -> WebModel {
    let bytes = std::fs::read(fixture(name)).expect("fixture reads");
    WebModel::load(name, bytes, cpu(), "cpu", 256).expect("loads")
}

/// Runs the started generation to its end, as the page's loop does.
fn drive(model: &mut WebModel) -> String {
    let mut text = String::new();
    while !model.done() {
        model.begin_step().expect("begin");
        while !model.step_ready() {
            std::thread::yield_now();
        }
        text.push_str(&model.finish_step().expect("finish"));
    }
    text
}

/// What `purebee-rs run FILE -p PROMPT -n N --temp 0` writes after the prompt.
fn run_text(name: &str, prompt: &str, n: usize) -> String {
    let file = GgufFile::open(fixture(name)).expect("opens");
    let tokenizer = Tokenizer::from_gguf(&file).expect("tokenizer");
    let mut model = Model::load(RefEngine::new(), &file).expect("loads");
    let mut session = model.new_session(256).expect("session");
    let ids = tokenizer.encode(prompt, true, true);
    let opts = GenerateOptions {
        max_new_tokens: n,
        ignore_eos: false,
        sampler: greedy(n).sampler,
        stop: None,
        speculation: None,
    };
    let g = generate(&mut model, &mut session, &ids, &opts, |t| tokenizer.is_eog(t), |_| {}).expect("generates");
    let mut decoder = tokenizer.stream_decoder().skip_control(true);
    let mut text: String = g.generated.iter().map(|&t| decoder.push(t)).collect();
    text.push_str(&decoder.finish());
    text
}

#[test]
fn a_completion_gives_the_command_lines_greedy_text() {
    for name in ["tiny_b158_i2_s.gguf", "tiny_bitnet_tq2_0.gguf"] {
        let mut model = load(name);
        model.start_completion("Once upon a time", &greedy(20)).expect("starts");
        let text = drive(&mut model);
        assert_eq!(text, run_text(name, "Once upon a time", 20), "{name}");
        // 20 tokens, unless the model ended its turn first.
        match model.finish_reason() {
            Some(Finish::Length) => assert_eq!(model.generated().len(), 20, "{name}"),
            Some(Finish::Stop) => assert!(model.generated().len() <= 20, "{name}"),
            other => panic!("{name}: ended with {other:?}"),
        }
    }
}

#[test]
fn the_stop_button_ends_a_generation_and_the_next_one_starts_clean() {
    let mut model = load("tiny_b158_i2_s.gguf");
    model.start_completion("Once upon a time", &greedy(20)).expect("starts");
    model.begin_step().expect("begin");
    model.stop();
    assert!(model.done());
    assert!(matches!(model.begin_step(), Err(WebError::NotGenerating)));
    model.start_completion("Once upon a time", &greedy(20)).expect("starts again");
    assert_eq!(drive(&mut model), run_text("tiny_b158_i2_s.gguf", "Once upon a time", 20));
}

#[test]
fn steps_out_of_order_are_errors() {
    let mut model = load("tiny_b158_i2_s.gguf");
    assert!(matches!(model.finish_step(), Err(WebError::NotGenerating)));
    model.start_completion("Hello", &greedy(4)).expect("starts");
    assert!(matches!(model.finish_step(), Err(WebError::NotGenerating)));
    model.begin_step().expect("begin");
    assert!(matches!(model.begin_step(), Err(WebError::NotGenerating)));
}

#[test]
fn a_damaged_file_is_named_in_the_error() {
    let mut bytes = std::fs::read(fixture("tiny_b158_i2_s.gguf")).expect("reads");
    bytes.truncate(bytes.len() / 2);
    let e = WebModel::load("half.gguf", bytes, cpu(), "cpu", 256).err().expect("a truncated file fails");
    assert!(e.to_string().contains("half.gguf"), "{e}");
}

#[test]
fn a_model_without_a_chat_template_says_so() {
    let mut model = load("tiny_b158_i2_s.gguf");
    if !model.has_chat_template() {
        let messages = vec![("user".to_string(), "Hi".to_string())];
        assert!(matches!(model.start_chat(&messages, &greedy(4)), Err(WebError::NoChatTemplate)));
    }
}
