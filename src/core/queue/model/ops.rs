//! What a test case is: queue settings and a sequence of operations, with
//! proptest strategies that shrink towards fewer, plainer operations.
//!
//! Operations name consumers and in-flight messages by a small number taken
//! modulo whatever exists when the operation runs, so a shrunk sequence
//! (one with operations removed) still means something.

use super::reference::{ConsumerSpec, CreditKind};
use crate::core::memory::AddressFullPolicy;
use proptest::prelude::*;
use std::time::Duration;

/// The settings a case runs with (the rest are the queue defaults).
#[derive(Debug, Clone)]
pub struct CaseSettings {
    pub max_memory_messages: usize,
    /// A byte limit of a few messages (each costs about 500 bytes), so
    /// paging by bytes happens as often as by count; `None`: none.
    pub max_size_bytes: Option<u64>,
    pub exclusive: bool,
    pub consumers_before_dispatch: u32,
    /// `None` waits without a time limit, `Some(ZERO)` does not wait.
    pub delay_before_dispatch: Option<Duration>,
    pub redelivery_delay: Duration,
    /// Each further failed attempt waits this many times longer...
    pub redelivery_multiplier: f64,
    /// ...up to this (never below `redelivery_delay`).
    pub max_redelivery_delay: Duration,
    /// 0: unlimited.
    pub max_delivery_attempts: u32,
    pub group_buckets: i32,
    pub durable: bool,
    pub group_rebalance: bool,
    /// With `group_rebalance`: a group whose old owner still holds some of
    /// its messages waits until they are settled.
    pub group_rebalance_pause_dispatch: bool,
    /// A send delayed longer is refused, or with `clamp_delays` due at this.
    pub max_message_delay: Duration,
    pub clamp_delays: bool,
    /// The connection's transaction limits: operations, and bytes of
    /// messages (each about 400), one transaction may hold.
    pub max_transaction_ops: usize,
    pub max_transaction_bytes: usize,
    /// Transactions open at once on the connection.
    pub max_open_transactions: usize,
    /// What a send meets while the queue's `max_size_bytes` is reached.
    pub address_full_policy: AddressFullPolicy,
    /// Zaqar's default delay of every send without one of its own.
    pub default_message_delay: Duration,
    /// The properties read as a delay, in milliseconds, in order of
    /// precedence (a subset of [`DELAY_HEADERS`]).
    pub delay_headers: Vec<&'static str>,
}

/// The property names a send may carry a delay in; which of them the queue
/// reads is its `delay_headers`, the others are plain properties.
pub const DELAY_HEADERS: [&str; 2] = ["x-delay", "wait"];

/// A property a send carries that may or may not be read as a delay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DelayProperty {
    /// Index into [`DELAY_HEADERS`].
    pub name: u8,
    pub value: DelayValue,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DelayValue {
    /// An integer property: milliseconds.
    Int(u64),
    /// A string property holding milliseconds.
    Text(u64),
    /// A string that is not a delay (`soon`): a plain property wherever it is.
    Junk,
}

#[derive(Debug, Clone)]
pub struct SendOp {
    /// One of three group ids, or ungrouped.
    pub group: Option<u8>,
    /// Sent with `JMSXGroupSeq = -1`.
    pub closes_group: bool,
    pub delay_ms: Option<u64>,
    pub ttl_ms: Option<u64>,
    pub priority: u8,
    pub durable: bool,
    pub color: i64,
    /// Properties that may be read as a delay, first one first.
    pub delay_properties: Vec<DelayProperty>,
}

/// How a consumer settles one of its deliveries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SettleOp {
    Ack,
    /// STOMP NACK, AMQP modified delivery-failed.
    Nack,
    /// AMQP released.
    Release,
    /// AMQP modified undeliverable-here.
    NotHere,
    /// AMQP rejected.
    Reject,
}

