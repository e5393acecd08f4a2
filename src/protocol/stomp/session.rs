//! The state of one STOMP connection and what each client frame does to it:
//! sends, subscriptions, acknowledgements, transactions and their receipts.
//! The connection's loop and its writes are in [`super::connection`].

use super::connection::StompOptions;
use super::convert::{self, ConvertError, Destination};
use super::error::StompError;
use super::frame::{Command, Frame, HeaderText, Version};
use crate::core::connections::Traffic;
use crate::core::consumer::{ConsumerId, ConsumerOptions, CreditMode, MessageFilter, Release};
use crate::core::factory::ProducerGroup;
use crate::core::fast_map::FastMap;
use crate::core::queue::PendingAcks;
use crate::core::security::Principal;
use crate::core::selector::Selector;
use crate::core::{
    Broker, CoreError, Receipt, RoutingType, Settlement, Subscription, Target, TransactionError,
    Transactions,
};
use crate::protocol::write_parts::WriteParts;
use futures_util::stream::FuturesOrdered;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

/// Why a connection ends with an ERROR frame.
#[derive(Debug, thiserror::Error)]
pub(super) enum SessionError {
    #[error("{0}")]
    Codec(#[from] StompError),
    #[error("{0}")]
    Convert(#[from] ConvertError),
    #[error("{0}")]
    Core(#[from] CoreError),
    #[error("{0}")]
    Protocol(String),
    #[error("transaction '{0}': {1}")]
    Transaction(String, TransactionError),
    #[error("transaction '{0}' rolled back: {1}")]
    RolledBack(String, TransactionError),
    #[error("authentication failed: {0}")]
    Auth(String),
    #[error("no common version: this server speaks 1.0, 1.1 and 1.2")]
    NoCommonVersion,
    #[error("no CONNECT frame within {0:?}")]
    ConnectTimeout(Duration),
    #[error("a frame was not completed within {0:?}")]
    FrameTimeout(Duration),
    #[error("heart-beat timeout")]
    HeartbeatTimeout,
    #[error("broker shutting down")]
    ShuttingDown,
    #[error("connection closed by the broker's management")]
    ClosedByManagement,
    #[error("{0}")]
    Refused(#[from] crate::protocol::admission::Refusal),
    #[error(
        "more than {0} subscriptions on this connection (limits.max_subscriptions_per_connection)"
    )]
    TooManySubscriptions(usize),
}

impl SessionError {
    /// The client's mistakes (and its going away) as opposed to the broker's own faults.
    pub(super) fn is_clients(&self) -> bool {
        match self {
            SessionError::Core(e) => e.is_access(),
            SessionError::ShuttingDown | SessionError::ClosedByManagement => false,
            _ => true,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum AckMode {
    Auto,
    Client,
    ClientIndividual,
}

pub(super) struct Sub {
    /// The subscription id and destination as they go into every MESSAGE.
    pub(super) id_text: HeaderText,
    pub(super) destination_text: HeaderText,
    pub(super) ack: AckMode,
    subscription: Subscription,
    /// Delivered, not yet acknowledged: delivery order -> queue sequence.
    pub(super) outstanding: BTreeMap<u64, u64>,
    pub(super) order_of: FastMap<u64, u64>,
    pub(super) group_first_key: Option<String>,
}

pub(super) type PendingReceipt = std::pin::Pin<
    Box<dyn std::future::Future<Output = (Option<String>, Result<(), CoreError>)> + Send>,
>;

pub(super) struct Session {
    pub(super) broker: Broker,
    /// Who the client logged in as; set by the handshake.
    pub(super) principal: Principal,
    /// The destination last allowed `send`, so a producer sending to one
    /// destination again and again is checked once.
    send_allowed: Option<(Arc<str>, RoutingType)>,
    pub(super) options: StompOptions,
    pub(super) deliveries_tx: crate::core::deliveries::DeliverySink,
    /// Property names and destinations seen last, shared between messages.
    names: crate::core::names::Names,
    /// The queue this connection last sent to: a producer sends to one queue
    /// again and again, and looking it up by name per message (a shared map,
    /// contended across worker threads) showed in profiles.
    sending_to: Option<Arc<crate::core::queue::Queue>>,
    /// The queues this connection has sent to, each counted as one of its producers.
    producing: crate::core::producers::ConnectionProducers,
    /// Boxed, so growing the map moves a pointer per subscription rather
    /// than the subscription (100,000 of them at once would stall the
    /// worker thread, and every connection on it, while fresh memory is
    /// faulted in).
    pub(super) subs: HashMap<String, Box<Sub>>,
    pub(super) sub_of_consumer: FastMap<ConsumerId, String>,
    pub(super) transactions: Transactions<String>,
    pub(super) receipts: FuturesOrdered<PendingReceipt>,
    /// Receipts that need no wait, written right after the frame that asked,
    /// so e.g. a SUBSCRIBE's receipt precedes the messages it brings.
    pub(super) ready_receipts: Vec<String>,
    /// The newest durable write no receipt asked about (see `receipt_after`).
    pub(super) unconfirmed: Option<Receipt>,
    pub(super) delivery_counter: u64,
    /// The ack id of the MESSAGE frame being written (kept to reuse its allocation).
    pub(super) ack_id: String,
    /// Large bodies of the MESSAGE frames being written, queued uncopied after
    /// what the write buffer held before them.
    pub(super) parts: WriteParts,
    pub(super) version: Version,
    /// Group defaults from the connection factory; a STOMP connection is one producer.
    pub(super) producer: ProducerGroup,
    /// Auto-mode acks waiting for a free queue; applied with the next batch
    /// or when the session is idle.
    pub(super) pending_acks: PendingAcks,
    /// A queue this connection sent to whose producers must wait (BLOCK
    /// policy, memory limit reached): nothing more is read until it lets
    /// them go. Deliveries and receipts still go out.
    pub(super) blocked_by: Option<Arc<crate::core::queue::Queue>>,
    /// SEND frames read and MESSAGE frames written, for management.
    pub(super) traffic: Traffic,
}

impl Session {
    pub(super) fn new(
        broker: Broker,
        options: StompOptions,
        deliveries_tx: crate::core::deliveries::DeliverySink,
    ) -> Self {
        let transactions = Transactions::new(options.transactions);
        Session {
            principal: Principal::unrestricted(),
            send_allowed: None,
            broker,
            options,
            deliveries_tx,
            names: crate::core::names::Names::default(),
            sending_to: None,
            producing: Default::default(),
            subs: HashMap::new(),
            sub_of_consumer: FastMap::default(),
            transactions,
            receipts: FuturesOrdered::new(),
            ready_receipts: Vec::new(),
            unconfirmed: None,
            delivery_counter: 0,
            ack_id: String::new(),
            parts: WriteParts::default(),
            version: Version::V1_0,
            producer: ProducerGroup::default(),
            pending_acks: PendingAcks::default(),
            blocked_by: None,
            traffic: Traffic::default(),
        }
    }

    /// Every client frame but DISCONNECT (taken in `read`, which waits for the disk first).
    pub(super) fn handle(&mut self, frame: Frame) -> Result<(), SessionError> {
        let receipt = frame.header("receipt").map(str::to_owned);
        match frame.command {
            Command::Send => self.on_send(&frame, receipt)?,
            Command::Subscribe => {
                self.on_subscribe(&frame)?;
                self.receipt_now(receipt);
            }
            Command::Unsubscribe => {
                self.on_unsubscribe(&frame)?;
                self.receipt_now(receipt);
            }
            Command::Ack | Command::Nack => self.on_ack(&frame, receipt)?,
            Command::Begin => {
                let tx = required(&frame, "transaction")?;
                self.transactions
                    .begin(tx.to_owned())
                    .map_err(|e| SessionError::Transaction(tx.to_owned(), e))?;
                self.receipt_now(receipt);
            }
            Command::Commit => {
                let tx = required(&frame, "transaction")?;
                match self.transactions.commit(&self.broker, tx, &self.principal) {
                    Ok(done) => self.receipt_after(receipt, done),
                    Err(e @ TransactionError::Unknown) => {
                        return Err(SessionError::Transaction(tx.to_owned(), e))
                    }
                    // Nothing of it took effect; the ERROR carries the COMMIT's receipt-id.
                    Err(e) => return Err(SessionError::RolledBack(tx.to_owned(), e)),
                }
            }
            Command::Abort => {
                let tx = required(&frame, "transaction")?;
                self.transactions
                    .rollback(tx)
                    .map_err(|e| SessionError::Transaction(tx.to_owned(), e))?;
                self.receipt_now(receipt);
            }
            // Taken by `read_batch`, which waits for the disk first.
            Command::Disconnect => {
                return Err(SessionError::Protocol("DISCONNECT out of turn".into()));
            }
            Command::Connect | Command::Stomp => {
                return Err(SessionError::Protocol("already connected".into()));
            }
            other => {
                return Err(SessionError::Protocol(format!("{other} is a server frame")));
            }
        }
        Ok(())
    }

    fn on_send(&mut self, frame: &Frame, receipt: Option<String>) -> Result<(), SessionError> {
        // Received whether or not it is taken: a refusal ends the connection anyway.
        self.traffic.received += 1;
        let dest = convert::parse_destination(required(frame, "destination")?)?;
        let mut message = convert::message_from_send(
            frame,
            &dest,
            convert::now(),
            &mut self.names,
            self.broker.delay_header_names(),
        )?;
        self.producer.apply(&mut message);
        if self.principal.is_restricted()
            && self
                .send_allowed
                .as_ref()
                .is_none_or(|(a, r)| *a != message.address || *r != dest.routing)
        {
            self.broker
                .may_send(&message.address, dest.routing, &self.principal)?;
            self.send_allowed = Some((message.address.clone(), dest.routing));
        }
        if dest.routing == RoutingType::Anycast {
            self.producing
                .note(self.broker.producers(), &message.address);
        }
        if let Some(tx) = frame.header("transaction") {
            // Any other refusal dooms the transaction; its COMMIT reports it.
            let target = Target::Routed(dest.routing);
            if let Err(e @ TransactionError::Unknown) =
                self.transactions.send(&self.broker, tx, message, target)
            {
                return Err(SessionError::Transaction(tx.to_owned(), e));
            }
            self.receipt_now(receipt);
            return Ok(());
        }
        let completion = match dest.routing {
            RoutingType::Anycast => {
                let kept = self
                    .sending_to
                    .as_ref()
                    .is_some_and(|q| *q.name() == message.address && !q.is_deleted());
                if !kept {
                    self.sending_to =
                        Some(self.broker.open_queue(&message.address, &self.principal)?);
                }
                match &self.sending_to {
                    Some(queue) => self.broker.publish_to(queue, message)?,
                    None => self.broker.publish(message, dest.routing)?,
                }
            }
            RoutingType::Multicast => {
                let topic = message.address.clone();
                let receipt = self.broker.publish(message, dest.routing)?;
                if self.broker.may_block_producers() {
                    self.blocked_by = self.broker.blocking_subscriber(&topic);
                }
                receipt
            }
        };
        if let Some(queue) = self.sending_to.as_ref().filter(|q| q.blocks_producers()) {
            if dest.routing == RoutingType::Anycast {
                self.blocked_by = Some(queue.clone());
            }
        }
        self.receipt_after(receipt, completion);
        Ok(())
    }

    fn on_subscribe(&mut self, frame: &Frame) -> Result<(), SessionError> {
        let dest_text = required(frame, "destination")?;
        let dest: Destination = convert::parse_destination(dest_text)?;
        // 1.0 makes `id` optional; then the destination identifies the subscription.
        let id = match frame.header("id") {
            Some(id) => id.to_owned(),
            None if self.version == Version::V1_0 => dest_text.to_owned(),
            None => {
                return Err(SessionError::Protocol(
                    "missing required header 'id'".into(),
                ))
            }
        };
        if self.subs.contains_key(&id) {
            return Err(SessionError::Protocol(format!(
                "subscription '{id}' already exists"
            )));
        }
        if self.subs.len() >= self.options.max_subscriptions {
            return Err(SessionError::TooManySubscriptions(
                self.options.max_subscriptions,
            ));
        }
        let ack = match frame.header("ack").unwrap_or("auto") {
            "auto" => AckMode::Auto,
            "client" => AckMode::Client,
            "client-individual" => AckMode::ClientIndividual,
            other => {
                return Err(SessionError::Protocol(format!(
                    "unknown ack mode '{other}'"
                )))
            }
        };
        let settings = self.broker.settings_for(&dest.name);
        let prefetch = match frame
            .header("prefetch")
            .or_else(|| frame.header("activemq.prefetchSize"))
            .or_else(|| frame.header("prefetch-count"))
        {
            Some(v) => v
                .trim()
                .parse::<u32>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| {
                    SessionError::Protocol(format!(
                        "invalid prefetch '{v}': use a positive integer"
                    ))
                })?,
            None => settings.default_prefetch,
        };
        let priority = match frame
            .header("consumer-priority")
            .or_else(|| frame.header("priority"))
        {
            Some(v) => v
                .trim()
                .parse::<i32>()
                .map_err(|_| SessionError::Protocol(format!("invalid consumer priority '{v}'")))?,
            None => 0,
        };
        let filter = match frame.header("selector") {
            Some(text) => Selector::parse_optional(text)
                .map_err(|e| SessionError::Protocol(e.to_string()))?
                .map(|s| Arc::new(s) as Arc<dyn MessageFilter>),
            None => None,
        };
        let options = ConsumerOptions {
            credit: CreditMode::Window(prefetch),
            priority,
            filter,
            browse: frame.header("browser").is_some_and(|v| v == "true"),
        };
        let subscription = self.broker.subscribe_as(
            &dest.name,
            dest.routing,
            options,
            self.deliveries_tx.clone(),
            &self.principal,
        )?;
        self.sub_of_consumer
            .insert(subscription.consumer(), id.clone());
        self.subs.insert(
            id.clone(),
            Box::new(Sub {
                id_text: HeaderText::copy_from(&id),
                destination_text: HeaderText::from(convert::format_destination(
                    &dest.name,
                    dest.routing,
                )),
                ack,
                subscription,
                outstanding: BTreeMap::new(),
                order_of: FastMap::default(),
                group_first_key: settings.group_first_key.clone(),
            }),
        );
        Ok(())
    }

    fn on_unsubscribe(&mut self, frame: &Frame) -> Result<(), SessionError> {
        let id = match frame.header("id") {
            Some(id) => id.to_owned(),
            None if self.version == Version::V1_0 => required(frame, "destination")?.to_owned(),
            None => {
                return Err(SessionError::Protocol(
                    "missing required header 'id'".into(),
                ))
            }
        };
        self.pending_acks.apply();
        let sub = self
            .subs
            .remove(&id)
            .ok_or_else(|| SessionError::Protocol(format!("no subscription '{id}'")))?;
        self.sub_of_consumer.remove(&sub.subscription.consumer());
        Ok(())
    }

    fn on_ack(&mut self, frame: &Frame, receipt: Option<String>) -> Result<(), SessionError> {
        let nack = frame.command == Command::Nack;
        let tx = frame.header("transaction");
        if let Some(tx) = tx.filter(|tx| !self.transactions.is_open(*tx)) {
            return Err(SessionError::Transaction(
                tx.to_owned(),
                TransactionError::Unknown,
            ));
        }
        let taken = self.take_acknowledged(frame);
        if let Some(tx) = tx {
            // Held until COMMIT. A refusal dooms the transaction (nothing of
            // it will take effect) and its COMMIT reports it.
            match taken {
                Ok((queue, consumer, seqs)) => {
                    let how = match nack {
                        true => Settlement::Release(Release::Failed),
                        false => Settlement::Ack,
                    };
                    for seq in seqs {
                        let _ = self.transactions.settle(tx, &queue, consumer, seq, how);
                    }
                }
                Err(e) => {
                    let _ = self
                        .transactions
                        .refuse(tx, TransactionError::Protocol(Arc::new(e)));
                }
            }
            self.receipt_now(receipt);
            return Ok(());
        }
        let (queue, consumer, seqs) = taken?;
        if nack {
            for seq in seqs {
                queue.release(consumer, seq, Release::Failed)?;
            }
            self.receipt_now(receipt);
        } else {
            let done = queue.ack(consumer, &seqs)?;
            match receipt {
                Some(_) => self.receipt_after(receipt, done),
                None => drop(done),
            }
        }
        Ok(())
    }

    /// The deliveries an ACK or NACK settles, no longer outstanding on their
    /// subscription: its queue, its consumer and their sequences.
    fn take_acknowledged(
        &mut self,
        frame: &Frame,
    ) -> Result<(Arc<crate::core::queue::Queue>, ConsumerId, Vec<u64>), SessionError> {
        let ack_id = match self.version {
            Version::V1_2 => required(frame, "id")?,
            _ => required(frame, "message-id")?,
        };
        let unknown = || SessionError::Protocol(format!("unknown message id '{ack_id}'"));
        let (consumer, seq) = parse_ack_id(ack_id).ok_or_else(unknown)?;
        let sub_id = self
            .sub_of_consumer
            .get(&consumer)
            .cloned()
            .ok_or_else(unknown)?;
        let sub = self.subs.get_mut(&sub_id).ok_or_else(unknown)?;
        let order = sub.order_of.get(&seq).copied().ok_or_else(|| {
            SessionError::Protocol(format!(
                "message '{ack_id}' is not awaiting acknowledgement"
            ))
        })?;
        // Client mode acknowledges everything delivered up to this message.
        let orders: Vec<u64> = match sub.ack {
            AckMode::Client => sub.outstanding.range(..=order).map(|(o, _)| *o).collect(),
            _ => vec![order],
        };
        let seqs: Vec<u64> = orders
            .iter()
            .filter_map(|o| sub.outstanding.remove(o))
            .inspect(|s| {
                sub.order_of.remove(s);
            })
            .collect();
        Ok((sub.subscription.queue().clone(), consumer, seqs))
    }

    pub(super) fn receipt_now(&mut self, receipt: Option<String>) {
        match receipt {
            Some(id) if self.receipts.is_empty() => self.ready_receipts.push(id),
            Some(id) => self.receipt_after(Some(id), Receipt::ready()),
            None => {}
        }
    }

    /// Queues a receipt behind earlier ones, sent once `completion` resolves.
    pub(super) fn receipt_after(&mut self, receipt: Option<String>, completion: Receipt) {
        if receipt.is_none() {
            // Nobody asked: keep only the newest write. The store applies writes
            // in order, so it being on disk means every earlier one is, which is
            // all DISCONNECT needs; tracking each would cost a future per message.
            let completion = completion.durability();
            if !completion.is_ready() {
                self.unconfirmed = Some(completion);
            }
            return;
        }
        self.receipts.push_back(Box::pin(async move {
            let result = completion.wait().await;
            (receipt, result)
        }));
    }
}

pub(super) fn receipt_frame(id: &str) -> Frame {
    Frame::new(Command::Receipt).with_header("receipt-id", HeaderText::copy_from(id))
}

fn required<'f>(frame: &'f Frame, name: &'static str) -> Result<&'f str, SessionError> {
    frame
        .header(name)
        .ok_or(SessionError::Convert(ConvertError::MissingHeader(name)))
}

pub(super) fn one_line(text: &str) -> String {
    text.replace(['\r', '\n'], " ")
}

fn parse_ack_id(id: &str) -> Option<(ConsumerId, u64)> {
    let (consumer, seq) = id.split_once('.')?;
    Some((consumer.parse().ok()?, seq.parse().ok()?))
}
