//! The supervisor process (`quiesce supervise DIR -- COMMAND…`): one per raw_exec task. It
//! starts the task clean (an empty signal mask, every signal at its default, in a process
//! group of its own), delivers the kill signals the daemon asks for — each kill's signal at
//! most once, however often a restarted daemon asks — and records how the task ended and
//! what it delivered, in `exit.json` and as an `exit` line on every control connection. The
//! protocol is in the parent module's documentation.
//!
//! The task runs `Config.command` with `Config.args` in its own session (`setsid`: its own
//! process group, for `killpg`, and no controlling terminal, so it cannot reach the
//! terminal of an operator who started the agent from a shell). A task's `User` is taken
//! on between fork and exec, after the task joins its cgroup: the user's groups
//! (`getgrouplist`), gid and uid, in that order, then the parent-death signal (a credential
//! change clears it). A task ended by signal n is reported `Exit Code: 128+n, Signal: n`.
//! The supervisor is one thread (a poll loop over its listening socket, its control
//! connections and a pidfd of the task), creates `exit.json` empty when it starts and
//! writes it once at the end, and ends with `_exit`; `quiesce supervise` skips the
//! command-line parser.

use super::cgroup::TaskCgroup;
use super::task_start::{reset_signals, Credentials};
use super::{Delivery, ExitRecord, Hello, Request, EXIT_FILE, MAX_DELIVERIES, MAX_REQUEST_LINE};
use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{killpg, SigHandler, Signal};
use nix::sys::socket::{recv, MsgFlags};
use nix::time::{clock_gettime, ClockId};
use nix::unistd::Pid;
use std::fs;
use std::io::{self, Write};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Command, Stdio};

/// Where the supervisor writes the task's exit status: `exit.json`, created empty when the
/// supervisor starts and written once, in one write, when the task has exited. Nobody
/// reads it before the supervisor has gone (a daemon reads it only once the supervisor's
/// socket refuses it or its connection ends), so it needs no temporary file and rename —
/// and creating it early matters: a new file is a new inode, and on a file system that has
/// seen many files come and go (every task leaves some), ext4's search for a free inode that
/// was not recently deleted costs about half a millisecond of CPU — per supervisor, in the
/// middle of a stop of many tasks. Not synced to disk: it must survive the daemon's crash,
/// not the machine's (which ends the task too), and 100 tasks exiting at once would
/// otherwise queue 100 disk syncs. Empty, it says the task has not exited (or its
/// supervisor was killed first).
struct ExitFile {
    file: io::Result<fs::File>,
}

impl ExitFile {
    fn create(dir: &Path) -> ExitFile {
        ExitFile {
            file: std::os::unix::fs::OpenOptionsExt::mode(
                fs::OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(true),
                0o600,
            )
            .open(dir.join(EXIT_FILE)),
        }
    }

    fn write(&mut self, contents: &[u8]) -> io::Result<()> {
        let file = self
            .file
            .as_mut()
            .map_err(|e| io::Error::new(e.kind(), e.to_string()))?;
        file.write_all(contents)
    }
}

/// The clock's time in nanoseconds; 0 should it fail (it cannot, for the clocks used here).
fn clock_ns(clock: ClockId) -> i64 {
    clock_gettime(clock).map_or(0, |now| now.tv_sec() * 1_000_000_000 + now.tv_nsec())
}

/// What the last poll reported for `fd`. The kernel reports only the events asked for
/// (POLLIN here), POLLERR, POLLHUP and POLLNVAL, all of which nix knows; should it report
/// others, they read as POLLIN (something happened, not an error).
fn revents(fd: &PollFd<'_>) -> PollFlags {
    fd.revents().unwrap_or(PollFlags::POLLIN)
}

