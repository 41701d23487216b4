//! The connection's byte stream under pgwire's framing. Reads hand pgwire
//! only whole messages that `frames::check` passed. Writes are held back
//! until the connection releases them: at the end of a round trip (Sync,
//! a simple Query, Flush, the end of a COPY), where PostgreSQL's backend
//! flushes, and before it waits for the client. The answers to a
//! pipelined Bind, Execute and Sync leave in one send, not one per message.
//! (A NOTICE waits for its statement's round trip: PostgreSQL sends it at
//! once.)

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::frames::{self, Frame, Phase, Violation};

/// Output held back beyond this goes out without waiting (a long result
/// streams as it is made).
const HELD_BACK: usize = 64 * 1024;

/// Bytes one read of the socket asks for.
const READ_CHUNK: usize = 8192;

/// See the module doc. The first message that fails the checks stops the
/// reading with an error (and `violation` says why).
pub(super) struct Guarded<S> {
    inner: S,
    /// Bytes read and not yet handed to pgwire: the first `checked` of
    /// them are whole messages that passed, the rest not yet checked.
    staged: BytesMut,
    /// Where the socket is read into: zeroed once, not at every read (a
    /// fresh buffer per read cost 8 KiB of memset per message, and a read
    /// that finds nothing, one per round trip, paid it too).
    chunk: Box<[u8]>,
    checked: usize,
    phase: Phase,
    /// Whether the client has logged in (longer messages are then accepted).
    pub logged_in: bool,
    pub violation: Option<Violation>,
    /// Written and not yet sent.
    held: BytesMut,
    /// Whether a flush sends `held` (otherwise it waits for `release`).
    released: bool,
    /// Counts the statements and errors written (the server's metrics).
    tap: Option<super::tap::Tap>,
}

impl<S> Guarded<S> {
    /// A stream over `inner`, with `staged` bytes already read from it.
    pub fn new(inner: S, staged: BytesMut, violation: Option<Violation>) -> Self {
        Self {
            inner,
            staged,
            chunk: vec![0; READ_CHUNK].into_boxed_slice(),
            checked: 0,
            phase: Phase::Startup,
            logged_in: false,
            violation,
            held: BytesMut::new(),
            released: true,
            tap: None,
        }
    }

    /// Counting what is written with `tap`.
    pub fn with_tap(mut self, tap: super::tap::Tap) -> Self {
        self.tap = Some(tap);
        self
    }

    /// Whether a whole message is read and not yet handed over.
    pub fn has_message(&self) -> bool {
        self.checked > 0
    }

    /// Whether flushes send what is held (`true`), or keep holding it.
    pub fn release(&mut self, released: bool) {
        self.released = released;
    }

    /// The stream it reads and writes.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// The same stream over `inner` made another thing (a socket taken out
    /// of one runtime's reactor and into another's), with all it holds.
    pub fn try_map<T, E>(self, f: impl FnOnce(S) -> Result<T, E>) -> Result<Guarded<T>, E> {
        Ok(Guarded {
            inner: f(self.inner)?,
            staged: self.staged,
            chunk: self.chunk,
            checked: self.checked,
            phase: self.phase,
            logged_in: self.logged_in,
            violation: self.violation,
            held: self.held,
            released: self.released,
            tap: self.tap,
        })
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Guarded<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if this.checked > 0 {
                let n = out.remaining().min(this.checked);
                out.put_slice(&this.staged[..n]);
                // `advance`, not `split_to`: no second handle to the
                // buffer, so it is reused in place once emptied.
                this.staged.advance(n);
                this.checked -= n;
                return Poll::Ready(Ok(()));
            }
            if let Some(v) = &this.violation {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    v.to_string(),
                )));
            }
            while this.violation.is_none() {
                let unchecked = &this.staged[this.checked..];
                match frames::check(unchecked, &mut this.phase, this.logged_in) {
                    Ok(Frame::Complete(n)) => this.checked += n,
                    Ok(Frame::Incomplete) => break,
                    Err(v) => this.violation = Some(v),
                }
            }
            if this.checked > 0 || this.violation.is_some() {
                continue;
            }
            let mut read = ReadBuf::new(&mut this.chunk);
            futures::ready!(Pin::new(&mut this.inner).poll_read(cx, &mut read))?;
            if read.filled().is_empty() {
                // The client closed; a message cut short goes with it.
                return Poll::Ready(Ok(()));
            }
            this.staged.extend_from_slice(read.filled());
        }
    }
}

/// How long a closing connection waits for its client to go quiet.
const QUIET: std::time::Duration = std::time::Duration::from_millis(250);

/// How long a closing connection reads what its client still sends: a
/// client that goes on sending (psql copying rows in reads the server's
/// answers only when a send fails) is cut off, with a reset, after it.
const LINGER: std::time::Duration = std::time::Duration::from_secs(1);

