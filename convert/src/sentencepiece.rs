//! A SentencePiece `tokenizer.model` (its `ModelProto`, protocol buffers) as GGUF's `llama`
//! tokenizer: the pieces in id order with their scores and types, the unknown, BOS and EOS
//! ids of its trainer spec, and whether its normalizer adds a dummy prefix (`▁`), as
//! llama.cpp's converter (`_set_vocab_sentencepiece`) carries them.
//!
//! Only what the conversion needs is decoded; every other field is skipped by its wire type.
//! Only BPE models are accepted: GGUF's `llama` tokenizer merges by score as SentencePiece's
//! BPE does, and would split a Unigram model's text differently.
//!
//! GGUF's `llama` tokenizer normalizes nothing but spaces, so a model whose normalizer does
//! more (a rule other than `identity`, such as the default NFKC, or collapsing runs of
//! spaces, `remove_extra_whitespaces`, which defaults to on) is refused by that setting's name;
//! Llama 2's model sets `identity` and turns the collapsing off.
//!
//! The fields read (sentencepiece_model.proto): `ModelProto.pieces = 1` (`piece = 1`,
//! `score = 2`, `type = 3`), `trainer_spec = 2` (`model_type = 3`, `unk_id = 40`,
//! `bos_id = 41`, `eos_id = 42`), `normalizer_spec = 3` (`name = 1`, `add_dummy_prefix = 3`,
//! `remove_extra_whitespaces = 4`).

use std::path::Path;

use crate::tokenizer::{Kind, Vocabulary, BYTE, CONTROL, NORMAL, UNKNOWN, USER_DEFINED};
use crate::ConvertError;

/// SentencePiece's piece types, in GGUF's numbering (the same numbers: NORMAL 1, UNKNOWN 2,
/// CONTROL 3, USER_DEFINED 4, UNUSED 5, BYTE 6).
const UNUSED: i32 = 5;

/// `TrainerSpec.model_type` of a BPE model.
const MODEL_BPE: u64 = 2;