#[derive(Debug, Clone)]
pub enum Op {
    Send(SendOp),
    /// A consumer on connection `conn` (0..3).
    Subscribe {
        conn: u8,
        spec: ConsumerSpec,
    },
    /// Consumer `consumer` (modulo those with deliveries) settles its
    /// delivery `pick` (modulo what it holds).
    Settle {
        consumer: u8,
        pick: u8,
        how: SettleOp,
    },
    AddCredit {
        consumer: u8,
        credit: u32,
    },
    /// Drop the subscription.
    Close {
        consumer: u8,
    },
    /// Close all of one connection's consumers at once.
    DropConnection {
        conn: u8,
    },
    /// Let real time pass (delays, redelivery delays, expiry, the gate's delay).
    Advance {
        ms: u64,
    },
    /// Close the broker and open it again on the same directory.
    Restart,
    /// Management changes the queue's memory limits at run time (stored, so they
    /// outlive a restart): paging changes, what consumers see must not.
    Resize {
        max_memory_messages: usize,
        max_size_bytes: Option<u64>,
    },
    /// A local transaction through the core's transaction API, begun and
    /// ended within the operation.
    Txn(TxnOp),
    /// Management changes other settings at run time (stored, so they outlive
    /// a restart): each applies from the next message, delivery or settlement.
    Reconfigure(Reconfig),
    /// AMQP flow with an absolute link-credit.
    SetCredit {
        consumer: u8,
        credit: u32,
    },
    /// AMQP drain: what is available now is delivered, the rest of the
    /// credit is dropped.
    Drain {
        consumer: u8,
    },
}

/// The settings one run-time change sets; `None` leaves one as it is.
#[derive(Debug, Clone, Default)]
pub struct Reconfig {
    pub exclusive: Option<bool>,
    /// `consumers_before_dispatch` and `delay_before_dispatch` together.
    pub gate: Option<(u32, Option<Duration>)>,
    pub redelivery_delay: Option<Duration>,
    pub max_delivery_attempts: Option<u32>,
    pub default_message_delay: Option<Duration>,
    pub group_rebalance: Option<bool>,
    /// Then paused (`true`) or resumed by management.
    pub paused: Option<bool>,
}

/// Sends and settlements held by one transaction, and how it ends.
#[derive(Debug, Clone)]
pub struct TxnOp {
    /// Transactions the connection opens (and leaves open) before this one:
    /// past `max_open_transactions` a begin is refused.
    pub others_open: u8,
    pub sends: Vec<SendOp>,
    /// As in [`Op::Settle`]; a delivery picked twice is settled once.
    pub settles: Vec<TxnSettle>,
    pub end: TxnEnd,
}

#[derive(Debug, Clone, Copy)]
pub struct TxnSettle {
    pub consumer: u8,
    pub pick: u8,
    /// Acknowledged; otherwise released as failed (a NACK).
    pub ack: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnEnd {
    Commit,
    Rollback,
    /// An operation is refused (as a protocol refuses an unknown ack), then
    /// the client commits anyway: nothing applies.
    RefusedThenCommit,
    /// The consumer of the first settlement leaves before the commit, which
    /// then fails: nothing applies.
    ConsumerLeavesThenCommit,
}

/// The most consumers attached at once; further subscribes are skipped.
pub const MAX_CONSUMERS: usize = 5;
pub const CONNECTIONS: u8 = 3;

/// Which behaviours a property test exercises: one family at a time names
/// the broken area when it fails, `Everything` finds the interactions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// Groups, returns, selectors, browsers, dead-lettering; all in memory.
    Plain,
    /// A tiny `max_memory_messages`: paging all the time.
    Paging,
    /// Delayed sends, time-to-live, redelivery delays.
    Timing,
    Exclusive,
    /// `consumers_before_dispatch` / `delay_before_dispatch`.
    Gates,
    /// Broker restarts, durable and non-durable messages.
    Restart,
    /// Settings changed at run time, memory policies, default delays and
    /// delay properties, set-credit and drain; paging all the time.
    Settings,
    /// Every setting on and off, every operation.
    Everything,
}

impl Family {
    fn timing(self) -> bool {
        matches!(self, Family::Timing | Family::Settings | Family::Everything)
    }

    /// Run-time changes, memory policies and the AMQP credit operations.
    fn settings(self) -> bool {
        matches!(self, Family::Settings | Family::Everything)
    }

    fn restarts(self) -> bool {
        matches!(self, Family::Restart | Family::Everything)
    }
}

