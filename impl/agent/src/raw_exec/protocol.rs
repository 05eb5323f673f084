//! What the agent and a supervisor say to each other, and what a supervisor leaves on disk:
//! the hello, the requests (`kill K N T`, `force K N T`, `report`), the deliveries and the
//! exit record; signal names.

use super::*;

/// The exit status file the supervisor leaves in the task directory.
pub const EXIT_FILE: &str = "exit.json";
pub const STDOUT_FILE: &str = "stdout.log";
pub const STDERR_FILE: &str = "stderr.log";
/// The task's own directory in its task directory (`NOMAD_TASK_DIR`).
pub const LOCAL_DIR: &str = "local";

/// How many of its latest deliveries a supervisor reports (a task is killed once per stop
/// and once per restart; the bound keeps a hello and an exit record small).
pub const MAX_DELIVERIES: usize = 16;

/// The longest request line a supervisor reads; a connection that sends more without a
/// newline is closed.
pub const MAX_REQUEST_LINE: usize = 64;

/// The longest kill timeout a request may carry: a day (the client caps kill timeouts far
/// lower, at its `max_kill_timeout`).
pub const MAX_KILL_TIMEOUT_NS: i64 = 86_400_000_000_000;

/// A signal the supervisor delivered to the task's process group.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delivery {
    /// The kill it belongs to (numbered from 1 for each task).
    pub kill: u32,
    pub signal: i32,
    /// The SIGKILL of a kill whose timeout fired, not its kill signal (a kill signal may be
    /// SIGKILL too).
    #[serde(default)]
    pub forced: bool,
    /// When, on CLOCK_REALTIME (the daemon's timers) and on CLOCK_MONOTONIC (a task's own
    /// record, such as the witness's).
    pub unix_ns: i64,
    pub monotonic_ns: i64,
}

/// What a supervisor says first on every connection.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    pub pid: i32,
    #[serde(default)]
    pub delivered: Vec<Delivery>,
    /// It carries out `signal N` (a user's signal). A supervisor started by an older agent
    /// ignores that line, so its task is not offered for one.
    #[serde(default)]
    pub user_signals: bool,
}

/// A request from the daemon to a supervisor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Request {
    /// Deliver `signal` as the kill signal of kill number `kill`, unless that kill (or a
    /// later one) has had its signal already. `timeout_ns` is the kill's timeout: SIGKILL
    /// is not delivered sooner after this signal.
    Kill {
        kill: u32,
        signal: i32,
        timeout_ns: i64,
    },
    /// SIGKILL the process group: kill `kill`'s timeout fired (once per kill). `signal` and
    /// `timeout_ns` are the kill's: should its signal never have gone out (a daemon that
    /// crashed after storing the step, before sending it), it goes out now and SIGKILL
    /// follows `timeout_ns` later.
    Force {
        kill: u32,
        signal: i32,
        timeout_ns: i64,
    },
    /// Reap the task once it has exited, record its exit and send it (the `exit` line).
    /// The supervisor waits for this (or for its daemon to go) before it does that work, so
    /// that in a stop of many tasks the daemon asks for the exits once it has sent its
    /// signals, and the reaping and recording do not compete with them for the CPU.
    Report,
    /// Deliver `signal` to the process group now, once: a user's `alloc signal`, not a kill
    /// (no kill number; it is not among the deliveries a hello reports, which are the
    /// stop path's, so no number of them can push a kill's record out).
    Signal { signal: i32 },
}

impl Request {
    pub fn line(&self) -> String {
        match self {
            Request::Kill {
                kill,
                signal,
                timeout_ns,
            } => format!("kill {kill} {signal} {timeout_ns}\n"),
            Request::Force {
                kill,
                signal,
                timeout_ns,
            } => format!("force {kill} {signal} {timeout_ns}\n"),
            Request::Report => "report\n".to_string(),
            Request::Signal { signal } => format!("signal {signal}\n"),
        }
    }

    /// A request line (with or without its newline); `None` for anything else. Kill numbers
    /// start at 1, signals are 1–64, a kill timeout is at most [`MAX_KILL_TIMEOUT_NS`].
    pub fn parse(line: &str) -> Option<Request> {
        let mut words = line.split_ascii_whitespace();
        let verb = words.next()?;
        let signal_number = |word: &str| word.parse().ok().filter(|s| (1..=64).contains(s));
        if verb == "report" {
            return words.next().is_none().then_some(Request::Report);
        }
        if verb == "signal" {
            let signal = signal_number(words.next()?)?;
            return words.next().is_none().then_some(Request::Signal { signal });
        }
        let kill: u32 = words.next()?.parse().ok().filter(|&k| k > 0)?;
        let signal: i32 = signal_number(words.next()?)?;
        let timeout_ns: i64 = words
            .next()?
            .parse()
            .ok()
            .filter(|t| (0..=MAX_KILL_TIMEOUT_NS).contains(t))?;
        let request = match verb {
            "kill" => Request::Kill {
                kill,
                signal,
                timeout_ns,
            },
            "force" => Request::Force {
                kill,
                signal,
                timeout_ns,
            },
            _ => return None,
        };
        words.next().is_none().then_some(request)
    }
}

