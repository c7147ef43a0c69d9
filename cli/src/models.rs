//! Models by name: `purebee-rs list`, `rm NAME`, `show NAME`, and how `run`, `chat` and
//! `bench` find their model: an existing path as always, else a pulled name
//! (`OWNER/REPO/FILE[@REV]` or a URL), else an `hf://` or http(s) source, pulled on first
//! use.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use clap::Args;
use indicatif::HumanBytes;
use purebee_hub::{is_remote_source, HubError, PullOptions, Source, Store};
use purebee_memory::gguf::GgufFile;
use serde_json::json;

use crate::CliError;

/// The model file `model` stands for: the path itself when it exists; a pulled model of
/// that name; an `hf://` or URL source, pulled when it is not in the store yet. Anything
/// else is returned as is, for the GGUF reader to report.
pub fn resolve(model: &Path) -> Result<PathBuf, CliError> {
    if model.exists() {
        return Ok(model.to_path_buf());
    }
    let Some(text) = model.to_str() else { return Ok(model.to_path_buf()) };
    if is_remote_source(text) {
        let source = Source::parse(text)?;
        let store = Store::from_env()?;
        if let Some(m) = store.find(&source) {
            return Ok(m.path);
        }
        eprintln!("purebee-rs: {text} is not in {} yet; pulling it", store.root().display());
        return Ok(crate::pull::pull_with_progress(&store, &source, &PullOptions::from_env())?.path);
    }
    match Store::from_env().and_then(|s| s.find_name(text)) {
        Ok(m) => Ok(m.path),
        Err(HubError::NotInStore { store, .. }) => Err(format!(
            "{text}: no such file, and no pulled model of that name in {} (`purebee-rs list` shows them; \
             `purebee-rs pull hf://{text}` pulls it)",
            store.display()
        )
        .into()),
        Err(_) => Ok(model.to_path_buf()),
    }
}

/// Arguments of `list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// One JSON object per model, one per line.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `rm`.
#[derive(Debug, Args)]
pub struct RmArgs {
    /// The model's name, as `list` shows it.
    pub name: String,
}

/// Arguments of `show`.
#[derive(Debug, Args)]
pub struct ShowArgs {
    /// A pulled model's name (as `list` shows it), an hf:// source already pulled, or a path.
    pub name: String,
    /// One JSON object.
    #[arg(long)]
    pub json: bool,
}

/// What `list` and `show` read from a GGUF file.
struct Summary {
    arch: String,
    parameters: u64,
    context: Option<u64>,
    /// (type, tensors, bytes), most bytes first.
    types: Vec<(String, usize, u64)>,
    chat_template: Option<String>,
}

impl Summary {
    fn read(path: &Path) -> Result<Summary, CliError> {
        let file = GgufFile::open(path)?;
        let arch = file.architecture().unwrap_or("?").to_string();
        let parameters = file.tensors().iter().map(|t| t.n_elements() as u64).sum();
        let context = file.get(&format!("{arch}.context_length")).and_then(|v| v.as_i128()).map(|v| v as u64);
        let mut by_type: BTreeMap<&str, (usize, u64)> = BTreeMap::new();
        for t in file.tensors() {
            let e = by_type.entry(t.dtype.name()).or_default();
            e.0 += 1;
            e.1 += t.n_bytes as u64;
        }
        let mut types: Vec<(String, usize, u64)> =
            by_type.into_iter().map(|(k, (n, b))| (k.to_string(), n, b)).collect();
        types.sort_by_key(|t| std::cmp::Reverse(t.2));
        let chat_template = file.get("tokenizer.chat_template").and_then(|v| v.as_str()).map(str::to_string);
        Ok(Summary { arch, parameters, context, types, chat_template })
    }

    fn weight_types(&self) -> String {
        self.types.iter().map(|t| t.0.as_str()).collect::<Vec<_>>().join(",")
    }
}

fn parameters(n: u64) -> String {
    if n >= 1_000_000_000 {
        format!("{:.2}B", n as f64 / 1e9)
    } else {
        format!("{:.1}M", n as f64 / 1e6)
    }
}

