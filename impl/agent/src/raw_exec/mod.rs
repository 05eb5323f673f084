//! The `raw_exec` driver: real processes, each under a small supervisor process, as Nomad's
//! executor runs them.
//!
//! The supervisor (`quiesce supervise`, [`supervisor::supervise`]) starts the task clean (an
//! empty signal mask and every signal at its default, whatever the daemon's threads block or
//! ignore) in its own process group, and answers every connection on its control socket with
//! a hello line: the task's pid and the kill signals it has delivered so far. It carries out
//! the requests the daemon sends over that connection — only while it has not reaped the
//! task, so a signal can never reach a process that reused the pid — and delivers **each
//! kill's signal at most once**: kills are numbered (the task runner counts them), and a
//! request for a kill already carried out is refused. That is how a restarted daemon, which
//! may have lost the record of having sent a signal (its store syncs runner progress up to
//! 20 ms late), never signals a task twice: the supervisor, which outlives the daemon and
//! dies only with the task, remembers. When the task exits it kills whatever is left of the
//! group, reaps the task, writes the exit status and what it delivered to `exit.json` in the
//! task directory, sends the same as an `exit` line on every connection and exits. It is
//! started in a process group of its own, so it outlives the daemon — a restart or a
//! `kill -9` — and a restored runner reattaches by connecting to the socket again. The socket
//! is an abstract Unix socket named after the task directory (no file to go stale, no
//! path-length limit); the daemon binds it before starting the supervisor and hands it over
//! as the supervisor's standard input, so a connection never races the supervisor's start.
//! The supervisor's exit closes the socket: end-of-stream on a connection means "the task's
//! exit status is on disk".
//!
//! The protocol, one line each way per message:
//! * supervisor → daemon, on accepting: `{"pid":P,"delivered":[…]}` ([`Hello`]);
//! * daemon → supervisor: `kill K N T` (deliver signal N as kill K's kill signal, once; its
//!   kill timeout is T ns), `force K N T` (SIGKILL the group: kill K's timeout fired, once —
//!   never sooner than T after the kill's signal as delivered, an early one held until then;
//!   and if kill K's signal N never went out, it goes out first), and `report` (send the
//!   task's exit once it has exited) ([`Request`]);
//! * supervisor → daemon, when the task has exited: `exit {…}` ([`ExitRecord`]).
//!
//! Each run of a task has its own supervisor state (`run-N-<64 random bits>/` in the task
//! directory, the agent's only: the task cannot guess its next run's socket name, derived
//! from the path, to take it first), so a restart never reattaches to the run before it,
//! and a run started before a crash is found again and reattached, never started twice.
//!
//! A supervisor answers only the agent's user: its abstract socket has no file
//! permissions, so it checks each connection's peer credentials (`SO_PEERCRED`) before it
//! says anything, and closes another user's at once, unread.
//!
//! Directories: `alloc/` and `alloc/<alloc>/` are 0711, a task directory 0700 (0711 for a
//! task with a `User`), its `local/` (`NOMAD_TASK_DIR`) 0700 and the `User`'s: the only
//! place the task's user can write, so nothing the agent or a supervisor opens as root can
//! be a symlink of its making. Logs and `exit.json` are 0600.
//!
//! System calls go through nix and rustix; three stay raw, each with a `// Raw:` comment:
//! `killpg` of any signal 1–64 (nix's `Signal` cannot name the real-time ones), `_exit` in
//! the supervisor, and the `rt_sigaction` reset of signals 32 and 33 between fork and exec.

pub mod beneath;
pub mod cgroup;
mod protocol;
mod supervisor;
mod task_start;
mod watcher;

pub use protocol::*;
pub use supervisor::supervise;
pub use watcher::{Event, ExitWatcher, Exited};

use quiesce_core::client::task_runner::ExitResult;
use serde::{Deserialize, Serialize};
use std::fs;
use std::io::{self, BufRead, BufReader, Write};
use std::os::fd::OwnedFd;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// What a task never inherits from the agent's environment (its own `Env` may still set
/// them): Nomad's default client `env.denylist`, and `NOMAD_TOKEN`, the operator's ACL
/// token when the agent was started from a shell that had one.
pub const ENV_DENYLIST: &[&str] = &[
    "CONSUL_TOKEN",
    "CONSUL_HTTP_TOKEN",
    "CONSUL_HTTP_AUTH",
    "VAULT_TOKEN",
    "NOMAD_LICENSE",
    "NOMAD_TOKEN",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "GOOGLE_APPLICATION_CREDENTIALS",
];

