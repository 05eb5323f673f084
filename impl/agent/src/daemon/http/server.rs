//! The connection layer: hyper's HTTP/1.1 on a small tokio runtime, with a limit on
//! everything a client can make the agent hold (DESIGN.md, "Limits"; each is documented in
//! README.md). Connections are tasks, not threads: an idle one costs a socket and a few
//! KiB. Requests are answered on a bounded pool of threads (the handlers take the core's
//! lock, a blocking call); a blocking query waits for a write to what it read on no
//! thread at all, then answers on the pool.
//!
//! | limit | value | past it |
//! |---|---|---|
//! | connections at once | [`MAX_CONNECTIONS`] | the next waits in the kernel's backlog |
//! | idle connection, or one slow to send its headers | [`IDLE_TIMEOUT`] | closed |
//! | request line and headers | [`MAX_HEADER_BYTES`], [`MAX_HEADERS`] | 431 |
//! | URL | [`MAX_URL_BYTES`] | 414 |
//! | body | [`MAX_BODY_BYTES`] | 413, unread |
//! | time to send a body | [`BODY_TIMEOUT`] | 408 |
//! | an answer the client stops taking (less than [`MIN_TAKEN`](super::stalling::MIN_TAKEN) in the time) | [`WRITE_TIMEOUT`] | the connection is reset |
//! | bodies read or held at once (only POST and PUT bodies are read) | [`MAX_BODY_READERS`] | the next waits |
//! | threads answering | [`MAX_HANDLER_THREADS`] | the next request waits |
//!
//! When the process runs out of file descriptors, `accept` fails: the agent says so once,
//! backs off (up to a second between tries) and serves again when descriptors free, saying
//! that too.
//!
//! The listener's backlog is 4,096 (std's 128 made a crowd of connections wait out SYN
//! retransmits). A task starts with the open-files limit the agent was started with, as its
//! hard limit too, not the one the agent raised for itself. Measured (`cargo bench -p
//! quiesce-benches --bench http_connections`): 10,000 idle connections cost 10.8 kB each
//! and no thread; 1,000 blocking queries waiting hold 44 threads (the handler pool, which
//! empties when idle), and a write answers all 1,000 in 35 ms.

use super::{answer, ApiError, Reply, MAX_BODY_BYTES};
use crate::daemon::Shared;
use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::header::{
    HeaderValue, CACHE_CONTROL, CONTENT_ENCODING, CONTENT_LENGTH, CONTENT_TYPE, VARY,
};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Connections served at once. Past it the agent stops accepting until one closes; the
/// kernel's backlog holds the rest. Above the 10,000 the connection benchmark holds idle,
/// well under the descriptors the agent raises its limit to (it raises the soft limit to
/// the hard one, as Go programs such as Nomad do).
pub const MAX_CONNECTIONS: usize = 16_384;

/// How long a connection may sit between requests, or take to send a request's line and
/// headers, before it is closed (hyper's header-read timer, which runs from the moment the
/// connection waits for a request). Go's and Python's clients reopen a closed keep-alive
/// connection on their own; a blocking query in flight is not idle.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// The request line and headers together (Go's servers allow 1 MiB, but no API client
/// sends more than a few hundred bytes).
pub const MAX_HEADER_BYTES: usize = 64 << 10;

/// Headers in one request.
pub const MAX_HEADERS: usize = 100;

/// The URL, path and query: a job ID is at most 128 bytes, so 16 KiB leaves room for long
/// `filter` expressions and nothing else.
pub const MAX_URL_BYTES: usize = 16 << 10;

/// The time a client has to send a whole body once its headers are in.
pub const BODY_TIMEOUT: Duration = Duration::from_secs(30);

/// How long an answer may wait for the client to take any of it: a client that does not
/// read holds its connection and its answer (up to the largest a read can make) no longer.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(30);

/// Bodies read at once, so that bodies in memory stay under `MAX_BODY_READERS ×
/// MAX_BODY_BYTES` (128 MiB) whatever the number of connections.
pub const MAX_BODY_READERS: usize = 16;

/// Threads that answer requests (each holds the core's lock while it reads or writes).
pub const MAX_HANDLER_THREADS: usize = 32;

/// The longest back-off between `accept` calls while the process has no descriptor free.
const MAX_ACCEPT_BACKOFF: Duration = Duration::from_secs(1);

/// The limits an agent's HTTP layer applies that tests may change: its timeouts and its
/// connection cap.
#[derive(Clone, Copy, Debug)]
pub struct HttpLimits {
    pub idle_timeout: Duration,
    pub body_timeout: Duration,
    pub write_timeout: Duration,
    pub max_connections: usize,
}

