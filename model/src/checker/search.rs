//! One checker thread: depth-first search of the jobs it is given, handing half of its
//! pending states to a thread that has none.

use super::share::{Job, Pending, Shared};
use super::Fingerprint;
use stateright::{Expectation, Model};

/// Every this many states a thread publishes its counts, looks for a hungry thread and for
/// the end of the check.
const CHECK_EVERY: usize = 1 << 10;

/// Slots of a thread's cache of fingerprints it found or put in the shared set lately: 256
/// KiB, half of this machine's L2 per core (twice that measured the same). A depth-first
/// search meets many of a diamond's joins soon after their first visit, near the leaves: in
/// `standard`, this cache answers 6,389,152 of the 12,777,733 states generated (70% of the
/// joins), each a trip to the shared set's memory saved (`large` on two threads: 276.4 s,
/// 537 CPU-s → 242.5 s, 470 CPU-s).
const RECENT: usize = 1 << 15;

pub(super) fn work<M: Model>(model: &M, fingerprint: Fingerprint<M>, shared: &Shared<M::State>) {
    let mut thread = Thread {
        model,
        fingerprint,
        shared,
        properties: model.properties(),
        recent: vec![0; RECENT].into_boxed_slice(),
        states: 0,
        unique: 0,
        max_depth: 0,
    };
    let exit = Exit(shared);
    while let Some(job) = shared.next_job() {
        thread.search(job);
    }
    shared.publish(&mut thread.states, &mut thread.unique, thread.max_depth);
    drop(exit);
}

/// A thread's end, normal or by a panic in the model: on a panic the other threads stop
/// too, and either way the check is done once the last thread has ended.
struct Exit<'a, S>(&'a Shared<S>);

impl<S> Drop for Exit<'_, S> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.abandon();
        }
        self.0.exit();
    }
}

struct Thread<'a, M: Model> {
    model: &'a M,
    fingerprint: Fingerprint<M>,
    shared: &'a Shared<M::State>,
    properties: Vec<stateright::Property<M>>,
    /// Fingerprints this thread found in the shared set or put there, each in the slot its
    /// bits name ([`recent_slot`]), zero for none (the set takes zero for one, and so does
    /// this cache). A hit is a state generated before; a miss is looked up in the set.
    recent: Box<[u64]>,
    /// Counted since last published.
    states: usize,
    unique: usize,
    max_depth: usize,
}

impl<M: Model> Thread<'_, M> {
    fn search(&mut self, job: Job<M::State>) {
        let Job {
            mut trail,
            mut pending,
        } = job;
        let (model, shared) = (self.model, self.shared);
        let mut discovered = shared.discovered();
        let mut actions = Vec::new();
        let mut successors = Vec::new();
        let mut visited = 0usize;
        while let Some(Pending {
            state,
            index,
            mut eventually,
            depth,
        }) = pending.pop()
        {
            trail.truncate(depth - 1);
            trail.push(index);
            self.max_depth = self.max_depth.max(depth);
            visited += 1;
            if visited.is_multiple_of(CHECK_EVERY) {
                shared.publish(&mut self.states, &mut self.unique, self.max_depth);
                if shared.stopping() {
                    return;
                }
                discovered = shared.discovered();
                if shared.hungry() && !pending.is_empty() {
                    // The bottom of the stack: the shallowest states, the most work.
                    let given = pending.drain(..pending.len().div_ceil(2)).collect();
                    shared.give(Job {
                        trail: trail.clone(),
                        pending: given,
                    });
                }
            }

            for (i, property) in self.properties.iter().enumerate() {
                let bit = 1 << i;
                if discovered & bit != 0 && eventually & bit == 0 {
                    continue;
                }
                let holds = (property.condition)(model, &state);
                match property.expectation {
                    Expectation::Always if !holds => {}
                    Expectation::Sometimes if holds => {}
                    Expectation::Eventually => {
                        if holds {
                            eventually &= !bit;
                        }
                        continue;
                    }
                    _ => continue,
                }
                shared.discover(i, &trail);
                discovered |= bit;
            }
            if shared.all_discovered() {
                return;
            }

            let mut terminal = true;
            model.actions(&state, &mut actions);
            for (index, action) in actions.drain(..).enumerate() {
                let Some(next) = model.next_state(&state, action) else {
                    continue;
                };
                if !model.within_boundary(&next) {
                    continue;
                }
                self.states += 1;
                // A state generated before is a join, not an end: not terminal (as stateright).
                terminal = false;
                let fingerprint = (self.fingerprint)(&next).max(1);
                let slot = recent_slot(fingerprint);
                if self.recent[slot] == fingerprint {
                    continue;
                }
                shared.prefetch(fingerprint);
                successors.push((index, next, fingerprint));
            }
            for (index, next, fingerprint) in successors.drain(..) {
                let new = shared.insert(fingerprint);
                self.recent[recent_slot(fingerprint)] = fingerprint;
                if new {
                    self.unique += 1;
                    pending.push(Pending {
                        state: next,
                        index,
                        eventually,
                        depth: depth + 1,
                    });
                }
            }
            if terminal {
                for i in (0..self.properties.len()).filter(|i| eventually & 1 << i != 0) {
                    shared.discover(i, &trail);
                }
            }
        }
    }
}

/// Where `fingerprint` goes in a thread's cache: bits 32 to 46, which the set uses least (a
/// shard is picked by the top six bits, a slot in its table by the lowest, below bit 32
/// while a shard holds fewer than 2³² slots).
fn recent_slot(fingerprint: u64) -> usize {
    (fingerprint >> 32) as usize & (RECENT - 1)
}
