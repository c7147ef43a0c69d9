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
#[derive(Debug)]
pub struct Metrics {
    finished: [AtomicU64; 3],
    cancelled: [AtomicU64; 3],
    rejected: AtomicU64,
    prompt_tokens: AtomicU64,
    cached_tokens: AtomicU64,
    generated_tokens: AtomicU64,
    prompt_micros: AtomicU64,
    generation_micros: AtomicU64,
    /// Drafted tokens a verify pass checked, and those kept.
    drafted_tokens: AtomicU64,
    accepted_tokens: AtomicU64,
    slots_total: AtomicUsize,
    slots_busy: AtomicUsize,
    /// Requests accepted and not finished: running or waiting.
    in_flight: AtomicUsize,
    /// Tokens per batched pass.
    pass_tokens: Histogram<8>,
    /// From a request's arrival to its first token, in seconds.
    first_token: Histogram<10>,
    /// Between two tokens of one request, in seconds.
    between_tokens: Histogram<10>,
}

/// A Prometheus histogram over fixed bucket bounds.
#[derive(Debug)]
struct Histogram<const N: usize> {
    bounds: [f64; N],
    /// Observations at most each bound (not cumulative; summed when rendered).
    counts: [AtomicU64; N],
    /// Observations above the last bound.
    over: AtomicU64,
    /// The sum of the observations, in millionths.
    sum_micros: AtomicU64,
}

impl<const N: usize> Histogram<N> {
    const fn new(bounds: [f64; N]) -> Histogram<N> {
        Histogram {
            bounds,
            counts: [const { AtomicU64::new(0) }; N],
            over: AtomicU64::new(0),
            sum_micros: AtomicU64::new(0),
        }
    }

    fn observe(&self, value: f64) {
        match self.bounds.iter().position(|&b| value <= b) {
            Some(i) => self.counts[i].fetch_add(1, Ordering::Relaxed),
            None => self.over.fetch_add(1, Ordering::Relaxed),
        };
        self.sum_micros.fetch_add((value * 1e6) as u64, Ordering::Relaxed);
    }

    /// The histogram's lines: cumulative buckets, `+Inf`, sum and count.
    fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP purebee_{name} {help}\n# TYPE purebee_{name} histogram");
        let mut total = 0;
        for (b, c) in self.bounds.iter().zip(&self.counts) {
            total += c.load(Ordering::Relaxed);
            let _ = writeln!(out, "purebee_{name}_bucket{{le=\"{b}\"}} {total}");
        }
        total += self.over.load(Ordering::Relaxed);
        let _ = writeln!(out, "purebee_{name}_bucket{{le=\"+Inf\"}} {total}");
        let _ = writeln!(out, "purebee_{name}_sum {}", self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6);
        let _ = writeln!(out, "purebee_{name}_count {total}");
    }
}

const SECONDS: [f64; 10] = [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics {
            finished: Default::default(),
            cancelled: Default::default(),
            rejected: AtomicU64::new(0),
            prompt_tokens: AtomicU64::new(0),
            cached_tokens: AtomicU64::new(0),
            generated_tokens: AtomicU64::new(0),
            prompt_micros: AtomicU64::new(0),
            generation_micros: AtomicU64::new(0),
            drafted_tokens: AtomicU64::new(0),
            accepted_tokens: AtomicU64::new(0),
            slots_total: AtomicUsize::new(0),
            slots_busy: AtomicUsize::new(0),
            in_flight: AtomicUsize::new(0),
            pass_tokens: Histogram::new([1.0, 2.0, 4.0, 8.0, 16.0, 64.0, 256.0, 1024.0]),
            first_token: Histogram::new(SECONDS),
            between_tokens: Histogram::new(SECONDS),
        }
    }
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

    /// Counts a batched pass of `tokens` tokens.
    pub fn pass(&self, tokens: usize) {
        self.pass_tokens.observe(tokens as f64);
    }

    /// Records the time from a request's arrival to its first token.
    pub fn first_token(&self, time: Duration) {
        self.first_token.observe(time.as_secs_f64());
    }

    /// Records the time between two tokens of one request.
    pub fn between_tokens(&self, time: Duration) {
        self.between_tokens.observe(time.as_secs_f64());
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

    /// Adds a verify pass's drafted tokens and those it kept.
    pub fn speculated(&self, drafted: u64, accepted: u64) {
        self.drafted_tokens.fetch_add(drafted, Ordering::Relaxed);
        self.accepted_tokens.fetch_add(accepted, Ordering::Relaxed);
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
        metric(
            "draft_tokens_total",
            "counter",
            "Drafted tokens checked by speculative decoding's verify passes.",
            &[("", f(&self.drafted_tokens))],
        );
        metric(
            "draft_tokens_accepted_total",
            "counter",
            "Drafted tokens kept (the acceptance rate is this over draft_tokens_total).",
            &[("", f(&self.accepted_tokens))],
        );
        let acceptance =
            if get(&self.drafted_tokens) == 0 { 0.0 } else { f(&self.accepted_tokens) / f(&self.drafted_tokens) };
        metric(
            "draft_acceptance_ratio",
            "gauge",
            "Accepted over drafted tokens since start (0 before any draft).",
            &[("", acceptance)],
        );
        metric("slots_total", "gauge", "Slots (sessions).", &[("", self.slots() as f64)]);
        metric("slots_busy", "gauge", "Slots running a request.", &[("", self.busy() as f64)]);
        metric("queue_length", "gauge", "Requests waiting for a slot.", &[("", self.queued() as f64)]);
        let help = "Tokens per batched pass (every busy slot's rows together).";
        self.pass_tokens.render(&mut out, "batch_tokens", help);
        let help = "Seconds from a request's arrival to its first token.";
        self.first_token.render(&mut out, "time_to_first_token_seconds", help);
        let help = "Seconds between two tokens of one request.";
        self.between_tokens.render(&mut out, "time_between_tokens_seconds", help);
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
        m.pass(3);
        m.pass(100);
        let text = m.render();
        assert!(text.contains("purebee_batch_tokens_bucket{le=\"4\"} 1\n"), "{text}");
        assert!(text.contains("purebee_batch_tokens_bucket{le=\"+Inf\"} 2\n"), "{text}");
        assert!(text.contains("purebee_batch_tokens_sum 103\n"), "{text}");
    }
}
