//! A policy's rules, as Nomad writes them in HCL:
//!
//! ```hcl
//! namespace "default" {
//!   policy       = "read"
//!   capabilities = ["alloc-lifecycle"]
//! }
//! agent { policy = "read" }
//! ```
//!
//! A namespace rule's `policy` (`deny`, `read`, `write`, `scale`) stands for a set of
//! capabilities, to which `capabilities` adds; `deny` in any policy of a token denies that
//! namespace whatever the others grant. A namespace label may hold `*` wildcards; a name
//! is governed by its exact rule, else by the closest matching wildcard one. `agent`,
//! `node` and `operator` take `deny`, `read` or `write`; `quota`, `plugin` and
//! `host_volume` are read and checked but govern nothing quiesce serves. Anything else is
//! an error naming it, as is every unknown policy or capability.

use std::collections::BTreeSet;

/// The namespace capabilities Nomad knows.
pub const CAPABILITIES: &[&str] = &[
    "deny",
    "list-jobs",
    "parse-job",
    "read-job",
    "submit-job",
    "dispatch-job",
    "read-logs",
    "read-fs",
    "alloc-exec",
    "alloc-node-exec",
    "alloc-lifecycle",
    "csi-register-plugin",
    "csi-write-volume",
    "csi-read-volume",
    "csi-list-volume",
    "csi-mount-volume",
    "list-scaling-policies",
    "read-scaling-policy",
    "read-job-scaling",
    "scale-job",
    "sentinel-override",
    "submit-recommendation",
    "host-volume-create",
    "host-volume-register",
    "host-volume-read",
    "host-volume-write",
    "host-volume-delete",
];

/// What `policy = "read"` grants in a namespace (Nomad's expansion).
const READ: &[&str] = &[
    "list-jobs",
    "parse-job",
    "read-job",
    "csi-list-volume",
    "csi-read-volume",
    "list-scaling-policies",
    "read-scaling-policy",
    "read-job-scaling",
    "host-volume-read",
];

/// What `policy = "write"` grants beyond `read`.
const WRITE: &[&str] = &[
    "scale-job",
    "submit-job",
    "dispatch-job",
    "read-logs",
    "read-fs",
    "alloc-exec",
    "alloc-lifecycle",
    "csi-write-volume",
    "csi-mount-volume",
    "submit-recommendation",
    "host-volume-create",
    "host-volume-register",
    "host-volume-write",
    "host-volume-delete",
];

/// What `policy = "scale"` grants.
const SCALE: &[&str] = &[
    "list-scaling-policies",
    "read-scaling-policy",
    "read-job-scaling",
    "scale-job",
];

/// The most a policy's rules may hold: a policy is read on every request of its tokens.
pub const MAX_RULES_BYTES: usize = 64 << 10;

/// Access to a non-namespaced part of the API (`agent`, `node`, `operator`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub enum Access {
    #[default]
    None,
    Read,
    Write,
    /// Overrides every grant of the other policies.
    Deny,
}

/// Several policies' access together is the greatest (`max`): a deny wins, else the widest
/// grant.
impl Access {
    pub fn allows(self, write: bool) -> bool {
        match self {
            Access::Write => true,
            Access::Read => !write,
            Access::None | Access::Deny => false,
        }
    }
}

/// A policy's rules, checked.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rules {
    /// Each namespace rule: its label (a name or a wildcard pattern) and its capabilities.
    pub namespaces: Vec<(String, BTreeSet<String>)>,
    pub agent: Access,
    pub node: Access,
    pub operator: Access,
}

impl Rules {
    /// The capabilities this policy grants in `namespace`: its exact rule's, else the
    /// closest matching wildcard rule's (the one whose pattern is the longest: the fewest
    /// characters left to its wildcards), else none.
    pub fn in_namespace(&self, namespace: &str) -> Option<&BTreeSet<String>> {
        if let Some((_, caps)) = self.namespaces.iter().find(|(n, _)| n == namespace) {
            return Some(caps);
        }
        self.namespaces
            .iter()
            .filter(|(pattern, _)| pattern.contains('*') && glob(pattern, namespace))
            // Between patterns as long, the first in byte order: the same answer whatever
            // order the rules were written in.
            .max_by_key(|(pattern, _)| (pattern.len(), std::cmp::Reverse(pattern.clone())))
            .map(|(_, caps)| caps)
    }
}

