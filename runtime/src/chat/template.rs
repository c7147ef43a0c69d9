//! Chat templates: the Jinja text under `tokenizer.chat_template`, rendered with minijinja
//! as Hugging Face `transformers` renders it (`trim_blocks`, `lstrip_blocks`, Python string
//! methods such as `.strip()` through minijinja-contrib's pycompat, `raise_exception`).

use minijinja::{context, Environment, Error, ErrorKind, Value};
use purebee_memory::gguf::GgufFile;

use crate::tokenizer::Tokenizer;

use super::ChatError;

/// The GGUF key of the chat template.
pub const CHAT_TEMPLATE_KEY: &str = "tokenizer.chat_template";

/// The most template instructions one render may run (minijinja's fuel). The template comes
/// from the model file, so it is untrusted: without a bound, `{% for i in range(100000) %}`
/// nested twice never ends. Real templates run a few dozen instructions per message, so this
/// allows conversations of thousands of messages and stops any render within about a second.
pub const CHAT_TEMPLATE_FUEL: u64 = 2_000_000;

/// One message of a conversation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChatMessage {
    /// `system`, `user` or `assistant`.
    pub role: String,
    /// The text.
    pub content: String,
}

impl ChatMessage {
    /// A message of `role` saying `content`.
    pub fn new(role: &str, content: &str) -> ChatMessage {
        ChatMessage { role: role.to_string(), content: content.to_string() }
    }
}

/// A parsed chat template with the BOS and EOS texts it may write.
#[derive(Debug)]
pub struct ChatTemplate {
    env: Environment<'static>,
    bos_token: String,
    eos_token: String,
    /// The file the template came from, for errors.
    file: Option<String>,
}

impl ChatTemplate {
    /// The template of `file`, with `tokenizer`'s BOS and EOS texts (empty when it has none).
    ///
    /// It is rendered once here with one user message and the generation prompt, the
    /// conversation every template must accept (llama.cpp tries its templates the same way
    /// when it loads a model): a template that fails on it (`raise_exception` whatever the
    /// messages, an undefined method) is a [`ChatError::Render`] naming the file now, rather
    /// than at the first turn. Errors name the file.
    pub fn from_gguf(file: &GgufFile, tokenizer: &Tokenizer) -> Result<ChatTemplate, ChatError> {
        let path = file.path().display().to_string();
        if file.get(CHAT_TEMPLATE_KEY).is_none() {
            return Err(ChatError::MissingTemplate { file: path });
        }
        let source = file.get_str(CHAT_TEMPLATE_KEY)?;
        let text = |id: Option<u32>| id.and_then(|id| tokenizer.token_text(id)).unwrap_or_default().to_string();
        let template = ChatTemplate::parse(source, &text(tokenizer.bos()), &text(tokenizer.eos()), Some(path))?;
        template.render(&[ChatMessage::new("user", "Hello")], true).map_err(|e| match e {
            ChatError::Render { file, message } => ChatError::Render {
                file,
                message: format!("{message} (rendering one user message, which every template must accept)"),
            },
            e => e,
        })?;
        Ok(template)
    }

    /// Parses `source`; `bos_token` and `eos_token` are the texts the template sees.
    pub fn new(source: &str, bos_token: &str, eos_token: &str) -> Result<ChatTemplate, ChatError> {
        ChatTemplate::parse(source, bos_token, eos_token, None)
    }

    fn parse(source: &str, bos_token: &str, eos_token: &str, file: Option<String>) -> Result<ChatTemplate, ChatError> {
        let parse_error = |e: Error| ChatError::Parse { file: file.clone(), message: e.to_string() };
        let mut env = Environment::new();
        env.set_syntax(
            minijinja::syntax::SyntaxConfig::builder()
                .trim_blocks(true)
                .lstrip_blocks(true)
                .build()
                .map_err(parse_error)?,
        );
        env.set_fuel(Some(CHAT_TEMPLATE_FUEL));
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.add_template_owned(CHAT_TEMPLATE_KEY, source.to_string()).map_err(parse_error)?;
        Ok(ChatTemplate { env, bos_token: bos_token.to_string(), eos_token: eos_token.to_string(), file })
    }

