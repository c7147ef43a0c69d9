//! Reading the user's turns: rustyline's line editing and history (saved after every line,
//! so it survives a killed process), and messages of several lines between `"""` lines.

use std::path::PathBuf;

use rustyline::config::Config;
use rustyline::error::ReadlineError;
use rustyline::DefaultEditor;

use crate::CliError;

/// The prompt of a new message.
pub const PROMPT: &str = ">>> ";
/// The prompt of the following lines of a `"""` message.
const CONTINUATION: &str = "... ";
/// Quotes that begin and end a message of several lines.
const QUOTES: &str = "\"\"\"";

/// What the user did at the prompt.
#[derive(Debug, PartialEq, Eq)]
pub enum Input {
    /// A message or a command (a `"""` message joined with newlines).
    Text(String),
    /// Ctrl-C: the line (or the `"""` message) was dropped.
    Interrupted,
    /// Ctrl-D, or the end of input.
    End,
}

/// The line editor and its history file.
pub struct LineReader {
    editor: DefaultEditor,
    history: Option<PathBuf>,
}

impl LineReader {
    /// An editor whose history is loaded from `history` (a missing file is an empty history;
    /// an unreadable one is said once and not written to).
    pub fn new(history: Option<PathBuf>) -> Result<LineReader, CliError> {
        let config =
            Config::builder().max_history_size(1000)?.history_ignore_dups(true)?.auto_add_history(false).build();
        let mut editor = DefaultEditor::with_config(config)?;
        let history = history.filter(|path| {
            if !path.exists() {
                return true;
            }
            match editor.load_history(path) {
                Ok(()) => true,
                Err(e) => {
                    eprintln!("purebee-rs: history {} not read ({e}); this session's is not kept", path.display());
                    false
                }
            }
        });
        Ok(LineReader { editor, history })
    }

    /// Reads one message: a line, or the lines between `"""` and `"""`.
    pub fn read(&mut self) -> Result<Input, CliError> {
        let first = match self.line(PROMPT)? {
            Some(Ok(line)) => line,
            Some(Err(())) => return Ok(Input::Interrupted),
            None => return Ok(Input::End),
        };
        let Some(opened) = first.trim_start().strip_prefix(QUOTES) else {
            return Ok(Input::Text(first));
        };
        // `"""text"""` on one line.
        if let Some(text) = opened.trim_end().strip_suffix(QUOTES) {
            return Ok(Input::Text(text.to_string()));
        }
        let mut lines = vec![opened.to_string()];
        loop {
            match self.line(CONTINUATION)? {
                Some(Ok(line)) => match line.trim_end().strip_suffix(QUOTES) {
                    Some(last) => {
                        lines.push(last.to_string());
                        break;
                    }
                    None => lines.push(line),
                },
                Some(Err(())) => return Ok(Input::Interrupted),
                // The end of input ends the message.
                None => break,
            }
        }
        let text = lines.join("\n");
        Ok(Input::Text(text.trim_matches('\n').to_string()))
    }

    /// One line (added to the history); `Some(Err(()))` for Ctrl-C, `None` for Ctrl-D.
    fn line(&mut self, prompt: &str) -> Result<Option<Result<String, ()>>, CliError> {
        match self.editor.readline(prompt) {
            Ok(line) => {
                self.remember(&line);
                Ok(Some(Ok(line)))
            }
            Err(ReadlineError::Interrupted) => Ok(Some(Err(()))),
            Err(ReadlineError::Eof) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Adds `line` to the history and appends it to the file.
    fn remember(&mut self, line: &str) {
        if line.trim().is_empty() || !self.editor.add_history_entry(line).unwrap_or(false) {
            return;
        }
        let Some(path) = &self.history else { return };
        let saved = match path.parent() {
            Some(dir) => std::fs::create_dir_all(dir).map_err(Into::into),
            None => Ok(()),
        }
        .and_then(|()| self.editor.append_history(path));
        if let Err(e) = saved {
            eprintln!("purebee-rs: history {} not written ({e}); this session's is not kept", path.display());
            self.history = None;
        }
    }
}
