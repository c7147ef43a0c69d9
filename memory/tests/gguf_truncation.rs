//! A real fixture cut short at every section boundary, and at random offsets.
//!
//! An independent walker (below, written from the GGUF spec, not from the reader) lists
//! every field of the fixture in file order with its offset and size, and every count
//! the reader must check before reserving memory. From that list it predicts, for any cut,
//! the exact error: the first field that crosses the cut is `Truncated` (at that field's
//! offset, needing its size), unless a count before it already claims more items than the
//! bytes left could hold (`CountTooLarge`); a cut in the padding before the data section is
//! `Truncated` there; a cut in the data is `TensorOutOfBounds` naming the first tensor, in
//! file order, that no longer fits.

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};

use proptest::prelude::*;
use purebee_memory::gguf::{GgufError, GgufFile};

const FIXTURES: [&str; 2] = ["tiny_b158_i2_s.gguf", "tiny_bitnet_tq2_0_scaletensors.gguf"];

fn fixture_path(file: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/bitnet-tiny").join(file)
}

/// One thing the reader reads or checks, in file order.
#[derive(Debug)]
enum Event {
    /// A field of `len` bytes at `at`; `what` is a piece of the reader's description.
    Field { at: u64, len: u64, what: String },
    /// A count stored at `at` and checked, when the cursor is at `after`, against the
    /// bytes left, at `min` bytes per item.
    Count { at: u64, after: u64, count: u64, min: u64, what: String },
}

/// The walker's account of a file.
struct Walk {
    events: Vec<Event>,
    /// (cut offset, label): the section boundaries to cut at.
    boundaries: Vec<(u64, String)>,
    infos_end: u64,
    data_offset: u64,
    /// Tensor name, absolute data start, size in bytes, in file order.
    tensors: Vec<(String, u64, u64)>,
}

struct Walker<'a> {
    bytes: &'a [u8],
    pos: u64,
    events: Vec<Event>,
}

impl Walker<'_> {
    fn field(&mut self, len: u64, what: impl Into<String>) -> &[u8] {
        let at = self.pos;
        self.events.push(Event::Field { at, len, what: what.into() });
        self.pos += len;
        &self.bytes[at as usize..(at + len) as usize]
    }
    fn u32(&mut self, what: impl Into<String>) -> u32 {
        u32::from_le_bytes(self.field(4, what).try_into().expect("4 bytes"))
    }
    fn u64(&mut self, what: impl Into<String>) -> u64 {
        u64::from_le_bytes(self.field(8, what).try_into().expect("8 bytes"))
    }
    fn string(&mut self, what: &str) -> String {
        let len = self.u64(what);
        String::from_utf8(self.field(len, what).to_vec()).expect("the fixture is valid UTF-8")
    }
    fn count(&mut self, at: u64, count: u64, min: u64, what: impl Into<String>) {
        self.events.push(Event::Count { at, after: self.pos, count, min, what: what.into() });
    }
    /// A value of GGUF type `ty`, described as belonging to `key`.
    fn value(&mut self, ty: u32, key: &str) {
        let what = format!("key '{key}'");
        match ty {
            0 | 1 | 7 => drop(self.field(1, what)),
            2 | 3 => drop(self.field(2, what)),
            4..=6 => drop(self.field(4, what)),
            10..=12 => drop(self.field(8, what)),
            8 => drop(self.string(&what)),
            9 => {
                let elem = self.u32(what.clone());
                let at = self.pos;
                let n = self.u64(what.clone());
                let min = match elem {
                    0 | 1 | 7 => 1,
                    2 | 3 => 2,
                    4..=6 => 4,
                    8 | 10..=12 => 8,
                    _ => 12,
                };
                self.count(at, n, min, what);
                for _ in 0..n {
                    self.value(elem, key);
                }
            }
            _ => panic!("the fixture has no type {ty}"),
        }
    }
}

