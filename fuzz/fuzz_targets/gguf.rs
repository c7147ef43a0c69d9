//! `gguf`: bytes → the GGUF reader from memory, every metadata value and tensor walked, one
//! row of each tensor dequantized, the registry load, the writer round trip.

#![no_main]

use libfuzzer_sys::fuzz_target;
use purebee_memory::gguf::{GgufFile, GgufWriter, ALIGNMENT_KEY};
use purebee_memory::quant::QuantMatrix;
use purebee_memory::Registry;

const LABEL: &str = "fuzz.gguf";

fuzz_target!(|data: &[u8]| {
    let f = match GgufFile::from_bytes(LABEL, data) {
        Ok(f) => f,
        Err(e) => {
            let m = e.to_string();
            assert!(m.contains(LABEL), "an error that does not name the file: {m}");
            return;
        }
    };
    for (key, value) in f.metadata() {
        let _ = (value.to_string(), value.type_description());
        // Every getter on every key: each returns a value or a typed error, never panics.
        let _ = (f.get_str(key), f.get_u32(key), f.get_u64(key), f.get_i32(key), f.get_i64(key));
        let _ = (f.get_usize(key), f.get_f32(key), f.get_f64(key), f.get_bool(key), f.get_array(key));
        let _ = (f.get_str_array(key), f.get_i32_array(key), f.get_u32_array(key), f.get_f32_array(key));
    }
    let _ = f.architecture();
    for info in f.tensors() {
        let t = f.host_tensor(&info.name).expect("a tensor validated at open is a host tensor");
        assert_eq!(t.bytes(), f.tensor_bytes(info));
        let m = QuantMatrix::from_tensor(&t).expect("a tensor validated at open is a whole matrix");
        if m.rows() == 0 {
            continue; // cols may be anything then: the file holds no bytes for them
        }
        let mut row = vec![0f32; m.cols()];
        let mut trits = vec![0i8; m.cols()];
        let mut scales = vec![0f32; m.ternary_scales_per_row().unwrap_or(0)];
        for r in [0, m.rows() - 1] {
            m.dequantize_row(r, &mut row).expect("row decodes");
            if m.ternary_scales_per_row().is_some() {
                m.ternary_row(r, &mut trits, &mut scales).expect("ternary row decodes");
            }
        }
    }
    f.load_into(&mut Registry::new()).expect("a validated file loads into an empty registry");

    // The writer takes back what the reader accepted (except what only it refuses: a
    // 0-dim tensor, a non-u32 alignment) and writes a file that parses to the same values.
    let mut w = GgufWriter::new();
    let _ = w.set_version(f.version());
    for (key, value) in f.metadata() {
        if key != ALIGNMENT_KEY && w.add(key, value.clone()).is_err() {
            return;
        }
    }
    for info in f.tensors() {
        if w.add_tensor(&info.name, info.dtype, &info.ne, f.tensor_bytes(info)).is_err() {
            return;
        }
    }
    let again = GgufFile::from_bytes(LABEL, &w.to_bytes()).expect("the writer's output parses");
    let text = |g: &GgufFile| -> Vec<String> {
        g.metadata().iter().filter(|(k, _)| k != ALIGNMENT_KEY).map(|(k, v)| format!("{k}={v:?}")).collect()
    };
    assert_eq!(text(&f), text(&again));
    assert_eq!(f.tensors().len(), again.tensors().len());
    for (a, b) in f.tensors().iter().zip(again.tensors()) {
        assert_eq!((&a.name, a.dtype, &a.ne), (&b.name, b.dtype, &b.ne));
        assert_eq!(f.tensor_bytes(a), again.tensor_bytes(b));
    }
});
