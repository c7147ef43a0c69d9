//! A persistent thread pool for one instruction at a time.
//!
//! Decode runs a few hundred small instructions per token, so spreading one over the threads
//! and joining must cost a microsecond or two, not the tens that spawning threads or a
//! general work-stealing pool's wake-ups cost. The workers are started once and spin on an
//! epoch counter between jobs (then sleep on a condition variable after about a
//! millisecond without work, so an idle engine does not burn its cores):
//!
//! ```text
//! caller: job = {f, n_tasks}; state = (epoch + 1, open, 0 joined) ──▶ workers see the epoch
//!         claims tasks (next.fetch_add)      ◀──▶ a worker joins (joined += 1 while open),
//!                                                 claims tasks, leaves (joined -= 1)
//!         no task left: closes the job (state |= CLOSED), waits until joined == 0, returns
//! ```
//!
//! Waiting for every worker that joined to leave, not only for the tasks to finish, is what
//! makes lending the caller's closure (on its stack) to the workers sound: no worker touches
//! the job after `run` returns. A worker that had not joined when the job closed never
//! touches it, so the caller does not wait for threads the OS has not scheduled: when
//! another process takes the cores, a job costs what its tasks cost on the threads that got
//! to run, instead of a scheduler time slice per instruction waiting for every worker.

use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

/// Busy spins (a `spin_loop` hint each, tens of ns) before a waiting thread starts
/// yielding its core: when there are more runnable threads than cores (tests running in
/// parallel, another program), spinning on would only keep the thread we wait for off the
/// core.
const SPINS_BEFORE_YIELD: u32 = 1 << 11;
/// Spins and yields before a worker goes to sleep.
const SPINS_BEFORE_SLEEP: u32 = 1 << 16;

/// One step of a wait: a spin hint at first, then yielding the core.
fn wait_step(spins: u32) {
    if spins < SPINS_BEFORE_YIELD {
        std::hint::spin_loop();
    } else {
        std::thread::yield_now();
    }
}

/// One job: `f(i)` for every `i < n_tasks`, tasks claimed with `next`.
struct Job<'a> {
    f: &'a (dyn Fn(usize) + Sync),
    n_tasks: usize,
    next: AtomicUsize,
}

impl Job<'_> {
    fn work(&self) {
        loop {
            let i = self.next.fetch_add(1, Ordering::Relaxed);
            if i >= self.n_tasks {
                return;
            }
            (self.f)(i);
        }
    }
}

/// `Shared::state`: the job's epoch in the high 32 bits, then [`CLOSED`], then the number of
/// workers inside the job in the low 31 bits.
const EPOCH_SHIFT: u32 = 32;
/// Set by the caller once every task is claimed: no worker may join after it.
const CLOSED: u64 = 1 << 31;
const JOINED: u64 = CLOSED - 1;

fn epoch_of(state: u64) -> u64 {
    state >> EPOCH_SHIFT
}

struct Shared {
    /// The current job's epoch, whether it is closed, and how many workers are inside it
    /// (see [`CLOSED`]). Workers compare the epoch with the last one they saw.
    state: AtomicU64,
    /// The current job (a `Job` on the caller's stack), valid for a worker that joined it
    /// until that worker leaves.
    job: AtomicPtr<Job<'static>>,
    /// Workers asleep on `wake`.
    sleeping: AtomicUsize,
    /// Set when a task panicked on a worker (a bug in a kernel): the caller re-raises it.
    panicked: AtomicBool,
    lock: Mutex<bool>,
    wake: Condvar,
}

/// The caller plus `threads − 1` workers.
pub struct Pool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    /// Jobs handed to the workers so far (each one a wake-up and a join).
    jobs: AtomicU64,
}

