//! What `pull` and model loading show on stderr: an indicatif bar (bytes, rate, ETA) or
//! spinner when stderr is a terminal; plain lines (one every few seconds while a download
//! runs) when it is not, so logs stay readable.

use std::io::{self, IsTerminal};
use std::time::{Duration, Instant};

use indicatif::{HumanBytes, ProgressBar, ProgressStyle};
use purebee_hub::PullEvent;

/// How often a plain progress line is printed when stderr is not a terminal.
const LINE_EVERY: Duration = Duration::from_secs(5);

/// Shows a pull's events.
pub struct PullProgress {
    label: String,
    terminal: bool,
    bar: Option<ProgressBar>,
    started: Instant,
    start_offset: u64,
    last_line: Instant,
}

impl PullProgress {
    /// A display for the pull of `label`.
    pub fn new(label: &str) -> PullProgress {
        PullProgress {
            label: label.to_string(),
            terminal: io::stderr().is_terminal(),
            bar: None,
            started: Instant::now(),
            start_offset: 0,
            last_line: Instant::now(),
        }
    }

    /// A message above the bar (or a plain line).
    fn say(&self, text: &str) {
        match &self.bar {
            Some(bar) => bar.println(format!("purebee-rs: {text}")),
            None => eprintln!("purebee-rs: {text}"),
        }
    }

    /// Shows one event.
    pub fn event(&mut self, event: &PullEvent) {
        match *event {
            PullEvent::Cached { path } => self.say(&format!("{} is in the store: {}", self.label, path.display())),
            PullEvent::Shared { from } => self.say(&format!(
                "{} taken from the Hugging Face cache (digest checked): {}",
                self.label,
                from.display()
            )),
            PullEvent::Waiting { .. } => {
                self.say(&format!("another pull of {} is running; waiting for it to finish", self.label))
            }
            PullEvent::Checking { bytes } => {
                self.say(&format!("resuming: checking the {} already downloaded", HumanBytes(bytes)))
            }
            PullEvent::Started { offset, total, .. } => {
                self.started = Instant::now();
                self.start_offset = offset;
                self.last_line = Instant::now();
                let size = total.map_or("unknown size".to_string(), |t| HumanBytes(t).to_string());
                if self.terminal {
                    let bar = match total {
                        Some(t) => ProgressBar::new(t),
                        None => ProgressBar::new_spinner(),
                    };
                    let template = if total.is_some() {
                        "{msg} [{bar:30}] {bytes}/{total_bytes} {binary_bytes_per_sec} ETA {eta}"
                    } else {
                        "{msg} {spinner} {bytes} {binary_bytes_per_sec}"
                    };
                    if let Ok(style) = ProgressStyle::with_template(template) {
                        bar.set_style(style.progress_chars("=> "));
                    }
                    bar.set_message(format!("pulling {}", self.label));
                    bar.set_position(offset);
                    bar.reset_eta();
                    if let Some(old) = self.bar.replace(bar) {
                        old.finish_and_clear();
                    }
                } else if offset > 0 {
                    eprintln!("purebee-rs: pulling {} ({size}): resuming at {}", self.label, HumanBytes(offset));
                } else {
                    eprintln!("purebee-rs: pulling {} ({size})", self.label);
                }
            }
            PullEvent::Progress { done, total } => match &self.bar {
                Some(bar) => bar.set_position(done),
                None if self.last_line.elapsed() >= LINE_EVERY => {
                    self.last_line = Instant::now();
                    let secs = self.started.elapsed().as_secs_f64().max(1e-3);
                    let rate = (done.saturating_sub(self.start_offset)) as f64 / secs;
                    let of = total.map_or(String::new(), |t| {
                        let eta = if rate > 0.0 {
                            format!(", ETA {:.0} s", t.saturating_sub(done) as f64 / rate)
                        } else {
                            String::new()
                        };
                        format!(" of {} ({:.0}%{eta})", HumanBytes(t), 100.0 * done as f64 / t.max(1) as f64)
                    });
                    eprintln!("purebee-rs: {}: {}{of}, {}/s", self.label, HumanBytes(done), HumanBytes(rate as u64));
                }
                None => {}
            },
            PullEvent::Restarting { reason } => self.say(reason),
            PullEvent::Retrying { attempt, retries, delay, reason } => {
                self.say(&format!("{reason}; retry {attempt} of {retries} in {:.1} s", delay.as_secs_f64()))
            }
            _ => {}
        }
    }

    /// Clears the bar.
    pub fn finish(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
    }
}

/// A spinner on stderr (terminals only) while a slow step runs, with the elapsed time.
pub struct Spinner(Option<ProgressBar>);

impl Spinner {
    /// Starts a spinner saying `message`.
    pub fn start(message: String) -> Spinner {
        if !io::stderr().is_terminal() {
            return Spinner(None);
        }
        let bar = ProgressBar::new_spinner();
        if let Ok(style) = ProgressStyle::with_template("{spinner} {msg} ({elapsed})") {
            bar.set_style(style);
        }
        bar.set_message(message);
        bar.enable_steady_tick(Duration::from_millis(100));
        Spinner(Some(bar))
    }

    /// Stops and clears it.
    pub fn finish(self) {
        if let Some(bar) = self.0 {
            bar.finish_and_clear();
        }
    }
}
