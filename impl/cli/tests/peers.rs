//! Peers on the serf port (issue 24, finding 9): anyone who reached it could add a peer,
//! 70 injected peers filled the list, `/v1/regions` listed the attacker's regions to
//! anonymous readers, and real joins were refused until a restart. With the peers' key
//! (`server.encrypt`), only an agent that holds it is taken; with ACLs on, an anonymous
//! reader of `/v1/regions` is told only the agent's own region.

use quiesce_agent::daemon::{self, peers, Agent, AgentConfig};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::Duration;

struct Running {
    agent: Agent,
    data_dir: std::path::PathBuf,
    serf: u16,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.data_dir);
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port()
}

fn agent(name: &str, region: &str, key: Option<&[u8]>, acl_enabled: bool) -> Running {
    let data_dir =
        std::env::temp_dir().join(format!("quiesce-peers-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data_dir);
    let mut config = AgentConfig::new(
        data_dir.clone(),
        "127.0.0.1:0".parse().expect("an address"),
        Path::new(env!("CARGO_BIN_EXE_quiesce")).to_path_buf(),
    );
    let serf = free_port();
    config.name = name.to_string();
    config.region = region.to_string();
    config.client_enabled = false;
    config.serf_port = Some(serf);
    config.peer_key = key.map(<[u8]>::to_vec);
    config.acl_enabled = acl_enabled;
    let agent = daemon::spawn(config).expect("the agent starts");
    Running {
        agent,
        data_dir,
        serf,
    }
}

impl Running {
    fn serf_address(&self) -> String {
        format!("127.0.0.1:{}", self.serf)
    }

    fn peer_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .agent
            .shared
            .peers
            .list()
            .into_iter()
            .map(|peer| peer.name)
            .collect();
        names.sort();
        names
    }

    fn regions(&self) -> String {
        let mut stream = TcpStream::connect(self.agent.shared.config.bind).expect("HTTP");
        let head = "GET /v1/regions HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
        stream.write_all(head.as_bytes()).expect("sent");
        let mut answer = String::new();
        let _ = stream.read_to_string(&mut answer);
        answer
            .split("\r\n\r\n")
            .nth(1)
            .unwrap_or_default()
            .trim()
            .to_string()
    }
}

const KEY: &[u8; 32] = b"0123456789abcdef0123456789abcdef";
const OTHER_KEY: &[u8; 32] = b"fedcba9876543210fedcba9876543210";

/// An attacker on the serf port: what the old protocol took (a peer's line, at once), and
/// the new one with a made-up proof. Returns what the agent answered.
fn inject(address: &str, n: usize) -> String {
    let mut stream = TcpStream::connect(address).expect("the serf port");
    stream
        .set_read_timeout(Some(Duration::from_secs(6)))
        .expect("a timeout");
    let peer = format!(
        r#"{{"Name":"evil-{n}","Region":"evil-{n}","Datacenter":"x","HTTPAddr":"127.0.0.1:1"}}"#
    );
    let first = if n.is_multiple_of(2) {
        format!("{peer}\n")
    } else {
        "{\"Nonce\":\"00\"}\n".to_string()
    };
    let _ = stream.write_all(first.as_bytes());
    let mut reader = BufReader::new(stream.try_clone().expect("a clone"));
    let mut line = String::new();
    let _ = reader.read_line(&mut line);
    if !n.is_multiple_of(2) {
        let forged = format!("{{\"Peer\":{peer},\"Proof\":\"{}\"}}\n", "ab".repeat(32));
        let _ = stream.write_all(forged.as_bytes());
        let _ = reader.read_line(&mut line);
    }
    line
}

#[test]
fn only_an_agent_holding_the_key_is_taken_as_a_peer() {
    let a = agent("a", "east", Some(KEY), false);
    let b = agent("b", "west", Some(KEY), false);
    let stranger = agent("stranger", "north", Some(OTHER_KEY), false);
    let keyless = agent("keyless", "south", None, false);

    // 70 injections, both protocols: none is taken, none fills the list.
    for n in 0..70 {
        let answered = inject(&a.serf_address(), n);
        assert!(
            !answered.contains("\"Peer\""),
            "the agent told an attacker who it is: {answered}"
        );
    }
    assert!(a.peer_names().is_empty(), "{:?}", a.peer_names());

    // A wrong key is refused both ways, and nothing is remembered on either side.
    for (from, to) in [(&stranger, &a), (&a, &stranger)] {
        let (joined, errors) = peers::join(&from.agent.shared, &[&to.serf_address()]);
        assert_eq!(joined, 0, "{errors:?}");
        assert!(errors[0].contains("server.encrypt"), "{errors:?}");
    }
    assert!(
        stranger.peer_names().is_empty(),
        "{:?}",
        stranger.peer_names()
    );
    // No key: refused by the agent that has one, both ways (the keyless agent, which takes
    // anyone, may remember it: it was told who it is).
    for (from, to) in [(&keyless, &a), (&a, &keyless)] {
        let (joined, errors) = peers::join(&from.agent.shared, &[&to.serf_address()]);
        assert_eq!(joined, 0, "{errors:?}");
        assert!(errors[0].contains("server.encrypt"), "{errors:?}");
    }
    assert!(a.peer_names().is_empty(), "{:?}", a.peer_names());

    // The real peer joins, after all that.
    let (joined, errors) = peers::join(&b.agent.shared, &[&a.serf_address()]);
    assert_eq!((joined, errors), (1, Vec::<String>::new()));
    assert_eq!(a.peer_names(), ["b"]);
    assert_eq!(b.peer_names(), ["a"]);
    assert_eq!(a.regions(), r#"["east","west"]"#);
}

#[test]
fn without_a_key_agents_join_as_nomads_do_and_anonymous_readers_see_no_peers_under_acls() {
    // Nomad's Go API test TestRegionsList joins two agents without `encrypt`.
    let open = agent("open", "east", None, false);
    let other = agent("other", "west", None, false);
    let (joined, errors) = peers::join(&other.agent.shared, &[&open.serf_address()]);
    assert_eq!((joined, errors), (1, Vec::<String>::new()));
    assert_eq!(open.regions(), r#"["east","west"]"#);

    let guarded = agent("guarded", "east", None, true);
    let (joined, _) = peers::join(&other.agent.shared, &[&guarded.serf_address()]);
    assert_eq!(joined, 1);
    assert_eq!(guarded.peer_names(), ["other"]);
    assert_eq!(
        guarded.regions(),
        r#"["east"]"#,
        "the peers' regions, to an anonymous reader"
    );
}
