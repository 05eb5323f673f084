//! quiesce's own depth-first checker: stateright's DFS (`spawn_dfs`) with its bookkeeping
//! made cheap, for the checks that run most (`check`, the main job, the pinned counts), on
//! one thread or several.
//!
//! On one thread it visits the states in stateright's order, so its counts — unique states,
//! generated states, depth — are stateright's to the state; a test
//! (`model/tests/all/checker.rs`) compares them part by part. On several, the unique and
//! generated counts are the same and the depth and the discoveries' paths depend on the
//! schedule, as stateright's do. What it does not pay for:
//! * a copy of the path per pending state: a search keeps one trail of action indices,
//!   which is the path to whatever state it pops (every state above a pending one on the
//!   stack is a descendant of its parent, so the trail's prefix is the parent's path);
//! * a representative built per state: it takes a fingerprint function, and for the
//!   model's symmetry `quiesce_model::class_fingerprint` hashes each state's class in place
//!   (stateright builds the representative, hashes it, and hashes the state too, unused);
//! * a concurrent map of discoveries looked up by name for every property at every state:
//!   a property that has its discovery is not evaluated again (stateright evaluates every
//!   `always` and `sometimes` property at every state, and records the last discovery
//!   instead of the first; both are counterexamples and examples alike).
//!
//! One difference shows in the counts: once every property has its discovery the search
//! ends at once, where stateright's (its default, `HasDiscoveries::All`) first finishes its
//! block of 1,500 states. No configuration of quiesce's ends so: its invariants hold.
//!
//! Breadth-first search, a depth bound and the explorer stay stateright's.

mod search;
mod set;
mod share;

use share::Shared;
use stateright::{Checker, Model, Path};
use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;

/// How the search tells states apart: [`fingerprint`] for stateright's own, or a
/// fingerprint of each state's symmetry class (`quiesce_model::class_fingerprint`), which
/// stands for stateright's `symmetry_fn` without building the representative.
pub type Fingerprint<M> = fn(&<M as Model>::State) -> u64;

/// Checks `model` depth-first on `threads` threads of its own; `join` waits for them. The
/// counters can be read while it runs, as stateright's can.
pub fn depth_first<M>(model: M, fingerprint: Fingerprint<M>, threads: usize) -> DepthFirst<M>
where
    M: Model + Send + Sync + 'static,
    M::State: Hash + Send + 'static,
{
    assert!(threads > 0, "a check needs a thread");
    let model = Arc::new(model);
    let shared = Arc::new(Shared::new(&*model, fingerprint, threads));
    let handles = (0..threads)
        .map(|thread| {
            let model = Arc::clone(&model);
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name(format!("checker-{thread}"))
                .spawn(move || search::work(&*model, fingerprint, &shared))
                .expect("cannot start a checker thread")
        })
        .collect();
    DepthFirst {
        model,
        shared,
        handles,
    }
}

/// A depth-first check, running or done (see [`depth_first`]).
pub struct DepthFirst<M: Model> {
    model: Arc<M>,
    shared: Arc<Shared<M::State>>,
    handles: Vec<JoinHandle<()>>,
}

impl<M: Model> DepthFirst<M> {
    /// How many times a thread out of work took half of a busy one's pending states.
    pub fn hand_overs(&self) -> usize {
        self.shared.jobs_taken().saturating_sub(1)
    }
}

/// stateright's fingerprint of a value.
pub fn fingerprint<T: Hash>(value: &T) -> u64 {
    let mut hasher = hasher();
    value.hash(&mut hasher);
    hasher.finish()
}

/// The hasher of stateright's fingerprints: `ahash` with the seeds of its `stable` module.
pub fn hasher() -> impl Hasher {
    const SEEDS: (u64, u64, u64, u64) = (123_456_789_987_654_321, 98_765_432_123_456_789, 0, 0);
    ahash::RandomState::with_seeds(SEEDS.0, SEEDS.1, SEEDS.2, SEEDS.3).build_hasher()
}

/// The path of action indices `indices` (the init state's first), as states and actions.
fn path_of<M>(model: &M, indices: &[usize]) -> Path<M::State, M::Action>
where
    M: Model,
    M::State: Clone + PartialEq,
    M::Action: Clone + PartialEq,
{
    let (&first, rest) = indices.split_first().expect("a path has its init state");
    let init = model.init_states().swap_remove(first);
    let mut state = init.clone();
    let mut taken = Vec::with_capacity(rest.len());
    let mut actions = Vec::new();
    for &index in rest {
        model.actions(&state, &mut actions);
        let action = actions.swap_remove(index);
        actions.clear();
        state = model
            .next_state(&state, action.clone())
            .expect("a discovery's path replays");
        taken.push(action);
    }
    Path::from_actions(model, init, &taken).expect("a discovery's path replays")
}

impl<M> Checker<M> for DepthFirst<M>
where
    M: Model,
    M::State: Hash,
{
    fn model(&self) -> &M {
        &self.model
    }

    fn state_count(&self) -> usize {
        self.shared.counts.states.load(Ordering::Relaxed)
    }

    fn unique_state_count(&self) -> usize {
        self.shared.counts.unique.load(Ordering::Relaxed)
    }

    fn max_depth(&self) -> usize {
        self.shared.counts.max_depth.load(Ordering::Relaxed)
    }

    fn discoveries(&self) -> HashMap<&'static str, Path<M::State, M::Action>>
    where
        M::State: Clone + PartialEq,
        M::Action: Clone + PartialEq,
    {
        let properties = self.model.properties();
        self.shared
            .discoveries()
            .into_iter()
            .map(|(i, indices)| (properties[i].name, path_of(&*self.model, &indices)))
            .collect()
    }

    fn handles(&mut self) -> Vec<JoinHandle<()>> {
        std::mem::take(&mut self.handles)
    }

    fn is_done(&self) -> bool {
        self.shared.is_done()
    }
}