/// Runs `list`.
pub fn list(args: &ListArgs, out: &mut dyn Write) -> Result<(), CliError> {
    let store = Store::from_env()?;
    let models = store.list()?;
    if args.json {
        for m in &models {
            let s = Summary::read(&m.path).ok();
            let j = json!({
                "name": m.name,
                "size": m.size,
                "sha256": m.sha256.map(|d| d.to_string()),
                "architecture": s.as_ref().map(|s| s.arch.clone()),
                "weight_types": s.as_ref().map(|s| s.types.iter().map(|t| t.0.clone()).collect::<Vec<_>>()),
                "path": m.path,
            });
            writeln!(out, "{j}")?;
        }
        return Ok(());
    }
    if models.is_empty() {
        writeln!(
            out,
            "no pulled models in {} (pull one with `purebee-rs pull hf://OWNER/REPO/FILE.gguf`)",
            store.root().display()
        )?;
        return Ok(());
    }
    let rows: Vec<[String; 5]> = models
        .iter()
        .map(|m| {
            let (arch, types) = match Summary::read(&m.path) {
                Ok(s) => (s.arch.clone(), s.weight_types()),
                Err(_) => ("(not GGUF)".to_string(), "-".to_string()),
            };
            [m.name.clone(), HumanBytes(m.size).to_string(), arch, types, m.path.display().to_string()]
        })
        .collect();
    let header = ["NAME", "SIZE", "ARCH", "WEIGHTS", "PATH"].map(str::to_string);
    let width = |i: usize| rows.iter().chain([&header]).map(|r| r[i].chars().count()).max().unwrap_or(0);
    let widths = [width(0), width(1), width(2), width(3)];
    for r in [&header].into_iter().chain(rows.iter()) {
        writeln!(
            out,
            "{:<w0$}  {:>w1$}  {:<w2$}  {:<w3$}  {}",
            r[0],
            r[1],
            r[2],
            r[3],
            r[4],
            w0 = widths[0],
            w1 = widths[1],
            w2 = widths[2],
            w3 = widths[3]
        )?;
    }
    Ok(())
}

/// Runs `rm`.
pub fn rm(args: &RmArgs, out: &mut dyn Write) -> Result<(), CliError> {
    let removed = Store::from_env()?.remove(&args.name)?;
    if removed.freed > 0 {
        writeln!(out, "removed {} ({} freed)", removed.name, HumanBytes(removed.freed))?;
    } else {
        writeln!(out, "removed {} (its file is still used by another revision)", removed.name)?;
    }
    Ok(())
}

/// Runs `show`.
pub fn show(args: &ShowArgs, out: &mut dyn Write) -> Result<(), CliError> {
    let path = Path::new(&args.name);
    let (name, path, sha256) = if path.exists() {
        (args.name.clone(), path.to_path_buf(), None)
    } else {
        let m = Store::from_env()?.find_name(&args.name)?;
        (m.name, m.path, m.sha256)
    };
    let s = Summary::read(&path)?;
    let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    if args.json {
        let types: Vec<_> = s.types.iter().map(|(t, n, b)| json!({"type": t, "tensors": n, "bytes": b})).collect();
        let j = json!({
            "name": name,
            "path": path,
            "size": size,
            "sha256": sha256.map(|d| d.to_string()),
            "architecture": s.arch,
            "parameters": s.parameters,
            "context_length": s.context,
            "tensor_types": types,
            "chat_template": s.chat_template,
        });
        writeln!(out, "{j}")?;
        return Ok(());
    }
    writeln!(out, "name:          {name}")?;
    writeln!(out, "path:          {}", path.display())?;
    writeln!(out, "size:          {} ({size} bytes)", HumanBytes(size))?;
    if let Some(d) = sha256 {
        writeln!(out, "sha256:        {d}")?;
    }
    writeln!(out, "architecture:  {}", s.arch)?;
    writeln!(out, "parameters:    {} ({})", parameters(s.parameters), s.parameters)?;
    writeln!(out, "context:       {}", s.context.map_or("-".to_string(), |c| c.to_string()))?;
    let types: Vec<String> = s.types.iter().map(|(t, n, b)| format!("{t} ({n} tensors, {})", HumanBytes(*b))).collect();
    writeln!(out, "tensor types:  {}", types.join(", "))?;
    match &s.chat_template {
        Some(t) => writeln!(out, "chat template:\n{}", t.trim_end())?,
        None => writeln!(out, "chat template: none (use `run -p` with a plain prompt)")?,
    }
    Ok(())
}
