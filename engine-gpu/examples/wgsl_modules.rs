//! Writes every WGSL module the engine may create into a folder, for checking them with
//! another WGSL compiler than naga (a browser's: `tests/browser/wgsl_compile.py`).
//!
//! `cargo run -p purebee-engine-gpu --example wgsl_modules -- DIR`
//!
//! DIR gets `NN.wgsl` for each module and `modules.tsv`: one line per module, its file
//! name, whether it needs subgroup operations (`1` or `0`), and its name.

use std::fmt::Write as _;
use std::path::PathBuf;

fn main() {
    let Some(dir) = std::env::args_os().nth(1).map(PathBuf::from) else {
        eprintln!("usage: wgsl_modules DIR");
        std::process::exit(2);
    };
    if let Err(e) = write_modules(&dir) {
        eprintln!("wgsl_modules: {}: {e}", dir.display());
        std::process::exit(1);
    }
}

fn write_modules(dir: &std::path::Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let mut index = String::new();
    for (i, module) in purebee_engine_gpu::wgsl_modules().enumerate() {
        let file = format!("{i:02}.wgsl");
        std::fs::write(dir.join(&file), module.source)?;
        let _ = writeln!(index, "{file}\t{}\t{}", u8::from(module.uses_subgroups), module.name);
    }
    std::fs::write(dir.join("modules.tsv"), index)
}