/// Settings for a family: its own feature on (or on and off, for
/// `Everything`), the others at their plainest.
pub fn settings(family: Family) -> BoxedStrategy<CaseSettings> {
    let all = family == Family::Everything;
    let paging = all || matches!(family, Family::Paging | Family::Settings);
    let memory = if paging {
        (1usize..=8).boxed()
    } else {
        Just(10_000usize).boxed()
    };
    // `Everything` too: byte limits with every other feature on.
    let max_size_bytes = if paging {
        prop_oneof![Just(None), (600u64..=4_000).prop_map(Some)].boxed()
    } else {
        Just(None).boxed()
    };
    let exclusive = match family {
        Family::Exclusive => Just(true).boxed(),
        Family::Everything => any::<bool>().boxed(),
        _ => Just(false).boxed(),
    };
    let gate = match family {
        Family::Gates => (1u32..=2).boxed(),
        Family::Everything => (0u32..=2).boxed(),
        _ => Just(0u32).boxed(),
    };
    let gate_delay = prop_oneof![
        Just(None),
        Just(Some(Duration::ZERO)),
        (10u64..=30).prop_map(|ms| Some(Duration::from_millis(ms))),
    ];
    // The delay, its multiplier and its cap: 10 ms, then 20 ms (or the cap
    // of 15 ms), 40 ms...
    let redelivery = if family.timing() {
        (
            prop_oneof![Just(Duration::ZERO), Just(Duration::from_millis(10))],
            prop_oneof![Just(1.0f64), Just(2.0)],
            prop_oneof![
                Just(Duration::from_millis(15)),
                Just(Duration::from_secs(600))
            ],
        )
            .boxed()
    } else {
        Just((Duration::ZERO, 1.0f64, Duration::from_secs(600))).boxed()
    };
    // 25 ms: some of the sends' delays (5-40 ms) are over it.
    let max_delay = if family.timing() {
        (
            prop_oneof![
                2 => Just(Duration::from_secs(900)),
                1 => Just(Duration::from_millis(25))
            ],
            any::<bool>(),
        )
            .boxed()
    } else {
        Just((Duration::from_secs(900), false)).boxed()
    };
    // A transaction holds up to 6 operations: small limits refuse some.
    let txn_limits = prop_oneof![
        3 => Just((100_000usize, 64usize << 20)),
        1 => (1usize..=4, 1_000usize..=3_000),
    ];
    let durable = if all || family == Family::Restart {
        any::<bool>().boxed()
    } else {
        Just(false).boxed()
    };
    let extra = if family.settings() {
        (
            1usize..=3,
            prop_oneof![
                2 => Just(AddressFullPolicy::Page),
                1 => Just(AddressFullPolicy::Block),
                2 => Just(AddressFullPolicy::Fail),
                2 => Just(AddressFullPolicy::Drop),
            ],
            prop_oneof![
                Just(Duration::ZERO),
                (5u64..=30).prop_map(Duration::from_millis)
            ],
            prop_oneof![
                Just(vec![]),
                Just(vec![DELAY_HEADERS[0]]),
                Just(vec![DELAY_HEADERS[1], DELAY_HEADERS[0]]),
            ],
        )
            .boxed()
    } else {
        Just((64usize, AddressFullPolicy::Page, Duration::ZERO, vec![])).boxed()
    };
    (
        (memory, max_size_bytes),
        exclusive,
        gate,
        gate_delay,
        redelivery,
        prop_oneof![Just(0u32), 2u32..=3],
        prop_oneof![Just(-1i32), Just(0), Just(2)],
        durable,
        (prop::bool::weighted(0.2), any::<bool>()),
        (max_delay, txn_limits),
        extra,
    )
        .prop_map(
            |(
                (max_memory_messages, max_size_bytes),
                exclusive,
                consumers_before_dispatch,
                delay_before_dispatch,
                (redelivery_delay, redelivery_multiplier, max_redelivery_delay),
                max_delivery_attempts,
                group_buckets,
                durable,
                (group_rebalance, group_rebalance_pause_dispatch),
                ((max_message_delay, clamp_delays), (max_transaction_ops, max_transaction_bytes)),
                (max_open_transactions, address_full_policy, default_message_delay, delay_headers),
            )| CaseSettings {
                max_memory_messages,
                exclusive,
                consumers_before_dispatch,
                delay_before_dispatch: if consumers_before_dispatch == 0 {
                    None
                } else {
                    delay_before_dispatch
                },
                redelivery_delay,
                redelivery_multiplier,
                max_redelivery_delay,
                max_delivery_attempts,
                group_buckets,
                durable,
                group_rebalance,
                group_rebalance_pause_dispatch: group_rebalance && group_rebalance_pause_dispatch,
                max_message_delay,
                clamp_delays,
                max_transaction_ops,
                max_transaction_bytes,
                max_open_transactions,
                // FAIL and DROP act only at a byte limit: give them one.
                max_size_bytes: match address_full_policy {
                    AddressFullPolicy::Page | AddressFullPolicy::Block => max_size_bytes,
                    _ => max_size_bytes.or(Some(1_500)),
                },
                address_full_policy,
                default_message_delay,
                delay_headers,
            },
        )
        .boxed()
}

