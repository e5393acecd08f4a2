//! The producing side: transfers in a window of unsettled ones, settled by the broker.

use super::*;

/// Transfers sent and not yet settled by the broker, by delivery id.
#[derive(Debug, Default)]
pub(super) struct InFlight {
    /// Delivery id of the front of `settled`.
    oldest: u32,
    pub(super) settled: VecDeque<bool>,
    pub(super) count: u64,
}

impl InFlight {
    pub(super) fn sent(&mut self, id: u32) {
        if self.settled.is_empty() {
            self.oldest = id;
        }
        self.settled.push_back(false);
        self.count += 1;
    }

    /// Settles `first..=last` (serial numbers), ignoring ids not in flight.
    pub(super) fn settle(&mut self, first: u32, last: u32) {
        let len = self.settled.len() as u32;
        let from = first.wrapping_sub(self.oldest);
        let to = last.wrapping_sub(self.oldest);
        if from >= len && to >= len {
            return;
        }
        let (from, to) = if from >= len {
            (0, to)
        } else {
            (from, to.min(len - 1))
        };
        for at in from..=to {
            if let Some(s) = self.settled.get_mut(at as usize) {
                if !*s {
                    *s = true;
                    self.count -= 1;
                }
            }
        }
        while self.settled.front() == Some(&true) {
            self.settled.pop_front();
            self.oldest = self.oldest.wrapping_add(1);
        }
    }
}

pub struct AmqpPublisher {
    conn: Connection,
    settled: bool,
    window: u64,
    credit: u32,
    delivery_count: u32,
    next_delivery_id: u32,
    in_flight: InFlight,
    /// Header and message annotations: the same for every message.
    prefix: Bytes,
    run_id: u64,
    /// One message's encoding, reused.
    scratch: BytesMut,
    /// A push that could not be encoded, reported by the next flush.
    failed: Option<PerfError>,
}

impl AmqpPublisher {
    pub async fn connect(
        peer: &Peer,
        login: &Login,
        settings: &SendSettings,
        amqp: AmqpSettings,
    ) -> Result<AmqpPublisher, PerfError> {
        let mut conn = Connection::open(peer, login).await?;
        let (address, capabilities) = terminus(&settings.destination);
        let mut attach = Attach::new("weir-perf-sender", HANDLE, Role::Sender);
        attach.snd_settle_mode = if amqp.settled {
            SenderSettleMode::Settled
        } else {
            SenderSettleMode::Unsettled
        };
        attach.source = Some(Source::default());
        attach.target = Some(TargetKind::Target(Target {
            address: Some(address),
            capabilities,
            ..Target::default()
        }));
        attach.initial_delivery_count = Some(0);
        let flows = conn.attach(attach).await?;
        let prefix = Message {
            header: settings.persistent.then(|| Header {
                durable: true,
                ..Header::default()
            }),
            message_annotations: settings.delay_ms.map(|ms| {
                vec![(
                    Value::symbol(DELIVERY_DELAY),
                    Value::Long(i64::try_from(ms).unwrap_or(i64::MAX)),
                )]
            }),
            ..Message::default()
        }
        .to_bytes();
        let mut publisher = AmqpPublisher {
            conn,
            settled: amqp.settled,
            window: amqp.window.max(1),
            credit: 0,
            delivery_count: 0,
            next_delivery_id: 0,
            in_flight: InFlight::default(),
            prefix,
            run_id: settings.run_id,
            scratch: BytesMut::with_capacity(1024),
            failed: None,
        };
        for flow in flows {
            publisher.absorb(Performative::Flow(flow))?;
        }
        Ok(publisher)
    }

