//! The reference model of one queue: the queue semantics (the spec the queue
//! rewrite implements, numbered 1-10 there: dispatch, paging, returns, owners
//! leaving, selectors and groups, exclusive, dispatch gates, browsers,
//! expiry, restart) written as plain bookkeeping over every message and
//! consumer, slow and direct.
//!
//! It does not pick who gets what. The real queue decides (round robin,
//! priorities across pages are its own business); the model is told each
//! delivery, in the order the queue made them, and judges whether the spec
//! allows it — then, once the queue is idle, whether something that must have
//! happened did not (a consumer left waiting beside a message it may take).
//!
//! Time is the wall clock the core uses (`now_ms`). A delivery is known only
//! to have happened within a span (between two looks at the channel), and the
//! core reads the clock a moment after the model does, so every rule that
//! depends on time is judged three-valued: a violation is reported only when
//! it holds for the whole span with `EPS` to spare, and an obligation (must
//! have been delivered by now) only for deadlines `SLACK` before the queue was
//! seen idle. Nothing near a deadline is ever called a bug.
//!
//! A deadline the core sets from its own clock reading (a delay it measures
//! itself, a redelivery delay, the gate's delay from the first consumer) is
//! known only to lie within the span of the call that set it, so it is kept
//! as a [`Span`]: its `lo` for what may not happen before it (early
//! delivery), its `hi` for what must have happened after it (a message owed
//! to an idle consumer) and for what it makes inevitable (a message that
//! expires before it can be due goes to the expiry address).

use crate::core::grouping::GroupTable;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::sync::Arc;

/// Milliseconds since the epoch, the core's clock for due and expiry times.
pub type Ms = u64;
/// Index of a message in the order the test sent it.
pub type MsgId = usize;
/// The model's name for a consumer; unique across restarts (the core's ids are not).
pub type Cid = usize;

/// Rounding between two reads of the millisecond clock.
pub const EPS: Ms = 2;
/// How long before the queue was seen idle a deadline must have passed for
/// its consequence to be owed (timer rounds, the schedule's poll, a retry).
pub const SLACK: Ms = 3;

/// A delayed message joins its queue when it falls due, or later: the
/// schedule holds a due message back while the queue's memory is taken by
/// messages its consumers cannot take yet (it moves in once they can, which
/// the head-of-line check holds it to). So it is ordered after every message
/// sent before its due time, and against nothing sent after.
pub const DUE_LATENESS: Ms = Ms::MAX;

/// The invariants the model checks; a violation names one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Invariant {
    /// Everything sent is acked, dead-lettered, expired or still held; nothing
    /// comes out that was never sent; durable messages survive a restart.
    NoLoss,
    /// A message in flight, acked or gone is never delivered again.
    NoDuplicate,
    /// Delivery counts: +1 per delivery, released and undeliverable-here do not count.
    DeliveryCount,
    /// Within a group, nothing newer while an older message is available or waiting.
    GroupOrder,
    /// On an exclusive queue, ungrouped messages go out in queue order (by
    /// priority, then arrival): one that came back, from a consumer that left
    /// or settled it, goes before newer ones of its priority (and may go
    /// before older ones still on disk).
    QueueOrder,
    /// A grouped message goes only to its group's owner.
    GroupOwner,
    /// An idle queue leaves no consumer with credit beside a message it may take.
    HeadOfLine,
    /// Only the exclusive consumer receives.
    Exclusive,
    /// Nothing before the dispatch gate opens.
    DispatchGate,
    /// No more deliveries than credit.
    Credit,
    /// A consumer receives only what its selector matches.
    Selector,
    /// Undeliverable-here: not to the consumer that refused it.
    NotHere,
    /// Nothing before its due time or redelivery delay.
    Early,
    /// Nothing after its expiry; expired messages go to the expiry address.
    Expired,
    /// Dead-lettering exactly when the attempts are used up or it is rejected.
    DeadLetter,
    /// Browsers see every available message once, in arrival order, and take nothing.
    Browser,
    /// Non-durable messages are gone after a restart.
    Restart,
    /// The queue settles down between operations.
    Quiescence,
    /// The queue's memory budget holds exactly the bytes of the messages it
    /// keeps in memory (besides those on their way to disk): every way a
    /// message leaves gives its bytes back.
    Memory,
    /// A delay over `max_message_delay`, or a transaction over its limits, is
    /// refused (the delay clamped, if so set); nothing within them is.
    Limit,
}

#[derive(Debug, Clone)]
pub struct Violation {
    pub invariant: Invariant,
    pub detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}: {}", self.invariant, self.detail)
    }
}

pub type Check = Result<(), Violation>;

fn fail(invariant: Invariant, detail: String) -> Check {
    Err(Violation { invariant, detail })
}

/// When something happened: at some moment within `lo..=hi`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub lo: Ms,
    pub hi: Ms,
}

