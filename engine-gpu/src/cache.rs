//! A small least-recently-used map from programs to what the engine keeps for them.

use std::collections::HashMap;

use purebee_isa::ProgramId;

/// At most `bound` entries; inserting beyond that drops the least recently used one (with
/// everything it owns: for a compiled program, its uniform, scratch and run-parameter
/// buffers and bind groups). Lookups through [`Lru::get`] count as uses.
pub(crate) struct Lru<V> {
    entries: HashMap<ProgramId, (V, u64)>,
    bound: usize,
    clock: u64,
}

impl<V> Lru<V> {
    /// An empty cache of at most `bound` entries (at least one).
    pub fn new(bound: usize) -> Lru<V> {
        Lru { entries: HashMap::new(), bound: bound.max(1), clock: 0 }
    }

    /// The entry of `id`, marked as just used.
    pub fn get(&mut self, id: &ProgramId) -> Option<&V> {
        self.clock += 1;
        let clock = self.clock;
        self.entries.get_mut(id).map(|(v, used)| {
            *used = clock;
            &*v
        })
    }

    /// The entry of `id`, without marking it used.
    pub fn peek(&self, id: &ProgramId) -> Option<&V> {
        self.entries.get(id).map(|(v, _)| v)
    }

    /// Whether `id` has an entry.
    pub fn contains(&self, id: &ProgramId) -> bool {
        self.entries.contains_key(id)
    }

    /// Inserts (or replaces) the entry of `id` as just used, then drops the least recently
    /// used entries beyond the bound.
    pub fn insert(&mut self, id: ProgramId, value: V) {
        self.clock += 1;
        self.entries.insert(id, (value, self.clock));
        while self.entries.len() > self.bound {
            let Some(oldest) = self.entries.iter().min_by_key(|(_, (_, used))| *used).map(|(k, _)| *k) else {
                break;
            };
            self.entries.remove(&oldest);
        }
    }

    /// Keeps only the entries `keep` accepts.
    pub fn retain(&mut self, mut keep: impl FnMut(&V) -> bool) {
        self.entries.retain(|_, (v, _)| keep(v));
    }

    /// Every entry, in no order.
    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.entries.values().map(|(v, _)| v)
    }

    /// The number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }
}