    /// Renders `messages`; with `add_generation_prompt` the text ends with the opening of
    /// an assistant turn, where the model's answer starts.
    pub fn render(&self, messages: &[ChatMessage], add_generation_prompt: bool) -> Result<String, ChatError> {
        let render_error = |e: Error| ChatError::Render {
            file: self.file.clone(),
            message: match e.kind() {
                ErrorKind::OutOfFuel => format!("it ran more than {CHAT_TEMPLATE_FUEL} instructions ({e})"),
                _ => e.to_string(),
            },
        };
        let template = self.env.get_template(CHAT_TEMPLATE_KEY).map_err(render_error)?;
        let messages: Vec<Value> = messages
            .iter()
            .map(|m| Value::from_pairs([("role", m.role.as_str()), ("content", m.content.as_str())]))
            .collect();
        let ctx = context! {
            messages => messages,
            add_generation_prompt => add_generation_prompt,
            bos_token => self.bos_token.as_str(),
            eos_token => self.eos_token.as_str(),
        };
        // minijinja can panic on what a template does (3.0.5: `''[::-1]` indexes an empty
        // vector); the template comes from the file, so a panic is a render error too.
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| template.render(ctx)))
            .map_err(|_| ChatError::Render {
                file: self.file.clone(),
                message: "the template renderer panicked".to_string(),
            })?
            .map_err(render_error)
    }
}

/// `raise_exception(message)`: how Hugging Face templates reject a conversation (roles out
/// of order, an unsupported role); it stops the render with `message`.
fn raise_exception(message: String) -> Result<Value, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, format!("the template raised an exception: {message}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHATML: &str = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

    fn render(source: &str, messages: &[ChatMessage], add_generation_prompt: bool) -> Result<String, ChatError> {
        ChatTemplate::new(source, "<s>", "</s>")?.render(messages, add_generation_prompt)
    }

    #[test]
    fn chatml_renders_each_message_and_the_generation_prompt() {
        let msgs = [ChatMessage::new("system", "Be brief."), ChatMessage::new("user", "Hi")];
        let want = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n";
        assert_eq!(render(CHATML, &msgs, false).ok().as_deref(), Some(want));
        assert_eq!(render(CHATML, &msgs, true).ok(), Some(format!("{want}<|im_start|>assistant\n")));
    }

    #[test]
    fn special_texts_python_methods_and_block_trimming_work_as_in_transformers() {
        let source = "{{ bos_token }}\n{% for m in messages %}\n  [{{ m.content.strip().upper() }}]\n{% endfor %}\n{{ eos_token }}";
        let msgs = [ChatMessage::new("user", "  hi  ")];
        assert_eq!(render(source, &msgs, false).ok().as_deref(), Some("<s>\n  [HI]\n</s>"));
    }

    #[test]
    fn raise_exception_is_a_render_error_with_its_message() {
        let source = "{% if messages[0]['role'] != 'user' %}{{ raise_exception('Conversations must start with a user message') }}{% endif %}ok";
        match render(source, &[ChatMessage::new("assistant", "x")], true) {
            Err(ChatError::Render { message, .. }) => {
                assert!(message.contains("Conversations must start with a user message"), "{message}")
            }
            other => panic!("expected a render error, got {other:?}"),
        }
        assert_eq!(render(source, &[ChatMessage::new("user", "x")], true).ok().as_deref(), Some("ok"));
    }

    #[test]
    fn a_template_that_does_not_parse_is_a_parse_error_naming_the_key() {
        match ChatTemplate::new("{% for m in messages %}{{ m.content }", "", "") {
            Err(e @ ChatError::Parse { .. }) => assert!(e.to_string().contains(CHAT_TEMPLATE_KEY), "{e}"),
            other => panic!("expected a parse error, got {other:?}"),
        }
    }

    /// Found with the `chat_template` fuzz target's timeout: a template that loops for ever
    /// (10^10 iterations) hung the render; now it runs out of fuel.
    #[test]
    fn a_template_that_loops_for_ever_is_a_render_error() {
        let source = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}";
        match render(source, &[ChatMessage::new("user", "x")], true) {
            Err(e @ ChatError::Render { .. }) => {
                let m = e.to_string();
                assert!(m.contains(CHAT_TEMPLATE_KEY) && m.contains("more than 2000000 instructions"), "{m}");
            }
            other => panic!("expected a render error, got {other:?}"),
        }
    }

    /// Found by the `chat_template` fuzz target: minijinja 3.0.5 panics on a reversed slice
    /// of an empty string (`value/ops.rs`), which aborted the render.
    #[test]
    fn a_panic_inside_the_renderer_is_a_render_error() {
        let source = "{{ messages[0]['content'][::-1] }}";
        match render(source, &[ChatMessage::new("user", "")], true) {
            Err(e @ ChatError::Render { .. }) => assert!(e.to_string().contains("panicked"), "{e}"),
            other => panic!("expected a render error, got {other:?}"),
        }
        assert_eq!(render(source, &[ChatMessage::new("user", "ab")], true).ok().as_deref(), Some("ba"));
    }

    #[test]
    fn an_unknown_method_is_a_render_error() {
        assert!(matches!(
            render("{{ messages[0].content.no_such_method() }}", &[ChatMessage::new("user", "x")], false),
            Err(ChatError::Render { .. })
        ));
    }
}