/// The queue settings the model needs, in the spec's terms.
#[derive(Debug, Clone)]
pub struct ModelSettings {
    pub exclusive: bool,
    pub consumers_before_dispatch: u32,
    /// `None` waits without a time limit; `Some(0)` does not wait.
    pub delay_before_dispatch: Option<Ms>,
    pub redelivery_delay: Ms,
    /// The n-th failed attempt waits `redelivery_delay * multiplier^(n-1)`...
    pub redelivery_multiplier: f64,
    /// ...at most this long (but never less than `redelivery_delay`).
    pub max_redelivery_delay: Ms,
    /// 0: unlimited.
    pub max_delivery_attempts: u32,
    pub group_buckets: i32,
    pub durable: bool,
    pub group_rebalance: bool,
    /// A rebalance leaves a group whose old owner holds some of its messages
    /// to nobody until they are settled.
    pub group_rebalance_pause_dispatch: bool,
}

/// A run-time change of the settings the model keeps; `None` leaves one.
#[derive(Debug, Clone, Default)]
pub struct ModelChange {
    pub exclusive: Option<bool>,
    pub gate: Option<(u32, Option<Ms>)>,
    pub redelivery_delay: Option<Ms>,
    pub max_delivery_attempts: Option<u32>,
    /// Turned on, it rebalances the groups at once, as a consumer's arrival does.
    pub group_rebalance: Option<bool>,
}

/// A message as sent.
#[derive(Debug, Clone)]
pub struct Sent {
    pub group: Option<Arc<str>>,
    /// `JMSXGroupSeq = -1`: unbinds its group once delivered.
    pub closes_group: bool,
    pub durable: bool,
    /// The property selectors look at.
    pub color: i64,
    /// 0-9, higher first among ungrouped messages.
    pub priority: u8,
    /// When it falls due: the core measures a delay it resolves itself (the
    /// queue's default, a delay property, a clamp) from its own clock during
    /// the send, so only within a span.
    pub due: Option<Span>,
    pub expires: Option<Ms>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreditKind {
    /// A prefetch window: settling refills it, up to the window.
    Window(u32),
    /// Explicit grants only (AMQP link credit).
    Explicit,
}

#[derive(Debug, Clone)]
pub struct ConsumerSpec {
    pub credit: CreditKind,
    pub priority: i32,
    /// Matches messages whose color is this.
    pub selector: Option<i64>,
    pub browser: bool,
}

/// How a delivery is settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settle {
    Ack,
    /// NACK / modified delivery-failed: counts an attempt.
    Failed,
    /// AMQP released: does not count.
    Unused,
    /// Modified undeliverable-here: does not count, not to this consumer again.
    NotHere,
    /// Rejected: dead-lettered at once.
    Reject,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Place {
    /// In the queue, available from some moment in `not_before` (due time,
    /// redelivery delay). `since` is the event at which it came (back).
    Held {
        not_before: Option<Span>,
        since: u64,
    },
    InFlight {
        consumer: Cid,
        since: u64,
    },
    Acked,
    DeadLettered,
    Expired,
    /// Non-durable, at a restart.
    Lost,
}

/// When a message joined the queue, for "older than": an immediate send at
/// its call (`order` ranks those exactly), a delayed one at its due time.
#[derive(Debug, Clone, Copy)]
struct Arrival {
    lo: Ms,
    hi: Ms,
    order: Option<u64>,
}

impl Arrival {
    /// Definitely joined before `other`; near-simultaneous is neither.
    fn before(&self, other: &Arrival) -> bool {
        match (self.order, other.order) {
            (Some(a), Some(b)) => a < b,
            _ => self.hi < other.lo,
        }
    }
}

#[derive(Debug, Clone)]
struct Msg {
    sent: Sent,
    durable: bool,
    lane: Option<Arc<str>>,
    arrival: Arrival,
    /// Deliveries that count, as the core should report on the last one.
    count: u32,
    /// False after a restart until the next delivery (counts are not persisted per delivery).
    count_known: bool,
    /// The last consumer that answered undeliverable-here.
    refused_last: Option<Cid>,
    refused_by: BTreeSet<Cid>,
    place: Place,
    dead_seen: bool,
    /// Delivered and given back (settled other than by an ack, or its
    /// consumer left): it may go ahead of older messages on disk.
    returned: bool,
}

impl Msg {
    /// Expired for the whole of `span`.
    fn surely_expired(&self, at: Ms) -> bool {
        self.sent.expires.is_some_and(|e| e + EPS <= at)
    }

