//! The last guard against a model file truncated while it is mapped. Touching a page of a
//! map past the file's new end raises SIGBUS, which kills the process without a word
//! (`watch.rs` catches a change between two passes; this is for one during a pass). While a
//! [`MapGuard`] lives, a SIGBUS whose faulting address lies inside its map writes a message
//! naming the file to stderr and exits with status 1. Any other SIGBUS goes to the action
//! that was installed before (the default kills the process, as without the guard).
//!
//! Linux only (elsewhere [`MapGuard::new`] guards nothing). The handler does only what a
//! signal handler may: atomic loads, `write(2)`, `_exit(2)`, `sigaction(2)` and `raise(3)`.
//! The messages are formatted when a map is made and never freed, so the handler reads
//! nothing that another thread could free under it.

use std::ops::Deref;
use std::path::Path;

use memmap2::Mmap;

/// A read-only memory map: of a file, guarded while it lives, or anonymous (a file image
/// copied into memory: nothing to guard), or a file image owned on the heap (where nothing
/// can be mapped: a browser tab). Derefs to its bytes.
#[derive(Debug)]
pub struct GuardedMap {
    // Declared before the map, so dropped before it: the range leaves the handler's table
    // before it is unmapped.
    _guard: Option<MapGuard>,
    bytes: Backing,
}

/// Where a [`GuardedMap`]'s bytes live.
#[derive(Debug)]
enum Backing {
    Map(Mmap),
    Heap(Box<[u8]>),
}

impl GuardedMap {
    /// `map`, the map of the file at `path`, guarded.
    pub(crate) fn file(map: Mmap, path: &Path) -> GuardedMap {
        GuardedMap { _guard: Some(MapGuard::new(&map, path)), bytes: Backing::Map(map) }
    }

    /// An anonymous `map`.
    #[cfg_attr(target_family = "wasm", allow(dead_code))]
    pub(crate) fn anonymous(map: Mmap) -> GuardedMap {
        GuardedMap { _guard: None, bytes: Backing::Map(map) }
    }

    /// A file image on the heap, taken as it is (no copy).
    pub(crate) fn heap(bytes: Box<[u8]>) -> GuardedMap {
        GuardedMap { _guard: None, bytes: Backing::Heap(bytes) }
    }
}

impl Deref for GuardedMap {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match &self.bytes {
            Backing::Map(map) => map,
            Backing::Heap(bytes) => bytes,
        }
    }
}

/// Keeps a map's address range registered for the SIGBUS handler until dropped.
#[derive(Debug)]
struct MapGuard {
    #[cfg(target_os = "linux")]
    slot: Option<usize>,
}

#[cfg(not(target_os = "linux"))]
impl MapGuard {
    fn new(_map: &[u8], _path: &Path) -> MapGuard {
        MapGuard {}
    }
}

#[cfg(target_os = "linux")]
mod linux {
    use std::path::Path;
    use std::sync::atomic::{AtomicPtr, AtomicU8, AtomicUsize, Ordering};
    use std::sync::{Once, OnceLock};

    use super::MapGuard;

    /// Maps guarded at once; a map opened while all are taken is not guarded.
    const SLOTS: usize = 64;

    /// A slot's states: free, being written by the thread that claimed it, or live.
    const FREE: u8 = 0;
    const CLAIMED: u8 = 1;
    const LIVE: u8 = 2;

    struct Slot {
        state: AtomicU8,
        start: AtomicUsize,
        end: AtomicUsize,
        message: AtomicPtr<u8>,
        message_len: AtomicUsize,
    }

    #[allow(clippy::declare_interior_mutable_const)] // each array element is its own slot
    const EMPTY: Slot = Slot {
        state: AtomicU8::new(FREE),
        start: AtomicUsize::new(0),
        end: AtomicUsize::new(0),
        message: AtomicPtr::new(std::ptr::null_mut()),
        message_len: AtomicUsize::new(0),
    };
    static GUARDED: [Slot; SLOTS] = [EMPTY; SLOTS];