/// `*` matches any run of characters, everything else itself.
fn glob(pattern: &str, name: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = name.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    for (i, part) in parts.iter().enumerate() {
        if i == parts.len() - 1 {
            return rest.ends_with(part);
        }
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.is_empty()
}

/// Parses and checks a policy's rules; the error names what was wrong.
pub fn parse(text: &str) -> Result<Rules, String> {
    if text.len() > MAX_RULES_BYTES {
        return Err(format!(
            "Policy rules too large: at most {MAX_RULES_BYTES} bytes"
        ));
    }
    if text.trim().is_empty() {
        return Err("Policy rules are empty".into());
    }
    let body = hcl::parse(text).map_err(|e| format!("Failed to parse ACL Policy: {e}"))?;
    if let Some(attribute) = body.attributes().next() {
        return Err(format!(
            "Failed to parse ACL Policy: unexpected attribute {:?} outside a rule block",
            attribute.key()
        ));
    }
    let mut rules = Rules::default();
    for block in body.blocks() {
        let kind = block.identifier();
        let labels: Vec<&str> = block.labels().iter().map(|l| l.as_str()).collect();
        match kind {
            "namespace" => {
                let [name] = labels[..] else {
                    return Err("a namespace rule takes one label, the namespace".into());
                };
                if !valid_namespace(name) {
                    return Err(format!("Invalid namespace name: {name:?}"));
                }
                if rules.namespaces.iter().any(|(n, _)| n == name) {
                    return Err(format!("namespace {name:?} has more than one rule"));
                }
                let caps = namespace_rule(name, block.body())?;
                rules.namespaces.push((name.to_string(), caps));
            }
            "agent" | "node" | "operator" | "quota" | "plugin" => {
                if !labels.is_empty() {
                    return Err(format!("an {kind} rule takes no label"));
                }
                let access = plain_rule(kind, block.body())?;
                match kind {
                    "agent" => rules.agent = access,
                    "node" => rules.node = access,
                    "operator" => rules.operator = access,
                    _ => {}
                }
            }
            "host_volume" => {
                namespace_rule("host_volume", block.body())?;
            }
            other => {
                return Err(format!(
                    "Failed to parse ACL Policy: unknown rule {other:?}"
                ))
            }
        }
    }
    Ok(rules)
}

/// Nomad's rule for a namespace label: letters, digits, `-` and `*`, at most 128.
fn valid_namespace(name: &str) -> bool {
    (1..=128).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'*')
}

fn string_attr(body: &hcl::Body, key: &str, rule: &str) -> Result<Option<String>, String> {
    match body.attributes().find(|a| a.key() == key).map(|a| a.expr()) {
        None => Ok(None),
        Some(hcl::Expression::String(text)) => Ok(Some(text.clone())),
        Some(_) => Err(format!("{rule} rule: {key} must be a string")),
    }
}

fn only_keys(body: &hcl::Body, allowed: &[&str], rule: &str) -> Result<(), String> {
    if let Some(other) = body.attributes().find(|a| !allowed.contains(&a.key())) {
        return Err(format!("{rule} rule: unknown field {:?}", other.key()));
    }
    Ok(())
}

fn namespace_rule(name: &str, body: &hcl::Body) -> Result<BTreeSet<String>, String> {
    let rule = format!("namespace {name:?}");
    only_keys(body, &["policy", "capabilities"], &rule)?;
    // Variables' rules (`variables { path "…" { … } }`) govern nothing quiesce stores.
    if let Some(block) = body.blocks().find(|b| b.identifier() != "variables") {
        return Err(format!(
            "{rule} rule: unknown block {:?}",
            block.identifier()
        ));
    }
    let mut caps: BTreeSet<String> = match string_attr(body, "policy", &rule)?.as_deref() {
        None | Some("") => BTreeSet::new(),
        Some("deny") => ["deny"].map(String::from).into(),
        Some("read") => READ.iter().map(|c| c.to_string()).collect(),
        Some("write") => READ.iter().chain(WRITE).map(|c| c.to_string()).collect(),
        Some("scale") => SCALE.iter().map(|c| c.to_string()).collect(),
        Some(other) => return Err(format!("Invalid namespace policy: {other:?}")),
    };
    match body
        .attributes()
        .find(|a| a.key() == "capabilities")
        .map(|a| a.expr())
    {
        None => {}
        Some(hcl::Expression::Array(items)) => {
            for item in items {
                let hcl::Expression::String(cap) = item else {
                    return Err(format!("{rule} rule: capabilities must be strings"));
                };
                if !CAPABILITIES.contains(&cap.as_str()) {
                    return Err(format!("Invalid namespace capability '{cap}'"));
                }
                caps.insert(cap.clone());
            }
        }
        Some(_) => return Err(format!("{rule} rule: capabilities must be a list")),
    }
    Ok(caps)
}

