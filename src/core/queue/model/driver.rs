//! Drives the real core — a broker over RocksDB in a temporary directory,
//! with its delay schedule — through the public API, and tells the model
//! every operation and every delivery, in the order the queue made them.
//!
//! One current-thread Tokio runtime per broker run: the core's timers (the
//! schedule, redelivery delays, paging retries, the dispatch gate's delay)
//! run only while the driver waits in `block_on`, so nothing can slip in
//! between looking at the channel and the next operation. Every consumer of
//! the queue under test shares one delivery channel, so the model sees the
//! queue's pushes in the exact order it made them, across consumers.

use super::ops::{
    CaseSettings, DelayValue, Op, Reconfig, SendOp, SettleOp, TxnEnd, TxnOp, CONNECTIONS,
    DELAY_HEADERS, MAX_CONSUMERS,
};
use super::reference::{
    Cid, ConsumerSpec, CreditKind, Invariant, Model, ModelChange, ModelSettings, Ms, MsgId, Sent,
    Settle, Span, Violation, SLACK,
};
use crate::core::consumer::MessageFilter;
use crate::core::delay_headers::{DelayHeader, DelayUnit};
use crate::core::deliveries::{self, Deliveries, DeliverySink};
use crate::core::memory::AddressFullPolicy;
use crate::core::message::now_ms;
use crate::core::queue::Queue;
use crate::core::schedule::{Schedule, ScheduleOptions};
use crate::core::settings::{DelayOverMax, QueueSettings};
use crate::core::transaction::{
    Settlement, Target, TransactionError, TransactionLimits, Transactions,
};
use crate::core::{
    Broker, BrokerOptions, ConsumerOptions, CoreError, CreditMode, Delivery, Message, Release,
    RoutingType, Subscription, Value,
};
use crate::store::{FsyncPolicy, ScheduleKey, Store, StoreOptions};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

const QUEUE: &str = "q";
const DEAD_LETTERS: &str = "DLQ";
const EXPIRED: &str = "EXP";

/// One look at the channels every this long while waiting for the queue to settle.
const ROUND: Duration = Duration::from_millis(2);
/// Rounds in a row with nothing new before the queue counts as idle.
const QUIET_ROUNDS: u32 = 3;
/// Waits before an idle queue's unmet obligation counts: 10, 40, 160, 640 ms.
const FIRST_PATIENCE_MS: u64 = 10;
const LAST_PATIENCE_MS: u64 = 640;
/// A queue still delivering after this many rounds never settles.
const MAX_ROUNDS: u32 = 2_000;
/// What a drain owes is judged by deadlines this long past: the core's
/// timers may run late, and a drain does not wait for them.
const DRAIN_SLACK_MS: Ms = 50;

pub fn queue_settings(case: &CaseSettings) -> QueueSettings {
    QueueSettings {
        max_memory_messages: case.max_memory_messages,
        max_size_bytes: case.max_size_bytes,
        exclusive: case.exclusive,
        consumers_before_dispatch: case.consumers_before_dispatch,
        delay_before_dispatch: case.delay_before_dispatch,
        redelivery_delay: case.redelivery_delay,
        redelivery_multiplier: case.redelivery_multiplier,
        max_redelivery_delay: case.max_redelivery_delay,
        max_delivery_attempts: case.max_delivery_attempts,
        group_buckets: case.group_buckets,
        durable: case.durable,
        group_rebalance: case.group_rebalance,
        group_rebalance_pause_dispatch: case.group_rebalance_pause_dispatch,
        max_message_delay: case.max_message_delay,
        delay_over_max: match case.clamp_delays {
            true => DelayOverMax::Clamp,
            false => DelayOverMax::Reject,
        },
        dead_letter_address: Some(DEAD_LETTERS.to_owned()),
        expiry_address: Some(EXPIRED.to_owned()),
        address_full_policy: case.address_full_policy,
        default_message_delay: case.default_message_delay,
        delay_headers: case
            .delay_headers
            .iter()
            .map(|name| DelayHeader {
                name: Arc::from(*name),
                unit: DelayUnit::Millis,
            })
            .collect(),
        ..QueueSettings::default()
    }
}

pub fn model_settings(case: &CaseSettings) -> ModelSettings {
    ModelSettings {
        exclusive: case.exclusive,
        consumers_before_dispatch: case.consumers_before_dispatch,
        delay_before_dispatch: case.delay_before_dispatch.map(|d| d.as_millis() as Ms),
        redelivery_delay: case.redelivery_delay.as_millis() as Ms,
        redelivery_multiplier: case.redelivery_multiplier,
        max_redelivery_delay: case.max_redelivery_delay.as_millis() as Ms,
        max_delivery_attempts: case.max_delivery_attempts,
        group_buckets: case.group_buckets,
        durable: case.durable,
        group_rebalance: case.group_rebalance,
        group_rebalance_pause_dispatch: case.group_rebalance_pause_dispatch,
    }
}

/// The selector of the model: the message's `color` property equals this.
#[derive(Debug)]
struct ColorIs(i64);

impl MessageFilter for ColorIs {
    fn matches(&self, message: &Message) -> bool {
        message.property("color") == Some(&Value::Int(self.0))
    }
}

/// A consumer of the dead-letter or expiry address, noting what arrives.
struct Observer {
    _subscription: Subscription,
    rx: Deliveries,
}

/// One run of the broker, from open to restart.
struct Core {
    broker: Broker,
    schedule: Arc<Schedule>,
    sink: DeliverySink,
    rx: Deliveries,
    dead: Observer,
    expired: Observer,
}

struct Sub {
    cid: Cid,
    conn: u8,
    subscription: Subscription,
    /// The final drain's consumers ack what they get at once.
    auto_ack: bool,
}