    /// Not expired at any moment up to `at`.
    fn surely_live(&self, at: Ms) -> bool {
        self.sent.expires.is_none_or(|e| e > at + EPS)
    }
}

#[derive(Debug, Clone)]
struct Consumer {
    spec: ConsumerSpec,
    credit: u32,
    attached: u64,
    attached_at: Ms,
    /// Browsers: what they were shown.
    shown: BTreeSet<MsgId>,
}

/// One queue's state as the spec defines it.
#[derive(Debug)]
pub struct Model {
    settings: ModelSettings,
    lanes: GroupTable,
    msgs: Vec<Msg>,
    consumers: BTreeMap<Cid, Consumer>,
    owners: HashMap<Arc<str>, Cid>,
    /// Groups taken from a consumer (by undeliverable-here, or by a rebalance
    /// that pauses dispatch) while it still held older messages of them:
    /// nobody gets them until those are settled.
    paused: HashMap<Arc<str>, Cid>,
    exclusive: Option<Cid>,
    /// The dispatch gate was opened by the consumer count (stays open until
    /// the queue has no consumers).
    gate_opened: bool,
    /// A run-time change met a gate whose delay ran out as it was made: its
    /// timer may or may not have opened it first, so whether it is open is
    /// unknown until the queue has no consumers.
    gate_unknown: bool,
    /// Paused by management: nothing is dispatched to consumers (browsers
    /// still see the queue) until it is resumed. Stored: a restart keeps it.
    dispatch_paused: bool,
    /// When the first consumer of this round attached (the gate's delay runs from it).
    first_attach: Option<Span>,
    event: u64,
    sends: u64,
}

impl Model {
    pub fn new(settings: ModelSettings) -> Self {
        Self {
            lanes: GroupTable::new(settings.group_buckets),
            settings,
            msgs: Vec::new(),
            consumers: BTreeMap::new(),
            owners: HashMap::new(),
            paused: HashMap::new(),
            exclusive: None,
            gate_opened: false,
            gate_unknown: false,
            dispatch_paused: false,
            first_attach: None,
            event: 0,
            sends: 0,
        }
    }

    fn tick(&mut self) -> u64 {
        self.event += 1;
        self.event
    }

    pub fn message_count(&self) -> usize {
        self.msgs.len()
    }

    pub fn is_browser(&self, cid: Cid) -> bool {
        self.consumers.get(&cid).is_some_and(|c| c.spec.browser)
    }

    /// What `cid` holds unsettled, in the order it received it.
    pub fn in_flight_of(&self, cid: Cid) -> Vec<MsgId> {
        let mut held: Vec<(u64, MsgId)> = self
            .msgs
            .iter()
            .enumerate()
            .filter_map(|(id, m)| match m.place {
                Place::InFlight { consumer, since } if consumer == cid => Some((since, id)),
                _ => None,
            })
            .collect();
        held.sort_unstable();
        held.into_iter().map(|(_, id)| id).collect()
    }

    /// The latest time any held message becomes available or expires: after
    /// it nothing in the queue is waiting for the clock.
    pub fn last_deadline(&self) -> Ms {
        let mut last = self.first_attach.map_or(0, |f| f.hi)
            + self.settings.delay_before_dispatch.unwrap_or(0);
        for m in &self.msgs {
            if let Place::Held { not_before, .. } = m.place {
                last = last
                    .max(not_before.map_or(0, |nb| nb.hi))
                    .max(m.sent.expires.unwrap_or(0));
            }
        }
        last
    }

    pub fn send(&mut self, sent: Sent, span: Span) -> MsgId {
        let lane = sent.group.as_ref().and_then(|g| self.lanes.lane_of(g));
        let arrival = match sent.due {
            Some(due) => Arrival {
                lo: due.lo,
                hi: due.hi.saturating_add(DUE_LATENESS),
                order: None,
            },
            None => {
                self.sends += 1;
                Arrival {
                    lo: span.lo,
                    hi: span.hi,
                    order: Some(self.sends),
                }
            }
        };
        let since = self.tick();
        self.msgs.push(Msg {
            durable: sent.durable || self.settings.durable,
            place: Place::Held {
                not_before: sent.due,
                since,
            },
            sent,
            lane,
            arrival,
            count: 0,
            count_known: true,
            refused_last: None,
            refused_by: BTreeSet::new(),
            dead_seen: false,
            returned: false,
        });
        self.msgs.len() - 1
    }

    fn active(&self) -> impl Iterator<Item = (&Cid, &Consumer)> {
        self.consumers.iter().filter(|(_, c)| !c.spec.browser)
    }

    /// `cid` attached some time in `at`.
    pub fn subscribe(&mut self, cid: Cid, spec: ConsumerSpec, at: Span) {
        let attached = self.tick();
        let browser = spec.browser;
        let credit = match spec.credit {
            CreditKind::Window(w) => w,
            CreditKind::Explicit => 0,
        };
        if !browser && self.active().count() == 0 {
            self.first_attach = Some(at);
        }
        self.consumers.insert(
            cid,
            Consumer {
                spec,
                credit,
                attached,
                attached_at: at.lo,
                shown: BTreeSet::new(),
            },
        );
        if browser {
            return;
        }
        if self.settings.exclusive && self.exclusive.is_none() {
            self.exclusive = Some(cid);
        }
        let wanted = self.settings.consumers_before_dispatch as usize;
        if wanted > 0 && self.active().count() >= wanted {
            self.gate_opened = true;
        }
        if self.settings.group_rebalance {
            self.rebalance();
        }
    }

    /// Every group binding is released; with `group_rebalance_pause_dispatch`
    /// a group with messages in flight waits until they are settled.
    fn rebalance(&mut self) {
        if self.settings.group_rebalance_pause_dispatch {
            for (lane, owner) in &self.owners {
                let busy = self.msgs.iter().any(|m| {
                    m.lane.as_ref() == Some(lane) && matches!(m.place, Place::InFlight { .. })
                });
                if busy {
                    self.paused.insert(lane.clone(), *owner);
                }
            }
        }
        self.owners.clear();
    }