    /// Takes in what the broker said: credit and window, or settlements.
    fn absorb(&mut self, p: Performative) -> Result<(), PerfError> {
        match p {
            Performative::Flow(flow) => {
                self.conn.remote_incoming_window = flow
                    .next_incoming_id
                    .unwrap_or(0)
                    .wrapping_add(flow.incoming_window)
                    .wrapping_sub(self.conn.next_outgoing_id);
                if flow.handle == Some(HANDLE) {
                    let theirs = flow.delivery_count.unwrap_or(self.delivery_count);
                    let credit = flow.link_credit.unwrap_or(0);
                    self.credit = sender_credit(theirs, credit, self.delivery_count);
                }
                Ok(())
            }
            Performative::Disposition(d) if d.role == Role::Receiver => {
                if let Some(DeliveryState::Rejected { error }) = &d.state {
                    return Err(broker_error("rejected", error.as_ref()));
                }
                if d.settled || is_outcome(d.state.as_ref()) {
                    self.in_flight.settle(d.first, d.last.unwrap_or(d.first));
                }
                Ok(())
            }
            // Our own link's attach echo and the like.
            _ => Ok(()),
        }
    }

    /// Takes in every frame already read.
    fn absorb_ready(&mut self) -> Result<(), PerfError> {
        while let Some((p, _)) = self.conn.ready()? {
            self.absorb(p)?;
        }
        Ok(())
    }

    fn encode(&mut self, stamp: &Stamp, body: &Bytes) -> Result<(), PerfError> {
        let id = self.next_delivery_id;
        self.scratch.clear();
        self.scratch.put_slice(&self.prefix);
        if let Some(g) = stamp.group {
            weir_wire::amqp::Properties {
                group_id: Some(Str::from(format!("{}{g}", headers::GROUP_PREFIX))),
                ..Default::default()
            }
            .encode(&mut self.scratch);
        }
        encode_stamp(self.run_id, stamp, &mut self.scratch);
        // The data section by hand: a `Body::Data` would need the body copied
        // into a `Bytes` first.
        encode::descriptor(&Descriptor::Code(messaging::DATA), &mut self.scratch);

        // Split what does not fit the broker's frame size (header + performative
        // + payload) into continuation transfers.
        let room = (self.conn.remote_max_frame as usize).saturating_sub(8 + 64);
        if room == 0 {
            return Err(PerfError::BadArg {
                flag: "--size",
                why: "the broker's max-frame-size is too small",
            });
        }
        if self.scratch.len() + 5 + body.len() <= room {
            // One frame, written straight into the write buffer; a large body
            // follows it uncopied.
            let buf = self.conn.framed.write_buffer_mut();
            let at = begin_frame(buf, FRAME_TYPE_AMQP, 0);
            encode_delivery_start(buf, HANDLE, id, self.settled);
            buf.put_slice(&self.scratch);
            let shared = body.len() >= SHARE_FROM;
            if shared {
                buf.put_u8(code::VBIN32);
                buf.put_u32(body.len() as u32);
            } else {
                encode::variable(code::VBIN8, code::VBIN32, body, buf);
            }
            finish_frame(buf, at, if shared { body.len() } else { 0 });
            if shared {
                self.conn.parts.share(buf, body.clone());
            }
            self.conn.next_outgoing_id = self.conn.next_outgoing_id.wrapping_add(1);
            self.conn.remote_incoming_window = self.conn.remote_incoming_window.saturating_sub(1);
            self.sent(id);
            return Ok(());
        }
        let mut transfer = Transfer {
            handle: HANDLE,
            delivery_id: Some(id),
            delivery_tag: Some(Bytes::copy_from_slice(&id.to_be_bytes())),
            message_format: Some(0),
            settled: Some(self.settled),
            ..Transfer::default()
        };
        encode::variable(code::VBIN8, code::VBIN32, body, &mut self.scratch);
        let payload = self.scratch.split().freeze();
        let mut rest = payload.clone();
        loop {
            let chunk = rest.split_to(rest.len().min(room));
            transfer.more = !rest.is_empty();
            let frame = Frame::Amqp(AmqpFrame {
                channel: 0,
                performative: Performative::Transfer(transfer.clone()),
                payload: chunk,
                payload_tail: Bytes::new(),
            });
            encode_frame(&frame, self.conn.framed.write_buffer_mut());
            self.conn.next_outgoing_id = self.conn.next_outgoing_id.wrapping_add(1);
            self.conn.remote_incoming_window = self.conn.remote_incoming_window.saturating_sub(1);
            if rest.is_empty() {
                break;
            }
            transfer = Transfer {
                handle: HANDLE,
                ..Transfer::default()
            };
        }
        drop(payload);
        self.sent(id);
        Ok(())
    }

