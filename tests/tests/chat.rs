//! Chat: the GGUF's template renders the prompt llama.cpp was given (`fixtures/smollm2`),
//! a conversation's later turns reuse the KV cache and still give exactly what a fresh
//! model gives on the whole conversation, and a full context or a bad template is a typed
//! error, never a panic.

use purebee_engine_ref::RefEngine;
use purebee_memory::gguf::{GgufFile, GgufWriter};
use purebee_runtime::chat::{tokenize_prompt, ChatError, ChatMessage, ChatTemplate, Conversation, CHAT_TEMPLATE_KEY};
use purebee_runtime::sampler::SamplerConfig;
use purebee_runtime::tokenizer::Tokenizer;
use purebee_runtime::{generate, GenerateOptions, KvCacheTypes, Model, Session, StopReason};
use purebee_tests::{fixtures_dir, smollm2_gguf, tiny};

const TINY: &str = "tiny_b158_f32.gguf";
const QUESTION: &str = "What is the capital of France?";

fn smollm2_case(name: &str) -> serde_json::Value {
    let path = fixtures_dir().join("smollm2").join(format!("{name}.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).expect("valid json")
}

fn ids_of(j: &serde_json::Value, key: &str) -> Vec<u32> {
    j[key].as_array().expect(key).iter().map(|v| v.as_u64().expect("id") as u32).collect()
}

fn open(path: &std::path::Path) -> (GgufFile, Tokenizer, ChatTemplate) {
    let file = GgufFile::open(path).expect("model opens");
    let tokenizer = Tokenizer::from_gguf(&file).expect("tokenizer");
    let template = ChatTemplate::from_gguf(&file, &tokenizer).expect("the file has a chat template");
    (file, tokenizer, template)
}

fn greedy(max_new_tokens: usize) -> GenerateOptions {
    GenerateOptions {
        max_new_tokens,
        ignore_eos: false,
        sampler: SamplerConfig { temperature: 0.0, ..SamplerConfig::default() },
        stop: None,
        speculation: None,
    }
}

fn tiny_conversation(n_ctx: usize) -> Conversation<RefEngine> {
    let (file, tokenizer, template) = open(&tiny(TINY));
    let (model, session) = model_and_session(&file, n_ctx);
    Conversation::new(model, session, tokenizer, template, None)
}

fn model_and_session(file: &GgufFile, n_ctx: usize) -> (Model<RefEngine>, Session) {
    let mut model = Model::load(RefEngine::new(), file).expect("model loads");
    // F32 caches: the bounds and goldens here are F32 references'.
    model.set_kv_cache_types(KvCacheTypes::F32);
    let session = model.new_session(n_ctx).expect("session allocates");
    (model, session)
}

#[test]
fn the_tiny_models_template_renders_the_prompt_llama_cpp_was_given() {
    let file = GgufFile::open(tiny(TINY)).expect("fixture opens");
    assert!(file.get_str(CHAT_TEMPLATE_KEY).is_ok_and(|t| t.contains("<|im_start|>")), "ChatML template in {TINY}");
    let (_, _, template) = open(&tiny(TINY));
    let chat = smollm2_case("chat");
    let want = chat["prompt"].as_str().expect("prompt");
    let user = ChatMessage::new("user", QUESTION);
    // SmolLM2's template inserts its default system prompt when none is given...
    let rendered = template.render(std::slice::from_ref(&user), true).expect("renders");
    assert_eq!(rendered, want);
    // ...so a system message of that text gives the same prompt, and another text replaces it.
    let default_system = "You are a helpful AI assistant named SmolLM, trained by Hugging Face";
    let with_default = [ChatMessage::new("system", default_system), user.clone()];
    assert_eq!(template.render(&with_default, true).expect("renders"), want);
    let with_other = [ChatMessage::new("system", "Be brief."), user.clone()];
    let other = template.render(&with_other, true).expect("renders");
    assert!(other.starts_with("<|im_start|>system\nBe brief.<|im_end|>\n") && !other.contains("SmolLM"), "{other}");
    // chat_nosys is the raw ChatML without a system turn, which this template never
    // renders: it is the rendered prompt with the system turn cut off.
    let nosys = smollm2_case("chat_nosys");
    let nosys = nosys["prompt"].as_str().expect("prompt");
    assert_ne!(rendered, nosys);
    assert!(rendered.ends_with(nosys) && other.ends_with(nosys));
    // Without the generation prompt the text ends after the user's turn.
    let no_gen = template.render(std::slice::from_ref(&user), false).expect("renders");
    assert_eq!(format!("{no_gen}<|im_start|>assistant\n"), want);
}

#[test]
fn smollm2s_template_and_tokenizer_give_llama_cpps_prompt_ids() {
    let Some(path) = smollm2_gguf() else { return };
    let (_, tokenizer, template) = open(&path);
    let chat = smollm2_case("chat");
    let rendered = template.render(&[ChatMessage::new("user", QUESTION)], true).expect("renders");
    assert_eq!(rendered, chat["prompt"].as_str().expect("prompt"));
    assert_eq!(tokenize_prompt(&tokenizer, &rendered), ids_of(&chat, "prompt_token_ids"));
    assert_eq!(tokenizer.token_text(2), Some("<|im_end|>"));
    assert!(tokenizer.is_eog(2) && tokenizer.is_eog(0), "<|im_end|> and <|endoftext|> end generation");
}

#[test]
fn later_turns_reuse_the_kv_cache_and_equal_a_fresh_prefill_of_the_whole_conversation() {
    let mut conv = tiny_conversation(256);
    let opts = greedy(6);
    let first = conv.reply("Hello there.", &opts, |_| {}).expect("first turn");
    assert_eq!(first.reused_tokens, 0);
    let cached_after_first = conv.cached_ids().to_vec();
    let mut streamed = String::new();
    let second = conv.reply(QUESTION, &opts, |piece| streamed.push_str(piece)).expect("second turn");
    assert_eq!(streamed, second.text);
    // At least the first turn's prompt stays in the cache; only the rest is prefilled.
    assert!(second.reused_tokens >= first.prompt_tokens, "{} < {}", second.reused_tokens, first.prompt_tokens);
    assert!(second.reused_tokens <= cached_after_first.len());
    assert!(second.prefilled_tokens() < second.prompt_tokens);

    // The same conversation up to the second question, from scratch on a fresh model.
    let messages = conv.messages();
    assert_eq!(messages.len(), 4);
    assert_eq!((messages[1].role.as_str(), messages[1].content.as_str()), ("assistant", first.text.as_str()));
    let (file, tokenizer, template) = open(&tiny(TINY));
    let prompt = tokenize_prompt(&tokenizer, &template.render(&messages[..3], true).expect("renders"));
    assert_eq!(prompt.len(), second.prompt_tokens);
    assert_eq!(&conv.cached_ids()[..prompt.len()], &prompt[..], "the cache holds the second prompt");
    let (mut fresh, mut session) = model_and_session(&file, 256);
    let want = generate(&mut fresh, &mut session, &prompt, &opts, |t| tokenizer.is_eog(t), |_| {}).expect("generates");
    assert_eq!(second.generation.generated, want.generated);
    assert_eq!(second.generation.stop, want.stop);

    // Starting over forgets the messages; the next turn prefills from position 0 again.
    conv.clear();
    assert!(conv.messages().is_empty() && conv.cached_ids().is_empty());
    let again = conv.reply("Hello there.", &opts, |_| {}).expect("turn after clear");
    assert_eq!((again.reused_tokens, again.generation.generated), (0, first.generation.generated));

    // A turn that generates nothing runs nothing: the cache does not claim its prompt.
    conv.clear();
    let nothing = conv.reply("Hello there.", &greedy(0), |_| {}).expect("empty turn");
    assert!(nothing.generation.generated.is_empty() && conv.cached_ids().is_empty());
}

/// A new system message mid-conversation keeps the turns so far; the next turn's prompt is
/// the whole conversation rendered under it, and its answer that of a fresh prefill of it.
#[test]
fn a_new_system_message_keeps_the_conversation_and_is_in_the_next_prompt() {
    let mut conv = tiny_conversation(256);
    let opts = greedy(4);
    let first = conv.reply("Hello there.", &opts, |_| {}).expect("first turn");
    conv.set_system(Some("Be brief.".to_string()));
    assert_eq!(conv.system(), Some("Be brief."));
    let second = conv.reply(QUESTION, &opts, |_| {}).expect("second turn");
    let roles: Vec<&str> = conv.messages().iter().map(|m| m.role.as_str()).collect();
    assert_eq!(roles, ["system", "user", "assistant", "user", "assistant"]);
    assert_eq!(conv.messages()[2].content, first.text);
    let (file, tokenizer, template) = open(&tiny(TINY));
    let prompt = tokenize_prompt(&tokenizer, &template.render(&conv.messages()[..4], true).expect("renders"));
    assert_eq!(&conv.cached_ids()[..prompt.len()], &prompt[..], "the cache holds the prompt under the new system");
    let (mut fresh, mut session) = model_and_session(&file, 256);
    let want = generate(&mut fresh, &mut session, &prompt, &opts, |t| tokenizer.is_eog(t), |_| {}).expect("generates");
    assert_eq!(second.generation.generated, want.generated);
    // No system message again: the next prompt has none (the template's default, here).
    conv.set_system(None);
    assert_eq!(conv.messages()[0].role, "user");
}

#[test]
fn a_conversation_that_outgrows_the_context_is_a_typed_error_and_stays_as_it_was() {
    let (_, tokenizer, template) = open(&tiny(TINY));
    let first_prompt =
        tokenize_prompt(&tokenizer, &template.render(&[ChatMessage::new("user", "Hi")], true).expect("renders"));
    // Room for the first prompt and two generated tokens: the answer is cut by the context.
    let mut conv = tiny_conversation(first_prompt.len() + 2);
    let long = GenerateOptions { ignore_eos: true, ..greedy(50) };
    let reply = conv.reply("Hi", &long, |_| {}).expect("first turn fits");
    assert_eq!(reply.prompt_tokens, first_prompt.len());
    assert_eq!((reply.generation.stop, reply.generation.generated.len()), (StopReason::ContextFull, 3));
    // The next turn's prompt cannot fit: a typed error with the numbers, nothing changed.
    let before = conv.messages().to_vec();
    match conv.reply("And then?", &long, |_| {}) {
        Err(e @ ChatError::ContextFull { .. }) => {
            let ChatError::ContextFull { prompt_tokens, n_ctx } = e else { unreachable!() };
            assert_eq!(n_ctx, first_prompt.len() + 2);
            assert!(prompt_tokens > n_ctx);
            assert!(e.to_string().contains(&format!("outgrown the context of {n_ctx} tokens")), "{e}");
        }
        other => panic!("expected ContextFull, got {other:?}"),
    }
    assert_eq!(conv.messages(), &before[..]);
}

/// A GGUF with only a chat template key (or none).
fn template_only(template: Option<&str>) -> GgufFile {
    let mut w = GgufWriter::new();
    w.add_str("general.architecture", "llama").expect("valid key");
    if let Some(t) = template {
        w.add_str(CHAT_TEMPLATE_KEY, t).expect("valid key");
    }
    GgufFile::from_bytes("chat-test.gguf", &w.to_bytes()).expect("parses")
}

#[test]
fn a_missing_or_broken_template_is_a_typed_error_naming_the_key() {
    let tokenizer = Tokenizer::from_gguf(&GgufFile::open(tiny(TINY)).expect("opens")).expect("tokenizer");
    match ChatTemplate::from_gguf(&template_only(None), &tokenizer) {
        Err(e @ ChatError::MissingTemplate { .. }) => {
            let m = e.to_string();
            assert!(m.contains("chat-test.gguf") && m.contains(CHAT_TEMPLATE_KEY) && m.contains("-p"), "{m}");
        }
        other => panic!("expected MissingTemplate, got {other:?}"),
    }
    match ChatTemplate::from_gguf(&template_only(Some("{% for m in messages %}{{ m.content }}")), &tokenizer) {
        Err(e @ ChatError::Parse { .. }) => {
            let m = e.to_string();
            assert!(m.starts_with("chat-test.gguf: ") && m.contains(CHAT_TEMPLATE_KEY), "{m}")
        }
        other => panic!("expected a parse error, got {other:?}"),
    }
    // A template that raises on a system message: it loads, and rendering one is a typed
    // error naming the file and carrying the template's message.
    let rejects = "{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}{% for m in messages %}{{ m.content }}{% endfor %}";
    let template = ChatTemplate::from_gguf(&template_only(Some(rejects)), &tokenizer).expect("parses");
    match template.render(&[ChatMessage::new("system", "s"), ChatMessage::new("user", "x")], true) {
        Err(e @ ChatError::Render { .. }) => {
            let m = e.to_string();
            assert!(m.starts_with("chat-test.gguf: ") && m.contains("System role not supported"), "{m}")
        }
        other => panic!("expected a render error, got {other:?}"),
    }
    // The error of a conversation's turn is the same typed error, and the turn is undone.
    let file = GgufFile::open(tiny(TINY)).expect("opens");
    let (model, session) = model_and_session(&file, 64);
    let mut conv = Conversation::new(model, session, tokenizer, template, Some("sys".into()));
    assert!(matches!(conv.reply("x", &greedy(2), |_| {}), Err(ChatError::Render { .. })));
    assert_eq!(conv.messages(), &[ChatMessage::new("system", "sys")]);
}

/// Bad-file checklist: a chat template that raises whatever the conversation (here on its
/// only user message) is refused when the file is loaded, naming the file and the message.
#[test]
fn a_template_that_raises_on_every_conversation_is_refused_at_load_naming_the_file() {
    let tokenizer = Tokenizer::from_gguf(&GgufFile::open(tiny(TINY)).expect("opens")).expect("tokenizer");
    for source in [
        "{{ raise_exception('Only user and assistant roles are supported!') }}",
        "{% for m in messages %}{{ m.content.no_such_method() }}{% endfor %}",
    ] {
        match ChatTemplate::from_gguf(&template_only(Some(source)), &tokenizer) {
            Err(e @ ChatError::Render { .. }) => {
                let m = e.to_string();
                assert!(
                    m.starts_with("chat-test.gguf: ")
                        && m.contains(CHAT_TEMPLATE_KEY)
                        && m.contains("failed to render")
                        && m.contains("rendering one user message"),
                    "{m}"
                );
                if source.contains("raise_exception") {
                    assert!(m.contains("Only user and assistant roles are supported!"), "{m}");
                }
            }
            other => panic!("{source}: expected a render error at load, got {other:?}"),
        }
    }
}

// Hostile chat templates that grow memory without bound: each
// ends in a render error naming the template, within a bounded memory. Each runs in a child
// process (this test binary again) limited to 1 GiB of address space, so that a regression
// is a failed test rather than a test run killed for memory; every case asks for more than
// that, and its smaller version first shows that the construct does grow memory.

/// Set in the child that runs one memory test.
const MEMORY_CHILD: &str = "PUREBEE_TEMPLATE_MEMORY_CHILD";

/// The address space of that child, in KiB (`ulimit -v`).
const MEMORY_CHILD_LIMIT_KIB: u64 = 1 << 20;

/// Runs `body`, the test that calls it, in a child copy of this test binary limited to
/// [`MEMORY_CHILD_LIMIT_KIB`] (on Linux; elsewhere, where `ulimit -v` may not hold, in this
/// process), and fails unless it passes there: an allocation past the limit aborts the
/// child, not the test run.
fn in_a_memory_limited_child(body: impl FnOnce()) {
    if std::env::var_os(MEMORY_CHILD).is_some() || !cfg!(target_os = "linux") {
        return body();
    }
    // libtest runs each test on a thread named after it.
    let test = std::thread::current().name().expect("a test thread's name").to_string();
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit -v {MEMORY_CHILD_LIMIT_KIB} && exec \"$0\" \"$@\""))
        .arg(std::env::current_exe().expect("the test binary"))
        .args([test.as_str(), "--exact", "--nocapture", "--test-threads=1", "--include-ignored"])
        .env(MEMORY_CHILD, "1")
        .output()
        .expect("sh runs the child");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "{test}, in a child limited to {MEMORY_CHILD_LIMIT_KIB} KiB: {}\n{stdout}\n{stderr}",
        out.status
    );
}

