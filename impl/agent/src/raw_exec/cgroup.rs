//! A task's processes in a cgroup (v2) of their own, so that all of them are stopped with it
//! (issue 24, finding 7: a `setsid` child of a task left its process group and survived
//! stop, purge and the agent's stop, re-parented to init; Nomad's raw_exec kills the task's
//! whole cgroup).
//!
//! The agent makes one cgroup for itself under the host's cgroup2 mount
//! (`quiesce-<hash of its data dir>`, so agents do not meet) and one per run of each task
//! inside it, named as the run's supervisor socket is. The supervisor opens the run's
//! `cgroup.procs` and `cgroup.kill` before it forks, and the task joins the cgroup between
//! fork and exec (it writes `0`, itself, to `cgroup.procs`): every process it starts is in
//! it, whatever session or group it makes. The kill signal still goes to the task's process
//! group, as before; SIGKILL after the kill timeout, and the end of the task, kill the whole
//! cgroup (`cgroup.kill`), and the supervisor removes the cgroup once it is empty. Where the
//! host has no cgroup2 mount the agent can write (not root, a read-only mount), the agent
//! says so at start and tasks run in their process group alone, as before.
//!
//! The cgroup2 mount is `/sys/fs/cgroup`, or `/sys/fs/cgroup/unified` on a hybrid host;
//! `cgroup.kill` needs Linux 5.14.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// Where the host's cgroup2 hierarchy is mounted (`/sys/fs/cgroup` on a unified host,
/// `/sys/fs/cgroup/unified` on a hybrid one), from this process's mount table.
fn cgroup2_mount() -> io::Result<PathBuf> {
    let table = fs::read_to_string("/proc/self/mountinfo")?;
    for line in table.lines() {
        // `ID PARENT MAJ:MIN ROOT MOUNT OPTIONS… - TYPE SOURCE SUPER`
        let Some((before, after)) = line.split_once(" - ") else {
            continue;
        };
        if after.split(' ').next() == Some("cgroup2") {
            if let Some(mount) = before.split(' ').nth(4) {
                return Ok(PathBuf::from(mount));
            }
        }
    }
    Err(io::Error::new(
        io::ErrorKind::NotFound,
        "no cgroup2 hierarchy is mounted",
    ))
}

/// FNV-1a of some bytes, as hex: a short, stable name.
fn hash(bytes: &[u8]) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in bytes {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{hash:016x}")
}

/// Makes the agent's cgroup for the data dir `data_dir`, where its tasks' cgroups are
/// made; says why not if the host cannot (then tasks run in their process groups alone).
pub fn prepare(data_dir: &Path) -> Result<PathBuf, String> {
    let mount = cgroup2_mount().map_err(|e| e.to_string())?;
    let root = mount.join(format!(
        "quiesce-{}",
        hash(data_dir.as_os_str().as_encoded_bytes())
    ));
    match fs::create_dir(&root) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("making {}: {e}", root.display())),
    }
    if !root.join("cgroup.kill").exists() {
        return Err(format!(
            "{} has no cgroup.kill (Linux 5.14 or later has it)",
            root.display()
        ));
    }
    Ok(root)
}

/// The cgroup, under the agent's `root`, for the run whose supervisor keeps its state in
/// `state`, made now.
pub(super) fn for_run(root: &Path, state: &Path) -> io::Result<PathBuf> {
    let dir = root.join(hash(state.as_os_str().as_encoded_bytes()));
    match fs::create_dir(&dir) {
        // Made before, by a launch a crash cut short (the caller knows it never started).
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        other => other?,
    }
    Ok(dir)
}

/// A run's cgroup, as its supervisor holds it: opened before the fork.
#[derive(Debug)]
pub struct TaskCgroup {
    dir: PathBuf,
    procs: fs::File,
    kill: fs::File,
}

impl TaskCgroup {
    pub fn open(dir: &Path) -> io::Result<TaskCgroup> {
        let open = |name: &str| {
            fs::OpenOptions::new()
                .write(true)
                .open(dir.join(name))
                .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", dir.join(name).display())))
        };
        Ok(TaskCgroup {
            dir: dir.to_path_buf(),
            procs: open("cgroup.procs")?,
            kill: open("cgroup.kill")?,
        })
    }

    /// Moves the calling process into the cgroup: between fork and exec, so only a system
    /// call (async-signal-safe).
    pub fn join(&self) -> io::Result<()> {
        nix::unistd::write(&self.procs, b"0")?;
        Ok(())
    }

    /// SIGKILLs every process in the cgroup.
    pub fn kill(&self) {
        let _ = (&self.kill).write_all(b"1");
    }

    /// Kills what is left, waits (at most a second) until the cgroup is empty, and removes
    /// it. Returns why not, if it could not.
    pub fn remove(&self) -> Result<(), String> {
        self.kill();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
        loop {
            match fs::remove_dir(&self.dir) {
                Ok(()) => return Ok(()),
                // Busy while a killed process is still being torn down.
                Err(e)
                    if std::time::Instant::now() < deadline
                        && e.raw_os_error() == Some(libc::EBUSY) =>
                {
                    std::thread::sleep(std::time::Duration::from_millis(2));
                }
                Err(e) => return Err(format!("removing {}: {e}", self.dir.display())),
            }
        }
    }
}
