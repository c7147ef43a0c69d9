//! How the cli opens a model through `purebee-loader`: the file mapped, then the engine
//! said on stderr and the model loaded, each with a spinner on a terminal and the time it
//! took with `--verbose`.

use std::path::Path;
use std::time::Instant;

use indicatif::HumanBytes;
use purebee_loader::{ContextRequest, LoadedModel, ModelFile, ModelSource};

use crate::engine_choice::EngineArgs;
use crate::progress::Spinner;
use crate::CliError;

/// The model file at `path` (a path: `models::resolve` turns a name into one), mapped and
/// checked.
pub fn open(path: &Path, engine: &EngineArgs) -> Result<ModelFile, CliError> {
    let start = Instant::now();
    let verb = if engine.no_mmap { "reading" } else { "mapping" };
    let spinner = Spinner::start(format!("{verb} {}", path.display()));
    let file = ModelFile::open(ModelSource::Path(path), &engine.spec());
    spinner.finish();
    let file = file?;
    if engine.verbose {
        eprintln!(
            "purebee-rs: {} {} ({}) in {:.3} s",
            if engine.no_mmap { "read" } else { "mapped" },
            path.display(),
            HumanBytes(file.gguf().file_len()),
            start.elapsed().as_secs_f64()
        );
    }
    Ok(file)
}

/// `file`'s model on the engine the flags chose, with the KV cache `context` asks for.
pub fn load<C: ContextRequest>(
    file: ModelFile,
    engine: &EngineArgs,
    context: C,
) -> Result<LoadedModel<C::Cache>, CliError> {
    let mut spinner = None;
    let loaded = file.load(&engine.spec(), context, |created| {
        for note in &created.notes {
            eprintln!("purebee-rs: {note}");
        }
        eprintln!("purebee-rs: engine {}", created.description);
        spinner = Some(Spinner::start(format!("loading the model on the {} engine", created.engine.name())));
    });
    if let Some(spinner) = spinner {
        spinner.finish();
    }
    let loaded = loaded?;
    if engine.verbose {
        eprintln!(
            "purebee-rs: loaded the model on the {} engine in {:.2} s",
            loaded.model.engine().name(),
            loaded.load_seconds
        );
    }
    Ok(loaded)
}
