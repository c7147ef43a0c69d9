//! A forward pass whose outputs are still on their way from the engine: the seam for a
//! caller that must not block. In a browser tab a GPU read arrives only when the page's
//! event loop runs, so the caller runs the pass and begins its reads
//! ([`Model::submit_forward`]), yields to its event loop until they have arrived
//! ([`Model::reads_ready`]), then takes them ([`Model::receive_forward`]). Native callers do
//! the three at once.

use purebee_isa::{Engine, PendingRead};

use crate::forward::LogitsRows;
use crate::model::top_k_values;
use crate::{Model, ModelError, PendingToken, Session};

/// What a forward pass reads back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Want {
    /// The greedy token after the last position (4 bytes).
    Argmax,
    /// The `k` largest logits of the last position, with their ids.
    TopK(usize),
    /// The logits of the last position or of every one.
    Logits(LogitsRows),
}

/// What [`Model::receive_forward`] hands back, by [`Want`].
#[derive(Debug)]
pub(crate) enum Received {
    Argmax(u32),
    TopK { values: Vec<f32>, ids: Vec<u32> },
    Logits(Vec<f32>),
}

/// A forward pass run on the engine, its reads begun and not waited for.
#[derive(Debug)]
pub(crate) struct ForwardInFlight {
    key: (usize, LogitsRows),
    want: Want,
    pub(crate) reads: Vec<PendingRead>,
}

impl<E: Engine> Model<E> {
    /// Runs `tokens` at positions `pos..` of `session` and begins reading what `want` asks
    /// for, without waiting for it.
    pub(crate) fn submit_forward(
        &mut self,
        session: &mut Session,
        tokens: &[u32],
        pos: usize,
        want: Want,
    ) -> Result<ForwardInFlight, ModelError> {
        let rows = match want {
            Want::Logits(rows) => rows,
            Want::Argmax | Want::TopK(_) => LogitsRows::Last,
        };
        let (key, io) = self.run(session, crate::model::Input::Host(tokens), pos, rows)?;
        let reads = match want {
            Want::Argmax => vec![self.engine.read_later(io.argmax)?],
            Want::Logits(_) => vec![self.engine.read_later(io.logits)?],
            Want::TopK(k) => {
                let prefix = format!("{}.fwd{}.last.top{k}", session.name, key.0);
                self.begin_top_k(&mut session.candidates, (key, k), &prefix, io.logits, (1, k), false)?
            }
        };
        Ok(ForwardInFlight { key, want, reads })
    }

    /// Whether every read of `reads` has arrived (never waits).
    pub(crate) fn reads_ready(&mut self, reads: &[PendingRead]) -> bool {
        reads.iter().all(|r| self.engine.read_ready(r))
    }

    /// Whether the token of a step begun with [`Model::submit_greedy`] has arrived (never
    /// waits).
    pub(crate) fn token_ready(&mut self, pending: &PendingToken) -> bool {
        self.engine.read_ready(&pending.read)
    }

    /// The outputs of a pass begun with [`Model::submit_forward`] (waits for them where the
    /// engine can), after which a multi-token pass's tensors are freed.
    pub(crate) fn receive_forward(
        &mut self,
        session: &mut Session,
        flight: ForwardInFlight,
    ) -> Result<Received, ModelError> {
        let mut bytes = Vec::with_capacity(flight.reads.len());
        for read in flight.reads {
            bytes.push(self.engine.finish_read(read)?);
        }
        let word = |c: &[u8]| [c[0], c[1], c[2], c[3]];
        let received = match flight.want {
            Want::Argmax => {
                Received::Argmax(bytes.first().and_then(|b| b.get(..4)).map_or(0, |b| u32::from_le_bytes(word(b))))
            }
            Want::Logits(_) => Received::Logits(
                bytes
                    .first()
                    .map_or_else(Vec::new, |b| b.chunks_exact(4).map(|c| f32::from_le_bytes(word(c))).collect()),
            ),
            Want::TopK(_) => {
                let (values, ids, _) = top_k_values(&bytes);
                Received::TopK { values, ids }
            }
        };
        self.release_prefill(session, flight.key)?;
        Ok(received)
    }
}