    /// Management paused (or resumed) dispatch.
    pub fn set_paused(&mut self, paused: bool) {
        self.dispatch_paused = paused;
    }

    /// When the gate opens: `Some` span of 0 open now, `Some(t)` within t,
    /// `None` not by time.
    fn gate_opens_at(&self) -> Option<Span> {
        if self.settings.consumers_before_dispatch == 0 || self.gate_opened {
            return Some(Span { lo: 0, hi: 0 });
        }
        match (self.first_attach, self.settings.delay_before_dispatch) {
            (Some(first), Some(delay)) => Some(Span {
                lo: first.lo + delay,
                hi: first.hi + delay,
            }),
            _ => None,
        }
    }

    /// Management changed settings some time in `at`; `None`
    /// leaves one as it is. Exclusive on: the consumer the queue would move to
    /// takes it; off: everyone receives. The gate: a queue that was
    /// dispatching goes on (a gate whose delay ran out before `timers_ran`,
    /// when the queue's timers last had their turn, is open: its timer opened
    /// it); one that was waiting waits under the new rule, and opens at once
    /// if enough consumers are attached. Group rebalancing turned on
    /// rebalances now.
    pub fn reconfigure(&mut self, change: &ModelChange, at: Span, timers_ran: Ms) {
        let s = &mut self.settings;
        if let Some(exclusive) = change.exclusive {
            s.exclusive = exclusive;
        }
        if let Some(d) = change.redelivery_delay {
            s.redelivery_delay = d;
        }
        if let Some(max) = change.max_delivery_attempts {
            s.max_delivery_attempts = max;
        }
        let old_count = s.consumers_before_dispatch;
        let old_opening = self.gate_opens_at();
        let s = &mut self.settings;
        if let Some((count, delay)) = change.gate {
            s.consumers_before_dispatch = count;
            s.delay_before_dispatch = delay;
        }
        if let Some(on) = change.group_rebalance {
            let was = std::mem::replace(&mut s.group_rebalance, on);
            if on && !was {
                self.rebalance();
            }
        }
        self.exclusive = match self.settings.exclusive {
            true => self.exclusive.or_else(|| self.first_active()),
            false => None,
        };
        let active = self.active().count();
        let count = self.settings.consumers_before_dispatch;
        if active > 0 {
            match old_opening {
                Some(opens) if opens.hi > 0 && opens.hi + SLACK <= timers_ran => {
                    self.gate_opened = true
                }
                Some(opens) if change.gate.is_some() && opens.hi > 0 && opens.lo <= at.hi + EPS => {
                    self.gate_unknown = true
                }
                _ => {}
            }
            if old_count == 0 {
                self.gate_opened = true;
            }
            if !self.gate_opened && count > 0 {
                if active >= count as usize {
                    self.gate_opened = true;
                } else {
                    self.first_attach = self.first_attach.or(Some(at));
                }
            }
        }
    }

    /// The consumer an exclusive queue moves to: the highest priority, the
    /// earliest of those.
    fn first_active(&self) -> Option<Cid> {
        self.active()
            .max_by_key(|(_, c)| (c.spec.priority, std::cmp::Reverse(c.attached)))
            .map(|(cid, _)| *cid)
    }

    /// AMQP flow with an absolute link-credit.
    pub fn set_credit(&mut self, cid: Cid, n: u32) {
        if let Some(c) = self.consumers.get_mut(&cid) {
            c.credit = n;
        }
    }

    /// `cid` drained (the queue had been idle since `idle_from`, up to `now`)
    /// and `dropped` credit was left: nothing it may take can have been
    /// available. Its credit is then zero.
    pub fn drained(&mut self, cid: Cid, dropped: u32, idle_from: Ms, now: Ms) -> Check {
        let credit = self.consumers.get(&cid).map_or(0, |c| c.credit);
        if dropped != credit {
            return fail(
                Invariant::Credit,
                format!("c{cid} drained {dropped} credit, but had {credit} left"),
            );
        }
        if dropped > 0 {
            if let Some(id) = self.takeable(cid, idle_from, now) {
                return fail(
                    Invariant::HeadOfLine,
                    format!(
                        "c{cid} drained {dropped} credit while m{id}, which it may take, waits"
                    ),
                );
            }
        }
        self.set_credit(cid, 0);
        Ok(())
    }

    pub fn has_explicit_credit(&self, cid: Cid) -> bool {
        self.consumers
            .get(&cid)
            .is_some_and(|c| c.spec.credit == CreditKind::Explicit)
    }

    pub fn add_credit(&mut self, cid: Cid, n: u32) {
        if let Some(c) = self.consumers.get_mut(&cid) {
            c.credit = c.credit.saturating_add(n);
        }
    }