/// What the supervisor has delivered to the task's process group: the source of truth for
/// "did the kill signal go out", which a restarted daemon asks for (it is in every hello).
#[derive(Default)]
struct Deliveries {
    /// The last kill whose kill signal was delivered, and the last one SIGKILLed (kills are
    /// numbered from 1, increasing): a request for an older or the same kill is refused.
    last_signalled: u32,
    last_forced: u32,
    /// When the last kill's signal was delivered (CLOCK_MONOTONIC) and its kill timeout.
    signalled_at: Option<(i64, i64)>,
    /// SIGKILL asked for before the kill timeout had run from the signal as delivered (the
    /// daemon's timer runs from when it asked, a little earlier): held until then.
    held: Option<(u32, i64)>,
    /// The latest deliveries, oldest first (at most [`MAX_DELIVERIES`]).
    recent: Vec<Delivery>,
    refused: u32,
    /// A daemon asked for the task's exit (`report`).
    report: bool,
    /// The task's cgroup, if it has one: SIGKILL reaches all of it.
    cgroup: Option<std::sync::Arc<TaskCgroup>>,
    /// The task has exited.
    exited: bool,
}

impl Deliveries {
    // invariant: kill_timeout_respected
    /// Carries out one request on the task's (unreaped) process group `pid`, at `now`
    /// (CLOCK_MONOTONIC).
    fn carry_out(&mut self, request: Request, pid: i32, now: i64) {
        if self.exited && matches!(request, Request::Signal { .. }) {
            // A user's signal that came too late: nothing to deliver, and not a kill
            // refused (`refused` counts the stop path's repeated requests).
            return;
        }
        if self.exited && request != Request::Report {
            // The task has exited: nothing reaches it any more, and nothing is recorded as
            // delivered that it did not get.
            self.refused = self.refused.saturating_add(1);
            return;
        }
        match request {
            Request::Report => self.report = true,
            Request::Signal { signal } => {
                // SAFETY: as in `deliver`: no memory-safety preconditions, and the task is
                // not reaped, so its pid is still its own.
                unsafe { libc::killpg(pid, signal) };
            }
            Request::Kill {
                kill,
                signal,
                timeout_ns,
            } => {
                if kill <= self.last_signalled {
                    // Asked again for a kill already carried out (a daemon that restarted
                    // before it stored having sent it): the task gets nothing twice.
                    self.refused = self.refused.saturating_add(1);
                    return;
                }
                self.signal(pid, kill, signal, timeout_ns);
            }
            Request::Force {
                kill,
                signal,
                timeout_ns,
            } => {
                let held = self.held.is_some_and(|(k, _)| k >= kill);
                if kill <= self.last_forced || held {
                    self.refused = self.refused.saturating_add(1);
                    return;
                }
                // A kill whose signal never went out (its daemon crashed between storing the
                // step and sending it) gets it now, and SIGKILL its timeout later.
                if kill > self.last_signalled {
                    self.signal(pid, kill, signal, timeout_ns);
                }
                // kill_timeout_respected, where the signal is delivered: never sooner than
                // the kill's timeout after its signal.
                let due = match self.signalled_at {
                    Some((at, timeout_ns)) if kill == self.last_signalled => at + timeout_ns,
                    _ => now,
                };
                if due > now {
                    self.held = Some((kill, due));
                } else {
                    self.last_forced = kill;
                    self.deliver(pid, kill, libc::SIGKILL, true);
                }
            }
        }
    }

    /// Delivers kill `kill`'s signal and notes when, with its timeout.
    fn signal(&mut self, pid: i32, kill: u32, signal: i32, timeout_ns: i64) {
        self.last_signalled = kill;
        let delivered = self.deliver(pid, kill, signal, false);
        self.signalled_at = Some((delivered, timeout_ns));
    }

    /// The task has exited: a held SIGKILL is dropped, later requests are refused.
    fn task_exited(&mut self) {
        self.exited = true;
        self.held = None;
    }

    /// When a held SIGKILL is due.
    fn due(&self) -> Option<i64> {
        self.held.map(|(_, due)| due)
    }