impl<S: AsyncRead + AsyncWrite + Unpin> Guarded<S> {
    /// Ends the connection so that its last words reach the client.
    ///
    /// A socket closed with bytes of the client's still unread makes the
    /// kernel reset the connection, and a reset can throw away what the
    /// client had received and not yet read: the FATAL error that says why
    /// it ends (57P01 at shutdown, 53300 when full), lost under COPY data
    /// or pipelined messages still arriving. So this sends what is held,
    /// ends the sending side (the client reads the error, then the end),
    /// and reads and drops what the client still sends until it closes,
    /// has been quiet for [`QUIET`], or [`LINGER`] has passed. The caller
    /// bounds the sending.
    pub async fn finish(&mut self) -> io::Result<()> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        self.released = true;
        self.shutdown().await?;
        let until = tokio::time::Instant::now() + LINGER;
        loop {
            let quiet = until.min(tokio::time::Instant::now() + QUIET);
            match tokio::time::timeout_at(quiet, self.inner.read(&mut self.chunk)).await {
                // The client closed, or went quiet: nothing is left unread.
                Ok(Ok(0)) | Err(_) => return Ok(()),
                Ok(Ok(_)) => {}
                Ok(Err(e)) => return Err(e),
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> Guarded<S> {
    /// Sends everything held.
    fn poll_send_held(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while !self.held.is_empty() {
            let n = futures::ready!(Pin::new(&mut self.inner).poll_write(cx, &self.held))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.held.advance(n);
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Guarded<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.held.len() >= HELD_BACK {
            futures::ready!(this.poll_send_held(cx))?;
        }
        if let Some(tap) = &mut this.tap {
            tap.written(buf);
        }
        this.held.extend_from_slice(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.released && this.held.len() < HELD_BACK {
            return Poll::Ready(Ok(()));
        }
        futures::ready!(this.poll_send_held(cx))?;
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        futures::ready!(this.poll_send_held(cx))?;
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    /// A sink that counts the writes that reach it.
    #[derive(Default)]
    struct Counting {
        writes: usize,
        bytes: Vec<u8>,
    }

    impl AsyncWrite for Counting {
        fn poll_write(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            let this = self.get_mut();
            this.writes += 1;
            this.bytes.extend_from_slice(buf);
            Poll::Ready(Ok(buf.len()))
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn answers_leave_together_when_released() {
        let mut s = Guarded::new(Counting::default(), BytesMut::new(), None);
        s.release(false);
        for m in [&b"BindComplete"[..], b"DataRow", b"CommandComplete"] {
            s.write_all(m).await.expect("write");
            s.flush().await.expect("flush");
        }
        assert_eq!(s.inner.writes, 0, "held back until released");
        s.release(true);
        s.flush().await.expect("flush");
        assert_eq!(s.inner.writes, 1);
        assert_eq!(s.inner.bytes, b"BindCompleteDataRowCommandComplete");
    }

    /// The server's last words reach a client that is still sending (a
    /// COPY's rows): it reads them, then the end, never a reset.
    #[tokio::test]
    async fn last_words_reach_a_client_that_is_still_sending() -> io::Result<()> {
        use tokio::io::AsyncReadExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let client = tokio::spawn(async move {
            let (mut from, mut to) = tokio::net::TcpStream::connect(addr).await?.into_split();
            let sending = tokio::spawn(async move {
                let rows = vec![b'r'; 64 * 1024];
                // 4 MiB: most still unread when the server ends, and few
                // enough that it reads them well within LINGER on a busy
                // machine (past it, the end is the reset ruled out here).
                for _ in 0..64 {
                    if to.write_all(&rows).await.is_err() {
                        break;
                    }
                }
            });
            let mut heard = Vec::new();
            let read = from.read_to_end(&mut heard).await;
            sending.abort();
            read.map(|_| heard)
        });
        let (server, _) = listener.accept().await?;
        let mut s = Guarded::new(server, BytesMut::new(), None);
        // Some of the client's bytes arrive unread, as under COPY.
        let mut first = [0u8; 1];
        s.inner.read_exact(&mut first).await?;
        s.write_all(b"FATAL 57P01").await?;
        s.finish().await?;
        drop(s);
        let heard = client.await.map_err(io::Error::other)??;
        assert_eq!(heard, b"FATAL 57P01");
        Ok(())
    }

    #[tokio::test]
    async fn a_long_answer_goes_out_without_release() {
        let mut s = Guarded::new(Counting::default(), BytesMut::new(), None);
        s.release(false);
        let row = vec![7u8; 1000];
        for _ in 0..(HELD_BACK / row.len() + 2) {
            s.write_all(&row).await.expect("write");
            s.flush().await.expect("flush");
        }
        assert!(s.inner.writes >= 1, "sent once past {HELD_BACK} bytes");
        assert!(s.held.len() < HELD_BACK + row.len());
        s.shutdown().await.expect("shutdown");
        assert_eq!(s.inner.bytes.len(), (HELD_BACK / row.len() + 2) * row.len());
    }
}
