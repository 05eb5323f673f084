//! `quiesce-witness`: a task that records, from inside the process, what a stop did to it
//! (DESIGN.md, "Judged by what processes experience"). Run it as a raw_exec task; it writes
//! one JSON object per line to its standard output (the task's `stdout.log`):
//!
//! * at start: `{"event":"start","pid":P,"monotonic_ns":T,"blocked":[…],"ignored":[…],
//!   "alloc":"…","task":"…"}` — the signals it inherited blocked and ignored, read before
//!   anything in this program could change them (Rust's runtime ignores SIGPIPE before
//!   `main`, so they are read by a constructor that runs first);
//! * for every signal it receives: `{"event":"signal","signal":N,"name":"SIGINT",
//!   "monotonic_ns":T,"services":{"name":count,…}}` — when (CLOCK_MONOTONIC, the clock of
//!   Python's `time.monotonic()` and of the supervisor's delivery record), and how many
//!   registrations of each of its allocation's services (`--services`) the agent listed
//!   right then (`"services":null` and an `"error"` if the agent could not be asked); a
//!   kill signal it runs on after is marked `"ran_on":true`;
//! * as it ends: `{"event":"exit","monotonic_ns":T,"signal":N}` (it dies of that signal)
//!   or `{"event":"exit","monotonic_ns":T,"code":C}`.
//!
//! Its kill signal (`--kill-signal`, default SIGINT as Nomad's `kill_signal`) ends it — at
//! once, or after `--drain` (still recording, so a second signal would show), by dying of
//! that signal as a program with the default disposition does. `--ignore-kill-signal`
//! records it and runs on (until SIGKILL, which no process can record: the supervisor's
//! `exit.json` has it); `--ignore-kill-signal-if FILE` does so only if FILE exists when the
//! signal comes (relative to its working directory: under raw_exec, the task directory),
//! so that a test can let one run of a restarted task die of its signal and the next run
//! on. `--exit-after D` ends it on its own after D with `--exit-code`. Other signals are
//! recorded and otherwise ignored. Durations are Go's (`500ms`, `2s`).
//!
//! Every record also carries `unix_ns` (CLOCK_REALTIME, the clock of the task events the
//! agent reports), so that a client with the API alone (the probe) can set what the task
//! received against the events.
//!
//! `--agent URL` (default `$QUIESCE_AGENT`, then `$NOMAD_ADDR`) is the agent it asks for
//! the services, in `--namespace` (default `$NOMAD_NAMESPACE`, which Nomad sets); its
//! allocation is `$NOMAD_ALLOC_ID`.
//!
//! For crash tests, `--crash-agent PID:FILE` makes the first witness to get its kill signal
//! (the one that creates FILE) `kill -9` the agent PID at that moment, before anything
//! else; its record then says `"crashed_agent":true` and lists no services (there is no
//! agent left to ask).

