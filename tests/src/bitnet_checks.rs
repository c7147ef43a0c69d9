//! The BitNet acceptance checks, for any engine: teacher-forced logits against llama.cpp
//! (F32 models) and the independent float64 reference (ternary models), by the rules of the
//! fixture README §3 and §4, plus decode against prefill.
//!
//! Each case runs the prompt followed by llama.cpp's greedy ids (teacher forcing), so row
//! `n_prompt − 1 + i` lines up with step `i` of the goldens.

use purebee_isa::Engine;
use purebee_memory::gguf::GgufFile;
use purebee_runtime::{KvCacheTypes, LogitsRows, Model, Session};

use crate::{golden, read_npy, tiny, Npy};

/// The cases of every tiny model.
pub const CASES: [&str; 3] = ["p16", "ids16", "long"];

struct Case {
    prompt: Vec<u32>,
    llamacpp_ids: Vec<u32>,
    llamacpp_margins: Vec<f64>,
}

fn case(model: &str, case: &str) -> Case {
    let text = std::fs::read_to_string(tiny(&format!("{model}.{case}.json"))).expect("case json");
    let j: serde_json::Value = serde_json::from_str(&text).expect("valid json");
    let ids = |k: &str| j[k].as_array().expect(k).iter().map(|v| v.as_u64().expect("id") as u32).collect::<Vec<_>>();
    Case {
        prompt: ids("prompt_token_ids"),
        llamacpp_ids: ids("llamacpp_greedy_ids"),
        llamacpp_margins: j["llamacpp_step_margins"]
            .as_array()
            .expect("margins")
            .iter()
            .map(|v| v.as_f64().expect("f64"))
            .collect(),
    }
}

/// The prompt plus llama.cpp's generated ids but the last.
fn sequence(c: &Case) -> Vec<u32> {
    c.prompt.iter().chain(&c.llamacpp_ids[..c.llamacpp_ids.len() - 1]).copied().collect()
}

/// A tiny model on an engine with one session of 256 positions.
pub struct Loaded<E: Engine> {
    model: Model<E>,
    session: Session,
}

fn load<E: Engine>(model: &str, engine: E) -> Loaded<E> {
    let file = GgufFile::open(tiny(&format!("{model}.gguf"))).expect("fixture opens");
    let mut model = Model::load(engine, &file).expect("model loads");
    // F32 caches: the bounds and goldens here are F32 references'.
    model.set_kv_cache_types(KvCacheTypes::F32);
    let session = model.new_session(256).expect("session allocates");
    Loaded { model, session }
}

/// Logits of the teacher-forced sequence, in prefill mode: `[n, vocab]`.
pub fn prefill<E: Engine>(m: &mut Loaded<E>, seq: &[u32]) -> Npy {
    let data = m.model.forward(&mut m.session, seq, 0, LogitsRows::All).expect("prefill runs");
    Npy { rows: seq.len(), cols: m.model.config().n_vocab, data }
}

/// The same, feeding one token at a time through the KV cache.
pub fn decode<E: Engine>(m: &mut Loaded<E>, seq: &[u32]) -> Npy {
    let mut data = Vec::new();
    for (p, &t) in seq.iter().enumerate() {
        data.extend(m.model.forward(&mut m.session, &[t], p, LogitsRows::Last).expect("decode step runs"));
    }
    Npy { rows: seq.len(), cols: m.model.config().n_vocab, data }
}

/// The golden rows lined up with our sequence rows: prompt rows, then steps 1.. (step 0 is
/// the last prompt row again).
fn golden_rows(model: &str, case_name: &str, source: &str, n_prompt: usize) -> Npy {
    let prompt = read_npy(&golden(model, case_name, source, "prompt"));
    let steps = read_npy(&golden(model, case_name, source, "step"));
    assert_eq!(prompt.rows, n_prompt);
    let mut data = prompt.data.clone();
    for s in 1..steps.rows {
        data.extend_from_slice(steps.row(s));
    }
    Npy { rows: n_prompt + steps.rows - 1, cols: prompt.cols, data }
}

fn row_max_abs(a: &[f32], b: &[f32]) -> f64 {
    a.iter().zip(b).map(|(&x, &y)| (x as f64 - y as f64).abs()).fold(0.0, f64::max)
}

fn argmax(row: &[f32]) -> usize {
    row.iter().enumerate().fold(0, |best, (i, &v)| if v > row[best] { i } else { best })
}

fn margin(row: &[f32]) -> f64 {
    let mut s: Vec<f32> = row.to_vec();
    s.sort_by(|a, b| b.total_cmp(a));
    (s[0] - s[1]) as f64
}

