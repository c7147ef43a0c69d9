//! Chat templates: the Jinja text under `tokenizer.chat_template`, rendered with minijinja
//! as Hugging Face `transformers` renders it (`trim_blocks`, `lstrip_blocks`, Python string
//! methods such as `.strip()` through minijinja-contrib's pycompat, `raise_exception`).
//!
//! The template comes from the model file, so it is untrusted. Each render runs on a budget
//! of minijinja's fuel ([`CHAT_TEMPLATE_FUEL`] plus an allowance for the conversation): one
//! fuel per instruction, and (minijinja 3.1) one per 64 bytes of what the render creates:
//! its output, captured output, the strings and lists made by `~`, `+`, `*`, slicing,
//! literals, filters, functions and methods. Where minijinja knows a size before it
//! allocates (`'x' * n`, `replace`, `join`, `indent`, the `format` filter) it refuses an
//! allocation the fuel cannot pay for; this module pays ahead for the few results minijinja
//! only charges once they exist and that can be much larger than their input (`str.format`
//! widths, `split`, `lines`, `splitlines`) and bounds `tojson`'s indent. A template that
//! doubles a string until memory runs out (`{% set s = s ~ s %}`, in a loop, through a
//! namespace, with `replace`) thus ends in a [`ChatError::Render`], not in an abort.
//!
//! The rest is bounded by the patches of the vendored minijinja 3.1.0
//! (`third_party/minijinja/PATCHES.md`, tested in `tests/tests/chat.rs`): copying a list
//! concatenation (`{% set l = l + l %}`, which minijinja keeps lazy up to 32 levels) must fit
//! the fuel before it is made; formatting, serializing, comparing and hashing a value charge
//! the fuel for every item and byte as they walk it and stop once it is used up (a list that
//! holds one list twice, forty levels deep, is 2^40 items when written out or compared; a
//! lazily repeated list `[s] * n` is n copies of `s`); and nothing recurses without a bound:
//! a value nested more than 200 levels deep (a namespace that holds itself) is a render error
//! when walked, a deeply nested list is dropped without recursing once per level, and an
//! expression that nests more than 256 operators, filters or lookups in one tag, or
//! statements nested past minijinja's recursion limit, is a parse error.

use minijinja::value::{from_args, Kwargs};
use minijinja::{context, Environment, Error, ErrorKind, State, Value};
use purebee_memory::gguf::GgufFile;

use crate::tokenizer::Tokenizer;

use super::ChatError;

/// The GGUF key of the chat template.
pub const CHAT_TEMPLATE_KEY: &str = "tokenizer.chat_template";

/// The fuel of a render before its allowance for the conversation (`render_fuel`). Fuel
/// (minijinja's) is one per instruction and one per 64 bytes the render creates, so this
/// bounds a render to 500,000 instructions or about 30 MiB of text and lists: without a
/// bound, `{% for i in range(100000) %}` nested twice never ends, and `{% set s = s ~ s %}`
/// forty times wants a terabyte. Real templates run a few dozen instructions per message
/// and create a few times the text of the conversation (SmolLM2's, Llama 3's and Llama 2's:
/// 4 to 6 bytes per byte of the messages).
pub const CHAT_TEMPLATE_FUEL: u64 = 500_000;

/// The allowance of a render is one fuel per this many bytes of its input: a render may
/// create 64 / 8 = 8 bytes per byte of the messages (and BOS and EOS texts) on top of
/// [`CHAT_TEMPLATE_FUEL`].
const INPUT_BYTES_PER_FUEL: u64 = 8;

/// What each message counts for beyond its text, in input bytes (64 fuel: its share of the
/// instructions of a template's loop over the messages).
const MESSAGE_INPUT_BYTES: u64 = 512;

/// The largest `tojson` indent a template may ask for: real templates use 2 or 4, and an
/// indent of 10^11 is written out before minijinja charges for it.
const MAX_JSON_INDENT: usize = 64;

