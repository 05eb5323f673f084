//! The `raw_exec` driver: real processes, each under a small supervisor process, as Nomad's
//! executor runs them.
//!
//! The supervisor (`quiesce supervise`, [`supervise`]) starts the task in its own process
//! group, answers every connection on its control socket with the task's pid, and sends the
//! signals the daemon asks for over that connection (`signal N`) to the task's process group
//! — only while it has not reaped the task, so a signal can never reach a process that
//! reused the pid. When the task exits it kills whatever is left of the group, reaps the
//! task, writes the exit status to `exit.json` in the task directory, sends it as an `exit`
//! line on every connection and exits. It is started in a process group of its own, so it
//! outlives the daemon — a restart or a `kill -9` — and a restored runner reattaches by
//! connecting to the socket again. The socket is an abstract Unix socket named after the task
//! directory (no file to go stale, no path-length limit); the daemon binds it before starting
//! the supervisor and hands it over as the supervisor's standard input, so a connection never
//! races the supervisor's start. The supervisor's exit closes the socket: end-of-stream on a
//! connection means "the task's exit status is on disk".

use super::task_runner::ExitResult;
use std::fs;
use std::io::{self, BufRead, BufReader, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// The exit status file the supervisor leaves in the task directory.
pub const EXIT_FILE: &str = "exit.json";
pub const STDOUT_FILE: &str = "stdout.log";
pub const STDERR_FILE: &str = "stderr.log";

/// What the supervisor writes to `exit.json`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ExitRecord {
    pub exit_code: i32,
    pub signal: Option<i32>,
    /// Why the task could not start, if it could not.
    pub error: Option<String>,
}

impl ExitRecord {
    pub fn result(&self) -> ExitResult {
        ExitResult {
            exit_code: self.exit_code,
            signal: self.signal,
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
        "ABRT" => libc::SIGABRT,
        _ => return None,
    })
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

/// Starts a supervised task: `supervisor` is the program to run as the supervisor (the
/// `quiesce` binary) and `supervisor_args` the arguments that make it one, before the task
/// directory and the command line. Returns once the task has started (or failed to start:
/// then its exit record says why).
pub fn launch(
    supervisor: &Path,
    supervisor_args: &[&str],
    launch: &Launch,
) -> io::Result<Result<Attached, ExitRecord>> {
    fs::create_dir_all(&launch.dir)?;
    let listener = UnixListener::bind_addr(&socket_addr(&launch.dir)?)?;
    let log = |name: &str| {
        fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(launch.dir.join(name))
    };
    let mut command = Command::new(supervisor);
    command
        .args(supervisor_args)
        .arg(&launch.dir)
        .arg("--")
        .arg(&launch.command)
        .args(&launch.args)
        .envs(launch.env.iter().map(|(k, v)| (k, v)))
        .current_dir(&launch.dir)
        // The listening socket is the supervisor's standard input.
        .stdin(Stdio::from(OwnedFd::from(listener)))
        .stdout(log(STDOUT_FILE)?)
        .stderr(log(STDERR_FILE)?)
        // Its own process group: a signal to the daemon's group does not reach it.
        .process_group(0);
    let mut child = command.spawn()?;
    // The daemon's copy of the listener must go: the supervisor's exit has to close it.
    drop(command);
    let attached = socket_addr(&launch.dir)
        .and_then(|addr| UnixStream::connect_addr(&addr))
        .and_then(|stream| attach(stream, None, &launch.dir));
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
            // No answer from it: it goes, and is reaped (no zombie).
            let _ = child.kill();
            let _ = child.wait();
            Err(error)
        }
    }
}

/// How long a supervisor may take to answer with the task's pid.
const HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The supervisor at the other end runs as this user: the abstract socket's name is
/// predictable and has no file permissions, so another user could bind it first.
fn check_peer(stream: &UnixStream) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let mut credentials = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut length = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: a valid socket and a buffer of the given length.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut credentials as *mut libc::ucred).cast(),
            &mut length,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: getuid has no preconditions.
    let ours = unsafe { libc::getuid() };
    if credentials.uid != ours {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "the task's supervisor socket belongs to uid {}, not {ours}",
                credentials.uid
            ),
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