/// What the supervisor writes to `exit.json`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExitRecord {
    pub exit_code: i32,
    pub signal: Option<i32>,
    /// Why the task could not start, if it could not.
    pub error: Option<String>,
    /// The signals the supervisor delivered, oldest first (at most [`MAX_DELIVERIES`]).
    #[serde(default)]
    pub delivered: Vec<Delivery>,
    /// Requests refused because their kill had been carried out already.
    #[serde(default)]
    pub refused: u32,
}

impl ExitRecord {
    pub fn result(&self) -> ExitResult {
        ExitResult {
            exit_code: self.exit_code,
            signal: self.signal,
            failure: self.error.clone(),
        }
    }

    /// A task that could not be started or watched, or whose status is unknown.
    pub fn failed(exit_code: i32, why: String) -> ExitRecord {
        ExitRecord {
            exit_code,
            signal: None,
            error: Some(why),
            delivered: Vec::new(),
            refused: 0,
        }
    }
}

/// A signal's number from its name (`SIGINT`, `INT`, `sigterm`…).
pub fn signal_number(name: &str) -> Option<i32> {
    let upper = name.trim().to_ascii_uppercase();
    let bare = upper.strip_prefix("SIG").unwrap_or(&upper);
    Some(match bare {
        "HUP" => libc::SIGHUP,
        "INT" => libc::SIGINT,
        "QUIT" => libc::SIGQUIT,
        "KILL" => libc::SIGKILL,
        "USR1" => libc::SIGUSR1,
        "USR2" => libc::SIGUSR2,
        "TERM" => libc::SIGTERM,
        "ALRM" => libc::SIGALRM,
        "WINCH" => libc::SIGWINCH,
        "CONT" => libc::SIGCONT,
        "STOP" => libc::SIGSTOP,
        "TSTP" => libc::SIGTSTP,
        "ABRT" | "IOT" => libc::SIGABRT,
        "BUS" => libc::SIGBUS,
        "CHLD" => libc::SIGCHLD,
        "FPE" => libc::SIGFPE,
        "ILL" => libc::SIGILL,
        "IO" | "POLL" => libc::SIGIO,
        "PIPE" => libc::SIGPIPE,
        "PROF" => libc::SIGPROF,
        "PWR" => libc::SIGPWR,
        "SEGV" => libc::SIGSEGV,
        "STKFLT" => libc::SIGSTKFLT,
        "SYS" => libc::SIGSYS,
        "TRAP" => libc::SIGTRAP,
        "TTIN" => libc::SIGTTIN,
        "TTOU" => libc::SIGTTOU,
        "URG" => libc::SIGURG,
        "VTALRM" => libc::SIGVTALRM,
        "XCPU" => libc::SIGXCPU,
        "XFSZ" => libc::SIGXFSZ,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signal_names_resolve_with_or_without_the_prefix() {
        assert_eq!(signal_number("SIGINT"), Some(libc::SIGINT));
        assert_eq!(signal_number("term"), Some(libc::SIGTERM));
        assert_eq!(signal_number("SIGNOPE"), None);
    }

    #[test]
    fn requests_read_back_as_written_and_nothing_else_is_one() {
        for request in [
            Request::Kill {
                kill: 3,
                signal: libc::SIGTERM,
                timeout_ns: 5_000_000_000,
            },
            Request::Force {
                kill: 1,
                signal: libc::SIGINT,
                timeout_ns: 0,
            },
            Request::Report,
            Request::Signal {
                signal: libc::SIGUSR1,
            },
        ] {
            assert_eq!(Request::parse(&request.line()), Some(request));
        }
        for line in [
            "kill 0 2 0",
            "kill 1 0 0",
            "kill 1 65 0",
            "kill 1 2",
            "kill 1 2 -1",
            "kill 1 2 86400000000001",
            "kill 1 2 3 4",
            "signal 0",
            "signal 65",
            "signal 2 3",
            "signal",
            "signal -",
            "force -1 2 0",
            "force 1",
            "report 1",
            "",
        ] {
            assert_eq!(Request::parse(line), None, "{line:?}");
        }
    }

    #[test]
    fn socket_names_are_stable_and_distinct() {
        let a = socket_name(Path::new("/data/alloc/a/web"));
        assert_eq!(a, socket_name(Path::new("/data/alloc/a/web")));
        assert_ne!(a, socket_name(Path::new("/data/alloc/b/web")));
    }
}
