//! Parsing HCL sent over the API in a child process with a CPU limit (hcl-rs's parser can
//! take minutes over a kilobyte).
//!
//! At most [`PARSES_AT_ONCE`] children run at once, each with [`PARSE_CPU_SECONDS`] of CPU
//! (`RLIMIT_CPU`) and a [`PARSE_WAIT`] deadline. The fuzz target `hcl_jobspec` found
//! 1,161 bytes that hold hcl-rs's parser for 157 s and 748 that held it 424 s
//! (`fuzz/regressions/hcl_jobspec/`). `job run FILE.hcl` parses the operator's own file in
//! the CLI, unbounded.
//!
//! The child reads `{"JobHCL": …, "Variables": …}` (the request's two texts) on standard
//! input and writes `{"Job": …}` or `{"Error": …}`; its errors name the jobspec
//! `input.hcl`, as Nomad's do, and the `Variables` text [`VARIABLES_NAME`].

use quiesce_core::hcl_jobspec::{error, parse, Input, VariableInputs};
use serde_json::{json, Value};

/// What the errors of `/v1/jobs/parse` call its `Variables` text (a var-file's content).
pub const VARIABLES_NAME: &str = "variables.hcl";

/// The CPU time a parse of an HCL jobspec sent to the HTTP API may take. hcl-rs's parser
/// takes minutes over some kilobyte-long inputs (the fuzz target `hcl_jobspec` found one of
/// 1,161 bytes that took 157 s), so the agent parses in a child process with this limit.
pub const PARSE_CPU_SECONDS: u64 = 2;
/// How long the agent waits for that child, and how many it runs at once.
const PARSE_WAIT: std::time::Duration = std::time::Duration::from_secs(5);
const PARSES_AT_ONCE: usize = 4;
/// The most memory (address space) the child may map, and the most of its answer read: a
/// job bigger than a request body may be is no job to register anyway.
const PARSE_MEMORY: u64 = 1 << 30;
const MAX_PARSE_ANSWER: u64 = 32 << 20;

/// [`parse`] in a child process, `program parse-hcl` (the agent's own binary), with a CPU
/// limit and a deadline: an input that would hold the parser for minutes is an error
/// instead. `variables` is a var-file's text (`""` for none).
pub fn parse_job_bounded(
    program: &std::path::Path,
    text: &str,
    variables: &str,
) -> Result<Value, String> {
    use std::io::{Read as _, Write as _};
    use std::os::unix::process::CommandExt as _;
    static RUNNING: std::sync::Mutex<usize> = std::sync::Mutex::new(0);
    {
        let mut running = RUNNING.lock().unwrap_or_else(|p| p.into_inner());
        if *running >= PARSES_AT_ONCE {
            return Err(error("too many jobspecs being parsed at once; try again"));
        }
        *running += 1;
    }
    struct Slot;
    impl Drop for Slot {
        fn drop(&mut self) {
            *RUNNING.lock().unwrap_or_else(|p| p.into_inner()) -= 1;
        }
    }
    let _slot = Slot;
    let mut command = std::process::Command::new(program);
    command
        .arg("parse-hcl")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null());
    // SAFETY: setrlimit is a system call (async-signal-safe; nix's thin wrapper allocates
    // nothing, nor does an `io::Error` of its errno), on values known before.
    unsafe {
        command.pre_exec(|| {
            use nix::sys::resource::{setrlimit, Resource};
            let soft = PARSE_CPU_SECONDS as libc::rlim_t;
            setrlimit(Resource::RLIMIT_CPU, soft, soft + 1)?;
            let memory = PARSE_MEMORY as libc::rlim_t;
            setrlimit(Resource::RLIMIT_AS, memory, memory)?;
            Ok(())
        });
    }
    let mut child = command
        .spawn()
        .map_err(|e| error(format!("starting the parser: {e}")))?;
    let mut stdin = child.stdin.take().expect("piped");
    let mut stdout = child.stdout.take().expect("piped");
    let input = json!({ "JobHCL": text, "Variables": variables }).to_string();
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(input.as_bytes());
    });
    let reader = std::thread::spawn(move || {
        // One byte past the bound tells an answer too long from one that fits; the rest is
        // drained (unread) so that the child is not stuck writing it.
        let mut out = Vec::new();
        let _ = (&mut stdout)
            .take(MAX_PARSE_ANSWER + 1)
            .read_to_end(&mut out);
        let _ = std::io::copy(&mut stdout, &mut std::io::sink());
        out
    });
    let deadline = std::time::Instant::now() + PARSE_WAIT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    let _ = writer.join();
    let out = reader.join().unwrap_or_default();
    match status {
        Some(status) if status.success() && out.len() as u64 > MAX_PARSE_ANSWER => Err(error(
            format!("the parsed job is longer than {MAX_PARSE_ANSWER} bytes: refused"),
        )),
        Some(status) if status.success() => {
            let answer: Result<Value, String> = serde_json::from_slice::<Value>(&out)
                .map_err(|e| error(format!("the parser's answer: {e}")))
                .and_then(|answer| match answer {
                    Value::Object(mut o) if o.contains_key("Job") => Ok(o.remove("Job").unwrap()),
                    Value::Object(o) => Err(o
                        .get("Error")
                        .and_then(Value::as_str)
                        .unwrap_or("the parser failed")
                        .to_string()),
                    _ => Err(error("the parser's answer is not an object")),
                });
            answer
        }
        Some(status) if status.code().is_some() => Err(error(format!(
            "the parser failed on this jobspec (exit status {status}): refused"
        ))),
        _ => Err(error(format!(
            "the jobspec took the parser more than {PARSE_CPU_SECONDS} s of CPU or {} s, or \
             more than {} MiB of memory: refused",
            PARSE_WAIT.as_secs(),
            PARSE_MEMORY >> 20
        ))),
    }
}

/// `quiesce parse-hcl`: reads `{"JobHCL": …, "Variables": …}` on standard input, writes
/// `{"Job": …}` or `{"Error": "…"}` on standard output (see [`parse_job_bounded`]).
pub fn parse_hcl_main() -> i32 {
    let answer = match parse_request() {
        Ok(job) => json!({ "Job": job }),
        Err(e) => json!({ "Error": e }),
    };
    println!("{answer}");
    0
}

fn parse_request() -> Result<Value, String> {
    use std::io::Read as _;
    // The request body's texts, re-encoded: at most six bytes of JSON (`\u0001`) for each.
    let limit = 6 * super::MAX_BODY_BYTES as u64 + 64;
    let mut request = Vec::new();
    std::io::stdin()
        .take(limit)
        .read_to_end(&mut request)
        .map_err(|e| error(format!("reading: {e}")))?;
    let request: Value =
        serde_json::from_slice(&request).map_err(|e| error(format!("reading: {e}")))?;
    let text = |name: &str| request[name].as_str().unwrap_or_default();
    let variables = text("Variables");
    let mut inputs = VariableInputs::default();
    if !variables.trim().is_empty() {
        inputs.files.push(Input {
            name: VARIABLES_NAME,
            text: variables,
        });
    }
    let jobspec = Input {
        name: "input.hcl",
        text: text("JobHCL"),
    };
    parse(jobspec, &inputs).map_err(|e| error(e.nomad_style()))
}
