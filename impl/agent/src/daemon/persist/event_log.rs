//! The event log's file (`events.jsonl`): an export of the log table, appended after every
//! commit, rotated by size, and never rewritten whole at start (issue 24, finding 4: the
//! file and the table grew by every step for ever, and every start wrote the whole file
//! again).
//!
//! * **Rotation.** Once the file passes [`MAX_LOG_FILE_BYTES`] (`QUIESCE_EVENT_LOG_MAX_BYTES`
//!   sets another bound), it becomes `events.jsonl.1`, the older ones move up, and the
//!   oldest beyond [`LOG_FILES_KEPT`] is deleted; the table keeps only the current file's
//!   entries (the last sequence number is kept in `meta`), so it is bounded too. A reader
//!   of a rotated log reads the files oldest first (`quiesce-conform validate-log` judges
//!   what starts in the files it is given).
//! * **Start.** A crash can leave the file ahead of the store (the last batches' lines were
//!   appended, their commit lost: at most 20 ms of runner progress) or behind it (a commit
//!   made, its append not). The start reads the file's tail only: lines at its end that the
//!   table does not hold (or that were cut mid-line) are cut off, and entries the table
//!   holds that the tail does not show are appended.
//! * **A failed append** (a full disk) loses nothing — the table holds the entries — and
//!   the current file is written again from the table once it can be: the table holds only
//!   what the current file should.
//!
//! The order of a rotation survives a crash anywhere: a synced commit first (every entry
//! the file shows is then durable, so no sequence number is given twice) and the file
//! synced; then the renames and the directory synced; the table emptied last. A crash
//! before that commit leaves the table holding what `.1` shows, and the start appends
//! nothing `.1` already has.
//!
//! A pull's entry keeps the sequence number reserved when its record was read and is
//! committed with the runner's progress after it, so the file may list it after later
//! entries: readers sort by `seq` (`trace::parse_log` does), and numbers reserved by a batch
//! a crash lost are gaps.

use super::{error, Persist, StoreError, LOG, META, PRIVATE_FILE, RETRY_AFTER};
use redb::{ReadableDatabase, ReadableTable};
use std::collections::BTreeSet;
use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::PathBuf;
use std::time::Instant;

/// The size past which the file is rotated.
pub const MAX_LOG_FILE_BYTES: u64 = 64 << 20;
/// Rotated files kept beside the current one (`events.jsonl.1` … `.4`).
pub const LOG_FILES_KEPT: usize = 4;
/// How much of the file's end the start reads to bring it up to the table: far more than
/// the batches a crash can catch between their commit and their append.
const TAIL_BYTES: u64 = 8 << 20;

/// The bound of the current file: [`MAX_LOG_FILE_BYTES`], or `QUIESCE_EVENT_LOG_MAX_BYTES`.
pub fn max_log_file_bytes() -> u64 {
    std::env::var("QUIESCE_EVENT_LOG_MAX_BYTES")
        .ok()
        .and_then(|text| text.parse().ok())
        .filter(|bytes| *bytes > 0)
        .unwrap_or(MAX_LOG_FILE_BYTES)
}

/// The sequence number of one line of the file (`None`: not a whole entry).
fn seq_of(line: &str) -> Option<u64> {
    #[derive(serde::Deserialize)]
    struct Seq {
        seq: u64,
    }
    serde_json::from_str::<Seq>(line)
        .ok()
        .map(|entry| entry.seq)
}

impl Persist {
    fn rotated(&self, n: usize) -> PathBuf {
        let mut name = self.log_path.as_os_str().to_owned();
        name.push(format!(".{n}"));
        PathBuf::from(name)
    }

    /// The sequence number of the last whole line of the file at `path`, if it has one.
    fn last_seq_in(&self, path: &std::path::Path) -> Option<u64> {
        let mut file = fs::File::open(path).ok()?;
        let size = file.metadata().ok()?.len();
        let mut tail = Vec::new();
        file.seek(SeekFrom::Start(size.saturating_sub(64 << 10)))
            .and_then(|_| file.read_to_end(&mut tail))
            .ok()?;
        let text = String::from_utf8_lossy(&tail);
        text.lines().rev().find_map(seq_of)
    }