pub struct Driver {
    dir: tempfile::TempDir,
    settings: QueueSettings,
    rt: Option<Arc<tokio::runtime::Runtime>>,
    core: Option<Core>,
    pub model: Model,
    subs: Vec<Sub>,
    by_core_id: HashMap<u64, Cid>,
    /// Deliveries in flight, to settle them.
    held: HashMap<MsgId, Delivery>,
    next_cid: Cid,
    tracing: bool,
    /// `max_message_delay`, and whether longer delays are clamped to it.
    max_delay: Ms,
    clamp_delays: bool,
    txn_limits: TransactionLimits,
    /// The queue's default delay now (it changes at run time).
    default_delay: Ms,
    delay_headers: Vec<&'static str>,
    /// Management paused the queue (stored: a restart keeps it).
    paused: bool,
}

type Step = Result<(), Violation>;

fn broken(detail: String) -> Violation {
    Violation {
        invariant: Invariant::NoLoss,
        detail,
    }
}

fn over_limit(detail: String) -> Violation {
    Violation {
        invariant: Invariant::Limit,
        detail,
    }
}

impl Driver {
    pub fn new(case: &CaseSettings) -> Self {
        let mut driver = Driver {
            dir: tempfile::tempdir().expect("temporary directory"),
            settings: queue_settings(case),
            rt: None,
            core: None,
            model: Model::new(model_settings(case)),
            subs: Vec::new(),
            by_core_id: HashMap::new(),
            held: HashMap::new(),
            next_cid: 1,
            tracing: std::env::var_os("QUEUE_MODEL_TRACE").is_some(),
            max_delay: case.max_message_delay.as_millis() as Ms,
            clamp_delays: case.clamp_delays,
            txn_limits: TransactionLimits {
                max_ops: case.max_transaction_ops,
                max_bytes: case.max_transaction_bytes,
                max_open: case.max_open_transactions,
            },
            default_delay: case.default_message_delay.as_millis() as Ms,
            delay_headers: case.delay_headers.clone(),
            paused: false,
        };
        driver.open();
        driver
    }

    fn rt(&self) -> Arc<tokio::runtime::Runtime> {
        self.rt.clone().expect("broker open")
    }

    fn core(&self) -> &Core {
        self.core.as_ref().expect("broker open")
    }

    fn open(&mut self) {
        let rt = Arc::new(
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime"),
        );
        let _entered = rt.enter();
        let store = open_store(self.dir.path());
        let mut options = BrokerOptions::with_queue_settings(self.settings.clone());
        options.declared = vec![
            (DEAD_LETTERS.to_owned(), QueueSettings::default()),
            (EXPIRED.to_owned(), QueueSettings::default()),
        ];
        let broker = Broker::open(store, options).expect("broker opens");
        let schedule = Schedule::open(
            &broker,
            ScheduleOptions {
                window: 4,
                ..ScheduleOptions::default()
            },
        )
        .expect("schedule opens");
        broker.set_scheduler(schedule.clone());
        broker
            .queue_or_create(QUEUE, true)
            .expect("queue under test");
        let observe = |address: &str| {
            let (sink, rx) = deliveries::channel();
            let options = ConsumerOptions {
                credit: CreditMode::Window(1 << 20),
                ..ConsumerOptions::default()
            };
            let subscription = broker
                .subscribe(address, RoutingType::Anycast, options, sink)
                .expect("observer subscribes");
            Observer {
                _subscription: subscription,
                rx,
            }
        };
        let dead = observe(DEAD_LETTERS);
        let expired = observe(EXPIRED);
        let (sink, rx) = deliveries::channel();
        drop(_entered);
        self.core = Some(Core {
            broker,
            schedule,
            sink,
            rx,
            dead,
            expired,
        });
        self.rt = Some(rt);
    }

    /// Runs one operation, lets the queue settle, and checks the idle queue.
    pub fn step(&mut self, op: &Op) -> Step {
        self.trace(|| format!("op {op:?}"));
        match op {
            Op::Send(send) => self.send(send)?,
            Op::Subscribe { conn, spec } => {
                if self.subs.len() < MAX_CONSUMERS {
                    self.subscribe(*conn, spec.clone(), false)?;
                }
            }
            Op::Settle {
                consumer,
                pick,
                how,
            } => self.settle(*consumer, *pick, *how)?,
            Op::AddCredit { consumer, credit } => self.add_credit(*consumer, *credit)?,
            Op::Close { consumer } => {
                if !self.subs.is_empty() {
                    let at = *consumer as usize % self.subs.len();
                    self.close(at)?;
                }
            }
            Op::DropConnection { conn } => {
                while let Some(at) = self.subs.iter().position(|s| s.conn == *conn % CONNECTIONS) {
                    self.close(at)?;
                }
            }
            Op::Advance { ms } => self.advance(*ms)?,
            Op::Restart => self.restart()?,
            Op::Resize {
                max_memory_messages,
                max_size_bytes,
            } => self.resize(*max_memory_messages, *max_size_bytes)?,
            Op::Txn(txn) => self.txn(txn)?,
            Op::Reconfigure(change) => self.reconfigure(change)?,
            Op::SetCredit { consumer, credit } => self.set_credit(*consumer, *credit)?,
            Op::Drain { consumer } => self.drain_credit(*consumer)?,
        }
        self.check_owed(false)?;
        self.check_memory()
    }

    /// The idle queue's budget against the bytes its messages hold. The
    /// writer gives back what it has paged out on its own thread, between
    /// the two counters the budget reads: a difference counts only once it
    /// has lasted.
    fn check_memory(&mut self) -> Step {
        let mut tries = 0;
        let (charged, held) = loop {
            let (charged, held) = self.queue().memory_accounting();
            tries += 1;
            if charged == held || tries == 20 {
                break (charged, held);
            }
            std::thread::sleep(std::time::Duration::from_millis(5 * tries));
        };
        match charged == held {
            true => Ok(()),
            false => Err(Violation {
                invariant: Invariant::Memory,
                detail: format!(
                    "the queue's budget holds {charged} bytes, its messages in memory {held}"
                ),
            }),
        }
    }