impl Pool {
    /// A pool of `threads` threads in all (the caller counts as one; `threads` ≥ 1).
    pub fn new(threads: usize) -> std::io::Result<Pool> {
        let shared = Arc::new(Shared {
            state: AtomicU64::new(0),
            job: AtomicPtr::new(std::ptr::null_mut()),
            sleeping: AtomicUsize::new(0),
            lock: Mutex::new(false),
            wake: Condvar::new(),
            panicked: AtomicBool::new(false),
        });
        let mut pool = Pool { shared, workers: Vec::new(), jobs: AtomicU64::new(0) };
        for i in 1..threads.max(1) {
            let shared = Arc::clone(&pool.shared);
            // On failure `pool` is dropped here, which stops the workers already started.
            pool.workers
                .push(std::thread::Builder::new().name(format!("purebee-cpu-{i}")).spawn(move || worker(&shared))?);
        }
        Ok(pool)
    }

    /// Threads in all, the caller included.
    pub fn threads(&self) -> usize {
        self.workers.len() + 1
    }

    /// Jobs handed to the workers so far: calls of [`Pool::run`] that woke them and joined
    /// (not those run on the caller alone).
    pub fn jobs(&self) -> u64 {
        self.jobs.load(Ordering::Relaxed)
    }

    /// Calls `f(i)` once for every `i` in `0..n_tasks`, spread over the threads, and returns
    /// when all calls have returned. Tasks are claimed in increasing order.
    pub fn run(&self, n_tasks: usize, f: &(dyn Fn(usize) + Sync)) {
        if self.workers.is_empty() || n_tasks <= 1 {
            (0..n_tasks).for_each(f);
            return;
        }
        self.jobs.fetch_add(1, Ordering::Relaxed);
        let job = Job { f, n_tasks, next: AtomicUsize::new(0) };
        let s = &*self.shared;
        // SAFETY: the pointer is only dereferenced by a worker that joined this job (a
        // successful increment of the joined count while the job is open, after the state
        // below is published) and only until it leaves; this function closes the job and
        // does not return (so `job` and `f`, which it borrows, stay alive) until no worker
        // is inside. The lifetime is erased only to store the pointer in the shared atomic.
        let ptr = unsafe { std::mem::transmute::<*const Job<'_>, *mut Job<'static>>(&job) };
        s.job.store(ptr, Ordering::Release);
        // The previous job is closed with nobody inside: a new epoch, open, none joined.
        let epoch = epoch_of(s.state.load(Ordering::Relaxed)) + 1;
        s.state.store(epoch << EPOCH_SHIFT, Ordering::SeqCst);
        if s.sleeping.load(Ordering::SeqCst) > 0 {
            let _guard = s.lock.lock().unwrap_or_else(|p| p.into_inner());
            s.wake.notify_all();
        }
        // The workers must check out before this frame unwinds, so a panic here waits too.
        let mine = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job.work()));
        // Every task is claimed: close the job to workers that have not joined, and wait
        // for those inside to finish theirs.
        s.state.fetch_or(CLOSED, Ordering::SeqCst);
        let mut spins = 0u32;
        while s.state.load(Ordering::Acquire) & JOINED != 0 {
            wait_step(spins);
            spins = spins.saturating_add(1);
        }
        if let Err(payload) = mine {
            std::panic::resume_unwind(payload);
        }
        if s.panicked.swap(false, Ordering::Relaxed) {
            panic!("a task of the CPU engine's thread pool panicked (see the message above)");
        }
    }

    /// Splits `out` into chunks of `chunk` elements (the last may be shorter) and calls
    /// `f(index, chunk)` for each, spread over the threads.
    pub fn for_each_chunk<T: Send>(&self, out: &mut [T], chunk: usize, f: &(dyn Fn(usize, &mut [T]) + Sync)) {
        let chunk = chunk.max(1);
        let len = out.len();
        let base = SendPtr(out.as_mut_ptr());
        self.run(len.div_ceil(chunk), &|i| {
            let start = i * chunk;
            let end = (start + chunk).min(len);
            // SAFETY: task `i` runs exactly once (see `run`) and gets elements
            // `start..end` of `out`; the ranges of distinct tasks are disjoint and lie
            // inside `out`, which stays mutably borrowed by this function until every task
            // has returned.
            let part = unsafe { std::slice::from_raw_parts_mut(base.get().add(start), end - start) };
            f(i, part)
        });
    }

    /// Calls `f(start, part)` on consecutive parts of `out` that together cover it, spread
    /// over the threads, each part claimed when a thread is free: guided self-scheduling,
    /// parts of `max(min, remaining / (2 · threads))` elements (the last may be shorter).
    /// The first parts are long (one stream each for the prefetchers), the last ones short,
    /// so the threads finish together instead of one waiting out another's last long part.
    pub fn for_each_guided<T: Send>(&self, out: &mut [T], min: usize, f: &(dyn Fn(usize, &mut [T]) + Sync)) {
        let (len, min, threads) = (out.len(), min.max(1), self.threads());
        let base = SendPtr(out.as_mut_ptr());
        let cursor = AtomicUsize::new(0);
        self.run(threads.min(len.div_ceil(min)), &|_| loop {
            let mut start = cursor.load(Ordering::Relaxed);
            let end = loop {
                if start >= len {
                    return;
                }
                let end = (start + min.max((len - start) / (2 * threads))).min(len);
                match cursor.compare_exchange_weak(start, end, Ordering::Relaxed, Ordering::Relaxed) {
                    Ok(_) => break end,
                    Err(now) => start = now,
                }
            };
            // SAFETY: the cursor hands out each element of `0..len` to exactly one claim
            // (a successful exchange moves it from `start` to `end`), so the parts are
            // disjoint and lie inside `out`, which stays mutably borrowed by this function
            // until every task has returned.
            let part = unsafe { std::slice::from_raw_parts_mut(base.get().add(start), end - start) };
            f(start, part)
        });
    }
}

