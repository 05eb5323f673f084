//! `/v1/client/fs/{ls,stat,cat,readat}/:alloc`: an allocation's directory, read-only, as
//! Nomad's client serves it to `alloc fs`. The agent reads as root inside directories a task
//! may own and rearrange at any moment, so every path is resolved beneath the allocation's
//! directory in one walk that follows no symbolic link and admits no `..`
//! ([`beneath::Dir::locate`]); what is found is told by `fstat` on that descriptor and read
//! through it, never by its name again. Only plain files and directories are read: a FIFO,
//! socket or device is listed and stat'ed but never opened.
//!
//! What a task with a `User` may put in its `local/` includes a hard link to a file of the
//! host it cannot read (with `fs.protected_hardlinks` off): a check of the link count lost
//! the race to a task unlinking its link in between (the review of issue 27). So a file
//! under such a task's `local/` is read only if that user could read it anyway — it owns
//! it, or anyone may read it — judged by `fstat` on the pinned inode, whose owner and mode
//! the task cannot change for a file it does not own. (Its size and times can still be
//! listed or stat'ed.) Every answer is bounded: [`MAX_READ`] bytes, [`MAX_ENTRIES`]
//! entries.

use super::*;
use crate::raw_exec::beneath;
use rustix::fs::{FileType, OFlags};
use std::io::Read;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

/// The most bytes one `cat` or `readat` answers with.
pub const MAX_READ: u64 = super::logs::MAX_READ;
/// The most entries one listing answers with.
pub const MAX_ENTRIES: usize = 10_000;
/// The longest path asked for (Linux's `PATH_MAX`).
const MAX_PATH: usize = 4096;

/// What an `fs` request reads.
#[derive(Clone, Copy)]
pub(super) enum FsRead {
    List,
    Stat,
    Cat,
    ReadAt,
}

pub(super) fn alloc_fs(
    shared: &Shared,
    read: FsRead,
    alloc_id: &str,
    query: &Query,
) -> Result<Reply, ApiError> {
    let asked = match (query.get("path"), read) {
        (None | Some(""), FsRead::List) => "/",
        (None | Some(""), _) => return Err(error(400, "must provide a file name")),
        (Some(path), _) => path,
    };
    let path = relative(asked)?;
    let (root, task_users) = {
        let core = shared.core();
        let alloc = core
            .server
            .store
            .alloc(alloc_id)
            .ok_or_else(|| error(404, "Unknown allocation"))?;
        let users: Vec<(String, String)> = alloc
            .job
            .task_groups
            .iter()
            .filter(|g| g.name == alloc.task_group)
            .flat_map(|g| &g.tasks)
            .filter(|t| !t.user.is_empty())
            .map(|t| (t.name.clone(), t.user.clone()))
            .collect();
        (
            shared.config.data_dir.join("alloc").join(alloc.id.as_str()),
            users,
        )
    };
    let dir =
        match beneath::Dir::open(&root) {
            Ok(dir) => dir,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(error(
                404,
                "the allocation has no directory here (not started on this client, or collected)",
            )),
            Err(e) => {
                return Err(error(
                    500,
                    format!("opening the allocation directory: {}", e.kind()),
                ))
            }
        };
    let located = dir.locate(&path).map_err(|e| not_found_or(e, asked))?;
    let stat = rustix::fs::fstat(&located).map_err(|e| error(500, format!("{asked}: {e}")))?;
    let kind = FileType::from_raw_mode(stat.st_mode);
    match read {
        FsRead::Stat => plain(file_info(&name_of(&path), &stat, true)),
        FsRead::List if kind.is_dir() => plain(list(&located, asked)?),
        FsRead::List => plain(json!([file_info(&name_of(&path), &stat, false)])),
        FsRead::Cat | FsRead::ReadAt => {
            if kind.is_dir() {
                return Err(error(400, format!("{asked}: is a directory")));
            }
            if !kind.is_file() {
                return Err(error(
                    400,
                    format!("{asked}: not a plain file ({}), not read", kind_name(kind)),
                ));
            }
            if let Some(user) = owning_user(&path, &task_users) {
                if !readable_by(&user, &stat) {
                    return Err(error(
                        403,
                        format!(
                            "{asked}: not readable by the task's user {user:?}, so not read \
                             (a task's hard link to a file of the host is no way to read it)"
                        ),
                    ));
                }
            }
            let size = stat.st_size.max(0) as u64;
            let (offset, limit) = match read {
                FsRead::ReadAt => (
                    whole_number(query, "offset")?.min(size),
                    whole_number(query, "limit")?.min(MAX_READ),
                ),
                _ if size > MAX_READ => {
                    return Err(error(
                        400,
                        format!(
                            "{asked}: {size} bytes, more than cat answers ({MAX_READ}): read it \
                             in parts with readat (offset, limit)"
                        ),
                    ))
                }
                _ => (0, MAX_READ),
            };
            let file = beneath::reopen(&located, OFlags::empty())
                .map_err(|e| error(500, format!("{asked}: {e}")))?;
            let bytes =
                read_at(file, offset, limit).map_err(|e| error(500, format!("{asked}: {e}")))?;
            Ok(Reply {
                status: 200,
                body: Value::Null,
                index: None,
                next_token: None,
                raw: Some(bytes),
                encoded: None,
                gzipped: false,
                json: None,
            })
        }
    }
}

