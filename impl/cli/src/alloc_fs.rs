//! `alloc fs` (and `fs`): an allocation's directory as Nomad's command shows it — a
//! directory listed as `Mode  Size  Modified Time  Name`, a file printed, either one
//! described with `-stat`, the end of a file with `-tail`. The agent reads, confined to the
//! allocation's directory (`/v1/client/fs/…`); a file is fetched in parts of at most
//! [`PART`] bytes, up to the size it had when stat'ed.

use super::api::{resolve, rfc3339, table, text, Api};
use super::{FsArgs, Tail};
use serde_json::Value;
use std::io::Write;

/// The most bytes one `readat` asks for (the agent answers at most 1 MiB).
const PART: u64 = 1 << 20;
/// The most a `-tail -n` reads back from the end to find its lines.
const MAX_BACK: u64 = 16 << 20;

pub(super) fn fs_command(args: FsArgs) -> Result<(), String> {
    let api = args.address.api()?;
    let alloc = if args.job {
        job_alloc(&api, &args.alloc)?
    } else {
        text(&resolve(&api, "Alloc", "allocations", &args.alloc)?, "ID")
    };
    let path = args.path.unwrap_or_else(|| "/".into());
    let query = format!("?path={}", super::api::segment(&path));
    let info = api.get(&format!("/v1/client/fs/stat/{alloc}{query}"))?;
    let is_dir = info["IsDir"].as_bool() == Some(true);
    if args.stat {
        println!("{}", listing(std::slice::from_ref(&info), args.machine));
        return Ok(());
    }
    if is_dir {
        let entries = api.get(&format!("/v1/client/fs/ls/{alloc}{query}"))?;
        let entries = entries.as_array().cloned().unwrap_or_default();
        println!("{}", listing(&entries, args.machine));
        return Ok(());
    }
    let mode = text(&info, "FileMode");
    if !mode.starts_with('-') {
        let what = if mode.starts_with('L') {
            "a symbolic link, not followed"
        } else {
            "not a plain file"
        };
        return Err(format!(
            "{path}: {what} ({mode}): only a file's contents are printed; -stat describes it"
        ));
    }
    let size = info["Size"].as_u64().unwrap_or(0);
    let read = |offset: u64, limit: u64| {
        api.get_bytes(&format!(
            "/v1/client/fs/readat/{alloc}{query}&offset={offset}&limit={limit}"
        ))
    };
    let start = match args.tail.chosen()? {
        None => 0,
        Some(Tail::Bytes(bytes)) => size.saturating_sub(bytes),
        Some(Tail::Lines(lines)) => lines_start(&read, size, lines)?,
    };
    let mut out = std::io::stdout().lock();
    let mut offset = start;
    while offset < size {
        let part = read(offset, PART.min(size - offset))?;
        if part.is_empty() {
            break; // the file shrank since it was stat'ed
        }
        out.write_all(&part).map_err(|e| e.to_string())?;
        offset += part.len() as u64;
    }
    out.flush().map_err(|e| e.to_string())
}

/// A running allocation of the job `job` (else its most recently modified one), as
/// Nomad's `-job` picks.
fn job_alloc(api: &Api, job: &str) -> Result<String, String> {
    let allocs = api.get(&format!("/v1/job/{}/allocations", super::api::segment(job)))?;
    let allocs = allocs.as_array().cloned().unwrap_or_default();
    let running = allocs.iter().find(|a| text(a, "ClientStatus") == "running");
    let latest = allocs
        .iter()
        .max_by_key(|a| a["ModifyIndex"].as_u64().unwrap_or(0));
    running
        .or(latest)
        .map(|a| text(a, "ID"))
        .ok_or_else(|| format!("No allocations found for job {job:?}"))
}

/// Where the last `lines` lines of a file of `size` bytes start (a trailing newline ends
/// the last line, as `tail` counts), read back in parts, at most [`MAX_BACK`] bytes.
fn lines_start(
    read: &dyn Fn(u64, u64) -> Result<Vec<u8>, String>,
    size: u64,
    lines: u64,
) -> Result<u64, String> {
    if lines == 0 {
        return Ok(size);
    }
    let mut end = size;
    let mut seen = 0u64;
    let mut skip_last = true;
    while end > 0 && size - end < MAX_BACK {
        let from = end.saturating_sub(PART);
        let part = read(from, end - from)?;
        for (at, byte) in part.iter().enumerate().rev() {
            if *byte == b'\n' {
                if skip_last && from + at as u64 == size - 1 {
                    skip_last = false;
                    continue;
                }
                seen += 1;
                if seen == lines {
                    return Ok(from + at as u64 + 1);
                }
            }
        }
        skip_last = false;
        end = from;
    }
    Ok(end)
}

