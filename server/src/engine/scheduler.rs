//! The engine thread's loop, as llama-server's: take new jobs into a FIFO queue, drop queued
//! jobs whose client left, give free slots to queued jobs (the free slot whose cache shares
//! the longest prefix with the prompt, else the least recently used), then one step for
//! each busy slot in turn. It sleeps only when no slot is busy.

use std::collections::VecDeque;
use std::sync::mpsc::{Receiver, TryRecvError};

use purebee_isa::Engine;
use purebee_runtime::tokenizer::Tokenizer;
use purebee_runtime::{Model, Session};

use super::slot::{Context, Slot};
use super::{Command, Event, FinishReason, Job};
use crate::api_error::ApiError;
use crate::metrics::{Metrics, Phase};

/// The engine thread's state.
pub struct Scheduler<'t, E: Engine> {
    model: Model<E>,
    tokenizer: &'t Tokenizer,
    slots: Vec<Slot<'t>>,
    queue: VecDeque<Box<Job>>,
    commands: Receiver<Command>,
    metrics: &'t Metrics,
    prefill_chunk: usize,
    /// Counts admissions, for least-recently-used choice.
    clock: u64,
}

impl<'t, E: Engine> Scheduler<'t, E> {
    /// A scheduler of `model` with one slot per session.
    pub fn new(
        model: Model<E>,
        sessions: Vec<Session>,
        tokenizer: &'t Tokenizer,
        commands: Receiver<Command>,
        metrics: &'t Metrics,
        prefill_chunk: usize,
    ) -> Scheduler<'t, E> {
        metrics.set_slots(sessions.len());
        let slots = sessions.into_iter().map(Slot::new).collect();
        Scheduler { model, tokenizer, slots, queue: VecDeque::new(), commands, metrics, prefill_chunk, clock: 0 }
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
            let mut cx = Context { model: &mut self.model, tokenizer: self.tokenizer, metrics: self.metrics };
            for slot in &mut self.slots {
                slot.step(&mut cx);
            }
        }
        self.end_all();
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
                    let prefix = self.queue.front().map_or(0, |job| s.session.common_prefix(&job.prompt));
                    (prefix, std::cmp::Reverse(s.last_used))
                })
                .map(|(i, _)| i);
            let Some(i) = best else { break };
            let Some(job) = self.queue.pop_front() else { break };
            self.clock += 1;
            let slot = &mut self.slots[i];
            slot.last_used = self.clock;
            slot.start(job, self.tokenizer, self.metrics, self.prefill_chunk);
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