/// Reads the pid the supervisor answers with; end-of-stream (or a reset: a connection still
/// in the backlog when the supervisor exits is reset) first means it has exited.
fn attach(
    stream: UnixStream,
    mut child: Option<Child>,
    dir: &Path,
) -> io::Result<Result<Attached, ExitRecord>> {
    check_peer(&stream)?;
    stream.set_read_timeout(Some(HANDSHAKE_TIMEOUT))?;
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    match reader.read_line(&mut line) {
        Ok(_) => {}
        Err(error) if error.kind() == io::ErrorKind::ConnectionReset => line.clear(),
        Err(error) => return Err(error),
    }
    reader.get_ref().set_read_timeout(None)?;
    match line.trim().parse::<i32>() {
        Ok(pid) if pid > 0 => Ok(Ok(Attached {
            pid,
            stream: Some(reader.into_inner()),
            child,
            dir: dir.to_path_buf(),
        })),
        _ => {
            if let Some(child) = child.as_mut() {
                child.wait()?;
            }
            Ok(Err(read_exit(dir)?.unwrap_or(ExitRecord {
                exit_code: -1,
                signal: None,
                error: Some("the task's supervisor exited without an exit status".into()),
            })))
        }
    }
}

fn read_exit(dir: &Path) -> io::Result<Option<ExitRecord>> {
    match fs::read_to_string(dir.join(EXIT_FILE)) {
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
    /// `exit` line, or, if the supervisor went without one, from `exit.json` — and what is
    /// left to reap of the supervisor (reap it after acting on the exit).
    pub fn wait(mut self) -> (ExitRecord, Reaper) {
        if let Some(stream) = self.stream.take() {
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
        Ok(None) => ExitRecord {
            exit_code: -1,
            signal: None,
            error: Some("the task's supervisor was killed: exit status unknown".into()),
        },
        Err(error) => ExitRecord {
            exit_code: -1,
            signal: None,
            error: Some(format!("reading the task's exit status: {error}")),
        },
    }
}

/// Watches many supervised tasks for their exits on one thread (epoll over the control
/// connections), instead of a blocked thread per task: when a stop kills many tasks at
/// once, one thread reads their `exit` lines as they come and hands each to `report`,
/// rather than a hundred threads waking at once to compete for the CPU and the daemon's
/// locks. It also reaps the supervisors this daemon started, once they have exited (a
/// pidfd of each, in the same epoll set), so none is left a zombie.
pub struct ExitWatcher<T> {
    inner: std::sync::Arc<WatcherInner<T>>,
}

impl<T> Clone for ExitWatcher<T> {
    fn clone(&self) -> Self {
        ExitWatcher {
            inner: std::sync::Arc::clone(&self.inner),
        }
    }
}

struct WatcherInner<T> {
    epoll: OwnedFd,
    watched: std::sync::Mutex<Watched<T>>,
}

struct Watched<T> {
    next: u64,
    entries: std::collections::HashMap<u64, Watch<T>>,
}

/// One task being watched. Its epoll keys: `2 × id` for the control connection, `2 × id + 1`
/// for the supervisor's pidfd.
struct Watch<T> {
    /// Taken when the exit is reported (once).
    token: Option<T>,
    stream: Option<UnixStream>,
    /// What has been read of the connection and not yet ended by a newline.
    partial: Vec<u8>,
    supervisor: Option<(Child, OwnedFd)>,
    dir: PathBuf,
}

impl<T> Watch<T> {
    /// Reads what the connection has without blocking. Returns the task's exit status once
    /// it is known: the `exit` line, or `exit.json` when the connection ends without one.
    fn read(&mut self) -> Option<ExitRecord> {
        use std::os::fd::AsRawFd;
        let stream = self.stream.as_ref()?;
        let mut buffer = [0u8; 512];
        loop {
            // SAFETY: a valid socket and a buffer of the given length. MSG_DONTWAIT, not
            // O_NONBLOCK: the daemon's signaller shares this socket and keeps blocking writes.
            let read = unsafe {
                libc::recv(
                    stream.as_raw_fd(),
                    buffer.as_mut_ptr().cast(),
                    buffer.len(),
                    libc::MSG_DONTWAIT,
                )
            };
            if read > 0 {
                self.partial.extend_from_slice(&buffer[..read as usize]);
                while let Some(end) = self.partial.iter().position(|&b| b == b'\n') {
                    let line: Vec<u8> = self.partial.drain(..=end).collect();
                    let record = std::str::from_utf8(&line)
                        .ok()
                        .and_then(|line| line.trim_end().strip_prefix("exit "))
                        .and_then(|json| serde_json::from_str(json).ok());
                    if record.is_some() {
                        return record;
                    }
                }
                continue;
            }
            if read < 0 {
                match io::Error::last_os_error().kind() {
                    io::ErrorKind::Interrupted => continue,
                    io::ErrorKind::WouldBlock => return None,
                    _ => {}
                }
            }
            // End-of-stream (or a reset): the supervisor has exited.
            return Some(exit_left_on_disk(&self.dir));
        }
    }
}

fn epoll_ctl(epoll: &OwnedFd, op: i32, fd: i32, key: u64) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let mut event = libc::epoll_event {
        events: (libc::EPOLLIN | libc::EPOLLRDHUP) as u32,
        u64: key,
    };
    // SAFETY: a valid epoll descriptor and event.
    if unsafe { libc::epoll_ctl(epoll.as_raw_fd(), op, fd, &mut event) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

impl<T: Send + 'static> ExitWatcher<T> {
    pub fn new() -> io::Result<Self> {
        // SAFETY: epoll_create1 has no preconditions; the descriptor it returns is ours.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(ExitWatcher {
            inner: std::sync::Arc::new(WatcherInner {
                // SAFETY: a new descriptor, owned by nothing else.
                epoll: unsafe { OwnedFd::from_raw_fd(fd) },
                watched: std::sync::Mutex::new(Watched {
                    next: 0,
                    entries: std::collections::HashMap::new(),
                }),
            }),
        })
    }

    fn watched(&self) -> std::sync::MutexGuard<'_, Watched<T>> {
        self.inner
            .watched
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Watches a task: its token and exit status are reported once, on the watcher's
    /// thread, when the task has exited (see [`ExitWatcher::start`]). On failure (out of descriptors) the task is handed back, to be
    /// waited for otherwise ([`Attached::wait`]).
    pub fn watch(&self, attached: Attached, token: T) -> Result<(), (io::Error, Attached)> {
        use std::os::fd::AsRawFd;
        let Some(stream) = attached.stream.as_ref() else {
            let error = io::Error::new(io::ErrorKind::NotConnected, "no control connection");
            return Err((error, attached));
        };
        let pidfd = match &attached.child {
            Some(child) => {
                // SAFETY: pidfd_open on our own unreaped child (a zombie's pid stays ours).
                let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, child.id() as i32, 0) };
                if fd < 0 {
                    return Err((io::Error::last_os_error(), attached));
                }
                // SAFETY: a new descriptor, owned by nothing else.
                Some(unsafe { OwnedFd::from_raw_fd(fd as i32) })
            }
            None => None,
        };
        let mut watched = self.watched();
        let id = watched.next;
        let epoll = &self.inner.epoll;
        if let Err(error) = epoll_ctl(epoll, libc::EPOLL_CTL_ADD, stream.as_raw_fd(), 2 * id) {
            return Err((error, attached));
        }
        if let Some(pidfd) = &pidfd {
            if let Err(error) = epoll_ctl(epoll, libc::EPOLL_CTL_ADD, pidfd.as_raw_fd(), 2 * id + 1)
            {
                let _ = epoll_ctl(epoll, libc::EPOLL_CTL_DEL, stream.as_raw_fd(), 2 * id);
                return Err((error, attached));
            }
        }
        watched.next += 1;
        let mut attached = attached;
        let supervisor = attached.child.take().zip(pidfd);
        watched.entries.insert(
            id,
            Watch {
                token: Some(token),
                stream: attached.stream.take(),
                partial: Vec::new(),
                supervisor,
                dir: attached.dir.clone(),
            },
        );
        Ok(())
    }

    /// Starts the watcher's thread, which hands `report` the exits it finds, those that
    /// came together at once.
    pub fn start(
        &self,
        mut report: impl FnMut(Vec<(T, ExitRecord)>) + Send + 'static,
    ) -> io::Result<()> {
        let watcher = self.clone();
        std::thread::Builder::new()
            .name("exits".into())
            .spawn(move || loop {
                let mut exited = Vec::new();
                watcher.wait_once(&mut exited);
                // Reported outside the watcher's lock: `report` may start a task, which
                // registers it here.
                if !exited.is_empty() {
                    report(exited);
                }
            })
            .map(|_| ())
    }

    fn wait_once(&self, exited: &mut Vec<(T, ExitRecord)>) {
        use std::os::fd::AsRawFd;
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; 64];
        // SAFETY: a valid epoll descriptor and event buffer of the given length.
        let count = unsafe {
            libc::epoll_wait(
                self.inner.epoll.as_raw_fd(),
                events.as_mut_ptr(),
                events.len() as i32,
                -1,
            )
        };
        if count < 0 {
            // EINTR: wait again.
            return;
        }
        let mut watched = self.watched();
        for event in &events[..count as usize] {
            let key = event.u64;
            let id = key / 2;
            let Some(watch) = watched.entries.get_mut(&id) else {
                continue;
            };
            if key % 2 == 0 {
                if let Some(record) = watch.read() {
                    if let Some(stream) = watch.stream.take() {
                        let _ = epoll_ctl(
                            &self.inner.epoll,
                            libc::EPOLL_CTL_DEL,
                            stream.as_raw_fd(),
                            key,
                        );
                    }
                    if let Some(token) = watch.token.take() {
                        exited.push((token, record));
                    }
                }
            } else if let Some((mut child, pidfd)) = watch.supervisor.take() {
                // The supervisor has exited: reaped at once (no zombie).
                let _ = epoll_ctl(
                    &self.inner.epoll,
                    libc::EPOLL_CTL_DEL,
                    pidfd.as_raw_fd(),
                    key,
                );
                let _ = child.wait();
            }
            if watch.stream.is_none() && watch.supervisor.is_none() {
                watched.entries.remove(&id);
            }
        }
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