/// What `source` renders for one user message saying `content`.
fn render_one(source: &str, content: &str) -> Result<String, ChatError> {
    ChatTemplate::new(source, "<s>", "</s>")?.render(&[ChatMessage::new("user", content)], true)
}

/// Asserts that `source` is a render error naming the template whose message has `why`.
fn assert_render_error(source: &str, content: &str, why: &str) {
    match render_one(source, content) {
        Err(e @ ChatError::Render { .. }) => {
            let m = e.to_string();
            assert!(m.contains(CHAT_TEMPLATE_KEY) && m.contains("failed to render") && m.contains(why), "{m}");
        }
        other => panic!("{source:.200}: expected a render error, got {:?}", other.map(|s| s.len())),
    }
}

/// `step` (a statement over `s`) written `n` times after `start`, then `s`'s length.
fn repeated(start: &str, step: &str, n: usize, end: &str) -> String {
    format!("{start}{}{end}", step.repeat(n))
}

#[test]
fn a_template_that_doubles_a_string_with_tilde_or_plus_is_a_render_error() {
    in_a_memory_limited_child(|| {
        for op in ["~", "+"] {
            let step = format!("{{% set s = s {op} s %}}");
            let source = |n| repeated("{% set s = 'x' %}", &step, n, "{{ s|length }}");
            assert_eq!(render_one(&source(20), "hi").ok().as_deref(), Some("1048576"), "{op}");
            // 2^40 bytes.
            assert_render_error(&source(40), "hi", "used up its fuel");
        }
    });
}