    /// Checks what the idle queue owes (with `accounted`, also that every
    /// message has come out or is still held). On a loaded machine a timer (a
    /// delay, an expiry, a redelivery) can fire after the queue looked idle,
    /// which looks like a queue that forgot a message; a queue that did
    /// forget one still owes it after waiting. So an unmet obligation counts
    /// only once it has outlasted a few growing waits.
    fn check_owed(&mut self, accounted: bool) -> Step {
        let mut patience = FIRST_PATIENCE_MS;
        loop {
            let idle_from = self.quiesce()?;
            // Accounting first: a message that never came out is a loss
            // before it is a consumer left waiting.
            let outcome = match accounted {
                true => self.model.check_accounted(),
                false => Ok(()),
            }
            .and_then(|()| self.model.check_idle(idle_from, now_ms()));
            match outcome {
                Err(violation) if patience <= LAST_PATIENCE_MS => {
                    self.trace(|| format!("not yet ({violation}): waiting {patience} ms"));
                    self.advance(patience)?;
                    patience *= 4;
                }
                outcome => return outcome,
            }
        }
    }

    /// With `QUEUE_MODEL_TRACE` set, every operation and delivery goes to
    /// stderr with the clock: what a shrunk case did, step by step.
    fn trace(&self, line: impl FnOnce() -> String) {
        if self.tracing {
            eprintln!("[{}] {}", now_ms(), line());
        }
    }

    /// Whether `op`'s delay may be over `max_message_delay`: the core
    /// measures it from a moment later, so only a longer one can be.
    fn may_be_over_max_delay(&self, op: &SendOp) -> bool {
        self.delay_of(op).is_some_and(|d| d > self.max_delay)
    }

    /// The delay the queue gives `op`: its own, else the first of the
    /// queue's `delay_headers` it carries with a value that is a delay (a
    /// zero one is none), else the queue's default delay.
    fn delay_of(&self, op: &SendOp) -> Option<Ms> {
        if op.delay_ms.is_some() {
            return op.delay_ms;
        }
        let from_properties = self.delay_headers.iter().find_map(|name| {
            let property = op
                .delay_properties
                .iter()
                .find(|p| DELAY_HEADERS[p.name as usize] == *name)?;
            match property.value {
                DelayValue::Int(ms) | DelayValue::Text(ms) => Some(ms),
                DelayValue::Junk => None,
            }
        });
        match from_properties {
            Some(0) => None,
            Some(ms) => Some(ms),
            None => (self.default_delay > 0).then_some(self.default_delay),
        }
    }

    /// Whether `op`, stamped at `now`, had a delay over `max_message_delay`
    /// whenever the core measured it before `hi`.
    fn surely_over_max_delay(&self, op: &SendOp, now: Ms, hi: Ms) -> bool {
        self.delay_of(op)
            .is_some_and(|d| d > self.max_delay + (hi - now) + 1)
    }

    /// The message of `op` stamped at `now`, and what the model is told of
    /// it, its due time as [`Driver::due`] makes it for a send that ended by `now`.
    fn message(&self, id: MsgId, op: &SendOp, now: Ms) -> (Sent, Message) {
        let (mut sent, message) = message(id, op, now);
        sent.due = self.due(op, now, now);
        (sent, message)
    }

    /// When `op`, stamped at `now` and taken by the core by `hi`, falls due.
    /// Its own delay is stamped on the message (`due_at`): exact. A delay the
    /// core resolves (the queue's default, a delay property, a delay over the
    /// maximum clamped, if the queue clamps) runs from the core's clock
    /// reading during the call, so from some moment in `now..=hi`.
    fn due(&self, op: &SendOp, now: Ms, hi: Ms) -> Option<Span> {
        let delay = self.delay_of(op)?;
        let (delay, measured) = if self.clamp_delays && self.may_be_over_max_delay(op) {
            (self.max_delay, true)
        } else {
            (delay, op.delay_ms.is_none())
        };
        Some(Span {
            lo: now + delay,
            hi: if measured { hi } else { now } + delay,
        })
    }

    fn send(&mut self, op: &SendOp) -> Step {
        let id = self.model.message_count();
        let now = now_ms();
        let (mut sent, message) = self.message(id, op, now);
        let rt = self.rt();
        let _entered = rt.enter();
        let queue = self.queue();
        let policy = queue.memory().policy();
        let full = queue.memory().is_full();
        let dropped = queue.memory().dropped();
        let lo = now_ms();
        let published = self.core().broker.publish(message, RoutingType::Anycast);
        let hi = now_ms();
        let dropped = queue.memory().dropped() - dropped;
        match (policy, full, &published, dropped) {
            (AddressFullPolicy::Fail, true, Err(CoreError::AddressFull { .. }), 0) => {
                self.trace(|| format!("  m{id} refused: the FAIL queue is full"));
                return Ok(());
            }
            (AddressFullPolicy::Drop, true, Ok(_), 1) => {
                self.trace(|| format!("  m{id} dropped: the DROP queue is full"));
                return Ok(());
            }
            (_, false, _, 0) | (AddressFullPolicy::Page | AddressFullPolicy::Block, _, _, 0) => {}
            (policy, full, published, dropped) => {
                return Err(over_limit(format!(
                    "m{id} to a {policy:?} queue (full: {full}): {:?}, {dropped} dropped",
                    published.as_ref().map(|_| ()).map_err(|e| e.to_string())
                )))
            }
        }
        let refusable = !self.clamp_delays && self.may_be_over_max_delay(op);
        match published {
            Err(CoreError::DelayTooLong { .. }) if refusable => {
                self.trace(|| format!("  m{id} refused: its delay is over the maximum"));
                return Ok(());
            }
            Err(e) => return Err(broken(format!("publish of m{id} refused: {e}"))),
            Ok(_) if refusable && self.surely_over_max_delay(op, now, hi) => {
                return Err(over_limit(format!(
                    "m{id} accepted with a delay of {:?} ms, over the maximum {} ms",
                    op.delay_ms, self.max_delay
                )))
            }
            Ok(_) => {}
        }
        sent.due = self.due(op, now, hi);
        self.trace(|| format!("  sent m{id}: {sent:?}"));
        self.model.send(sent, Span { lo, hi });
        self.drain(lo)?;
        Ok(())
    }

