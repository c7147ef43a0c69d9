//! The typed metadata getters of `GgufFile`: what they accept (any integer type whose
//! value fits; f32 from F32 or F64) and the errors they give (MissingKey, WrongType,
//! OutOfRange, UnknownTensor), each naming the file and the key or tensor.

use purebee_memory::gguf::{GgufError, GgufFile, GgufWriter, MetaArray, MetaType, MetaValue};

fn file() -> GgufFile {
    let mut w = GgufWriter::new();
    w.add_str("general.architecture", "bitnet").expect("new key");
    w.add("u8", MetaValue::U8(7)).expect("new key");
    w.add("u16", MetaValue::U16(300)).expect("new key");
    w.add("neg", MetaValue::I64(-1)).expect("new key");
    w.add("big", MetaValue::U64(1 << 40)).expect("new key");
    w.add("i8", MetaValue::I8(-5)).expect("new key");
    w.add("f64", MetaValue::F64(0.25)).expect("new key");
    w.add("f64_huge", MetaValue::F64(1e300)).expect("new key");
    w.add("f32", MetaValue::F32(1e-5)).expect("new key");
    w.add("flag", MetaValue::Bool(true)).expect("new key");
    w.add("name", MetaValue::String("x".into())).expect("new key");
    w.add("strs", MetaArray::of_strings(["a", "b"])).expect("new key");
    w.add("u32s", MetaArray::of_u32([1, 2])).expect("new key");
    w.add("i32s", MetaArray::of_i32([3, -1])).expect("new key");
    w.add("u8s", MetaArray::new(MetaType::U8, vec![MetaValue::U8(9)]).expect("one element type")).expect("new key");
    w.add("f32s", MetaArray::of_f32([0.5, 2.0])).expect("new key");
    w.add(
        "f64s",
        MetaArray::new(MetaType::F64, vec![MetaValue::F64(1.5), MetaValue::F64(-1e200)]).expect("one element type"),
    )
    .expect("new key");
    w.add_f32_tensor("t", &[1], &[1.0]).expect("valid");
    GgufFile::from_bytes("acc.gguf", &w.to_bytes()).expect("valid")
}

/// Checks that `err`'s message names the file and `key`.
fn names(err: &GgufError, key: &str) {
    let msg = err.to_string();
    assert!(msg.starts_with("acc.gguf: "), "{msg}");
    assert!(msg.contains(&format!("'{key}'")), "{msg}");
}

#[test]
fn integers_of_any_type_are_accepted_when_they_fit() {
    let g = file();
    assert_eq!(g.get_u32("u8").expect("fits"), 7);
    assert_eq!(g.get_i32("u16").expect("fits"), 300);
    assert_eq!(g.get_i64("neg").expect("fits"), -1);
    assert_eq!(g.get_u64("big").expect("fits"), 1 << 40);
    assert_eq!(g.get_usize("u16").expect("fits"), 300);
    assert_eq!(g.get_i32("i8").expect("fits"), -5);
    assert_eq!(g.get_f32("f64").expect("f64 within range"), 0.25);
    assert_eq!(g.get_f32("f32").expect("f32"), 1e-5);
    assert_eq!(g.get_f64("f32").expect("f32 widens"), f64::from(1e-5f32));
    assert!(g.get_bool("flag").expect("bool"));
    assert_eq!(g.get_str("name").expect("string"), "x");
    assert_eq!(g.architecture().expect("present"), "bitnet");
    assert_eq!(g.get_str_array("strs").expect("strings"), ["a", "b"]);
    assert_eq!(g.get_u32_array("u32s").expect("u32s"), [1, 2]);
    assert_eq!(g.get_i32_array("u8s").expect("u8 widens"), [9]);
    assert_eq!(g.get_i32_array("i32s").expect("i32s"), [3, -1]);
    assert_eq!(g.get_f32_array("f32s").expect("f32s"), [0.5, 2.0]);
    assert_eq!(g.get_array("u32s").expect("array").len(), 2);
}