#[test]
fn a_template_that_doubles_a_string_through_a_namespace_in_a_loop_is_a_render_error() {
    in_a_memory_limited_child(|| {
        let source = |n| {
            format!(
                "{{% set ns = namespace(s='x') %}}{{% for i in range({n}) %}}{{% set ns.s = ns.s ~ ns.s %}}{{% endfor %}}{{{{ ns.s|length }}}}"
            )
        };
        assert_eq!(render_one(&source(20), "hi").ok().as_deref(), Some("1048576"));
        assert_render_error(&source(40), "hi", "used up its fuel");
    });
}

#[test]
fn a_template_that_grows_a_string_with_replace_is_a_render_error() {
    in_a_memory_limited_child(|| {
        // Each round makes the string ten times longer: the filter and Python's method.
        for replace in
            ["ns.s|replace('x', 'xxxxxxxxxx')", "ns.s.replace('x', 'xxxxxxxxxx')", "ns.s|replace('', 'yyyyyyyyy')"]
        {
            let source = |n| {
                format!(
                    "{{% set ns = namespace(s='xxxxxxxxxx') %}}{{% for i in range({n}) %}}{{% set ns.s = {replace} %}}{{% endfor %}}{{{{ ns.s|length }}}}"
                )
            };
            let grown = render_one(&source(4), "hi").ok().and_then(|n| n.parse::<u64>().ok());
            assert!(grown.is_some_and(|n| n >= 100_000), "{replace}: {grown:?}");
            // 10^13 bytes.
            assert_render_error(&source(12), "hi", "used up its fuel");
        }
    });
}