fn delay_property() -> impl Strategy<Value = DelayProperty> {
    (
        0..DELAY_HEADERS.len() as u8,
        prop_oneof![
            (0u64..=40).prop_map(DelayValue::Int),
            (0u64..=40).prop_map(DelayValue::Text),
            Just(DelayValue::Junk),
        ],
    )
        .prop_map(|(name, value)| DelayProperty { name, value })
}

fn send(timing: bool) -> impl Strategy<Value = SendOp> {
    let sometimes = |p: f64| {
        if timing {
            prop::option::weighted(p, 5u64..=40).boxed()
        } else {
            Just(None).boxed()
        }
    };
    let delay_properties = if timing {
        prop_oneof![
            4 => Just(vec![]),
            1 => prop::collection::vec(delay_property(), 1..=2),
        ]
        .boxed()
    } else {
        Just(vec![]).boxed()
    };
    (
        prop::option::weighted(0.6, 0u8..3),
        prop::bool::weighted(0.1),
        sometimes(0.15),
        sometimes(0.1),
        prop_oneof![3 => Just(4u8), 1 => 0u8..=9],
        any::<bool>(),
        0i64..3,
        delay_properties,
    )
        .prop_map(
            |(
                group,
                closes_group,
                delay_ms,
                ttl_ms,
                priority,
                durable,
                color,
                delay_properties,
            )| {
                SendOp {
                    group,
                    closes_group: closes_group && group.is_some(),
                    delay_ms,
                    ttl_ms,
                    priority,
                    durable,
                    color,
                    delay_properties,
                }
            },
        )
}

fn consumer() -> impl Strategy<Value = ConsumerSpec> {
    (
        prop_oneof![6 => (1u32..=4).prop_map(CreditKind::Window), 1 => Just(CreditKind::Explicit)],
        prop_oneof![3 => Just(0i32), 1 => 0i32..=2],
        prop::option::weighted(0.2, 0i64..3),
        prop::bool::weighted(0.1),
    )
        .prop_map(|(credit, priority, selector, browser)| ConsumerSpec {
            credit,
            priority,
            selector,
            browser,
        })
}

fn settle() -> impl Strategy<Value = SettleOp> {
    prop_oneof![
        8 => Just(SettleOp::Ack),
        3 => Just(SettleOp::Nack),
        2 => Just(SettleOp::Release),
        1 => Just(SettleOp::NotHere),
        1 => Just(SettleOp::Reject),
    ]
}

fn txn(timing: bool) -> impl Strategy<Value = TxnOp> {
    let settle =
        (any::<u8>(), any::<u8>(), prop::bool::weighted(0.7)).prop_map(|(consumer, pick, ack)| {
            TxnSettle {
                consumer,
                pick,
                ack,
            }
        });
    let end = prop_oneof![
        5 => Just(TxnEnd::Commit),
        2 => Just(TxnEnd::Rollback),
        1 => Just(TxnEnd::RefusedThenCommit),
        1 => Just(TxnEnd::ConsumerLeavesThenCommit),
    ];
    (
        prop_oneof![4 => Just(0u8), 1 => 1u8..=3],
        prop::collection::vec(send(timing), 0..=3),
        prop::collection::vec(settle, 0..=3),
        end,
    )
        .prop_map(|(others_open, sends, settles, end)| TxnOp {
            others_open,
            sends,
            settles,
            end,
        })
}