    /// Delivers a held SIGKILL that is due by `now`.
    fn deliver_due(&mut self, pid: i32, now: i64) {
        if let Some((kill, due)) = self.held {
            if due <= now {
                self.held = None;
                self.last_forced = kill;
                self.deliver(pid, kill, libc::SIGKILL, true);
            }
        }
    }

    /// Sends `signal` to the process group and records it; returns when (CLOCK_MONOTONIC),
    /// read just before it is sent: no process of the group can have it earlier.
    fn deliver(&mut self, pid: i32, kill: u32, signal: i32, forced: bool) -> i64 {
        let monotonic_ns = clock_ns(ClockId::CLOCK_MONOTONIC);
        let unix_ns = clock_ns(ClockId::CLOCK_REALTIME);
        // Raw: the protocol's signals are 1–64 (a request may carry a real-time one), and
        // nix's `Signal` names only 1–31, so nix's killpg cannot send them all.
        // SAFETY: killpg has no memory-safety preconditions; the task is not reaped (see
        // `serve_until_exit`), so its pid is still its own.
        unsafe { libc::killpg(pid, signal) };
        if forced {
            if let Some(cgroup) = &self.cgroup {
                cgroup.kill();
            }
        }
        if self.recent.len() == MAX_DELIVERIES {
            self.recent.remove(0);
        }
        self.recent.push(Delivery {
            kill,
            signal,
            forced,
            unix_ns,
            monotonic_ns,
        });
        monotonic_ns
    }
}