    /// The queue pushed `msg` to `cid` with delivery count `count`, some time in `span`.
    pub fn deliver(&mut self, cid: Cid, id: MsgId, count: u32, span: Span) -> Check {
        let Some(consumer) = self.consumers.get(&cid) else {
            return fail(
                Invariant::NoDuplicate,
                format!("m{id} delivered to c{cid}, which is gone"),
            );
        };
        if consumer.spec.browser {
            return self.browse(cid, id, span);
        }
        let Some(m) = self.msgs.get(id) else {
            return fail(Invariant::NoLoss, format!("m{id} was never sent"));
        };
        let not_before = match &m.place {
            Place::Held { not_before, .. } => *not_before,
            Place::InFlight { consumer, .. } => {
                return fail(
                    Invariant::NoDuplicate,
                    format!("m{id} delivered to c{cid} while in flight to c{consumer}"),
                )
            }
            Place::Acked => {
                return fail(
                    Invariant::NoDuplicate,
                    format!("m{id} delivered to c{cid} after it was acked"),
                )
            }
            Place::DeadLettered => {
                return fail(
                    Invariant::DeadLetter,
                    format!("m{id} delivered to c{cid} after it was dead-lettered"),
                )
            }
            Place::Expired => {
                return fail(
                    Invariant::Expired,
                    format!("m{id} delivered to c{cid} after it went to the expiry address"),
                )
            }
            Place::Lost => {
                return fail(
                    Invariant::Restart,
                    format!("non-durable m{id} delivered to c{cid} after a restart"),
                )
            }
        };
        if let Some(nb) = not_before {
            if span.hi + EPS < nb.lo {
                return fail(
                    Invariant::Early,
                    format!(
                        "m{id} delivered to c{cid} at {} ms, due at {}..={}",
                        span.hi, nb.lo, nb.hi
                    ),
                );
            }
        }
        if m.surely_expired(span.lo) {
            return fail(
                Invariant::Expired,
                format!("m{id} delivered to c{cid} after its expiry"),
            );
        }
        if consumer.credit == 0 {
            return fail(
                Invariant::Credit,
                format!("m{id} delivered to c{cid}, which has no credit"),
            );
        }
        if consumer.spec.selector.is_some_and(|s| s != m.sent.color) {
            return fail(
                Invariant::Selector,
                format!(
                    "m{id} (color {}) delivered to c{cid}, whose selector rejects it",
                    m.sent.color
                ),
            );
        }
        if m.refused_last == Some(cid) {
            return fail(
                Invariant::NotHere,
                format!("m{id} delivered again to c{cid}, which answered undeliverable-here"),
            );
        }
        if self.settings.exclusive && self.exclusive != Some(cid) {
            return fail(
                Invariant::Exclusive,
                format!(
                    "m{id} delivered to c{cid} while c{:?} is the exclusive consumer",
                    self.exclusive
                ),
            );
        }
        if self.dispatch_paused {
            return fail(
                Invariant::DispatchGate,
                format!("m{id} delivered to c{cid} while the queue is paused"),
            );
        }
        match self.gate_opens_at() {
            _ if self.gate_unknown => {}
            Some(at) if at.lo <= span.hi + EPS => {}
            at => {
                return fail(
                    Invariant::DispatchGate,
                    format!(
                        "m{id} delivered to c{cid} with {} of {} consumers attached, gate opening at {at:?}",
                        self.active().count(),
                        self.settings.consumers_before_dispatch
                    ),
                )
            }
        }
        if let Some(lane) = &m.lane {
            if self.lane_paused(lane) {
                return fail(
                    Invariant::GroupOwner,
                    format!("m{id} of lane {lane:?} delivered to c{cid} while its old owner still holds older messages of it"),
                );
            }
            if let Some(owner) = self.owners.get(lane) {
                if *owner != cid {
                    return fail(
                        Invariant::GroupOwner,
                        format!(
                            "m{id} of lane {lane:?} delivered to c{cid}; the lane is c{owner}'s"
                        ),
                    );
                }
            }
            let older = self.msgs.iter().enumerate().find(|(_, o)| {
                o.sent.group == m.sent.group
                    && o.arrival.before(&m.arrival)
                    && matches!(o.place, Place::Held { .. })
                    && o.surely_live(span.hi)
            });
            if let Some((older, o)) = older {
                let Place::Held { not_before, .. } = o.place else {
                    unreachable!()
                };
                return fail(
                    Invariant::GroupOrder,
                    format!(
                        "m{id} of group {:?} delivered to c{cid} while older m{older} of the group waits in the queue (available from {not_before:?})",
                        m.sent.group.as_deref().unwrap_or("")
                    ),
                );
            }
        }
        if self.settings.exclusive && m.lane.is_none() {
            if let Some(older) = self.passed_over(cid, id, span) {
                return fail(
                    Invariant::QueueOrder,
                    format!(
                        "m{id} (priority {}) delivered to the exclusive c{cid} while the older m{older} (priority {}) waits in the queue",
                        m.sent.priority, self.msgs[older].sent.priority
                    ),
                );
            }
        }
        if m.count_known && count != m.count + 1 {
            return fail(
                Invariant::DeliveryCount,
                format!(
                    "m{id} delivered to c{cid} with delivery count {count}, expected {}",
                    m.count + 1
                ),
            );
        }
        if count == 0 {
            return fail(
                Invariant::DeliveryCount,
                format!("m{id} delivered with delivery count 0"),
            );
        }
        let since = self.tick();
        let m = &mut self.msgs[id];
        m.count = count;
        m.count_known = true;
        m.place = Place::InFlight {
            consumer: cid,
            since,
        };
        if let Some(lane) = m.lane.clone() {
            // Delivered: the lane is no longer waiting for an old owner.
            self.paused.remove(&lane);
            if m.sent.closes_group {
                self.owners.remove(&lane);
            } else {
                self.owners.insert(lane, cid);
            }
        }
        if let Some(c) = self.consumers.get_mut(&cid) {
            c.credit -= 1;
        }
        Ok(())
    }

