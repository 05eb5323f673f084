//! Verdicts: `holds`, `VIOLATED` with the evidence, or `not observable` with the reason —
//! and the rules that turn what was seen into them. Pure functions, tested below.
//!
//! What each invariant's outside evidence is, and where it is weaker than the model's:
//!
//! | invariant | outside evidence | weaker than the model because |
//! |---|---|---|
//! | `flag_is_honoured` | after a flagged request was answered, every delay of the allocation was skipped or cut short, timed as `judge/delays.rs` says (a delay whose events say otherwise than its times is *unclear*) | timing cannot see a wait shorter than half the delay; the model forbids any wait once the client has the flag. The probe cannot know when the client pulled the flag, so it judges only whole delays after the request |
//! | `delay_skipped_only_when_flagged` | a delay skipped (by time) on an allocation whose `DesiredTransition.NoShutdownDelay` was not true when read after the stop | the model ties a skip to the runner's cancellation; the probe ties it to the flag as the API shows it |
//! | `flag_scoped` | an allocation no request flagged shows no flag and waits its delays while a sibling's flagged stop skips them | only the scenarios' pairs are tried; the model tries every interleaving |
//! | `prestop_hooks_always_run` | at each kill signal the witness asked the server for its task's services and its group's, and none was listed (a restart's: the task's); and, where the event stream is read, no service deregistered after the server heard its task end | needs the witness on the nodes and an anonymous read of services; a deregistration the server shows before the client has made it would pass. Without the witness it is *not observable* unless the stream shows it violated |
//! | `jobspec_unchanged` | `GET /v1/job/:id` and the latest of `/versions` after the stop equal the job before it, but for `Stop`, `Status`, `Version`, indexes and times; after a start, equal to the job first run with `Stop=false` | only the versions the API lists are compared, and only after the probe's own stops |
//! | `kill_order` | each later stage's `Killing` (a poststop task's `Started`) comes no sooner than every earlier stage's last `Terminated`/`Killed` | event times are the client's records, not the signals; a client that wrote events in order but signalled out of order would pass |
//! | `kill_timeout_respected` | the witness's received kill signal to the task's `Terminated` event (SIGKILL) is at least the kill timeout, less 50 ms (a client may stamp the event with its timer's deadline, counted from when it sent the signal) | an early SIGKILL that took long to be reported could pass, as could one less than 50 ms early; needs the witness |
//! | `stop_completes` | every stopped allocation client-terminal within the delays, the kill timeouts and `--patience` (60 s), and none of its services listed | a deadline, not "eventually" |
//! | `restart_flag_one_shot` | `Restart Signaled` → `Terminated` under half the delay for the flagged restart, at least 90% of it for the next, unflagged one | quiesce's extension only |
//! | `resources_held` | the second job is not placed on the node while the stopping allocation still runs; after a flagged stop it runs within half the delay | only a static port, on one node |
//! | `stop_recorded` | the answers and `DesiredTransition` as Nomad's own tests check them | (the API contract, not a model invariant) |

use serde_json::{json, Value};

/// The names the probe reports under: the model's invariants it can judge from outside,
/// by the model's own definition (so the two cannot drift), and three checks of its own
/// that the model has no invariant for.
pub mod names {
    pub use quiesce_model::properties::names::{
        DELAY_SKIPPED_ONLY_WHEN_FLAGGED, FLAG_IS_HONOURED, FLAG_SCOPED, JOBSPEC_UNCHANGED,
        KILL_ORDER, KILL_TIMEOUT_RESPECTED, PRESTOP_HOOKS_ALWAYS_RUN, STOP_COMPLETES,
    };
    /// A flagged restart skips its delay and the next, unflagged one waits it (the model's
    /// `delay_skipped_only_when_flagged` for restarts, seen across two requests).
    pub const RESTART_FLAG_ONE_SHOT: &str = "restart_flag_one_shot";
    /// An allocation in its delay keeps its ports; a flagged stop frees them at once.
    pub const RESOURCES_HELD: &str = "resources_held";
    /// A stop answers and records what was asked.
    pub const STOP_RECORDED: &str = "stop_recorded";
    /// The probe's own checks, which are not the model's invariants.
    pub const PROBE_ONLY: [&str; 3] = [RESTART_FLAG_ONE_SHOT, RESOURCES_HELD, STOP_RECORDED];
}