    /// One transaction through the core's API. The model is told what the
    /// commit applies in the order the core applies it: the releases, then
    /// the acknowledgements (a consumer's together), then the sends.
    fn txn(&mut self, op: &TxnOp) -> Step {
        const TXN: u32 = 0;
        let mut txns = Transactions::new(self.txn_limits);
        let max_open = self.txn_limits.max_open;
        for other in 1..=u32::from(op.others_open) {
            match txns.begin(other) {
                Ok(()) if other as usize > max_open => {
                    return Err(over_limit(format!(
                    "transaction {other} began with {} open, over max_open_transactions {max_open}",
                    other - 1
                )))
                }
                Err(TransactionError::TooManyOpen { .. }) if other as usize > max_open => {}
                Ok(()) => {}
                Err(e) => return Err(broken(format!("transaction {other} would not begin: {e}"))),
            }
        }
        let open = usize::from(op.others_open).min(max_open);
        match txns.begin(TXN) {
            Ok(()) if open >= max_open => {
                return Err(over_limit(format!(
                    "a transaction began with {open} open, max_open_transactions {max_open}"
                )))
            }
            Ok(()) => {}
            Err(TransactionError::TooManyOpen { .. }) if open >= max_open => {
                self.trace(|| "  transaction refused: too many open".to_owned());
                return Ok(());
            }
            Err(e) => return Err(broken(format!("a transaction would not begin: {e}"))),
        }
        let rt = self.rt();
        let _entered = rt.enter();
        let first = self.model.message_count();
        let mut sent = Vec::new();
        // What the transaction holds, as the core counts it against its
        // limits, and whether an operation was refused (nothing applies then).
        let limits = self.txn_limits;
        let (mut ops, mut bytes, mut doomed) = (0usize, 0usize, false);
        for (i, send) in op.sends.iter().enumerate() {
            let id = first + i;
            let now = now_ms();
            let (s, message) = self.message(id, send, now);
            let weight = message.weight();
            let broker = &self.core().broker;
            let queue = self.queue();
            let full_fail =
                queue.memory().is_full() && queue.memory().policy() == AddressFullPolicy::Fail;
            let added = txns.send(broker, &TXN, message, Target::Routed(RoutingType::Anycast));
            let refused =
                doomed || ops >= limits.max_ops || bytes + weight > limits.max_bytes || full_fail;
            let refusable = !self.clamp_delays && self.may_be_over_max_delay(send);
            match added {
                Ok(()) if refused => {
                    return Err(over_limit(format!(
                        "send of m{id} accepted in a transaction over its limits ({ops} operations, {bytes} bytes)"
                    )))
                }
                Ok(()) if refusable && self.surely_over_max_delay(send, now, now_ms()) => {
                    return Err(over_limit(format!(
                        "send of m{id} accepted in a transaction with a delay of {:?} ms, over the maximum {} ms",
                        send.delay_ms, self.max_delay
                    )))
                }
                Ok(()) => {
                    ops += 1;
                    bytes += weight;
                    sent.push((s, send, now));
                }
                Err(_) if refused => doomed = true,
                Err(TransactionError::Core(CoreError::DelayTooLong { .. })) if refusable => {
                    doomed = true
                }
                Err(e) => {
                    return Err(broken(format!(
                        "send of m{id} in a transaction refused: {e}"
                    )))
                }
            }
        }
        // (consumer, message, acknowledged) in the order they were added.
        let mut settled: Vec<(Cid, MsgId, bool)> = Vec::new();
        for s in &op.settles {
            let free: Vec<(Cid, Vec<MsgId>)> = self
                .subs
                .iter()
                .map(|sub| {
                    let held = self.model.in_flight_of(sub.cid);
                    let free = held
                        .into_iter()
                        .filter(|id| !settled.iter().any(|(_, m, _)| m == id))
                        .collect::<Vec<_>>();
                    (sub.cid, free)
                })
                .filter(|(_, free)| !free.is_empty())
                .collect();
            if free.is_empty() {
                break;
            }
            let (cid, ids) = &free[s.consumer as usize % free.len()];
            let id = ids[s.pick as usize % ids.len()];
            let Some(delivery) = self.held.get(&id) else {
                return Err(broken(format!("no delivery of m{id} to settle")));
            };
            let how = if s.ack {
                Settlement::Ack
            } else {
                Settlement::Release(Release::Failed)
            };
            // Held even when refused: it comes back when the transaction ends.
            let added = txns.settle(&TXN, &delivery.queue, delivery.consumer, delivery.seq, how);
            ops += 1;
            let refused = doomed || ops > limits.max_ops;
            match added {
                Ok(()) if refused => {
                    return Err(over_limit(format!(
                        "c{cid}'s settlement of m{id} accepted in a transaction over its limits ({ops} operations)"
                    )))
                }
                Ok(()) => {}
                Err(_) if refused => doomed = true,
                Err(e) => {
                    return Err(broken(format!(
                        "c{cid} could not settle m{id} in a transaction: {e}"
                    )))
                }
            }
            settled.push((*cid, id, s.ack));
        }
        self.trace(|| {
            format!("  transaction: sends {sent:?}, settles {settled:?}, refused: {doomed}")
        });
        let mut gone = None;
        match op.end {
            TxnEnd::Commit | TxnEnd::Rollback => {}
            TxnEnd::RefusedThenCommit => {
                let refused: Arc<dyn std::error::Error + Send + Sync> =
                    Arc::from(Box::<dyn std::error::Error + Send + Sync>::from("refused"));
                if txns
                    .refuse(&TXN, TransactionError::Protocol(refused))
                    .is_err()
                {
                    return Err(broken("the transaction was not open".to_owned()));
                }
            }
            TxnEnd::ConsumerLeavesThenCommit => {
                if let Some(&(cid, _, _)) = settled.first() {
                    if let Some(at) = self.subs.iter().position(|s| s.cid == cid) {
                        drop(_entered);
                        self.close(at)?;
                        gone = Some(cid);
                    }
                }
            }
        }
        let rt = self.rt();
        let _entered = rt.enter();
        // A FAIL queue full at the commit refuses the transaction's sends, so
        // the whole of it; a DROP queue drops those that find it full, the
        // last ones (it stays full as they go in).
        let queue = self.queue();
        let full_fail = !sent.is_empty()
            && queue.memory().is_full()
            && queue.memory().policy() == AddressFullPolicy::Fail;
        let doomed = doomed || (full_fail && op.end != TxnEnd::Rollback);
        let dropped_before = queue.memory().dropped();
        let lo = now_ms();
        let applied = if op.end == TxnEnd::Rollback {
            txns.rollback(&TXN).map(|()| false)
        } else {
            let who = crate::core::security::Principal::unrestricted();
            txns.commit(&self.core().broker, &TXN, &who).map(|_| true)
        };
        let hi = now_ms();
        let committed = match (applied, op.end) {
            (Ok(true), _) if doomed => {
                return Err(over_limit(
                    "a transaction with a refused operation committed".to_owned(),
                ))
            }
            (Err(_), end) if doomed && end != TxnEnd::Rollback => false,
            (Ok(true), TxnEnd::Commit) => true,
            (Ok(false), TxnEnd::Rollback) => false,
            (Err(_), TxnEnd::RefusedThenCommit) => false,
            (Err(_), TxnEnd::ConsumerLeavesThenCommit) if gone.is_some() => false,
            (Ok(true), TxnEnd::ConsumerLeavesThenCommit) if gone.is_none() => true,
            (outcome, end) => {
                return Err(broken(format!(
                    "transaction ending {end:?}: {:?}",
                    outcome.map_err(|e| e.to_string())
                )))
            }
        };
        self.trace(|| format!("  transaction committed: {committed}"));
        let dropped = (queue.memory().dropped() - dropped_before) as usize;
        if dropped > 0 {
            if !committed || queue.memory().policy() != AddressFullPolicy::Drop {
                return Err(over_limit(format!(
                    "{dropped} sends dropped by a transaction ending {:?} (committed: {committed})",
                    op.end
                )));
            }
            self.trace(|| format!("  the last {dropped} sends dropped: the DROP queue is full"));
            sent.truncate(sent.len().saturating_sub(dropped));
        }
        if committed {
            for &(cid, id, _) in settled.iter().filter(|(_, _, ack)| !ack) {
                self.held.remove(&id);
                self.model.settle(cid, id, Settle::Failed, Span { lo, hi });
            }
            let mut acked: Vec<Cid> = Vec::new();
            for &(cid, _, ack) in &settled {
                if ack && !acked.contains(&cid) {
                    acked.push(cid);
                }
            }
            for cid in acked {
                for &(_, id, _) in settled.iter().filter(|(c, _, ack)| *c == cid && *ack) {
                    self.held.remove(&id);
                    self.model.settle(cid, id, Settle::Ack, Span { lo, hi });
                }
            }
            for (mut s, send, now) in sent {
                // Its delay was resolved by the commit's end at the latest.
                s.due = self.due(send, now, hi);
                self.model.send(s, Span { lo, hi });
            }
        } else {
            // What was settled goes back as a failed delivery, except what
            // came back already when its consumer left.
            for &(cid, id, _) in settled.iter().filter(|(c, _, _)| Some(*c) != gone) {
                self.held.remove(&id);
                self.model.settle(cid, id, Settle::Failed, Span { lo, hi });
            }
        }
        self.drain(lo)?;
        Ok(())
    }