    /// An ungrouped message older than `id` (both sent without a delay) of at
    /// least its priority that `cid` could have had instead all through
    /// `span`. Messages that waited for a delay are left out: their timers
    /// may fire late. So is a message that comes back (`id` returned): it
    /// goes back into memory, ahead of older messages still paged out, as
    /// Artemis puts a returned message back at the head of its queue.
    fn passed_over(&self, cid: Cid, id: MsgId, span: Span) -> Option<MsgId> {
        let m = &self.msgs[id];
        let consumer = self.consumers.get(&cid)?;
        m.arrival.order?;
        if m.returned {
            return None;
        }
        self.msgs.iter().enumerate().find_map(|(oid, o)| {
            let waiting_in_queue = matches!(
                o.place,
                Place::Held {
                    not_before: None,
                    ..
                }
            );
            let older = o.arrival.order.is_some() && o.arrival.before(&m.arrival);
            let may_take = consumer.spec.selector.is_none_or(|s| s == o.sent.color)
                && o.refused_last != Some(cid);
            (oid != id
                && o.lane.is_none()
                && waiting_in_queue
                && older
                && o.sent.priority >= m.sent.priority
                && o.surely_live(span.hi)
                && may_take)
                .then_some(oid)
        })
    }

    fn browse(&mut self, cid: Cid, id: MsgId, span: Span) -> Check {
        let Some(m) = self.msgs.get(id) else {
            return fail(Invariant::NoLoss, format!("m{id} was never sent"));
        };
        let browser = &self.consumers[&cid];
        let Place::Held { not_before, .. } = m.place else {
            return fail(
                Invariant::Browser,
                format!(
                    "browser c{cid} shown m{id}, which is not in the queue ({:?})",
                    m.place
                ),
            );
        };
        if not_before.is_some_and(|nb| span.hi + EPS < nb.lo) {
            return fail(
                Invariant::Browser,
                format!("browser c{cid} shown m{id} before it is available ({not_before:?})"),
            );
        }
        if m.surely_expired(span.lo) {
            return fail(
                Invariant::Browser,
                format!("browser c{cid} shown m{id} after its expiry"),
            );
        }
        if browser.credit == 0 {
            return fail(
                Invariant::Credit,
                format!("browser c{cid} shown m{id} without credit"),
            );
        }
        if browser.spec.selector.is_some_and(|s| s != m.sent.color) {
            return fail(
                Invariant::Selector,
                format!("browser c{cid} shown m{id}, which its selector rejects"),
            );
        }
        if browser.shown.contains(&id) {
            return fail(
                Invariant::Browser,
                format!("browser c{cid} shown m{id} twice"),
            );
        }
        if let Some(newer) = browser
            .shown
            .iter()
            .find(|s| m.arrival.before(&self.msgs[**s].arrival))
        {
            return fail(
                Invariant::Browser,
                format!("browser c{cid} shown m{id} after the newer m{newer}"),
            );
        }
        let browser = self.consumers.get_mut(&cid).expect("checked above");
        browser.shown.insert(id);
        browser.credit -= 1;
        Ok(())
    }

    /// `cid` settles `id` (which it holds) some time in `at`.
    pub fn settle(&mut self, cid: Cid, id: MsgId, how: Settle, at: Span) {
        let since = self.tick();
        self.msgs[id].returned |= how != Settle::Ack;
        if let Some(c) = self.consumers.get_mut(&cid) {
            if let CreditKind::Window(w) = c.spec.credit {
                c.credit = (c.credit + 1).min(w);
            }
        }
        match how {
            Settle::Ack => self.msgs[id].place = Place::Acked,
            Settle::Failed => self.return_failed(id, at, since),
            Settle::Unused => {
                let m = &mut self.msgs[id];
                m.count = m.count.saturating_sub(1);
                m.place = Place::Held {
                    not_before: None,
                    since,
                };
            }
            Settle::NotHere => {
                let m = &mut self.msgs[id];
                m.count = m.count.saturating_sub(1);
                m.refused_last = Some(cid);
                m.refused_by.insert(cid);
                m.place = Place::Held {
                    not_before: None,
                    since,
                };
                if let Some(lane) = m.lane.clone() {
                    if self.owners.get(&lane) == Some(&cid) {
                        self.owners.remove(&lane);
                        let holds_more = self.msgs.iter().any(|o| {
                            o.lane.as_ref() == Some(&lane)
                                && matches!(o.place, Place::InFlight { consumer, .. } if consumer == cid)
                        });
                        if holds_more {
                            self.paused.insert(lane, cid);
                        }
                    }
                }
            }
            Settle::Reject => self.msgs[id].place = Place::DeadLettered,
        }
    }