/// F32 models: every prompt and step logit within 1e-4 of llama.cpp's, llama.cpp's greedy
/// ids, and decode within 1e-4 of prefill.
pub fn check_f32_model<E: Engine>(model_name: &str, engine: E) {
    let mut model = load(model_name, engine);
    for case_name in CASES {
        let c = case(model_name, case_name);
        let seq = sequence(&c);
        let ours = prefill(&mut model, &seq);
        let want = golden_rows(model_name, case_name, "llamacpp", c.prompt.len());
        for r in 0..ours.rows {
            let d = row_max_abs(ours.row(r), want.row(r));
            assert!(d <= 1e-4, "{model_name} {case_name}: row {r}: max abs diff {d} > 1e-4");
        }
        // The greedy path: llama.cpp's ids are our argmaxes (its margins are large enough on
        // float models, fixture README §2: free-running paths are equal).
        let n = c.prompt.len();
        for (i, &id) in c.llamacpp_ids.iter().enumerate() {
            assert_eq!(argmax(ours.row(n - 1 + i)) as u32, id, "{model_name} {case_name}: greedy step {i}");
        }
        let dec = decode(&mut model, &seq);
        for r in 0..ours.rows {
            let d = row_max_abs(ours.row(r), dec.row(r));
            assert!(d <= 1e-4, "{model_name} {case_name}: decode vs prefill row {r}: {d}");
        }
    }
}

/// Ternary models, by the rules of fixture README §3; `decode_identical` demands decode
/// equal prefill bit for bit (the reference engine), otherwise the ternary rules apply.
pub fn check_ternary_model<E: Engine>(model_name: &str, engine: E, decode_identical: bool) {
    let mut model = load(model_name, engine);
    for case_name in CASES {
        let c = case(model_name, case_name);
        let seq = sequence(&c);
        let ours = prefill(&mut model, &seq);
        let reference = golden_rows(model_name, case_name, "ref", c.prompt.len());
        let diffs: Vec<f64> = (0..ours.rows).map(|r| row_max_abs(ours.row(r), reference.row(r))).collect();
        let mean = ours.data.iter().zip(&reference.data).map(|(&x, &y)| (x as f64 - y as f64).abs()).sum::<f64>()
            / ours.data.len() as f64;
        let max = diffs.iter().cloned().fold(0.0, f64::max);
        let first_over = diffs.iter().position(|&d| d > 1e-3);
        eprintln!(
            "{model_name} {case_name}: row0 {:.2e}, first row > 1e-3: {first_over:?}, mean {mean:.4}, max {max:.4}",
            diffs[0]
        );
        assert!(diffs[0] <= 1e-3, "{model_name} {case_name}: position 0 differs by {} > 1e-3", diffs[0]);
        assert!(mean <= 0.05, "{model_name} {case_name}: mean abs {mean} > 0.05");
        assert!(max <= 1.0, "{model_name} {case_name}: max abs {max} > 1.0");
        for r in 0..ours.rows {
            if margin(reference.row(r)) > 0.25 {
                assert_eq!(
                    argmax(ours.row(r)),
                    argmax(reference.row(r)),
                    "{model_name} {case_name}: row {r}: argmax differs where the reference's margin > 0.25"
                );
            }
        }
        // Against llama.cpp's own ternary results: its greedy id wherever its margin > 1.
        let n = c.prompt.len();
        for (i, (&id, &m)) in c.llamacpp_ids.iter().zip(&c.llamacpp_margins).enumerate() {
            if m > 1.0 {
                assert_eq!(
                    argmax(ours.row(n - 1 + i)) as u32,
                    id,
                    "{model_name} {case_name}: step {i}: llama.cpp margin {m}"
                );
            }
        }
        let dec = decode(&mut model, &seq);
        if decode_identical {
            // Decode feeds the same rows through the same arithmetic.
            for r in 0..ours.rows {
                assert_eq!(ours.row(r), dec.row(r), "{model_name} {case_name}: decode differs from prefill at row {r}");
            }
        } else {
            assert_ternary_rules(&dec, &ours, &format!("{model_name} {case_name}: decode vs prefill"));
        }
    }
}

/// The fixture README's ternary rules between two logits arrays of one case: row 0 within
/// 1e-3, mean abs ≤ 0.05, max abs ≤ 1.0, equal argmax wherever `want`'s margin > 0.25.
pub fn assert_ternary_rules(got: &Npy, want: &Npy, what: &str) {
    let diffs: Vec<f64> = (0..got.rows).map(|r| row_max_abs(got.row(r), want.row(r))).collect();
    let mean = got.data.iter().zip(&want.data).map(|(&x, &y)| (x as f64 - y as f64).abs()).sum::<f64>()
        / got.data.len() as f64;
    let max = diffs.iter().cloned().fold(0.0, f64::max);
    eprintln!(
        "{what}: row0 {:.2e}, first row > 1e-3: {:?}, mean {mean:.4}, max {max:.4}",
        diffs[0],
        diffs.iter().position(|&d| d > 1e-3)
    );
    assert!(diffs[0] <= 1e-3, "{what}: position 0 differs by {} > 1e-3", diffs[0]);
    assert!(mean <= 0.05, "{what}: mean abs {mean} > 0.05");
    assert!(max <= 1.0, "{what}: max abs {max} > 1.0");
    for r in 0..got.rows {
        if margin(want.row(r)) > 0.25 {
            assert_eq!(
                argmax(got.row(r)),
                argmax(want.row(r)),
                "{what}: row {r}: argmax differs where the margin > 0.25"
            );
        }
    }
}

/// Teacher-forced prefill logits of every case of a model on `engine`.
pub fn case_logits<E: Engine>(model_name: &str, engine: E) -> Vec<Npy> {
    let mut model = load(model_name, engine);
    CASES.iter().map(|c| prefill(&mut model, &sequence(&case(model_name, c)))).collect()
}