/// The open-files limit, soft and hard, a supervisor (and so its task) starts with: the agent's
/// soft limit as it was started, before it raised its own (0: the agent's own, unchanged).
static TASK_OPEN_FILES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Sets the soft open-files limit tasks start with (issue 24: tasks inherited the agent's
/// raised 20,000, enough to take every connection the agent serves).
pub fn set_task_open_files_limit(soft: u64) {
    TASK_OPEN_FILES.store(soft, std::sync::atomic::Ordering::Relaxed);
}

/// The abstract socket name of a task directory's supervisor.
fn socket_name(dir: &Path) -> String {
    // FNV-1a over the path: stable across daemon restarts, short enough for any path.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in dir.as_os_str().as_encoded_bytes() {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("quiesce-supervisor-{hash:016x}")
}

fn socket_addr(dir: &Path) -> io::Result<SocketAddr> {
    SocketAddr::from_abstract_name(socket_name(dir).as_bytes())
}

/// What a launch needs: the task directory (created if absent), the command line and the
/// environment the task gets on top of the daemon's.
#[derive(Clone, Debug)]
pub struct Launch {
    pub dir: PathBuf,
    pub command: String,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    /// The user to run the task as (`None`: the agent's own).
    pub user: Option<String>,
    /// Files to write into the task's directory before it starts (its templates): the path
    /// (relative, of normal components only: `spec` validates it), the contents, the mode.
    pub files: Vec<(PathBuf, Vec<u8>, u32)>,
    /// Where this run's supervisor keeps its state — its control socket's name and its
    /// `exit.json`: `None` for the task directory (the first run), else a restart's own
    /// directory ([`new_run_dir`]), which the launch creates (0700, the agent's only). So a
    /// restart never reattaches to the run before it. The task's logs and working directory
    /// stay the task directory's, across runs.
    pub state: Option<PathBuf>,
    /// The agent's cgroup, where the run's own is made (`None`: the host has none the agent
    /// can use, and the task runs in its process group alone).
    pub cgroups: Option<PathBuf>,
}

/// A new directory name for run `run` (≥ 1) of a task: `run-N-` and 64 random bits, so that
/// the task — which knows its own directory — cannot tell the name its next run's
/// supervisor socket will have (it is derived from the path) and take it first.
pub fn new_run_dir(task_dir: &Path, run: u32) -> io::Result<PathBuf> {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes).map_err(|e| io::Error::other(e.to_string()))?;
    Ok(task_dir.join(format!("run-{run}-{:016x}", u64::from_le_bytes(bytes))))
}

/// The directory of run `run` (≥ 1) of a task, if that run was launched (a daemon that
/// crashed after launching it finds it again, and reattaches, never launching it twice).
pub fn find_run_dir(task_dir: &Path, run: u32) -> io::Result<Option<PathBuf>> {
    let prefix = format!("run-{run}-");
    let entries = match fs::read_dir(task_dir) {
        Ok(entries) => entries,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(error),
    };
    for entry in entries {
        let entry = entry?;
        if entry
            .file_name()
            .to_str()
            .is_some_and(|name| name.starts_with(&prefix))
        {
            return Ok(Some(entry.path()));
        }
    }
    Ok(None)
}

/// A running (or finished) supervised task, as the daemon holds it.
#[derive(Debug)]
pub struct Attached {
    /// The task's pid, which is also its process group.
    pub pid: i32,
    /// The control connection: end-of-stream when the supervisor has exited.
    stream: Option<UnixStream>,
    /// The supervisor, when this daemon started it (to reap it).
    child: Option<Child>,
    dir: PathBuf,
    /// The signals the supervisor had delivered when it said hello (a restarted daemon
    /// learns from it whether a kill signal went out before the crash, and when).
    pub delivered: Vec<Delivery>,
    /// The supervisor carries out user signals (`Hello::user_signals`).
    pub user_signals: bool,
}

/// How a reattach found a task.
#[derive(Debug)]
pub enum Reattach {
    Running(Attached),
    /// The supervisor has exited and left the task's exit status.
    Exited(ExitRecord),
    /// The supervisor is gone without an exit status (it was killed): the task is lost.
    Lost,
}