/// The invariants the probe can see from outside, with what it checks for each
/// (the table at the top of this file says what the evidence is and where it is weaker
/// than the model's).
pub const INVARIANTS: [(&str, &str); 11] = [
    (names::FLAG_IS_HONOURED, "no shutdown delay is waited once a flagged request reached the allocation"),
    (names::DELAY_SKIPPED_ONLY_WHEN_FLAGGED, "a delay is skipped or cut short only on an allocation that shows the flag"),
    (names::FLAG_SCOPED, "an allocation nobody flagged neither shows the flag nor skips a delay"),
    (names::PRESTOP_HOOKS_ALWAYS_RUN, "each kill signal finds the task's and its group's services deregistered"),
    (names::JOBSPEC_UNCHANGED, "a stop stores the job unchanged but for Stop; a start restores it"),
    (names::KILL_ORDER, "the leader dies first, then other main tasks, then sidecars; poststop tasks start last"),
    (names::KILL_TIMEOUT_RESPECTED, "SIGKILL comes no sooner than the kill timeout after the kill signal"),
    (names::STOP_COMPLETES, "every stopped allocation ends client-terminal, its services gone"),
    (names::RESTART_FLAG_ONE_SHOT, "a flagged restart skips its delay; the next, unflagged one waits it"),
    (names::RESOURCES_HELD, "an allocation in its delay keeps its ports; a flagged stop frees them at once"),
    (names::STOP_RECORDED, "a stop answers and records what was asked (Migrate, Reschedule, the flag, a new evaluation)"),
];

#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    Holds(String),
    Violated(String),
    NotObservable(String),
}