use std::io::{Read, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The signals the process inherited blocked and ignored, as bit masks (bit n-1 for signal
/// n), read by [`read_inherited`] before `main`.
static INHERITED_BLOCKED: AtomicU64 = AtomicU64::new(0);
static INHERITED_IGNORED: AtomicU64 = AtomicU64::new(0);

/// Runs before Rust's runtime (which sets SIGPIPE to ignored) and `main`: the C library
/// calls the functions of `.init_array` first.
#[used]
#[link_section = ".init_array"]
static READ_INHERITED: extern "C" fn() = read_inherited;

/// The kernel's `struct sigaction` as `rt_sigaction` takes it (x86_64 and aarch64).
#[repr(C)]
struct KernelSigaction {
    handler: libc::sighandler_t,
    flags: libc::c_ulong,
    restorer: usize,
    mask: u64,
}

extern "C" fn read_inherited() {
    // SAFETY: sigprocmask only reads the mask into a local set; rt_sigaction only reads each
    // signal's action into a local of the kernel's layout.
    unsafe {
        let mut blocked = std::mem::zeroed::<libc::sigset_t>();
        libc::sigprocmask(libc::SIG_BLOCK, std::ptr::null(), &mut blocked);
        let mut ignored = 0u64;
        let mut blocked_bits = 0u64;
        for signal in 1..=64 {
            if libc::sigismember(&blocked, signal) == 1 {
                blocked_bits |= 1 << (signal - 1);
            }
            let mut action = std::mem::zeroed::<KernelSigaction>();
            let read = libc::syscall(
                libc::SYS_rt_sigaction,
                signal,
                std::ptr::null::<KernelSigaction>(),
                &mut action as *mut KernelSigaction,
                std::mem::size_of::<u64>(),
            );
            if read == 0 && action.handler == libc::SIG_IGN {
                ignored |= 1 << (signal - 1);
            }
        }
        INHERITED_BLOCKED.store(blocked_bits, Ordering::Relaxed);
        INHERITED_IGNORED.store(ignored, Ordering::Relaxed);
    }
}

/// Signals the witness waits for and records: every one a process can catch, but those
/// that report faults of its own.
const RECORDED: [libc::c_int; 22] = [
    libc::SIGHUP,
    libc::SIGINT,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
    libc::SIGPIPE,
    libc::SIGALRM,
    libc::SIGTERM,
    libc::SIGSTKFLT,
    libc::SIGCHLD,
    libc::SIGCONT,
    libc::SIGTSTP,
    libc::SIGTTIN,
    libc::SIGTTOU,
    libc::SIGURG,
    libc::SIGXCPU,
    libc::SIGXFSZ,
    libc::SIGVTALRM,
    libc::SIGPROF,
    libc::SIGWINCH,
    libc::SIGIO,
    libc::SIGPWR,
];

fn signal_name(signal: libc::c_int) -> String {
    // SAFETY: strsignal returns a static or thread-local string for any number.
    let description = unsafe { std::ffi::CStr::from_ptr(libc::strsignal(signal)) };
    let known = [
        (libc::SIGHUP, "SIGHUP"),
        (libc::SIGINT, "SIGINT"),
        (libc::SIGQUIT, "SIGQUIT"),
        (libc::SIGUSR1, "SIGUSR1"),
        (libc::SIGUSR2, "SIGUSR2"),
        (libc::SIGPIPE, "SIGPIPE"),
        (libc::SIGALRM, "SIGALRM"),
        (libc::SIGTERM, "SIGTERM"),
        (libc::SIGCHLD, "SIGCHLD"),
        (libc::SIGCONT, "SIGCONT"),
        (libc::SIGTSTP, "SIGTSTP"),
        (libc::SIGWINCH, "SIGWINCH"),
    ];
    known.iter().find(|(n, _)| *n == signal).map_or_else(
        || description.to_string_lossy().into_owned(),
        |(_, name)| name.to_string(),
    )
}

fn monotonic_ns() -> i64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    now.tv_sec * 1_000_000_000 + now.tv_nsec
}

fn unix_ns() -> i64 {
    quiesce_core::gotime::unix_now_ns()
}

fn bits(mask: u64) -> Vec<u32> {
    (1..=64).filter(|n| mask & (1 << (n - 1)) != 0).collect()
}

struct Options {
    services: Vec<String>,
    agent: Option<String>,
    namespace: Option<String>,
    kill_signal: libc::c_int,
    drain_ns: i64,
    ignore_kill_signal: bool,
    ignore_kill_signal_if: Option<std::path::PathBuf>,
    exit_after_ns: Option<i64>,
    exit_code: i32,
    crash_agent: Option<(i32, std::path::PathBuf)>,
    fork_child: bool,
}

const USAGE: &str =
    "usage: quiesce-witness [--services A,B] [--agent URL] [--namespace NS] [--kill-signal SIG] \
[--drain DURATION] [--ignore-kill-signal] [--ignore-kill-signal-if FILE] \
[--exit-after DURATION] [--exit-code N] \
[--crash-agent PID:FILE] [--fork-child]";

const HELP: &str = "A raw_exec task that records, as JSON lines on its stdout, the signals it
inherited blocked and ignored, every signal it receives (when, on CLOCK_MONOTONIC, and how
many registrations of each --services name for its allocation, $NOMAD_ALLOC_ID, the agent
at --agent ($QUIESCE_AGENT, $NOMAD_ADDR) listed in --namespace ($NOMAD_NAMESPACE)), and
how it ended. Every record also carries `unix_ns` (CLOCK_REALTIME).
  --kill-signal SIG       its kill signal (default SIGINT): it dies of it, at once or
                          after --drain; other signals are recorded and ignored
  --drain DURATION        keep running (and recording) this long after the kill signal
  --ignore-kill-signal    record the kill signal and run on
  --ignore-kill-signal-if FILE
                          the same, if FILE exists when the kill signal comes
  --exit-after DURATION   end on its own after this long, with --exit-code (default 0)
  --crash-agent PID:FILE  the first witness to get its kill signal (the one that creates
                          FILE) kill -9s PID, the agent
  --fork-child            start a child, /bin/sleep, in a session of its own (setsid: out of
                          the task's process group), its pid in the start record as `child`";

fn parse_options(args: &[String]) -> Result<Options, String> {
    let mut options = Options {
        services: Vec::new(),
        agent: std::env::var("QUIESCE_AGENT")
            .or_else(|_| std::env::var("NOMAD_ADDR"))
            .ok(),
        namespace: std::env::var("NOMAD_NAMESPACE").ok(),
        kill_signal: libc::SIGINT,
        drain_ns: 0,
        ignore_kill_signal: false,
        ignore_kill_signal_if: None,
        exit_after_ns: None,
        exit_code: 0,
        crash_agent: None,
        fork_child: false,
    };
    let mut args = args.iter();
    while let Some(flag) = args.next() {
        let mut value = |what: &str| {
            args.next()
                .cloned()
                .ok_or_else(|| format!("{flag} needs {what}"))
        };
        let duration = |text: String| {
            quiesce_core::gotime::parse_go_duration(&text)
                .filter(|ns| *ns >= 0)
                .ok_or_else(|| format!("{flag}: {text:?} is not a duration such as 500ms or 2s"))
        };
        match flag.as_str() {
            "--services" => {
                options.services = value("a list of service names")?
                    .split(',')
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
                    .collect()
            }
            "--agent" => options.agent = Some(value("an address")?),
            "--namespace" => options.namespace = Some(value("a namespace")?),
            "--kill-signal" => {
                let name = value("a signal name")?;
                options.kill_signal = signal_number(&name)
                    .ok_or_else(|| format!("--kill-signal: unknown signal {name:?}"))?;
            }
            "--drain" => options.drain_ns = duration(value("a duration")?)?,
            "--ignore-kill-signal" => options.ignore_kill_signal = true,
            "--ignore-kill-signal-if" => {
                options.ignore_kill_signal_if = Some(value("a file")?.into());
            }
            "--fork-child" => options.fork_child = true,
            "--exit-after" => options.exit_after_ns = Some(duration(value("a duration")?)?),
            "--exit-code" => {
                let text = value("a number")?;
                options.exit_code = text
                    .parse()
                    .map_err(|_| format!("--exit-code: {text:?} is not a number"))?;
            }
            "--crash-agent" => {
                let text = value("PID:FILE")?;
                let (pid, file) = text
                    .split_once(':')
                    .and_then(|(pid, file)| Some((pid.parse().ok()?, file)))
                    .ok_or_else(|| format!("--crash-agent: {text:?} is not PID:FILE"))?;
                options.crash_agent = Some((pid, file.into()));
            }
            "--help" | "-h" => {
                println!("{USAGE}\n\n{HELP}");
                std::process::exit(0);
            }
            other => return Err(format!("unknown option {other:?}\n{USAGE}")),
        }
    }
    Ok(options)
}

/// Writes one record, stamped with `unix_ns` (CLOCK_REALTIME, the clock of the agent's task
/// event times, which the probe compares it with) unless it has its own.
fn emit(mut record: serde_json::Value) {
    if record.get("unix_ns").is_none() {
        record["unix_ns"] = unix_ns().into();
    }
    let mut line = record.to_string();
    line.push('\n');
    let mut out = std::io::stdout().lock();
    // The task's stdout is a file: a failed write has nowhere else to be told.
    let _ = out.write_all(line.as_bytes());
    let _ = out.flush();
}

/// `GET path` on the agent, HTTP/1.0 so the answer ends with the connection; the body.
fn http_get(agent: &str, path: &str) -> Result<String, String> {
    let host = agent
        .strip_prefix("http://")
        .ok_or_else(|| format!("{agent:?} is not an http:// address"))?
        .trim_end_matches('/');
    let address = std::net::ToSocketAddrs::to_socket_addrs(host)
        .map_err(|e| format!("{host}: {e}"))?
        .next()
        .ok_or_else(|| format!("{host}: no address"))?;
    let timeout = Duration::from_secs(2);
    let mut stream = std::net::TcpStream::connect_timeout(&address, timeout)
        .map_err(|e| format!("connecting to {host}: {e}"))?;
    stream
        .set_read_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n").map_err(|e| e.to_string())?;
    let mut answer = Vec::new();
    stream
        .take(4 << 20)
        .read_to_end(&mut answer)
        .map_err(|e| format!("reading from {host}: {e}"))?;
    let answer = String::from_utf8_lossy(&answer);
    let (head, body) = answer
        .split_once("\r\n\r\n")
        .ok_or("an answer without headers")?;
    if !head.starts_with("HTTP/1.1 200") && !head.starts_with("HTTP/1.0 200") {
        return Err(head.lines().next().unwrap_or("").to_string());
    }
    Ok(body.to_string())
}

/// How many registrations of each service belong to this allocation, as the agent lists
/// them now.
fn services_now(options: &Options, alloc: &str) -> Result<serde_json::Value, String> {
    if options.services.is_empty() {
        return Ok(serde_json::json!({}));
    }
    let agent = options
        .agent
        .as_deref()
        .ok_or("no agent address (--agent, $QUIESCE_AGENT)")?;
    let mut counts = serde_json::Map::new();
    for name in &options.services {
        let path = match &options.namespace {
            Some(namespace) => format!("/v1/service/{name}?namespace={namespace}"),
            None => format!("/v1/service/{name}"),
        };
        let body = http_get(agent, &path)?;
        let listed: Vec<serde_json::Value> =
            serde_json::from_str(&body).map_err(|e| format!("/v1/service/{name}: {e}"))?;
        let ours = listed
            .iter()
            .filter(|registration| registration["AllocID"] == alloc)
            .count();
        counts.insert(name.clone(), ours.into());
    }
    Ok(counts.into())
}

/// `--crash-agent`: the first witness to create the flag file kills the agent. Whether this
/// one did.
fn crash_agent(options: &Options) -> bool {
    let Some((pid, flag)) = &options.crash_agent else {
        return false;
    };
    let created = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(flag)
        .is_ok();
    if created {
        // SAFETY: kill has no memory-safety preconditions.
        unsafe { libc::kill(*pid, libc::SIGKILL) };
    }
    created
}

/// Dies of `signal` as a process with its default disposition would; if that disposition
/// does not end a process (SIGCHLD, SIGCONT, …), exits with 128 + the signal.
fn die_of(signal: libc::c_int) -> ! {
    emit(serde_json::json!({"event": "exit", "monotonic_ns": monotonic_ns(), "signal": signal}));
    // SAFETY: resetting a disposition, unblocking and raising a signal have no
    // memory-safety preconditions.
    unsafe {
        libc::signal(signal, libc::SIG_DFL);
        let mut set = std::mem::zeroed::<libc::sigset_t>();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, signal);
        libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        libc::raise(signal);
    }
    std::process::exit(128 + signal)
}

/// A signal's number from its name, with or without `SIG`, in any case (`TERM`, `sigint`).
fn signal_number(name: &str) -> Option<i32> {
    let upper = name.trim().to_ascii_uppercase();
    let full = if upper.starts_with("SIG") {
        upper
    } else {
        format!("SIG{upper}")
    };
    full.parse::<nix::sys::signal::Signal>()
        .ok()
        .map(|s| s as i32)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let options = match parse_options(&args) {
        Ok(options) => options,
        Err(message) => {
            eprintln!("quiesce-witness: {message}");
            std::process::exit(2);
        }
    };
    let started = monotonic_ns();
    let alloc = std::env::var("NOMAD_ALLOC_ID").unwrap_or_default();
    // A child that leaves the task's process group, as a daemonizing program's does: it must
    // still end with the task (issue 24).
    let child = options.fork_child.then(|| {
        use std::os::unix::process::CommandExt;
        let mut command = std::process::Command::new("/bin/sleep");
        command
            .arg("1000000")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null());
        // SAFETY: setsid is a system call; nothing is allocated between fork and exec.
        unsafe {
            command.pre_exec(|| {
                libc::setsid();
                Ok(())
            });
        }
        match command.spawn() {
            Ok(child) => child.id(),
            Err(error) => {
                eprintln!("quiesce-witness: --fork-child: {error}");
                std::process::exit(2);
            }
        }
    });
    // Every recorded signal is blocked and taken with sigtimedwait, one at a time, on this
    // (only) thread: none is lost to a handler's race, and two of the same kind coalesce
    // only if the second comes before the first has been taken.
    // SAFETY: sigset operations on a local set; sigprocmask on this single-threaded process.
    let waited = unsafe {
        let mut set = std::mem::zeroed::<libc::sigset_t>();
        libc::sigemptyset(&mut set);
        for signal in RECORDED {
            libc::sigaddset(&mut set, signal);
        }
        libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    };
    emit(serde_json::json!({
        "event": "start",
        "pid": std::process::id(),
        "monotonic_ns": started,
        "blocked": bits(INHERITED_BLOCKED.load(Ordering::Relaxed)),
        "ignored": bits(INHERITED_IGNORED.load(Ordering::Relaxed)),
        "alloc": alloc,
        "task": std::env::var("NOMAD_TASK_NAME").unwrap_or_default(),
        "child": child,
    }));
    let mut ending: Option<(i64, libc::c_int)> = None;
    loop {
        let now = monotonic_ns();
        let mut deadline = options.exit_after_ns.map(|after| started + after);
        if let Some((at, _)) = ending {
            deadline = Some(deadline.map_or(at, |d| d.min(at)));
        }
        if let Some(deadline) = deadline.filter(|d| *d <= now) {
            match ending {
                Some((at, signal)) if at <= deadline => die_of(signal),
                _ => {
                    emit(serde_json::json!({
                        "event": "exit", "monotonic_ns": now, "code": options.exit_code
                    }));
                    std::process::exit(options.exit_code);
                }
            }
        }
        // At most a second at a time without a deadline: nothing is missed by waking.
        let wait_ns = deadline.map_or(1_000_000_000, |d| (d - now).min(1_000_000_000));
        let timeout = libc::timespec {
            tv_sec: wait_ns / 1_000_000_000,
            tv_nsec: wait_ns % 1_000_000_000,
        };
        // SAFETY: a valid set, no siginfo wanted, a valid timeout.
        let signal = unsafe { libc::sigtimedwait(&waited, std::ptr::null_mut(), &timeout) };
        if signal <= 0 {
            continue;
        }
        let (at, at_unix) = (monotonic_ns(), unix_ns());
        let kill_signal = signal == options.kill_signal;
        // A kill signal it records and runs on after.
        let runs_on = kill_signal
            && (options.ignore_kill_signal
                || options
                    .ignore_kill_signal_if
                    .as_ref()
                    .is_some_and(|file| file.exists()));
        if kill_signal && crash_agent(&options) {
            let mut record = serde_json::json!({
                "event": "signal", "signal": signal, "name": signal_name(signal),
                "monotonic_ns": at, "unix_ns": at_unix, "services": null, "crashed_agent": true,
            });
            if runs_on {
                record["ran_on"] = true.into();
            }
            emit(record);
            if !runs_on && ending.is_none() {
                ending = Some((at + options.drain_ns, signal));
            }
            continue;
        }
        let services = services_now(&options, &alloc);
        let mut record = serde_json::json!({
            "event": "signal",
            "signal": signal,
            "name": signal_name(signal),
            "monotonic_ns": at,
            // When it came, not when the record is written (after asking for the services).
            "unix_ns": at_unix,
        });
        match services {
            Ok(counts) => record["services"] = counts,
            Err(error) => {
                record["services"] = serde_json::Value::Null;
                record["error"] = error.into();
            }
        }
        if runs_on {
            record["ran_on"] = true.into();
        }
        emit(record);
        if kill_signal && !runs_on && ending.is_none() {
            ending = Some((at + options.drain_ns, signal));
        }
    }
}
