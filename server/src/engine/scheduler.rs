//! The engine thread's loop, as llama-server's: take new jobs into a FIFO queue, drop queued
//! jobs whose client left, give free slots to queued jobs (the free slot whose cache shares
//! the longest prefix with the prompt, else the least recently used), then one batched pass
//! for every busy slot at once: each decoding slot's next token and, in the rows left of
//! the pass's budget, the next prompt chunks of the slots still prefilling. One pass reads
//! the weights once for all of them. It sleeps only when no slot is busy.
//!
//! The slots share one KV cache of `-c` positions in pages: a request may use all of it. A
//! slot that needs a page when none is free takes the cache of the least recently used idle
//! slot; if every page is held by busy slots, a decoding slot ends with `length` (its
//! context is full) and a prefilling one waits for a later pass.

use std::collections::VecDeque;
use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::Instant;

use purebee_isa::Engine;
use purebee_runtime::batch::{BatchRows, SharedCache};
use purebee_runtime::speculative::SpecConfig;
use purebee_runtime::tokenizer::Tokenizer;
use purebee_runtime::Model;

use super::slot::{Context, Slot};
use super::{Command, Event, FinishReason, Job};
use crate::api_error::ApiError;
use crate::metrics::{Metrics, Phase};

/// The engine thread's state.
pub struct Scheduler<'t, E: Engine> {
    model: Model<E>,
    cache: SharedCache,
    tokenizer: &'t Tokenizer,
    slots: Vec<Slot<'t>>,
    queue: VecDeque<Box<Job>>,
    commands: Receiver<Command>,
    metrics: &'t Metrics,
    /// The most rows one pass runs (`-ub`, at most `-b`).
    pass_rows: usize,
    /// Counts admissions, for least-recently-used choice.
    clock: u64,
    /// Speculative decoding for every request, when on.
    speculation: Option<SpecConfig>,
}