#[test]
fn a_template_that_joins_a_huge_list_is_a_render_error() {
    in_a_memory_limited_child(|| {
        // `list * n` is lazy: the join writes n × 1000 items of 3 digits and 20 bytes.
        let source = |n| format!("{{{{ ((range(1000)|list) * {n})|join('xxxxxxxxxxxxxxxxxxxx')|length }}}}");
        assert_eq!(render_one(&source(10), "hi").ok().as_deref(), Some("228880"));
        // 100,000,000 items: 2.3 GB.
        assert_render_error(&source(100_000), "hi", "used up its fuel");
    });
}

#[test]
fn a_template_that_repeats_a_string_near_minijinjas_cap_is_a_render_error() {
    in_a_memory_limited_child(|| {
        // minijinja refuses `'x' * n` past 100 MB only; forty of them in a list are 4 GB.
        let source = |len: usize, n: usize| {
            format!(
                "{{% set ns = namespace(l=[]) %}}{{% for i in range({n}) %}}{{% set ns.l = ns.l + ['x' * {len}] %}}{{% endfor %}}{{{{ ns.l|join|length }}}}"
            )
        };
        assert_eq!(render_one(&source(1_000_000, 3), "hi").ok().as_deref(), Some("3000000"));
        assert_render_error(&source(99_999_999, 40), "hi", "used up its fuel");
    });
}