    /// The last sequence number: the table's, or, if the table is empty since a rotation,
    /// the one kept in `meta`.
    pub(super) fn last_log_seq(&self) -> Result<u64, StoreError> {
        let read = self.db.begin_read().map_err(|e| error("reading", e))?;
        let log = read.open_table(LOG).map_err(|e| error("log", e))?;
        let last = log.last().map_err(|e| error("log", e))?;
        let meta = read.open_table(META).map_err(|e| error("meta", e))?;
        let kept = meta
            .get("log_seq")
            .map_err(|e| error("meta", e))?
            .map_or(0, |v| v.value());
        Ok(last.map_or(0, |(seq, _)| seq.value()).max(kept))
    }

    /// The table's entries, in sequence order.
    fn table_entries(&self) -> Result<Vec<(u64, String)>, StoreError> {
        let read = self.db.begin_read().map_err(|e| error("reading", e))?;
        let log = read.open_table(LOG).map_err(|e| error("log", e))?;
        let mut entries = Vec::new();
        for row in log.iter().map_err(|e| error("log", e))? {
            let (seq, line) = row.map_err(|e| error("log", e))?;
            entries.push((seq.value(), line.value().to_string()));
        }
        Ok(entries)
    }

    /// At start: brings the file up to the table from its tail (see the module's
    /// documentation); returns the last sequence number.
    pub(super) fn reconcile_log(&mut self) -> Result<u64, StoreError> {
        let shown = |what: &str| format!("{what} {}", self.log_path.display());
        let mut file = match fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(PRIVATE_FILE)
            .open(&self.log_path)
        {
            Ok(file) => file,
            Err(e) => return Err(error(&shown("opening"), e)),
        };
        let size = file
            .metadata()
            .map_err(|e| error(&shown("reading"), e))?
            .len();
        let from = size.saturating_sub(TAIL_BYTES);
        let mut tail = Vec::new();
        file.seek(SeekFrom::Start(from))
            .and_then(|_| file.read_to_end(&mut tail))
            .map_err(|e| error(&shown("reading"), e))?;
        let entries = self.table_entries()?;
        let held: BTreeSet<u64> = entries.iter().map(|(seq, _)| *seq).collect();
        // The tail's whole lines, each with where it starts; a first line cut by the read's
        // start is no line.
        let mut lines: Vec<(u64, &[u8])> = Vec::new();
        let mut at = 0usize;
        if from > 0 {
            at = tail
                .iter()
                .position(|b| *b == b'\n')
                .map_or(tail.len(), |p| p + 1);
        }
        while at < tail.len() {
            let end = tail[at..]
                .iter()
                .position(|b| *b == b'\n')
                .map_or(tail.len(), |p| at + p + 1);
            lines.push((from + at as u64, &tail[at..end]));
            at = end;
        }
        // From the end: cut what the table does not hold (a lost commit's lines, a line
        // cut mid-way).
        let mut keep = lines.len();
        while keep > 0 {
            let (_, line) = lines[keep - 1];
            let whole = line.ends_with(b"\n");
            let seq = std::str::from_utf8(line)
                .ok()
                .and_then(|l| seq_of(l.trim_end()));
            if whole && seq.is_some_and(|seq| held.contains(&seq)) {
                break;
            }
            keep -= 1;
        }
        let cut = lines.get(keep).map(|(start, _)| *start);
        let shown_seqs: BTreeSet<u64> = lines[..keep]
            .iter()
            .filter_map(|(_, line)| {
                std::str::from_utf8(line)
                    .ok()
                    .and_then(|l| seq_of(l.trim_end()))
            })
            .collect();
        if let Some(cut) = cut {
            file.set_len(cut).map_err(|e| error(&shown("cutting"), e))?;
        }
        // What the table holds that the file does not show: entries after the tail's
        // first (or all, when the tail is the whole file, but what the last rotated file
        // has: a crash between a rotation's rename and its table's commit).
        let floor = if from > 0 {
            shown_seqs.first().copied().unwrap_or(u64::MAX)
        } else if shown_seqs.is_empty() {
            self.last_seq_in(&self.rotated(1)).map_or(0, |seq| seq + 1)
        } else {
            0
        };
        let mut missing = String::new();
        for (seq, line) in &entries {
            if *seq >= floor && !shown_seqs.contains(seq) {
                missing.push_str(line);
                missing.push('\n');
            }
        }
        if !missing.is_empty() {
            file.seek(SeekFrom::End(0))
                .and_then(|_| file.write_all(missing.as_bytes()))
                .map_err(|e| error(&shown("appending to"), e))?;
        }
        self.log_bytes = file.metadata().map_or(0, |m| m.len());
        self.last_log_seq()
    }

