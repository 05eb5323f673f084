//! One run of one check: a TCP connection (`tcp`), or an HTTP/1.1 request whose status
//! decides (`http`: 2xx and 3xx pass, as Nomad's checker judges them), each within the
//! check's timeout, every read bounded. An interim answer (`100 Continue`, `103 Early
//! Hints`) is no verdict: the final one after it decides. What the task answers is hostile: the status line
//! and headers are read up to [`MAX_HEAD_BYTES`], the body up to [`MAX_OUTPUT_BYTES`]
//! (Nomad keeps 3 KiB of a check's output), and nothing is read past the deadline.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Nomad's `outputSizeLimit`: the output kept of an http check's answer.
pub const MAX_OUTPUT_BYTES: usize = 3 * 1024;
/// The status line and headers of an http check's answer.
const MAX_HEAD_BYTES: usize = 16 * 1024;
/// Interim (1xx) answers skipped before the final one: Go's client gives up past 5
/// (`max1xxResponses`), and so does this probe.
const MAX_INTERIM_ANSWERS: usize = 5;

/// What a run found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    pub success: bool,
    /// An http check's status code (0: none).
    pub status_code: u16,
    pub output: String,
}

impl Outcome {
    fn failure(output: String) -> Self {
        Outcome {
            success: false,
            status_code: 0,
            output,
        }
    }
}

/// How to run a check.
#[derive(Clone, Debug)]
pub enum Probe {
    Tcp,
    Http { method: String, path: String },
}

/// Runs `probe` against `addr`, giving up at `timeout`.
pub fn run(probe: &Probe, addr: SocketAddr, timeout: Duration, cancelled: &AtomicBool) -> Outcome {
    let deadline = Instant::now() + timeout;
    // Deregistered since it was started (the stop path's pre-kill hooks): the task hears
    // nothing more from its checks, during its delay or after.
    if cancelled.load(Ordering::SeqCst) {
        return Outcome::failure("nomad: the check's service was deregistered".into());
    }
    let stream = match TcpStream::connect_timeout(&addr, timeout) {
        Ok(stream) => stream,
        Err(error) => return Outcome::failure(format!("nomad: dial tcp {addr}: {error}")),
    };
    if cancelled.load(Ordering::SeqCst) {
        return Outcome::failure("nomad: the check's service was deregistered".into());
    }
    match probe {
        Probe::Tcp => Outcome {
            success: true,
            status_code: 0,
            output: "nomad: tcp ok".into(),
        },
        Probe::Http { method, path } => match http(stream, addr, method, path, deadline) {
            Ok(outcome) => outcome,
            Err(error) => Outcome::failure(format!("nomad: {method} http://{addr}{path}: {error}")),
        },
    }
}

fn remaining(deadline: Instant) -> std::io::Result<Duration> {
    deadline
        .checked_duration_since(Instant::now())
        .filter(|left| !left.is_zero())
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::TimedOut, "timeout"))
}

