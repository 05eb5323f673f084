//! Trace validation: replay an event log (JSON lines, DESIGN.md "The event log") of any
//! jobs against the model, and check every effect it records.
//!
//! The log says what each job is: its registration carries the spec (`RegisterJob`). Each
//! task group of each registration is one model instance ([`instance::Instance`]) — the
//! model has one group per job, and nothing in the stop path couples two groups but the
//! requests and evaluations of their job, which are replayed on every group of it. An
//! instance starts with the job stored and its evaluation pending, so the placements and
//! first pulls are replayed too. Entries go to the instance of their job (requests, the
//! scheduler's step) or of their allocation (bound on first sight, to its job and group);
//! `ClientRestart` to all.
//!
//! Where the model has no step for what the log shows (a batch task's restart decision,
//! which its exit code decides; a job registered again with a changed group; a job past
//! the model's bounds: more than four tasks or sixteen allocations, restart attempts past
//! six, tasks of one group with different attempts, `mode = "delay"`), the instance is
//! judged up to there, and the report says from which step and why
//! ([`instance::Judged`]), rather than passing or rejecting what follows
//! (`quiesce-conform validate-log --require-full` fails then). Every effect, judged or not,
//! keeps [`effects::EffectRules`], and, where the model follows, must be what the model's
//! step implies. Every end-to-end test's agent log is validated when the test ends.

mod effects;
mod instance;

pub use instance::Judged;

use effects::EffectRules;
use instance::Instance;
use quiesce_core::step::log::{Event, LogEntry};
use quiesce_core::step::Step;

/// Where replay stopped: the first entry that breaks a rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceError {
    /// The entry's sequence number.
    pub seq: u64,
    pub line: String,
    pub why: String,
}

impl std::fmt::Display for TraceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "step {} is not allowed by the model: {}\n  {}",
            self.seq, self.why, self.line
        )
    }
}

/// What a replay covered, per model instance.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartReport {
    pub job: String,
    pub group: String,
    /// The sequence number of the registration it models.
    pub registered_at: u64,
    /// Steps replayed against the model, and steps after the model could no longer follow.
    pub replayed: usize,
    pub unjudged: usize,
    pub allocs: usize,
    pub judged: Judged,
}

impl std::fmt::Display for PartReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "job {:?}, group {:?} (registered at step {}): {} steps replayed against the model, \
             {} allocation(s)",
            self.job, self.group, self.registered_at, self.replayed, self.allocs
        )?;
        if let Judged::Until { seq, why } = &self.judged {
            write!(
                f,
                "; cannot judge from step {seq} on ({} steps): {why}",
                self.unjudged
            )?;
        }
        Ok(())
    }
}

/// What a valid log covered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceReport {
    pub entries: usize,
    /// The entries at least one model replayed (a registration or an evaluation that
    /// several groups replay counts once).
    pub judged: usize,
    pub parts: Vec<PartReport>,
    /// Effects checked against the rules (and, where the model follows, against it).
    pub effects: usize,
}

impl TraceReport {
    /// Every entry was judged by the model.
    pub fn fully_judged(&self) -> bool {
        self.parts.iter().all(|part| part.judged == Judged::Full)
    }

    /// Steps replayed against the model, in all.
    pub fn replayed(&self) -> usize {
        self.parts.iter().map(|part| part.replayed).sum()
    }
}

/// Parses JSON lines into entries, in sequence order (the daemon appends a batch's entries
/// when it commits, so a pull's entry may follow later ones); a bad line is an error naming
/// its line number.
pub fn parse_log(text: &str) -> Result<Vec<LogEntry>, String> {
    let mut entries = text
        .lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(number, line)| {
            LogEntry::parse_line(line).map_err(|e| format!("line {}: {e}", number + 1))
        })
        .collect::<Result<Vec<_>, _>>()?;
    entries.sort_by_key(|entry| entry.seq);
    if let Some(pair) = entries.windows(2).find(|pair| pair[0].seq == pair[1].seq) {
        return Err(format!("two entries have sequence number {}", pair[0].seq));
    }
    Ok(entries)
}

/// Replays `entries` (in sequence order) against the model; the first entry that breaks a
/// rule is the error.
pub fn validate(entries: &[LogEntry]) -> Result<TraceReport, TraceError> {
    let mut trace = Trace::default();
    let mut judged = 0;
    for entry in entries {
        let before: usize = trace.instances.iter().map(|i| i.replayed).sum();
        trace.entry(entry).map_err(|why| TraceError {
            seq: entry.seq,
            line: entry.to_json_line(),
            why,
        })?;
        let after: usize = trace.instances.iter().map(|i| i.replayed).sum();
        if after > before {
            judged += 1;
        }
    }
    Ok(TraceReport {
        entries: entries.len(),
        judged,
        parts: trace
            .instances
            .iter()
            .map(|instance| PartReport {
                job: instance.job.clone(),
                group: instance.group.clone(),
                registered_at: instance.registered_at,
                replayed: instance.replayed,
                unjudged: instance.unjudged,
                allocs: instance.allocs.len(),
                judged: instance.judged.clone(),
            })
            .collect(),
        effects: trace.rules.checked,
    })
}