    fn subscribe(&mut self, conn: u8, spec: ConsumerSpec, auto_ack: bool) -> Step {
        let cid = self.next_cid;
        self.next_cid += 1;
        let options = ConsumerOptions {
            credit: match spec.credit {
                CreditKind::Window(w) => CreditMode::Window(w),
                CreditKind::Explicit => CreditMode::Explicit,
            },
            priority: spec.priority,
            filter: spec
                .selector
                .map(|v| Arc::new(ColorIs(v)) as Arc<dyn MessageFilter>),
            browse: spec.browser,
        };
        let rt = self.rt();
        let _entered = rt.enter();
        let lo = now_ms();
        let core = self.core();
        let subscription = core
            .broker
            .subscribe(QUEUE, RoutingType::Anycast, options, core.sink.clone())
            .map_err(|e| broken(format!("subscribe refused: {e}")))?;
        // Told after the call (what it delivered waits in the channel): the
        // gate's delay runs from the core's clock reading during it.
        let hi = now_ms();
        self.model.subscribe(cid, spec, Span { lo, hi });
        self.by_core_id.insert(subscription.consumer(), cid);
        self.trace(|| format!("  c{cid} is consumer {}", subscription.consumer()));
        self.subs.push(Sub {
            cid,
            conn: conn % CONNECTIONS,
            subscription,
            auto_ack,
        });
        self.drain(lo)?;
        Ok(())
    }

    fn settle(&mut self, consumer: u8, pick: u8, how: SettleOp) -> Step {
        let holders: Vec<Cid> = self
            .subs
            .iter()
            .map(|s| s.cid)
            .filter(|c| !self.model.in_flight_of(*c).is_empty())
            .collect();
        if holders.is_empty() {
            return Ok(());
        }
        let cid = holders[consumer as usize % holders.len()];
        let held = self.model.in_flight_of(cid);
        let id = held[pick as usize % held.len()];
        let how = match how {
            SettleOp::Ack => Settle::Ack,
            SettleOp::Nack => Settle::Failed,
            SettleOp::Release => Settle::Unused,
            SettleOp::NotHere => Settle::NotHere,
            SettleOp::Reject => Settle::Reject,
        };
        self.settle_one(cid, id, how)
    }

