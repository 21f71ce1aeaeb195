//! A TCP stream that bounds what a server can make the daemon hold for an agent's statement.
//!
//! The drivers buffer a protocol message whole before handing it on (tokio-postgres reads a
//! `DataRow` of 250 MB into memory before its first byte can be looked at), so a limit checked
//! on the rows comes too late. This stream sits under the driver and counts what arrives: past
//! a message that announces itself larger than [`ReadCap::message_max`], or past
//! [`ReadCap::total_max`] bytes in all, the read fails and the connection ends before the
//! buffer grows. The caller asks [`ReadCap::tripped`] to tell that apart from a broken
//! connection and answers with the limit, not with an I/O error.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// What one connection may read, shared between the stream and the code that reads answers.
#[derive(Debug)]
pub(crate) struct ReadCap {
    /// The largest framed message (type byte and length included), when the stream knows the
    /// framing; set again by each statement of a held connection (its own limits).
    message_max: AtomicUsize,
    /// The most bytes the connection may read in all (None: no total).
    total_max: Option<usize>,
    read: AtomicUsize,
    /// Set when the cap was met: every read from then on fails. The read that met it still
    /// hands over what came before the message (or byte) that broke the cap, so the rows
    /// before a huge one are answered.
    tripped: AtomicBool,
}

impl ReadCap {
    pub fn new(message_max: usize, total_max: Option<usize>) -> Arc<Self> {
        Arc::new(Self {
            message_max: AtomicUsize::new(message_max),
            total_max,
            read: AtomicUsize::new(0),
            tripped: AtomicBool::new(false),
        })
    }

    /// From now on no message may be larger than `max` (the next statement's limit).
    pub fn limit_messages(&self, max: usize) {
        self.message_max.store(max, Ordering::SeqCst);
    }

    /// True once the connection was cut at a limit.
    pub fn tripped(&self) -> bool {
        self.tripped.load(Ordering::SeqCst)
    }
}

/// How the bytes a server sends are framed.
#[derive(Debug)]
pub(crate) enum Framing {
    /// PostgreSQL backend messages: a type byte, then a 4-byte big-endian length that counts
    /// itself and the body. Needs a connection without TLS negotiation (`sslmode=disable`):
    /// the server's one-byte answer to an SSL request is not framed.
    Postgres(Frames),
    /// Unknown framing: only the total counts.
    Unframed,
}

impl Framing {
    pub fn postgres() -> Self {
        Self::Postgres(Frames::default())
    }
}

/// Where the stream is within PostgreSQL's messages.
#[derive(Debug, Default)]
pub(crate) struct Frames {
    header: [u8; 5],
    /// Header bytes seen of the message that starts next.
    have: usize,
    /// Body bytes of the current message still to come.
    left: usize,
}

/// A message that announced more than the cap allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct TooLarge {
    /// Its size, type byte and length included.
    size: usize,
    /// Where it starts in the bytes scanned (0 when it started in an earlier read).
    starts_at: usize,
}

impl Frames {
    /// Follows `bytes` through the messages, or finds the first that announces more than
    /// `max`.
    fn scan(&mut self, bytes: &[u8], max: usize) -> Result<(), TooLarge> {
        let mut at = 0;
        while at < bytes.len() {
            if self.left > 0 {
                let skip = self.left.min(bytes.len() - at);
                self.left -= skip;
                at += skip;
                continue;
            }
            let starts_at = at.saturating_sub(self.have);
            let take = (self.header.len() - self.have).min(bytes.len() - at);
            self.header[self.have..self.have + take].copy_from_slice(&bytes[at..at + take]);
            self.have += take;
            at += take;
            if self.have == self.header.len() {
                self.have = 0;
                let [_, a, b, c, d] = self.header;
                let length = u32::from_be_bytes([a, b, c, d]) as usize;
                let size = length.saturating_add(1);
                if size > max {
                    return Err(TooLarge { size, starts_at });
                }
                // A length below 4 is the driver's to refuse; the body is then empty.
                self.left = length.saturating_sub(4);
            }
        }
        Ok(())
    }
}

/// `inner` read under `cap`.
#[derive(Debug)]
pub(crate) struct CappedStream<S> {
    inner: S,
    cap: Arc<ReadCap>,
    framing: Framing,
}

