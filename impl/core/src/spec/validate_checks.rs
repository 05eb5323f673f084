//! The validation of a service's `check` blocks, after Nomad's `ServiceCheck.validateNomad`:
//! type `http` or `tcp` (a `script` or `grpc` check is refused: this agent cannot run it),
//! an http check's path relative, `interval` and `timeout` at least a second, and a bound
//! on how many checks a service and an allocation carry (the agent runs each one).

use super::{ServiceCheck, TaskGroup};
use std::collections::BTreeSet;

/// Nomad's `minCheckInterval` and `minCheckTimeout`.
pub const MIN_CHECK_INTERVAL_NS: i64 = 1_000_000_000;
pub const MIN_CHECK_TIMEOUT_NS: i64 = 1_000_000_000;
/// A check runs at most this long, and at most this far apart (the agent's bound; Nomad's
/// http client gives up after 10 minutes).
pub const MAX_CHECK_DURATION_NS: i64 = 3_600_000_000_000;
/// Checks per service, and per allocation (its group's services and its tasks').
pub const MAX_CHECKS_PER_SERVICE: usize = 8;
pub const MAX_CHECKS_PER_ALLOC: usize = 32;
const MAX_PATH_BYTES: usize = 1024;

/// Every check of one service, at `at` (`…Services[s]`); `service_port` is the service's
/// own port label.
pub(super) fn checks(
    fail: &mut dyn FnMut(String, String),
    at: &str,
    checks: &[ServiceCheck],
    service_port: &str,
    labels: &BTreeSet<String>,
) {
    if checks.len() > MAX_CHECKS_PER_SERVICE {
        fail(
            format!("{at}.Checks"),
            format!(
                "at most {MAX_CHECKS_PER_SERVICE} checks per service (got {})",
                checks.len()
            ),
        );
    }
    for (c, check) in checks.iter().enumerate() {
        one(
            fail,
            &format!("{at}.Checks[{c}]"),
            check,
            service_port,
            labels,
        );
    }
}

fn one(
    fail: &mut dyn FnMut(String, String),
    at: &str,
    check: &ServiceCheck,
    service_port: &str,
    labels: &BTreeSet<String>,
) {
    let mut fail_at = |field: &str, problem: String| fail(format!("{at}.{field}"), problem);
    if check.name.len() > super::validate::MAX_NAME_BYTES
        || check.name.chars().any(char::is_control)
    {
        fail_at(
            "Name",
            format!(
                "at most {} bytes, no control characters",
                super::validate::MAX_NAME_BYTES
            ),
        );
    }
    match check.check_type.to_ascii_lowercase().as_str() {
        "http" => http(&mut fail_at, check),
        "tcp" => {}
        "script" | "grpc" => fail_at(
            "Type",
            format!(
                "{:?} checks are not supported by this agent (it runs http and tcp checks)",
                check.check_type
            ),
        ),
        other => fail_at(
            "Type",
            format!("invalid check type ({other:?}), must be one of tcp, http"),
        ),
    }
    let port = if check.port_label.is_empty() {
        service_port
    } else {
        &check.port_label
    };
    if port.is_empty() {
        fail_at(
            "PortLabel",
            "a check needs a port: the check's own or its service's".into(),
        );
    } else if !labels.contains(port) {
        fail_at(
            "PortLabel",
            format!("no port {port:?} in the group's network"),
        );
    }
    for (field, value, least) in [
        ("Interval", check.interval_ns, MIN_CHECK_INTERVAL_NS),
        ("Timeout", check.timeout_ns, MIN_CHECK_TIMEOUT_NS),
    ] {
        if value < least {
            fail_at(
                field,
                format!(
                    "{} is lower than the minimum of 1s",
                    crate::gotime::go_duration(value)
                ),
            );
        } else if value > MAX_CHECK_DURATION_NS {
            fail_at(field, "at most 1h".into());
        }
    }
    match check.on_update.as_str() {
        "" | "require_healthy" | "ignore" => {}
        "ignore_warnings" => fail_at(
            "OnUpdate",
            "on_update may only be set to ignore_warnings for Consul service checks".into(),
        ),
        other => fail_at(
            "OnUpdate",
            format!("on_update must be \"require_healthy\" or \"ignore\"; got {other:?}"),
        ),
    }
}

