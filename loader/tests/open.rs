//! Opening a model through the loader, from a path and from bytes, with each kind of KV
//! cache; and its errors, each naming the file or flag.

use std::path::PathBuf;

use purebee_loader::{
    open, EngineChoice, EngineSpec, LoadError, ModelFile, ModelSource, NoContext, SessionContext, SharedContext,
};
use purebee_memory::gguf::GgufWriter;

fn tiny_model() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/bitnet-tiny/tiny_b158_i2_s.gguf")
}

fn reference() -> EngineSpec {
    EngineSpec { choice: EngineChoice::Ref, ..EngineSpec::default() }
}

#[test]
fn a_path_and_the_same_bytes_give_the_same_model() {
    let path = tiny_model();
    let bytes = std::fs::read(&path).expect("the fixture is readable");
    let from_path = open(ModelSource::Path(&path), &reference(), SessionContext { n_ctx: Some(32) });
    let from_bytes =
        open(ModelSource::Bytes { name: "tiny.gguf", bytes: &bytes }, &reference(), SessionContext { n_ctx: Some(32) });
    let (mut a, mut b) = (from_path.expect("opens from its path"), from_bytes.expect("opens from bytes"));
    assert_eq!(a.engine, "ref (CPU)");
    assert_eq!(a.file.path(), path);
    assert_eq!(b.file.path(), std::path::Path::new("tiny.gguf"));
    assert_eq!((a.cache.n_ctx(), b.cache.n_ctx()), (32, 32));
    assert!(a.template.is_ok() && b.template.is_ok());
    let ids = a.tokenizer.encode("Hello", true, true);
    assert_eq!(ids, b.tokenizer.encode("Hello", true, true));
    let ta = a.model.forward_greedy(&mut a.cache, &ids, 0).expect("a pass");
    let tb = b.model.forward_greedy(&mut b.cache, &ids, 0).expect("a pass");
    assert_eq!(ta, tb);
    assert!(a.load_seconds >= 0.0);
}

#[test]
fn each_kind_of_cache_gets_its_default_size() {
    let path = tiny_model();
    // The fixture's training context is 4096, the session cap too.
    let one = open(ModelSource::Path(&path), &reference(), SessionContext::default()).expect("opens");
    assert_eq!(one.cache.n_ctx(), 4096.min(one.model.config().n_ctx_train));
    let shared = open(ModelSource::Path(&path), &reference(), SharedContext { n_ctx: 0, sequences: 3 }).expect("opens");
    assert_eq!(shared.cache.n_ctx(), shared.model.config().n_ctx_train);
    assert_eq!(shared.cache.max_sequences(), 3);
    let none = open(ModelSource::Path(&path), &reference(), NoContext).expect("opens");
    assert_eq!(none.cache, ());
}

#[test]
fn the_engine_is_told_before_the_weights_load_and_text_can_come_first() {
    let spec = reference();
    let mut file = ModelFile::open(ModelSource::Path(&tiny_model()), &spec).expect("opens");
    let eos = file.text().expect("a tokenizer").tokenizer.eos();
    let mut told = None;
    let loaded = file.load(&spec, NoContext, |created| told = Some(created.description.clone())).expect("loads");
    assert_eq!(told.as_deref(), Some("ref (CPU)"));
    assert_eq!(loaded.tokenizer.eos(), eos);
}

#[test]
fn errors_name_the_file_or_the_flag() {
    let missing = PathBuf::from("/nonexistent/model.gguf");
    let e = ModelFile::open(ModelSource::Path(&missing), &reference()).err().expect("no such file");
    assert!(e.to_string().contains("/nonexistent/model.gguf"), "{e}");

    // The engine is refused before anything loads, and no one is told of it.
    let spec = EngineSpec { choice: EngineChoice::Cpu, threads: Some(0), ..EngineSpec::default() };
    let file = ModelFile::open(ModelSource::Path(&tiny_model()), &spec).expect("opens");
    let mut told = false;
    let e = file.load(&spec, NoContext, |_| told = true).err().expect("-t 0");
    assert!(matches!(e, LoadError::ZeroThreads) && !told, "{e}");

    // A file that is no model says so before its missing tokenizer.
    let mut w = GgufWriter::new();
    w.add_str("general.architecture", "no-such-arch").expect("a key");
    let bytes = w.to_bytes();
    let source = ModelSource::Bytes { name: "odd.gguf", bytes: &bytes };
    let e = open(source, &reference(), NoContext).err().expect("not a model");
    assert!(e.to_string().contains("no-such-arch") && e.to_string().contains("odd.gguf"), "{e}");
    let mut file = ModelFile::open(source, &reference()).expect("a valid GGUF");
    let e = file.text().expect_err("no tokenizer");
    assert!(e.to_string().contains("odd.gguf") && e.to_string().contains("tokenizer"), "{e}");
}
