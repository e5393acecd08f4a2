//! The consuming side: credit granted ahead, settlements in ranges.

use super::*;

pub struct AmqpSubscriber {
    conn: Connection,
    /// Settle each delivery (deliveries arrive unsettled).
    settle: bool,
    run_id: u64,
    prefetch: u32,
    /// Credit the broker still has from us.
    credit: u32,
    delivery_count: u32,
    /// Deliveries received and not yet processed (`settle_last` not called).
    unprocessed: u32,
    /// The delivery id of the last message returned by `next`.
    last_id: Option<u32>,
    /// Processed deliveries not yet settled: one contiguous range.
    range: Option<(u32, u32)>,
    unflushed: u32,
    ack_batch: u32,
    /// Frames of a delivery split over several transfers.
    partial: BytesMut,
    partial_id: Option<u32>,
}

impl AmqpSubscriber {
    pub async fn connect(
        peer: &Peer,
        login: &Login,
        settings: &SubscribeSettings,
    ) -> Result<AmqpSubscriber, PerfError> {
        let mut conn = Connection::open(peer, login).await?;
        let (address, capabilities) = terminus(&settings.destination);
        let mut attach = Attach::new("weir-perf-receiver", HANDLE, Role::Receiver);
        attach.snd_settle_mode = match settings.ack {
            AckMode::Auto => SenderSettleMode::Settled,
            _ => SenderSettleMode::Unsettled,
        };
        attach.rcv_settle_mode = ReceiverSettleMode::First;
        attach.source = Some(Source {
            address: Some(address),
            capabilities,
            ..Source::default()
        });
        attach.target = Some(TargetKind::Target(Target::default()));
        conn.attach(attach).await?;
        let prefetch = settings.prefetch.max(1);
        conn.queue(conn.flow(Some((0, prefetch))).into());
        conn.flush().await?;
        Ok(AmqpSubscriber {
            conn,
            settle: settings.ack != AckMode::Auto,
            run_id: settings.run_id,
            prefetch,
            credit: prefetch,
            delivery_count: 0,
            unprocessed: 0,
            last_id: None,
            range: None,
            unflushed: 0,
            ack_batch: (prefetch / 2).max(1),
            partial: BytesMut::new(),
            partial_id: None,
        })
    }

    fn write_disposition(&mut self) {
        if let Some((first, last)) = self.range.take() {
            self.conn.queue(Disposition::accepted(first, last).into());
        }
    }

    /// Tops the credit up to --prefetch once half is used, and renews the
    /// session window; both go out with the next write.
    fn write_credit(&mut self) {
        let low_credit = self.credit <= self.prefetch / 2;
        let low_window = self.conn.incoming_window < SESSION_WINDOW / 2;
        if !low_credit && !low_window {
            return;
        }
        self.conn.incoming_window = SESSION_WINDOW;
        self.credit = self.prefetch.saturating_sub(self.unprocessed);
        let flow = self.conn.flow(Some((self.delivery_count, self.credit)));
        self.conn.queue(flow.into());
    }

    async fn flush_owed(&mut self) -> Result<(), PerfError> {
        self.write_disposition();
        self.unflushed = 0;
        self.conn.flush().await
    }

    /// A complete delivery from a transfer frame, or `None` while its frames
    /// are still coming (or when it was aborted).
    fn delivery(&mut self, transfer: &Transfer, payload: Bytes) -> Option<(Option<u32>, Bytes)> {
        if transfer.aborted {
            self.partial.clear();
            self.partial_id = None;
            return None;
        }
        if transfer.delivery_id.is_some() && self.partial.is_empty() {
            self.partial_id = transfer.delivery_id;
        }
        if transfer.more {
            self.partial.extend_from_slice(&payload);
            return None;
        }
        let id = self.partial_id.take().or(transfer.delivery_id);
        if self.partial.is_empty() {
            return Some((id, payload));
        }
        self.partial.extend_from_slice(&payload);
        Some((id, self.partial.split().freeze()))
    }
}

/// Any integer (or decimal text) as u64.
fn number(v: &Value) -> Option<u64> {
    match v {
        Value::Ulong(n) => Some(*n),
        Value::String(s) => s.as_str().parse().ok(),
        other => other.as_i64().and_then(|n| u64::try_from(n).ok()),
    }
}

/// The perf stamp of a message payload, if it belongs to run `run_id`.
pub(super) fn parse_stamp(payload: Bytes, run_id: u64) -> Option<Stamp> {
    if let Some(stamp) = crate::client::amqp_stamp::scan(&payload, run_id) {
        return Some(stamp);
    }
    let view = MessageView::parse(payload).ok()?;
    let props = view.application_properties().ok()??;
    let get = |name: &str| map_get(&props, name).and_then(number);
    if get(headers::RUN)? != run_id {
        return None;
    }
    Some(Stamp {
        producer: u32::try_from(get(headers::PRODUCER)?).ok()?,
        seq: get(headers::SEQ)?,
        sent_us: get(headers::SENT)?,
        // Follows from the sequence number (see `ConsumerStats`).
        group: None,
    })
}

impl Subscriber for AmqpSubscriber {
    async fn next(&mut self) -> Result<Delivery, PerfError> {
        loop {
            if self.unflushed >= self.ack_batch {
                self.flush_owed().await?;
            }
            // A frame already read costs no wait; only before blocking on the
            // socket do we write what we owe, so it coalesces.
            let (p, payload) = match self.conn.ready()? {
                Some(frame) => frame,
                None => {
                    self.flush_owed().await?;
                    self.conn.next().await?
                }
            };
            let Performative::Transfer(transfer) = p else {
                continue;
            };
            let Some((id, payload)) = self.delivery(&transfer, payload) else {
                continue;
            };
            self.delivery_count = self.delivery_count.wrapping_add(1);
            self.credit = self.credit.saturating_sub(1);
            self.unprocessed += 1;
            let presettled = transfer.settled == Some(true);
            self.last_id = if self.settle && !presettled { id } else { None };
            return Ok(Delivery {
                stamp: parse_stamp(payload, self.run_id),
            });
        }
    }

    fn settle_last(&mut self) -> Result<(), PerfError> {
        self.unprocessed = self.unprocessed.saturating_sub(1);
        if let Some(id) = self.last_id.take() {
            self.range = match self.range {
                Some((first, last)) if last.wrapping_add(1) == id => Some((first, id)),
                Some(_) => {
                    self.write_disposition();
                    Some((id, id))
                }
                None => Some((id, id)),
            };
        }
        self.write_credit();
        self.unflushed += 1;
        Ok(())
    }
}