fn http(
    mut stream: TcpStream,
    addr: SocketAddr,
    method: &str,
    path: &str,
    deadline: Instant,
) -> std::io::Result<Outcome> {
    stream.set_write_timeout(Some(remaining(deadline)?))?;
    // The path and method were validated with the jobspec: printable, no spaces.
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: quiesce-check\r\n\
         Accept: text/plain, */*\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes())?;
    let mut read = Vec::new();
    let mut chunk = [0u8; 4096];
    // An interim answer (1xx but 101) is no verdict: its head is skipped and the next one
    // read, as Go's client does (Nomad's checker gets the final answer from it).
    let mut interim = 0;
    let (head_end, status_code) = loop {
        let head_end = read_head(&mut stream, &mut read, deadline)?;
        let code = status(&read[..head_end])?;
        if !is_interim(code) {
            break (head_end, code);
        }
        interim += 1;
        if interim > MAX_INTERIM_ANSWERS {
            return Err(std::io::Error::other(
                "too many 1xx informational responses",
            ));
        }
        read.drain(..head_end);
    };
    if status_code == 200 {
        // Nomad: the output of a success is not kept.
        return Ok(Outcome {
            success: true,
            status_code,
            output: "nomad: http ok".into(),
        });
    }
    let mut body = read.split_off(head_end);
    body.truncate(MAX_OUTPUT_BYTES);
    while body.len() < MAX_OUTPUT_BYTES {
        let Ok(left) = remaining(deadline) else { break };
        stream.set_read_timeout(Some(left))?;
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => body.extend_from_slice(&chunk[..n.min(MAX_OUTPUT_BYTES - body.len())]),
        }
    }
    Ok(Outcome {
        success: status_code < 400,
        status_code,
        output: String::from_utf8_lossy(&body).into_owned(),
    })
}

/// Reads until `read` holds a whole head (status line and headers), at most
/// [`MAX_HEAD_BYTES`] of it, and returns where it ends; what follows it stays in `read`.
fn read_head(
    stream: &mut TcpStream,
    read: &mut Vec<u8>,
    deadline: Instant,
) -> std::io::Result<usize> {
    let mut chunk = [0u8; 4096];
    let mut searched: usize = 0;
    loop {
        // Only what came since the last search (and the three bytes before it): a task
        // that trickles its headers a byte at a time costs no quadratic scan.
        let from = searched.saturating_sub(3);
        if let Some(end) = find(&read[from..], b"\r\n\r\n") {
            return Ok(from + end + 4);
        }
        searched = read.len();
        if read.len() > MAX_HEAD_BYTES {
            return Err(std::io::Error::other(format!(
                "the answer's headers pass {MAX_HEAD_BYTES} bytes"
            )));
        }
        stream.set_read_timeout(Some(remaining(deadline)?))?;
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            return Err(std::io::Error::other("connection closed before the answer"));
        }
        read.extend_from_slice(&chunk[..n]);
    }
}

/// An informational answer that another follows (`100 Continue`, `103 Early Hints`…);
/// `101 Switching Protocols` is final, as Go's client takes it.
fn is_interim(code: u16) -> bool {
    (100..200).contains(&code) && code != 101
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// `HTTP/1.x NNN …`'s code.
fn status(head: &[u8]) -> std::io::Result<u16> {
    let line = head.split(|&b| b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut words = line.split_whitespace();
    let code = match (words.next(), words.next()) {
        (Some(version), Some(code)) if version.starts_with("HTTP/1.") => code.parse::<u16>().ok(),
        _ => None,
    };
    code.filter(|code| (100..1000).contains(code))
        .ok_or_else(|| std::io::Error::other("not an HTTP/1 answer"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    /// A one-connection server answering `answer` (after reading the request), in a thread.
    fn serve(answer: Vec<u8>) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            if let Ok((mut stream, _)) = listener.accept() {
                let mut buffer = [0u8; 1024];
                let _ = stream.read(&mut buffer);
                let _ = stream.write_all(&answer);
            }
        });
        addr
    }

    fn get(path: &str) -> Probe {
        Probe::Http {
            method: "GET".into(),
            path: path.into(),
        }
    }

    /// A run nobody cancels.
    fn uncancelled(probe: &Probe, addr: SocketAddr, timeout: Duration) -> Outcome {
        run(probe, addr, timeout, &AtomicBool::new(false))
    }

    #[test]
    fn a_200_passes_and_a_500_fails_with_its_body_kept_bounded() {
        let addr = serve(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok".to_vec());
        let outcome = uncancelled(&get("/health"), addr, Duration::from_secs(2));
        assert!(outcome.success, "{outcome:?}");
        assert_eq!(outcome.status_code, 200);
        let mut answer = b"HTTP/1.1 500 Oops\r\n\r\n".to_vec();
        answer.extend(std::iter::repeat_n(b'x', 10 * MAX_OUTPUT_BYTES));
        let outcome = uncancelled(&get("/health"), serve(answer), Duration::from_secs(2));
        assert!(!outcome.success);
        assert_eq!(outcome.status_code, 500);
        assert_eq!(outcome.output.len(), MAX_OUTPUT_BYTES);
    }

    #[test]
    fn a_server_that_never_answers_fails_at_the_timeout() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let started = Instant::now();
        let outcome = uncancelled(&get("/"), addr, Duration::from_millis(300));
        assert!(!outcome.success, "{outcome:?}");
        assert!(started.elapsed() < Duration::from_secs(2));
        drop(listener);
    }

    #[test]
    fn nothing_listening_fails_tcp_and_http() {
        let addr = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        assert!(!uncancelled(&Probe::Tcp, addr, Duration::from_secs(1)).success);
        assert!(!uncancelled(&get("/"), addr, Duration::from_secs(1)).success);
    }

    #[test]
    fn a_cancelled_run_never_connects() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let outcome = run(
            &get("/"),
            addr,
            Duration::from_secs(1),
            &AtomicBool::new(true),
        );
        assert!(!outcome.success);
        assert!(outcome.output.contains("deregistered"), "{outcome:?}");
        let accepted = listener.accept();
        assert!(
            matches!(&accepted, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
            "the task saw a connection: {accepted:?}"
        );
    }

    #[test]
    fn headers_trickled_a_byte_at_a_time_are_read() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            if let Ok((mut stream, _)) = listener.accept() {
                let mut buffer = [0u8; 1024];
                let _ = stream.read(&mut buffer);
                for byte in b"HTTP/1.1 200 OK\r\nX-Pad: abc\r\n\r\n" {
                    let _ = stream.write_all(&[*byte]);
                    let _ = stream.flush();
                }
            }
        });
        let outcome = uncancelled(&get("/"), addr, Duration::from_secs(5));
        assert!(outcome.success, "{outcome:?}");
        assert_eq!(outcome.status_code, 200);
    }

    /// 1xx answers are interim (RFC 9110 §15.2): the final answer after them decides, as
    /// Go's client (Nomad's checker) reads it, whether they come in one write or apart.
    #[test]
    fn interim_answers_are_skipped_and_the_final_one_decides() {
        let continued = serve(
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok".to_vec(),
        );
        let outcome = uncancelled(&get("/"), continued, Duration::from_secs(2));
        assert!(outcome.success, "{outcome:?}");
        assert_eq!(outcome.status_code, 200);

        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            if let Ok((mut stream, _)) = listener.accept() {
                let mut buffer = [0u8; 1024];
                let _ = stream.read(&mut buffer);
                let _ = stream.write_all(b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\n");
                let _ = stream.flush();
                std::thread::sleep(Duration::from_millis(50));
                let _ = stream.write_all(b"HTTP/1.1 503 Unavailable\r\n\r\nwarming up");
            }
        });
        let outcome = uncancelled(&get("/"), addr, Duration::from_secs(2));
        assert!(!outcome.success, "an interim answer passed: {outcome:?}");
        assert_eq!(
            (outcome.status_code, outcome.output.as_str()),
            (503, "warming up")
        );
    }

    /// A task that answers only ever interim answers fails, bounded (Go's client gives up
    /// past five); `101 Switching Protocols` is a final answer.
    #[test]
    fn endless_interim_answers_fail_and_101_is_final() {
        let answer = b"HTTP/1.1 100 Continue\r\n\r\n".repeat(MAX_INTERIM_ANSWERS + 1);
        let outcome = uncancelled(&get("/"), serve(answer), Duration::from_secs(2));
        assert!(!outcome.success, "{outcome:?}");
        assert!(outcome.output.contains("1xx"), "{outcome:?}");
        let switched = serve(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\n".to_vec());
        let outcome = uncancelled(&get("/"), switched, Duration::from_secs(2));
        assert_eq!(outcome.status_code, 101, "{outcome:?}");
    }
}
