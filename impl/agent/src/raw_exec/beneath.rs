//! Files the agent, as root, makes inside a task's directory. A task with a `User` owns its
//! `local/` and everything under it, and can rename, exchange (`renameat2(RENAME_EXCHANGE)`)
//! or replace any entry there at any moment; a path checked and then opened by name is a
//! path the task can redirect in between (issue 24: a `nobody` task made root rewrite a
//! root-only file outside the allocation, and chown it to `nobody`).
//!
//! So nothing here is resolved by name twice. A [`Dir`] is an open directory; each step
//! opens one component relative to the last with `openat2(RESOLVE_BENEATH |
//! RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)` (or, on a kernel before 5.6, `openat` with
//! `O_NOFOLLOW`, the same for a single component), so a symbolic link anywhere on the way
//! is refused and a directory renamed away is still the one opened. A file is never
//! opened where it is: a new one is made beside it (`O_CREAT | O_EXCL`), written, chowned
//! and chmodded on its descriptor, and renamed over the name, so whatever the task put
//! there — a hard link to somebody else's file, swapped in after any check — is replaced as
//! an entry and its file never written (the review of issue 24: an open-then-`fstat` check
//! of the link count lost the race to a task unlinking its hard link in between).

use rustix::fs::{Mode, OFlags, ResolveFlags};
use std::ffi::OsStr;
use std::io::{self, Write};
use std::os::fd::OwnedFd;
use std::path::{Component, Path, PathBuf};

/// An open directory, and the path it was opened at (for messages only: nothing is
/// resolved through it again).
#[derive(Debug)]
pub struct Dir {
    fd: OwnedFd,
    shown: PathBuf,
}

/// What every step refuses to follow.
const RESOLVE: ResolveFlags = ResolveFlags::BENEATH
    .union(ResolveFlags::NO_SYMLINKS)
    .union(ResolveFlags::NO_MAGICLINKS);

/// Opens one component `name` beneath `dir`, following no link.
fn open_one(dir: &OwnedFd, name: &OsStr, flags: OFlags, mode: Mode) -> io::Result<OwnedFd> {
    let flags = flags | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    match rustix::fs::openat2(dir, name, flags, mode, RESOLVE) {
        // A kernel without openat2 (before 5.6): for one component, O_NOFOLLOW refuses the
        // same links, and the name has no `/` or `..` (checked by the callers).
        Err(rustix::io::Errno::NOSYS) => Ok(rustix::fs::openat(dir, name, flags, mode)?),
        other => Ok(other?),
    }
}

/// The components of a relative path of normal components only (what `spec` admits for a
/// template's destination); anything else is refused.
fn normal_components(path: &Path) -> io::Result<Vec<&OsStr>> {
    let parts: Vec<&OsStr> = path
        .components()
        .map(|part| match part {
            Component::Normal(name) => Ok(name),
            _ => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{}: not a plain relative path", path.display()),
            )),
        })
        .collect::<io::Result<_>>()?;
    if parts.is_empty() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "an empty path"));
    }
    Ok(parts)
}

/// An error naming the path and, for a link, that it was refused.
fn named(shown: &Path, error: io::Error) -> io::Error {
    let why = match error.raw_os_error() {
        Some(libc::ELOOP) => "a symbolic link, not followed".to_string(),
        // O_DIRECTORY is checked before O_NOFOLLOW: a link where a directory goes says so.
        Some(libc::ENOTDIR) => "not a directory (a symbolic link is not followed)".to_string(),
        _ => error.to_string(),
    };
    io::Error::new(error.kind(), format!("{}: {why}", shown.display()))
}

