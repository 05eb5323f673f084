//! Text as a terminal or a log line may show it.

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

#[cfg(test)]
mod tests {
    use super::shown;

    #[test]
    fn control_characters_are_shown_escaped() {
        assert_eq!(shown("web"), "web");
        assert_eq!(shown("a\u{1b}]52;c;x\u{7}b\n"), "a\\u{1b}]52;c;x\\u{7}b\\n");
    }
}
