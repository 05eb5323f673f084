//! The agent's configuration files (`agent -config FILE`), in Nomad's format, JSON or HCL:
//! the subset an agent of one server and at most one client uses. A key outside it is an
//! error naming it (an operator's setting is never silently dropped); the few that are
//! accepted and have no effect here are listed in [`IGNORED`] and said at start-up.

use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The largest configuration file read.
const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// Keys that are accepted and have no effect here, and why.
pub const IGNORED: [(&str, &str); 5] = [
    ("log_level", "the agent logs what it does at one level"),
    ("disable_update_check", "the agent never checks for updates"),
    (
        "ports.rpc",
        "the agent has no RPC listener: one server, no peers",
    ),
    ("server.raft_protocol", "one server, no Raft peers"),
    (
        "client.options",
        "no client option changes this agent's behaviour",
    ),
];

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    pub name: Option<String>,
    pub region: Option<String>,
    pub datacenter: Option<String>,
    pub data_dir: Option<PathBuf>,
    pub bind_addr: Option<String>,
    pub log_level: Option<String>,
    pub disable_update_check: Option<bool>,
    pub ports: Option<Ports>,
    pub server: Option<ServerBlock>,
    pub client: Option<ClientBlock>,
    pub acl: Option<AclBlock>,
    pub vault: Option<VaultBlock>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ports {
    pub http: Option<u16>,
    pub rpc: Option<u16>,
    pub serf: Option<u16>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerBlock {
    pub enabled: Option<bool>,
    /// Nomad's gossip key: 16, 24 or 32 bytes, base64 (`nomad operator gossip keyring
    /// generate` makes one).
    pub encrypt: Option<String>,
    /// Nomad's garbage collection: thresholds (Go durations), how often, versions kept.
    pub job_gc_threshold: Option<String>,
    pub eval_gc_threshold: Option<String>,
    pub job_gc_interval: Option<String>,
    pub job_max_versions: Option<usize>,
    pub bootstrap_expect: Option<u32>,
    pub raft_protocol: Option<u32>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientBlock {
    pub enabled: Option<bool>,
    /// Terminal allocations whose directories the client keeps (Nomad's default: 50).
    pub gc_max_allocs: Option<usize>,
    pub options: Option<BTreeMap<String, String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AclBlock {
    pub enabled: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VaultBlock {
    pub enabled: Option<bool>,
}

/// The garbage collection's settings, each where a file sets it.
#[derive(Debug, Default, PartialEq, Eq, Clone, Copy)]
pub struct GcSettings {
    pub job_threshold: Option<std::time::Duration>,
    pub eval_threshold: Option<std::time::Duration>,
    pub interval: Option<std::time::Duration>,
    pub job_max_versions: Option<usize>,
    pub max_alloc_dirs: Option<usize>,
}

impl GcSettings {
    /// The agent's collection: these settings over Nomad's defaults.
    pub fn over(
        self,
        mut gc: quiesce_agent::daemon::gc::GcConfig,
    ) -> quiesce_agent::daemon::gc::GcConfig {
        gc.job_threshold = self.job_threshold.unwrap_or(gc.job_threshold);
        gc.eval_threshold = self.eval_threshold.unwrap_or(gc.eval_threshold);
        gc.interval = self.interval.unwrap_or(gc.interval);
        gc.job_max_versions = self.job_max_versions.unwrap_or(gc.job_max_versions);
        gc.max_alloc_dirs = self.max_alloc_dirs.unwrap_or(gc.max_alloc_dirs);
        gc
    }
}

/// A Go duration of the configuration (`"1h"`, `"30s"`), named by `key` if it is not one.
fn duration(key: &str, text: &str) -> Result<std::time::Duration, String> {
    quiesce_core::gotime::parse_go_duration(text)
        .filter(|ns| *ns >= 0)
        .map(|ns| std::time::Duration::from_nanos(ns as u64))
        .ok_or_else(|| format!("{key} {text:?} is not a duration such as 1h or 30s"))
}

/// The settings of every file, in order: a later file's setting wins, as in Nomad.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Settings {
    pub name: Option<String>,
    pub region: Option<String>,
    pub datacenter: Option<String>,
    pub data_dir: Option<PathBuf>,
    pub bind_addr: Option<std::net::IpAddr>,
    pub http_port: Option<u16>,
    /// Where other agents join this one (`agent join`; see `daemon::peers`).
    pub serf_port: Option<u16>,
    /// The peers' shared key (`server.encrypt`), decoded.
    pub peer_key: Option<Vec<u8>>,
    /// `server.job_gc_threshold`, `eval_gc_threshold`, `job_gc_interval`,
    /// `job_max_versions` and `client.gc_max_allocs`, where set.
    pub gc: GcSettings,
    pub client_enabled: Option<bool>,
    pub acl_enabled: Option<bool>,
    /// Keys set that have no effect here (see [`IGNORED`]).
    pub ignored: Vec<&'static str>,
}

/// Reads the files; an error names the file and what is wrong in it.
pub fn read(paths: &[PathBuf]) -> Result<Settings, String> {
    let mut settings = Settings::default();
    for path in paths {
        let file = parse(path).map_err(|e| format!("config file {}: {e}", path.display()))?;
        merge(&mut settings, file).map_err(|e| format!("config file {}: {e}", path.display()))?;
    }
    Ok(settings)
}

fn parse(path: &Path) -> Result<ConfigFile, String> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let mut text = String::new();
    file.take(MAX_CONFIG_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|e| e.to_string())?;
    if text.len() as u64 > MAX_CONFIG_BYTES {
        return Err(format!("larger than {MAX_CONFIG_BYTES} bytes"));
    }
    let json = path.extension().is_some_and(|e| e == "json") || text.trim_start().starts_with('{');
    if json {
        serde_json::from_str(&text).map_err(|e| e.to_string())
    } else {
        hcl::from_str(&text).map_err(|e| e.to_string())
    }
}

/// `server.encrypt`, decoded: base64 of 16, 24 or 32 bytes, as Nomad's gossip keys are.
fn peer_key(text: &str) -> Result<Vec<u8>, String> {
    use base64::Engine;
    let key = base64::engine::general_purpose::STANDARD
        .decode(text.trim())
        .map_err(|e| format!("server.encrypt is not base64: {e}"))?;
    if ![16, 24, 32].contains(&key.len()) {
        return Err(format!(
            "server.encrypt is {} bytes: a key is 16, 24 or 32 (base64 of `head -c 32 /dev/urandom`)",
            key.len()
        ));
    }
    Ok(key)
}

fn merge(settings: &mut Settings, file: ConfigFile) -> Result<(), String> {
    let mut ignored = Vec::new();
    let set = |slot: &mut Option<String>, value: Option<String>, key: &str| match value {
        Some(text) if text.is_empty() || text.chars().any(char::is_control) => Err(format!(
            "{key} {text:?} must be non-empty, without control characters"
        )),
        Some(text) => {
            *slot = Some(text);
            Ok(())
        }
        None => Ok(()),
    };
    set(&mut settings.name, file.name, "name")?;
    set(&mut settings.region, file.region, "region")?;
    set(&mut settings.datacenter, file.datacenter, "datacenter")?;
    if let Some(dir) = file.data_dir {
        settings.data_dir = Some(dir);
    }
    if let Some(addr) = file.bind_addr {
        settings.bind_addr = Some(
            addr.parse()
                .map_err(|_| format!("bind_addr {addr:?} is not an IP address"))?,
        );
    }
    if file.log_level.is_some() {
        ignored.push("log_level");
    }
    if file.disable_update_check.is_some() {
        ignored.push("disable_update_check");
    }
    if let Some(ports) = file.ports {
        if ports.http.is_some() {
            settings.http_port = ports.http;
        }
        if ports.rpc.is_some() {
            ignored.push("ports.rpc");
        }
        if ports.serf.is_some() {
            settings.serf_port = ports.serf;
        }
    }
    if let Some(server) = file.server {
        if server.enabled == Some(false) {
            return Err(
                "server.enabled = false: a quiesce agent always runs its own server \
                        (a client-only agent has no servers to join)"
                    .into(),
            );
        }
        if let Some(expect) = server.bootstrap_expect.filter(|n| *n > 1) {
            return Err(format!(
                "server.bootstrap_expect = {expect}: a quiesce agent is a cluster of one server"
            ));
        }
        if server.raft_protocol.is_some() {
            ignored.push("server.raft_protocol");
        }
        if let Some(key) = server.encrypt {
            settings.peer_key = Some(peer_key(&key)?);
        }
        let gc = &mut settings.gc;
        for (key, text, slot) in [
            (
                "server.job_gc_threshold",
                server.job_gc_threshold,
                &mut gc.job_threshold,
            ),
            (
                "server.eval_gc_threshold",
                server.eval_gc_threshold,
                &mut gc.eval_threshold,
            ),
            (
                "server.job_gc_interval",
                server.job_gc_interval,
                &mut gc.interval,
            ),
        ] {
            if let Some(text) = text {
                *slot = Some(duration(key, &text)?);
            }
        }
        if gc.interval == Some(std::time::Duration::ZERO) {
            return Err(
                "server.job_gc_interval \"0s\" would collect without a pause: give a duration \
                 such as 5m"
                    .into(),
            );
        }
        match server.job_max_versions {
            Some(0) => return Err("server.job_max_versions must be at least 1".into()),
            Some(max) => gc.job_max_versions = Some(max),
            None => {}
        }
    }
    if let Some(client) = file.client {
        if client.enabled.is_some() {
            settings.client_enabled = client.enabled;
        }
        if client.gc_max_allocs.is_some() {
            settings.gc.max_alloc_dirs = client.gc_max_allocs;
        }
        if client.options.is_some_and(|o| !o.is_empty()) {
            ignored.push("client.options");
        }
    }
    if let Some(acl) = file.acl {
        if acl.enabled.is_some() {
            settings.acl_enabled = acl.enabled;
        }
    }
    if file.vault.is_some_and(|v| v.enabled == Some(true)) {
        return Err("vault.enabled = true: this agent has no Vault integration".into());
    }
    for key in ignored {
        if !settings.ignored.contains(&key) {
            settings.ignored.push(key);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(name: &str, text: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("quiesce-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn the_go_api_harness_config_reads() {
        let path = file(
            "harness.json",
            r#"{"name":"node-33507","data_dir":"/tmp/nomad3735468765","disable_update_check":true,
                "log_level":"ERROR","ports":{"http":33507,"rpc":34445},
                "server":{"enabled":true,"bootstrap_expect":1},
                "client":{"enabled":false,"options":{"test.tighten_network_timeouts":"true"}},
                "vault":{"enabled":false},"acl":{"enabled":false},"region":"regionA"}"#,
        );
        let settings = read(&[path]).unwrap();
        assert_eq!(settings.name.as_deref(), Some("node-33507"));
        assert_eq!(settings.region.as_deref(), Some("regionA"));
        assert_eq!(settings.http_port, Some(33507));
        assert_eq!(settings.client_enabled, Some(false));
        assert_eq!(settings.acl_enabled, Some(false));
        assert_eq!(
            settings.ignored,
            [
                "log_level",
                "disable_update_check",
                "ports.rpc",
                "client.options"
            ]
        );
    }

    #[test]
    fn the_peers_key_is_nomads_encrypt_and_a_bad_one_is_named() {
        let good = file(
            "key.hcl",
            "server {\n  encrypt = \"MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=\"\n}\n",
        );
        let settings = read(&[good]).unwrap();
        assert_eq!(
            settings.peer_key.as_deref(),
            Some(&b"0123456789abcdef0123456789abcdef"[..])
        );
        for (text, named) in [
            (r#"{"server":{"encrypt":"not base64!"}}"#, "not base64"),
            (r#"{"server":{"encrypt":"c2hvcnQ="}}"#, "is 5 bytes"),
        ] {
            let error = read(&[file("bad-key.json", text)]).unwrap_err();
            assert!(
                error.contains("server.encrypt") && error.contains(named),
                "{error}"
            );
        }
    }

    #[test]
    fn the_collectors_settings_read_and_bad_ones_are_named() {
        let good = file(
            "gc.hcl",
            "server {\n  job_gc_threshold = \"2h\"\n  job_max_versions = 3\n}\n\
             client {\n  gc_max_allocs = 7\n}\n",
        );
        let gc = read(&[good])
            .unwrap()
            .gc
            .over(quiesce_agent::daemon::gc::GcConfig::default());
        assert_eq!(gc.job_threshold, std::time::Duration::from_secs(7200));
        assert_eq!((gc.job_max_versions, gc.max_alloc_dirs), (3, 7));
        for (text, named) in [
            (r#"{"server":{"job_gc_interval":"0s"}}"#, "job_gc_interval"),
            (
                r#"{"server":{"eval_gc_threshold":"soon"}}"#,
                "eval_gc_threshold",
            ),
            (r#"{"server":{"job_max_versions":0}}"#, "job_max_versions"),
        ] {
            let error = read(&[file("bad-gc.json", text)]).unwrap_err();
            assert!(error.contains(named), "{text}: {error}");
        }
    }

    #[test]
    fn hcl_reads_and_later_files_win() {
        let first = file(
            "a.hcl",
            "region = \"east\"\nclient {\n  enabled = true\n}\n",
        );
        let second = file("b.hcl", "region = \"west\"\nports {\n  http = 5000\n}\n");
        let settings = read(&[first, second]).unwrap();
        assert_eq!(settings.region.as_deref(), Some("west"));
        assert_eq!(settings.client_enabled, Some(true));
        assert_eq!(settings.http_port, Some(5000));
    }

    #[test]
    fn unknown_and_unsupported_keys_are_named() {
        for (text, named) in [
            (r#"{"consul":{"address":"x"}}"#, "consul"),
            (r#"{"ports":{"htp":1}}"#, "htp"),
            (r#"{"ports":{"http":70000}}"#, "70000"),
            (r#"{"server":{"enabled":false}}"#, "server.enabled"),
            (
                r#"{"server":{"bootstrap_expect":3}}"#,
                "bootstrap_expect = 3",
            ),
            (r#"{"vault":{"enabled":true}}"#, "vault.enabled"),
            (r#"{"region":"a\nb"}"#, "region"),
            (r#"{"bind_addr":"localhost"}"#, "bind_addr"),
        ] {
            let error = read(&[file("bad.json", text)]).unwrap_err();
            assert!(
                error.contains(named) && error.contains("bad.json"),
                "{text}: {error}"
            );
        }
    }
}