#[derive(Default)]
struct Trace {
    /// Every instance, oldest registration first.
    instances: Vec<Instance>,
    rules: EffectRules,
}

impl Trace {
    fn entry(&mut self, entry: &LogEntry) -> Result<(), String> {
        self.rules.check(entry)?;
        match &entry.event {
            Event::RegisterJob { spec } => {
                self.register(spec, entry.seq);
                Ok(())
            }
            Event::Step(step) => self.step(entry, step),
            Event::Deployment { status } => {
                let job = entry.job.as_deref().unwrap_or_default();
                for instance in self
                    .instances
                    .iter_mut()
                    .filter(|i| i.job == job && !i.purged)
                {
                    instance.deployment_changed(status, entry.seq);
                }
                Ok(())
            }
        }
    }

    fn register(&mut self, spec: &quiesce_core::spec::Job, seq: u64) {
        for group in &spec.task_groups {
            let current = self
                .instances
                .iter_mut()
                .rev()
                .find(|i| i.job == spec.id && i.group == group.name && !i.purged);
            match current {
                Some(instance) => instance.registered_again(spec, seq),
                None => self.instances.push(Instance::new(spec, &group.name, seq)),
            }
        }
    }

    fn step(&mut self, entry: &LogEntry, step: &Step) -> Result<(), String> {
        match step {
            Step::ClientRestart => {
                for instance in &mut self.instances {
                    instance.replay(entry, step)?;
                }
                Ok(())
            }
            Step::StopJob { job, .. } | Step::StartJob { job } => {
                let mut found = false;
                for instance in self
                    .instances
                    .iter_mut()
                    .filter(|i| &i.job == job && !i.purged)
                {
                    found = true;
                    instance.replay(entry, step)?;
                    // Purged whether or not the model still follows it: a later
                    // registration is a new instance, judged afresh.
                    if matches!(step, Step::StopJob { purge: true, .. }) {
                        instance.purged = true;
                    }
                }
                if !found {
                    self.unknown(job, entry);
                }
                Ok(())
            }
            Step::ProcessEval { job } => {
                let mut found = false;
                for instance in self
                    .instances
                    .iter_mut()
                    .filter(|i| &i.job == job && i.eval_pending())
                {
                    found = true;
                    instance.replay(entry, step)?;
                }
                if !found && !self.instances.iter().any(|i| &i.job == job) {
                    self.unknown(job, entry);
                } else if !found {
                    return Err(format!("job {job:?} has no evaluation pending"));
                }
                Ok(())
            }
            _ => self.alloc_step(entry, step),
        }
    }

    /// A step of one allocation: replayed on the instance it is bound to, or, on first
    /// sight, on the newest instance of its job and group that accepts it.
    fn alloc_step(&mut self, entry: &LogEntry, step: &Step) -> Result<(), String> {
        let alloc = step.alloc().expect("an allocation's step");
        if let Some(instance) = self.instances.iter_mut().find(|i| i.allocs.contains(alloc)) {
            return instance.replay(entry, step);
        }
        let (Some(job), Some(group)) = (&entry.job, &entry.group) else {
            return Err(format!(
                "allocation {alloc} is new, and the entry names no job and group for it"
            ));
        };
        let mut first_error = None;
        let of_group: Vec<usize> = (0..self.instances.len())
            .rev()
            .filter(|&ix| &self.instances[ix].job == job && &self.instances[ix].group == group)
            .collect();
        // The instances the model still follows, newest first: one that does not (cannot
        // judge any more) may take the allocation only if none does, so that it cannot
        // excuse a step a judging instance refuses.
        let judging: Vec<usize> = of_group
            .iter()
            .copied()
            .filter(|&ix| self.instances[ix].judging() && self.instances[ix].may_take_new_alloc())
            .collect();
        let Some(&newest) = of_group.first() else {
            self.unknown(job, entry);
            return Ok(());
        };
        if judging.is_empty() {
            let instance = &mut self.instances[newest];
            instance.route(alloc);
            return instance.replay(entry, step);
        }
        for ix in judging {
            let instance = &mut self.instances[ix];
            let mut trial = instance.clone();
            match trial.replay(entry, step) {
                Ok(()) => {
                    trial.route(alloc);
                    *instance = trial;
                    return Ok(());
                }
                Err(why) => {
                    first_error.get_or_insert(why);
                }
            }
        }
        Err(first_error.expect("at least one instance was tried"))
    }

    /// An entry of a job whose registration the log does not hold: nothing to judge it by.
    fn unknown(&mut self, job: &str, entry: &LogEntry) {
        let group = entry.group.clone().unwrap_or_default();
        let known = self
            .instances
            .iter_mut()
            .find(|i| i.job == job && i.group == group);
        let instance = match known {
            Some(instance) => instance,
            None => {
                self.instances
                    .push(Instance::unregistered(job, &group, entry.seq));
                self.instances.last_mut().expect("just pushed")
            }
        };
        if let Some(alloc) = entry.as_step().and_then(Step::alloc) {
            instance.route(alloc);
        }
        instance.unjudged += 1;
    }
}