/// The user of the task whose `local/` holds `path`, if that task has one: the only place a
/// task can make entries (its directory and the allocation's are the agent's).
fn owning_user(path: &Path, task_users: &[(String, String)]) -> Option<String> {
    let mut parts = path.components().map(|c| c.as_os_str());
    let (task, local) = (parts.next()?, parts.next()?);
    if local != crate::raw_exec::LOCAL_DIR {
        return None;
    }
    task_users
        .iter()
        .find(|(name, _)| name.as_str() == task)
        .map(|(_, user)| user.clone())
}

/// Whether `user` could read the file `stat` describes: it owns it, or anyone may read
/// it. A user the host does not have reads nothing.
fn readable_by(user: &str, stat: &rustix::fs::Stat) -> bool {
    let owner = nix::unistd::User::from_name(user).ok().flatten();
    owner.is_some_and(|owner| {
        (stat.st_uid == owner.uid.as_raw() && stat.st_mode & 0o400 != 0)
            || stat.st_mode & 0o004 != 0
    })
}

/// The path asked for, relative to the allocation's directory: `/` and `.` parts dropped,
/// `..` refused (as Nomad does), and nothing but plain names left.
fn relative(asked: &str) -> Result<PathBuf, ApiError> {
    if asked.len() > MAX_PATH {
        return Err(error(400, format!("path longer than {MAX_PATH} bytes")));
    }
    if asked.contains('\0') {
        return Err(error(400, "path holds a NUL byte"));
    }
    let mut path = PathBuf::new();
    for part in asked.split('/').filter(|p| !p.is_empty() && *p != ".") {
        if part == ".." {
            return Err(error(400, "Path escapes the alloc directory"));
        }
        path.push(part);
    }
    Ok(path)
}

/// A failed [`beneath::Dir::locate`], named as the client asked.
fn not_found_or(e: std::io::Error, asked: &str) -> ApiError {
    match e.raw_os_error() {
        Some(libc::ENOENT) => error(404, format!("{asked}: no such file or directory")),
        Some(libc::ELOOP) => error(
            400,
            format!("{asked}: a symbolic link is on the way, not followed"),
        ),
        Some(libc::ENOTDIR) => error(
            400,
            format!("{asked}: not a directory on the way (a symbolic link is not followed)"),
        ),
        Some(libc::EXDEV) => error(400, format!("{asked}: leaves the allocation directory")),
        _ => error(500, format!("{asked}: {e}")),
    }
}

fn name_of(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "/".into())
}

fn whole_number(query: &Query, name: &str) -> Result<u64, ApiError> {
    let text = query
        .get(name)
        .ok_or_else(|| error(400, format!("must provide {name}")))?;
    text.parse()
        .map_err(|_| error(400, format!("{name} must be a whole number (got {text:?})")))
}

