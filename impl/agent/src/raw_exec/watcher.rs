//! One thread that watches every supervised task for its exit (epoll over the tasks'
//! pidfds, the control connections and the supervisors' pidfds).

use super::{exit_left_on_disk, Attached, ExitRecord, Request};
use nix::errno::Errno;
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use nix::sys::socket::{recv, MsgFlags};
use std::io::{self, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::Child;

/// What the watcher reports about a task.
pub enum Event<T> {
    /// The task's process has exited (its pidfd says so). Its supervisor reaps it and sends
    /// its exit status when asked (`report`): the daemon asks once its kill path is done.
    Died(T),
    /// The task's exit status, as its supervisor sent it (or left it on disk).
    Exited(Exited<T>),
}

/// One task's exit, as the watcher reports it.
pub struct Exited<T> {
    pub token: T,
    pub record: ExitRecord,
    /// The control connection it was read from: the supervisor exits once every connection
    /// to it is closed (see `supervisor::linger`), so the daemon closes it when it is done
    /// with the task — after the kill path, not in the middle of it.
    pub connection: Option<UnixStream>,
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
    epoll: Epoll,
    watched: std::sync::Mutex<Watched<T>>,
}

struct Watched<T> {
    next: u64,
    entries: std::collections::HashMap<u64, Watch<T>>,
}

/// One task being watched. Its epoll keys: `3 × id` for the control connection, `3 × id + 1`
/// for the supervisor's pidfd, `3 × id + 2` for the task's pidfd.
struct Watch<T> {
    /// Taken when the exit is reported (once).
    token: Option<T>,
    stream: Option<UnixStream>,
    /// The task's pidfd, until it has reported the task's death.
    task: Option<OwnedFd>,
    /// What has been read of the connection and not yet ended by a newline.
    partial: Vec<u8>,
    supervisor: Option<(Child, OwnedFd)>,
    dir: PathBuf,
}

impl<T> Watch<T> {
    /// Reads what the connection has without blocking. Returns the task's exit status once
    /// it is known: the `exit` line, or `exit.json` when the connection ends without one.
    fn read(&mut self) -> Option<ExitRecord> {
        let stream = self.stream.as_ref()?;
        let mut buffer = [0u8; 512];
        loop {
            // MSG_DONTWAIT, not O_NONBLOCK: the daemon's signaller shares this socket and
            // keeps blocking writes.
            let read = recv(stream.as_raw_fd(), &mut buffer, MsgFlags::MSG_DONTWAIT);
            if let Ok(read @ 1..) = read {
                self.partial.extend_from_slice(&buffer[..read]);
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
            match read {
                Err(Errno::EINTR) => continue,
                Err(Errno::EAGAIN) => return None,
                _ => {}
            }
            // End-of-stream (or a reset): the supervisor has exited.
            return Some(exit_left_on_disk(&self.dir));
        }
    }
}

/// Adds `fd` to the epoll set under `key`, for input and hang-ups.
fn epoll_add(epoll: &Epoll, fd: BorrowedFd<'_>, key: u64) -> io::Result<()> {
    let event = EpollEvent::new(EpollFlags::EPOLLIN | EpollFlags::EPOLLRDHUP, key);
    Ok(epoll.add(fd, event)?)
}

/// Takes `fd` out of the epoll set (an error is of no consequence to any caller).
fn epoll_delete(epoll: &Epoll, fd: BorrowedFd<'_>) {
    let _ = epoll.delete(fd);
}

/// The keys of one watched task in the epoll set.
const KEYS: u64 = 3;

impl<T: Clone + Send + 'static> ExitWatcher<T> {
    pub fn new() -> io::Result<Self> {
        let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)?;
        Ok(ExitWatcher {
            inner: std::sync::Arc::new(WatcherInner {
                epoll,
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

    /// Watches a task: its death and then its exit status are reported once each, on the
    /// watcher's thread (see [`ExitWatcher::start`]). On failure (out of descriptors) the
    /// task is handed back, to be waited for otherwise ([`Attached::wait`]).
    pub fn watch(&self, attached: Attached, token: T) -> Result<(), (io::Error, Attached)> {
        let Some(stream) = attached.stream.as_ref() else {
            let error = io::Error::new(io::ErrorKind::NotConnected, "no control connection");
            return Err((error, attached));
        };
        let pidfd = match &attached.child {
            Some(child) => match pidfd_open(child.id() as i32) {
                // Our own unreaped child: a zombie's pid stays ours.
                Ok(fd) => Some(fd),
                Err(error) => return Err((error, attached)),
            },
            None => None,
        };
        // The task is its supervisor's child, which reaps it only once asked (or once no
        // daemon is connected: this one is), so its pid is still its own. If it cannot be
        // watched, its exit is asked for at once: the supervisor sends it when it comes.
        let task = pidfd_open(attached.pid).ok();
        if task.is_none() {
            let _ = (&*stream).write_all(Request::Report.line().as_bytes());
        }
        let mut watched = self.watched();
        let id = watched.next;
        let epoll = &self.inner.epoll;
        let mut added: Vec<BorrowedFd<'_>> = Vec::new();
        let descriptors = [
            Some((stream.as_fd(), KEYS * id)),
            pidfd.as_ref().map(|fd| (fd.as_fd(), KEYS * id + 1)),
            task.as_ref().map(|fd| (fd.as_fd(), KEYS * id + 2)),
        ];
        let mut failed = None;
        for (fd, key) in descriptors.into_iter().flatten() {
            if let Err(error) = epoll_add(epoll, fd, key) {
                failed = Some(error);
                break;
            }
            added.push(fd);
        }
        if let Some(error) = failed {
            for fd in added {
                epoll_delete(epoll, fd);
            }
            return Err((error, attached));
        }
        watched.next += 1;
        let mut attached = attached;
        let supervisor = attached.child.take().zip(pidfd);
        watched.entries.insert(
            id,
            Watch {
                token: Some(token),
                stream: attached.stream.take(),
                task,
                partial: Vec::new(),
                supervisor,
                dir: attached.dir.clone(),
            },
        );
        Ok(())
    }

    /// Starts the watcher's thread, which hands `report` what it finds, what came together
    /// at once.
    pub fn start(&self, mut report: impl FnMut(Vec<Event<T>>) + Send + 'static) -> io::Result<()> {
        let watcher = self.clone();
        std::thread::Builder::new()
            .name("exits".into())
            .spawn(move || loop {
                let mut found = Vec::new();
                watcher.wait_once(&mut found);
                // Reported outside the watcher's lock: `report` may start a task, which
                // registers it here.
                if !found.is_empty() {
                    report(found);
                }
            })
            .map(|_| ())
    }

    fn wait_once(&self, found: &mut Vec<Event<T>>) {
        let mut events = [EpollEvent::empty(); 64];
        let Ok(count) = self.inner.epoll.wait(&mut events, EpollTimeout::NONE) else {
            // EINTR: wait again.
            return;
        };
        let epoll = &self.inner.epoll;
        let mut watched = self.watched();
        for event in &events[..count] {
            let key = event.data();
            let id = key / KEYS;
            let Some(watch) = watched.entries.get_mut(&id) else {
                continue;
            };
            match key % KEYS {
                0 => {
                    if let Some(record) = watch.read() {
                        let connection = watch.stream.take();
                        if let Some(stream) = &connection {
                            epoll_delete(epoll, stream.as_fd());
                        }
                        // Its death, if the exit came first (the task could not be watched).
                        if let Some(task) = watch.task.take() {
                            epoll_delete(epoll, task.as_fd());
                        }
                        if let Some(token) = watch.token.take() {
                            found.push(Event::Exited(Exited {
                                token,
                                record,
                                connection,
                            }));
                        }
                    }
                }
                1 => {
                    if let Some((mut child, pidfd)) = watch.supervisor.take() {
                        // The supervisor has exited: reaped at once (no zombie).
                        epoll_delete(epoll, pidfd.as_fd());
                        let _ = child.wait();
                    }
                }
                _ => {
                    if let Some(task) = watch.task.take() {
                        epoll_delete(epoll, task.as_fd());
                        if let Some(token) = watch.token.clone() {
                            found.push(Event::Died(token));
                        }
                    }
                }
            }
            if watch.stream.is_none() && watch.supervisor.is_none() && watch.task.is_none() {
                watched.entries.remove(&id);
            }
        }
    }
}

/// A pidfd of `pid`, owned (rustix's pidfd_open: nix has none). A pid that is not positive
/// is refused as the kernel refuses it, with EINVAL.
pub(super) fn pidfd_open(pid: i32) -> io::Result<OwnedFd> {
    use rustix::process::{Pid, PidfdFlags};
    let pid = (pid > 0)
        .then(|| Pid::from_raw(pid))
        .flatten()
        .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
    Ok(rustix::process::pidfd_open(pid, PidfdFlags::empty())?)
}
