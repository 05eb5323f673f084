//! The deployment watcher's clock: a running deployment with a group that has made no
//! progress by its `RequireProgressBy` (`update { progress_deadline }`, Nomad's default 10
//! minutes) fails, and with `auto_revert` goes back to the newest stable version
//! ([`quiesce_core::server::Server::progress_deadlines`]). The store has no timers, so a
//! thread looks at the earliest deadline at least every [`LOOK_EVERY`]: a deadline set by
//! a new deployment is seen within that, a passed one failed within that.

use super::*;

/// The longest the watcher sleeps between looks.
pub const LOOK_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

pub(super) fn run(shared: Arc<Shared>) {
    loop {
        if shared.stopping.load(std::sync::atomic::Ordering::Relaxed) {
            return;
        }
        let next = {
            let mut core = shared.core();
            if core.server.progress_deadlines(unix_now_ns()) > 0 {
                // The auto-revert's evaluation with it, as an API write processes its own.
                core.process_evals();
                if let Err(error) = core.commit_durably() {
                    say!("deployment watcher: storing a failed deployment: {error}");
                }
                shared.notify(&mut core);
            }
            core.server.next_progress_deadline()
        };
        let until_next = next.map_or(LOOK_EVERY, |at| {
            let left = at.saturating_sub(unix_now_ns()).max(0) as u64;
            // A millisecond past the deadline, so that it has passed when looked at.
            std::time::Duration::from_nanos(left)
                .saturating_add(std::time::Duration::from_millis(1))
        });
        std::thread::sleep(until_next.min(LOOK_EVERY));
    }
}