/// `limit` bytes from `offset` of an open plain file.
fn read_at(file: OwnedFd, offset: u64, limit: u64) -> std::io::Result<Vec<u8>> {
    use std::io::{Seek, SeekFrom};
    let mut file = std::fs::File::from(file);
    file.seek(SeekFrom::Start(offset))?;
    let mut bytes = Vec::new();
    file.take(limit).read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// A directory's entries, sorted by name, each stat'ed where it is (a link not followed).
fn list(located: &OwnedFd, asked: &str) -> Result<Value, ApiError> {
    let failed = |e: std::io::Error| error(500, format!("listing {asked}: {e}"));
    let opened = beneath::reopen(located, OFlags::DIRECTORY).map_err(failed)?;
    let mut entries = Vec::new();
    let dir = rustix::fs::Dir::read_from(&opened).map_err(|e| failed(e.into()))?;
    for entry in dir {
        let entry = entry.map_err(|e| failed(e.into()))?;
        let name = entry.file_name();
        if name.to_bytes() == b"." || name.to_bytes() == b".." {
            continue;
        }
        if entries.len() == MAX_ENTRIES {
            return Err(error(
                400,
                format!("{asked}: more than {MAX_ENTRIES} entries, not listed"),
            ));
        }
        // Gone between the listing and the look: passed over, as `ls` does.
        let Ok(stat) = rustix::fs::statat(&opened, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
        else {
            continue;
        };
        let shown = String::from_utf8_lossy(name.to_bytes()).into_owned();
        entries.push((shown.clone(), file_info(&shown, &stat, false)));
    }
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(Value::Array(
        entries.into_iter().map(|(_, info)| info).collect(),
    ))
}

/// Nomad's `AllocFileInfo`: `ContentType` only where a file is stat'ed (as Nomad sets it).
fn file_info(name: &str, stat: &rustix::fs::Stat, with_type: bool) -> Value {
    let kind = FileType::from_raw_mode(stat.st_mode);
    let modified = stat.st_mtime.saturating_mul(1_000_000_000) + stat.st_mtime_nsec as i64;
    let content_type = if with_type && kind.is_file() {
        "application/octet-stream"
    } else {
        ""
    };
    json!({
        "Name": name,
        "IsDir": kind.is_dir(),
        "Size": stat.st_size,
        "FileMode": file_mode(stat.st_mode),
        "ModTime": quiesce_core::gotime::rfc3339_nano(modified),
        "ContentType": content_type,
    })
}

fn kind_name(kind: FileType) -> &'static str {
    match kind {
        FileType::Fifo => "a FIFO",
        FileType::Socket => "a socket",
        FileType::CharacterDevice | FileType::BlockDevice => "a device",
        FileType::Symlink => "a symbolic link, not followed",
        _ => "not a plain file",
    }
}

/// A mode as Go's `os.FileMode.String` prints it: the type letters (`d`, `L`, `p`, `S`,
/// `D`, `c`, `u`, `g`, `t`), or `-`, then `rwxrwxrwx`.
pub fn file_mode(mode: u32) -> String {
    let kind = FileType::from_raw_mode(mode);
    let mut text = String::new();
    match kind {
        FileType::Directory => text.push('d'),
        FileType::Symlink => text.push('L'),
        FileType::BlockDevice => text.push('D'),
        FileType::Fifo => text.push('p'),
        FileType::Socket => text.push('S'),
        FileType::CharacterDevice => text.push_str("Dc"),
        _ => {}
    }
    if mode & libc::S_ISUID != 0 {
        text.push('u');
    }
    if mode & libc::S_ISGID != 0 {
        text.push('g');
    }
    if mode & libc::S_ISVTX != 0 {
        text.push('t');
    }
    if text.is_empty() {
        text.push('-');
    }
    for (bit, letter) in (0..9).rev().zip("rwxrwxrwx".chars()) {
        text.push(if mode & (1 << bit) != 0 { letter } else { '-' });
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_read_as_go_prints_them() {
        assert_eq!(file_mode(libc::S_IFREG | 0o644), "-rw-r--r--");
        assert_eq!(file_mode(libc::S_IFDIR | 0o755), "drwxr-xr-x");
        assert_eq!(file_mode(libc::S_IFLNK | 0o777), "Lrwxrwxrwx");
        assert_eq!(file_mode(libc::S_IFIFO | 0o600), "prw-------");
        assert_eq!(file_mode(libc::S_IFCHR | 0o666), "Dcrw-rw-rw-");
        assert_eq!(
            file_mode(libc::S_IFDIR | libc::S_ISVTX | 0o777),
            "dtrwxrwxrwx"
        );
        assert_eq!(
            file_mode(libc::S_IFREG | libc::S_ISUID | 0o755),
            "urwxr-xr-x"
        );
    }

    #[test]
    fn paths_stay_beneath_the_allocation() {
        assert_eq!(relative("/").unwrap(), PathBuf::new());
        assert_eq!(
            relative("/web/./local//a").unwrap(),
            PathBuf::from("web/local/a")
        );
        for bad in ["..", "/web/../..", "web/local/../../x"] {
            let refused = relative(bad).unwrap_err();
            assert_eq!(refused.status, 400, "{bad}");
            assert!(
                refused.message.contains("escapes"),
                "{bad}: {}",
                refused.message
            );
        }
        assert!(relative("a\0b").unwrap_err().message.contains("NUL"));
        assert!(relative(&"a/".repeat(3000)).is_err());
    }
}
