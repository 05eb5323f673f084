//! The invariant index (`quiesce-model invariants`): for each of the model's invariants,
//! its property, the places in the implementation tagged as upholding it, the tests that
//! name it, and the probe's judge of it, read from the source tree.
//!
//! A tag is a comment line `// invariant: NAME` (or `# invariant: NAME` in Python), several
//! names separated by commas. Where a tag stands says what it marks:
//! * in `impl/*/src`, outside a `#[cfg(test)]` module: code that upholds the invariant;
//! * in `proofs/src/probe`: the probe's judge of it;
//! * anywhere else (a `#[cfg(test)]` module, `tests/`, `proofs/`, the Python and Go
//!   end-to-end tests, `model/tests`): a test that checks it.
//!
//! The index is wrong, and `invariants` exits non-zero, when an invariant has no code or no
//! test, its property is not in `model/src/properties.rs`, or a tag names no invariant. The
//! names come from the model ([`quiesce_model::properties::INVARIANTS`]), the one
//! definition the probe also uses. The model library stays pure: this reading of files is
//! the binary's.

use quiesce_model::properties::INVARIANTS;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// What a tag marks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Code,
    Test,
    Probe,
}

/// A tag's place: a path relative to the root, and a 1-based line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Place {
    pub path: String,
    pub line: usize,
    /// The item the tag stands over (its next line that is not a comment or attribute).
    pub item: String,
}

#[derive(Debug, Default)]
pub struct Entry {
    /// The property's `fn` in the model, and the first sentence of its doc comment.
    pub property: Option<Place>,
    pub says: String,
    pub code: Vec<Place>,
    pub tests: Vec<Place>,
    pub probe: Vec<Place>,
}

#[derive(Debug, Default)]
pub struct Index {
    pub entries: BTreeMap<&'static str, Entry>,
    /// Everything that makes the index wrong, one line each.
    pub problems: Vec<String>,
}

/// The folders the index reads, under the root, and the files it skips inside them.
const SCANNED: [&str; 3] = ["impl", "proofs", "model/tests"];
const LONGEST_FILE: u64 = 4 << 20;
const MOST_FILES: usize = 20_000;

/// Reads the tree under `root` (the workspace's root) into an index.
pub fn scan(root: &Path) -> Result<Index, String> {
    let mut index = Index::default();
    for &(name, _) in INVARIANTS.iter() {
        index.entries.insert(name, Entry::default());
    }
    let properties = root.join("model/src/properties.rs");
    let text = std::fs::read_to_string(&properties)
        .map_err(|e| format!("{}: {e} (is --root the workspace?)", properties.display()))?;
    find_properties(&text, &mut index);
    let mut files = Vec::new();
    for folder in SCANNED {
        walk(&root.join(folder), &mut files)?;
    }
    files.sort();
    for file in files {
        let relative = file
            .strip_prefix(root)
            .map_err(|e| e.to_string())?
            .to_string_lossy()
            .into_owned();
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue; // not text
        };
        read_tags(&relative, &text, &mut index);
    }
    for (name, entry) in &index.entries {
        if entry.property.is_none() {
            index.problems.push(format!(
                "{name}: no `pub fn {name}` in model/src/properties.rs"
            ));
        }
        if entry.code.is_empty() {
            index.problems.push(format!(
                "{name}: no code in impl/ is tagged as upholding it"
            ));
        }
        if entry.tests.is_empty() {
            index.problems.push(format!("{name}: no test names it"));
        }
    }
    Ok(index)
}

fn walk(dir: &Path, files: &mut Vec<PathBuf>) -> Result<(), String> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(format!("{}: {e}", dir.display())),
    };
    for entry in entries {
        let entry = entry.map_err(|e| format!("{}: {e}", dir.display()))?;
        let path = entry.path();
        let kind = entry.file_type().map_err(|e| e.to_string())?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if kind.is_dir() {
            if !matches!(
                name.as_ref(),
                "target" | "corpus" | "__pycache__" | "node_modules"
            ) && !name.starts_with('.')
            {
                walk(&path, files)?;
            }
        } else if kind.is_file()
            && [".rs", ".py", ".go"].iter().any(|ext| name.ends_with(ext))
            && entry.metadata().is_ok_and(|m| m.len() <= LONGEST_FILE)
        {
            if files.len() >= MOST_FILES {
                return Err(format!(
                    "more than {MOST_FILES} source files under the root"
                ));
            }
            files.push(path);
        }
    }
    Ok(())
}

