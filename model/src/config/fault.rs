//! The planted faults: one careless behaviour each, and the invariant meant to catch it.

use std::fmt;

/// A wrong behaviour a careless implementation could have, planted one at a time so that a
/// test can show the checker catches it. Each names the invariant meant to catch it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Fault {
    /// Under the flag, the group and task pre-kill hooks (service deregistration) are skipped.
    PreKillHooksSkippedWhenFlagged,
    /// The flag is implemented by zeroing the delays in the stored job, so `job start`
    /// brings the job back with no delays (the seed's first idea).
    FlagWrittenIntoJob,
    /// The flag skips the group delay only; task delays are still waited.
    FlagHonouredAtGroupLevelOnly,
    /// A flagged `alloc stop` flags every allocation on the same node.
    FlagAppliedToWholeNode,
    /// The client cancels the delays of every runner on the node when one update carries the
    /// flag, instead of that allocation's only.
    CancellationSharedByNode,
    /// A flag arriving during a wait is remembered for later waits but does not end the one
    /// in progress.
    DelayInProgressNotCutShort,
    /// The kill signal is sent as the task's kill begins; its services are deregistered only
    /// after its delay.
    SignalBeforeDeregistration,
    /// Under the flag, poststop tasks are not started.
    PoststopSkippedWhenFlagged,
    /// Under the flag, SIGKILL is sent at once instead of the kill signal (the seed's first
    /// request: bypass the kill timeout).
    FlagBypassesKillTimeout,
    /// Sidecars are killed together with the main tasks (Nomad before 1.3.2).
    SidecarsKilledWithMainTasks,
    /// Nomad ≥ 1.7.3: a purge deletes the allocations in the same write, so the client sees
    /// only their disappearance and never the flag (`reference/nomad-stop-path.md` §1.9).
    NomadPurgeDropsFlag,
    /// Nomad: an unflagged `alloc stop` writes `NoShutdownDelay=false`, erasing a flag the
    /// client has not pulled yet (§1.5 step 3).
    NomadAllocStopResetsFlag,
    /// Nomad: a runner restored after a client restart does not apply the flag its stored
    /// allocation already carries (§2.2).
    NomadRestoreIgnoresFlag,
    /// A stop that reaches the client before the allocation has started is ignored: the
    /// runner starts the tasks anyway.
    StopBeforeStartIgnored,
    /// A flagged restart fires the runner's one delay cancellation (the stop flag's), so the
    /// allocation's later restarts and stops skip their delays too.
    RestartFlagLeaks,
    /// A restart sends the kill signal as it begins; the task's services are deregistered
    /// only after its delay.
    RestartSignalsBeforePreKill,
    /// Nomad (2.0.x, #28465): an in-place restart waits the task's delay and has no field
    /// for the flag, so `job restart -no-shutdown-delay` waits every delay.
    NomadInplaceRestartIgnoresFlag,
    /// A restarted task runs again without its services registered.
    RestartLeavesServicesDeregistered,
    /// The restart policy restarts a crashed task whatever its attempts so far.
    RestartPastAttempts,
    /// Nomad (#23940, #18148): an allocation the server told to stop counts as terminal, so
    /// the job reads `dead` while its tasks still wait out their delays.
    NomadJobDeadAtDesiredStop,
    /// A rollout stops the old allocations it replaces through the flagged path (as if it
    /// were an operator's `-no-shutdown-delay`), so a deployment drops their drain time.
    RolloutSkipsDelay,
    /// A rollout stops every allocation of the old version in one evaluation, without
    /// waiting for the replacements to be healthy (the `update` block accepted, not
    /// honoured).
    RolloutIgnoresMaxParallel,
    /// The end of a rollout's stop asks for no evaluation: when the replacement turned
    /// healthy first, nothing wakes the deployment again and the rest are never replaced.
    RolloutStopEndNotReported,
    /// A rollout with canaries replaces the older allocations while the canaries are
    /// still unproven (the `canary` count accepted, not honoured).
    RolloutIgnoresCanaries,
}

