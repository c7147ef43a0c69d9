//! Ctrl-C while an answer is streamed. The line editor reads with the terminal's signals
//! off, so a Ctrl-C at the prompt reaches it as a key; while the model generates, the
//! terminal is in its usual mode and a Ctrl-C is a SIGINT. signal-hook's flag API turns
//! that signal into a flag the generation loop reads between two decode steps
//! (`GenerateOptions::stop`), with no unsafe code here; a second Ctrl-C while the flag
//! is still set (a long prefill that has not reached a decode step yet) ends the process
//! as a Ctrl-C always did.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use signal_hook::consts::SIGINT;
use signal_hook::flag;

/// The exit status of a process ended by SIGINT, as shells report it.
const SIGINT_STATUS: i32 = 130;

/// The flag SIGINT sets while the REPL runs.
pub struct Interrupt {
    flag: Arc<AtomicBool>,
}

impl Interrupt {
    /// Turns SIGINT into the flag from now on (for the rest of the process).
    pub fn install() -> io::Result<Interrupt> {
        let stop = Arc::new(AtomicBool::new(false));
        // Registered first, so it sees the flag as it was before this signal: the second
        // Ctrl-C of an answer that did not stop ends the process.
        flag::register_conditional_shutdown(SIGINT, SIGINT_STATUS, Arc::clone(&stop))?;
        flag::register(SIGINT, Arc::clone(&stop))?;
        Ok(Interrupt { flag: stop })
    }

    /// The flag, for `GenerateOptions::stop`.
    pub fn flag(&self) -> &Arc<AtomicBool> {
        &self.flag
    }

    /// Forgets an earlier Ctrl-C (before an answer starts and after it ends).
    pub fn reset(&self) {
        self.flag.store(false, Ordering::Relaxed);
    }
}
