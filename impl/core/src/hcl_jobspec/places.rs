//! Which place in an HCL jobspec each field of the converted job came from, so that a
//! validation error, which names a JSON field (`TaskGroups[0].Count: …`), can also name
//! the file, line and column the user wrote it at (`web.nomad.hcl:7:5: TaskGroups[0].Count:
//! …`).
//!
//! While converting, the reader records, for each JSON path it produces, the byte range of
//! the HCL attribute (`count = -1`) or block header (`task "server"`) that produced it
//! ([`Recorder`]). After validation, an error's path is looked up, and if it was not
//! recorded (a field Nomad's defaults filled in, a key inside a free-form map), its nearest
//! recorded ancestor is: `TaskGroups[0].Tasks[1].KillTimeout` falls back to
//! `TaskGroups[0].Tasks[1]`, the task's block, and every path at last to the job's block.
//!
//! Bounds: at most [`MAX_PLACES`] paths of at most [`MAX_PLACE_PATH_BYTES`] bytes in all
//! are recorded for one jobspec; past that, an error is placed at a recorded ancestor.
//! Byte ranges become lines and columns only for the errors shown.

use super::error::{place, Error, Place};
use crate::spec::SpecError;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::ops::Range;

/// The most JSON paths recorded for one jobspec.
pub const MAX_PLACES: usize = 16_384;
/// The most bytes of JSON paths recorded for one jobspec.
pub const MAX_PLACE_PATH_BYTES: usize = 1 << 20;

/// What the reader records while converting one text: JSON path to byte range.
#[derive(Debug, Default)]
pub(super) struct Recorder {
    spans: RefCell<Recorded>,
}

#[derive(Debug, Default)]
struct Recorded {
    spans: BTreeMap<String, Range<usize>>,
    path_bytes: usize,
}

impl Recorder {
    /// Records that the field at `path` was written at `span`; a later record of the same
    /// path wins (the attribute `name` over the job's label). Past the bounds, or without a
    /// span, nothing is recorded.
    pub fn record(&self, path: String, span: Option<Range<usize>>) {
        let Some(span) = span else { return };
        let mut recorded = self.spans.borrow_mut();
        let is_new = !recorded.spans.contains_key(&path);
        if is_new
            && (recorded.spans.len() >= MAX_PLACES
                || recorded.path_bytes + path.len() > MAX_PLACE_PATH_BYTES)
        {
            return;
        }
        if is_new {
            recorded.path_bytes += path.len();
        }
        recorded.spans.insert(path, span);
        debug_assert!(recorded.spans.len() <= MAX_PLACES);
    }

    pub fn into_spans(self) -> BTreeMap<String, Range<usize>> {
        self.spans.into_inner().spans
    }
}

/// The places of a converted jobspec's fields: its file's name and text, and the byte range
/// each recorded JSON path came from.
#[derive(Debug, Clone)]
pub struct Places {
    file: String,
    text: String,
    spans: BTreeMap<String, Range<usize>>,
}

impl Places {
    pub(super) fn new(file: &str, text: &str, spans: BTreeMap<String, Range<usize>>) -> Places {
        Places {
            file: file.to_string(),
            text: text.to_string(),
            spans,
        }
    }

    /// How many paths are recorded.
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// The place of `path`, or of its nearest recorded ancestor; `None` if not even the
    /// job's block is recorded.
    pub fn place_of(&self, path: &str) -> Option<Place> {
        let mut path = path;
        // Each step removes at least one byte: the walk ends.
        loop {
            if let Some(span) = self.spans.get(path) {
                return Some(place(&self.text, span.clone()));
            }
            if path.is_empty() {
                return None;
            }
            path = parent(path);
        }
    }

    /// A validation error as an error of this file, at the place of its field:
    /// `web.nomad.hcl:7:5: TaskGroups[0].Count: must not be negative (got -1)`.
    pub fn locate(&self, error: &SpecError) -> Error {
        Error {
            file: Some(self.file.clone()),
            place: self.place_of(&error.field),
            message: error.to_string(),
        }
    }

    /// An error the agent wrote as text, `Field.Path: problem` (a `ValidationErrors`
    /// entry), as [`Places::locate`] places it; a text that does not start with a field's
    /// path is returned as it is.
    pub fn locate_text(&self, text: &str) -> String {
        match text.split_once(": ") {
            Some((field, problem)) if is_field_path(field) => self
                .locate(&SpecError {
                    field: field.to_string(),
                    problem: problem.to_string(),
                })
                .to_string(),
            _ => text.to_string(),
        }
    }
}

/// Whether `text` reads as a JSON field path (`TaskGroups[0].Tasks[1].Env["K"]`, `Job`):
/// it starts with an ASCII capital letter and holds no whitespace outside brackets.
fn is_field_path(text: &str) -> bool {
    let mut depth = 0usize;
    for c in text.chars() {
        match c {
            '[' => depth += 1,
            ']' => depth = depth.saturating_sub(1),
            c if c.is_whitespace() && depth == 0 => return false,
            _ => {}
        }
    }
    text.starts_with(|c: char| c.is_ascii_uppercase())
}

