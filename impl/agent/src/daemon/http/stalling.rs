//! The write side of a connection with a deadline: a client that stops taking its answer
//! loses its connection (`server.rs`, [`WRITE_TIMEOUT`](super::server::WRITE_TIMEOUT)).

use std::time::Duration;

/// A connection whose writes fail once the client has stopped taking its answer (see
/// [`WRITE_TIMEOUT`](super::server::WRITE_TIMEOUT)); reads are the stream's own.
///
/// The timer is armed when a write cannot go on, and disarmed once the answer is all
/// handed to the kernel (a flush) or the client has taken [`MIN_TAKEN`] since it was armed:
/// a client that takes a few KiB now and then (a tiny receive window) is as stuck as one
/// that takes nothing. When it fires the connection is reset (`SO_LINGER` 0), so that the
/// kernel does not keep the unsent answer for a client that will not read it.
pub(super) struct Stalling {
    stream: tokio::net::TcpStream,
    timeout: Duration,
    stalled: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
    /// Bytes the client took since the timer was armed.
    taken: usize,
}

/// What a client must take of an answer per
/// [`WRITE_TIMEOUT`](super::server::WRITE_TIMEOUT) once it has stalled (about 35 KB/s: any
/// client that reads does).
pub const MIN_TAKEN: usize = 1 << 20;

/// What a write-side operation did, for the timer.
enum Done {
    Wrote(usize),
    Flushed,
}

impl Stalling {
    pub(super) fn new(stream: tokio::net::TcpStream, timeout: Duration) -> Stalling {
        Stalling {
            stream,
            timeout,
            stalled: None,
            taken: 0,
        }
    }

    /// `poll` of a write-side operation, failing it once the client has stopped taking the
    /// answer for the timeout.
    fn timed<T>(
        &mut self,
        cx: &mut std::task::Context<'_>,
        poll: impl FnOnce(
            std::pin::Pin<&mut tokio::net::TcpStream>,
            &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<T>>,
        done: impl FnOnce(&T) -> Done,
    ) -> std::task::Poll<std::io::Result<T>> {
        use std::future::Future;
        use std::task::Poll;
        match poll(std::pin::Pin::new(&mut self.stream), cx) {
            Poll::Ready(Ok(value)) => {
                match done(&value) {
                    Done::Flushed => self.stalled = None,
                    Done::Wrote(n) if self.stalled.is_some() => {
                        self.taken += n;
                        if self.taken >= MIN_TAKEN {
                            self.stalled = None;
                        }
                    }
                    Done::Wrote(_) => {}
                }
                Poll::Ready(Ok(value))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => {
                if self.stalled.is_none() {
                    self.stalled = Some(Box::pin(tokio::time::sleep(self.timeout)));
                    self.taken = 0;
                }
                let stalled = self.stalled.as_mut().expect("armed above");
                match stalled.as_mut().poll(cx) {
                    Poll::Ready(()) => {
                        let reset = libc::linger {
                            l_onoff: 1,
                            l_linger: 0,
                        };
                        let _ = nix::sys::socket::setsockopt(
                            &self.stream,
                            nix::sys::socket::sockopt::Linger,
                            &reset,
                        );
                        Poll::Ready(Err(std::io::Error::new(
                            std::io::ErrorKind::TimedOut,
                            "the client stopped taking the answer",
                        )))
                    }
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }
}

impl tokio::io::AsyncRead for Stalling {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for Stalling {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        self.timed(
            cx,
            |stream, cx| stream.poll_write(cx, buf),
            |n| Done::Wrote(*n),
        )
    }

    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        self.timed(
            cx,
            |stream, cx| stream.poll_write_vectored(cx, bufs),
            |n| Done::Wrote(*n),
        )
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        self.timed(cx, |stream, cx| stream.poll_flush(cx), |()| Done::Flushed)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        self.timed(
            cx,
            |stream, cx| stream.poll_shutdown(cx),
            |()| Done::Flushed,
        )
    }
}