/// A raw pointer that may cross threads (the disjointness arguments are in `for_each_chunk`
/// and `for_each_guided`).
struct SendPtr<T>(*mut T);
impl<T> Clone for SendPtr<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for SendPtr<T> {}
// SAFETY: only used by `for_each_chunk` and `for_each_guided`, whose tasks touch disjoint ranges.
unsafe impl<T: Send> Send for SendPtr<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Sync for SendPtr<T> {}
impl<T> SendPtr<T> {
    fn get(self) -> *mut T {
        self.0
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        {
            let mut stop = self.shared.lock.lock().unwrap_or_else(|p| p.into_inner());
            *stop = true;
        }
        // A null job with a new epoch tells the workers to exit.
        self.shared.job.store(std::ptr::null_mut(), Ordering::Release);
        let epoch = epoch_of(self.shared.state.load(Ordering::Relaxed)) + 1;
        self.shared.state.store(epoch << EPOCH_SHIFT, Ordering::SeqCst);
        self.shared.wake.notify_all();
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

fn worker(s: &Shared) {
    // Epoch 0 is the pool's start: a job published before this thread got here is still
    // seen (and must be, since the caller waits for every worker to check out).
    let mut seen = 0;
    loop {
        let mut spins = 0u32;
        let state = loop {
            let state = s.state.load(Ordering::Acquire);
            if epoch_of(state) != seen {
                break state;
            }
            spins += 1;
            if spins < SPINS_BEFORE_SLEEP {
                wait_step(spins);
                continue;
            }
            let mut stop = s.lock.lock().unwrap_or_else(|p| p.into_inner());
            s.sleeping.fetch_add(1, Ordering::SeqCst);
            while epoch_of(s.state.load(Ordering::SeqCst)) == seen && !*stop {
                stop = s.wake.wait(stop).unwrap_or_else(|p| p.into_inner());
            }
            s.sleeping.fetch_sub(1, Ordering::SeqCst);
            spins = 0;
        };
        seen = epoch_of(state);
        if s.job.load(Ordering::Acquire).is_null() {
            return;
        }
        if !join(s, state) {
            continue; // closed before this thread got to it: the caller did the tasks
        }
        let ptr = s.job.load(Ordering::Acquire);
        // SAFETY: this worker joined the open job of epoch `seen`, whose pointer was
        // published before that epoch; it stays valid until the worker leaves below (see
        // `Pool::run`).
        let job = unsafe { &*ptr };
        // A panicking task must still leave, or the caller would wait forever.
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job.work())).is_err() {
            s.panicked.store(true, Ordering::Relaxed);
        }
        s.state.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Enters the job of `state`'s epoch if it is still open: true when this worker is now
/// counted inside it.
fn join(s: &Shared, mut state: u64) -> bool {
    let epoch = epoch_of(state);
    loop {
        if epoch_of(state) != epoch || state & CLOSED != 0 {
            return false;
        }
        match s.state.compare_exchange_weak(state, state + 1, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return true,
            Err(now) => state = now,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_task_runs_once_on_any_thread_count() {
        for threads in 1..=4 {
            let pool = Pool::new(threads).expect("threads");
            for n in [0, 1, 2, 3, 17, 1000] {
                let hits: Vec<AtomicU64> = (0..n).map(|_| AtomicU64::new(0)).collect();
                pool.run(n, &|i| {
                    hits[i].fetch_add(1, Ordering::Relaxed);
                });
                assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1), "threads {threads}, n {n}");
            }
            // Jobs count the runs handed to workers: none on one thread, nor of 0 or 1 task.
            assert_eq!(pool.jobs(), if threads == 1 { 0 } else { 4 }, "threads {threads}");
        }
    }

    #[test]
    fn chunks_are_disjoint_and_cover_the_slice() {
        let pool = Pool::new(3).expect("threads");
        let mut v = vec![0usize; 1001];
        pool.for_each_chunk(&mut v, 64, &|i, part| {
            for (j, x) in part.iter_mut().enumerate() {
                *x += i * 64 + j + 1;
            }
        });
        assert!(v.iter().enumerate().all(|(i, &x)| x == i + 1));
    }

    #[test]
    fn guided_parts_are_disjoint_cover_the_slice_and_shrink() {
        for (threads, len, min) in [(1, 10, 4), (2, 1001, 32), (3, 7, 1), (4, 5000, 16), (2, 0, 8)] {
            let pool = Pool::new(threads).expect("threads");
            let mut v = vec![0usize; len];
            let parts = Mutex::new(Vec::new());
            pool.for_each_guided(&mut v, min, &|start, part| {
                for (j, x) in part.iter_mut().enumerate() {
                    *x += start + j + 1;
                }
                parts.lock().expect("parts").push((start, part.len()));
            });
            assert!(v.iter().enumerate().all(|(i, &x)| x == i + 1), "{threads} threads, {len}");
            let mut parts = parts.into_inner().expect("parts");
            parts.sort();
            // Claimed in order: each part no longer than the one before, none shorter than
            // `min` but the last, the first a `2 · threads`-th of the whole.
            assert!(parts.windows(2).all(|p| p[1].1 <= p[0].1), "{parts:?}");
            assert!(parts.iter().rev().skip(1).all(|p| p.1 >= min), "{parts:?}");
            if let Some(first) = parts.first() {
                assert_eq!(first.1, min.max(len / (2 * threads)).min(len));
            }
        }
    }

    #[test]
    fn jobs_stay_exact_when_workers_join_late_or_not_at_all() {
        // More threads than cores: workers are often descheduled between seeing a job and
        // joining it, so jobs close under them; every task must still run exactly once.
        let pool = Pool::new(8).expect("threads");
        for job in 0..20_000usize {
            let n = 1 + job % 7;
            let hits: Vec<AtomicU64> = (0..n).map(|_| AtomicU64::new(0)).collect();
            pool.run(n, &|i| {
                hits[i].fetch_add(1, Ordering::Relaxed);
            });
            assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1), "job {job}");
        }
    }

    #[test]
    fn workers_wake_after_sleeping() {
        let pool = Pool::new(2).expect("threads");
        std::thread::sleep(std::time::Duration::from_millis(50));
        let sum = AtomicU64::new(0);
        pool.run(100, &|i| {
            sum.fetch_add(i as u64, Ordering::Relaxed);
        });
        assert_eq!(sum.load(Ordering::Relaxed), 4950);
    }
}