impl Dir {
    /// Opens the directory at `path`, which the agent made (its parents are the agent's
    /// own); its last component is not followed if it is a link.
    pub fn open(path: &Path) -> io::Result<Dir> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = rustix::fs::open(path, flags, Mode::empty()).map_err(|e| named(path, e.into()))?;
        Ok(Dir {
            fd,
            shown: path.to_path_buf(),
        })
    }

    /// The open directory.
    pub fn fd(&self) -> &OwnedFd {
        &self.fd
    }

    /// The directory `name` in this one, made with `mode` if absent: a link or anything
    /// but a directory there is refused.
    pub fn subdir(&self, name: &OsStr, mode: u32) -> io::Result<Dir> {
        let shown = self.shown.join(name);
        match rustix::fs::mkdirat(&self.fd, name, Mode::from_raw_mode(mode)) {
            Ok(()) | Err(rustix::io::Errno::EXIST) => {}
            Err(error) => return Err(named(&shown, error.into())),
        }
        let fd = open_one(
            &self.fd,
            name,
            OFlags::RDONLY | OFlags::DIRECTORY,
            Mode::empty(),
        )
        .map_err(|e| named(&shown, e))?;
        Ok(Dir { fd, shown })
    }

    /// The entry at `path` (normal components only; empty for this directory itself) as an
    /// `O_PATH` descriptor: nothing opened for reading, no device or FIFO opened at all, and
    /// no symbolic link followed on the way; a link at the end is the link itself. What it
    /// is can then be told with `fstat` on the descriptor, and it can be reopened for
    /// reading only through it ([`reopen`]), so a task renaming entries in between changes
    /// nothing about which file that is. Its errors are the system's (`ELOOP` for a link on
    /// the way, `ENOTDIR`, `ENOENT`), left for the caller to name the path as its user
    /// knows it.
    pub fn locate(&self, path: &Path) -> io::Result<OwnedFd> {
        if path.as_os_str().is_empty() {
            return Ok(rustix::io::fcntl_dupfd_cloexec(&self.fd, 0)?);
        }
        let parts = normal_components(path)?;
        let (last, parents) = parts.split_last().expect("at least one component");
        let mut at: Option<OwnedFd> = None;
        for part in parents {
            let next = open_one(
                at.as_ref().unwrap_or(&self.fd),
                part,
                OFlags::PATH | OFlags::DIRECTORY,
                Mode::empty(),
            )?;
            at = Some(next);
        }
        open_one(
            at.as_ref().unwrap_or(&self.fd),
            last,
            OFlags::PATH,
            Mode::empty(),
        )
    }

    /// Gives this directory to `owner` (uid, gid), on its descriptor.
    pub fn chown(&self, owner: (u32, u32)) -> io::Result<()> {
        let (uid, gid) = owner;
        std::os::unix::fs::fchown(&self.fd, Some(uid), Some(gid)).map_err(|e| named(&self.shown, e))
    }

    /// Writes `contents` to the file at `path` beneath this directory (its directories made
    /// 0755 where absent), with `mode`, owned by `owner` if given. Refused, and nothing
    /// written anywhere, if a link, a FIFO, a device or a hard-linked file is on the way.
    pub fn write_file(
        &self,
        path: &Path,
        contents: &[u8],
        mode: u32,
        owner: Option<(u32, u32)>,
    ) -> io::Result<()> {
        let parts = normal_components(path)?;
        let (name, parents) = parts.split_last().expect("at least one component");
        let mut at: Option<Dir> = None;
        for part in parents {
            let next = at.as_ref().unwrap_or(self).subdir(part, 0o755)?;
            at = Some(next);
        }
        let at = at.as_ref().unwrap_or(self);
        let shown = at.shown.join(name);
        // What is there now, for a clear refusal: a link, a FIFO, a device or a hard link is
        // the task's doing and worth an error. (Only the message rests on this look: the
        // task can change the entry right after it, and the rename below never opens it.)
        match rustix::fs::statat(&at.fd, *name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) => {
                let kind = rustix::fs::FileType::from_raw_mode(stat.st_mode);
                if kind.is_symlink() {
                    return Err(named(&shown, io::Error::from_raw_os_error(libc::ELOOP)));
                }
                if !kind.is_file() || stat.st_nlink != 1 {
                    return Err(io::Error::other(format!(
                        "{}: not a plain file (a FIFO, a device or a hard link), not written",
                        shown.display()
                    )));
                }
            }
            Err(rustix::io::Errno::NOENT) => {}
            Err(error) => return Err(named(&shown, error.into())),
        }
        // A file of its own, new (O_EXCL: nothing the task made is ever opened), written,
        // owned and moded on its descriptor, then renamed over the name: whatever the task
        // has put there meanwhile (a hard link to somebody else's file, say) is replaced as
        // an entry, its file never written.
        let (temporary, fd) = Self::fresh(at, name).map_err(|e| named(&shown, e))?;
        let written = (|| {
            let mut file = std::fs::File::from(fd);
            file.write_all(contents)?;
            if let Some((uid, gid)) = owner {
                std::os::unix::fs::fchown(&file, Some(uid), Some(gid))?;
            }
            rustix::fs::fchmod(&file, Mode::from_raw_mode(mode))?;
            rustix::fs::renameat(&at.fd, &temporary, &at.fd, *name)?;
            Ok(())
        })();
        if written.is_err() {
            let _ = rustix::fs::unlinkat(&at.fd, &temporary, rustix::fs::AtFlags::empty());
        }
        written.map_err(|e: io::Error| named(&shown, e))
    }

    /// A new, empty file beside `name` in `at`, made here and now (a name the task took
    /// first is passed over).
    fn fresh(at: &Dir, name: &OsStr) -> io::Result<(std::ffi::OsString, OwnedFd)> {
        static MADE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let mut last = io::Error::from_raw_os_error(libc::EEXIST);
        for _ in 0..16 {
            let made = MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos());
            let mut temporary = std::ffi::OsString::from(".");
            temporary.push(name);
            temporary.push(format!(".quiesce-{}-{made}-{nanos}", std::process::id()));
            match open_one(
                &at.fd,
                &temporary,
                OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL,
                Mode::from_raw_mode(0o600),
            ) {
                Ok(fd) => return Ok((temporary, fd)),
                Err(error) if error.raw_os_error() == Some(libc::EEXIST) => last = error,
                Err(error) => return Err(error),
            }
        }
        Err(last)
    }
}