/// The task's directory, private: its parents (`alloc/<alloc>`) let others pass through
/// but not list them; the directory itself, its logs and `exit.json` are the agent's only
/// (0700; 0711 for a task with a `User`, so that it can sit in it as its working
/// directory). Its `local/` (`NOMAD_TASK_DIR`, as in Nomad) is the task's own: the `User`'s
/// if it has one. Nothing the agent or the supervisor opens as root is in a directory the
/// task's user can write, but the templates, written into `local/` through [`beneath::Dir`]
/// (no link followed, no name resolved twice: the task may be racing the agent).
fn task_dir(launch: &Launch) -> io::Result<()> {
    if let Some(parent) = launch.dir.parent() {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o711)
            .create(parent)?;
    }
    let mode = if launch.user.is_some() { 0o711 } else { 0o700 };
    fs::DirBuilder::new()
        .recursive(true)
        .mode(mode)
        .create(&launch.dir)?;
    let dir = beneath::Dir::open(&launch.dir)?;
    rustix::fs::fchmod(dir.fd(), rustix::fs::Mode::from_raw_mode(mode))?;
    let local = dir.subdir(LOCAL_DIR.as_ref(), 0o700)?;
    // A user the host does not have: the supervisor refuses to start the task, and its
    // exit record says why.
    let user = launch
        .user
        .as_deref()
        .and_then(|name| nix::unistd::User::from_name(name).ok().flatten());
    let owner = user.as_ref().map(|u| (u.uid.as_raw(), u.gid.as_raw()));
    for (path, contents, mode) in &launch.files {
        dir.write_file(path, contents, *mode, owner)?;
    }
    if let Some(owner) = owner {
        local.chown(owner)?;
    }
    Ok(())
}

/// Starts a supervised task: `supervisor` is the program to run as the supervisor (the
/// `quiesce` binary) and `supervisor_args` the arguments that make it one, before the task
/// directory and the command line. Returns once the task has started (or failed to start:
/// then its exit record says why).
pub fn launch(
    supervisor: &Path,
    supervisor_args: &[&str],
    launch: &Launch,
) -> io::Result<Result<Attached, ExitRecord>> {
    task_dir(launch)?;
    let state = launch.state.clone().unwrap_or_else(|| launch.dir.clone());
    if launch.state.is_some() {
        // Created here; an existing one without an `exit.json` is a launch a crash cut short
        // before its supervisor started (the caller tells that from a run launched before).
        match fs::DirBuilder::new().mode(0o700).create(&state) {
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {}
            other => other?,
        }
    }
    let cgroup = launch
        .cgroups
        .as_deref()
        .map(|root| cgroup::for_run(root, &state))
        .transpose()?;
    let listener = UnixListener::bind_addr(&socket_addr(&state)?)?;
    let log = |name: &str| {
        fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(launch.dir.join(name))
    };
    let mut command = Command::new(supervisor);
    command
        .args(supervisor_args)
        .arg(&state)
        .args(
            launch
                .user
                .iter()
                .flat_map(|user| ["--user", user.as_str()]),
        )
        .args(
            cgroup
                .iter()
                .flat_map(|dir| [std::ffi::OsStr::new("--cgroup"), dir.as_os_str()]),
        )
        .arg("--")
        .arg(&launch.command)
        .args(&launch.args);
    // A task inherits the agent's environment (as Nomad's raw_exec tasks do) but not its
    // secrets: Nomad's default `env.denylist`, and the operator's own token.
    for name in ENV_DENYLIST {
        command.env_remove(name);
    }
    command
        .envs(launch.env.iter().map(|(k, v)| (k, v)))
        .current_dir(&launch.dir)
        // The listening socket is the supervisor's standard input.
        .stdin(Stdio::from(OwnedFd::from(listener)))
        .stdout(log(STDOUT_FILE)?)
        .stderr(log(STDERR_FILE)?)
        // Its own process group: a signal to the daemon's group does not reach it.
        .process_group(0);
    let open_files = TASK_OPEN_FILES.load(std::sync::atomic::Ordering::Relaxed);
    if open_files > 0 {
        use nix::sys::resource::{getrlimit, setrlimit, Resource};
        let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
        // SAFETY: setrlimit is a system call (async-signal-safe); nothing is allocated.
        unsafe {
            command.pre_exec(move || {
                // The hard limit as well: a task (not root) cannot raise it back.
                let soft = open_files.min(hard);
                setrlimit(Resource::RLIMIT_NOFILE, soft, soft)?;
                Ok(())
            });
        }
    }
    let mut child = command.spawn()?;
    // The daemon's copy of the listener must go: the supervisor's exit has to close it.
    drop(command);
    let attached = socket_addr(&state)
        .and_then(|addr| UnixStream::connect_addr(&addr))
        .and_then(|stream| attach(stream, None, &state));
    match attached {
        Ok(Ok(mut attached)) => {
            attached.child = Some(child);
            Ok(Ok(attached))
        }
        Ok(Err(record)) => {
            child.wait()?;
            Ok(Err(record))
        }
        Err(error) => {
            // No answer from it: it goes, and is reaped (no zombie). A supervisor that could
            // not start its task records why and exits at once, and may be gone before the
            // connection was made or its hello read: then its record says what happened.
            let _ = child.kill();
            let _ = child.wait();
            match read_exit(&state) {
                Ok(Some(record)) => Ok(Err(record)),
                _ => Err(error),
            }
        }
    }
}

