//! `model_load`: bytes → the tokenizer and chat template of the file, the model config and
//! weight binding on the reference engine, and a forward step when the tensors are small.

#![no_main]

use std::cell::RefCell;
use std::collections::HashSet;

use libfuzzer_sys::fuzz_target;
use purebee_engine_ref::RefEngine;
use purebee_fuzz::MODEL_ELEMENTS_LIMIT;
use purebee_memory::gguf::GgufFile;
use purebee_runtime::chat::{ChatMessage, ChatTemplate};
use purebee_runtime::tokenizer::Tokenizer;
use purebee_runtime::{LogitsRows, Model};

/// The KV cache of the loaded model: enough for a two-token prefill and one decode step.
const N_CTX: usize = 4;

thread_local! {
    static SEEN: RefCell<HashSet<String>> = RefCell::new(HashSet::new());
}

fuzz_target!(|data: &[u8]| {
    let Ok(f) = GgufFile::from_bytes("fuzz.gguf", data) else { return };
    // The tokenizer and template are built from the `tokenizer.*` keys alone, deterministically,
    // and building one compiles its pre-tokenizer's regexes (more than all the rest costs):
    // keys already seen are not built again. Encoding is the `tokenizer` target's.
    let key = format!("{:?}", f.metadata().iter().filter(|(k, _)| k.starts_with("tokenizer.")).collect::<Vec<_>>());
    let new = SEEN.with_borrow_mut(|seen| {
        if seen.len() > 4096 {
            seen.clear();
        }
        seen.insert(key)
    });
    if let Some(tok) = new.then(|| Tokenizer::from_gguf(&f).ok()).flatten() {
        let ids: Vec<u32> = (0..tok.token_count().min(64) as u32).chain([u32::MAX]).collect();
        let _ = tok.decode(&ids);
        let mut stream = tok.stream_decoder();
        ids.iter().for_each(|&id| drop(stream.push(id)));
        if let Ok(template) = ChatTemplate::from_gguf(&f, &tok) {
            let messages = [ChatMessage::new("system", "Be brief."), ChatMessage::new("user", "Hi")];
            let _ = template.render(&messages, true);
        }
    }
    let Ok(mut model) = Model::load(RefEngine::new(), &f) else { return };
    let Ok(mut session) = model.new_session(N_CTX) else { return };
    let elements: usize = f.tensors().iter().map(|t| t.n_elements()).fold(0, usize::saturating_add);
    if elements > MODEL_ELEMENTS_LIMIT {
        return;
    }
    let Some(last) = model.config().n_vocab.checked_sub(1).and_then(|l| u32::try_from(l).ok()) else { return };
    if let Ok(logits) = model.forward(&mut session, &[0, last], 0, LogitsRows::All) {
        assert_eq!(logits.len(), 2 * model.config().n_vocab);
        model.forward_greedy(&mut session, &[last], 2).expect("a decode step after a prefill that ran");
    }
});