    /// Whether a group taken by undeliverable-here still waits: its old owner
    /// held more of it then, and messages of it are still in flight (with a
    /// group closed by JMSXGroupSeq -1 and bound again, not only the owner's).
    fn lane_paused(&self, lane: &str) -> bool {
        self.paused.contains_key(lane)
            && self.msgs.iter().any(|m| {
                m.lane.as_deref() == Some(lane) && matches!(m.place, Place::InFlight { .. })
            })
    }

    /// A failed attempt (NACK, consumer close, connection drop) some time in
    /// `at`: the core times the redelivery delay from its own clock then.
    fn return_failed(&mut self, id: MsgId, at: Span, since: u64) {
        let max = self.settings.max_delivery_attempts;
        let delay = self.redelivery_delay(self.msgs[id].count);
        let m = &mut self.msgs[id];
        m.returned = true;
        m.place = if max > 0 && m.count >= max {
            Place::DeadLettered
        } else {
            Place::Held {
                not_before: (delay > 0).then_some(Span {
                    lo: at.lo + delay,
                    hi: at.hi + delay,
                }),
                since,
            }
        };
    }

    /// How long a message waits after its `attempts`-th delivery failed.
    fn redelivery_delay(&self, attempts: u32) -> Ms {
        let s = &self.settings;
        let grown = s.redelivery_delay as f64
            * s.redelivery_multiplier
                .powi(attempts.saturating_sub(1) as i32);
        (grown as Ms).min(s.max_redelivery_delay.max(s.redelivery_delay))
    }

    /// `cid` detaches (closed, or its connection dropped) some time in `at`.
    pub fn close(&mut self, cid: Cid, at: Span) {
        let since = self.tick();
        let Some(gone) = self.consumers.remove(&cid) else {
            return;
        };
        if gone.spec.browser {
            return;
        }
        self.owners.retain(|_, owner| *owner != cid);
        for id in self.in_flight_of(cid) {
            self.return_failed(id, at, since);
        }
        if self.exclusive == Some(cid) {
            self.exclusive = self.first_active();
        }
        if self.active().count() == 0 {
            self.gate_opened = false;
            self.gate_unknown = false;
            self.first_attach = None;
        }
    }

    /// The broker was closed and opened again (every consumer closed first).
    pub fn restart(&mut self) {
        debug_assert!(self.consumers.is_empty());
        for m in &mut self.msgs {
            if matches!(m.place, Place::Held { .. }) && !m.durable {
                m.place = Place::Lost;
            }
            m.count_known = false;
        }
        self.owners.clear();
        self.paused.clear();
        self.exclusive = None;
        self.gate_opened = false;
        self.gate_unknown = false;
        self.first_attach = None;
    }

    /// `id` arrived at the dead-letter address.
    pub fn dead_lettered(&mut self, id: MsgId) -> Check {
        let Some(m) = self.msgs.get_mut(id) else {
            return fail(Invariant::NoLoss, format!("m{id} was never sent"));
        };
        if m.place != Place::DeadLettered {
            return fail(
                Invariant::DeadLetter,
                format!("m{id} reached the dead-letter address while {:?}", m.place),
            );
        }
        m.dead_seen = true;
        Ok(())
    }

    /// `id` arrived at the expiry address some time in `span`.
    pub fn expired(&mut self, id: MsgId, span: Span) -> Check {
        let Some(m) = self.msgs.get_mut(id) else {
            return fail(Invariant::NoLoss, format!("m{id} was never sent"));
        };
        if m.place == Place::Expired {
            return Ok(()); // redelivered by the expiry queue after a restart
        }
        let Place::Held { not_before, .. } = m.place else {
            return fail(
                Invariant::Expired,
                format!("m{id} reached the expiry address while {:?}", m.place),
            );
        };
        // Expired now, or certain to be before it could be delivered: due at
        // or after its expiry, by the core's clock, which read the due time
        // some time in `nb` (a message that expires exactly as it falls due
        // is never delivered).
        let never_deliverable = m
            .sent
            .expires
            .is_some_and(|e| e <= span.hi + EPS || not_before.is_some_and(|nb| e <= nb.hi + EPS));
        if !never_deliverable {
            return fail(
                Invariant::Expired,
                format!("m{id} reached the expiry address before its expiry"),
            );
        }
        m.place = Place::Expired;
        Ok(())
    }

    /// The queue has been idle since `idle_from` (up to `now`): nothing it
    /// owes anyone may still be missing.
    pub fn check_idle(&self, idle_from: Ms, now: Ms) -> Check {
        for (id, m) in self.msgs.iter().enumerate() {
            if m.place == Place::DeadLettered && !m.dead_seen {
                return fail(
                    Invariant::DeadLetter,
                    format!("m{id} was dead-lettered but never reached the dead-letter address"),
                );
            }
        }
        self.check_head_of_line(idle_from, now)?;
        self.check_browsers(now)
    }

    /// Surely available all through `idle_from..=now`.
    fn surely_available(&self, m: &Msg, idle_from: Ms, now: Ms) -> bool {
        match m.place {
            Place::Held { not_before, .. } => {
                not_before.is_none_or(|nb| nb.hi + SLACK <= idle_from) && m.surely_live(now)
            }
            _ => false,
        }
    }