    /// The SIGBUS action before ours, restored for faults that are not in a guarded map.
    static PREVIOUS: OnceLock<libc::sigaction> = OnceLock::new();

    /// The line the handler writes for a fault in the map of `path`.
    fn message(path: &Path) -> String {
        format!(
            "error: {}: the model file was truncated or rewritten while it was in use (SIGBUS \
             reading its memory map); stopping\n",
            path.display()
        )
    }

    impl MapGuard {
        /// Guards `map`, the memory map of the file at `path`.
        pub(super) fn new(map: &[u8], path: &Path) -> MapGuard {
            install_handler();
            let message: &'static [u8] = Box::leak(message(path).into_bytes().into_boxed_slice());
            let slot = GUARDED
                .iter()
                .position(|s| s.state.compare_exchange(FREE, CLAIMED, Ordering::Acquire, Ordering::Relaxed).is_ok());
            if let Some(i) = slot {
                let s = &GUARDED[i];
                s.start.store(map.as_ptr() as usize, Ordering::Relaxed);
                s.end.store(map.as_ptr() as usize + map.len(), Ordering::Relaxed);
                s.message.store(message.as_ptr().cast_mut(), Ordering::Relaxed);
                s.message_len.store(message.len(), Ordering::Relaxed);
                s.state.store(LIVE, Ordering::Release);
            }
            MapGuard { slot }
        }
    }

    impl Drop for MapGuard {
        fn drop(&mut self) {
            if let Some(i) = self.slot {
                GUARDED[i].state.store(FREE, Ordering::Release);
            }
        }
    }

    fn install_handler() {
        static INSTALL: Once = Once::new();
        INSTALL.call_once(|| {
            #[allow(unsafe_code)]
            // SAFETY: an all-zero `sigaction` is a valid value (no handler, empty mask, no
            // flags) that we then fill in; `sigaction(2)` reads `action` and writes
            // `previous`, both valid for the call. `on_sigbus` has the SA_SIGINFO signature.
            unsafe {
                let mut action: libc::sigaction = std::mem::zeroed();
                action.sa_sigaction = on_sigbus as *const () as libc::sighandler_t;
                action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
                libc::sigemptyset(&mut action.sa_mask);
                let mut previous: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(libc::SIGBUS, &action, &mut previous) == 0 {
                    let _ = PREVIOUS.set(previous);
                }
            }
        });
    }

    #[allow(unsafe_code)]
    extern "C" fn on_sigbus(signal: libc::c_int, info: *mut libc::siginfo_t, _context: *mut libc::c_void) {
        // SAFETY: the kernel hands an SA_SIGINFO handler a valid `siginfo_t`.
        let address = unsafe { (*info).si_addr() } as usize;
        for s in &GUARDED {
            if s.state.load(Ordering::Acquire) == LIVE
                && (s.start.load(Ordering::Relaxed)..s.end.load(Ordering::Relaxed)).contains(&address)
            {
                let (text, len) = (s.message.load(Ordering::Relaxed), s.message_len.load(Ordering::Relaxed));
                // SAFETY: `text` points at `len` bytes leaked when the slot was filled (never
                // freed); write(2) and _exit(2) are async-signal-safe.
                unsafe {
                    libc::write(2, text.cast(), len);
                    libc::_exit(1);
                }
            }
        }
        // Not a fault in a guarded map: put the previous action back and raise the signal
        // again, so that it meets that action once this handler returns (a fault would also
        // recur when the instruction runs again).
        let default = || {
            // SAFETY: as in `install_handler`; an all-zero action with SIG_DFL (0) is the default.
            let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
            action.sa_sigaction = libc::SIG_DFL;
            action
        };
        let previous = PREVIOUS.get().copied().unwrap_or_else(default);
        // SAFETY: sigaction(2) and raise(3) are async-signal-safe; `previous` is a valid action.
        unsafe {
            libc::sigaction(signal, &previous, std::ptr::null_mut());
            libc::raise(signal);
        }
    }
}