/// Reads `path`; `n_vocab` is the embedding's row count (pieces past it are an error, rows
/// past the pieces become unused padding tokens).
pub(crate) fn read(path: &Path, n_vocab: usize) -> Result<Vocabulary, ConvertError> {
    let bytes = std::fs::read(path).map_err(|source| ConvertError::Io { path: path.to_path_buf(), source })?;
    let bad = |reason: String| ConvertError::Tokenizer { path: path.to_path_buf(), reason };
    let mut tokens = Vec::new();
    let mut scores = Vec::new();
    let mut types = Vec::new();
    let (mut model_type, mut unk, mut bos, mut eos, mut dummy_prefix) = (1u64, 0i64, 1i64, 2i64, true);
    let (mut rule, mut collapses_spaces) = (String::new(), true);
    for field in Fields::new(&bytes) {
        let field = field.map_err(|e| bad(format!("not a SentencePiece model: {e}")))?;
        match (field.number, field.value) {
            (1, Value::Bytes(piece)) => {
                let (text, score, ty) = piece_of(piece).map_err(|e| bad(format!("piece {}: {e}", tokens.len())))?;
                tokens.push(text);
                scores.push(score);
                types.push(ty);
            }
            (2, Value::Bytes(trainer)) => {
                for f in Fields::new(trainer) {
                    match f.map_err(|e| bad(format!("trainer_spec: {e}")))? {
                        Field { number: 3, value: Value::Varint(v) } => model_type = v,
                        Field { number: 40, value: Value::Varint(v) } => unk = v as i32 as i64,
                        Field { number: 41, value: Value::Varint(v) } => bos = v as i32 as i64,
                        Field { number: 42, value: Value::Varint(v) } => eos = v as i32 as i64,
                        _ => {}
                    }
                }
            }
            (3, Value::Bytes(normalizer)) => {
                for f in Fields::new(normalizer) {
                    match f.map_err(|e| bad(format!("normalizer_spec: {e}")))? {
                        Field { number: 1, value: Value::Bytes(b) } => rule = String::from_utf8_lossy(b).into_owned(),
                        Field { number: 3, value: Value::Varint(v) } => dummy_prefix = v != 0,
                        Field { number: 4, value: Value::Varint(v) } => collapses_spaces = v != 0,
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    if model_type != MODEL_BPE {
        let name = match model_type {
            1 => "Unigram".to_string(),
            3 => "word".to_string(),
            4 => "char".to_string(),
            n => format!("type {n}"),
        };
        return Err(bad(format!("a {name} model: only BPE SentencePiece models are supported")));
    }
    if rule != "identity" {
        return Err(bad(format!("normalizer_spec.name '{rule}': only the 'identity' normalization is carried")));
    }
    if collapses_spaces {
        return Err(bad("normalizer_spec.remove_extra_whitespaces is on: GGUF's tokenizer keeps every space".into()));
    }
    if tokens.is_empty() || tokens.len() > n_vocab {
        return Err(bad(format!("{} pieces for an embedding of {n_vocab} rows", tokens.len())));
    }
    let pieces = tokens.len();
    let id = |v: i64| u32::try_from(v).ok().filter(|&i| (i as usize) < pieces);
    for i in pieces..n_vocab {
        tokens.push(format!("[PAD{i}]"));
        scores.push(-1e9);
        types.push(USER_DEFINED);
    }
    let unknown = id(unk);
    Ok(Vocabulary {
        kind: Kind::SentencePiece { scores, add_space_prefix: dummy_prefix, unknown },
        types,
        merges: Vec::new(),
        add_bos: true,
        bos: id(bos),
        eos: id(eos),
        source: path.to_path_buf(),
        tokens,
    })
}

/// One `SentencePiece` message: its text, score and GGUF type.
fn piece_of(bytes: &[u8]) -> Result<(String, f32, i32), String> {
    let (mut text, mut score, mut ty) = (None, 0f32, NORMAL);
    for f in Fields::new(bytes) {
        match f? {
            Field { number: 1, value: Value::Bytes(b) } => {
                text = Some(String::from_utf8(b.to_vec()).map_err(|_| "its text is not UTF-8".to_string())?)
            }
            Field { number: 2, value: Value::Fixed32(bits) } => score = f32::from_bits(bits),
            Field { number: 3, value: Value::Varint(t) } => {
                ty = match t {
                    1 => NORMAL,
                    2 => UNKNOWN,
                    3 => CONTROL,
                    4 => USER_DEFINED,
                    5 => UNUSED,
                    6 => BYTE,
                    other => return Err(format!("type {other} is not a SentencePiece type")),
                }
            }
            _ => {}
        }
    }
    Ok((text.ok_or("no text")?, score, ty))
}

/// A protocol-buffers field's value, by wire type.
enum Value<'a> {
    Varint(u64),
    Fixed64,
    Bytes(&'a [u8]),
    Fixed32(u32),
}

struct Field<'a> {
    number: u64,
    value: Value<'a>,
}

/// The fields of one message, in order.
struct Fields<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Fields<'a> {
    fn new(bytes: &'a [u8]) -> Fields<'a> {
        Fields { bytes, at: 0 }
    }

    fn varint(&mut self) -> Result<u64, String> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = *self.bytes.get(self.at).ok_or("a varint runs past the end")?;
            self.at += 1;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err("a varint longer than 10 bytes".to_string())
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len()).ok_or("a field runs past the end")?;
        let b = &self.bytes[self.at..end];
        self.at = end;
        Ok(b)
    }
}

impl<'a> Iterator for Fields<'a> {
    type Item = Result<Field<'a>, String>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.at >= self.bytes.len() {
            return None;
        }
        let field = (|| {
            let key = self.varint()?;
            let value = match key & 7 {
                0 => Value::Varint(self.varint()?),
                1 => {
                    self.take(8)?;
                    Value::Fixed64
                }
                2 => {
                    let n = usize::try_from(self.varint()?).map_err(|_| "a length past memory")?;
                    Value::Bytes(self.take(n)?)
                }
                5 => {
                    let b = self.take(4)?;
                    Value::Fixed32(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                }
                w => return Err(format!("wire type {w} is not supported")),
            };
            Ok(Field { number: key >> 3, value })
        })();
        if field.is_err() {
            self.at = self.bytes.len();
        }
        Some(field)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn varint(mut v: u64, out: &mut Vec<u8>) {
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.push(b);
                return;
            }
            out.push(b | 0x80);
        }
    }

    fn bytes_field(number: u64, body: &[u8], out: &mut Vec<u8>) {
        varint(number << 3 | 2, out);
        varint(body.len() as u64, out);
        out.extend_from_slice(body);
    }

    fn piece(text: &str, score: f32, ty: u64) -> Vec<u8> {
        let mut p = Vec::new();
        bytes_field(1, text.as_bytes(), &mut p);
        varint(2 << 3 | 5, &mut p);
        p.extend(score.to_le_bytes());
        varint(3 << 3, &mut p);
        varint(ty, &mut p);
        p
    }

    fn model(model_type: u64, dummy_prefix: bool) -> Vec<u8> {
        let mut m = Vec::new();
        for (t, s, ty) in [("<unk>", 0.0, 2), ("<s>", 0.0, 3), ("</s>", 0.0, 3), ("<0x41>", 0.0, 6), ("▁a", -1.5, 1)]
        {
            bytes_field(1, &piece(t, s, ty), &mut m);
        }
        let mut trainer = Vec::new();
        varint(3 << 3, &mut trainer);
        varint(model_type, &mut trainer);
        varint(41 << 3, &mut trainer);
        varint(1, &mut trainer);
        bytes_field(2, &trainer, &mut m);
        let mut normalizer = Vec::new();
        bytes_field(1, b"identity", &mut normalizer);
        varint(3 << 3, &mut normalizer);
        varint(u64::from(dummy_prefix), &mut normalizer);
        varint(4 << 3, &mut normalizer);
        varint(0, &mut normalizer);
        bytes_field(3, &normalizer, &mut m);
        m
    }

    #[test]
    fn a_bpe_model_reads_with_its_pieces_scores_and_ids() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("tokenizer.model");
        std::fs::write(&path, model(MODEL_BPE, false)).expect("write");
        let v = read(&path, 7).expect("reads");
        assert_eq!(v.tokens[..5], ["<unk>", "<s>", "</s>", "<0x41>", "▁a"]);
        assert_eq!(v.tokens[5], "[PAD5]");
        assert_eq!(v.types, [UNKNOWN, CONTROL, CONTROL, BYTE, NORMAL, USER_DEFINED, USER_DEFINED]);
        assert_eq!((v.bos, v.eos), (Some(1), Some(2)));
        let Kind::SentencePiece { scores, add_space_prefix, unknown } = v.kind else { panic!("sentencepiece") };
        assert_eq!((scores[4], add_space_prefix, unknown), (-1.5, false, Some(0)));
    }

    #[test]
    fn unigram_truncated_and_oversized_models_are_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("tokenizer.model");
        std::fs::write(&path, model(1, true)).expect("write");
        let e = read(&path, 7).err().expect("refused").to_string();
        assert!(e.contains("Unigram") && e.contains("tokenizer.model"), "{e}");
        let m = model(MODEL_BPE, true);
        std::fs::write(&path, &m[..m.len() - 3]).expect("write");
        assert!(read(&path, 7).err().expect("refused").to_string().contains("past the end"));
        std::fs::write(&path, &m).expect("write");
        assert!(read(&path, 3).err().expect("refused").to_string().contains("5 pieces for an embedding of 3 rows"));
        // A normalizer the GGUF tokenizer does not apply: NFKC, or collapsed spaces (the
        // default when the field is absent).
        let mut nfkc = m.clone();
        let at = nfkc.windows(8).position(|w| w == b"identity").expect("the rule's name");
        nfkc[at..at + 8].copy_from_slice(b"nmt_nfkc");
        std::fs::write(&path, nfkc).expect("write");
        assert!(read(&path, 7).err().expect("refused").to_string().contains("normalizer_spec.name 'nmt_nfkc'"));
        let mut collapsing = m.clone();
        let at = collapsing.len() - 1;
        collapsing[at] = 1;
        std::fs::write(&path, collapsing).expect("write");
        assert!(read(&path, 7).err().expect("refused").to_string().contains("remove_extra_whitespaces"));
    }
}