#[test]
fn python_format_widths_beyond_the_fuel_are_a_render_error() {
    in_a_memory_limited_child(|| {
        assert_eq!(render_one("{{ '{:>1000}'.format('x')|length }}", "hi").ok().as_deref(), Some("1000"));
        // One allocation of 100 GB each, which aborted the process.
        for format in ["'{:>99999999999}'.format('x')", "'{:099999999999}'.format(1)"] {
            assert_render_error(&format!("{{{{ {format}|length }}}}"), "hi", "used up its fuel");
        }
    });
}

#[test]
fn a_huge_tojson_indent_is_a_render_error() {
    in_a_memory_limited_child(|| {
        let json = render_one("{{ messages|tojson(indent=2) }}", "hi").expect("renders");
        assert!(json.starts_with("[\n  {\n    \"content\": \"hi\""), "{json}");
        assert_eq!(render_one("{{ messages|tojson(true) }}", "hi").ok(), Some(json));
        // 10^11 spaces before each line, which aborted the process.
        for indent in ["indent=100000000000", "100000000000"] {
            assert_render_error(&format!("{{{{ messages|tojson({indent})|length }}}}"), "hi", "tojson indent");
        }
    });
}

#[test]
fn splitting_a_long_message_into_many_parts_is_paid_for_before_the_parts_exist() {
    in_a_memory_limited_child(|| {
        // 50 MB of the message cut into 50 million parts: 1.2 GB of list before minijinja
        // charged for it. Real templates cut messages into a few parts, which renders.
        let content = "x".repeat(50_000_000);
        for split in [
            "messages[0]['content'].split('x')",
            "messages[0]['content']|split('x')",
            "messages[0]['content'].replace('x', '\\n').splitlines()",
            "messages[0]['content']|replace('x', '\\n')|lines",
        ] {
            let source = format!("{{{{ ({split})|length }}}}");
            assert_eq!(
                render_one(&source, "a\nb\nc").ok().as_deref(),
                Some(if split.contains("lines") { "3" } else { "1" })
            );
            assert_render_error(&source, &content, "used up its fuel");
        }
        let think = "{{ messages[0]['content'].split('</think>')[-1]|length }}";
        assert_eq!(render_one(think, &format!("{content}</think>ok")).ok().as_deref(), Some("2"));
    });
}