impl<'t, E: Engine> Scheduler<'t, E> {
    /// A scheduler of `model` with one slot per sequence of `cache`, passes of at most
    /// `pass_rows` rows.
    pub fn new(
        model: Model<E>,
        cache: SharedCache,
        tokenizer: &'t Tokenizer,
        commands: Receiver<Command>,
        metrics: &'t Metrics,
        pass_rows: usize,
    ) -> Scheduler<'t, E> {
        metrics.set_slots(cache.max_sequences());
        let slots = (0..cache.max_sequences()).map(Slot::new).collect();
        let pass_rows = pass_rows.max(1);
        let queue = VecDeque::new();
        Scheduler { model, cache, tokenizer, slots, queue, commands, metrics, pass_rows, clock: 0, speculation: None }
    }

    /// Speculates for every request with `speculation` (none: plain decoding).
    pub fn speculate(mut self, speculation: Option<SpecConfig>) -> Scheduler<'t, E> {
        self.speculation = speculation;
        self
    }

    /// Runs until a shutdown command, or until every submitter is gone; then ends every
    /// job (open streams get their final chunks) and returns.
    pub fn run(mut self) {
        loop {
            let idle = self.queue.is_empty() && !self.slots.iter().any(Slot::is_busy);
            if idle {
                match self.commands.recv() {
                    Ok(command) => {
                        if !self.take(command) {
                            break;
                        }
                    }
                    Err(_) => break,
                }
            }
            if !self.take_pending() {
                break;
            }
            self.drop_cancelled();
            self.admit();
            self.pass();
        }
        self.end_all();
    }

    /// One batched pass over every busy slot's next rows.
    fn pass(&mut self) {
        for slot in &mut self.slots {
            slot.drop_if_cancelled(self.metrics);
        }
        // A slot alone drafts for its next pass; with company it decodes plainly, so that
        // its drafts never lengthen the others' passes.
        let busy = self.slots.iter().filter(|s| s.is_busy()).count();
        let n_ctx = self.cache.n_ctx();
        for slot in &mut self.slots {
            slot.prepare_draft(n_ctx, busy == 1, self.metrics);
        }
        // Decoding slots first (one row each, or a verify pass's rows; never kept waiting),
        // then prompt chunks in the rows left.
        let mut order: Vec<usize> = (0..self.slots.len()).filter(|&i| self.slots[i].is_busy()).collect();
        order.sort_by_key(|&i| (self.slots[i].is_prefilling(), self.slots[i].last_used));
        let mut budget = self.pass_rows;
        let mut planned: Vec<(usize, usize, usize)> = Vec::new(); // (slot, pos, rows)
        let mut out_of_room = Vec::new();
        for &i in &order {
            let Some(rows) = self.slots[i].next_rows(&self.model, budget.max(1)) else { continue };
            let (pos, n, decoding) = (rows.pos, rows.ids.len(), !self.slots[i].is_prefilling());
            if !decoding && budget == 0 {
                continue;
            }
            let seq = self.slots[i].seq;
            if !self.make_room(seq, pos + n) {
                if decoding {
                    out_of_room.push(i);
                }
                continue;
            }
            budget = budget.saturating_sub(n);
            planned.push((i, pos, n));
        }
        for i in out_of_room {
            self.slots[i].finish(FinishReason::Length, self.metrics);
        }
        if planned.is_empty() {
            self.unblock();
            return;
        }
        let rows: Vec<BatchRows> = planned
            .iter()
            .filter_map(|&(i, _, n)| {
                // The same rows as planned: `n` is what the slot asked for with the budget then.
                let r = self.slots[i].next_rows(&self.model, n)?;
                Some(BatchRows { seq: self.slots[i].seq, ids: r.ids, pos: r.pos, read: r.read, read_rows: r.read_rows })
            })
            .collect();
        self.metrics.pass(rows.iter().map(|r| r.ids.len()).sum());
        let started = Instant::now();
        let result = self.model.forward_batch(&mut self.cache, &rows);
        let took = started.elapsed();
        drop(rows);
        let cx = Context { tokenizer: self.tokenizer, metrics: self.metrics };
        match result {
            Ok(outputs) => {
                let n_ctx = self.cache.n_ctx();
                for (&(i, _, n), output) in planned.iter().zip(outputs) {
                    self.slots[i].complete(n, output, took, &cx, n_ctx);
                }
            }
            Err(e) => {
                // The cause goes to the operator's log only: it can name the model's path
                // and the machine's devices, which are not the clients' to see.
                eprintln!("purebee-rs: error: a batched pass failed in the engine: {e}");
                for &(i, pos, _) in &planned {
                    self.cache.truncate(self.slots[i].seq, pos);
                    self.slots[i].fail(self.metrics);
                }
            }
        }
    }

    /// Pages for positions `0..len` of sequence `seq`, taking idle slots' caches (least
    /// recently used first) when none are free; false if busy slots hold every page.
    fn make_room(&mut self, seq: usize, len: usize) -> bool {
        loop {
            if self.cache.reserve(seq, len) {
                return true;
            }
            let idle = self
                .slots
                .iter()
                .filter(|s| !s.is_busy() && s.seq != seq && !self.cache.cached_ids(s.seq).is_empty())
                .min_by_key(|s| s.last_used)
                .map(|s| s.seq);
            match idle {
                Some(other) => self.cache.clear(other),
                None => return false,
            }
        }
    }

    /// No row could run although slots are busy: every page is held by slots still
    /// prefilling. The most recently started one gives its pages back and is refused, so
    /// that the others can finish.
    fn unblock(&mut self) {
        let stuck = self.slots.iter_mut().filter(|s| s.is_busy()).max_by_key(|s| s.last_used);
        if let Some(slot) = stuck {
            let n_ctx = self.cache.n_ctx();
            self.cache.clear(slot.seq);
            slot.refuse(
                ApiError::unavailable(format!(
                    "the KV cache ({n_ctx} positions, -c) is held by other requests; retry later"
                )),
                self.metrics,
            );
        }
    }

    /// Takes the commands that arrived; false on shutdown.
    fn take_pending(&mut self) -> bool {
        loop {
            match self.commands.try_recv() {
                Ok(command) => {
                    if !self.take(command) {
                        return false;
                    }
                }
                Err(TryRecvError::Empty) => return true,
                Err(TryRecvError::Disconnected) => return false,
            }
        }
    }

    /// Queues a job; false for a shutdown.
    fn take(&mut self, command: Command) -> bool {
        match command {
            Command::Run(job) => {
                self.queue.push_back(job);
                true
            }
            Command::Shutdown => false,
        }
    }

    /// Forgets queued jobs whose client went away.
    fn drop_cancelled(&mut self) {
        let metrics = self.metrics;
        self.queue.retain(|job| {
            let gone = job.events.is_closed();
            if gone {
                metrics.cancelled(Phase::Queue);
                metrics.release();
            }
            !gone
        });
    }

    /// Gives free slots to queued jobs, first come first served.
    fn admit(&mut self) {
        while !self.queue.is_empty() {
            let best = self
                .slots
                .iter()
                .enumerate()
                .filter(|(_, s)| !s.is_busy())
                .max_by_key(|(_, s)| {
                    let prefix = self.queue.front().map_or(0, |job| self.cache.common_prefix(s.seq, &job.prompt));
                    (prefix, std::cmp::Reverse(s.last_used))
                })
                .map(|(i, _)| i);
            let Some(i) = best else { break };
            let Some(job) = self.queue.pop_front() else { break };
            self.clock += 1;
            let slot = &mut self.slots[i];
            slot.last_used = self.clock;
            slot.start(job, &self.cache, self.tokenizer, self.metrics, self.pass_rows, self.speculation.as_ref());
        }
    }

    /// Shutdown: running generations end now (their answers are cut), queued and late jobs
    /// are answered 503.
    fn end_all(&mut self) {
        for slot in &mut self.slots {
            slot.finish(FinishReason::Shutdown, self.metrics);
        }
        while let Ok(command) = self.commands.try_recv() {
            self.take(command);
        }
        for job in self.queue.drain(..) {
            let _ = job.events.send(Event::Failed(ApiError::unavailable("the server is shutting down")));
            self.metrics.rejected();
            self.metrics.release();
        }
    }
}