/// The fuel of one render of `messages` with these BOS and EOS texts.
fn render_fuel(messages: &[ChatMessage], bos_token: &str, eos_token: &str) -> u64 {
    let input = messages.iter().fold((bos_token.len() + eos_token.len()) as u64, |n, m| {
        n.saturating_add((m.role.len() + m.content.len()) as u64).saturating_add(MESSAGE_INPUT_BYTES)
    });
    CHAT_TEMPLATE_FUEL.saturating_add(input / INPUT_BYTES_PER_FUEL)
}

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
        // The fuel is set for each render (`render_fuel`).
        env.set_unknown_method_callback(unknown_method);
        env.add_function("raise_exception", raise_exception);
        env.add_filter("tojson", tojson);
        env.add_filter("split", split);
        env.add_filter("lines", lines);
        env.add_template_owned(CHAT_TEMPLATE_KEY, source.to_string()).map_err(parse_error)?;
        Ok(ChatTemplate { env, bos_token: bos_token.to_string(), eos_token: eos_token.to_string(), file })
    }

    /// Renders `messages`; with `add_generation_prompt` the text ends with the opening of
    /// an assistant turn, where the model's answer starts.
    ///
    /// A render may use 500,000 fuel (minijinja's: one per instruction and one per 64 bytes
    /// it creates) plus one per 8 bytes of the messages (each counting 512 bytes beyond its
    /// text): a template that needs more, to loop or to grow, write out or compare a string
    /// or a list, is a [`ChatError::Render`] saying so; so is a value nested more than 200
    /// levels deep (a namespace that holds itself) where it is written out or compared.
    pub fn render(&self, messages: &[ChatMessage], add_generation_prompt: bool) -> Result<String, ChatError> {
        let fuel = render_fuel(messages, &self.bos_token, &self.eos_token);
        let render_error = |e: Error| ChatError::Render {
            file: self.file.clone(),
            message: match e.kind() {
                ErrorKind::OutOfFuel => format!(
                    "it used up its fuel: {fuel}, one per instruction and one per 64 bytes of text and lists it \
                     creates, writes out or compares, for {} messages; it loops, or grows, writes out or \
                     compares a string or a list without bound ({e})",
                    messages.len()
                ),
                _ => e.to_string(),
            },
        };
        // Cloning shares the parsed template; only the fuel differs from render to render.
        let mut env = self.env.clone();
        env.set_fuel(Some(fuel));
        let template = env.get_template(CHAT_TEMPLATE_KEY).map_err(render_error)?;
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
        // minijinja can panic on what a template does (3.0.5: `''[::-1]` indexed an empty
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
/// of order, an unsupported role); it stops the render with `message`, of which it keeps
/// the first [`MAX_EXCEPTION_MESSAGE`] bytes (a list that holds a list many times would
/// format to terabytes).
fn raise_exception(message: &Value) -> Result<Value, Error> {
    let mut text = Capped(String::new());
    let cut = if let Some(s) = message.as_str() {
        text.0.push_str(prefix(s, MAX_EXCEPTION_MESSAGE));
        s.len() > MAX_EXCEPTION_MESSAGE
    } else {
        std::fmt::write(&mut text, format_args!("{message}")).is_err()
    };
    let more = if cut { "..." } else { "" };
    Err(Error::new(ErrorKind::InvalidOperation, format!("the template raised an exception: {}{more}", text.0)))
}

/// The longest start of `s` of at most `n` bytes that ends on a character.
fn prefix(s: &str, n: usize) -> &str {
    let mut end = n.min(s.len());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// The most bytes of a `raise_exception` message kept.
const MAX_EXCEPTION_MESSAGE: usize = 4096;

/// A string that refuses to grow past [`MAX_EXCEPTION_MESSAGE`] bytes.
struct Capped(String);

impl std::fmt::Write for Capped {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let room = MAX_EXCEPTION_MESSAGE - self.0.len();
        self.0.push_str(prefix(s, room));
        if s.len() > room {
            Err(std::fmt::Error)
        } else {
            Ok(())
        }
    }
}

/// Python's string methods (minijinja-contrib's pycompat), paying ahead for the results that
/// minijinja charges only once they exist and that can be far larger than the string:
/// `str.format` pads to the widths and precisions its format string names (`'{:>99999999999}'`
/// asked 100 GB at once), and `split` and `splitlines` make a list item of each part
/// (a value and a string each: 20 MB of `'x'` split on `'x'` held a gigabyte).
fn unknown_method(state: &mut State, value: &Value, method: &str, args: &[Value]) -> Result<Value, Error> {
    if let Some(s) = value.as_str() {
        match method {
            "format" => state.consume_fuel(format_widths(s) / 64)?,
            "split" => {
                if let Ok((sep, maxsplit)) = from_args::<(Option<&str>, Option<i64>)>(args) {
                    state.consume_fuel(split_parts(s, sep, maxsplit))?;
                }
            }
            "splitlines" => state.consume_fuel(line_parts(s))?,
            _ => {}
        }
    }
    minijinja_contrib::pycompat::unknown_method_callback(state, value, method, args)
}

/// The sum of the numbers in a `str.format` string: a bound on the bytes its widths and
/// precisions pad to (they are plain numbers: `{:>20}`, `{:.3f}`, `{:010}`).
fn format_widths(format: &str) -> u64 {
    format
        .split(|c: char| !c.is_ascii_digit())
        .map(|digits| digits.bytes().fold(0u64, |n, d| n.saturating_mul(10).saturating_add(u64::from(d - b'0'))))
        .fold(0, u64::saturating_add)
}

/// The parts `s.split(sep, maxsplit)` makes, as Python (and minijinja's `split` filter)
/// splits: on whitespace runs without a separator, at most `maxsplit + 1` parts.
fn split_parts(s: &str, sep: Option<&str>, maxsplit: Option<i64>) -> u64 {
    let parts = match sep {
        None => s.split_whitespace().count(),
        Some(sep) => s.matches(sep).count() + 1,
    } as u64;
    match maxsplit {
        Some(n) if n >= 0 => parts.min((n as u64).saturating_add(1)),
        _ => parts,
    }
}

/// A bound on the lines of `s`.
fn line_parts(s: &str) -> u64 {
    s.bytes().filter(|&b| b == b'\n' || b == b'\r').count() as u64 + 1
}

/// The `split` filter, paying ahead for its parts (see [`unknown_method`]).
fn split(
    state: &State,
    value: &Value,
    sep: Option<std::sync::Arc<str>>,
    maxsplit: Option<i64>,
) -> Result<Value, Error> {
    if let Some(s) = value.as_str() {
        state.consume_fuel(split_parts(s, sep.as_deref(), maxsplit))?;
    }
    minijinja::filters::split(value, sep, maxsplit)
}

/// The `lines` filter, paying ahead for its lines (see [`unknown_method`]).
fn lines(state: &State, value: &Value) -> Result<Value, Error> {
    if let Some(s) = value.as_str() {
        state.consume_fuel(line_parts(s))?;
    }
    minijinja::filters::lines(value)
}

/// The `tojson` filter with an indent of at most [`MAX_JSON_INDENT`].
fn tojson(value: &Value, indent: Option<Value>, args: Kwargs) -> Result<Value, Error> {
    let asked = match &indent {
        Some(indent) => Some(indent.clone()),
        None => args.peek::<Option<Value>>("indent")?,
    };
    // As minijinja reads it: `true` is 2, `false` none, else a number.
    if let Some(n) = asked.filter(|v| !v.is_none() && !v.is_undefined() && bool::try_from(v.clone()).is_err()) {
        if usize::try_from(n.clone()).is_ok_and(|n| n > MAX_JSON_INDENT) {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                format!("tojson indent {n} is larger than {MAX_JSON_INDENT}"),
            ));
        }
    }
    minijinja::filters::tojson(value, indent, args)
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
                assert!(m.contains(CHAT_TEMPLATE_KEY) && m.contains("used up its fuel"), "{m}");
            }
            other => panic!("expected a render error, got {other:?}"),
        }
    }

    /// Found by the `chat_template` fuzz target: minijinja 3.0.5 panicked on a reversed slice
    /// of an empty string (`value/ops.rs`), which aborted the render; 3.1.0 renders it.
    #[test]
    fn a_reversed_empty_string_renders() {
        let source = "{{ messages[0]['content'][::-1] }}";
        assert_eq!(render(source, &[ChatMessage::new("user", "")], true).ok().as_deref(), Some(""));
        assert_eq!(render(source, &[ChatMessage::new("user", "ab")], true).ok().as_deref(), Some("ba"));
    }

    /// A panic of the renderer (as 3.0.5's above) is a render error, not an abort.
    #[test]
    fn a_panic_inside_the_renderer_is_a_render_error() {
        let mut template = ChatTemplate::new("{{ boom() }}", "", "").expect("parses");
        template.env.add_function("boom", || -> Result<Value, Error> { panic!("boom") });
        match template.render(&[ChatMessage::new("user", "x")], true) {
            Err(e @ ChatError::Render { .. }) => assert!(e.to_string().contains("panicked"), "{e}"),
            other => panic!("expected a render error, got {other:?}"),
        }
    }

    #[test]
    fn an_unknown_method_is_a_render_error() {
        assert!(matches!(
            render("{{ messages[0].content.no_such_method() }}", &[ChatMessage::new("user", "x")], false),
            Err(ChatError::Render { .. })
        ));
    }
}
