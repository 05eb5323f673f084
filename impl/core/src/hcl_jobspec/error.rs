//! Where a problem in a jobspec is: the reader's [`Problem`] carries the byte range of the
//! text it is about, and [`Error`] turns that range into a file name, a line and a column
//! once, at the top, where the text and its name are known.

use std::ops::Range;

/// A problem found while reading one text (the jobspec or a var-file): what is wrong, and
/// the byte range of the text it is about, when there is one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Problem {
    pub message: String,
    pub span: Option<Range<usize>>,
}

impl Problem {
    /// A problem with the text at `span` (as `hcl_edit::Span::span` gives it).
    pub fn at(span: Option<Range<usize>>, message: impl Into<String>) -> Problem {
        Problem {
            message: message.into(),
            span,
        }
    }

    /// A problem with no one place: a missing block, a `-var` flag.
    pub fn nowhere(message: impl Into<String>) -> Problem {
        Problem::at(None, message)
    }
}

/// A text read, and the name its errors give it: the path the user gave, `<stdin>` for
/// standard input, `input.hcl` for the HTTP API's `JobHCL` (as Nomad names it).
#[derive(Debug, Clone, Copy)]
pub struct Input<'a> {
    pub name: &'a str,
    pub text: &'a str,
}

/// A line and a column, both from 1; the column counts characters, not bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LineColumn {
    pub line: usize,
    pub column: usize,
}

/// The text an error is about: from `start` up to, not including, `end`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Place {
    pub start: LineColumn,
    pub end: LineColumn,
}

/// Why a jobspec could not be read, and where: the file, and the place in it when the
/// problem has one (a problem with a `-var` flag or an environment variable has neither).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    pub file: Option<String>,
    pub place: Option<Place>,
    pub message: String,
}

impl Error {
    /// A problem found in `input`, its byte range as a line and column of it.
    pub(super) fn in_input(input: &Input, problem: Problem) -> Error {
        Error {
            file: Some(input.name.to_string()),
            place: problem.span.map(|span| place(input.text, span)),
            message: problem.message,
        }
    }

    /// A problem that is in no file (a `-var` flag, an environment variable).
    pub(super) fn unplaced(problem: Problem) -> Error {
        debug_assert!(problem.span.is_none(), "a span needs the text it is in");
        Error {
            file: None,
            place: None,
            message: problem.message,
        }
    }

    /// As Nomad's HCL diagnostics name a range: `input.hcl:3,5-17: …` on one line,
    /// `input.hcl:3,5-4,2: …` across lines.
    pub fn nomad_style(&self) -> String {
        match (&self.file, &self.place) {
            (Some(file), Some(Place { start, end })) if start.line == end.line => format!(
                "{file}:{},{}-{}: {}",
                start.line, start.column, end.column, self.message
            ),
            (Some(file), Some(Place { start, end })) => format!(
                "{file}:{},{}-{},{}: {}",
                start.line, start.column, end.line, end.column, self.message
            ),
            _ => self.to_string(),
        }
    }
}

/// `file:line:column: message`, as compilers write it (editors jump to it).
impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (&self.file, &self.place) {
            (Some(file), Some(Place { start, .. })) => {
                write!(
                    f,
                    "{file}:{}:{}: {}",
                    start.line, start.column, self.message
                )
            }
            (Some(file), None) => write!(f, "{file}: {}", self.message),
            (None, _) => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for Error {}

/// A byte range of `text` as lines and columns; offsets past the end, or inside a
/// character, are moved back to the nearest character boundary.
pub(super) fn place(text: &str, span: Range<usize>) -> Place {
    let start = line_column(text, span.start);
    let end = line_column(text, span.end.max(span.start));
    Place { start, end }
}

fn line_column(text: &str, offset: usize) -> LineColumn {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line_start = before.rfind('\n').map_or(0, |newline| newline + 1);
    LineColumn {
        line: before.matches('\n').count() + 1,
        column: before[line_start..].chars().count() + 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_byte_range_is_a_line_and_a_column_in_characters() {
        let text = "job \"é\" {\n  kil_timeout = 1\n}";
        let key = text.find("kil_timeout").unwrap();
        let at = place(text, key..key + "kil_timeout".len());
        assert_eq!(at.start, LineColumn { line: 2, column: 3 });
        assert_eq!(
            at.end,
            LineColumn {
                line: 2,
                column: 14
            }
        );
        // `é` is two bytes and one column.
        let brace = text.find('{').unwrap();
        assert_eq!(place(text, brace..brace + 1).start.column, 9);
        // Past the end, and inside a character, move back to a boundary.
        assert_eq!(line_column(text, 10_000), LineColumn { line: 3, column: 2 });
        assert_eq!(line_column(text, 6), LineColumn { line: 1, column: 6 });
    }

    #[test]
    fn an_error_reads_as_a_compiler_s_or_as_nomad_s() {
        let input = Input {
            name: "web.hcl",
            text: "job \"web\" {\n  group \"g\" {\n    kil_timeout = 1\n  }\n}\n",
        };
        let key = input.text.find("kil_timeout").unwrap();
        let error = Error::in_input(
            &input,
            Problem::at(Some(key..key + 11), "unsupported attribute"),
        );
        assert_eq!(error.to_string(), "web.hcl:3:5: unsupported attribute");
        assert_eq!(error.nomad_style(), "web.hcl:3,5-16: unsupported attribute");
        let unplaced = Error::unplaced(Problem::nowhere("-var \"x\": no such variable"));
        assert_eq!(unplaced.to_string(), "-var \"x\": no such variable");
        assert_eq!(unplaced.nomad_style(), unplaced.to_string());
    }
}