impl<S> CappedStream<S> {
    pub fn new(inner: S, cap: Arc<ReadCap>, framing: Framing) -> Self {
        Self {
            inner,
            cap,
            framing,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for CappedStream<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.cap.tripped() {
            return Poll::Ready(Err(io::Error::other("the connection was cut at its limit")));
        }
        let before = buf.filled().len();
        ready!(Pin::new(&mut this.inner).poll_read(cx, buf))?;
        let fresh = &buf.filled()[before..];
        let read_before = this.cap.read.fetch_add(fresh.len(), Ordering::SeqCst);
        // How much of `fresh` the driver may have: everything, or what came before the first
        // byte that breaks a cap.
        let mut keep = fresh.len();
        if let Framing::Postgres(frames) = &mut this.framing
            && let Err(large) = frames.scan(fresh, this.cap.message_max.load(Ordering::SeqCst))
        {
            keep = keep.min(large.starts_at);
        }
        if let Some(max) = this.cap.total_max {
            keep = keep.min(max.saturating_sub(read_before));
        }
        if keep == fresh.len() {
            return Poll::Ready(Ok(()));
        }
        // Nothing of what broke the cap reaches the driver; the next read fails.
        this.cap.tripped.store(true, Ordering::SeqCst);
        if keep == 0 {
            buf.set_filled(before);
            return Poll::Ready(Err(io::Error::other("the answer is over its limit")));
        }
        buf.set_filled(before + keep);
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for CappedStream<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(tag: u8, body: usize) -> Vec<u8> {
        let mut bytes = vec![tag];
        bytes.extend_from_slice(&u32::try_from(body + 4).expect("small").to_be_bytes());
        bytes.extend(std::iter::repeat_n(b'x', body));
        bytes
    }

    #[test]
    fn messages_are_followed_across_any_split() {
        let mut stream = Vec::new();
        for body in [0, 3, 100, 7] {
            stream.extend(message(b'D', body));
        }
        stream.extend(message(b'D', 200));
        // Whatever the reads' sizes, the 205-byte message is the one refused, and only it.
        for chunk in [1, 2, 5, 6, 64, stream.len()] {
            let mut frames = Frames::default();
            let mut refused = None;
            let mut seen = 0;
            for piece in stream.chunks(chunk) {
                if let Err(large) = frames.scan(piece, 150) {
                    refused = Some((large, seen));
                    break;
                }
                seen += piece.len();
            }
            let (large, seen) = refused.unwrap_or_else(|| panic!("chunk {chunk}: not refused"));
            assert_eq!(large.size, 205, "chunk {chunk}");
            // Refused within the read that completed its header (the body never arrived),
            // and it says where the message started: what came before it is whole.
            assert!(seen < stream.len() - 200, "chunk {chunk}: at {seen}");
            let start = stream.len() - 205;
            assert_eq!(seen + large.starts_at, start.max(seen), "chunk {chunk}");
        }
        let mut frames = Frames::default();
        assert_eq!(frames.scan(&stream[..stream.len() - 205], 150), Ok(()));
    }

    #[tokio::test]
    async fn a_stream_fails_past_its_total_and_says_it_was_the_limit() {
        let (mut server, client) = tokio::io::duplex(64);
        let cap = ReadCap::new(usize::MAX, Some(100));
        let mut capped = CappedStream::new(client, cap.clone(), Framing::Unframed);
        let writer = tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            let _ = server.write_all(&[7u8; 1000]).await;
        });
        let mut read = Vec::new();
        let outcome = tokio::io::AsyncReadExt::read_to_end(&mut capped, &mut read).await;
        assert!(outcome.is_err());
        assert!(cap.tripped());
        // Everything up to the cap, and not a byte more.
        assert_eq!(read.len(), 100);
        writer.abort();
    }

    #[tokio::test]
    async fn the_messages_before_a_huge_one_are_handed_over_whole() {
        let (mut server, client) = tokio::io::duplex(1 << 16);
        let cap = ReadCap::new(1000, None);
        let mut capped = CappedStream::new(client, cap.clone(), Framing::postgres());
        let mut sent = Vec::new();
        for _ in 0..3 {
            sent.extend(message(b'D', 10));
        }
        let small = sent.len();
        sent.extend(message(b'D', 5000));
        tokio::io::AsyncWriteExt::write_all(&mut server, &sent)
            .await
            .expect("write");
        drop(server);
        let mut read = Vec::new();
        let outcome = tokio::io::AsyncReadExt::read_to_end(&mut capped, &mut read).await;
        assert!(outcome.is_err());
        assert!(cap.tripped());
        assert_eq!(read, sent[..small]);
    }
}
