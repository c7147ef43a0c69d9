//! Reading rows of logits back: each row's greedy token (ARGMAX), its TOP_K candidates
//! (with the log-sum-exp when asked), or the whole row. One reader for a batched pass's
//! selected rows and for a session's verify pass, whatever the number of rows.

use std::collections::HashMap;
use std::hash::Hash;

use purebee_isa::{Engine, TensorId};

use crate::batch::{RowOutput, RowRead};
use crate::model::{top_k_values, Candidates};
use crate::{LogitsRows, Model, ModelError, Session};

impl<E: Engine> Model<E> {
    /// Reads what `reads[r]` asks of row `r` of `logits` (`[reads.len(), vocab]`) and of
    /// the matching `argmax` entries: one ARGMAX read for every greedy row, one TOP_K over
    /// all rows with the largest `k` asked (a smaller `k`'s result is a prefix of a larger
    /// one's, in TOP_K's rank order), one read of the whole logits when a row wants it.
    /// `key(k, with_lse)` names the TOP_K program in `candidates`, `prefix` its tensors.
    pub(crate) fn read_row_outputs<K: Hash + Eq>(
        &mut self,
        candidates: &mut HashMap<K, Candidates>,
        key: impl Fn(usize, bool) -> K,
        prefix: &str,
        (argmax, logits): (TensorId, TensorId),
        reads: &[RowRead],
    ) -> Result<Vec<RowOutput>, ModelError> {
        let rows = reads.len();
        let tokens = if reads.contains(&RowRead::Greedy) { self.engine.read_u32(argmax)? } else { Vec::new() };
        let vocab = self.config.n_vocab;
        let k = reads
            .iter()
            .filter_map(|r| match r {
                RowRead::TopK(k) | RowRead::TopKLse(k) => Some((*k).min(vocab)),
                _ => None,
            })
            .max();
        let with_lse = reads.iter().any(|r| matches!(r, RowRead::TopKLse(_)));
        let (top, lse) = match k {
            Some(k) => {
                let prefix = format!("{prefix}.top{k}{}", if with_lse { ".lse" } else { "" });
                let pending = self.begin_top_k(candidates, key(k, with_lse), &prefix, logits, (rows, k), with_lse)?;
                let bytes = pending.into_iter().map(|p| self.engine.finish_read(p)).collect::<Result<Vec<_>, _>>()?;
                let (values, ids, lse) = top_k_values(&bytes);
                (Some((values, ids)), lse)
            }
            None => (None, Vec::new()),
        };
        let full = if reads.contains(&RowRead::Full) { self.engine.read_f32(logits)? } else { Vec::new() };
        let outputs = reads.iter().enumerate().map(|(row, &read)| match read {
            RowRead::Greedy => RowOutput::Greedy(tokens.get(row).copied().unwrap_or(0)),
            RowRead::TopK(want) | RowRead::TopKLse(want) => {
                let (values, ids) = top.as_ref().map_or((&[][..], &[][..]), |(v, i)| (&v[..], &i[..]));
                let k = k.unwrap_or(0);
                let take = want.min(k);
                RowOutput::TopK {
                    values: values.get(row * k..row * k + take).unwrap_or(&[]).to_vec(),
                    ids: ids.get(row * k..row * k + take).unwrap_or(&[]).to_vec(),
                    lse: matches!(read, RowRead::TopKLse(_)).then(|| lse.get(row).copied().unwrap_or(f32::NAN)),
                }
            }
            RowRead::Full => RowOutput::Full(full.get(row * vocab..(row + 1) * vocab).unwrap_or(&[]).to_vec()),
        });
        Ok(outputs.collect())
    }

    /// Runs `tokens` at positions `pos..` of `session` and reads `read` of every row's
    /// logits: row `r` is the prediction for position `pos + r + 1`, so a verify pass of a
    /// drafted continuation checks every drafted token in one pass. A session has no engine
    /// log-sum-exp: [`RowRead::TopKLse`] reads whole rows. The last size run stays
    /// allocated (passes of one size often follow each other); running another size frees
    /// it, so a session holds one pass's logits at most. Errors as [`Model::forward`].
    pub fn forward_rows(
        &mut self,
        session: &mut Session,
        tokens: &[u32],
        pos: usize,
        read: RowRead,
    ) -> Result<Vec<RowOutput>, ModelError> {
        let read = if let RowRead::TopKLse(_) = read { RowRead::Full } else { read };
        let key = (tokens.len(), LogitsRows::All);
        if let Some(other) = session.live_verify.filter(|&other| other != key) {
            self.release_prefill(session, other)?;
        }
        session.live_verify = Some(key);
        let (key, io) = self.run(session, crate::model::Input::Host(tokens), pos, LogitsRows::All)?;
        let prefix = format!("{}.fwd{}.all", session.name, tokens.len());
        let reads = vec![read; tokens.len()];
        self.read_row_outputs(&mut session.candidates, |k, _| (key, k), &prefix, io.into(), &reads)
    }
}