    fn settle_one(&mut self, cid: Cid, id: MsgId, how: Settle) -> Step {
        self.trace(|| format!("  c{cid} settles m{id}: {how:?}"));
        let Some(delivery) = self.held.remove(&id) else {
            return Err(broken(format!("no delivery of m{id} to settle")));
        };
        let rt = self.rt();
        let _entered = rt.enter();
        let lo = now_ms();
        let queue = &delivery.queue;
        let result = match how {
            Settle::Ack => queue.ack(delivery.consumer, &[delivery.seq]).map(|_| ()),
            Settle::Failed => queue.release(delivery.consumer, delivery.seq, Release::Failed),
            Settle::Unused => queue.release(delivery.consumer, delivery.seq, Release::Unused),
            Settle::NotHere => queue.release(delivery.consumer, delivery.seq, Release::NotHere),
            Settle::Reject => queue.release(delivery.consumer, delivery.seq, Release::Reject),
        };
        if let Err(e) = result {
            return Err(broken(format!(
                "c{cid} could not settle m{id} ({how:?}): {e}"
            )));
        }
        // Told after the call: a redelivery delay runs from the core's clock
        // reading during it.
        self.model.settle(cid, id, how, Span { lo, hi: now_ms() });
        self.drain(lo)?;
        Ok(())
    }

    /// Grants credit to a consumer with explicit credit (an AMQP link's
    /// flow). A window consumer (STOMP prefetch) is never granted credit: its
    /// window refills as it settles.
    fn resize(&mut self, max_memory_messages: usize, max_size_bytes: Option<u64>) -> Step {
        let rt = self.rt();
        let _entered = rt.enter();
        let changed = self.core().broker.change_queue_settings_as(
            QUEUE,
            &crate::core::security::Principal::unrestricted(),
            |s| {
                s.max_memory_messages = Some(max_memory_messages);
                s.max_size_bytes = Some(max_size_bytes);
            },
            |_| Ok(()),
        );
        let written = match changed {
            Ok((_, written)) => written,
            // Only a queue that is not there yet (nothing sent, nobody subscribed).
            Err(crate::core::CoreError::NotFound(_)) => return Ok(()),
            Err(e) => panic!("resize refused: {e}"),
        };
        rt.block_on(written.wait())
            .unwrap_or_else(|e| panic!("resize not stored: {e}"));
        Ok(())
    }

    /// The queue under test.
    fn queue(&self) -> Arc<Queue> {
        self.core().broker.queue(QUEUE).expect("queue under test")
    }

    /// Management changes settings other than memory limits at run time.
    fn reconfigure(&mut self, change: &Reconfig) -> Step {
        let rt = self.rt();
        // The queue's timers have their turn first: a timer due before
        // `timers_ran` (a gate's delay running out) has done its work.
        let timers_ran = now_ms();
        rt.block_on(async {
            tokio::time::sleep(ROUND).await;
            tokio::task::yield_now().await;
        });
        let _entered = rt.enter();
        self.drain(timers_ran)?;
        let lo = now_ms();
        let changed = self.core().broker.change_queue_settings_as(
            QUEUE,
            &crate::core::security::Principal::unrestricted(),
            |s| {
                if let Some(exclusive) = change.exclusive {
                    s.exclusive = Some(exclusive);
                }
                if let Some((count, delay)) = change.gate {
                    s.consumers_before_dispatch = Some(count);
                    s.delay_before_dispatch = Some(delay);
                }
                if let Some(d) = change.redelivery_delay {
                    s.redelivery_delay = Some(d);
                }
                if let Some(max) = change.max_delivery_attempts {
                    s.max_delivery_attempts = Some(max);
                }
                if let Some(d) = change.default_message_delay {
                    s.default_message_delay = Some(d);
                }
                if let Some(on) = change.group_rebalance {
                    s.group_rebalance = Some(on);
                }
            },
            |_| Ok(()),
        );
        let hi = now_ms();
        let written = match changed {
            Ok((_, written)) => written,
            Err(e) => return Err(broken(format!("settings change refused: {e}"))),
        };
        let ms = |d: Duration| d.as_millis() as Ms;
        self.model.reconfigure(
            &ModelChange {
                exclusive: change.exclusive,
                gate: change.gate.map(|(count, delay)| (count, delay.map(ms))),
                redelivery_delay: change.redelivery_delay.map(ms),
                max_delivery_attempts: change.max_delivery_attempts,
                group_rebalance: change.group_rebalance,
            },
            Span { lo, hi },
            timers_ran,
        );
        if let Some(d) = change.default_message_delay {
            self.default_delay = ms(d);
        }
        if let Some((count, _)) = change.gate {
            self.settings.consumers_before_dispatch = count;
        }
        rt.block_on(written.wait())
            .map_err(|e| broken(format!("settings change not stored: {e}")))?;
        let _entered = rt.enter();
        self.drain(lo)?;
        match change.paused {
            Some(paused) => self.pause(paused),
            None => Ok(()),
        }
    }

    /// Management pauses or resumes dispatch. The model hears of a resume
    /// before the queue dispatches again, of a pause once nothing more goes.
    fn pause(&mut self, paused: bool) -> Step {
        let rt = self.rt();
        let _entered = rt.enter();
        let lo = now_ms();
        self.drain(lo)?;
        if !paused {
            self.model.set_paused(false);
        }
        let changed = self.core().broker.pause_queue_as(
            QUEUE,
            &crate::core::security::Principal::unrestricted(),
            paused,
        );
        let written = match changed {
            Ok((_, written)) => written,
            Err(e) => return Err(broken(format!("pause refused: {e}"))),
        };
        self.model.set_paused(paused);
        self.paused = paused;
        self.drain(lo)?;
        drop(_entered);
        rt.block_on(written.wait())
            .map_err(|e| broken(format!("pause not stored: {e}")))?;
        let _entered = rt.enter();
        self.drain(lo)?;
        Ok(())
    }

