//! AMQP at the frame level, for tests that need to stall or break a handshake on
//! purpose: the broker's own codec on a plain TCP stream.

#![allow(dead_code)]

use futures_util::{SinkExt, StreamExt};
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio_util::codec::Framed;
use weir::protocol::amqp::{
    AmqpFrame, AmqpFrameCodec, Close, Frame, Inbound, Open, Outbound, Performative, ProtocolHeader,
};

pub struct RawAmqp {
    pub framed: Framed<TcpStream, AmqpFrameCodec>,
}

impl RawAmqp {
    pub async fn connect(addr: SocketAddr) -> Self {
        let stream = TcpStream::connect(addr).await.expect("connect");
        RawAmqp {
            framed: Framed::new(stream, AmqpFrameCodec::new(1 << 20)),
        }
    }

    pub async fn header(&mut self, header: ProtocolHeader) {
        self.framed
            .send(Outbound::Header(header))
            .await
            .expect("send header");
    }

    pub async fn open(&mut self) {
        let open = Open::new("raw-test");
        self.framed
            .send(Outbound::Frame(Frame::Amqp(AmqpFrame::bare(0, open))))
            .await
            .expect("send open");
    }

    /// Anonymous: the AMQP header, ours back, then `open` both ways.
    pub async fn open_anonymous(&mut self) -> Open {
        self.header(ProtocolHeader::AMQP).await;
        assert_eq!(
            self.next_item(Duration::from_secs(5)).await,
            Some(Inbound::Header(ProtocolHeader::AMQP))
        );
        self.open().await;
        match self.next_item(Duration::from_secs(5)).await {
            Some(Inbound::Frame(Frame::Amqp(AmqpFrame {
                performative: Performative::Open(open),
                ..
            }))) => *open,
            other => panic!("expected open, got {other:?}"),
        }
    }

    /// Raw bytes, for a frame that starts and never finishes.
    pub async fn raw(&mut self, bytes: &[u8]) {
        self.framed.get_mut().write_all(bytes).await.expect("write");
    }

    /// The next item, `None` at the end of the stream or after `within`.
    pub async fn next_item(&mut self, within: Duration) -> Option<Inbound> {
        loop {
            match tokio::time::timeout(within, self.framed.next()).await {
                Ok(Some(Ok(Inbound::Heartbeat))) => continue,
                Ok(Some(Ok(item))) => return Some(item),
                _ => return None,
            }
        }
    }

    /// The next item, described for assertions.
    pub async fn next(&mut self, within: Duration) -> Option<String> {
        self.next_item(within).await.map(describe)
    }

    /// Waits for a `close` and gives its error condition ("" for none).
    pub async fn closed_with(&mut self, within: Duration) -> String {
        match self.next_item(within).await {
            Some(Inbound::Frame(Frame::Amqp(AmqpFrame {
                performative: Performative::Close(Close { error }),
                ..
            }))) => error.map_or_else(String::new, |e| e.condition.as_str().to_owned()),
            other => panic!("expected close, got {other:?}"),
        }
    }

    /// True when the broker closed the socket within `within`.
    pub async fn ends(&mut self, within: Duration) -> bool {
        loop {
            match tokio::time::timeout(within, self.framed.next()).await {
                Ok(None) | Ok(Some(Err(_))) => return true,
                Ok(Some(Ok(_))) => continue,
                Err(_) => return false,
            }
        }
    }
}

pub fn describe(item: Inbound) -> String {
    format!("{item:?}")
}