fn find_properties(text: &str, index: &mut Index) {
    let lines: Vec<&str> = text.lines().collect();
    for (ix, line) in lines.iter().enumerate() {
        let Some(rest) = line.strip_prefix("pub fn ") else {
            continue;
        };
        let name = rest.split('(').next().unwrap_or_default();
        let Some(entry) = index.entries.get_mut(name) else {
            continue;
        };
        let mut doc = Vec::new();
        for above in lines[..ix].iter().rev() {
            match above.trim_start().strip_prefix("///") {
                Some(text) => doc.push(text.trim()),
                None => break,
            }
        }
        doc.reverse();
        entry.says = first_sentence(&doc.join(" "));
        entry.property = Some(Place {
            path: "model/src/properties.rs".into(),
            line: ix + 1,
            item: format!("fn {name}"),
        });
    }
}

/// The first sentence of a property's doc after its bold heading (`**name** (invariant
/// N).`), cut at a word near 110 characters.
fn first_sentence(doc: &str) -> String {
    let mut sentences = doc.split(". ").filter(|s| !s.starts_with("**"));
    let first = sentences.next().unwrap_or_default().trim_end_matches('.');
    if first.chars().count() <= 110 {
        return first.to_string();
    }
    let cut: String = first.chars().take(110).collect();
    let at = cut.rfind(' ').unwrap_or(cut.len());
    format!("{}…", &cut[..at])
}

/// Where the tags of one file stand, by what kind each marks.
fn read_tags(path: &str, text: &str, index: &mut Index) {
    let lines: Vec<&str> = text.lines().collect();
    let test_file = is_test_path(path);
    // The closing line of the test module we are in (its indentation, then `}`), if any.
    let mut test_module_end: Option<String> = None;
    for (ix, line) in lines.iter().enumerate() {
        let trimmed = line.trim_start();
        if test_module_end.as_deref() == Some(*line) {
            test_module_end = None;
            continue;
        }
        // `#[cfg(test)]`, `#[cfg(all(test, …))]` over a module with a body: tests until the
        // module's closing brace, at the module's own indentation (rustfmt's layout). A
        // one-line `mod test_support;` is not a test module.
        if test_module_end.is_none() && trimmed.starts_with("#[cfg(") && trimmed.contains("test") {
            let next = lines[ix + 1..]
                .iter()
                .find(|l| !l.trim_start().starts_with('#'));
            if let Some(next) = next.filter(|l| l.contains("mod ") && l.ends_with('{')) {
                let indent = &next[..next.len() - next.trim_start().len()];
                test_module_end = Some(format!("{indent}}}"));
            }
        }
        let in_test_module = test_module_end.is_some();
        let Some(names) = trimmed
            .strip_prefix("// invariant:")
            .or_else(|| trimmed.strip_prefix("# invariant:"))
        else {
            continue;
        };
        let kind = if test_file || in_test_module {
            Kind::Test
        } else if path.starts_with("proofs/src/probe/") {
            Kind::Probe
        } else if path.starts_with("impl/") {
            Kind::Code
        } else {
            Kind::Test
        };
        let item = lines[ix + 1..]
            .iter()
            .map(|l| l.trim())
            .find(|l| !(l.is_empty() || l.starts_with("//") || l.starts_with(['#', '@'])))
            .map(item_name)
            .unwrap_or_default();
        for name in names.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            let place = Place {
                path: path.to_string(),
                line: ix + 1,
                item: item.clone(),
            };
            match index.entries.get_mut(name) {
                Some(entry) => match kind {
                    Kind::Code => entry.code.push(place),
                    Kind::Test => entry.tests.push(place),
                    Kind::Probe => entry.probe.push(place),
                },
                None => index.problems.push(format!(
                    "{path}:{}: `invariant: {name}` names no invariant of the model",
                    ix + 1
                )),
            }
        }
    }
}

fn is_test_path(path: &str) -> bool {
    let file = path.rsplit('/').next().unwrap_or(path);
    path.split('/').any(|part| part == "tests" || part == "e2e")
        || file.ends_with("tests.rs")
        || file.ends_with("_test.go")
        || file.starts_with("test_")
}

/// `fn name`, `def name`, `func Name`, or the line itself, shortened.
fn item_name(line: &str) -> String {
    for keyword in ["fn ", "def ", "func "] {
        if let Some(at) = line.find(keyword) {
            let rest = &line[at + keyword.len()..];
            let end = rest
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            return format!("{}{}", keyword, &rest[..end]);
        }
    }
    line.chars().take(60).collect()
}