#[test]
fn missing_keys() {
    let g = file();
    for err in [
        g.get_u32("nope").err(),
        g.get_str("nope").err(),
        g.get_f32("nope").err(),
        g.get_bool("nope").err(),
        g.get_str_array("nope").err(),
    ] {
        match err {
            Some(e @ GgufError::MissingKey { .. }) => {
                names(&e, "nope");
                assert!(e.to_string().contains("missing"), "{e}");
            }
            other => panic!("expected MissingKey, got {other:?}"),
        }
    }
    let mut w = GgufWriter::new();
    w.add_u32("x", 1).expect("new key");
    let g = GgufFile::from_bytes("acc.gguf", &w.to_bytes()).expect("valid");
    match g.architecture() {
        Err(e @ GgufError::MissingKey { .. }) => names(&e, "general.architecture"),
        other => panic!("expected MissingKey, got {other:?}"),
    }
}

#[test]
fn wrong_types_name_the_key_and_both_types() {
    let g = file();
    let cases: Vec<(Option<GgufError>, &str, &str, &str)> = vec![
        (g.get_u32("name").err(), "name", "string", "u32"),
        (g.get_i64("flag").err(), "flag", "bool", "i64"),
        (g.get_u32("f32").err(), "f32", "f32", "u32"),
        (g.get_f32("u8").err(), "u8", "u8", "f32 or f64"),
        (g.get_f64("name").err(), "name", "string", "f32 or f64"),
        (g.get_bool("u8").err(), "u8", "u8", "bool"),
        (g.get_str("flag").err(), "flag", "bool", "string"),
        (g.get_str("strs").err(), "strs", "array of string", "string"),
        (g.get_array("name").err(), "name", "string", "array"),
        (g.get_str_array("u32s").err(), "u32s", "array of u32", "array of string"),
        (g.get_u32_array("strs").err(), "strs", "array of string", "integers"),
        (g.get_f32_array("i32s").err(), "i32s", "array of i32", "array of f32"),
        (g.get_str_array("name").err(), "name", "string", "array"),
    ];
    for (err, key, found_ty, expected) in cases {
        match err {
            Some(e @ GgufError::WrongType { .. }) => {
                names(&e, key);
                if let GgufError::WrongType { found, expected: exp, .. } = &e {
                    assert_eq!(found, found_ty, "{e}");
                    assert!(exp.contains(expected), "{e}");
                }
            }
            other => panic!("{key}: expected WrongType, got {other:?}"),
        }
    }
}

#[test]
fn integers_that_do_not_fit() {
    let g = file();
    let cases = [
        (g.get_u32("neg").err(), "neg", "-1", "u32"),
        (g.get_u64("i8").err(), "i8", "-5", "u64"),
        (g.get_i32("big").err(), "big", "1099511627776", "i32"),
        (g.get_u32("big").err(), "big", "1099511627776", "u32"),
        (g.get_f32("f64_huge").err(), "f64_huge", "holds 1e300,", "f32"),
        (g.get_u32_array("i32s").err(), "i32s", "element 1 = -1", "u32"),
        (g.get_f32_array("f64s").err(), "f64s", "element 1 = -1e200", "f32"),
    ];
    for (err, key, value, target) in cases {
        match err {
            Some(e @ GgufError::OutOfRange { .. }) => {
                names(&e, key);
                assert!(e.to_string().contains(value), "{e}");
                assert!(e.to_string().ends_with(&format!("does not fit in {target}")), "{e}");
            }
            other => panic!("{key}: expected OutOfRange, got {other:?}"),
        }
    }
}

#[test]
fn unknown_tensors() {
    let g = file();
    assert!(g.tensor_info("t").is_ok());
    for err in [g.tensor_info("t2").err(), g.host_tensor("t2").err()] {
        match err {
            Some(e @ GgufError::UnknownTensor { .. }) => names(&e, "t2"),
            other => panic!("expected UnknownTensor, got {other:?}"),
        }
    }
}