#[test]
fn raise_exception_keeps_the_start_of_a_message_that_would_format_to_terabytes() {
    in_a_memory_limited_child(|| {
        // A list holding a list twice, forty deep: 2^40 strings when formatted.
        let source =
            repeated("{% set l = ['xxxxxxxxxxxxxxxx'] %}", "{% set l = [l, l] %}", 40, "{{ raise_exception(l) }}");
        match render_one(&source, "hi") {
            Err(e @ ChatError::Render { .. }) => {
                let m = e.to_string();
                assert!(m.contains("the template raised an exception: [[[[") && m.len() < 10_000, "{m:.300}");
            }
            other => panic!("expected a render error, got {:?}", other.map(|s| s.len())),
        }
    });
}

#[test]
fn a_conversation_as_long_as_a_context_renders_with_the_real_templates() {
    // The fuel grows with the conversation: 2,000 messages, 4 MB of text in all.
    let messages: Vec<ChatMessage> = (0..2000)
        .map(|i| ChatMessage::new(if i % 2 == 0 { "user" } else { "assistant" }, &"word ".repeat(400)))
        .collect();
    let file = GgufFile::open(tiny(TINY)).expect("fixture opens");
    let smollm2 = file.get_str(CHAT_TEMPLATE_KEY).expect("the tiny model's template").to_string();
    for (name, source) in [("SmolLM2", smollm2.as_str()), ("Llama 3", LLAMA3), ("Llama 2", LLAMA2)] {
        let template = ChatTemplate::new(source, "<s>", "</s>").expect("parses");
        let text = template.render(&messages, true).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(text.len() > 4_000_000, "{name}: {}", text.len());
    }
}

/// Llama 3 Instruct's template, as published with Meta-Llama-3-8B-Instruct.
const LLAMA3: &str = "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}";

/// Llama 2 Chat's template, as published with Llama-2-7b-chat-hf.
const LLAMA2: &str = "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}";

// Bounded by the patches of the vendored minijinja (`third_party/minijinja/PATCHES.md`);
// each aborted the child with stock minijinja 3.1.0, past its memory limit or on a stack
// overflow, or ran for hours.

