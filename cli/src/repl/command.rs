//! The REPL's slash commands: parsing a line into a [`Command`], and checking `/set` values
//! against the range each sampling parameter accepts.

use purebee_runtime::sampler::SamplerConfig;

/// What a line that starts with `/` asks for.
#[derive(Clone, Debug, PartialEq)]
pub enum Command {
    /// `/set PARAMETER VALUE`: a sampling parameter, checked.
    Set(Setting),
    /// `/set system TEXT`: this system message from now on (the conversation goes on).
    SetSystem(String),
    /// `/show info|template|parameters`.
    Show(Show),
    /// `/clear`: forget the conversation (the system message stays).
    Clear,
    /// `/bye` (or `/exit`): leave.
    Bye,
    /// `/?` (or `/help`): list the commands.
    Help,
}

/// A sampling parameter and its new value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Setting {
    /// Temperature, finite and >= 0 (0 is greedy).
    Temperature(f32),
    /// Top-k, >= 1.
    TopK(usize),
    /// Top-p, in (0, 1].
    TopP(f32),
    /// Min-p, in [0, 1].
    MinP(f32),
    /// The seed of the next turn (later turns take the next seeds).
    Seed(u64),
    /// Repeat penalty, finite and > 0 (1 is off).
    RepeatPenalty(f32),
}

/// What `/show` shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Show {
    /// The model, the engine and the context in use.
    Info,
    /// The chat template of the GGUF file.
    Template,
    /// The sampling parameters, token limit and system message.
    Parameters,
}

/// The help `/?` prints.
pub const HELP: &str = "\
Commands:
  /set temperature|top_k|top_p|min_p|seed|repeat_penalty VALUE
                       change a sampling parameter
  /set system TEXT     use this system message (the conversation goes on)
  /show info           the model, the engine and the context in use
  /show template       the model's chat template
  /show parameters     the sampling parameters and the system message
  /clear               forget the conversation (the system message stays)
  /bye                 leave (as does Ctrl-D)
  /?                   this help

  \"\"\"                  begins and ends a message of several lines
  Ctrl-C               stops an answer (what was said is kept); Ctrl-D leaves";

/// The names `/set` accepts besides `system`.
const PARAMETERS: &str = "temperature, top_k, top_p, min_p, seed, repeat_penalty";

/// Parses `line`, which starts with `/`; an unknown command or a bad value is an error
/// message for the user.
pub fn parse(line: &str) -> Result<Command, String> {
    let line = line.trim();
    let (word, rest) = split_word(line);
    match word {
        "/bye" | "/exit" => Ok(Command::Bye),
        "/clear" => Ok(Command::Clear),
        "/?" | "/help" => Ok(Command::Help),
        "/show" => match rest {
            "info" => Ok(Command::Show(Show::Info)),
            "template" => Ok(Command::Show(Show::Template)),
            "parameters" => Ok(Command::Show(Show::Parameters)),
            _ => Err(format!("/show takes info, template or parameters, not {rest:?}")),
        },
        "/set" => {
            let (name, value) = split_word(rest);
            if name == "system" {
                if value.is_empty() {
                    return Err("/set system takes the text of the system message".to_string());
                }
                return Ok(Command::SetSystem(value.to_string()));
            }
            parse_setting(name, value).map(Command::Set)
        }
        _ => Err(format!("unknown command {word:?}; /? lists the commands")),
    }
}

/// The first word of `s` and the rest, trimmed.
fn split_word(s: &str) -> (&str, &str) {
    match s.split_once(char::is_whitespace) {
        Some((w, rest)) => (w, rest.trim()),
        None => (s, ""),
    }
}