/// The supervisor process: runs `argv` in `dir` in its own process group and records how it
/// ended. Standard input is the listening control socket (see [`super::launch`]). Returns
/// the supervisor's own exit code.
pub fn supervise(dir: &Path, user: Option<&str>, cgroup: Option<&Path>, argv: &[String]) -> i32 {
    // SAFETY: fd 0 is the listening socket `launch` passed; nothing else owns it.
    let listener = unsafe { UnixListener::from_raw_fd(0) };
    let mut exit_file = ExitFile::create(dir);
    let mut record = |record: ExitRecord| {
        let json = serde_json::to_vec(&record).expect("an exit record serializes");
        match exit_file.write(&json) {
            Ok(()) => 0,
            Err(error) => {
                eprintln!("quiesce supervise: writing {EXIT_FILE}: {error}");
                1
            }
        }
    };
    let Some((program, args)) = argv.split_first() else {
        return record(ExitRecord::failed(-1, "no command to run".into()));
    };
    let credentials = match user.map(Credentials::of).transpose() {
        Ok(credentials) => credentials,
        Err(error) => return record(ExitRecord::failed(127, error)),
    };
    // Opened before the fork: the task joins it between fork and exec.
    let cgroup = match cgroup.map(TaskCgroup::open).transpose() {
        Ok(cgroup) => cgroup.map(std::sync::Arc::new),
        Err(error) => {
            return record(ExitRecord::failed(
                127,
                format!("the task's cgroup: {error}"),
            ))
        }
    };
    let joins = cgroup.clone();
    let mut command = Command::new(program);
    // Its own session (so its own process group, the pid, for killpg) with no controlling
    // terminal: a task cannot reach the terminal of an operator who started the agent from
    // a shell (nor, as another user, type into it), as Nomad's executor does.
    command.args(args).stdin(Stdio::null());
    // SAFETY: setsid, reset_signals, the credential calls and prctl are system calls only
    // (async-signal-safe: nix's thin wrappers, which do not allocate; an error becomes an
    // `io::Error` of its errno, which does not either), on data prepared before the fork.
    // The user's groups, gid and uid go first (a credential change clears the parent-death
    // signal). If the supervisor is killed (a daemon giving up on its handshake), the task
    // goes with it rather than running on unsupervised.
    unsafe {
        command.pre_exec(move || {
            nix::unistd::setsid()?;
            reset_signals()?;
            // Into its cgroup while still root (the user could not write cgroup.procs).
            if let Some(cgroup) = &joins {
                cgroup.join()?;
            }
            if let Some(credentials) = &credentials {
                credentials.take_on()?;
            }
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)?;
            Ok(())
        });
    }
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(error) => {
            return record(ExitRecord::failed(
                127,
                format!("failed to start {program:?}: {error}"),
            ))
        }
    };
    let pid = child.id() as i32;
    // The supervisor must not die of a write to a daemon that went away (a control
    // connection closed before its hello was read).
    // SAFETY: ignoring a signal installs no handler: nothing runs in a signal context.
    unsafe {
        let _ = nix::sys::signal::signal(Signal::SIGPIPE, SigHandler::SigIgn);
    }
    // The task's exit, as a descriptor to poll: readable once it has exited, while its pid
    // stays its own (unreaped) until this process reaps it after the loop.
    let pidfd = match super::watcher::pidfd_open(pid) {
        Ok(pidfd) => pidfd,
        Err(error) => {
            let _ = child.kill();
            let _ = child.wait();
            return record(ExitRecord::failed(
                -1,
                format!("watching the task: {error}"),
            ));
        }
    };
    let mut deliveries = Deliveries {
        cgroup: cgroup.clone(),
        ..Deliveries::default()
    };
    let mut connections = serve_until_exit(&listener, &pidfd, pid, &mut deliveries);
    let status = match child.wait() {
        Ok(status) => status,
        Err(error) => {
            return record(ExitRecord::failed(
                -1,
                format!("waiting for the task: {error}"),
            ))
        }
    };
    // Whatever of the task is left in its cgroup (a child in a session of its own) goes
    // with it, and so does the cgroup.
    if let Some(cgroup) = &cgroup {
        if let Err(error) = cgroup.remove() {
            eprintln!("quiesce supervise: {error}");
        }
    }
    let (exit_code, signal) = match status.signal() {
        Some(signal) => (128 + signal, Some(signal)),
        None => (status.code().unwrap_or(-1), None),
    };
    let exit = ExitRecord {
        exit_code,
        signal,
        error: None,
        delivered: deliveries.recent,
        refused: deliveries.refused,
    };
    let code = record(exit.clone());
    // On disk first (for a daemon that reattaches later), then to every connected daemon,
    // which can act on it without waiting for this process to go. A connection that comes
    // later waits in the backlog and is reset when this process exits; its daemon then
    // reads `exit.json`.
    let line = format!(
        "exit {}\n",
        serde_json::to_string(&exit).expect("an exit record serializes")
    );
    for (stream, _) in &mut connections {
        let _ = stream.set_nonblocking(false);
        let _ = stream.write_all(line.as_bytes());
    }
    linger(&connections);
    // Nothing is left to flush: the status is on disk and sent. Skipping the C library's
    // exit handlers and the loader's finalizers spares each supervisor's exit the page
    // faults they cost, while a stop of many tasks still has signals to deliver.
    // Raw: nix 0.32 has no `_exit`, and `std::process::exit` runs the exit handlers this
    // skips.
    // SAFETY: _exit ends the process; this is its only thread.
    unsafe { libc::_exit(code) }
}

/// How long a supervisor waits, once it has sent its task's exit, for its daemon to close the
/// control connection before it exits anyway.
const LINGER: std::time::Duration = std::time::Duration::from_secs(5);