#[test]
fn a_template_that_doubles_a_list_is_a_render_error() {
    in_a_memory_limited_child(|| {
        let source = |n| repeated("{% set l = [1] %}", "{% set l = l + l %}", n, "{{ l|length }}");
        assert_eq!(render_one(&source(20), "hi").ok().as_deref(), Some("1048576"));
        // minijinja copies the lazy concatenation at 33 levels: 2^33 items.
        assert_render_error(&source(40), "hi", "used up its fuel");
        // The same copy made by the `sum` filter: 40 lazy lists of 10^8 items.
        let sum = |n| format!("{{{{ ([[1] * {n}] * 40)|sum(start=[])|length }}}}");
        assert_eq!(render_one(&sum(1000), "hi").ok().as_deref(), Some("40000"));
        assert_render_error(&sum(100_000_000), "hi", "used up its fuel");
    });
}

#[test]
fn indexing_a_lazily_doubled_list_is_a_render_error() {
    in_a_memory_limited_child(|| {
        // The lookup walks the lazy concatenation up to the index: 2^30 items at 30 levels
        // (the fuzzer's `chat_template` target found it taking 25 s).
        for use_it in ["{{ l[-1] }}", "{{ l[-1000] }}", "{{ l[1000000000] }}"] {
            let source = |n| repeated("{% set l = [1] %}", "{% set l = l + l %}", n, use_it);
            assert!(render_one(&source(10), "hi").is_ok(), "{use_it}");
            assert_render_error(&source(30), "hi", "used up its fuel");
        }
        let source = repeated("{% set l = [1, 2] %}", "{% set l = l + l %}", 10, "{{ l[-1] }}{{ l[5] }}");
        assert_eq!(render_one(&source, "hi").ok().as_deref(), Some("22"));
    });
}

#[test]
fn formatting_a_list_that_holds_a_list_many_times_is_a_render_error() {
    in_a_memory_limited_child(|| {
        for use_it in ["{{ l }}", "{{ (l ~ '')|length }}", "{{ l|tojson|length }}", "{{ l|string|length }}"] {
            let source = |n| repeated("{% set l = ['xxxxxxxxxxxxxxxx'] %}", "{% set l = [l, l] %}", n, use_it);
            assert!(render_one(&source(10), "hi").is_ok(), "{use_it}");
            // 2^40 strings when written out.
            assert_render_error(&source(40), "hi", "used up its fuel");
        }
    });
}

#[test]
fn serializing_a_lazily_repeated_list_is_a_render_error() {
    in_a_memory_limited_child(|| {
        for use_it in ["l|tojson|length", "l|string|length", "(l ~ '')|length"] {
            let source = |n| format!("{{% set l = ['x' * 100000] * {n} %}}{{{{ {use_it} }}}}");
            assert!(render_one(&source(3), "hi").is_ok(), "{use_it}");
            // 10^13 bytes.
            assert_render_error(&source(100_000_000), "hi", "used up its fuel");
        }
    });
}

#[test]
fn formatting_a_namespace_that_holds_itself_is_a_render_error() {
    in_a_memory_limited_child(|| {
        for use_it in [
            "{{ ns }}",
            "{{ ns|tojson }}",
            "{{ ns|string|length }}",
            "{{ ns == ns2 }}",
            "{{ [ns, ns2]|unique|list|length }}",
        ] {
            let source = format!(
                "{{% set ns = namespace() %}}{{% set ns.a = ns %}}{{% set ns2 = namespace() %}}{{% set ns2.a = ns2 %}}{use_it}"
            );
            assert_render_error(&source, "hi", "nested more than");
        }
    });
}

/// A namespace that holds itself is a reference cycle: each render of such a template used to
/// leak what the cycle held. 100 renders that each hold 16 MB in a cycle would need 1.6 GB,
/// past the child's 1 GiB, had the renders leaked.
#[test]
fn renders_of_a_namespace_that_holds_itself_do_not_leak() {
    in_a_memory_limited_child(|| {
        let source = "{% set ns = namespace(big='x' * 16000000) %}{% set ns.a = ns %}{{ ns.big|length }}";
        for _ in 0..100 {
            assert_eq!(render_one(source, "hi").ok().as_deref(), Some("16000000"));
        }
    });
}

#[test]
fn comparing_lists_that_hold_a_list_many_times_is_a_render_error() {
    in_a_memory_limited_child(|| {
        // Two lists built alike (not the same object): comparing them visits 2^n items.
        for compare in ["l == m", "l != m", "l < m", "l in [m]", "[l, m]|sort|length", "[l, m]|unique|list|length"] {
            let source = |n| {
                let step = "{% set l = [l, l] %}{% set m = [m, m] %}";
                repeated("{% set l = ['x'] %}{% set m = ['x'] %}", step, n, &format!("{{{{ {compare} }}}}"))
            };
            assert!(render_one(&source(10), "hi").is_ok(), "{compare}");
            assert_render_error(&source(40), "hi", "used up its fuel");
        }
    });
}