/// A `/set NAME VALUE` of a sampling parameter, its value in range.
fn parse_setting(name: &str, value: &str) -> Result<Setting, String> {
    let bad = |expected: &str| format!("/set {name}: {value:?} is not accepted: expected {expected}");
    let float = |expected: &str, ok: fn(f32) -> bool| match value.parse::<f32>() {
        Ok(v) if ok(v) => Ok(v),
        _ => Err(bad(expected)),
    };
    match name {
        "temperature" | "temp" => {
            float("a number >= 0 (0 is greedy)", |v| v.is_finite() && v >= 0.0).map(Setting::Temperature)
        }
        "top_k" => match value.parse::<usize>() {
            Ok(k) if k >= 1 => Ok(Setting::TopK(k)),
            _ => Err(bad("a whole number >= 1")),
        },
        "top_p" => float("a number in (0, 1]", |v| v > 0.0 && v <= 1.0).map(Setting::TopP),
        "min_p" => float("a number in [0, 1]", |v| (0.0..=1.0).contains(&v)).map(Setting::MinP),
        "seed" => value.parse::<u64>().map(Setting::Seed).map_err(|_| bad("a whole number in [0, 2^64 - 1]")),
        "repeat_penalty" => float("a number > 0 (1 is off)", |v| v.is_finite() && v > 0.0).map(Setting::RepeatPenalty),
        "" => Err(format!("/set takes a parameter ({PARAMETERS}, or system) and a value")),
        _ => Err(format!("/set: unknown parameter {name:?}; one of {PARAMETERS}, or system")),
    }
}

impl Setting {
    /// Writes the value into `sampler` (the seed is the caller's: it moves with each turn).
    pub fn apply(self, sampler: &mut SamplerConfig) {
        match self {
            Setting::Temperature(v) => sampler.temperature = v,
            Setting::TopK(v) => sampler.top_k = v,
            Setting::TopP(v) => sampler.top_p = v,
            Setting::MinP(v) => sampler.min_p = v,
            Setting::Seed(v) => sampler.seed = v,
            Setting::RepeatPenalty(v) => sampler.repeat_penalty = v,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_parse() {
        assert_eq!(parse("/bye"), Ok(Command::Bye));
        assert_eq!(parse("  /clear "), Ok(Command::Clear));
        assert_eq!(parse("/?"), Ok(Command::Help));
        assert_eq!(parse("/show template"), Ok(Command::Show(Show::Template)));
        assert_eq!(parse("/set temperature 0"), Ok(Command::Set(Setting::Temperature(0.0))));
        assert_eq!(parse("/set top_k 5"), Ok(Command::Set(Setting::TopK(5))));
        assert_eq!(parse("/set seed 18446744073709551615"), Ok(Command::Set(Setting::Seed(u64::MAX))));
        assert_eq!(parse("/set system  Answer in one word. "), Ok(Command::SetSystem("Answer in one word.".into())));
    }

    #[test]
    fn bad_values_name_the_parameter_and_the_accepted_range() {
        for (line, name, range) in [
            ("/set temperature -1", "temperature", ">= 0"),
            ("/set temperature NaN", "temperature", ">= 0"),
            ("/set temperature inf", "temperature", ">= 0"),
            ("/set top_k 0", "top_k", ">= 1"),
            ("/set top_k 2.5", "top_k", ">= 1"),
            ("/set top_p 0", "top_p", "(0, 1]"),
            ("/set top_p 1.5", "top_p", "(0, 1]"),
            ("/set min_p -0.1", "min_p", "[0, 1]"),
            ("/set seed -3", "seed", "2^64 - 1"),
            ("/set repeat_penalty 0", "repeat_penalty", "> 0"),
            ("/set repeat_penalty", "repeat_penalty", "> 0"),
        ] {
            let e = parse(line).expect_err(line);
            assert!(e.contains(name) && e.contains(range), "{line}: {e}");
        }
        for line in ["/set", "/set warmth 3", "/show", "/show everything", "/frobnicate", "/set system"] {
            assert!(parse(line).is_err(), "{line}");
        }
    }

    #[test]
    fn every_accepted_value_passes_the_samplers_own_check() {
        let mut s = SamplerConfig::default();
        for line in [
            "/set temperature 0",
            "/set temperature 2",
            "/set top_k 1",
            "/set top_p 1",
            "/set min_p 0",
            "/set min_p 1",
            "/set repeat_penalty 1.3",
        ] {
            let Ok(Command::Set(setting)) = parse(line) else { panic!("{line}") };
            setting.apply(&mut s);
            assert!(s.validate().is_ok(), "{line}");
        }
    }
}