/// How long a supervisor may take to answer with the task's pid.
const HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The supervisor at the other end runs as this user: the abstract socket's name is
/// predictable and has no file permissions, so another user could bind it first.
fn check_peer(stream: &UnixStream) -> io::Result<()> {
    use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
    let theirs = getsockopt(stream, PeerCredentials)?.uid();
    let ours = nix::unistd::getuid().as_raw();
    if theirs != ours {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("the task's supervisor socket belongs to uid {theirs}, not {ours}"),
        ));
    }
    Ok(())
}

/// Reattaches to the supervisor of a task started earlier (by this daemon or an earlier one).
pub fn reattach(dir: &Path) -> io::Result<Reattach> {
    match UnixStream::connect_addr(&socket_addr(dir)?) {
        Ok(stream) => Ok(match attach(stream, None, dir)? {
            Ok(attached) => Reattach::Running(attached),
            Err(record) => Reattach::Exited(record),
        }),
        Err(error) if error.kind() == io::ErrorKind::ConnectionRefused => {
            Ok(match read_exit(dir)? {
                Some(record) => Reattach::Exited(record),
                None => Reattach::Lost,
            })
        }
        Err(error) => Err(error),
    }
}

/// Reads the supervisor's hello (the task's pid and what it has delivered); end-of-stream
/// (or a reset: a connection still in the backlog when the supervisor exits is reset) first
/// means it has exited.
fn attach(
    stream: UnixStream,
    mut child: Option<Child>,
    dir: &Path,
) -> io::Result<Result<Attached, ExitRecord>> {
    check_peer(&stream)?;
    stream.set_read_timeout(Some(HANDSHAKE_TIMEOUT))?;
    let line = match read_hello(&stream) {
        Ok(line) => line,
        Err(error) if error.kind() == io::ErrorKind::ConnectionReset => String::new(),
        Err(error) => return Err(error),
    };
    stream.set_read_timeout(None)?;
    match serde_json::from_str::<Hello>(line.trim()) {
        Ok(hello) if hello.pid > 0 => Ok(Ok(Attached {
            pid: hello.pid,
            stream: Some(stream),
            child,
            dir: dir.to_path_buf(),
            delivered: hello.delivered,
            user_signals: hello.user_signals,
        })),
        _ if !line.is_empty() => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("the task's supervisor said {:?}, not a hello", line.trim()),
        )),
        _ => {
            if let Some(child) = child.as_mut() {
                child.wait()?;
            }
            Ok(Err(read_exit(dir)?.unwrap_or_else(|| {
                ExitRecord::failed(
                    -1,
                    "the task's supervisor exited without an exit status".into(),
                )
            })))
        }
    }
}

/// The longest hello a supervisor sends (a pid and at most [`MAX_DELIVERIES`] deliveries).
const MAX_HELLO: usize = 4096;

/// Reads the hello line — and not a byte past it: what follows (an `exit` line that comes
/// at once) is left on the connection for whoever reads it next. Empty at end-of-stream.
fn read_hello(stream: &UnixStream) -> io::Result<String> {
    use nix::errno::Errno;
    use nix::sys::socket::{recv, MsgFlags};
    use std::io::Read;
    use std::os::fd::AsRawFd;
    let deadline = std::time::Instant::now() + HANDSHAKE_TIMEOUT;
    let mut peeked = vec![0u8; MAX_HELLO];
    loop {
        // MSG_PEEK leaves the data.
        let seen = match recv(stream.as_raw_fd(), &mut peeked, MsgFlags::MSG_PEEK) {
            Ok(seen) => seen,
            Err(Errno::EINTR) => continue,
            Err(errno) => return Err(errno.into()),
        };
        if seen == 0 {
            return Ok(String::new());
        }
        if let Some(end) = peeked[..seen].iter().position(|&b| b == b'\n') {
            let mut line = vec![0u8; end + 1];
            (&*stream).read_exact(&mut line)?;
            return String::from_utf8(line)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e));
        }
        if seen == MAX_HELLO || std::time::Instant::now() > deadline {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "the task's supervisor sent no hello line",
            ));
        }
        // Part of the line: the rest follows.
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