/// The bytes of a tensor of `n` elements of GGUF type `ty` (the fixtures' types).
fn tensor_bytes(ty: u32, n: u64) -> u64 {
    match ty {
        0 => 4 * n,
        1 => 2 * n,
        34 => n / 256 * 54,
        35 => n / 256 * 66,
        36 => n / 4 + 32,
        _ => panic!("the fixtures have no type {ty}"),
    }
}

fn walk(bytes: &[u8]) -> Walk {
    let mut w = Walker { bytes, pos: 0, events: Vec::new() };
    let mut boundaries = vec![(0, "empty file".to_string())];
    w.field(4, "magic");
    boundaries.push((w.pos, "after the magic".into()));
    w.u32("version");
    boundaries.push((w.pos, "after the version".into()));
    let n_tensors = w.u64("tensor count");
    boundaries.push((w.pos, "after the tensor count".into()));
    let n_kv = w.u64("metadata entry count");
    boundaries.push((w.pos, "after the metadata count".into()));
    w.count(16, n_kv, 13, "metadata entry count");

    for i in 0..n_kv {
        let key = w.string(&format!("metadata entry {i}"));
        boundaries.push((w.pos, format!("after key {key}")));
        let ty = w.u32(format!("key '{key}'"));
        boundaries.push((w.pos, format!("after the type of {key}")));
        let value_at = w.pos;
        w.value(ty, &key);
        boundaries.push((w.pos, format!("after the value of {key}")));
        if ty == 9 {
            // Inside the array: after its element type, after its length, after its first
            // element, and in its middle.
            boundaries.push((value_at + 4, format!("after the element type of {key}")));
            boundaries.push((value_at + 12, format!("after the length of {key}")));
            boundaries.push((value_at + 12 + 9, format!("inside the first element of {key}")));
            boundaries.push(((value_at + w.pos) / 2, format!("in the middle of {key}")));
        }
    }

    w.count(8, n_tensors, 24, "tensor count");
    let mut infos = Vec::new();
    for i in 0..n_tensors {
        let name = w.string(&format!("tensor {i}"));
        boundaries.push((w.pos, format!("after the name of {name}")));
        let n_dims = w.u32(format!("'{name}'"));
        boundaries.push((w.pos, format!("after the dim count of {name}")));
        let mut n = 1;
        for d in 0..n_dims {
            n *= w.u64(format!("'{name}'"));
            boundaries.push((w.pos, format!("after ne{d} of {name}")));
        }
        let ty = w.u32(format!("'{name}'"));
        boundaries.push((w.pos, format!("after the type of {name}")));
        let offset = w.u64(format!("'{name}'"));
        boundaries.push((w.pos, format!("after the offset of {name}")));
        infos.push((name, offset, tensor_bytes(ty, n)));
    }
    let infos_end = w.pos;
    let data_offset = infos_end.next_multiple_of(32);
    boundaries.push((data_offset, "at the start of the data section".into()));
    if data_offset > infos_end + 1 {
        boundaries.push((data_offset - 1, "inside the padding before the data section".into()));
    }
    let tensors: Vec<(String, u64, u64)> = infos.into_iter().map(|(n, o, b)| (n, data_offset + o, b)).collect();
    let (last, start, len) = tensors.last().cloned().expect("the fixture has tensors");
    boundaries.push((start + len / 2, format!("in the middle of {last}'s data")));
    boundaries.push((start + len - 1, format!("one byte before the end of {last}'s data")));
    assert_eq!(start + len, bytes.len() as u64, "the last tensor ends the fixture");
    Walk { events: w.events, boundaries, infos_end, data_offset, tensors }
}

/// What the reader must say about the fixture cut to `cut` bytes.
#[derive(Debug, PartialEq)]
enum Expected {
    Truncated { offset: u64, needed: u64, available: u64, what: String },
    CountTooLarge { offset: u64, count: u64, available: u64, what: String },
    OutOfBounds { tensor: String },
    Ok,
}