fn reconfig() -> impl Strategy<Value = Reconfig> {
    let gate_delay = prop_oneof![
        Just(None),
        Just(Some(Duration::ZERO)),
        (10u64..=30).prop_map(|ms| Some(Duration::from_millis(ms))),
    ];
    (
        prop::option::weighted(0.4, any::<bool>()),
        prop::option::weighted(0.3, (0u32..=2, gate_delay)),
        prop::option::weighted(
            0.3,
            prop_oneof![Just(Duration::ZERO), Just(Duration::from_millis(10))],
        ),
        prop::option::weighted(0.3, prop_oneof![Just(0u32), 1u32..=3]),
        prop::option::weighted(
            0.3,
            prop_oneof![
                Just(Duration::ZERO),
                (5u64..=30).prop_map(Duration::from_millis)
            ],
        ),
        prop::option::weighted(0.3, any::<bool>()),
        prop::option::weighted(0.3, any::<bool>()),
    )
        .prop_map(
            |(
                exclusive,
                gate,
                redelivery_delay,
                max_delivery_attempts,
                default_message_delay,
                group_rebalance,
                paused,
            )| {
                Reconfig {
                    exclusive,
                    gate,
                    redelivery_delay,
                    max_delivery_attempts,
                    default_message_delay,
                    group_rebalance,
                    paused,
                }
            },
        )
}

pub fn op(family: Family) -> impl Strategy<Value = Op> {
    let timing = family.timing();
    let mut arms: Vec<(u32, BoxedStrategy<Op>)> = vec![
        (30, send(timing).prop_map(Op::Send).boxed()),
        (
            10,
            (0..CONNECTIONS, consumer())
                .prop_map(|(conn, spec)| Op::Subscribe { conn, spec })
                .boxed(),
        ),
        (
            25,
            (any::<u8>(), any::<u8>(), settle())
                .prop_map(|(consumer, pick, how)| Op::Settle {
                    consumer,
                    pick,
                    how,
                })
                .boxed(),
        ),
        (
            4,
            (any::<u8>(), 1u32..=3)
                .prop_map(|(consumer, credit)| Op::AddCredit { consumer, credit })
                .boxed(),
        ),
        (
            5,
            any::<u8>()
                .prop_map(|consumer| Op::Close { consumer })
                .boxed(),
        ),
        (
            2,
            (0..CONNECTIONS)
                .prop_map(|conn| Op::DropConnection { conn })
                .boxed(),
        ),
        (
            if family == Family::Plain { 2 } else { 6 },
            (5u64..=40).prop_map(|ms| Op::Advance { ms }).boxed(),
        ),
    ];
    if family.restarts() {
        arms.push((2, Just(Op::Restart).boxed()));
    }
    let max_size_bytes = prop_oneof![Just(None), (600u64..=4_000).prop_map(Some)];
    arms.push((
        2,
        (
            prop_oneof![3 => 1usize..=8, 1 => Just(10_000usize)],
            max_size_bytes,
        )
            .prop_map(|(max_memory_messages, max_size_bytes)| Op::Resize {
                max_memory_messages,
                max_size_bytes,
            })
            .boxed(),
    ));
    arms.push((4, txn(timing).prop_map(Op::Txn).boxed()));
    if family.settings() {
        arms.push((3, reconfig().prop_map(Op::Reconfigure).boxed()));
        arms.push((
            3,
            (any::<u8>(), 0u32..=3)
                .prop_map(|(consumer, credit)| Op::SetCredit { consumer, credit })
                .boxed(),
        ));
        arms.push((
            2,
            any::<u8>()
                .prop_map(|consumer| Op::Drain { consumer })
                .boxed(),
        ));
    }
    prop::strategy::Union::new_weighted(arms)
}

pub fn ops(family: Family, max: usize) -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(op(family), 1..=max)
}
