//! Opening the model of `run`, `chat` and `bench`: its path resolved (a path, a pulled
//! name or a source pulled on first use), the file mapped, with a spinner on a terminal and
//! the time it took with `--verbose`.

use std::path::{Path, PathBuf};
use std::time::Instant;

use indicatif::HumanBytes;
use purebee_memory::gguf::GgufFile;

use crate::engine_choice::EngineArgs;
use crate::progress::Spinner;
use crate::{models, CliError};

/// The model file `model` stands for, mapped and checked.
pub fn open(model: &Path, engine: &EngineArgs) -> Result<(PathBuf, GgufFile), CliError> {
    let path = models::resolve(model)?;
    let start = Instant::now();
    let verb = if engine.no_mmap { "reading" } else { "mapping" };
    let spinner = Spinner::start(format!("{verb} {}", path.display()));
    let file = purebee_loader::open_file(&path, &engine.spec());
    spinner.finish();
    let file = file?;
    if engine.verbose {
        eprintln!(
            "purebee-rs: {} {} ({}) in {:.3} s",
            if engine.no_mmap { "read" } else { "mapped" },
            path.display(),
            HumanBytes(file.file_len()),
            start.elapsed().as_secs_f64()
        );
    }
    Ok((path, file))
}
