//! A connection that completes the TLS handshake and then sends nothing is
//! closed after the idle timeout.
//!
//! hyper's header-read timeout covers a request head that starts and stalls
//! and a keep-alive connection left idle, but before the first request
//! hyper-util reads the first bytes to choose HTTP/1 or HTTP/2, and that read
//! has no timeout: a client that handshakes and goes quiet held its
//! connection (and a file descriptor) until it closed. [`FirstByteTimeout`]
//! wraps the TLS acceptor: the stream it hands on fails its read with
//! `TimedOut` when no byte arrived within the timeout, which closes the
//! connection; after the first byte it is the plain stream.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum_server::accept::Accept;
use futures::FutureExt;
use futures::future::BoxFuture;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

/// An acceptor around `inner` whose streams must send a byte within `timeout`.
#[derive(Clone, Debug)]
pub struct FirstByteTimeout<A> {
    inner: A,
    timeout: Duration,
}

impl<A> FirstByteTimeout<A> {
    pub fn new(inner: A, timeout: Duration) -> Self {
        FirstByteTimeout { inner, timeout }
    }
}

impl<A, I, S> Accept<I, S> for FirstByteTimeout<A>
where
    A: Accept<I, S>,
    A::Future: Send + 'static,
    A::Stream: Send + 'static,
    A::Service: Send + 'static,
{
    type Stream = FirstByte<A::Stream>;
    type Service = A::Service;
    type Future = BoxFuture<'static, io::Result<(Self::Stream, Self::Service)>>;

    fn accept(&self, stream: I, service: S) -> Self::Future {
        let timeout = self.timeout;
        let accepted = self.inner.accept(stream, service);
        async move {
            let (stream, service) = accepted.await?;
            Ok((FirstByte::new(stream, timeout), service))
        }
        .boxed()
    }
}

/// A stream whose reads fail with `TimedOut` until a first byte arrives, if
/// it does not arrive in time.
pub struct FirstByte<S> {
    inner: S,
    /// Until the first byte: when the wait ends.
    deadline: Option<Pin<Box<Sleep>>>,
    timeout: Duration,
}

impl<S> FirstByte<S> {
    fn new(inner: S, timeout: Duration) -> Self {
        FirstByte {
            inner,
            deadline: Some(Box::pin(tokio::time::sleep(timeout))),
            timeout,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for FirstByte<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let read = Pin::new(&mut this.inner).poll_read(cx, buf);
        let Some(deadline) = this.deadline.as_mut() else {
            return read;
        };
        match read {
            Poll::Ready(Ok(())) if buf.filled().len() > before => {
                this.deadline = None;
                Poll::Ready(Ok(()))
            }
            Poll::Ready(result) => Poll::Ready(result),
            Poll::Pending => match deadline.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("no byte within {:?} of the TLS handshake", this.timeout),
                ))),
                Poll::Pending => Poll::Pending,
            },
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for FirstByte<S> {
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
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn a_silent_stream_times_out_and_a_talking_one_never_does() {
        let (client, server) = tokio::io::duplex(64);
        let mut silent = FirstByte::new(server, Duration::from_millis(50));
        let mut buf = [0u8; 8];
        let error = silent.read(&mut buf).await.unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
        drop(client);

        let (mut client, server) = tokio::io::duplex(64);
        let mut talking = FirstByte::new(server, Duration::from_millis(50));
        client.write_all(b"G").await.unwrap();
        assert_eq!(talking.read(&mut buf).await.unwrap(), 1);
        // Once a byte came, waiting longer than the timeout is fine.
        tokio::time::sleep(Duration::from_millis(100)).await;
        client.write_all(b"ET").await.unwrap();
        assert_eq!(talking.read(&mut buf).await.unwrap(), 2);
    }
}