/// The path one step up: `A.B[2]` is `A.B`, `A.B` is `A`, `A` is the job itself (`""`).
fn parent(path: &str) -> &str {
    let cut = if path.ends_with(']') {
        path.rfind('[')
    } else {
        path.rfind('.')
    };
    let parent = &path[..cut.unwrap_or(0)];
    debug_assert!(parent.len() < path.len(), "a parent is shorter");
    parent
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "job \"web\" {\n  group \"g\" {\n    count = -1\n  }\n}\n";

    fn places() -> Places {
        let recorder = Recorder::default();
        let at = |needle: &str, len: usize| {
            let start = TEXT.find(needle).unwrap();
            Some(start..start + len)
        };
        recorder.record(String::new(), at("job", 9));
        recorder.record("TaskGroups[0]".into(), at("group", 9));
        recorder.record("TaskGroups[0].Count".into(), at("count", 10));
        recorder.record("TaskGroups[0].Nowhere".into(), None);
        Places::new("web.nomad.hcl", TEXT, recorder.into_spans())
    }

    fn start(place: Option<Place>) -> (usize, usize) {
        let place = place.expect("a place");
        (place.start.line, place.start.column)
    }

    #[test]
    fn a_recorded_path_is_placed_where_it_was_written() {
        let places = places();
        assert_eq!(places.len(), 3, "a path without a span is not recorded");
        assert_eq!(start(places.place_of("TaskGroups[0].Count")), (3, 5));
        let error = places.locate(&SpecError {
            field: "TaskGroups[0].Count".into(),
            problem: "must not be negative (got -1)".into(),
        });
        assert_eq!(
            error.to_string(),
            "web.nomad.hcl:3:5: TaskGroups[0].Count: must not be negative (got -1)"
        );
        assert_eq!(
            error.nomad_style(),
            "web.nomad.hcl:3,5-15: TaskGroups[0].Count: must not be negative (got -1)"
        );
    }

    #[test]
    fn a_path_not_recorded_is_placed_at_its_nearest_recorded_ancestor() {
        let places = places();
        assert_eq!(
            start(places.place_of("TaskGroups[0].Tasks[1].Name")),
            (2, 3)
        );
        assert_eq!(start(places.place_of("TaskGroups[0].Nowhere")), (2, 3));
        assert_eq!(start(places.place_of("TaskGroups[3]")), (1, 1));
        assert_eq!(start(places.place_of("Update.MinHealthyTime")), (1, 1));
        assert_eq!(start(places.place_of("Job")), (1, 1));
        assert_eq!(start(places.place_of("")), (1, 1));
        // A key with a dot inside brackets goes up to the map, then on.
        assert_eq!(
            start(places.place_of("TaskGroups[0].Count[\"a.b\"]")),
            (3, 5)
        );
        let empty = Places::new("web.nomad.hcl", TEXT, BTreeMap::new());
        assert_eq!(empty.place_of("TaskGroups[0].Count"), None);
        assert_eq!(
            empty
                .locate(&SpecError {
                    field: "ID".into(),
                    problem: "bad".into()
                })
                .to_string(),
            "web.nomad.hcl: ID: bad"
        );
    }

    #[test]
    fn the_agent_s_text_is_placed_when_it_starts_with_a_field_path() {
        let places = places();
        assert_eq!(
            places.locate_text("TaskGroups[0].Count: must not be negative (got -1)"),
            "web.nomad.hcl:3:5: TaskGroups[0].Count: must not be negative (got -1)"
        );
        assert_eq!(
            places.locate_text("TaskGroups[0].Env[\"A B\"]: must contain no NUL"),
            "web.nomad.hcl:2:3: TaskGroups[0].Env[\"A B\"]: must contain no NUL"
        );
        for kept in [
            "job \"web\" is in nonexistent namespace \"x\"",
            "no colon at all",
            "lower.case: not a field",
        ] {
            assert_eq!(places.locate_text(kept), kept);
        }
    }

    #[test]
    fn recording_stops_at_its_bound_and_keeps_what_it_has() {
        let recorder = Recorder::default();
        for i in 0..MAX_PLACES + 10 {
            recorder.record(format!("TaskGroups[{i}]"), Some(0..1));
        }
        // A path already recorded may still be moved.
        recorder.record("TaskGroups[0]".into(), Some(2..3));
        let spans = recorder.into_spans();
        assert_eq!(spans.len(), MAX_PLACES);
        assert_eq!(spans["TaskGroups[0]"], 2..3);
        let recorder = Recorder::default();
        let long = "K".repeat(MAX_PLACE_PATH_BYTES / 2 + 1);
        recorder.record(long.clone(), Some(0..1));
        recorder.record(format!("{long}x"), Some(0..1));
        assert_eq!(recorder.into_spans().len(), 1, "the path bytes are bounded");
    }
}
