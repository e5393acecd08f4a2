//! A WebSocket as the byte stream a protocol reads and writes, so STOMP runs over it
//! through the same connection driver as over TCP.
//!
//! STOMP over WebSocket does not tie frames to messages: a frame may span messages and
//! a message may hold several frames, and text and binary messages carry the same
//! bytes. So reading concatenates the payloads of data messages; writing gathers what
//! the protocol writes between flushes and sends it as one message at the flush, which
//! the driver does once per wake-up, after whole frames. That message is text when its
//! bytes are UTF-8 (what older browser clients expect) and binary otherwise.

use crate::protocol::too_large::MessageTooLarge;
use axum::extract::ws::{Message, Utf8Bytes, WebSocket};
use bytes::{Bytes, BytesMut};
use futures_util::{SinkExt, StreamExt};
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

pub struct WsStream {
    socket: WebSocket,
    /// What the last data message holds that was not read yet.
    unread: Bytes,
    /// A close message came (or the socket ended): reads see the end of the stream.
    read_closed: bool,
    /// Written since the last flush; sent as one message by the next flush.
    pending: BytesMut,
    /// The protocol's frame limit, named to a client whose message was too large.
    frame_limit: usize,
}

impl WsStream {
    pub fn new(socket: WebSocket, frame_limit: usize) -> Self {
        WsStream {
            socket,
            unread: Bytes::new(),
            read_closed: false,
            pending: BytesMut::new(),
            frame_limit,
        }
    }
}

fn io_error(e: axum::Error) -> io::Error {
    io::Error::other(e)
}

/// A message over the WebSocket layer's size limit becomes [`MessageTooLarge`], which
/// the protocol answers in its own terms; other errors end the stream.
fn read_error(e: axum::Error, frame_limit: usize) -> io::Error {
    let inner = e.into_inner();
    match inner.downcast_ref::<tungstenite::Error>() {
        Some(tungstenite::Error::Capacity(tungstenite::error::CapacityError::MessageTooLong {
            ..
        })) => MessageTooLarge { limit: frame_limit }.into_io(),
        _ => io::Error::other(inner),
    }
}

impl AsyncRead for WsStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if !this.unread.is_empty() {
                let n = this.unread.len().min(buf.remaining());
                buf.put_slice(&this.unread.split_to(n));
                return Poll::Ready(Ok(()));
            }
            if this.read_closed {
                return Poll::Ready(Ok(()));
            }
            match ready!(this.socket.poll_next_unpin(cx)) {
                Some(Ok(Message::Binary(data))) => this.unread = data,
                Some(Ok(Message::Text(text))) => this.unread = Bytes::from(text),
                // Pings are answered by the WebSocket layer itself.
                Some(Ok(Message::Ping(_) | Message::Pong(_))) => {}
                Some(Ok(Message::Close(_))) | None => this.read_closed = true,
                Some(Err(e)) => return Poll::Ready(Err(read_error(e, this.frame_limit))),
            }
        }
    }
}

impl AsyncWrite for WsStream {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().pending.extend_from_slice(data);
        Poll::Ready(Ok(data.len()))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        slices: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let mut written = 0;
        for slice in slices {
            this.pending.extend_from_slice(slice);
            written += slice.len();
        }
        Poll::Ready(Ok(written))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.pending.is_empty() {
            ready!(this.socket.poll_ready_unpin(cx)).map_err(io_error)?;
            let bytes = this.pending.split().freeze();
            let message = match Utf8Bytes::try_from(bytes.clone()) {
                Ok(text) => Message::Text(text),
                Err(_) => Message::Binary(bytes),
            };
            this.socket.start_send_unpin(message).map_err(io_error)?;
        }
        this.socket.poll_flush_unpin(cx).map_err(io_error)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.as_mut().poll_flush(cx))?;
        self.get_mut().socket.poll_close_unpin(cx).map_err(io_error)
    }
}