/// The index for a reader: per invariant, what it says, then its property, code, tests and
/// probe judge, one place per line; then the problems, if any.
pub fn render(index: &Index) -> String {
    let mut out = String::new();
    for (name, entry) in &index.entries {
        let _ = writeln!(out, "{name}: {}", entry.says);
        let rows = [
            ("property", entry.property.iter().collect::<Vec<_>>()),
            ("code", entry.code.iter().collect()),
            ("tests", entry.tests.iter().collect()),
            ("probe", entry.probe.iter().collect()),
        ];
        for (what, places) in rows {
            if places.is_empty() {
                let none = if what == "probe" {
                    "not judged from outside"
                } else {
                    "NONE"
                };
                let _ = writeln!(out, "  {what:<8} {none}");
            }
            for place in places {
                let _ = writeln!(
                    out,
                    "  {what:<8} {}:{}  {}",
                    place.path, place.line, place.item
                );
            }
        }
    }
    let counts = |pick: fn(&Entry) -> usize| index.entries.values().map(pick).sum::<usize>();
    let _ = writeln!(
        out,
        "{} invariants: {} places in code, {} tests, {} probe judges",
        index.entries.len(),
        counts(|e| e.code.len()),
        counts(|e| e.tests.len()),
        counts(|e| e.probe.len())
    );
    for problem in &index.problems {
        let _ = writeln!(out, "PROBLEM {problem}");
    }
    out
}

/// The workspace root: `--root`, else the nearest folder at or above the current one that
/// holds `model/src/properties.rs`, else where this binary was built from.
pub fn find_root(given: Option<PathBuf>) -> PathBuf {
    if let Some(root) = given {
        return root;
    }
    let here = std::env::current_dir().unwrap_or_default();
    here.ancestors()
        .find(|dir| dir.join("model/src/properties.rs").is_file())
        .map(Path::to_path_buf)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join(".."))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(name: &str, files: &[(&str, &str)]) -> PathBuf {
        let root =
            std::env::temp_dir().join(format!("quiesce-index-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        for (path, text) in files {
            let path = root.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        root
    }

    fn properties() -> String {
        INVARIANTS
            .iter()
            .map(|(name, _)| {
                format!("/// **{name}** (invariant). {name} holds. More.\npub fn {name}() -> bool {{ true }}\n")
            })
            .collect()
    }

    #[test]
    fn tags_are_read_by_where_they_stand() {
        let names: Vec<&str> = INVARIANTS.iter().map(|(n, _)| *n).collect();
        let all = names.join(", ");
        let code = format!("#[cfg(test)]\nmod test_support;\n// invariant: {all}\nfn upholds() {{}}\n#[cfg(all(test, not(loom)))]\nmod tests {{\n    // invariant: {all}\n    #[test]\n    fn checks() {{}}\n}}\n// invariant: {}\nfn after() {{}}\n", names[2]);
        let probe = format!("// invariant: {}\npub fn judge() {{}}\n", names[0]);
        let root = tree(
            "kinds",
            &[
                ("model/src/properties.rs", &properties()),
                ("impl/core/src/a.rs", &code),
                ("proofs/src/probe/judge.rs", &probe),
                ("proofs/src/probe/judge/tests.rs", &probe),
            ],
        );
        let index = scan(&root).unwrap();
        assert!(index.problems.is_empty(), "{:?}", index.problems);
        let first = &index.entries[names[0]];
        assert_eq!(first.code[0].item, "fn upholds");
        assert_eq!(first.tests[0].item, "fn checks");
        assert_eq!(first.probe.len(), 1);
        assert_eq!(first.probe[0].path, "proofs/src/probe/judge.rs");
        assert_eq!(first.tests.len(), 2);
        assert_eq!(index.entries[names[1]].code.len(), 1);
        assert_eq!(index.entries[names[2]].code[1].item, "fn after");
        assert_eq!(first.property.as_ref().unwrap().line, 2);
        assert_eq!(first.says, format!("{} holds", names[0]));
        let _ = std::fs::remove_dir_all(root);
    }

    #[test]
    fn a_missing_test_or_an_unknown_name_is_a_problem() {
        let names: Vec<&str> = INVARIANTS.iter().map(|(n, _)| *n).collect();
        let code = format!("// invariant: {}\nfn upholds() {{}}\n", names.join(", "));
        let test = format!(
            "# invariant: {}, stops_complete\ndef test_it():\n    pass\n",
            names[1..].join(", ")
        );
        let root = tree(
            "problems",
            &[
                ("model/src/properties.rs", &properties()),
                ("impl/agent/src/b.rs", &code),
                ("proofs/e2e/test_b.py", &test),
                ("impl/cli/src/x.rs", "fn untagged() {}\n"),
            ],
        );
        let index = scan(&root).unwrap();
        assert_eq!(
            index.problems,
            [
                "proofs/e2e/test_b.py:1: `invariant: stops_complete` names no invariant of the model"
                    .to_string(),
                format!("{}: no test names it", names[0]),
            ]
        );
        assert_eq!(index.entries[names[1]].tests[0].item, "def test_it");
        let _ = std::fs::remove_dir_all(root);
    }
}