    /// A consumer with explicit credit, picked by `consumer`.
    fn explicit(&self, consumer: u8) -> Option<usize> {
        let explicit: Vec<usize> = (0..self.subs.len())
            .filter(|&i| self.model.has_explicit_credit(self.subs[i].cid))
            .collect();
        (!explicit.is_empty()).then(|| explicit[consumer as usize % explicit.len()])
    }

    fn set_credit(&mut self, consumer: u8, credit: u32) -> Step {
        let Some(at) = self.explicit(consumer) else {
            return Ok(());
        };
        let cid = self.subs[at].cid;
        let rt = self.rt();
        let _entered = rt.enter();
        let lo = now_ms();
        self.model.set_credit(cid, credit);
        let sub = &self.subs[at];
        sub.subscription
            .queue()
            .set_credit(sub.subscription.consumer(), credit);
        self.drain(lo)?;
        Ok(())
    }

    /// AMQP drain on an idle queue: what the consumer may take now comes, the
    /// rest of its credit is dropped.
    fn drain_credit(&mut self, consumer: u8) -> Step {
        let Some(at) = self.explicit(consumer) else {
            return Ok(());
        };
        let cid = self.subs[at].cid;
        let rt = self.rt();
        let _entered = rt.enter();
        let lo = now_ms();
        let sub = &self.subs[at];
        let dropped = sub.subscription.queue().drain(sub.subscription.consumer());
        self.drain(lo)?;
        self.trace(|| format!("  c{cid} drained, {dropped} credit dropped"));
        self.model
            .drained(cid, dropped, lo.saturating_sub(DRAIN_SLACK_MS), now_ms())?;
        Ok(())
    }

    fn add_credit(&mut self, consumer: u8, credit: u32) -> Step {
        let explicit: Vec<usize> = (0..self.subs.len())
            .filter(|&i| self.model.has_explicit_credit(self.subs[i].cid))
            .collect();
        if explicit.is_empty() {
            return Ok(());
        }
        let at = explicit[consumer as usize % explicit.len()];
        let cid = self.subs[at].cid;
        let rt = self.rt();
        let _entered = rt.enter();
        let lo = now_ms();
        self.model.add_credit(cid, credit);
        let sub = &self.subs[at];
        sub.subscription
            .queue()
            .add_credit(sub.subscription.consumer(), credit);
        self.drain(lo)?;
        Ok(())
    }

    fn close(&mut self, at: usize) -> Step {
        let sub = self.subs.remove(at);
        let rt = self.rt();
        let _entered = rt.enter();
        let lo = now_ms();
        for id in self.model.in_flight_of(sub.cid) {
            self.held.remove(&id);
        }
        drop(sub.subscription);
        self.model.close(sub.cid, Span { lo, hi: now_ms() });
        self.drain(lo)?;
        Ok(())
    }

    fn advance(&mut self, ms: u64) -> Step {
        let until = now_ms() + ms;
        let rt = self.rt();
        loop {
            let lo = now_ms();
            if lo >= until {
                return Ok(());
            }
            let nap = ROUND.min(Duration::from_millis(until - lo));
            rt.block_on(async { tokio::time::sleep(nap).await });
            let _entered = rt.enter();
            self.drain(lo)?;
        }
    }

    /// Waits until the queue has delivered nothing for `QUIET_ROUNDS` rounds
    /// (each after a store barrier, so paged writes are readable); returns
    /// when that quiet began.
    fn quiesce(&mut self) -> Result<Ms, Violation> {
        let rt = self.rt();
        let store = self.core().broker.store().clone();
        let mut quiet = 0;
        let mut idle_from = now_ms();
        for _ in 0..MAX_ROUNDS {
            let lo = now_ms();
            let barrier = store.submit(crate::store::Op::DeleteScheduled {
                key: ScheduleKey {
                    due_ms: 0,
                    queue: 0,
                    seq: 0,
                },
            });
            rt.block_on(async {
                let _ = barrier.wait().await;
                tokio::time::sleep(ROUND).await;
            });
            let _entered = rt.enter();
            if self.drain(lo)? == 0 {
                if quiet == 0 {
                    idle_from = lo;
                }
                quiet += 1;
                if quiet >= QUIET_ROUNDS {
                    return Ok(idle_from);
                }
            } else {
                quiet = 0;
            }
        }
        Err(Violation {
            invariant: Invariant::Quiescence,
            detail: format!("still delivering after {MAX_ROUNDS} rounds"),
        })
    }

    /// Hands everything pushed since `lo` to the model, in push order.
    /// Returns how many deliveries there were (any channel).
    fn drain(&mut self, lo: Ms) -> Result<usize, Violation> {
        let mut count = 0;
        loop {
            let core = self.core.as_mut().expect("broker open");
            let Ok(delivery) = core.rx.try_recv() else {
                break;
            };
            let span = Span { lo, hi: now_ms() };
            count += 1;
            let id = message_id(&delivery)?;
            self.trace(|| {
                format!(
                    "  m{id} -> consumer {} (count {}) in {lo}..={}",
                    delivery.consumer, delivery.delivery_count, span.hi
                )
            });
            let Some(&cid) = self.by_core_id.get(&delivery.consumer) else {
                return Err(broken(format!(
                    "m{id} delivered to unknown consumer {}",
                    delivery.consumer
                )));
            };
            self.model.deliver(cid, id, delivery.delivery_count, span)?;
            if self.model.is_browser(cid) {
                continue;
            }
            self.held.insert(id, delivery);
            if self.subs.iter().any(|s| s.cid == cid && s.auto_ack) {
                self.settle_one(cid, id, Settle::Ack)?;
            }
        }
        loop {
            let core = self.core.as_mut().expect("broker open");
            let Ok(delivery) = core.dead.rx.try_recv() else {
                break;
            };
            count += 1;
            let _ = delivery.queue.ack(delivery.consumer, &[delivery.seq]);
            let id = message_id(&delivery)?;
            self.trace(|| format!("  m{id} -> dead-letter address"));
            self.model.dead_lettered(id)?;
        }
        loop {
            let core = self.core.as_mut().expect("broker open");
            let Ok(delivery) = core.expired.rx.try_recv() else {
                break;
            };
            count += 1;
            let span = Span { lo, hi: now_ms() };
            let _ = delivery.queue.ack(delivery.consumer, &[delivery.seq]);
            let id = message_id(&delivery)?;
            self.trace(|| format!("  m{id} -> expiry address"));
            self.model.expired(id, span)?;
        }
        Ok(count)
    }

