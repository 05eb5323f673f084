//! What the in-process agent tests share: an agent started in the test's own process (its
//! counters and state readable directly), its data dir removed with it, and a wait with a
//! deadline. Each test binary uses a part of it.
#![allow(dead_code)]

use quiesce_agent::daemon::{self, AgentConfig};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long a test waits for anything before it fails.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// Polls `f` every 20 ms until it gives a value, failing after [`PATIENCE`].
pub fn wait_for<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(value) = f() {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// An agent in this process, on a free port of 127.0.0.1.
pub struct Agent {
    /// `host:port`.
    pub address: String,
    pub agent: daemon::Agent,
    data_dir: PathBuf,
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.data_dir);
    }
}

impl Agent {
    /// Starts an agent whose data dir is named by `binary` and `test` (tests of one binary
    /// run at once: each has its own), configured by `configure`.
    pub fn start(binary: &str, test: &str, configure: impl FnOnce(&mut AgentConfig)) -> Agent {
        let data_dir =
            std::env::temp_dir().join(format!("quiesce-{binary}-{}-{test}", std::process::id()));
        let _ = std::fs::remove_dir_all(&data_dir);
        let mut config = AgentConfig::new(
            data_dir.clone(),
            "127.0.0.1:0".parse().expect("an address"),
            Path::new(env!("CARGO_BIN_EXE_quiesce")).to_path_buf(),
        );
        configure(&mut config);
        let agent = daemon::spawn(config).expect("the agent starts");
        Agent {
            address: agent.shared.config.bind.to_string(),
            agent,
            data_dir,
        }
    }
}