impl Default for HttpLimits {
    fn default() -> Self {
        HttpLimits {
            idle_timeout: IDLE_TIMEOUT,
            body_timeout: BODY_TIMEOUT,
            write_timeout: WRITE_TIMEOUT,
            max_connections: MAX_CONNECTIONS,
        }
    }
}

/// The runtime the HTTP layer runs on: two threads for the sockets (the agent's own
/// threads do the rest), `MAX_HANDLER_THREADS` for the answers.
pub fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(MAX_HANDLER_THREADS)
        .thread_name("http")
        .enable_io()
        .enable_time()
        .build()
}

use super::connections::{Admission, Busy, Handle, Registry};
use super::stalling::Stalling;

/// The kernel's send buffer of a connection (it doubles it for its bookkeeping).
const SEND_BUFFER_BYTES: usize = 128 << 10;

/// Accepts and serves connections on `listener` for as long as the runtime runs.
pub async fn serve(shared: Arc<Shared>, listener: std::net::TcpListener) {
    listener
        .set_nonblocking(true)
        .expect("a listening socket can be made non-blocking");
    let listener = TcpListener::from_std(listener).expect("the runtime takes the listener");
    let limits = shared.config.http;
    let limit = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
        .map_or(u64::MAX, |(soft, _)| soft);
    let connections = Registry::new(Registry::cap_for(limits.max_connections, limit));
    let _ = shared.connections.set(Arc::clone(&connections));
    let bodies = Arc::new(Semaphore::new(MAX_BODY_READERS));
    let mut backoff: Option<Duration> = None;
    loop {
        connections.room().await;
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) if out_of_descriptors(&e) => {
                let wait = match backoff {
                    None => {
                        crate::daemon::say!(
                            "accepting HTTP connections: {e}; backing off until \
                             descriptors free"
                        );
                        Duration::from_millis(10)
                    }
                    Some(wait) => (wait * 2).min(MAX_ACCEPT_BACKOFF),
                };
                backoff = Some(wait);
                tokio::time::sleep(wait).await;
                continue;
            }
            // A connection reset before it was accepted, among others: the next is fine (a
            // pause, should the error persist, keeps this loop from spinning).
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        if backoff.take().is_some() {
            crate::daemon::say!("accepting HTTP connections again");
        }
        // At the cap, the connection idle the longest makes room; with none idle, this one
        // is closed at once rather than left waiting (`connections.rs`).
        let Admission::Admitted(handle) = connections.admit(peer.ip()) else {
            drop(stream);
            continue;
        };
        // Answers leave in one write; without this the last segment of a larger one waits
        // for the client's delayed ACK.
        let _ = stream.set_nodelay(true);
        // What the kernel takes of an answer before its client reads is bounded too: the
        // rest stays with the agent, counted against its budget of unsent answers
        // (`answers.rs`), rather than in a socket buffer the budget cannot see.
        let _ = nix::sys::socket::setsockopt(
            &stream,
            nix::sys::socket::sockopt::SndBuf,
            &SEND_BUFFER_BYTES,
        );
        let shared = Arc::clone(&shared);
        let bodies = Arc::clone(&bodies);
        tokio::spawn(serve_connection(shared, bodies, stream, handle, limits));
    }
}

/// Serves one connection until it ends, or until it is shed (then it ends once the request
/// in flight, if any, is answered).
async fn serve_connection(
    shared: Arc<Shared>,
    bodies: Arc<Semaphore>,
    stream: tokio::net::TcpStream,
    handle: Arc<Handle>,
    limits: HttpLimits,
) {
    let on = Arc::clone(&handle);
    let service = hyper::service::service_fn(move |request| {
        let busy = on.busy();
        let answered = respond(Arc::clone(&shared), Arc::clone(&bodies), request);
        async move {
            let mut response = answered.await?;
            // As Nomad's gzip handler, on every answer: what is sent depends on the request's
            // `Accept-Encoding` (`gzip.rs`), so a cache must not serve one to the other.
            response
                .headers_mut()
                .insert(VARY, HeaderValue::from_static("Accept-Encoding"));
            Ok::<_, std::convert::Infallible>(response.map(|body| Tracked { body, _busy: busy }))
        }
    });
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.idle_timeout)
        .max_header_size(MAX_HEADER_BYTES)
        .max_buf_size(MAX_HEADER_BYTES)
        .max_headers(MAX_HEADERS)
        .serve_connection(
            TokioIo::new(Stalling::new(stream, limits.write_timeout)),
            service,
        );
    let mut connection = std::pin::pin!(connection);
    let mut shed = std::pin::pin!(handle.shed.notified());
    let mut shedding = false;
    let _ = std::future::poll_fn(|cx| {
        use std::future::Future;
        use std::task::Poll;
        if !shedding && shed.as_mut().poll(cx).is_ready() {
            // Idle: closed now (a part of a head it sent is dropped with it). With a request
            // in flight: once that is answered.
            if !handle.is_busy() {
                return Poll::Ready(Ok(()));
            }
            shedding = true;
            connection.as_mut().graceful_shutdown();
        }
        connection.as_mut().poll(cx)
    })
    .await;
}