/// Waits until every daemon connected has closed its connection (it has applied the exit),
/// or [`LINGER`]: the supervisor's own exit — tearing down its address space, the largest
/// part of its work in a stop — then comes after the daemon's kill path rather than in the
/// middle of it, when a stop of many tasks still has signals to send.
fn linger(connections: &[(UnixStream, Vec<u8>)]) {
    let deadline = std::time::Instant::now() + LINGER;
    let mut open: Vec<PollFd<'_>> = connections
        .iter()
        .map(|(stream, _)| PollFd::new(stream.as_fd(), PollFlags::POLLIN))
        .collect();
    while !open.is_empty() {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return;
        }
        // Rounded up to the next millisecond (never early); `left` is at most LINGER.
        let timeout = PollTimeout::try_from(left.as_millis() + 1).unwrap_or(PollTimeout::MAX);
        // Every entry's revents is rewritten by each poll (an interrupted one too: they are
        // then all empty).
        if let Err(errno) = poll(&mut open, timeout) {
            if errno != Errno::EINTR {
                return;
            }
        }
        // A connection is done once it reports end-of-stream, an error or a hang-up; what
        // else a daemon sends now is of no use any more.
        let mut buffer = [0u8; 64];
        open.retain(|fd| {
            if revents(fd).is_empty() {
                return true;
            }
            match recv(fd.as_fd().as_raw_fd(), &mut buffer, MsgFlags::MSG_DONTWAIT) {
                Ok(read) => read > 0,
                Err(errno) => errno == Errno::EAGAIN,
            }
        });
    }
}

/// How long a supervisor whose task has exited waits for a connected daemon's `report`
/// before it reaps and records the task anyway.
const REPORT_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// The supervisor's one thread, until the task has exited and a daemon has asked for its
/// exit (`report`) — or no daemon is connected, or [`REPORT_WAIT`] has passed since: accepts
/// control connections (each gets the hello: the task's pid and what was delivered so
/// far), and carries out the requests they send. When the task exits, whatever is left of
/// its process group is SIGKILLed at once, as Nomad's executor does; the task itself is not
/// reaped before this returns, so a signal never reaches a process that reused its pid.
/// Returns the connections still open, for the `exit` line.
fn serve_until_exit(
    listener: &UnixListener,
    pidfd: &OwnedFd,
    pid: i32,
    deliveries: &mut Deliveries,
) -> Vec<(UnixStream, Vec<u8>)> {
    let _ = listener.set_nonblocking(true);
    let mut connections: Vec<(UnixStream, Vec<u8>)> = Vec::new();
    // A listener in error is polled no more: it would wake every poll; nor is the task's
    // pidfd once it has exited.
    let mut listening = true;
    let mut watching = true;
    let mut exited: Option<std::time::Instant> = None;
    // What the last poll reported for the task's pidfd, the listener and each connection,
    // in that order (nothing for one not polled).
    let mut reported: Vec<PollFlags> = Vec::new();
    loop {
        if let Some(at) = exited {
            if deliveries.report || connections.is_empty() || at.elapsed() >= REPORT_WAIT {
                return connections;
            }
        }
        let mut polled: Vec<PollFd<'_>> = [
            watching.then(|| pidfd.as_fd()),
            listening.then(|| listener.as_fd()),
        ]
        .into_iter()
        .flatten()
        .chain(connections.iter().map(|(stream, _)| stream.as_fd()))
        .map(|fd| PollFd::new(fd, PollFlags::POLLIN))
        .collect();
        // Asleep until a request, a connection or the task's exit — or a held SIGKILL's
        // moment (rounded up to the millisecond: never early), or the end of the wait for
        // a report.
        let mut timeout_ms = deliveries.due().map_or(-1, |due| {
            let left = due - clock_ns(ClockId::CLOCK_MONOTONIC);
            (left.max(0) + 999_999) / 1_000_000
        });
        if let Some(at) = exited {
            let left = REPORT_WAIT.saturating_sub(at.elapsed()).as_millis() as i64 + 1;
            timeout_ms = if timeout_ms < 0 {
                left
            } else {
                timeout_ms.min(left)
            };
        }
        // Never below -1 (no timeout), so the conversion cannot fail.
        let timeout =
            PollTimeout::try_from(timeout_ms.min(i64::from(i32::MAX))).unwrap_or(PollTimeout::NONE);
        let ready = poll(&mut polled, timeout);
        // Back in the layout of [pidfd, listener, connections…]: `polled` borrows the
        // connections, which are read, closed and added to below.
        let mut results = polled.iter().map(revents);
        reported.clear();
        for was_polled in [watching, listening] {
            let flags = if was_polled { results.next() } else { None };
            reported.push(flags.unwrap_or(PollFlags::empty()));
        }
        reported.extend(results);
        drop(polled);
        deliveries.deliver_due(pid, clock_ns(ClockId::CLOCK_MONOTONIC));
        if let Err(errno) = ready {
            if errno != Errno::EINTR {
                // Out of memory, most likely: try again shortly rather than spin.
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            continue;
        }
        // Requests first: one read together with the task's exit still goes to its unreaped
        // pid (harmlessly).
        let mut closed = Vec::new();
        for (ix, (stream, partial)) in connections.iter_mut().enumerate() {
            if reported[ix + 2].is_empty() {
                continue;
            }
            if !read_requests(stream, partial, pid, deliveries) {
                closed.push(ix);
            }
        }
        for ix in closed.into_iter().rev() {
            connections.swap_remove(ix);
        }
        if reported[1].intersects(PollFlags::POLLERR | PollFlags::POLLNVAL) {
            listening = false;
        } else if !reported[1].is_empty() {
            while let Ok((mut stream, _)) = listener.accept() {
                // Only this user's daemon may ask for signals (an abstract socket has no
                // file permissions to keep others out).
                if super::check_peer(&stream).is_err() {
                    continue;
                }
                let hello = Hello {
                    pid,
                    delivered: deliveries.recent.clone(),
                    user_signals: true,
                };
                let line = serde_json::to_string(&hello).expect("a hello serializes");
                if writeln!(stream, "{line}").is_ok() && stream.set_nonblocking(true).is_ok() {
                    connections.push((stream, Vec::new()));
                }
            }
        }
        if !reported[0].is_empty() && exited.is_none() {
            // What the task left running in its group goes with it (the pid is not reaped
            // yet).
            let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
            if let Some(cgroup) = &deliveries.cgroup {
                cgroup.kill();
            }
            exited = Some(std::time::Instant::now());
            deliveries.task_exited();
            watching = false;
        }
    }
}