fn read_exit(dir: &Path) -> io::Result<Option<ExitRecord>> {
    match fs::read_to_string(dir.join(EXIT_FILE)) {
        // Created empty when the supervisor starts: the task has not exited (or its
        // supervisor was killed before it could say how).
        Ok(text) if text.is_empty() => Ok(None),
        Ok(text) => serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e)),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(error),
    }
}

impl Attached {
    /// The supervisor's pid, when this daemon started it.
    pub fn supervisor_pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// A handle that asks the supervisor to signal the task's process group.
    pub fn signaller(&self) -> io::Result<Signaller> {
        let stream = self
            .stream
            .as_ref()
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotConnected, "no control connection"))?;
        Ok(Signaller(stream.try_clone()?))
    }

    /// Blocks until the task has exited, and returns its exit status — from the supervisor's
    /// `exit` line (asked for with `report`), or, if the supervisor went without one, from
    /// `exit.json` — and what is left to reap of the supervisor (reap it after acting on
    /// the exit).
    pub fn wait(mut self) -> (ExitRecord, Reaper) {
        if let Some(stream) = self.stream.take() {
            let _ = (&stream).write_all(Request::Report.line().as_bytes());
            for line in BufReader::new(stream).lines() {
                // End-of-stream (or a reset) when the supervisor exits.
                let Ok(line) = line else { break };
                if let Some(record) = line
                    .strip_prefix("exit ")
                    .and_then(|json| serde_json::from_str(json).ok())
                {
                    return (record, Reaper(self.child.take()));
                }
            }
        }
        if let Some(child) = self.child.as_mut() {
            let _ = child.wait();
        }
        (exit_left_on_disk(&self.dir), Reaper(None))
    }
}

/// The exit status of a task whose supervisor went without sending it: from `exit.json`,
/// which the supervisor writes before it sends the `exit` line and exits.
fn exit_left_on_disk(dir: &Path) -> ExitRecord {
    match read_exit(dir) {
        Ok(Some(record)) => record,
        Ok(None) => ExitRecord::failed(
            -1,
            "the task's supervisor was killed: exit status unknown".into(),
        ),
        Err(error) => ExitRecord::failed(-1, format!("reading the task's exit status: {error}")),
    }
}

/// A supervisor that reported its task's exit and is exiting: reap it (if this daemon
/// started it) so it leaves no zombie.
#[derive(Debug)]
pub struct Reaper(Option<Child>);

impl Reaper {
    pub fn reap(self) {
        if let Some(mut child) = self.0 {
            let _ = child.wait();
        }
    }
}

/// Sends a task's supervisor the daemon's requests (see [`Request`]) on the control
/// connection. A supervisor that has gone (the task exited) is not an error: the exit is on
/// its way to the daemon.
#[derive(Debug)]
pub struct Signaller(UnixStream);

impl Signaller {
    /// Kill `kill`'s kill signal: delivered once, however often it is asked for; SIGKILL
    /// for this kill is not delivered sooner than `timeout_ns` after it.
    pub fn kill_signal(&self, kill: u32, signal: i32, timeout_ns: i64) -> io::Result<()> {
        self.send(Request::Kill {
            kill,
            signal,
            timeout_ns,
        })
    }

    /// SIGKILL, once kill `kill`'s timeout has fired (held by the supervisor until that
    /// timeout has run from the signal as it delivered it; the kill's `signal` first if it
    /// never went out).
    pub fn force_kill(&self, kill: u32, signal: i32, timeout_ns: i64) -> io::Result<()> {
        self.send(Request::Force {
            kill,
            signal,
            timeout_ns,
        })
    }

    /// Sends one request.
    pub fn send(&self, request: Request) -> io::Result<()> {
        match (&self.0).write_all(request.line().as_bytes()) {
            Ok(()) => Ok(()),
            Err(error)
                if matches!(
                    error.kind(),
                    io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset
                ) =>
            {
                Ok(())
            }
            Err(error) => Err(error),
        }
    }
}
