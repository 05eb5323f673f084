//! One checker thread: depth-first search of the jobs it is given, handing half of its
//! pending states to a thread that has none.

use super::share::{Job, Pending, Shared};
use super::Fingerprint;
use stateright::{Expectation, Model};

/// Every this many states a thread publishes its counts, looks for a hungry thread and for
/// the end of the check.
const CHECK_EVERY: usize = 1 << 10;

pub(super) fn work<M: Model>(model: &M, fingerprint: Fingerprint<M>, shared: &Shared<M::State>) {
    let mut thread = Thread {
        model,
        fingerprint,
        shared,
        properties: model.properties(),
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
                let fingerprint = (self.fingerprint)(&next);
                shared.prefetch(fingerprint);
                successors.push((index, next, fingerprint));
            }
            for (index, next, fingerprint) in successors.drain(..) {
                if shared.insert(fingerprint) {
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