    /// After a commit: appends its lines, or, if an earlier append failed, writes the
    /// current file again from the table (at most every [`RETRY_AFTER`]); rotates the file
    /// once it passes its bound.
    pub(super) fn export(&mut self, lines: &str) {
        let exported = if self.export_stale {
            if self
                .export_tried
                .is_some_and(|tried| tried.elapsed() < RETRY_AFTER)
            {
                return;
            }
            self.export_tried = Some(Instant::now());
            self.rewrite_log()
        } else if !lines.is_empty() {
            fs::OpenOptions::new()
                .append(true)
                .create(true)
                .mode(PRIVATE_FILE)
                .open(&self.log_path)
                .and_then(|mut file| file.write_all(lines.as_bytes()))
                .map(|()| self.log_bytes += lines.len() as u64)
                .map_err(|e| error(&format!("appending to {}", self.log_path.display()), e))
        } else {
            Ok(())
        };
        match exported {
            Ok(()) => self.export_stale = false,
            Err(failure) if !self.export_stale => {
                crate::daemon::say!("{failure}; the event log file is rewritten later");
                self.export_stale = true;
                return;
            }
            Err(_) => return,
        }
        if self.log_bytes > self.log_bound {
            if let Err(failure) = self.rotate() {
                crate::daemon::say!("rotating the event log: {failure}");
            }
        }
    }

    /// Writes the current file again from the table (through a temporary file and a
    /// rename): after a failed append.
    fn rewrite_log(&mut self) -> Result<(), StoreError> {
        let mut text = String::new();
        for (_, line) in self.table_entries()? {
            text.push_str(&line);
            text.push('\n');
        }
        let temporary = self.log_path.with_extension("jsonl.tmp");
        fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(PRIVATE_FILE)
            .open(&temporary)
            .and_then(|mut file| file.write_all(text.as_bytes()))
            .and_then(|()| {
                fs::set_permissions(&temporary, fs::Permissions::from_mode(PRIVATE_FILE))
            })
            .and_then(|()| fs::rename(&temporary, &self.log_path))
            .map_err(|e| {
                // What the temporary file took of a full disk goes back at once.
                let _ = fs::remove_file(&temporary);
                error(&format!("writing {}", self.log_path.display()), e)
            })?;
        self.log_bytes = text.len() as u64;
        Ok(())
    }