impl Verdict {
    pub fn word(&self) -> &'static str {
        match self {
            Verdict::Holds(_) => "holds",
            Verdict::Violated(_) => "VIOLATED",
            Verdict::NotObservable(_) => "not observable",
        }
    }

    pub fn detail(&self) -> &str {
        match self {
            Verdict::Holds(s) | Verdict::Violated(s) | Verdict::NotObservable(s) => s,
        }
    }

    pub fn is_violation(&self) -> bool {
        matches!(self, Verdict::Violated(_))
    }

    /// Several findings about one invariant as one verdict: violated if any is, holding only
    /// if all hold (a part not observable is never reported as holding).
    pub fn all(parts: Vec<Verdict>) -> Verdict {
        if parts.is_empty() {
            return Verdict::NotObservable("nothing in this scenario shows it".into());
        }
        let texts = |pick: fn(&Verdict) -> bool| {
            parts
                .iter()
                .filter(|v| pick(v))
                .map(|v| v.detail().to_string())
                .collect::<Vec<_>>()
                .join("; ")
        };
        if parts.iter().any(Verdict::is_violation) {
            Verdict::Violated(texts(Verdict::is_violation))
        } else if parts.iter().all(|v| matches!(v, Verdict::Holds(_))) {
            Verdict::Holds(texts(|_| true))
        } else {
            let held = texts(|v| matches!(v, Verdict::Holds(_)));
            let missing = texts(|v| matches!(v, Verdict::NotObservable(_)));
            Verdict::NotObservable(if held.is_empty() {
                missing
            } else {
                format!("{missing} (seen to hold: {held})")
            })
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Judgement {
    pub invariant: &'static str,
    pub verdict: Verdict,
}

impl Judgement {
    pub fn new(invariant: &'static str, verdict: Verdict) -> Judgement {
        debug_assert!(
            INVARIANTS.iter().any(|(name, _)| *name == invariant),
            "{invariant}"
        );
        Judgement { invariant, verdict }
    }

    pub fn to_json(&self) -> Value {
        let key = if matches!(self.verdict, Verdict::NotObservable(_)) {
            "reason"
        } else {
            "evidence"
        };
        json!({"invariant": self.invariant, "verdict": self.verdict.word(), key: self.verdict.detail()})
    }
}

/// How one delay ended, judged by the time the probe saw pass across it.
#[derive(Clone, Debug, PartialEq)]
pub enum Delay {
    Waited,
    Skipped,
    /// The times cannot tell (between half the delay and 90% of it, or bounds too wide).
    Unclear,
}

/// A delay of `delay_ns` across a gap known to lie in `[low, high]`: waited if even the
/// shortest reading is 90% of the delay, skipped if even the longest is under half of it.
pub fn classify(low: i64, high: i64, delay_ns: i64) -> Delay {
    if low >= delay_ns / 10 * 9 {
        Delay::Waited
    } else if high < delay_ns / 2 {
        Delay::Skipped
    } else {
        Delay::Unclear
    }
}

/// One delay the probe watched: where (`alloc 1a2b… task leader`), the gap, how it ended.
#[derive(Clone, Debug, PartialEq)]
pub struct DelaySeen {
    pub what: String,
    pub delay_ns: i64,
    pub low: i64,
    pub high: i64,
    pub how: Delay,
    /// The allocation showed `NoShutdownDelay=true` when the probe read it after the stop.
    pub alloc_flagged: bool,
}

impl DelaySeen {
    pub fn new(what: String, delay_ns: i64, low: i64, high: i64, alloc_flagged: bool) -> DelaySeen {
        DelaySeen {
            what,
            delay_ns,
            low,
            high,
            how: classify(low, high, delay_ns),
            alloc_flagged,
        }
    }

    pub fn told(&self) -> String {
        let span = if self.low == self.high {
            ms(self.low)
        } else {
            format!("{}–{}", ms(self.low), ms(self.high))
        };
        let how = match self.how {
            Delay::Waited => "waited",
            Delay::Skipped => "skipped",
            Delay::Unclear => "unclear",
        };
        format!(
            "{}: {how} ({span} of a {} delay)",
            self.what,
            ms(self.delay_ns)
        )
    }
}

pub fn ms(ns: i64) -> String {
    if ns.abs() >= 10_000_000 {
        format!("{} ms", ns / 1_000_000)
    } else {
        format!("{:.1} ms", ns as f64 / 1e6)
    }
}

// invariant: flag_is_honoured
/// The flag reached these allocations (a flagged request was answered): no delay of theirs
/// may have been waited.
pub fn flag_is_honoured(delays: &[DelaySeen], request: &str) -> Verdict {
    Verdict::all(
        delays
            .iter()
            .map(|d| match d.how {
                Delay::Waited => Verdict::Violated(format!("after {request}, {}", d.told())),
                Delay::Skipped => Verdict::Holds(d.told()),
                Delay::Unclear => Verdict::NotObservable(d.told()),
            })
            .collect(),
    )
}

// invariant: delay_skipped_only_when_flagged
/// A delay skipped (or cut short) on an allocation that did not show the flag.
pub fn delay_skipped_only_when_flagged(delays: &[DelaySeen]) -> Verdict {
    Verdict::all(
        delays
            .iter()
            .map(|d| match (&d.how, d.alloc_flagged) {
                (Delay::Skipped, false) => Verdict::Violated(format!(
                    "{}, but the allocation never showed DesiredTransition.NoShutdownDelay=true",
                    d.told()
                )),
                (Delay::Unclear, _) => Verdict::NotObservable(d.told()),
                _ => Verdict::Holds(d.told()),
            })
            .collect(),
    )
}

// invariant: flag_scoped
/// An allocation no request flagged: it must not show the flag and must wait its delays.
pub fn flag_scoped(alloc: &str, shows_flag: bool, delays: &[DelaySeen]) -> Verdict {
    let mut parts = vec![if shows_flag {
        Verdict::Violated(format!(
            "allocation {alloc}, never flagged, shows DesiredTransition.NoShutdownDelay=true"
        ))
    } else {
        Verdict::Holds(format!("allocation {alloc} shows no flag"))
    }];
    parts.extend(delays.iter().map(|d| match d.how {
        Delay::Skipped => Verdict::Violated(format!("{} though no request flagged it", d.told())),
        Delay::Waited => Verdict::Holds(d.told()),
        Delay::Unclear => Verdict::NotObservable(d.told()),
    }));
    Verdict::all(parts)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: i64 = 1_000_000_000;

    #[test]
    fn the_probe_reports_under_the_models_names() {
        let model: Vec<&str> = quiesce_model::properties::INVARIANTS
            .iter()
            .map(|(name, _)| *name)
            .collect();
        let mut seen = std::collections::BTreeSet::new();
        for (name, _) in INVARIANTS {
            assert!(seen.insert(name), "{name} is listed twice");
            assert!(
                model.contains(&name) ^ names::PROBE_ONLY.contains(&name),
                "{name} is neither one of the model's invariants nor one of the probe's own checks"
            );
        }
        assert_eq!(seen.len(), INVARIANTS.len());
    }

    #[test]
    fn a_delay_is_waited_skipped_or_unclear_with_a_margin_each_way() {
        assert_eq!(classify(SECOND, SECOND, SECOND), Delay::Waited);
        assert_eq!(classify(SECOND / 10 * 9, 2 * SECOND, SECOND), Delay::Waited);
        assert_eq!(classify(0, SECOND / 2 - 1, SECOND), Delay::Skipped);
        assert_eq!(classify(0, SECOND / 2, SECOND), Delay::Unclear);
        assert_eq!(
            classify(SECOND / 10 * 8, SECOND / 10 * 8, SECOND),
            Delay::Unclear
        );
    }

    fn seen(how_ns: i64, flagged: bool) -> DelaySeen {
        DelaySeen::new("task leader".into(), SECOND, how_ns, how_ns, flagged)
    }

    #[test]
    fn a_waited_delay_after_the_flag_violates_flag_is_honoured_and_names_the_request() {
        let verdict = flag_is_honoured(
            &[seen(3_000_000, true), seen(SECOND, true)],
            "DELETE /v1/job/x",
        );
        assert!(verdict.is_violation(), "{verdict:?}");
        assert!(
            verdict.detail().contains("DELETE /v1/job/x") && verdict.detail().contains("waited")
        );
        assert_eq!(
            flag_is_honoured(&[seen(3_000_000, true)], "r").word(),
            "holds"
        );
    }

    #[test]
    fn a_part_not_observable_is_never_reported_as_holding() {
        let verdict = flag_is_honoured(&[seen(3_000_000, true), seen(SECOND * 7 / 10, true)], "r");
        assert_eq!(verdict.word(), "not observable");
        assert!(verdict.detail().contains("seen to hold"));
        assert_eq!(Verdict::all(vec![]).word(), "not observable");
    }

    #[test]
    fn a_skip_on_an_allocation_without_the_flag_is_named() {
        let verdict = delay_skipped_only_when_flagged(&[seen(3_000_000, false)]);
        assert!(
            verdict.is_violation() && verdict.detail().contains("NoShutdownDelay"),
            "{verdict:?}"
        );
        assert_eq!(
            delay_skipped_only_when_flagged(&[seen(3_000_000, true)]).word(),
            "holds"
        );
        assert_eq!(
            delay_skipped_only_when_flagged(&[seen(SECOND, false)]).word(),
            "holds"
        );
    }

    #[test]
    fn an_unflagged_allocation_that_shows_the_flag_or_skips_breaks_scoping() {
        assert!(flag_scoped("b", true, &[seen(SECOND, false)]).is_violation());
        assert!(flag_scoped("b", false, &[seen(1_000_000, false)]).is_violation());
        assert_eq!(
            flag_scoped("b", false, &[seen(SECOND, false)]).word(),
            "holds"
        );
    }
}