fn expected(walk: &Walk, cut: u64) -> Expected {
    for e in &walk.events {
        match e {
            Event::Field { at, len, what } if at + len > cut => {
                return Expected::Truncated { offset: *at, needed: *len, available: cut - at, what: what.clone() };
            }
            Event::Count { at, after, count, min, what } if count * min > cut - after => {
                return Expected::CountTooLarge {
                    offset: *at,
                    count: *count,
                    available: cut - after,
                    what: what.clone(),
                };
            }
            _ => {}
        }
    }
    if cut < walk.data_offset {
        return Expected::Truncated {
            offset: walk.infos_end,
            needed: walk.data_offset - walk.infos_end,
            available: cut - walk.infos_end,
            what: "data section".into(),
        };
    }
    match walk.tensors.iter().find(|(_, start, len)| start + len > cut) {
        Some((name, _, _)) => Expected::OutOfBounds { tensor: name.clone() },
        None => Expected::Ok,
    }
}

/// Checks the reader's result on a fixture cut to `cut` bytes against the walker.
fn check(walk: &Walk, cut: u64, label: &str, path: &Path, result: Result<GgufFile, GgufError>) {
    let want = expected(walk, cut);
    let err = match (result, &want) {
        (Ok(_), Expected::Ok) => return,
        (Ok(_), _) => panic!("{label} (cut at {cut}): opened, expected {want:?}"),
        (Err(e), _) => e,
    };
    let msg = err.to_string();
    assert!(msg.starts_with(&format!("{}: ", path.display())), "{label}: message does not name the file: {msg}");
    match (&err, &want) {
        (
            GgufError::Truncated { offset, needed, available, what: w, .. },
            Expected::Truncated { offset: o, needed: n, available: a, what },
        ) => {
            assert_eq!((offset, needed, available), (o, n, a), "{label}: {msg}");
            assert!(w.contains(what.as_str()), "{label}: '{w}' should name {what}");
        }
        (
            GgufError::CountTooLarge { offset, count, available, what: w, .. },
            Expected::CountTooLarge { offset: o, count: c, available: a, what },
        ) => {
            assert_eq!((offset, count, available), (o, c, a), "{label}: {msg}");
            assert!(w.contains(what.as_str()), "{label}: '{w}' should name {what}");
        }
        (GgufError::TensorOutOfBounds { tensor, file_len, .. }, Expected::OutOfBounds { tensor: t }) => {
            assert_eq!((tensor, *file_len), (t, cut), "{label}: {msg}");
        }
        _ => panic!("{label} (cut at {cut}): got {err:?}, expected {want:?}"),
    }
}

#[test]
fn the_walker_agrees_with_the_reader_on_the_whole_file() {
    for file in FIXTURES {
        let path = fixture_path(file);
        let bytes = std::fs::read(&path).expect("fixture");
        let w = walk(&bytes);
        let g = GgufFile::open(&path).expect("valid fixture");
        assert_eq!(g.data_offset(), w.data_offset);
        let got: Vec<(String, u64, u64)> =
            g.tensors().iter().map(|t| (t.name.clone(), g.data_offset() + t.offset, t.n_bytes as u64)).collect();
        assert_eq!(got, w.tensors);
        assert_eq!(expected(&w, bytes.len() as u64), Expected::Ok);
    }
}

#[test]
fn truncation_at_every_section_boundary() {
    for file in FIXTURES {
        let bytes = std::fs::read(fixture_path(file)).expect("fixture");
        let w = walk(&bytes);
        let mut boundaries = w.boundaries.clone();
        // Cut a copy shorter and shorter: one copy, then set_len at each boundary.
        boundaries.sort_by_key(|b| std::cmp::Reverse(b.0));
        boundaries.dedup_by_key(|b| b.0);
        assert!(boundaries.len() > 300, "{file}: only {} boundaries", boundaries.len());
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join(file);
        std::fs::write(&path, &bytes).expect("copy");
        let f = OpenOptions::new().write(true).open(&path).expect("copy");
        let mut kinds = std::collections::BTreeSet::new();
        for (cut, label) in &boundaries {
            f.set_len(*cut).expect("truncate");
            let r = GgufFile::open(&path);
            kinds.insert(match &r {
                Err(GgufError::Truncated { .. }) => "Truncated",
                Err(GgufError::CountTooLarge { .. }) => "CountTooLarge",
                Err(GgufError::TensorOutOfBounds { .. }) => "TensorOutOfBounds",
                _ => "other",
            });
            check(&w, *cut, &format!("{file} {label}"), &path, r);
        }
        // Every cut is an error of one of these three kinds.
        assert_eq!(
            kinds.into_iter().collect::<Vec<_>>(),
            ["CountTooLarge", "TensorOutOfBounds", "Truncated"],
            "{file}"
        );
    }
}