/// A response's body with its request's standing on the connection: in flight until the
/// body is dropped (all sent, or the connection gone).
pub struct Tracked {
    body: AnswerBody,
    _busy: Busy,
}

impl hyper::body::Body for Tracked {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, Self::Error>>> {
        std::pin::Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

/// `accept` failing for want of a descriptor (or of kernel memory for one).
fn out_of_descriptors(error: &std::io::Error) -> bool {
    matches!(
        error.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    )
}

/// An answer's body: whole (sent with its `Content-Length`), or a stream of chunks (a
/// followed task log, the event stream) until its sender is done or the client has gone.
pub enum AnswerBody {
    Whole(Option<Bytes>),
    Stream(tokio::sync::mpsc::Receiver<Bytes>),
}

impl hyper::body::Body for AnswerBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, Self::Error>>> {
        match self.get_mut() {
            AnswerBody::Whole(bytes) => {
                std::task::Poll::Ready(bytes.take().map(|b| Ok(hyper::body::Frame::data(b))))
            }
            AnswerBody::Stream(chunks) => chunks
                .poll_recv(cx)
                .map(|chunk| chunk.map(|b| Ok(hyper::body::Frame::data(b)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self, AnswerBody::Whole(None))
    }

    /// A whole answer's size is known: hyper sends it as `Content-Length` rather than
    /// chunks, so a client knows how much is coming and that all of it came.
    fn size_hint(&self) -> hyper::body::SizeHint {
        match self {
            AnswerBody::Whole(bytes) => {
                hyper::body::SizeHint::with_exact(bytes.as_ref().map_or(0, |b| b.len() as u64))
            }
            AnswerBody::Stream(_) => hyper::body::SizeHint::default(),
        }
    }
}

async fn respond(
    shared: Arc<Shared>,
    bodies: Arc<Semaphore>,
    request: Request<Incoming>,
) -> Result<Response<AnswerBody>, std::convert::Infallible> {
    let (parts, body) = request.into_parts();
    let url = parts.uri.path_and_query().map_or("/", |pq| pq.as_str());
    if url.len() > MAX_URL_BYTES {
        let e = super::error(414, format!("URL too long: at most {MAX_URL_BYTES} bytes"));
        return Ok(render(&shared.answers, Err(e)));
    }
    let timeout = shared.config.http.body_timeout;
    let header = |name: &str| {
        parts
            .headers
            .get(name)
            .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned())
    };
    let bearer = header("Authorization")
        .and_then(|value| value.strip_prefix("Bearer ").map(|t| t.trim().to_string()));
    let method = super::Method::from(parts.method.as_str());
    let (host, origin) = (header("Host"), header("Origin"));
    let token = header("X-Nomad-Token").or(bearer);
    // Who asks is known from the head: a browser's request, or an unknown token, is
    // refused before its body is read (the guard is this request's only one; the token is
    // looked at again on every look of a blocking query). Only writes have a body the agent reads (Nomad
    // ignores a GET's); it is held, with its permit, until the request is answered.
    let known = super::guard::browser_guard(
        shared.config.bind,
        &method,
        host.as_deref(),
        origin.as_deref(),
    );
    let path = url.split('?').next().unwrap_or_default();
    if known.is_ok() && super::ui::serves(path) {
        // The web UI's files need no token: what a page shows, it reads from the API.
        return Ok(super::ui::answer(&method, path));
    }
    let known = known.and_then(|()| super::acl::authority(&shared, token.as_deref()).map(drop));
    if let Err(refused) = known {
        return Ok(render(&shared.answers, Err(refused)));
    }
    let (body, reading) = if matches!(method, super::Method::Post | super::Method::Put) {
        match read_body(&parts, body, bodies, timeout).await {
            Ok(read) => read,
            Err(e) => return Ok(render(&shared.answers, Err(e))),
        }
    } else {
        (Bytes::new(), None)
    };
    let request = super::ApiRequest {
        method,
        url: url.to_string(),
        token,
        body,
        gzip: super::gzip::accepted(header("Accept-Encoding").as_deref()),
        _reading: reading,
    };
    if super::events::streams(&request) {
        return Ok(
            match super::events::stream(Arc::clone(&shared), request).await {
                Ok(lines) => {
                    let mut response = Response::new(AnswerBody::Stream(lines));
                    let headers = response.headers_mut();
                    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
                    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
                    super::ui::secure(&mut response);
                    response
                }
                Err(e) => render(&shared.answers, Err(e)),
            },
        );
    }
    if let Some(followed) = super::logs::follows(&request) {
        return Ok(
            match super::logs::follow(Arc::clone(&shared), request, followed).await {
                Ok((content_type, chunks)) => {
                    let mut response = Response::new(AnswerBody::Stream(chunks));
                    let headers = response.headers_mut();
                    headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
                    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
                    super::ui::secure(&mut response);
                    response
                }
                Err(e) => render(&shared.answers, Err(e)),
            },
        );
    }
    Ok(render(
        &shared.answers,
        answer(Arc::clone(&shared), request).await,
    ))
}

/// The body, whole: refused unread past [`MAX_BODY_BYTES`] when its length is declared, or
/// as soon as it passes it; at most [`MAX_BODY_READERS`] are read, or held, at once (the
/// permit returned goes with the request until it is answered).
async fn read_body(
    parts: &hyper::http::request::Parts,
    body: Incoming,
    bodies: Arc<Semaphore>,
    timeout: Duration,
) -> Result<(Bytes, Option<OwnedSemaphorePermit>), ApiError> {
    let too_large = || {
        super::error(
            413,
            format!("Request body too large: at most {MAX_BODY_BYTES} bytes"),
        )
    };
    let declared = parts
        .headers
        .get(CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok()?.parse::<u64>().ok());
    match declared {
        Some(0) => return Ok((Bytes::new(), None)),
        Some(n) if n > MAX_BODY_BYTES as u64 => return Err(too_large()),
        _ => {}
    }
    if declared.is_none() && hyper::body::Body::is_end_stream(&body) {
        return Ok((Bytes::new(), None));
    }
    let reading = bodies
        .acquire_owned()
        .await
        .expect("the semaphore is never closed");
    let collect = Limited::new(body, MAX_BODY_BYTES).collect();
    match tokio::time::timeout(timeout, collect).await {
        Err(_) => Err(super::error(
            408,
            format!("Request timeout: the body did not arrive within {timeout:?}"),
        )),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => Err(too_large()),
        Ok(Err(e)) => Err(super::error(400, format!("reading the request body: {e}"))),
        Ok(Ok(collected)) => Ok((collected.to_bytes(), Some(reading))),
    }
}

/// An answer as Nomad sends it: JSON with the `X-Nomad-*` headers, or an error's plain
/// text.
fn render(answers: &super::Answers, answer: Result<Reply, ApiError>) -> Response<AnswerBody> {
    let mut retry_after = None;
    let mut gzip = false;
    let (status, content_type, body, index, next_token) = match answer {
        Ok(Reply {
            status,
            raw: Some(raw),
            index,
            ..
        }) => (
            status,
            "text/plain; charset=utf-8",
            answers.hold(raw),
            index,
            None,
        ),
        Ok(Reply {
            status,
            encoded: Some(encoded),
            gzipped,
            index,
            next_token,
            ..
        }) => {
            gzip = gzipped;
            (status, "application/json", encoded, index, next_token)
        }
        Ok(mut reply) => {
            let text = answers.hold(super::reply_bytes(&mut reply));
            let next = reply.next_token;
            (reply.status, "application/json", text, reply.index, next)
        }
        Err(e) => {
            retry_after = e.retry_after;
            (
                e.status,
                "text/plain; charset=utf-8",
                Bytes::from(e.message.into_bytes()),
                None,
                None,
            )
        }
    };
    let mut response = Response::new(AnswerBody::Whole(Some(body)));
    *response.status_mut() =
        StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    super::ui::secure(&mut response);
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    if gzip {
        headers.insert(CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    }
    // An answer is the cluster's state at one index: never kept by a browser or a proxy.
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    if let Some(seconds) = retry_after {
        headers.insert(hyper::header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    if let Some(index) = index {
        headers.insert("X-Nomad-Index", HeaderValue::from(index));
        headers.insert("X-Nomad-KnownLeader", HeaderValue::from_static("true"));
        headers.insert("X-Nomad-LastContact", HeaderValue::from_static("0"));
    }
    // A page token is the agent's own text (an index and an ID), never the client's.
    if let Some(token) = next_token.and_then(|t| HeaderValue::from_str(&t).ok()) {
        headers.insert("X-Nomad-NextToken", token);
    }
    response
}

/// When a blocking query gives up waiting: `wait` after it began.
pub(super) fn deadline_after(wait: Duration) -> tokio::time::Instant {
    tokio::time::Instant::from_std(Instant::now() + wait)
}
