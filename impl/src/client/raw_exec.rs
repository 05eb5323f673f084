//! The `raw_exec` driver: real processes, each under a small supervisor process, as Nomad's
//! executor runs them.
//!
//! The supervisor (`quiesce supervise`, [`supervise`]) starts the task in its own process
//! group, answers every connection on its control socket with the task's pid, and sends the
//! signals the daemon asks for over that connection (`signal N`) to the task's process group
//! — only while it has not reaped the task, so a signal can never reach a process that
//! reused the pid. When the task exits it kills whatever is left of the group, reaps the
//! task, writes the exit status to `exit.json` in the task directory and exits. It is started in a process group of its own,
//! so it outlives the daemon — a restart or a `kill -9` — and a restored runner reattaches by
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
        let record = match read_exit(&self.dir) {
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
        };
        (record, Reaper(None))
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

/// Writes a file so that readers see all of it or none of it. Not synced to disk: it must
/// survive the daemon's crash, not the machine's (which ends the task too), and 100 tasks
/// exiting at once would otherwise queue 100 disk syncs on the stop's critical path.
fn write_atomically(path: &Path, contents: &[u8]) -> io::Result<()> {
    let temporary = path.with_extension("tmp");
    let mut file = fs::File::create(&temporary)?;
    file.write_all(contents)?;
    fs::rename(temporary, path)
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
    let record = |record: ExitRecord| {
        let json = serde_json::to_vec(&record).expect("an exit record serializes");
        match write_atomically(&dir.join(EXIT_FILE), &json) {
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
    // Whether the task has exited: from then on no signal goes to its pid (reaping it would
    // free the pid for reuse).
    let control = std::sync::Arc::new(std::sync::Mutex::new(Control::default()));
    {
        let control = std::sync::Arc::clone(&control);
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let control = std::sync::Arc::clone(&control);
                std::thread::spawn(move || serve_connection(stream, pid, &control));
            }
        });
    }
    // Wait for the exit without reaping, so the pid stays the task's while the group is
    // cleaned up and the signal handlers are shut out.
    // SAFETY: a zeroed siginfo_t is a valid out-parameter for waitid.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: waiting on our own child with a valid out-parameter.
        let rc = unsafe {
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOWAIT,
            )
        };
        if rc == 0 || io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            break;
        }
    }
    {
        let mut control = control.lock().unwrap_or_else(|e| e.into_inner());
        control.exited = true;
        // What the task left running in its group goes with it, as Nomad's executor does.
        // SAFETY: killpg has no memory-safety preconditions.
        unsafe { libc::killpg(pid, libc::SIGKILL) };
    }
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
    // which can act on it without waiting for this process to go.
    let line = format!(
        "exit {}\n",
        serde_json::to_string(&exit).expect("an exit record serializes")
    );
    let mut control = control.lock().unwrap_or_else(|e| e.into_inner());
    for stream in &mut control.connections {
        let _ = stream.write_all(line.as_bytes());
    }
    control.exit_line = Some(line);
    code
}

/// What the supervisor's threads share.
#[derive(Default)]
struct Control {
    /// The task has exited: no more signals to its pid.
    exited: bool,
    /// Connections that get the `exit` line.
    connections: Vec<UnixStream>,
    /// The `exit` line, once sent: a connection made after it gets it at once.
    exit_line: Option<String>,
}

/// One control connection: the pid first, then `signal N` requests until the daemon closes
/// it; the `exit` line when the task has exited. The connection stays open until the
/// supervisor exits (its end is the news of the exit for a daemon that missed the line).
fn serve_connection(mut stream: UnixStream, pid: i32, control: &std::sync::Mutex<Control>) {
    if writeln!(stream, "{pid}").is_err() {
        return;
    }
    let (Ok(reader), Ok(writer)) = (stream.try_clone(), stream.try_clone()) else {
        return;
    };
    {
        let mut control = control.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(line) = &control.exit_line {
            let _ = stream.write_all(line.as_bytes());
        }
        control.connections.push(writer);
    }
    for line in BufReader::new(reader).lines() {
        let Ok(line) = line else { break };
        let Some(signal) = line
            .strip_prefix("signal ")
            .and_then(|n| n.trim().parse::<i32>().ok())
        else {
            continue;
        };
        let control = control.lock().unwrap_or_else(|e| e.into_inner());
        if !control.exited {
            // SAFETY: killpg has no memory-safety preconditions; the pid is not reaped.
            unsafe { libc::killpg(pid, signal) };
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
