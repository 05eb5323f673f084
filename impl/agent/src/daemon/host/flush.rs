//! The settle: what the runner's steps did, carried out on the server and stored in one
//! critical section of the core, then the kill requests and the launches it held back.

use super::DaemonHost;
use crate::daemon::persist;
use quiesce_core::client::AllocRunner;
use std::sync::Arc;

impl DaemonHost {
    pub(super) fn services(
        &mut self,
        runner: &AllocRunner,
        task: Option<usize>,
        names: &Arc<[String]>,
        on: bool,
    ) {
        if names.is_empty() {
            return;
        }
        let owner = task.map_or(String::new(), |ix| String::from(&*runner.tasks[ix].name));
        self.pending.services.push((on, owner, Arc::clone(names)));
    }

    /// Makes the pending services' changes visible on the server now, before a launch, and
    /// holds their records for the settle's commit, which stores them with the runner's
    /// progress and the steps' log entries.
    pub(super) fn apply_services(&mut self) {
        if self.pending.services.is_empty() {
            return;
        }
        let Some(shared) = self.shared.upgrade() else {
            return;
        };
        let mut core = shared.core();
        change_services(
            &shared,
            &mut core,
            &self.alloc,
            &std::mem::take(&mut self.pending.services),
        );
        let effects = core.take_writes();
        self.pending.effects.extend(effects);
        shared.notify(&mut core);
    }

    // invariant: prestop_hooks_always_run
    /// Carries out what is pending on the server, in one critical section of the core when
    /// the shell settles: the services' changes not yet applied, the report, the log
    /// entries, and one commit holding them, the services' records and the runner's state.
    /// Then, the deregistrations visible, the kill signals and SIGKILLs go to the
    /// supervisors (prestop_hooks_always_run: a flagged stop's pull so takes two critical
    /// sections of the core, the read of the record and this one).
    pub(super) fn flush(&mut self, runner: &AllocRunner) {
        if !self.pending.progress {
            let p = &self.pending;
            debug_assert!(
                p.services.is_empty()
                    && p.effects.is_empty()
                    && !p.report
                    && p.log.is_empty()
                    && p.closing.is_empty()
                    && p.requests.is_empty()
                    && p.exited.is_empty()
                    && p.launches.is_empty(),
                "work pending without an applied event"
            );
            return;
        }
        let pending = std::mem::take(&mut self.pending);
        let Some(shared) = self.shared.upgrade() else {
            return;
        };
        // Built before the core is locked: the runner is ours (its shell's lock is held).
        let stored = pending.progress.then(|| {
            let deadlines: Vec<_> = self.deadlines.iter().map(|(t, at)| (*t, *at)).collect();
            let encoded = persist::StoredRunner::encode(runner, &deadlines);
            (self.alloc.clone(), encoded)
        });
        let report = pending.report.then(|| runner.report());
        let mut writes = pending.effects;
        if let Some(index) = pending.pulled {
            let pulled = persist::Payload::Pulled(self.alloc.to_string(), index);
            writes.push((persist::Table::Pulls, self.alloc.to_string(), Some(pulled)));
        }
        let mut core = shared.core();
        change_services(&shared, &mut core, &self.alloc, &pending.services);
        // The server hears that a task runs once its process does: a launch's report waits
        // for the launch.
        // The steps first: what the report's write does that is no step (a replacement
        // failing its deployment) is logged after them, as the simulator logs it.
        for entry in pending.log {
            core.log(entry);
        }
        let mut report = report;
        if pending.launches.is_empty() {
            if let Some(report) = report.take() {
                core.server.client_report(&self.alloc, report);
            }
        }
        core.closing.extend(pending.closing);
        if !pending.requests.is_empty() {
            core.last_kill = std::time::Instant::now();
            for (ix, ..) in &pending.requests {
                let task = (self.alloc.clone(), *ix);
                if !core.dead.contains(&task) {
                    core.kills_in_flight.insert(task);
                }
            }
        }
        for ix in &pending.exited {
            let task = (self.alloc.clone(), *ix);
            core.kills_in_flight.remove(&task);
            core.dead.remove(&task);
        }
        // A launch waits for its batch to be durable (a disk sync, shared with every batch
        // committed with it), outside the core's lock; the rest is stored within 20 ms.
        let launching = if pending.launches.is_empty() {
            core.commit(stored, writes);
            None
        } else {
            Some(core.commit_durable(stored, writes))
        };
        shared.notify(&mut core);
        drop(core);
        for (_, signaller, request) in pending.requests {
            if let Err(error) = signaller.send(request) {
                crate::daemon::say!("allocation {}: {request:?}: {error}", self.alloc);
            }
        }
        if let Some((committer, ticket)) = launching {
            let stored = committer.wait(ticket);
            for (ix, name, launch) in pending.launches {
                match &stored {
                    Ok(()) => self.launch(ix, &name, &launch),
                    // Not launched: a crash could lose the record of it.
                    Err(error) => self.failed_to_start(ix, &format!("storing its launch: {error}")),
                }
            }
            if let Some(report) = report {
                let mut core = shared.core();
                core.server.client_report(&self.alloc, report);
                core.commit(None, Vec::new());
                shared.notify(&mut core);
            }
        }
    }
}

/// Registers (`true`) or deregisters an allocation's services, by owner (`""` for the
/// group), on the server, and their checks with the check runner in the same critical
/// section: a check runs only while its service is registered.
fn change_services(
    shared: &crate::daemon::Shared,
    core: &mut crate::daemon::Core,
    alloc: &str,
    services: &[(bool, String, Arc<[String]>)],
) {
    for (on, owner, names) in services {
        if *on {
            core.server.register_services(alloc, owner, names);
            if let Some(record) = core.server.store.alloc_for_client(alloc) {
                shared
                    .checks
                    .register(record, owner, names, shared.config.bind.ip());
            }
        } else {
            core.server.deregister_services(alloc, owner, names);
            shared.checks.deregister(alloc, owner, names);
        }
    }
}