fn plain_rule(kind: &str, body: &hcl::Body) -> Result<Access, String> {
    only_keys(body, &["policy"], kind)?;
    if let Some(block) = body.blocks().next() {
        return Err(format!(
            "{kind} rule: unknown block {:?}",
            block.identifier()
        ));
    }
    match string_attr(body, "policy", kind)?.as_deref() {
        Some("deny") => Ok(Access::Deny),
        Some("read") => Ok(Access::Read),
        Some("write") => Ok(Access::Write),
        None | Some("") => Ok(Access::None),
        Some(other) => Err(format!("Invalid {kind} policy: {other:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespace_policies_expand_and_capabilities_add() {
        let rules = parse(
            r#"
            namespace "default" {
              policy       = "read"
              capabilities = ["alloc-lifecycle"]
            }
            namespace "prod-*" { policy = "write" }
            namespace "*" { policy = "deny" }
            agent { policy = "read" }
            "#,
        )
        .unwrap();
        let default = rules.in_namespace("default").unwrap();
        assert!(default.contains("list-jobs") && default.contains("read-job"));
        assert!(default.contains("alloc-lifecycle"));
        assert!(!default.contains("submit-job"));
        assert!(rules
            .in_namespace("prod-web")
            .unwrap()
            .contains("submit-job"));
        assert!(rules.in_namespace("dev").unwrap().contains("deny"));
        assert_eq!(rules.agent, Access::Read);
        assert_eq!(rules.node, Access::None);
    }

    #[test]
    fn the_closest_wildcard_governs() {
        let rules = parse(
            r#"
            namespace "*" { policy = "read" }
            namespace "prod-*" { policy = "deny" }
            namespace "prod-api-*" { policy = "write" }
            "#,
        )
        .unwrap();
        assert!(rules.in_namespace("other").unwrap().contains("read-job"));
        assert!(rules.in_namespace("prod-web").unwrap().contains("deny"));
        assert!(rules
            .in_namespace("prod-api-1")
            .unwrap()
            .contains("submit-job"));
        assert!(glob("a*b*c", "axxbyyc") && !glob("a*b*c", "axxbyy") && glob("*", ""));
        // Equal lengths: the same rule wins in either order.
        for text in [
            r#"namespace "a-*" { policy = "read" }
               namespace "*-b" { policy = "deny" }"#,
            r#"namespace "*-b" { policy = "deny" }
               namespace "a-*" { policy = "read" }"#,
        ] {
            let caps = parse(text).unwrap().in_namespace("a-b").unwrap().clone();
            assert!(caps.contains("deny"), "{text}");
        }
    }

    #[test]
    fn bad_rules_are_errors_that_name_what_was_wrong() {
        for (text, named) in [
            (r#"namespace "default" { policy = "admin" }"#, "\"admin\""),
            (
                r#"namespace "default" { capabilities = ["root"] }"#,
                "'root'",
            ),
            (r#"namespace "a/b" { policy = "read" }"#, "\"a/b\""),
            (r#"agent { policy = "list" }"#, "agent policy"),
            (r#"cluster { policy = "write" }"#, "\"cluster\""),
            (r#"policy = "write""#, "\"policy\""),
            (r#"namespace "default" { polcy = "read" }"#, "\"polcy\""),
            ("namespace {", "parse"),
            ("", "empty"),
        ] {
            let error = parse(text).unwrap_err();
            assert!(error.contains(named), "{text}: {error}");
        }
    }
}