/// Opens for reading the file or directory a [`Dir::locate`] descriptor stands for, through
/// the agent's own `/proc/self/fd`: the same inode, whatever its name is now. The caller
/// has checked with `fstat` that it is a plain file or a directory.
pub fn reopen(located: &OwnedFd, flags: OFlags) -> io::Result<OwnedFd> {
    use std::os::fd::AsRawFd;
    let path = format!("/proc/self/fd/{}", located.as_raw_fd());
    let flags = flags | OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOCTTY | OFlags::NONBLOCK;
    Ok(rustix::fs::open(path.as_str(), flags, Mode::empty())?)
}

#[cfg(test)]
mod tests {
    use super::Dir;
    use std::os::unix::fs::PermissionsExt;
    use std::path::{Path, PathBuf};

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("quiesce-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("local")).unwrap();
        dir
    }

    #[test]
    fn a_template_file_is_written_and_no_link_or_fifo_is_followed() {
        let dir = scratch("write-file");
        let open = Dir::open(&dir).unwrap();
        open.write_file(Path::new("local/conf/app.conf"), b"x=1\n", 0o640, None)
            .unwrap();
        let written = dir.join("local/conf/app.conf");
        assert_eq!(std::fs::read(&written).unwrap(), b"x=1\n");
        assert_eq!(
            std::fs::metadata(&written).unwrap().permissions().mode() & 0o777,
            0o640
        );
        // Written again (a restart): emptied first, not appended to.
        open.write_file(Path::new("local/conf/app.conf"), b"y\n", 0o640, None)
            .unwrap();
        assert_eq!(std::fs::read(&written).unwrap(), b"y\n");
        // A symlink planted where the file goes, or on the way, a FIFO, a hard link, a path
        // that climbs: refused, and what they point at is untouched.
        let victim = dir.join("victim");
        std::fs::write(&victim, b"mine").unwrap();
        std::os::unix::fs::symlink(&victim, dir.join("local/link")).unwrap();
        std::os::unix::fs::symlink(&dir, dir.join("local/up")).unwrap();
        std::fs::hard_link(&victim, dir.join("local/hard")).unwrap();
        let made = std::process::Command::new("mkfifo")
            .arg(dir.join("local/fifo"))
            .status()
            .unwrap();
        assert!(made.success());
        for path in [
            "local/link",
            "local/up/victim",
            "local/hard",
            "local/fifo",
            "local/../victim",
            "/etc/passwd",
        ] {
            let refused = open.write_file(Path::new(path), b"pwned", 0o666, None);
            assert!(refused.is_err(), "{path}");
        }
        let error = open
            .write_file(Path::new("local/up/victim"), b"pwned", 0o666, None)
            .unwrap_err();
        assert!(error.to_string().contains("not followed"), "{error}");
        assert_eq!(std::fs::read(&victim).unwrap(), b"mine");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Issue 24's attack, in one process: a thread exchanges a directory on the way to the
    /// file with a symlink to the victim's directory (`renameat2(RENAME_EXCHANGE)`, as fast
    /// as it can) while the agent's write is made thousands of times. Each write lands in
    /// the real directory or is refused; the victim is never touched.
    #[test]
    fn a_directory_exchanged_for_a_link_mid_write_never_redirects_it() {
        use std::sync::atomic::{AtomicBool, Ordering};
        let dir = scratch("exchange");
        let victim_dir = dir.join("victim");
        std::fs::create_dir(&victim_dir).unwrap();
        std::fs::write(victim_dir.join("app.conf"), b"root's").unwrap();
        std::fs::create_dir(dir.join("local/conf")).unwrap();
        std::os::unix::fs::symlink(&victim_dir, dir.join("local/evil")).unwrap();
        let done = std::sync::Arc::new(AtomicBool::new(false));
        let racer = {
            let (done, local) = (done.clone(), dir.join("local"));
            std::thread::spawn(move || {
                let local = rustix::fs::open(
                    &local,
                    rustix::fs::OFlags::DIRECTORY,
                    rustix::fs::Mode::empty(),
                )
                .unwrap();
                let mut swaps = 0u64;
                while !done.load(Ordering::Relaxed) {
                    rustix::fs::renameat_with(
                        &local,
                        "conf",
                        &local,
                        "evil",
                        rustix::fs::RenameFlags::EXCHANGE,
                    )
                    .unwrap();
                    swaps += 1;
                }
                swaps
            })
        };
        let open = Dir::open(&dir).unwrap();
        let (mut written, mut refused) = (0, 0);
        for _ in 0..5_000 {
            match open.write_file(Path::new("local/conf/app.conf"), b"template", 0o644, None) {
                Ok(()) => written += 1,
                Err(_) => refused += 1,
            }
        }
        done.store(true, Ordering::Relaxed);
        let swaps = racer.join().unwrap();
        assert_eq!(
            std::fs::read(victim_dir.join("app.conf")).unwrap(),
            b"root's",
            "{written} written, {refused} refused, {swaps} swaps"
        );
        assert!(swaps > 1_000, "the race ran: {swaps} swaps");
        assert!(
            written > 0 && refused > 0,
            "{written} written, {refused} refused"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The review's attack on the first fix: the task hard-links the victim where the file
    /// goes and unlinks it again, as fast as it can, so that an open file's link count is
    /// back to one when it is checked. The file is never opened where it is, so the victim
    /// is never written.
    #[test]
    fn a_hard_link_swapped_in_and_out_mid_write_never_gets_written() {
        use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
        let dir = scratch("hard-link");
        let victim = dir.join("victim");
        std::fs::write(&victim, b"root's").unwrap();
        std::fs::create_dir(dir.join("local/conf")).unwrap();
        let target = dir.join("local/conf/app.conf");
        let done = std::sync::Arc::new(AtomicBool::new(false));
        let linked = std::sync::Arc::new(AtomicU64::new(0));
        let racer = {
            let (done, linked) = (done.clone(), linked.clone());
            let (victim, target) = (victim.clone(), target.clone());
            std::thread::spawn(move || {
                while !done.load(Ordering::Relaxed) {
                    let _ = std::fs::remove_file(&target);
                    if std::fs::hard_link(&victim, &target).is_ok() {
                        linked.fetch_add(1, Ordering::Relaxed);
                        let _ = std::fs::remove_file(&target);
                    }
                }
            })
        };
        let open = Dir::open(&dir).unwrap();
        let (mut written, mut refused) = (0, 0);
        // At least 5,000 writes, and on until the racer has swapped the link in 1,000 times
        // (a loaded machine gives it fewer turns per write), for a minute at most.
        let started = std::time::Instant::now();
        while written + refused < 5_000
            || (linked.load(Ordering::Relaxed) <= 1_000
                && started.elapsed() < std::time::Duration::from_secs(60))
        {
            match open.write_file(Path::new("local/conf/app.conf"), b"template", 0o644, None) {
                Ok(()) => written += 1,
                Err(_) => refused += 1,
            }
        }
        done.store(true, Ordering::Relaxed);
        racer.join().unwrap();
        let links = linked.load(Ordering::Relaxed);
        assert_eq!(
            std::fs::read(&victim).unwrap(),
            b"root's",
            "{written} written, {refused} refused, {links} links"
        );
        assert!(links > 1_000, "the race ran: {links} links");
        assert!(written > 0, "{written} written, {refused} refused");
        let left: Vec<_> = std::fs::read_dir(dir.join("local/conf"))
            .unwrap()
            .filter_map(|e| e.ok())
            .map(|e| e.file_name())
            .filter(|name| name.to_string_lossy().contains(".quiesce-"))
            .collect();
        assert!(left.is_empty(), "no temporary file is left: {left:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
