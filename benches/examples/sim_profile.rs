//! The simulator's flagged stop, outside criterion, for a profiler: `sim_profile [ALLOCS]
//! [ROUNDS] [own]` places a job of ALLOCS allocations (10,000 unless given; the `sim_stop`
//! benchmark's job), then stops a copy of it ROUNDS times (5 unless given), each in
//! `stop_once`, printing the time of each. With `own` (the third argument), it stops the
//! placed simulator itself once instead, in `stop_own`, ROUNDS unused: no copy shares its
//! tables, so the difference is what the copies' first writes cost. Counting instructions
//! is steadier than timing on a shared machine:
//!
//! ```text
//! cargo build --release -p quiesce-benches --example sim_profile
//! valgrind --tool=callgrind --toggle-collect='sim_profile::stop_once' \
//!     target/release/examples/sim_profile 1000 2
//! valgrind --tool=callgrind --toggle-collect='sim_profile::stop_own' \
//!     target/release/examples/sim_profile 1000 1 own
//! ```
//!
//! (Placing the job costs more than stopping it: the simulator evaluates the job once per
//! allocation that turns healthy, and each evaluation reads every allocation.)

use quiesce_benches::sim_job::{big_job, stop_flagged};
use quiesce_core::sim::Simulator;
use std::time::Instant;

fn main() {
    let arg = |n: usize, default: usize| {
        std::env::args().nth(n).map_or(default, |text| {
            text.parse()
                .unwrap_or_else(|_| panic!("argument {n} is not a count: {text:?}"))
        })
    };
    let (allocs, rounds) = (arg(1, 10_000), arg(2, 5));
    let started = Instant::now();
    let mut running = Simulator::new(10, 1);
    running
        .register(big_job(i64::try_from(allocs).expect("a count")))
        .unwrap();
    let steps = running.run_until_quiet(10_000_000).unwrap();
    eprintln!("placed {allocs} in {:?} ({steps} steps)", started.elapsed());
    if std::env::args().nth(3).as_deref() == Some("own") {
        stop_own(&mut running);
        return;
    }
    for _ in 0..rounds {
        drop(stop_once(&running));
    }
}

/// One stop of a copy, timed; the copy is dropped after the timing.
#[inline(never)]
fn stop_once(running: &Simulator) -> Simulator {
    let mut sim = running.clone();
    let started = Instant::now();
    let steps = stop_flagged(&mut sim);
    eprintln!("stop {:?} ({steps} steps)", started.elapsed());
    sim
}

/// One stop of the placed simulator itself, timed.
#[inline(never)]
fn stop_own(running: &mut Simulator) {
    let started = Instant::now();
    let steps = stop_flagged(running);
    eprintln!(
        "stop of the placed simulator {:?} ({steps} steps)",
        started.elapsed()
    );
}