    fn check_head_of_line(&self, idle_from: Ms, now: Ms) -> Check {
        for (cid, c) in self.active() {
            if c.credit == 0 {
                continue;
            }
            if let Some(id) = self.takeable(*cid, idle_from, now) {
                let m = &self.msgs[id];
                return fail(
                    Invariant::HeadOfLine,
                    format!(
                        "idle queue: c{cid} has credit {} and may take m{id} (lane {:?}), but nothing came",
                        c.credit, m.lane
                    ),
                );
            }
        }
        Ok(())
    }

    /// A message `cid` could take, given credit, from a queue idle since
    /// `idle_from` (up to `now`): the gate open, the message at the head of
    /// its lane and surely available, for `cid` by every rule.
    fn takeable(&self, cid: Cid, idle_from: Ms, now: Ms) -> Option<MsgId> {
        let c = self.consumers.get(&cid).filter(|c| !c.spec.browser)?;
        let gate_open = !self.dispatch_paused
            && !self.gate_unknown
            && self
                .gate_opens_at()
                .is_some_and(|at| at.hi == 0 || at.hi + SLACK <= idle_from);
        if !gate_open || (self.settings.exclusive && self.exclusive != Some(cid)) {
            return None;
        }
        // Each lane offers its oldest message still in the queue; a lane
        // whose oldest is waiting (or whose order is unclear) offers nothing.
        let mut offered: Vec<MsgId> = Vec::new();
        let mut lanes: BTreeMap<&str, Vec<MsgId>> = BTreeMap::new();
        for (id, m) in self.msgs.iter().enumerate() {
            let Place::Held { not_before, .. } = m.place else {
                continue;
            };
            // An expired message leaves its lane when the queue meets it: a
            // returned one waiting out its redelivery delay still holds its
            // group until then.
            let waiting = not_before.is_some_and(|nb| nb.hi + SLACK > idle_from);
            if m.surely_expired(idle_from) && !waiting {
                continue;
            }
            match &m.lane {
                None => offered.push(id),
                Some(lane) => lanes.entry(lane).or_default().push(id),
            }
        }
        for ids in lanes.values() {
            let oldest = ids.iter().find(|a| {
                ids.iter()
                    .all(|b| a == &b || self.msgs[**a].arrival.before(&self.msgs[*b].arrival))
            });
            if let Some(oldest) = oldest {
                offered.push(*oldest);
            }
        }
        offered.into_iter().find(|id| {
            let m = &self.msgs[*id];
            self.surely_available(m, idle_from, now)
                && c.spec.selector.is_none_or(|s| s == m.sent.color)
                && !m.refused_by.contains(&cid)
                && m.lane.as_ref().is_none_or(|l| {
                    !self.lane_paused(l) && self.owners.get(l).is_none_or(|o| *o == cid)
                })
        })
    }

    fn check_browsers(&self, now: Ms) -> Check {
        for (cid, b) in self.consumers.iter().filter(|(_, c)| c.spec.browser) {
            for (id, m) in self.msgs.iter().enumerate() {
                // Owed: in the queue, available, since before the browser came.
                let Place::Held { not_before, since } = m.place else {
                    continue;
                };
                let owed = since < b.attached
                    && not_before.is_none_or(|nb| nb.hi + SLACK <= b.attached_at)
                    && m.surely_live(now)
                    && b.spec.selector.is_none_or(|s| s == m.sent.color)
                    && !b.shown.contains(&id);
                if !owed {
                    continue;
                }
                let passed = b
                    .shown
                    .iter()
                    .any(|s| m.arrival.before(&self.msgs[*s].arrival));
                if b.credit > 0 || passed {
                    return fail(
                        Invariant::Browser,
                        format!(
                            "browser c{cid} (credit {}) was never shown m{id}, in the queue since before it attached{}",
                            b.credit,
                            if passed { " (and it was shown newer ones)" } else { "" }
                        ),
                    );
                }
            }
        }
        Ok(())
    }

    /// After the final drain (every consumer closed, every deadline past, a
    /// fresh consumer took everything): each message has an end.
    pub fn check_accounted(&self) -> Check {
        for (id, m) in self.msgs.iter().enumerate() {
            match &m.place {
                Place::Held { .. } if m.sent.expires.is_some() => {
                    return fail(
                        Invariant::NoLoss,
                        format!(
                            "m{id} (expiry {:?}) neither delivered nor sent to the expiry address",
                            m.sent.expires
                        ),
                    )
                }
                Place::Held { .. } => {
                    return fail(
                        Invariant::NoLoss,
                        format!(
                            "m{id} is still in the queue but never delivered (durable: {})",
                            m.durable
                        ),
                    )
                }
                Place::InFlight { consumer, .. } => {
                    return fail(
                        Invariant::NoLoss,
                        format!("m{id} still in flight to c{consumer} after the drain"),
                    )
                }
                Place::DeadLettered if !m.dead_seen => {
                    return fail(
                        Invariant::DeadLetter,
                        format!("m{id} never reached the dead-letter address"),
                    )
                }
                _ => {}
            }
        }
        Ok(())
    }
}