    /// Counts delivery `id` as sent.
    fn sent(&mut self, id: u32) {
        self.next_delivery_id = id.wrapping_add(1);
        self.delivery_count = self.delivery_count.wrapping_add(1);
        self.credit = self.credit.saturating_sub(1);
        if !self.settled {
            self.in_flight.sent(id);
        }
    }
}

/// Appends the application-properties section that stamps a message: what
/// encoding the map `{perf-run: ulong, perf-p: uint, perf-seq: ulong, perf-ts:
/// ulong}` as values gives, without building one per message.
pub(super) fn encode_stamp(run_id: u64, stamp: &Stamp, buf: &mut BytesMut) {
    encode::descriptor(&Descriptor::Code(messaging::APPLICATION_PROPERTIES), buf);
    encode::compound(buf, code::MAP8, code::MAP32, 8, |buf| {
        let key = |k: &str, buf: &mut BytesMut| {
            encode::variable(code::STR8, code::STR32, k.as_bytes(), buf)
        };
        key(headers::RUN, buf);
        encode::ulong(run_id, buf);
        key(headers::PRODUCER, buf);
        encode::uint(stamp.producer, buf);
        key(headers::SEQ, buf);
        encode::ulong(stamp.seq, buf);
        key(headers::SENT, buf);
        encode::ulong(stamp.sent_us, buf);
    });
}

fn is_outcome(state: Option<&DeliveryState>) -> bool {
    matches!(
        state,
        Some(
            DeliveryState::Accepted
                | DeliveryState::Released
                | DeliveryState::Modified { .. }
                | DeliveryState::Rejected { .. }
        )
    )
}

impl Publisher for AmqpPublisher {
    fn push(&mut self, stamp: &Stamp, body: &Bytes, _confirm: bool) {
        if self.failed.is_none() {
            if let Err(e) = self.encode(stamp, body) {
                self.failed = Some(e);
            }
        }
    }

    fn buffered(&self) -> usize {
        self.conn.buffered()
    }

    fn room(&self) -> u64 {
        let window = if self.settled {
            u64::MAX
        } else {
            self.window.saturating_sub(self.in_flight.count)
        };
        window
            .min(u64::from(self.credit))
            .min(u64::from(self.conn.remote_incoming_window))
    }

    async fn flush(&mut self) -> Result<(), PerfError> {
        if let Some(e) = self.failed.take() {
            return Err(e);
        }
        self.conn.flush().await?;
        self.absorb_ready()
    }

    async fn wait_room(&mut self) -> Result<(), PerfError> {
        self.conn.flush().await?;
        while self.room() == 0 {
            let (p, _) = self.conn.next().await?;
            self.absorb(p)?;
        }
        self.absorb_ready()
    }

    /// Waits for every send to be settled, then closes the connection (so it
    /// is called for the last message only): pre-settled sends have no other
    /// proof of arrival, and a dropped socket may lose what it carried.
    async fn wait_confirmed(&mut self) -> Result<(), PerfError> {
        self.conn.flush().await?;
        while self.in_flight.count > 0 {
            let (p, _) = self.conn.next().await?;
            self.absorb(p)?;
        }
        tokio::time::timeout(ANSWER_TIMEOUT, self.conn.close())
            .await
            .map_err(|_| PerfError::Timeout(ANSWER_TIMEOUT.as_secs()))?
    }
}
