//! `purebee-rs inspect MODEL.gguf [--json]`: what a GGUF file holds.
//!
//! Prints the header (path, GGUF version, architecture, alignment, data offset), every
//! metadata entry with its type and value (arrays longer than [`ARRAY_FULL_MAX`] elements
//! summarised by type, length and their first [`ARRAY_HEAD`] elements), a tensor table
//! (name, type, dims in ggml order, bytes, offset from the data section) and totals (tensor
//! count, bytes, parameters, and the same per type). `--json` prints the same as one JSON
//! object; its metadata object lists keys in sorted order.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;

use clap::Args;
use purebee_memory::gguf::{GgufFile, MetaValue};
use serde_json::{json, Map, Value};

use crate::CliError;

/// Arrays up to this length are printed in full.
pub const ARRAY_FULL_MAX: usize = 16;

/// Longer arrays are summarised with this many leading elements.
pub const ARRAY_HEAD: usize = 8;

/// Strings in the text output are cut after this many characters.
const TEXT_STRING_MAX: usize = 80;

/// The arguments of `inspect`.
#[derive(Debug, Args)]
pub struct InspectArgs {
    /// The GGUF file to inspect.
    pub model: PathBuf,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Opens the model and prints its description to `out`.
pub fn run(args: &InspectArgs, out: &mut dyn Write) -> Result<(), CliError> {
    let g = GgufFile::open(&args.model)?;
    if args.json {
        serde_json::to_writer_pretty(&mut *out, &to_json(&g))?;
        writeln!(out)?;
    } else {
        write_text(&g, out)?;
    }
    Ok(())
}

/// Tensor count, parameters and bytes, in all and per type.
#[derive(Debug, Default, Clone, Copy)]
struct Count {
    tensors: usize,
    parameters: u64,
    bytes: u64,
}

impl Count {
    fn add(&mut self, parameters: u64, bytes: u64) {
        self.tensors += 1;
        self.parameters += parameters;
        self.bytes += bytes;
    }
}

fn totals(g: &GgufFile) -> (Count, BTreeMap<&'static str, Count>) {
    let mut all = Count::default();
    let mut by_type: BTreeMap<&'static str, Count> = BTreeMap::new();
    for t in g.tensors() {
        let (n, b) = (t.n_elements() as u64, t.n_bytes as u64);
        all.add(n, b);
        by_type.entry(t.dtype.name()).or_default().add(n, b);
    }
    (all, by_type)
}

fn architecture(g: &GgufFile) -> Option<&str> {
    g.get("general.architecture").and_then(MetaValue::as_str)
}

/// A value as plain JSON: numbers, bools, strings, arrays (non-finite floats as strings).
fn plain_json(v: &MetaValue) -> Value {
    fn float(x: f64) -> Value {
        if x.is_finite() {
            json!(x)
        } else {
            json!(x.to_string())
        }
    }
    match v {
        MetaValue::U8(x) => json!(x),
        MetaValue::I8(x) => json!(x),
        MetaValue::U16(x) => json!(x),
        MetaValue::I16(x) => json!(x),
        MetaValue::U32(x) => json!(x),
        MetaValue::I32(x) => json!(x),
        MetaValue::U64(x) => json!(x),
        MetaValue::I64(x) => json!(x),
        // Through the shortest decimal that reads back as the same f32 (0.1, not 0.10000000149).
        MetaValue::F32(x) => x.to_string().parse::<f64>().map_or_else(|_| float(f64::from(*x)), float),
        MetaValue::F64(x) => float(*x),
        MetaValue::Bool(x) => json!(x),
        MetaValue::String(s) => json!(s),
        MetaValue::Array(a) => Value::Array(a.iter().map(|v| plain_json(&v)).collect()),
    }
}

/// A metadata entry as `{"type", "value"}`, arrays as `{"type": "array", "elem_type",
/// "len", "value"}`, or with `"head"` instead of `"value"` when longer than
/// [`ARRAY_FULL_MAX`].
fn entry_json(v: &MetaValue) -> Value {
    match v {
        MetaValue::Array(a) => {
            let mut m = Map::new();
            m.insert("type".into(), json!("array"));
            m.insert("elem_type".into(), json!(a.elem_type().name()));
            m.insert("len".into(), json!(a.len()));
            if a.len() > ARRAY_FULL_MAX {
                m.insert("head".into(), Value::Array(a.iter().take(ARRAY_HEAD).map(|v| plain_json(&v)).collect()));
            } else {
                m.insert("value".into(), plain_json(v));
            }
            Value::Object(m)
        }
        _ => json!({ "type": v.meta_type().name(), "value": plain_json(v) }),
    }
}

fn to_json(g: &GgufFile) -> Value {
    let metadata: Map<String, Value> = g.metadata().iter().map(|(k, v)| (k.clone(), entry_json(v))).collect();
    let tensors: Vec<Value> = g
        .tensors()
        .iter()
        .map(|t| {
            json!({
                "name": t.name,
                "type": t.dtype.name(),
                "ne": t.ne,
                "bytes": t.n_bytes,
                "offset": t.offset,
            })
        })
        .collect();
    let (all, by_type) = totals(g);
    let by_type: Map<String, Value> = by_type
        .iter()
        .map(|(ty, c)| (ty.to_string(), json!({ "tensors": c.tensors, "parameters": c.parameters, "bytes": c.bytes })))
        .collect();
    json!({
        "file": g.path().display().to_string(),
        "version": g.version(),
        "architecture": architecture(g),
        "alignment": g.alignment(),
        "data_offset": g.data_offset(),
        "file_len": g.file_len(),
        "metadata": metadata,
        "tensors": tensors,
        "totals": {
            "tensors": all.tensors,
            "bytes": all.bytes,
            "parameters": all.parameters,
            "by_type": by_type,
        },
    })
}

/// A string quoted and escaped, cut after `max` characters.
fn quoted(s: &str, max: usize) -> String {
    let n = s.chars().count();
    if n <= max {
        format!("{s:?}")
    } else {
        let head: String = s.chars().take(max).collect();
        format!("{head:?}… ({n} chars)")
    }
}

/// A value for the text output: strings quoted and cut, long arrays summarised.
fn text_value(v: &MetaValue, string_max: usize) -> String {
    match v {
        MetaValue::String(s) => quoted(s, string_max),
        MetaValue::Array(a) => {
            let shown = if a.len() > ARRAY_FULL_MAX { ARRAY_HEAD } else { a.len() };
            let items: Vec<String> = a.iter().take(shown).map(|v| text_value(&v, 24)).collect();
            let more = a.len() - shown;
            if more > 0 {
                format!("[{}, … ({more} more)]", items.join(", "))
            } else {
                format!("[{}]", items.join(", "))
            }
        }
        other => other.to_string(),
    }
}

fn type_text(v: &MetaValue) -> String {
    match v {
        MetaValue::Array(a) => format!("array[{}; {}]", a.elem_type(), a.len()),
        other => other.meta_type().name().to_string(),
    }
}

fn write_text(g: &GgufFile, out: &mut dyn Write) -> std::io::Result<()> {
    writeln!(out, "file:          {}", g.path().display())?;
    writeln!(out, "GGUF version:  {}", g.version())?;
    writeln!(out, "architecture:  {}", architecture(g).unwrap_or("(none)"))?;
    writeln!(out, "alignment:     {}", g.alignment())?;
    writeln!(out, "data offset:   {}", g.data_offset())?;
    writeln!(out, "file size:     {}", g.file_len())?;

    writeln!(out)?;
    writeln!(out, "metadata ({} entries):", g.metadata().len())?;
    let key_w = g.metadata().iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    let types: Vec<String> = g.metadata().iter().map(|(_, v)| type_text(v)).collect();
    let type_w = types.iter().map(String::len).max().unwrap_or(0);
    for ((k, v), ty) in g.metadata().iter().zip(&types) {
        writeln!(out, "  {k:<key_w$}  {ty:<type_w$}  {}", text_value(v, TEXT_STRING_MAX))?;
    }

    writeln!(out)?;
    writeln!(out, "tensors ({}):", g.tensors().len())?;
    let ne_text: Vec<String> = g
        .tensors()
        .iter()
        .map(|t| format!("[{}]", t.ne.iter().map(u64::to_string).collect::<Vec<_>>().join(", ")))
        .collect();
    let (h_name, h_type, h_ne, h_bytes, h_off) =
        ("name", "type", "ne (ggml order, ne0 first)", "bytes", "offset (in data section)");
    let name_w = g.tensors().iter().map(|t| t.name.len()).chain([h_name.len()]).max().unwrap_or(0);
    let ne_w = ne_text.iter().map(String::len).chain([h_ne.len()]).max().unwrap_or(0);
    let bytes_w = g.tensors().iter().map(|t| t.n_bytes.to_string().len()).chain([h_bytes.len()]).max().unwrap_or(0);
    writeln!(out, "  {h_name:<name_w$}  {h_type:<6}  {h_ne:<ne_w$}  {h_bytes:>bytes_w$}  {h_off}")?;
    for (t, ne) in g.tensors().iter().zip(&ne_text) {
        writeln!(
            out,
            "  {:<name_w$}  {:<6}  {ne:<ne_w$}  {:>bytes_w$}  {}",
            t.name,
            t.dtype.name(),
            t.n_bytes,
            t.offset
        )?;
    }

    let (all, by_type) = totals(g);
    writeln!(out)?;
    writeln!(out, "totals:")?;
    writeln!(out, "  tensors:     {}", all.tensors)?;
    writeln!(out, "  bytes:       {} ({:.2} MiB)", all.bytes, all.bytes as f64 / (1024.0 * 1024.0))?;
    writeln!(out, "  parameters:  {}", all.parameters)?;
    writeln!(out, "  by type:")?;
    for (ty, c) in &by_type {
        writeln!(out, "    {ty:<6}  {:>5} tensors  {:>12} parameters  {:>12} bytes", c.tensors, c.parameters, c.bytes)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use purebee_memory::gguf::{MetaArray, MetaType};

    #[test]
    fn long_arrays_are_summarised_and_short_ones_printed_whole() {
        let long = MetaValue::Array(MetaArray::of_u32(0..100));
        let j = entry_json(&long);
        assert_eq!(j["len"], 100);
        assert_eq!(j["elem_type"], "u32");
        assert_eq!(j["head"], json!([0, 1, 2, 3, 4, 5, 6, 7]));
        assert!(j.get("value").is_none());
        assert_eq!(text_value(&long, 80), "[0, 1, 2, 3, 4, 5, 6, 7, … (92 more)]");

        let short = MetaValue::Array(
            MetaArray::new(MetaType::Array, vec![MetaValue::Array(MetaArray::of_i32([1, -2]))])
                .expect("one element type"),
        );
        assert_eq!(entry_json(&short), json!({"type": "array", "elem_type": "array", "len": 1, "value": [[1, -2]]}));
        assert_eq!(text_value(&short, 80), "[[1, -2]]");
    }

    #[test]
    fn scalars_strings_and_floats() {
        assert_eq!(entry_json(&MetaValue::F32(1e-5)), json!({"type": "f32", "value": 1e-5}));
        assert_eq!(entry_json(&MetaValue::F64(f64::NAN)), json!({"type": "f64", "value": "NaN"}));
        assert_eq!(entry_json(&MetaValue::U64(u64::MAX)), json!({"type": "u64", "value": u64::MAX}));
        assert_eq!(text_value(&MetaValue::String("a\nb".into()), 80), "\"a\\nb\"");
        assert_eq!(text_value(&MetaValue::String("abcdef".into()), 3), "\"abc\"… (6 chars)");
    }
}