    /// The current file becomes `.1`, the others move up, the oldest beyond
    /// [`LOG_FILES_KEPT`] goes; the table is emptied of what the files now hold, its last
    /// sequence number kept in `meta`.
    ///
    /// In an order a crash at any point leaves consistent: first a synced commit (which
    /// makes every commit whose lines the file shows durable: none of them can be lost and
    /// its sequence numbers given again) and the file synced; then the renames, and the
    /// directory synced; only then is the table emptied. A crash between the renames and
    /// that commit leaves the table holding what `.1` shows, and the start appends nothing
    /// `.1` already has.
    fn rotate(&mut self) -> Result<(), StoreError> {
        let last = self.last_log_seq()?;
        let commit_meta = |clear: bool| -> Result<(), StoreError> {
            let mut write = self.db.begin_write().map_err(|e| error("writing", e))?;
            write
                .set_durability(redb::Durability::Immediate)
                .map_err(|e| error("writing", e))?;
            {
                let mut meta = write.open_table(META).map_err(|e| error("meta", e))?;
                meta.insert("log_seq", last).map_err(|e| error("meta", e))?;
                if clear {
                    let mut log = write.open_table(LOG).map_err(|e| error("log", e))?;
                    log.retain(|_, _| false).map_err(|e| error("log", e))?;
                }
            }
            write.commit().map_err(|e| error("commit", e))
        };
        commit_meta(false)?;
        fs::File::open(&self.log_path)
            .and_then(|file| file.sync_all())
            .map_err(|e| error("syncing the event log", e))?;
        let _ = fs::remove_file(self.rotated(LOG_FILES_KEPT));
        for n in (1..LOG_FILES_KEPT).rev() {
            match fs::rename(self.rotated(n), self.rotated(n + 1)) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(error("renaming a rotated file", e))
                }
                _ => {}
            }
        }
        fs::rename(&self.log_path, self.rotated(1)).map_err(|e| error("rotating", e))?;
        self.log_bytes = 0;
        if let Some(dir) = self.log_path.parent() {
            fs::File::open(dir)
                .and_then(|dir| dir.sync_all())
                .map_err(|e| error("syncing the data dir", e))?;
        }
        commit_meta(true)
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Batch, Persist};
    use quiesce_core::step::log::LogEntry;
    use quiesce_core::step::Step;

    fn scratch(name: &str) -> std::path::PathBuf {
        let dir =
            std::env::temp_dir().join(format!("quiesce-event-log-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    fn entry(seq: u64) -> LogEntry {
        let mut entry = LogEntry::step(Step::ClientRestart, None, None);
        entry.seq = seq;
        entry
    }

    fn commit(persist: &mut Persist, seqs: std::ops::RangeInclusive<u64>) {
        let batch = Batch {
            index: None,
            writes: Vec::new(),
            log: seqs.map(entry).collect(),
            durable: false,
        };
        persist.commit(&[batch], true).unwrap();
    }

    fn seqs_in(path: &std::path::Path) -> Vec<u64> {
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .filter_map(super::seq_of)
            .collect()
    }

    /// A start cuts the lines a lost commit left at the file's end (and a line cut
    /// mid-way), appends what a commit stored and never appended, and leaves the rest of
    /// the file as it was (its inode and its first lines untouched: not rewritten).
    #[test]
    fn a_start_brings_the_file_up_to_the_table_from_its_tail() {
        use std::os::unix::fs::MetadataExt;
        let dir = scratch("reconcile");
        let (mut persist, _) = Persist::open(&dir).unwrap();
        commit(&mut persist, 1..=5);
        let path = dir.join(super::super::EVENT_LOG_FILE);
        assert_eq!(seqs_in(&path), [1, 2, 3, 4, 5]);
        let inode = std::fs::metadata(&path).unwrap().ino();
        drop(persist);
        // A lost commit's lines (6, 7) and half a line after them.
        let mut text = std::fs::read_to_string(&path).unwrap();
        text.push_str(&entry(6).to_json_line());
        text.push('\n');
        text.push_str(&entry(7).to_json_line());
        text.push_str("\n{\"seq\":8,\"ti");
        std::fs::write(&path, text).unwrap();
        let (persist, loaded) = Persist::open(&dir).unwrap();
        assert_eq!(seqs_in(&path), [1, 2, 3, 4, 5]);
        assert_eq!(loaded.log_seq, 5);
        assert_eq!(
            std::fs::metadata(&path).unwrap().ino(),
            inode,
            "not rewritten"
        );
        drop(persist);
        // A commit whose append never came: the file lost its last two lines.
        let text = std::fs::read_to_string(&path).unwrap();
        let kept: Vec<&str> = text.lines().take(3).collect();
        std::fs::write(&path, kept.join("\n") + "\n").unwrap();
        let (_persist, loaded) = Persist::open(&dir).unwrap();
        assert_eq!(seqs_in(&path), [1, 2, 3, 4, 5]);
        assert_eq!(loaded.log_seq, 5);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Past its bound the file rotates; four rotated files are kept, the oldest go, the
    /// table keeps only the current file's entries, and sequence numbers go on across a
    /// rotation and a restart.
    #[test]
    fn the_file_rotates_and_the_table_keeps_only_the_current_files_entries() {
        let dir = scratch("rotate");
        let (mut persist, _) = Persist::open(&dir).unwrap();
        let path = dir.join(super::super::EVENT_LOG_FILE);
        let line = entry(1).to_json_line().len() as u64 + 1;
        let bound = 16 << 10;
        persist.log_bound = bound;
        // Enough entries for six rotations of a bounded file.
        let per_file = bound / line + 1;
        let mut next = 1;
        for _ in 0..6 {
            commit(&mut persist, next..=next + per_file - 1);
            next += per_file;
        }
        assert!(!persist.rotated(super::LOG_FILES_KEPT + 1).exists());
        for n in 1..=super::LOG_FILES_KEPT {
            assert!(persist.rotated(n).exists(), "{n}");
        }
        assert!(
            persist.table_entries().unwrap().is_empty(),
            "what the files hold leaves the table"
        );
        assert_eq!(persist.last_log_seq().unwrap(), next - 1);
        commit(&mut persist, next..=next);
        drop(persist);
        let (_persist, loaded) = Persist::open(&dir).unwrap();
        assert_eq!(loaded.log_seq, next);
        assert_eq!(seqs_in(&path), [next]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