/// Two lists (`ns.l`, `ns.m`) nested `n` deep (a multiple of 1000 past it), one level per
/// iteration of a loop, then `use_it` of them.
fn nested_in_a_loop(n: usize, use_it: &str) -> String {
    let (outer, inner) = if n > 1000 { (n / 1000, 1000) } else { (1, n) };
    format!(
        "{{% set ns = namespace(l=[], m=[]) %}}{{% for i in range({outer}) %}}{{% for j in range({inner}) %}}{{% set ns.l = [ns.l] %}}{{% set ns.m = [ns.m] %}}{{% endfor %}}{{% endfor %}}{{{{ {use_it} }}}}"
    )
}

#[test]
fn formatting_or_comparing_deeply_nested_lists_is_a_render_error() {
    in_a_memory_limited_child(|| {
        for use_it in
            ["ns.l", "ns.l|tojson", "ns.l|string|length", "ns.l ~ ''", "ns.l == ns.m", "[ns.l, ns.m]|sort|length"]
        {
            assert!(render_one(&nested_in_a_loop(100, use_it), "hi").is_ok(), "{use_it}");
            assert_render_error(&nested_in_a_loop(1000, use_it), "hi", "nested more than");
        }
    });
}

#[test]
fn dropping_a_list_nested_as_deep_as_the_fuel_allows_renders() {
    in_a_memory_limited_child(|| {
        // Dropped recursively, a list nested this deep overflowed the stack of a test thread.
        assert_eq!(render_one(&nested_in_a_loop(20_000, "ns.l|length"), "hi").ok().as_deref(), Some("1"));
        assert_render_error(&nested_in_a_loop(1_000_000, "ns.l|length"), "hi", "used up its fuel");
    });
}

/// Asserts that `source` is a parse error naming the template whose message has `why`.
fn assert_parse_error(source: &str, why: &str) {
    match ChatTemplate::new(source, "<s>", "</s>") {
        Err(e @ ChatError::Parse { .. }) => {
            let m = e.to_string();
            assert!(m.contains(CHAT_TEMPLATE_KEY) && m.contains("does not parse") && m.contains(why), "{m:.300}");
        }
        other => panic!("{source:.200}: expected a parse error, got {:?}", other.map(|_| ())),
    }
}

#[test]
fn deeply_nested_expressions_and_statements_are_a_parse_error() {
    in_a_memory_limited_child(|| {
        let many = |start: &str, step: &str, n: usize, end: &str| format!("{start}{}{end}", step.repeat(n));
        // Each of these nests the expression tree one level per repetition: the parser, the
        // compiler or the drop of the tree recursed once per level and overflowed the stack.
        let chains = [
            ("{{ 1", " + 1", " }}"),
            ("{{ 'a'", " ~ 'a'", " }}"),
            ("{{ ", "- ", "1 }}"),
            ("{{ ", "not ", "true }}"),
            ("{{ bos_token", "[0]", " }}"),
            ("{{ bos_token", ".lower()", " }}"),
            ("{{ bos_token", "|string", " }}"),
            ("{{ 1", " if true else 1", " }}"),
            ("{% set x = 1", " * 1", " %}"),
        ];
        for (start, step, end) in chains {
            // As long as real templates write them, they render.
            assert!(render_one(&many(start, step, 20, end), "hi").is_ok(), "{start}{step}");
            assert_parse_error(&many(start, step, 100_000, end), "nests too many");
        }
        // Brackets and statements nest through minijinja's recursion guard.
        for (open, close) in [("(", ")"), ("[", "]")] {
            assert_parse_error(&format!("{{{{ {}1{} }}}}", open.repeat(100_000), close.repeat(100_000)), "recursion");
        }
        let elifs = many("{% if false %}", "{% elif false %}", 100_000, "{% endif %}");
        assert_parse_error(&elifs, "recursion");
        let ifs = format!("{}{}", "{% if true %}".repeat(100_000), "{% endif %}".repeat(100_000));
        assert_parse_error(&ifs, "recursion");
    });
}