fn fixture(i: usize) -> &'static (Vec<u8>, Walk) {
    static CACHE: std::sync::OnceLock<Vec<(Vec<u8>, Walk)>> = std::sync::OnceLock::new();
    &CACHE.get_or_init(|| {
        FIXTURES
            .iter()
            .map(|f| {
                let bytes = std::fs::read(fixture_path(f)).expect("fixture");
                let w = walk(&bytes);
                (bytes, w)
            })
            .collect()
    })[i]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    /// Cuts anywhere in the file: never a panic, always the predicted error.
    #[test]
    fn truncation_at_random_offsets(which in 0..FIXTURES.len(), at in any::<prop::sample::Index>()) {
        let (bytes, w) = fixture(which);
        let cut = at.index(bytes.len()) as u64;
        let label = format!("cut{cut}.gguf");
        let r = GgufFile::from_bytes(&label, &bytes[..cut as usize]);
        check(w, cut, "random cut", Path::new(&label), r);
    }

    /// Cuts in the metadata and tensor infos, where the structure is densest.
    #[test]
    fn truncation_at_random_offsets_in_the_header(which in 0..FIXTURES.len(), at in any::<prop::sample::Index>()) {
        let (bytes, w) = fixture(which);
        let cut = at.index(w.data_offset as usize + 1) as u64;
        let label = format!("cut{cut}.gguf");
        let r = GgufFile::from_bytes(&label, &bytes[..cut as usize]);
        check(w, cut, "random header cut", Path::new(&label), r);
    }
}

/// A file truncated, grown or touched after it was opened: [`GgufFile::check_unchanged`]
/// (and the [`purebee_memory::gguf::FileWatch`] a model keeps) names the file and what
/// changed, so that nobody reads the map past its new end (SIGBUS). A file image from
/// memory has nothing to watch.
#[test]
fn a_file_changed_after_it_was_opened_is_reported() {
    let bytes = std::fs::read(fixture_path(FIXTURES[0])).expect("fixture");
    let len = bytes.len() as u64;
    let later = std::time::SystemTime::now() + std::time::Duration::from_secs(5);
    let cases: [(&str, u64, Option<std::time::SystemTime>, String); 3] = [
        ("truncated", len / 3, None, format!("it was truncated from {len} to {} bytes", len / 3)),
        ("grown", len + 100, Some(later), "it was modified".to_string()),
        ("touched", len, Some(later), "it was modified (its modification time changed)".to_string()),
    ];
    for (label, new_len, mtime, what) in cases {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join(format!("{label}.gguf"));
        std::fs::write(&path, &bytes).expect("write");
        let file = GgufFile::open(&path).expect("opens");
        let watch = file.watch();
        assert!(file.check_unchanged().is_ok() && watch.check().is_ok(), "{label}");
        let f = OpenOptions::new().write(true).open(&path).expect("open for writing");
        f.set_len(new_len).expect("set_len");
        if let Some(t) = mtime {
            f.set_modified(t).expect("set mtime");
        }
        for r in [file.check_unchanged(), watch.check()] {
            match r {
                Err(e @ GgufError::ChangedSinceOpen { .. }) => {
                    let m = e.to_string();
                    assert!(m.starts_with(&format!("{}: the file changed after it was opened: ", path.display())));
                    assert!(m.contains(&what), "{label}: {m}");
                }
                other => panic!("{label}: expected ChangedSinceOpen, got {other:?}"),
            }
        }
    }
    let image = GgufFile::from_bytes("image.gguf", &bytes).expect("parses");
    assert!(image.check_unchanged().is_ok());
}