/// Asks a task's supervisor to signal the task's process group (`signal N` on the control
/// connection). A supervisor that has gone (the task exited) is not an error: the exit is on
/// its way to the daemon.
#[derive(Debug)]
pub struct Signaller(UnixStream);

impl Signaller {
    pub fn signal(&self, signal: i32) -> io::Result<()> {
        match (&self.0).write_all(format!("signal {signal}\n").as_bytes()) {
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

/// Where the supervisor will write the task's exit status: a temporary file created when
/// the supervisor starts, written and renamed to `exit.json` when the task exits, so that a
/// reader never sees half a record. Creating it early matters: a new file is a new inode,
/// and on a file system that has seen many files come and go (every task leaves some),
/// ext4's search for a free inode that was not recently deleted costs about half a
/// millisecond of CPU — per supervisor, in the middle of a stop of many tasks. Not synced to
/// disk: it must survive the daemon's crash, not the machine's (which ends the task too),
/// and 100 tasks exiting at once would otherwise queue 100 disk syncs.
struct ExitFile {
    temporary: PathBuf,
    file: io::Result<fs::File>,
}

impl ExitFile {
    fn create(dir: &Path) -> ExitFile {
        let temporary = dir.join(EXIT_FILE).with_extension("tmp");
        let file = fs::File::create(&temporary);
        ExitFile { temporary, file }
    }

    fn write(&mut self, contents: &[u8]) -> io::Result<()> {
        let file = self
            .file
            .as_mut()
            .map_err(|e| io::Error::new(e.kind(), e.to_string()))?;
        file.write_all(contents)?;
        fs::rename(&self.temporary, self.temporary.with_extension("json"))
    }
}

/// The supervisor process: runs `argv` in `dir` in its own process group and records how it
/// ended. Standard input is the listening control socket (see [`launch`]). Returns the
/// supervisor's own exit code.
pub fn supervise(dir: &Path, argv: &[String]) -> i32 {
    // SAFETY: fd 0 is the listening socket `launch` passed; nothing else owns it.
    let listener = unsafe { UnixListener::from_raw_fd(0) };
    // A daemon started in the background of a shell ignores SIGINT and SIGQUIT, and ignored
    // signals survive exec: the task would inherit them, and a shell task could not even
    // trap its kill signal. The task starts with every signal at its default.
    for signal in [
        libc::SIGHUP,
        libc::SIGINT,
        libc::SIGQUIT,
        libc::SIGTERM,
        libc::SIGUSR1,
        libc::SIGUSR2,
        libc::SIGPIPE,
        libc::SIGALRM,
    ] {
        // SAFETY: setting a signal's disposition to its default has no preconditions.
        unsafe { libc::signal(signal, libc::SIG_DFL) };
    }
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
        return record(ExitRecord {
            exit_code: -1,
            signal: None,
            error: Some("no command to run".into()),
        });
    };
    let mut command = Command::new(program);
    command.args(args).stdin(Stdio::null()).process_group(0);
    // SAFETY: prctl is async-signal-safe. If the supervisor is killed (a daemon giving up
    // on its handshake), the task goes with it rather than running on unsupervised.
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let spawned = command.spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(error) => {
            return record(ExitRecord {
                exit_code: 127,
                signal: None,
                error: Some(format!("failed to start {program:?}: {error}")),
            })
        }
    };
    let pid = child.id() as i32;
    // The task started with SIGPIPE at its default; the supervisor must not die of a write
    // to a daemon that went away (a control connection closed before its pid was read).
    // SAFETY: ignoring a signal has no preconditions.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
    // The task's exit, as a descriptor to poll: readable once it has exited, while its pid
    // stays its own (unreaped) until this process reaps it after the loop.
    // SAFETY: pidfd_open on our own unreaped child; the descriptor it returns is ours.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if pidfd < 0 {
        let error = io::Error::last_os_error();
        let _ = child.kill();
        let _ = child.wait();
        return record(ExitRecord {
            exit_code: -1,
            signal: None,
            error: Some(format!("watching the task: {error}")),
        });
    }
    // SAFETY: a new descriptor, owned by nothing else.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd as i32) };
    let mut connections = serve_until_exit(&listener, &pidfd, pid);
    // What the task left running in its group goes with it, as Nomad's executor does.
    // SAFETY: killpg has no memory-safety preconditions; the pid is not reaped yet.
    unsafe { libc::killpg(pid, libc::SIGKILL) };
    let status = match child.wait() {
        Ok(status) => status,
        Err(error) => {
            return record(ExitRecord {
                exit_code: -1,
                signal: None,
                error: Some(format!("waiting for the task: {error}")),
            })
        }
    };
    let (exit_code, signal) = match status.signal() {
        Some(signal) => (128 + signal, Some(signal)),
        None => (status.code().unwrap_or(-1), None),
    };
    let exit = ExitRecord {
        exit_code,
        signal,
        error: None,
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
    // Nothing is left to flush: the status is on disk and sent. Skipping the C library's
    // exit handlers and the loader's finalizers spares each supervisor's exit the page
    // faults they cost, while a stop of many tasks still has signals to deliver.
    // SAFETY: _exit ends the process; this is its only thread.
    unsafe { libc::_exit(code) }
}

/// The supervisor's one thread, until the task exits: accepts control connections (each
/// gets the task's pid), and sends the `signal N` they ask for to the task's process group.
/// The task is not reaped before this returns, so a signal never reaches a process that
/// reused its pid. Returns the connections still open, for the `exit` line.
fn serve_until_exit(
    listener: &UnixListener,
    pidfd: &OwnedFd,
    pid: i32,
) -> Vec<(UnixStream, Vec<u8>)> {
    use std::os::fd::AsRawFd;
    let _ = listener.set_nonblocking(true);
    let mut connections: Vec<(UnixStream, Vec<u8>)> = Vec::new();
    let pollfd = |fd: i32| libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // A listener in error is polled no more (-1 is skipped): it would wake every poll.
    let mut listening = listener.as_raw_fd();
    loop {
        let mut polled: Vec<libc::pollfd> = [pidfd.as_raw_fd(), listening]
            .into_iter()
            .chain(connections.iter().map(|(stream, _)| stream.as_raw_fd()))
            .map(pollfd)
            .collect();
        // SAFETY: a valid array of pollfds of the given length.
        let ready = unsafe { libc::poll(polled.as_mut_ptr(), polled.len() as libc::nfds_t, -1) };
        if ready < 0 {
            if io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
                // Out of memory, most likely: try again shortly rather than spin.
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            continue;
        }
        // Signals first: a request read together with the task's exit still goes to its
        // unreaped pid (harmlessly).
        let mut closed = Vec::new();
        for (ix, (stream, partial)) in connections.iter_mut().enumerate() {
            if polled[ix + 2].revents == 0 {
                continue;
            }
            if !read_requests(stream, partial, pid) {
                closed.push(ix);
            }
        }
        for ix in closed.into_iter().rev() {
            connections.swap_remove(ix);
        }
        if polled[1].revents & (libc::POLLERR | libc::POLLNVAL) != 0 {
            listening = -1;
        } else if polled[1].revents != 0 {
            while let Ok((mut stream, _)) = listener.accept() {
                if writeln!(stream, "{pid}").is_ok() && stream.set_nonblocking(true).is_ok() {
                    connections.push((stream, Vec::new()));
                }
            }
        }
        if polled[0].revents != 0 {
            return connections;
        }
    }
}

/// Reads what a control connection has sent and carries out its complete `signal N`
/// lines. Returns `false` once the connection has ended.
fn read_requests(stream: &mut UnixStream, partial: &mut Vec<u8>, pid: i32) -> bool {
    use std::io::Read;
    let mut buffer = [0u8; 256];
    loop {
        match stream.read(&mut buffer) {
            Ok(0) => return false,
            Ok(read) => {
                partial.extend_from_slice(&buffer[..read]);
                while let Some(end) = partial.iter().position(|&b| b == b'\n') {
                    let line: Vec<u8> = partial.drain(..=end).collect();
                    let signal = std::str::from_utf8(&line)
                        .ok()
                        .and_then(|line| line.trim().strip_prefix("signal "))
                        .and_then(|n| n.trim().parse::<i32>().ok());
                    if let Some(signal) = signal {
                        // SAFETY: killpg has no memory-safety preconditions; the task is not
                        // reaped (see `serve_until_exit`).
                        unsafe { libc::killpg(pid, signal) };
                    }
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

    #[test]
    fn signal_names_resolve_with_or_without_the_prefix() {
        assert_eq!(signal_number("SIGINT"), Some(libc::SIGINT));
        assert_eq!(signal_number("term"), Some(libc::SIGTERM));
        assert_eq!(signal_number("SIGNOPE"), None);
    }

    #[test]
    fn socket_names_are_stable_and_distinct() {
        let a = socket_name(Path::new("/data/alloc/a/web"));
        assert_eq!(a, socket_name(Path::new("/data/alloc/a/web")));
        assert_ne!(a, socket_name(Path::new("/data/alloc/b/web")));
    }
}