fn http(fail_at: &mut dyn FnMut(&str, String), check: &ServiceCheck) {
    let path = &check.path;
    if path.is_empty() {
        fail_at("Path", "http type must have http path".into());
    } else if !path.starts_with('/')
        || path.len() > MAX_PATH_BYTES
        || path
            .bytes()
            .any(|b| b.is_ascii_control() || b == b' ' || b >= 0x80)
    {
        fail_at(
            "Path",
            format!(
                "http type must have a relative http path: one starting with '/', at most \
                 {MAX_PATH_BYTES} bytes of printable ASCII without spaces"
            ),
        );
    }
    let method = &check.method;
    if !method.is_empty() && (method.len() > 16 || !method.bytes().all(|b| b.is_ascii_uppercase()))
    {
        fail_at(
            "Method",
            format!("{method:?} is not an HTTP method (upper-case letters, like GET)"),
        );
    }
    match check.protocol.as_str() {
        "" | "http" => {}
        "https" => fail_at(
            "Protocol",
            "https checks are not supported by this agent".into(),
        ),
        other => fail_at(
            "Protocol",
            format!("{other:?} is not a check protocol (http)"),
        ),
    }
}

/// The allocation's bound: every check of the group's services and its tasks'.
pub(super) fn per_alloc(fail: &mut dyn FnMut(String, String), at: &str, group: &TaskGroup) {
    let count: usize = group
        .all_services()
        .map(|(_, service)| service.checks.as_ref().map_or(0, Vec::len))
        .sum();
    if count > MAX_CHECKS_PER_ALLOC {
        fail(
            format!("{at}.Services"),
            format!(
                "at most {MAX_CHECKS_PER_ALLOC} checks per allocation, in its group's and \
                 tasks' services (got {count})"
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    use crate::spec::parse_register_body;
    use serde_json::json;

    /// The problems of a one-service job whose service has `check`, by field.
    fn problems(check: serde_json::Value) -> Vec<(String, String)> {
        let job = json!({"Job": {"ID": "j", "TaskGroups": [{"Name": "g",
            "Networks": [{"DynamicPorts": [{"Label": "http"}]}],
            "Services": [{"Name": "s", "PortLabel": "http", "Checks": [check]}],
            "Tasks": [{"Name": "t", "Driver": "raw_exec", "Config": {"command": "/bin/true"}}]}]}});
        match parse_register_body(&serde_json::to_vec(&job).unwrap()) {
            Ok(_) => Vec::new(),
            Err(errors) => errors.0.into_iter().map(|e| (e.field, e.problem)).collect(),
        }
    }

    const AT: &str = "TaskGroups[0].Services[0].Checks[0]";

    #[test]
    fn an_http_and_a_tcp_check_pass_and_each_wrong_field_is_named() {
        let good = json!({"Name": "c", "Type": "http", "Path": "/health",
                          "Interval": 1_000_000_000i64, "Timeout": 1_000_000_000i64});
        assert_eq!(problems(good.clone()), Vec::new());
        let mut tcp = good.clone();
        tcp["Type"] = json!("tcp");
        assert_eq!(problems(tcp), Vec::new());
        for (field, value, named) in [
            ("Type", json!("script"), "not supported by this agent"),
            ("Type", json!("grpc"), "not supported by this agent"),
            ("Type", json!("udp"), "invalid check type"),
            ("Path", json!("http://elsewhere/"), "relative http path"),
            (
                "Interval",
                json!(500_000_000i64),
                "lower than the minimum of 1s",
            ),
            ("Timeout", json!(0), "lower than the minimum of 1s"),
            ("PortLabel", json!("admin"), "no port \"admin\""),
            ("Protocol", json!("https"), "not supported by this agent"),
            (
                "OnUpdate",
                json!("ignore_warnings"),
                "Consul service checks",
            ),
        ] {
            let mut check = good.clone();
            check[field] = value;
            let found = problems(check);
            assert!(
                found
                    .iter()
                    .any(|(at, problem)| *at == format!("{AT}.{field}") && problem.contains(named)),
                "{field}: {found:?}"
            );
        }
    }

    #[test]
    fn checks_are_bounded_per_service() {
        let check =
            json!({"Type": "tcp", "Interval": 1_000_000_000i64, "Timeout": 1_000_000_000i64});
        let job = json!({"Job": {"ID": "j", "TaskGroups": [{"Name": "g",
            "Networks": [{"DynamicPorts": [{"Label": "http"}]}],
            "Services": [{"Name": "s", "PortLabel": "http",
                          "Checks": vec![check; super::MAX_CHECKS_PER_SERVICE + 1]}],
            "Tasks": [{"Name": "t", "Driver": "raw_exec", "Config": {"command": "/bin/true"}}]}]}});
        let errors = parse_register_body(&serde_json::to_vec(&job).unwrap()).unwrap_err();
        assert!(
            errors
                .0
                .iter()
                .any(|e| e.field == "TaskGroups[0].Services[0].Checks"),
            "{errors}"
        );
    }
}