impl Fault {
    pub const ALL: [Fault; 24] = [
        Fault::PreKillHooksSkippedWhenFlagged,
        Fault::FlagWrittenIntoJob,
        Fault::FlagHonouredAtGroupLevelOnly,
        Fault::FlagAppliedToWholeNode,
        Fault::CancellationSharedByNode,
        Fault::DelayInProgressNotCutShort,
        Fault::SignalBeforeDeregistration,
        Fault::PoststopSkippedWhenFlagged,
        Fault::FlagBypassesKillTimeout,
        Fault::SidecarsKilledWithMainTasks,
        Fault::NomadPurgeDropsFlag,
        Fault::NomadAllocStopResetsFlag,
        Fault::NomadRestoreIgnoresFlag,
        Fault::StopBeforeStartIgnored,
        Fault::RestartFlagLeaks,
        Fault::RestartSignalsBeforePreKill,
        Fault::NomadInplaceRestartIgnoresFlag,
        Fault::RestartLeavesServicesDeregistered,
        Fault::RestartPastAttempts,
        Fault::NomadJobDeadAtDesiredStop,
        Fault::RolloutSkipsDelay,
        Fault::RolloutIgnoresMaxParallel,
        Fault::RolloutStopEndNotReported,
        Fault::RolloutIgnoresCanaries,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Fault::PreKillHooksSkippedWhenFlagged => "prekill-hooks-skipped-when-flagged",
            Fault::FlagWrittenIntoJob => "flag-written-into-job",
            Fault::FlagHonouredAtGroupLevelOnly => "flag-honoured-at-group-level-only",
            Fault::FlagAppliedToWholeNode => "flag-applied-to-whole-node",
            Fault::CancellationSharedByNode => "cancellation-shared-by-node",
            Fault::DelayInProgressNotCutShort => "delay-in-progress-not-cut-short",
            Fault::SignalBeforeDeregistration => "signal-before-deregistration",
            Fault::PoststopSkippedWhenFlagged => "poststop-skipped-when-flagged",
            Fault::FlagBypassesKillTimeout => "flag-bypasses-kill-timeout",
            Fault::SidecarsKilledWithMainTasks => "sidecars-killed-with-main-tasks",
            Fault::NomadPurgeDropsFlag => "nomad-purge-drops-flag",
            Fault::NomadAllocStopResetsFlag => "nomad-alloc-stop-resets-flag",
            Fault::NomadRestoreIgnoresFlag => "nomad-restore-ignores-flag",
            Fault::StopBeforeStartIgnored => "stop-before-start-ignored",
            Fault::RestartFlagLeaks => "restart-flag-leaks",
            Fault::RestartSignalsBeforePreKill => "restart-signals-before-prekill",
            Fault::NomadInplaceRestartIgnoresFlag => "nomad-inplace-restart-ignores-flag",
            Fault::RestartLeavesServicesDeregistered => "restart-leaves-services-deregistered",
            Fault::RestartPastAttempts => "restart-past-attempts",
            Fault::NomadJobDeadAtDesiredStop => "nomad-job-dead-at-desired-stop",
            Fault::RolloutSkipsDelay => "rollout-skips-delay",
            Fault::RolloutIgnoresMaxParallel => "rollout-ignores-max-parallel",
            Fault::RolloutStopEndNotReported => "rollout-stop-end-not-reported",
            Fault::RolloutIgnoresCanaries => "rollout-ignores-canaries",
        }
    }

    /// The invariant this fault is planted to break (it may break others too).
    pub fn intended_property(self) -> &'static str {
        use crate::properties::names::*;
        match self {
            Fault::PreKillHooksSkippedWhenFlagged => PRESTOP_HOOKS_ALWAYS_RUN,
            Fault::FlagWrittenIntoJob => JOBSPEC_UNCHANGED,
            Fault::FlagHonouredAtGroupLevelOnly => FLAG_IS_HONOURED,
            Fault::FlagAppliedToWholeNode => FLAG_SCOPED,
            Fault::CancellationSharedByNode => DELAY_SKIPPED_ONLY_WHEN_FLAGGED,
            Fault::DelayInProgressNotCutShort => FLAG_IS_HONOURED,
            Fault::SignalBeforeDeregistration => PRESTOP_HOOKS_ALWAYS_RUN,
            Fault::PoststopSkippedWhenFlagged => KILL_ORDER,
            Fault::FlagBypassesKillTimeout => KILL_TIMEOUT_RESPECTED,
            Fault::SidecarsKilledWithMainTasks => KILL_ORDER,
            Fault::NomadPurgeDropsFlag => FLAG_IS_HONOURED,
            Fault::NomadAllocStopResetsFlag => FLAG_IS_HONOURED,
            Fault::NomadRestoreIgnoresFlag => FLAG_IS_HONOURED,
            Fault::StopBeforeStartIgnored => STOP_COMPLETES,
            Fault::RestartFlagLeaks => DELAY_SKIPPED_ONLY_WHEN_FLAGGED,
            Fault::RestartSignalsBeforePreKill => PRESTOP_HOOKS_ALWAYS_RUN,
            Fault::NomadInplaceRestartIgnoresFlag => FLAG_IS_HONOURED,
            Fault::RestartLeavesServicesDeregistered => SERVICES_RESTORED,
            Fault::RestartPastAttempts => RESTART_POLICY_RESPECTED,
            Fault::NomadJobDeadAtDesiredStop => JOB_DEAD_ONLY_WHEN_TASKS_ENDED,
            Fault::RolloutSkipsDelay => DELAY_SKIPPED_ONLY_WHEN_FLAGGED,
            Fault::RolloutIgnoresMaxParallel => ROLLOUT_BOUNDED,
            Fault::RolloutStopEndNotReported => STOP_COMPLETES,
            Fault::RolloutIgnoresCanaries => ROLLOUT_BOUNDED,
        }
    }

    pub fn parse(name: &str) -> Result<Self, String> {
        Fault::ALL
            .into_iter()
            .find(|fault| fault.name() == name)
            .ok_or_else(|| {
                let names: Vec<_> = Fault::ALL.iter().map(|fault| fault.name()).collect();
                format!("unknown fault '{name}'; valid faults: {}", names.join(", "))
            })
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