/// Reads what a control connection has sent and carries out its complete request lines;
/// a line it does not know is ignored. Returns `false` once the connection has ended, or
/// sent a line longer than any request (it is not a daemon).
fn read_requests(
    stream: &mut UnixStream,
    partial: &mut Vec<u8>,
    pid: i32,
    deliveries: &mut Deliveries,
) -> bool {
    use std::io::Read;
    let mut buffer = [0u8; 256];
    loop {
        match stream.read(&mut buffer) {
            Ok(0) => return false,
            Ok(read) => {
                partial.extend_from_slice(&buffer[..read]);
                while let Some(end) = partial.iter().position(|&b| b == b'\n') {
                    let line: Vec<u8> = partial.drain(..=end).collect();
                    let request = std::str::from_utf8(&line).ok().and_then(Request::parse);
                    if let Some(request) = request {
                        deliveries.carry_out(request, pid, clock_ns(ClockId::CLOCK_MONOTONIC));
                    }
                }
                if partial.len() > MAX_REQUEST_LINE {
                    return false;
                }
            }
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => return true,
            Err(_) => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// pid 0x7fff_fff0 does not exist: killpg fails harmlessly, the bookkeeping is real.
    const NOBODY: i32 = 0x7fff_fff0;
    const SECOND: i64 = 1_000_000_000;

    fn kill(kill: u32, signal: i32) -> Request {
        Request::Kill {
            kill,
            signal,
            timeout_ns: 0,
        }
    }

    fn force(kill: u32) -> Request {
        Request::Force {
            kill,
            signal: libc::SIGINT,
            timeout_ns: SECOND,
        }
    }

    /// Each kill's signal goes out once, and SIGKILL once per kill; a request for a kill
    /// already carried out, or an older one, is refused and counted.
    #[test]
    fn a_kill_is_delivered_once_however_often_it_is_asked_for() {
        let mut deliveries = Deliveries::default();
        for request in [
            kill(1, libc::SIGINT),
            kill(1, libc::SIGINT),
            force(1),
            force(1),
            kill(2, libc::SIGTERM),
            kill(1, libc::SIGTERM),
        ] {
            deliveries.carry_out(request, NOBODY, clock_ns(ClockId::CLOCK_MONOTONIC));
        }
        let delivered: Vec<(u32, i32)> = deliveries
            .recent
            .iter()
            .map(|d| (d.kill, d.signal))
            .collect();
        assert_eq!(
            delivered,
            [(1, libc::SIGINT), (1, libc::SIGKILL), (2, libc::SIGTERM)]
        );
        assert_eq!(deliveries.refused, 3);
    }

    // invariant: kill_timeout_respected
    /// SIGKILL asked for before the kill timeout has run from the signal as delivered is
    /// held until it has, and asked again meanwhile is refused.
    #[test]
    fn an_early_sigkill_is_held_until_the_kill_timeout_has_run() {
        let mut deliveries = Deliveries::default();
        deliveries.carry_out(
            Request::Kill {
                kill: 1,
                signal: libc::SIGTERM,
                timeout_ns: SECOND,
            },
            NOBODY,
            0,
        );
        let signalled = deliveries.recent[0].monotonic_ns;
        deliveries.carry_out(force(1), NOBODY, signalled + SECOND / 2);
        assert_eq!(deliveries.due(), Some(signalled + SECOND));
        deliveries.carry_out(force(1), NOBODY, signalled + SECOND / 2);
        assert_eq!(deliveries.refused, 1);
        deliveries.deliver_due(NOBODY, signalled + SECOND - 1);
        assert_eq!(deliveries.recent.len(), 1, "not yet");
        deliveries.deliver_due(NOBODY, signalled + SECOND);
        let sigkill = deliveries.recent[1];
        assert_eq!((sigkill.kill, sigkill.signal), (1, libc::SIGKILL));
        assert_eq!(deliveries.due(), None);
        deliveries.carry_out(force(1), NOBODY, signalled + 2 * SECOND);
        assert_eq!(deliveries.recent.len(), 2, "SIGKILL once");
    }

    /// SIGKILL for a kill whose signal never went out (its daemon crashed between storing
    /// the step and sending it) brings the signal first, and SIGKILL a kill timeout later;
    /// once the task has exited, nothing more is delivered or recorded.
    #[test]
    fn a_sigkill_for_an_unsignalled_kill_sends_the_signal_first() {
        let mut deliveries = Deliveries::default();
        let now = clock_ns(ClockId::CLOCK_MONOTONIC);
        deliveries.carry_out(force(1), NOBODY, now);
        assert_eq!(
            deliveries
                .recent
                .iter()
                .map(|d| (d.kill, d.signal, d.forced))
                .collect::<Vec<_>>(),
            [(1, libc::SIGINT, false)]
        );
        let signalled = deliveries.recent[0].monotonic_ns;
        assert_eq!(deliveries.due(), Some(signalled + SECOND));
        deliveries.task_exited();
        assert_eq!(deliveries.due(), None, "a held SIGKILL goes with the task");
        deliveries.carry_out(kill(2, libc::SIGTERM), NOBODY, now);
        assert_eq!(deliveries.recent.len(), 1);
        assert_eq!(deliveries.refused, 1);
    }

    #[test]
    fn the_record_of_deliveries_is_bounded() {
        let mut deliveries = Deliveries::default();
        for number in 1..=100 {
            deliveries.carry_out(kill(number, libc::SIGINT), NOBODY, 0);
        }
        assert_eq!(deliveries.recent.len(), MAX_DELIVERIES);
        assert_eq!(deliveries.recent.last().map(|d| d.kill), Some(100));
    }
}
