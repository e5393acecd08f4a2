//! The connection as the shared [`driver`] runs it: what each wake-up does with the
//! frames read, the deliveries from the core and the disk writes waited for.

use super::{Connection, Stop, DELIVERY_BATCH};
use crate::core::connections::Traffic;
use crate::core::consumer::Delivery;
use crate::core::deliveries::Deliveries;
use crate::core::message::now_ms;
use crate::core::queue::{producers_may_go, PendingAcks};
use crate::core::CoreError;
use crate::protocol::amqp::endpoint::session::Session;
use crate::protocol::amqp::endpoint::waits::{oldest_written, Settled};
use crate::protocol::amqp::wire::codec::{AmqpFrameCodec, Outbound};
use crate::protocol::driver::{self, Io, ReadItem};
use futures_util::{FutureExt, SinkExt, StreamExt};
use std::ops::ControlFlow;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::time::Instant;

/// What the connection waited for beside the socket.
pub(super) enum Waited {
    /// The oldest waiting disk write is done (or failed).
    Written(Result<(), CoreError>),
    /// A transfer's disk write or transaction is done.
    Settled(Settled),
    /// The queue that withheld credit from this connection's producers lets them go.
    ProducersMayGo,
}

impl<S> driver::Connection<S> for Connection
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    type Codec = AmqpFrameCodec;
    type Stop = Stop;
    type Waited = Waited;

    fn start_reads(&mut self) {
        // Once per wake-up, not per frame: expiry needs no finer clock.
        self.env.read_at_ms = now_ms();
    }

    fn read(
        &mut self,
        deliveries: &mut Deliveries,
        item: ReadItem<AmqpFrameCodec>,
    ) -> ControlFlow<Stop> {
        match self.inbound(deliveries, item) {
            Ok(false) => ControlFlow::Continue(()),
            Ok(true) => ControlFlow::Break(Stop::Closed),
            Err(e) => ControlFlow::Break(Stop::Failed(e)),
        }
    }

    /// Publishes what the batch's transfers brought, so one flush answers them all (a
    /// disposition per transfer would otherwise be a write each).
    fn end_reads(&mut self) {
        self.flush_sends();
    }

    async fn after_reads(&mut self, _io: &mut Io<S, AmqpFrameCodec>) -> Result<(), Stop> {
        Ok(())
    }

    async fn deliver(
        &mut self,
        io: &mut Io<S, AmqpFrameCodec>,
        first: Delivery,
    ) -> Result<(), Stop> {
        self.deliver(first);
        // Take what else is ready so one flush carries a batch.
        for _ in 0..DELIVERY_BATCH {
            match io.deliveries.try_recv() {
                Ok(d) => self.deliver(d),
                Err(_) => break,
            }
        }
        self.complete_drains(&mut io.deliveries);
        Ok(())
    }

    fn pending_acks(&mut self) -> &mut PendingAcks {
        &mut self.pending_acks
    }

    fn waiting(&self) -> bool {
        !self.waits.written.is_empty()
            || !self.waits.waiting.is_empty()
            || self.withheld_by.is_some()
    }

    async fn wait(&mut self) -> Waited {
        let waits = &mut self.waits;
        tokio::select! {
            result = oldest_written(&mut waits.written), if !waits.written.is_empty() => {
                Waited::Written(result)
            }
            Some(settled) = waits.waiting.next(), if !waits.waiting.is_empty() => {
                Waited::Settled(settled)
            }
            () = producers_may_go(&self.withheld_by), if self.withheld_by.is_some() => {
                Waited::ProducersMayGo
            }
            // Not polled while there is nothing to wait for (see `waiting`).
            else => std::future::pending().await,
        }
    }

    async fn waited(
        &mut self,
        _io: &mut Io<S, AmqpFrameCodec>,
        waited: Waited,
    ) -> Result<(), Stop> {
        match waited {
            Waited::Written(result) => {
                self.written(result);
                // The rest of a group commit is answered already: one flush for all.
                for _ in 0..1024 {
                    match self.waits.answered() {
                        Some(result) => self.written(result),
                        None => break,
                    }
                }
            }
            Waited::Settled(settled) => {
                self.settled(settled);
                // One disk write completes a whole window of transfers at once: answer
                // them all with one flush (ranged dispositions), not a write each.
                for _ in 0..1024 {
                    match self.waits.waiting.next().now_or_never() {
                        Some(Some(settled)) => self.settled(settled),
                        _ => break,
                    }
                }
            }
            Waited::ProducersMayGo => {
                self.withheld_by = None;
                for session in self.sessions.values_mut() {
                    session.regrant(&self.env.broker, &mut self.out, self.env.link_credit);
                }
            }
        }
        Ok(())
    }

    async fn heartbeat(&mut self, io: &mut Io<S, AmqpFrameCodec>) -> Result<(), Stop> {
        // Frames about to go out do as well.
        if self.out.is_empty() {
            io.framed.send(Outbound::Heartbeat).await?;
            io.last_write = Instant::now();
        }
        Ok(())
    }

    async fn flush(&mut self, io: &mut Io<S, AmqpFrameCodec>) -> Result<(), Stop> {
        if !self.out.is_empty() {
            Connection::flush(self, io).await?;
        }
        Ok(())
    }

    /// Pre-settled deliveries count as consumed once written: one ack for the batch.
    /// A link whose credit was withheld in this wake-up makes the connection wait for
    /// its queue to let producers go.
    fn end_wake(&mut self) {
        if !self.pending_acks.is_empty() {
            self.pending_acks.try_apply();
        }
        if self.withheld_by.is_none() {
            self.withheld_by = self.sessions.values().find_map(Session::withheld_queue);
        }
    }

    fn traffic(&self) -> Traffic {
        Traffic {
            received: self.received,
            sent: self.out.deliveries(),
        }
    }
}