    /// Every consumer closes (so in-flight messages return, as when
    /// connections drop at shutdown), the broker closes, and it opens again
    /// on the same directory.
    fn restart(&mut self) -> Step {
        while !self.subs.is_empty() {
            self.close(0)?;
        }
        self.quiesce()?;
        let rt = self.rt();
        let schedule = self.core().schedule.clone();
        rt.block_on(schedule.shutdown());
        {
            let _entered = rt.enter();
            self.drain(now_ms())?;
        }
        drop(schedule);
        self.held.clear();
        self.by_core_id.clear();
        self.core = None;
        drop(rt);
        // The last runtime handle: dropping it drops the core's timer tasks
        // and, with them, the last handles on the store.
        self.rt = None;
        self.model.restart();
        self.open();
        Ok(())
    }

    /// After the last operation: every consumer closes, every deadline
    /// passes, fresh consumers take and ack everything; then every message
    /// must have an end.
    pub fn finish(&mut self) -> Step {
        self.trace(|| "final drain".to_owned());
        while !self.subs.is_empty() {
            self.close(0)?;
        }
        let wait = self.model.last_deadline() + SLACK + 2;
        let now = now_ms();
        if wait > now {
            self.advance(wait - now)?;
        }
        if self.paused {
            self.pause(false)?;
        }
        let drainers = self.settings.consumers_before_dispatch.max(1);
        for _ in 0..drainers {
            let spec = ConsumerSpec {
                credit: CreditKind::Window(10_000),
                priority: 0,
                selector: None,
                browser: false,
            };
            self.subscribe(0, spec, true)?;
        }
        self.check_owed(true)
    }

    /// Closes everything so the directory can go.
    pub fn shutdown(mut self) {
        let rt = self.rt();
        {
            let _entered = rt.enter();
            self.subs.clear();
        }
        if let Some(core) = &self.core {
            rt.block_on(core.schedule.shutdown());
        }
        self.held.clear();
        self.core = None;
    }
}

/// What the model is told of a send, and the message the core gets: its
/// body is its model id.
fn message(id: MsgId, op: &SendOp, now: Ms) -> (Sent, Message) {
    let sent = Sent {
        group: op.group.map(|g| Arc::from(format!("G{g}"))),
        closes_group: op.closes_group,
        durable: op.durable,
        color: op.color,
        priority: op.priority,
        due: op.delay_ms.map(|d| Span {
            lo: now + d,
            hi: now + d,
        }),
        expires: op.ttl_ms.map(|t| now + t),
    };
    let message = Message {
        address: Arc::from(QUEUE),
        body: bytes::Bytes::from(id.to_string()),
        group_id: sent.group.clone(),
        group_seq: op.closes_group.then_some(-1),
        due_at: op.delay_ms.map(|d| now + d),
        expires_at: sent.expires,
        durable: op.durable,
        priority: op.priority,
        timestamp: now,
        properties: std::iter::once((Arc::from("color"), Value::Int(op.color)))
            .chain(op.delay_properties.iter().map(|p| {
                let value = match p.value {
                    DelayValue::Int(ms) => Value::Int(ms as i64),
                    DelayValue::Text(ms) => Value::String(Arc::from(ms.to_string())),
                    DelayValue::Junk => Value::String(Arc::from("soon")),
                };
                (Arc::from(DELAY_HEADERS[p.name as usize]), value)
            }))
            .collect::<Vec<_>>()
            .into(),
        may_carry_delay: !op.delay_properties.is_empty(),
        ..Message::default()
    };
    (sent, message)
}

fn message_id(delivery: &Delivery) -> Result<MsgId, Violation> {
    std::str::from_utf8(&delivery.message.body)
        .ok()
        .and_then(|b| b.parse().ok())
        .ok_or_else(|| {
            broken(format!(
                "a message that was never sent: {:?}",
                delivery.message.body
            ))
        })
}

/// The store, once the previous run's writer has let go of the directory.
fn open_store(dir: &std::path::Path) -> Store {
    let options = || StoreOptions {
        fsync: FsyncPolicy::Never,
        ..StoreOptions::default()
    };
    for _ in 0..200 {
        match Store::open(dir, options()) {
            Ok(store) => return store,
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
    Store::open(dir, options()).expect("store opens")
}

/// Runs a whole case: every operation, then the final drain and accounting.
/// The error names the operation after which the model and the core parted.
pub fn run(case: &CaseSettings, ops: &[Op]) -> Result<(), String> {
    let mut driver = Driver::new(case);
    let mut result = Ok(());
    for (i, op) in ops.iter().enumerate() {
        if let Err(v) = driver.step(op) {
            result = Err(format!("after op #{i} {op:?}: {v}"));
            break;
        }
    }
    if result.is_ok() {
        if let Err(v) = driver.finish() {
            result = Err(format!("in the final drain: {v}"));
        }
    }
    driver.shutdown();
    result
}
