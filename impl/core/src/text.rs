//! Text as a terminal or a log line may show it, and text put together on hot paths: a
//! stop of many allocations writes several event messages and service IDs for each, and
//! `format!`'s machinery (its argument list, padding checks, a buffer grown as it goes)
//! costs more than the text itself.

/// A value as the terminal is shown it: control characters (C0, DEL, C1 — a job ID may hold
/// any, by Nomad's rules, and an escape sequence would be run by the operator's terminal)
/// written as escapes.
pub fn shown(text: &str) -> String {
    if !text.chars().any(char::is_control) {
        return text.to_string();
    }
    text.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// The parts one after another, in one allocation of the right size.
pub fn joined(parts: &[&str]) -> String {
    let mut text = String::with_capacity(parts.iter().map(|part| part.len()).sum());
    for part in parts {
        text.push_str(part);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::{joined, shown};

    #[test]
    fn control_characters_are_shown_escaped() {
        assert_eq!(shown("web"), "web");
        assert_eq!(shown("a\u{1b}]52;c;x\u{7}b\n"), "a\\u{1b}]52;c;x\\u{7}b\\n");
    }

    #[test]
    fn parts_are_joined_in_order() {
        let text = joined(&["_nomad-task-", "a1", "-", "group", "-", "web"]);
        assert_eq!(text, "_nomad-task-a1-group-web");
        assert_eq!(joined(&[]), "");
    }
}