/// Nomad's `Mode  Size  Modified Time  Name` table (a directory's name ends in `/`).
fn listing(entries: &[Value], machine: bool) -> String {
    let mut rows = vec![vec![
        "Mode".to_string(),
        "Size".into(),
        "Modified Time".into(),
        "Name".into(),
    ]];
    for entry in entries {
        let size = entry["Size"].as_u64().unwrap_or(0);
        let modified = quiesce_core::gotime::parse_rfc3339_nano(&text(entry, "ModTime"))
            .map(rfc3339)
            .unwrap_or_default();
        let mut name = text(entry, "Name");
        if entry["IsDir"].as_bool() == Some(true) {
            name.push('/');
        }
        rows.push(vec![
            text(entry, "FileMode"),
            if machine {
                size.to_string()
            } else {
                bytes(size)
            },
            modified,
            name,
        ]);
    }
    table(&rows)
}

/// A size as Nomad prints it (go-humanize's `IBytes`): `12 B`, `4.0 KiB`, `15 MiB`.
fn bytes(size: u64) -> String {
    const UNITS: [&str; 7] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if size < 1024 {
        return format!("{size} B");
    }
    let exponent = ((size as f64).ln() / 1024f64.ln()).floor() as i32;
    let value = ((size as f64 / 1024f64.powi(exponent)) * 10.0 + 0.5).floor() / 10.0;
    let unit = UNITS[exponent.clamp(0, 6) as usize];
    if value < 10.0 {
        format!("{value:.1} {unit}")
    } else {
        format!("{value:.0} {unit}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_as_nomad_prints_them() {
        assert_eq!(bytes(0), "0 B");
        assert_eq!(bytes(1023), "1023 B");
        assert_eq!(bytes(4096), "4.0 KiB");
        assert_eq!(bytes(12_345), "12 KiB");
        assert_eq!(bytes(15 << 20), "15 MiB");
    }

    #[test]
    fn the_last_lines_start_after_the_newline_before_them() {
        let file = b"one\ntwo\nthree\n".to_vec();
        let read =
            |offset: u64, limit: u64| Ok(file[offset as usize..(offset + limit) as usize].to_vec());
        let size = file.len() as u64;
        assert_eq!(lines_start(&read, size, 1).unwrap(), 8); // "three\n"
        assert_eq!(lines_start(&read, size, 2).unwrap(), 4); // "two\nthree\n"
        assert_eq!(lines_start(&read, size, 10).unwrap(), 0);
        assert_eq!(lines_start(&read, size, 0).unwrap(), size, "-n 0: nothing");
        let unended = b"a\nb".to_vec();
        let read = |offset: u64, limit: u64| {
            Ok(unended[offset as usize..(offset + limit) as usize].to_vec())
        };
        assert_eq!(lines_start(&read, 3, 1).unwrap(), 2); // "b"
    }

    #[test]
    fn a_listing_has_nomads_columns_and_marks_directories() {
        let entries = serde_json::json!([
            {"Name": "web", "IsDir": true, "Size": 4096, "FileMode": "drwx--x--x",
             "ModTime": "2026-12-06T08:00:00.5Z"},
            {"Name": "out.txt", "IsDir": false, "Size": 12, "FileMode": "-rw-r--r--",
             "ModTime": "2026-12-06T08:00:01Z"},
        ]);
        let shown = listing(entries.as_array().unwrap(), false);
        let lines: Vec<&str> = shown.lines().collect();
        assert!(lines[0].starts_with("Mode"), "{shown}");
        assert!(lines[0].contains("Size") && lines[0].contains("Modified Time"));
        assert!(
            lines[1].starts_with("drwx--x--x  4.0 KiB  2026-12-06T08:00:00Z  web/"),
            "{shown}"
        );
        assert!(lines[2].ends_with("out.txt"), "{shown}");
        assert!(listing(entries.as_array().unwrap(), true).contains("  4096  "));
    }
}
