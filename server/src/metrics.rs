//! Counters the engine thread and the handlers update, and their Prometheus text
//! (`GET /metrics`).

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

/// How a generation that ran to its end finished.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// An end-of-generation token or a stop string.
    Stop,
    /// `max_tokens`, the end of the context, or the server shutting down.
    Length,
    /// The engine failed.
    Error,
}

/// Where a request was when its client went away.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Waiting for a slot.
    Queue,
    /// Its prompt was being prefilled.
    Prefill,
    /// Tokens were being generated.
    Decode,
}

/// The server's counters and gauges.
#[derive(Debug, Default)]
pub struct Metrics {
    finished: [AtomicU64; 3],
    cancelled: [AtomicU64; 3],
    rejected: AtomicU64,
    prompt_tokens: AtomicU64,
    cached_tokens: AtomicU64,
    generated_tokens: AtomicU64,
    prompt_micros: AtomicU64,
    generation_micros: AtomicU64,
    slots_total: AtomicUsize,
    slots_busy: AtomicUsize,
    /// Requests accepted and not finished: running or waiting.
    in_flight: AtomicUsize,
}

impl Metrics {
    /// Counts a generation that ran to its end.
    pub fn finished(&self, outcome: Outcome) {
        self.finished[outcome as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a request whose client went away.
    pub fn cancelled(&self, phase: Phase) {
        self.cancelled[phase as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a request refused with 503 (queue full, shutting down).
    pub fn rejected(&self) {
        self.rejected.fetch_add(1, Ordering::Relaxed);
    }

    /// Adds a prefill step: `tokens` prompt ids run in `time`.
    pub fn prefilled(&self, tokens: usize, time: Duration) {
        self.prompt_tokens.fetch_add(tokens as u64, Ordering::Relaxed);
        self.prompt_micros.fetch_add(time.as_micros() as u64, Ordering::Relaxed);
    }

    /// Adds prompt ids reused from a slot's cache.
    pub fn reused(&self, tokens: usize) {
        self.cached_tokens.fetch_add(tokens as u64, Ordering::Relaxed);
    }

    /// Adds a decode step that produced one token in `time`.
    pub fn generated(&self, time: Duration) {
        self.generated_tokens.fetch_add(1, Ordering::Relaxed);
        self.generation_micros.fetch_add(time.as_micros() as u64, Ordering::Relaxed);
    }

    /// Sets the number of slots.
    pub fn set_slots(&self, n: usize) {
        self.slots_total.store(n, Ordering::Relaxed);
    }

    /// A slot began a generation.
    pub fn slot_taken(&self) {
        self.slots_busy.fetch_add(1, Ordering::Relaxed);
    }

    /// A slot is free again.
    pub fn slot_freed(&self) {
        let _ = self.slots_busy.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
    }

    /// Admits a request if fewer than `capacity` are in flight; false when full.
    pub fn try_admit(&self, capacity: usize) -> bool {
        self.in_flight.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < capacity).then_some(n + 1)).is_ok()
    }

    /// A request admitted by [`Metrics::try_admit`] is over.
    pub fn release(&self) {
        // Never below zero, even if a release were doubled by a bug.
        let _ = self.in_flight.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
    }

    /// Slots generating now.
    pub fn busy(&self) -> usize {
        self.slots_busy.load(Ordering::Relaxed)
    }

    /// Slots in all.
    pub fn slots(&self) -> usize {
        self.slots_total.load(Ordering::Relaxed)
    }

    /// Requests waiting for a slot.
    pub fn queued(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed).saturating_sub(self.busy())
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let secs = |a: &AtomicU64| get(a) as f64 / 1e6;
        let rate = |n: &AtomicU64, t: &AtomicU64| if get(t) == 0 { 0.0 } else { get(n) as f64 / secs(t) };
        let mut out = String::new();
        let mut metric = |name: &str, kind: &str, help: &str, samples: &[(&str, f64)]| {
            let _ = writeln!(out, "# HELP purebee_{name} {help}\n# TYPE purebee_{name} {kind}");
            for (labels, value) in samples {
                let _ = writeln!(out, "purebee_{name}{labels} {value}");
            }
        };
        let f = |a: &AtomicU64| get(a) as f64;
        metric(
            "requests_total",
            "counter",
            "Generation requests that ran to their end, by how they ended.",
            &[
                ("{outcome=\"stop\"}", f(&self.finished[Outcome::Stop as usize])),
                ("{outcome=\"length\"}", f(&self.finished[Outcome::Length as usize])),
                ("{outcome=\"error\"}", f(&self.finished[Outcome::Error as usize])),
            ],
        );
        metric(
            "requests_cancelled_total",
            "counter",
            "Requests whose client disconnected, by where they were.",
            &[
                ("{phase=\"queue\"}", f(&self.cancelled[Phase::Queue as usize])),
                ("{phase=\"prefill\"}", f(&self.cancelled[Phase::Prefill as usize])),
                ("{phase=\"decode\"}", f(&self.cancelled[Phase::Decode as usize])),
            ],
        );
        metric(
            "requests_rejected_total",
            "counter",
            "Requests answered 503 (queue full or shutting down).",
            &[("", f(&self.rejected))],
        );
        metric("prompt_tokens_total", "counter", "Prompt tokens prefilled.", &[("", f(&self.prompt_tokens))]);
        metric(
            "prompt_tokens_cached_total",
            "counter",
            "Prompt tokens reused from a slot's KV cache.",
            &[("", f(&self.cached_tokens))],
        );
        metric("generated_tokens_total", "counter", "Tokens generated.", &[("", f(&self.generated_tokens))]);
        metric("prompt_seconds_total", "counter", "Engine time spent prefilling.", &[("", secs(&self.prompt_micros))]);
        metric(
            "generation_seconds_total",
            "counter",
            "Engine time spent generating.",
            &[("", secs(&self.generation_micros))],
        );
        metric(
            "prompt_tokens_per_second",
            "gauge",
            "Prefill throughput since start (tokens / engine seconds).",
            &[("", rate(&self.prompt_tokens, &self.prompt_micros))],
        );
        metric(
            "generated_tokens_per_second",
            "gauge",
            "Generation throughput since start, all slots together (tokens / engine seconds).",
            &[("", rate(&self.generated_tokens, &self.generation_micros))],
        );
        metric("slots_total", "gauge", "Slots (sessions).", &[("", self.slots() as f64)]);
        metric("slots_busy", "gauge", "Slots running a request.", &[("", self.busy() as f64)]);
        metric("queue_length", "gauge", "Requests waiting for a slot.", &[("", self.queued() as f64)]);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admission_stops_at_capacity_and_releases_free_room() {
        let m = Metrics::default();
        assert!(m.try_admit(2) && m.try_admit(2));
        assert!(!m.try_admit(2));
        m.release();
        assert!(m.try_admit(2));
        m.slot_taken();
        assert_eq!(m.queued(), 1);
        m.release();
        m.slot_freed();
        assert_eq!((m.queued(), m.busy()), (1, 0));
        m.release();
        m.release();
        assert_eq!(m.queued(), 0, "never below zero");
    }

    #[test]
    fn the_text_has_each_metric_with_help_and_type() {
        let m = Metrics::default();
        m.prefilled(10, Duration::from_millis(500));
        m.generated(Duration::from_millis(250));
        m.cancelled(Phase::Prefill);
        let text = m.render();
        assert!(
            text.contains("# TYPE purebee_prompt_tokens_total counter\npurebee_prompt_tokens_total 10\n"),
            "{text}"
        );
        assert!(text.contains("purebee_prompt_tokens_per_second 20\n"), "{text}");
        assert!(text.contains("purebee_generated_tokens_per_second 4\n"), "{text}");
        assert!(text.contains("purebee_requests_cancelled_total{phase=\"prefill\"} 1\n"), "{text}");
        assert!(text.contains("purebee_queue_length 0\n"), "{text}");
    }
}
