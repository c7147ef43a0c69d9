//! `chat_template`: random conversations through real chat templates, and random template
//! text with random conversations, all through the runtime's renderer
//! (`purebee_runtime::chat::ChatTemplate`, what `run --chat` and `chat` use).
//!
//! Input: a mode byte (bit 0: `add_generation_prompt`; bit 1: random template text, else
//! the real template `mode >> 2` modulo their count), then UTF-8 text (invalid bytes become
//! U+FFFD) cut at NUL bytes into fields: the template source first in random mode, then
//! role and content, alternating. Seeds are real templates and conversations written out
//! this way; the format is plain so that they can be.
//!
//! A real template either renders or raises (Llama 2's rejects roles out of order); its
//! prompt then tokenizes with the tiny fixture's vocabulary. Random template text either
//! fails to parse or to render, or renders: never a panic, a hang or an unbounded
//! allocation (libFuzzer's `-timeout` and `-rss_limit_mb` catch the last two; a template
//! that grows a string or a list without bound runs out of the render's fuel, with the
//! patches of the vendored minijinja, `third_party/minijinja/PATCHES.md`).

#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use purebee_runtime::chat::{tokenize_prompt, ChatMessage, ChatTemplate, CHAT_TEMPLATE_KEY};

/// Llama 3 Instruct's template, as published with Meta-Llama-3-8B-Instruct.
const LLAMA3: &str = "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}";

/// Llama 2 Chat's template, as published with Llama-2-7b-chat-hf (it raises on roles that do
/// not alternate).
const LLAMA2: &str = "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}";

/// The tiny fixture's tokenizer and the real templates (SmolLM2's, from that fixture, first).
fn setup() -> &'static (purebee_runtime::tokenizer::Tokenizer, Vec<ChatTemplate>) {
    static SETUP: OnceLock<(purebee_runtime::tokenizer::Tokenizer, Vec<ChatTemplate>)> = OnceLock::new();
    SETUP.get_or_init(|| {
        // libfuzzer-sys's panic hook aborts on every panic, even one that is caught. The
        // runtime catches panics of minijinja (3.0.5 panicked on `''[::-1]`) and returns a
        // render error, so those are let through to it; any other panic still aborts.
        let abort = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !info.location().is_some_and(|l| l.file().contains("/minijinja-")) {
                abort(info);
            }
        }));
        let tiny = purebee_fuzz::open_required(&purebee_fuzz::tiny_fixture());
        let tok = purebee_fuzz::vocabularies()[0].tokenizer.clone();
        let smollm2 = tiny.get_str(CHAT_TEMPLATE_KEY).expect("the tiny fixture has SmolLM2's chat template");
        let templates = [smollm2, LLAMA3, LLAMA2]
            .iter()
            .map(|s| ChatTemplate::new(s, "<|endoftext|>", "<|im_end|>").expect("a real template parses"))
            .collect();
        (tok, templates)
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else { return };
    let (tok, templates) = setup();
    let add_generation_prompt = mode & 1 != 0;
    let text = String::from_utf8_lossy(rest);
    let mut fields = text.split('\0');
    if mode & 2 == 0 {
        let t = &templates[usize::from(mode >> 2) % templates.len()];
        if let Ok(prompt) = t.render(&conversation(fields), add_generation_prompt) {
            let ids = tokenize_prompt(tok, &prompt);
            assert!(ids.iter().all(|&id| (id as usize) < tok.token_count()));
        }
    } else if let Ok(t) = ChatTemplate::new(fields.next().unwrap_or_default(), "<s>", "</s>") {
        let _ = t.render(&conversation(fields), add_generation_prompt);
    }
});

/// Messages from alternating role and content fields.
fn conversation<'a>(mut fields: impl Iterator<Item = &'a str>) -> Vec<ChatMessage> {
    let mut messages = Vec::new();
    while let (Some(role), Some(content)) = (fields.next(), fields.next()) {
        messages.push(ChatMessage::new(role, content));
    }
    messages
}
