//! The queue against its model: random cases, and each bug found as a named
//! regression test.

use super::driver;
use super::ops::{
    self, CaseSettings, DelayProperty, DelayValue, Family, Op, Reconfig, SendOp, SettleOp, TxnEnd,
    TxnOp, TxnSettle,
};
use super::reference::{ConsumerSpec, CreditKind};
use crate::core::memory::AddressFullPolicy;
use proptest::prelude::*;
use std::time::Duration;

/// Cases per family unless `PROPTEST_CASES` says otherwise: 2,600 in all,
/// sized for CI's budget of about eight minutes for the model (a release
/// build on two shared cores ran 2,100 cases and the regression tests in
/// about six); `benches/queue-model` runs more, with new seeds.
const DEFAULT_CASES: u32 = 300;
/// The family with everything on finds the interactions: more of it.
const DEFAULT_CASES_EVERYTHING: u32 = 500;
/// Operations per case at most.
const MAX_OPS: usize = 40;

/// The seed of CI's run: the same cases every run, so a red CI is a change
/// in the broker, not a new draw. `benches/queue-model` (which sets
/// `PROPTEST_CASES`) and `PROPTEST_RNG_SEED` draw others.
const CI_SEED: u64 = 0x5745_4952;

fn config(cases: u32) -> ProptestConfig {
    let mut config = ProptestConfig::default();
    if std::env::var_os("PROPTEST_CASES").is_none() {
        config.cases = cases;
        if std::env::var_os("PROPTEST_RNG_SEED").is_none() {
            config.rng_seed = proptest::test_runner::RngSeed::Fixed(CI_SEED);
        }
    }
    if std::env::var_os("PROPTEST_MAX_SHRINK_TIME").is_none() {
        // Failures shrink to a few operations well within this.
        config.max_shrink_time = 20_000;
    }
    config
}

fn check(case: &CaseSettings, ops: &[Op]) -> Result<(), TestCaseError> {
    let (case, ops) = skip_known(case, ops);
    driver::run(&case, &ops).map_err(TestCaseError::fail)
}

/// `QUEUE_MODEL_SKIP=not-here,browser,gate-zero,gates,exclusive,paging,redelivery-delay`:
/// leaves out what a known bug breaks (undeliverable-here becomes released,
/// browsers plain consumers, a gate delay of zero 10 ms, no gates, no
/// exclusive queue, paging off, no redelivery delay), to look for the next
/// bug while the known ones are being fixed.
fn skip_known(case: &CaseSettings, ops: &[Op]) -> (CaseSettings, Vec<Op>) {
    let skip = std::env::var("QUEUE_MODEL_SKIP").unwrap_or_default();
    let skips = |what: &str| skip.split(',').any(|s| s.trim() == what);
    let mut case = case.clone();
    if skips("gate-zero") && case.delay_before_dispatch == Some(Duration::ZERO) {
        case.delay_before_dispatch = Some(Duration::from_millis(10));
    }
    if skips("exclusive") {
        case.exclusive = false;
    }
    if skips("gates") {
        case.consumers_before_dispatch = 0;
        case.delay_before_dispatch = None;
    }
    if skips("redelivery-delay") {
        case.redelivery_delay = Duration::ZERO;
    }
    if skips("paging") {
        case.max_memory_messages = 10_000;
    }
    let ops = ops
        .iter()
        .cloned()
        .map(|op| match op {
            Op::Settle {
                consumer,
                pick,
                how: SettleOp::NotHere,
            } if skips("not-here") => Op::Settle {
                consumer,
                pick,
                how: SettleOp::Release,
            },
            Op::Subscribe { conn, mut spec } if skips("browser") => {
                spec.browser = false;
                Op::Subscribe { conn, spec }
            }
            op => op,
        })
        .collect();
    (case, ops)
}

proptest! {
    #![proptest_config(config(DEFAULT_CASES))]

    #[test]
    fn plain_queue_behaves_like_its_model(
        case in ops::settings(Family::Plain),
        ops in ops::ops(Family::Plain, MAX_OPS),
    ) {
        check(&case, &ops)?;
    }

    #[test]
    fn paging_queue_behaves_like_its_model(
        case in ops::settings(Family::Paging),
        ops in ops::ops(Family::Paging, MAX_OPS),
    ) {
        check(&case, &ops)?;
    }

    #[test]
    fn delays_and_expiry_behave_like_the_model(
        case in ops::settings(Family::Timing),
        ops in ops::ops(Family::Timing, MAX_OPS),
    ) {
        check(&case, &ops)?;
    }

    #[test]
    fn exclusive_queue_behaves_like_its_model(
        case in ops::settings(Family::Exclusive),
        ops in ops::ops(Family::Exclusive, MAX_OPS),
    ) {
        check(&case, &ops)?;
    }

    #[test]
    fn dispatch_gates_behave_like_the_model(
        case in ops::settings(Family::Gates),
        ops in ops::ops(Family::Gates, MAX_OPS),
    ) {
        check(&case, &ops)?;
    }

    #[test]
    fn restarts_behave_like_the_model(
        case in ops::settings(Family::Restart),
        ops in ops::ops(Family::Restart, MAX_OPS),
    ) {
        check(&case, &ops)?;
    }

    #[test]
    fn settings_changed_at_run_time_behave_like_the_model(
        case in ops::settings(Family::Settings),
        ops in ops::ops(Family::Settings, MAX_OPS),
    ) {
        check(&case, &ops)?;
    }
}

proptest! {
    #![proptest_config(config(DEFAULT_CASES_EVERYTHING))]

    #[test]
    fn queue_with_everything_on_behaves_like_its_model(
        case in ops::settings(Family::Everything),
        ops in ops::ops(Family::Everything, MAX_OPS),
    ) {
        check(&case, &ops)?;
    }
}

// Each bug the property tests found, shrunk, as a plain test named after the
// behaviour the spec requires. They fail until the queue rewrite lands.

fn plain() -> CaseSettings {
    CaseSettings {
        max_memory_messages: 10_000,
        max_size_bytes: None,
        exclusive: false,
        consumers_before_dispatch: 0,
        delay_before_dispatch: None,
        redelivery_delay: Duration::ZERO,
        redelivery_multiplier: 1.0,
        max_redelivery_delay: Duration::from_secs(600),
        max_delivery_attempts: 0,
        group_buckets: -1,
        durable: false,
        group_rebalance: false,
        group_rebalance_pause_dispatch: false,
        max_message_delay: Duration::from_secs(900),
        clamp_delays: false,
        max_transaction_ops: 100_000,
        max_transaction_bytes: 64 << 20,
        max_open_transactions: 64,
        address_full_policy: AddressFullPolicy::Page,
        default_message_delay: Duration::ZERO,
        delay_headers: vec![],
    }
}

fn send(group: Option<u8>) -> Op {
    Op::Send(SendOp {
        group,
        closes_group: false,
        delay_ms: None,
        ttl_ms: None,
        priority: 4,
        durable: false,
        color: 0,
        delay_properties: vec![],
    })
}

/// A send like [`send`] with some of its fields changed.
fn send_with(group: Option<u8>, change: impl FnOnce(&mut SendOp)) -> Op {
    let Op::Send(mut s) = send(group) else {
        unreachable!("send builds a Send")
    };
    change(&mut s);
    Op::Send(s)
}

fn consumer(window: u32, priority: i32) -> Op {
    Op::Subscribe {
        conn: 0,
        spec: ConsumerSpec {
            credit: CreditKind::Window(window),
            priority,
            selector: None,
            browser: false,
        },
    }
}

fn browser(window: u32) -> Op {
    Op::Subscribe {
        conn: 0,
        spec: ConsumerSpec {
            credit: CreditKind::Window(window),
            priority: 0,
            selector: None,
            browser: true,
        },
    }
}

/// A consumer (or browser) with explicit credit, as an AMQP link has: it
/// takes nothing until given credit.
fn explicit_credit(browser: bool) -> Op {
    Op::Subscribe {
        conn: 0,
        spec: ConsumerSpec {
            credit: CreditKind::Explicit,
            priority: 0,
            selector: None,
            browser,
        },
    }
}

/// The first consumer settles its first delivery.
fn settle_first(how: SettleOp) -> Op {
    Op::Settle {
        consumer: 0,
        pick: 0,
        how,
    }
}

fn holds(case: &CaseSettings, ops: &[Op]) {
    if let Err(e) = driver::run(case, ops) {
        panic!("{e}");
    }
}

#[test]
fn an_undeliverable_here_message_does_not_block_its_consumer() {
    // c1 answers undeliverable-here for m0; m1 must still reach it.
    let ops = [
        send(None),
        consumer(1, 0),
        settle_first(SettleOp::NotHere),
        send(None),
    ];
    holds(&plain(), &ops);
}

#[test]
fn a_stalled_lane_does_not_hold_back_paged_messages() {
    let case = CaseSettings {
        max_memory_messages: 1,
        ..plain()
    };
    // G2's owner has no credit left; the ungrouped m3 is paged behind G2's m2.
    let ops = [
        consumer(2, 0),
        send(None),
        consumer(1, 0),
        send(Some(2)),
        send(Some(2)),
        send(None),
    ];
    holds(&case, &ops);
}

#[test]
fn a_browser_sees_paged_messages() {
    let case = CaseSettings {
        max_memory_messages: 1,
        ..plain()
    };
    holds(&case, &[send(None), send(None), browser(2)]);
}

#[test]
fn a_higher_priority_consumer_does_not_take_over_an_exclusive_queue() {
    let case = CaseSettings {
        exclusive: true,
        ..plain()
    };
    // m0 comes back from the exclusive c1; c2 (priority 1) must not get it.
    let ops = [
        send(None),
        consumer(1, 0),
        consumer(1, 1),
        settle_first(SettleOp::Nack),
    ];
    holds(&case, &ops);
}

#[test]
fn the_dispatch_gate_stays_open_while_any_consumer_remains() {
    let case = CaseSettings {
        consumers_before_dispatch: 2,
        ..plain()
    };
    let ops = [
        consumer(1, 0),
        consumer(1, 0),
        Op::Close { consumer: 0 },
        send(None),
    ];
    holds(&case, &ops);
}

#[test]
fn a_zero_delay_before_dispatch_does_not_wait() {
    let case = CaseSettings {
        consumers_before_dispatch: 2,
        delay_before_dispatch: Some(Duration::ZERO),
        ..plain()
    };
    holds(&case, &[consumer(1, 0), send(None)]);
}

#[test]
fn the_gate_delay_restarts_with_the_next_first_consumer() {
    let case = CaseSettings {
        consumers_before_dispatch: 2,
        delay_before_dispatch: Some(Duration::from_millis(30)),
        ..plain()
    };
    // The gate opens by time for c1, closes when c1 leaves, and must wait
    // 30 ms again for c2.
    let ops = [
        consumer(1, 0),
        send(None),
        Op::Advance { ms: 40 },
        Op::Close { consumer: 0 },
        consumer(1, 0),
    ];
    holds(&case, &ops);
}

#[test]
fn a_message_waiting_for_redelivery_holds_back_its_group() {
    let case = CaseSettings {
        redelivery_delay: Duration::from_millis(10),
        ..plain()
    };
    // m0 is NACKed and waits 10 ms; m1 of its group must wait with it.
    let ops = [
        consumer(1, 0),
        send(Some(0)),
        send(Some(0)),
        settle_first(SettleOp::Nack),
    ];
    holds(&case, &ops);
}

#[test]
fn durable_messages_survive_a_restart_and_non_durable_ones_do_not() {
    let case = CaseSettings {
        max_memory_messages: 1,
        ..plain()
    };
    let durable = |durable| {
        Op::Send(SendOp {
            group: Some(0),
            closes_group: false,
            delay_ms: None,
            ttl_ms: None,
            priority: 4,
            durable,
            color: 0,
            delay_properties: vec![],
        })
    };
    // Paged and in flight, durable and not, across a restart.
    let ops = [
        durable(true),
        durable(false),
        durable(true),
        durable(false),
        consumer(1, 0),
        Op::Restart,
        consumer(4, 0),
    ];
    holds(&case, &ops);
}

#[test]
fn a_browser_is_not_shown_messages_in_flight() {
    // The browser saw m0; by the time it has credit again both messages
    // are with consumers.
    let browser = explicit_credit(true);
    let credit = Op::AddCredit {
        consumer: 0,
        credit: 1,
    };
    let ops = [
        send(None),
        send(None),
        browser,
        credit.clone(),
        consumer(1, 0),
        consumer(1, 0),
        credit,
    ];
    holds(&plain(), &ops);
}

#[test]
fn a_browser_sees_messages_in_arrival_order() {
    let urgent = Op::Send(SendOp {
        group: None,
        closes_group: false,
        delay_ms: None,
        ttl_ms: None,
        priority: 9,
        durable: false,
        color: 0,
        delay_properties: vec![],
    });
    holds(&plain(), &[send(None), urgent, browser(1)]);
}

#[test]
fn a_browser_is_not_shown_expired_messages() {
    let short_lived = Op::Send(SendOp {
        group: None,
        closes_group: false,
        delay_ms: None,
        ttl_ms: Some(5),
        priority: 4,
        durable: false,
        color: 0,
        delay_properties: vec![],
    });
    holds(&plain(), &[short_lived, Op::Advance { ms: 20 }, browser(1)]);
}

#[test]
fn a_consumer_takes_its_own_group_past_a_message_it_refused() {
    // c1 refuses m0 (undeliverable-here), takes m1 (binding G2's lane) and
    // m2, then NACKs one of them and is given credit again: m3 of its own
    // lane must still reach it past m0.
    let case = CaseSettings {
        redelivery_delay: Duration::from_millis(10),
        group_buckets: 2,
        ..plain()
    };
    let explicit = explicit_credit(false);
    let credit = |credit| Op::AddCredit {
        consumer: 0,
        credit,
    };
    for pick in 0..2 {
        let ops = [
            explicit.clone(),
            credit(1),
            send(None),
            send_with(Some(2), |s| s.ttl_ms = Some(40)),
            send_with(None, |s| {
                s.durable = true;
                s.color = 1
            }),
            settle_first(SettleOp::NotHere),
            credit(2),
            send_with(Some(2), |s| {
                s.closes_group = true;
                s.color = 1
            }),
            Op::Settle {
                consumer: 0,
                pick,
                how: SettleOp::Nack,
            },
            credit(1),
        ];
        holds(&case, &ops);
    }
}

#[test]
fn a_due_message_reaches_an_idle_consumer_at_any_memory_limit() {
    let case = CaseSettings {
        max_memory_messages: 1,
        ..plain()
    };
    let delayed = Op::Send(SendOp {
        group: None,
        closes_group: false,
        delay_ms: Some(5),
        ttl_ms: None,
        priority: 4,
        durable: false,
        color: 0,
        delay_properties: vec![],
    });
    holds(&case, &[consumer(1, 0), delayed, Op::Advance { ms: 5 }]);
}

#[test]
fn a_message_no_consumer_selects_does_not_hold_back_paged_ones() {
    let case = CaseSettings {
        max_memory_messages: 1,
        ..plain()
    };
    let colored = |color| {
        Op::Send(SendOp {
            group: None,
            closes_group: false,
            delay_ms: None,
            ttl_ms: None,
            priority: 4,
            durable: false,
            color,
            delay_properties: vec![],
        })
    };
    let picky = Op::Subscribe {
        conn: 0,
        spec: ConsumerSpec {
            credit: CreditKind::Window(1),
            priority: 0,
            selector: Some(1),
            browser: false,
        },
    };
    // m0 fills memory and nobody selects it; m1, paged, is c1's.
    holds(&case, &[colored(2), picky, colored(1)]);
}

#[test]
fn an_expired_message_does_not_hold_back_its_group() {
    let short_lived = Op::Send(SendOp {
        group: Some(0),
        closes_group: false,
        delay_ms: None,
        ttl_ms: Some(5),
        priority: 4,
        durable: false,
        color: 0,
        delay_properties: vec![],
    });
    let next_of_group = Op::Send(SendOp {
        group: Some(0),
        closes_group: false,
        delay_ms: None,
        ttl_ms: None,
        priority: 4,
        durable: false,
        color: 2,
        delay_properties: vec![],
    });
    let picky = Op::Subscribe {
        conn: 0,
        spec: ConsumerSpec {
            credit: CreditKind::Window(1),
            priority: 0,
            selector: Some(2),
            browser: false,
        },
    };
    // m0 comes back from c2 and expires; c1 (which selects only m1) must
    // get m1, the group's next available message.
    let ops = [
        picky,
        consumer(1, 0),
        short_lived,
        Op::Close { consumer: 1 },
        Op::Advance { ms: 10 },
        next_of_group,
    ];
    holds(&plain(), &ops);
}

#[test]
fn a_group_its_last_message_unbinds_goes_to_a_consumer_passed_over_in_that_pass() {
    // c1 holds m1 and the closing m2 of G0; m3 waits for G0's owner. When
    // c1 NACKs m2 it is redelivered to c1 and unbinds G0: c2, which the same
    // dispatch pass had already found with nothing to take, must get m3.
    let case = CaseSettings {
        group_buckets: 2,
        ..plain()
    };
    let closing = Op::Send(SendOp {
        group: Some(0),
        closes_group: true,
        delay_ms: None,
        ttl_ms: None,
        priority: 4,
        durable: false,
        color: 0,
        delay_properties: vec![],
    });
    let s = |pick, how| Op::Settle {
        consumer: 0,
        pick,
        how,
    };
    let ops = [
        send(None),
        send(Some(0)),
        consumer(2, 0),
        closing,
        s(30, SettleOp::Ack),
        s(152, SettleOp::Nack),
        s(126, SettleOp::Nack),
        s(50, SettleOp::Nack),
        consumer(1, 0),
        send(Some(0)),
        s(62, SettleOp::Nack),
    ];
    holds(&case, &ops);
}

#[test]
fn messages_a_consumer_refused_do_not_keep_it_from_the_disk() {
    // Memory 1: what memory holds is a group's message c3 refused
    // (undeliverable-here) and the group's next one; c3 may still take the
    // ungrouped messages on disk, past the memory ceiling.
    let case = CaseSettings {
        max_memory_messages: 1,
        ..plain()
    };
    let colored = |group, color| send_with(group, |s| s.color = color);
    let explicit = explicit_credit(false);
    let ops = [
        send(None),
        send(None),
        colored(Some(2), 2),
        send(None),
        explicit,
        send(None),
        send(None),
        consumer(2, 0),
        consumer(1, 0),
        send(Some(2)),
        send(None),
        Op::AddCredit {
            consumer: 232,
            credit: 2,
        },
        Op::Settle {
            consumer: 105,
            pick: 192,
            how: SettleOp::NotHere,
        },
    ];
    holds(&case, &ops);
}

#[test]
fn an_expired_group_head_on_disk_does_not_hide_the_group_from_a_selector() {
    // Memory 1, buckets 2: c1 selects colour 0 and owns G0's bucket; G0's
    // next message on disk expires (ttl 5) before c1 has credit again, and
    // the one after it (colour 0) must still reach c1.
    let case = CaseSettings {
        max_memory_messages: 1,
        group_buckets: 2,
        ..plain()
    };
    let with = |group, color, ttl_ms| {
        send_with(group, |s| {
            s.color = color;
            s.ttl_ms = ttl_ms
        })
    };
    let picky = Op::Subscribe {
        conn: 0,
        spec: ConsumerSpec {
            credit: CreditKind::Window(1),
            priority: 0,
            selector: Some(0),
            browser: false,
        },
    };
    let ops = [
        with(None, 2, None),
        picky,
        with(Some(0), 0, None),
        with(None, 2, None),
        with(Some(0), 1, Some(5)),
        with(Some(0), 0, None),
        with(Some(0), 0, None),
        with(None, 1, None),
        Op::Advance { ms: 10 },
        settle_first(SettleOp::Ack),
    ];
    holds(&case, &ops);
}

#[test]
fn a_group_head_a_selector_passes_over_expires_without_another_event() {
    // c1 selects colour 0; G2's head (colour 2, ttl 15) is nobody's, so the
    // queue meets its expiry only by looking again when it expires: nothing
    // else happens after it, and G2's next message (colour 0) must still
    // reach c1.
    let with = |group, color, ttl_ms| {
        send_with(group, |s| {
            s.color = color;
            s.ttl_ms = ttl_ms
        })
    };
    let picky = Op::Subscribe {
        conn: 1,
        spec: ConsumerSpec {
            credit: CreditKind::Window(1),
            priority: 0,
            selector: Some(0),
            browser: false,
        },
    };
    let ops = [
        picky,
        with(Some(2), 2, Some(15)),
        with(Some(2), 0, None),
        Op::Advance { ms: 30 },
    ];
    holds(&plain(), &ops);
}

#[test]
fn a_group_head_its_consumer_refused_expires_without_another_event() {
    // c1 answers undeliverable-here for G0's head m0 (ttl 40), so it looks
    // past it and nobody else may take it; m1 of G0 waits behind it. When
    // m0 expires, nothing else happens, and m1 must still reach c1.
    let case = CaseSettings {
        max_memory_messages: 1,
        ..plain()
    };
    let ops = [
        consumer(3, 0),
        send_with(Some(0), |s| s.ttl_ms = Some(40)),
        settle_first(SettleOp::NotHere),
        send(Some(0)),
        Op::Advance { ms: 80 },
    ];
    holds(&case, &ops);
}

fn txn(settles: &[(u8, u8, bool)], sends: Vec<Op>, end: TxnEnd) -> Op {
    Op::Txn(TxnOp {
        others_open: 0,
        sends: sends
            .into_iter()
            .map(|op| match op {
                Op::Send(s) => s,
                _ => unreachable!("only sends"),
            })
            .collect(),
        settles: settles
            .iter()
            .map(|&(consumer, pick, ack)| TxnSettle {
                consumer,
                pick,
                ack,
            })
            .collect(),
        end,
    })
}

#[test]
fn a_committed_transaction_returns_a_group_oldest_first() {
    // Settled newest first in the transaction; both come back at the commit
    // and go out again in group order.
    let nack = |pick| (0, pick, false);
    for end in [TxnEnd::Commit, TxnEnd::Rollback] {
        let ops = [
            consumer(2, 0),
            send(Some(2)),
            send(Some(2)),
            txn(&[nack(1), nack(0)], vec![], end),
        ];
        holds(&plain(), &ops);
    }
}

#[test]
fn a_message_a_commit_returns_goes_before_the_newer_one_it_sends() {
    // The transaction NACKs m0 of G1 and sends m1 of G1: at the commit m0 is
    // back in its place before m1 can be dispatched to the consumer with room.
    let ops = [
        consumer(2, 0),
        send(Some(1)),
        txn(&[(0, 0, false)], vec![send(Some(1))], TxnEnd::Commit),
    ];
    holds(&plain(), &ops);
}

#[test]
fn a_transaction_applies_whole_or_not_at_all() {
    let ops = |end| {
        [
            consumer(2, 0),
            send(Some(1)),
            send(None),
            txn(
                &[(0, 0, true), (0, 0, false)],
                vec![send(Some(1)), send(None)],
                end,
            ),
            send(Some(1)),
        ]
    };
    for end in [
        TxnEnd::Commit,
        TxnEnd::Rollback,
        TxnEnd::RefusedThenCommit,
        TxnEnd::ConsumerLeavesThenCommit,
    ] {
        holds(&plain(), &ops(end));
    }
}

// Settings the model covers besides the scenarios, pinned by a case
// each so a change of meaning shows by name.

#[test]
fn a_rebalance_that_pauses_dispatch_holds_a_group_until_its_old_owner_settles() {
    let case = CaseSettings {
        group_rebalance: true,
        group_rebalance_pause_dispatch: true,
        ..plain()
    };
    // c1 holds m0 and m1 of G0 when c2 arrives: m2 goes to nobody until c1
    // has settled both, then to either.
    let ops = [
        consumer(2, 0),
        send(Some(0)),
        send(Some(0)),
        send(Some(0)),
        consumer(1, 0),
        settle_first(SettleOp::Ack),
        settle_first(SettleOp::Ack),
    ];
    holds(&case, &ops);
}

#[test]
fn each_failed_attempt_waits_longer_by_the_redelivery_multiplier() {
    let case = CaseSettings {
        redelivery_delay: Duration::from_millis(10),
        redelivery_multiplier: 2.0,
        ..plain()
    };
    // The second NACK of m0 waits 20 ms, not 10.
    let ops = [
        consumer(1, 0),
        send(None),
        settle_first(SettleOp::Nack),
        Op::Advance { ms: 20 },
        settle_first(SettleOp::Nack),
        Op::Advance { ms: 30 },
    ];
    holds(&case, &ops);
}

#[test]
fn a_send_delayed_past_the_maximum_is_refused_or_clamped() {
    // 40 ms against a maximum of 20: refused, or due at 20 ms.
    for clamp_delays in [false, true] {
        let case = CaseSettings {
            max_message_delay: Duration::from_millis(20),
            clamp_delays,
            ..plain()
        };
        let late = send_with(None, |s| s.delay_ms = Some(40));
        let ops = [
            consumer(2, 0),
            late.clone(),
            txn(&[], vec![late, send(None)], TxnEnd::Commit),
            Op::Advance { ms: 30 },
        ];
        holds(&case, &ops);
    }
}

#[test]
fn a_transaction_over_its_limits_applies_nothing() {
    // Four operations against a limit of two, then three sends of about
    // 400 bytes each against a limit of 1,000 bytes.
    for (max_transaction_ops, max_transaction_bytes) in [(2, 64 << 20), (100, 1_000)] {
        let case = CaseSettings {
            max_transaction_ops,
            max_transaction_bytes,
            ..plain()
        };
        let ops = [
            consumer(2, 0),
            send(Some(1)),
            txn(
                &[(0, 0, true)],
                vec![send(Some(1)), send(None), send(None)],
                TxnEnd::Commit,
            ),
            txn(&[(0, 0, true)], vec![send(Some(1))], TxnEnd::Commit),
        ];
        holds(&case, &ops);
    }
}

#[test]
fn an_exclusive_takeover_delivers_returned_messages_before_newer_ones() {
    let case = CaseSettings {
        exclusive: true,
        ..plain()
    };
    // c1 holds m0-m2 when it leaves; c2 takes over and must get them before
    // m3 and m4, which waited in the queue, as Artemis does.
    let mut ops = vec![consumer(3, 0), consumer(5, 0)];
    ops.extend((0..5).map(|_| send(None)));
    ops.push(Op::Close { consumer: 0 });
    holds(&case, &ops);
}

/// A queue with a byte limit of about two messages and `policy`.
fn full_after_two(policy: AddressFullPolicy) -> CaseSettings {
    CaseSettings {
        max_size_bytes: Some(1_200),
        address_full_policy: policy,
        ..plain()
    }
}

#[test]
fn a_transaction_sending_to_a_full_fail_queue_applies_nothing() {
    // The queue fills up with the plain sends; the transaction's send is
    // refused, and so its acknowledgement of m0 is not applied either.
    let ops = [
        consumer(1, 0),
        send(None),
        send(None),
        send(None),
        send(None),
        txn(&[(0, 0, true)], vec![send(None)], TxnEnd::Commit),
    ];
    holds(&full_after_two(AddressFullPolicy::Fail), &ops);
}

#[test]
fn a_committed_send_to_a_full_drop_queue_is_dropped() {
    let ops = [
        send(None),
        send(None),
        send(None),
        txn(&[], vec![send(None), send(None)], TxnEnd::Commit),
    ];
    holds(&full_after_two(AddressFullPolicy::Drop), &ops);
}

#[test]
fn a_gate_lowered_to_the_attached_count_opens_and_stays_open() {
    let case = CaseSettings {
        consumers_before_dispatch: 3,
        ..plain()
    };
    // Two consumers meet the new count of two: dispatch starts, and goes on
    // when one of them leaves.
    let ops = [
        consumer(2, 0),
        consumer(2, 0),
        Op::Reconfigure(Reconfig {
            gate: Some((2, None)),
            ..Reconfig::default()
        }),
        Op::Close { consumer: 0 },
        send(None),
    ];
    holds(&case, &ops);
}

#[test]
fn only_the_listed_delay_properties_delay_a_message() {
    // `wait` is read, `x-delay` is not; a value that is no delay is a plain
    // property; the queue's default delay applies to the rest.
    let case = CaseSettings {
        delay_headers: vec!["wait"],
        default_message_delay: Duration::from_millis(15),
        ..plain()
    };
    let with =
        |properties: Vec<DelayProperty>| send_with(None, |s| s.delay_properties = properties);
    let property = |name, value| DelayProperty { name, value };
    let ops = [
        consumer(5, 0),
        with(vec![property(1, DelayValue::Int(30))]),
        with(vec![property(0, DelayValue::Int(30))]),
        with(vec![property(1, DelayValue::Junk)]),
        with(vec![property(1, DelayValue::Text(0))]),
        Op::Advance { ms: 40 },
    ];
    holds(&case, &ops);
}

#[test]
fn a_drain_takes_what_is_available_and_drops_the_rest() {
    let case = CaseSettings {
        max_memory_messages: 1,
        ..plain()
    };
    let ops = [
        send(None),
        send(Some(1)),
        send(None),
        explicit_credit(false),
        Op::SetCredit {
            consumer: 0,
            credit: 2,
        },
        Op::Drain { consumer: 0 },
        Op::SetCredit {
            consumer: 0,
            credit: 3,
        },
        Op::Drain { consumer: 0 },
    ];
    holds(&case, &ops);
}

#[test]
fn max_open_transactions_refuses_one_more() {
    let case = CaseSettings {
        max_open_transactions: 2,
        ..plain()
    };
    let mut over = txn(&[], vec![send(None)], TxnEnd::Commit);
    if let Op::Txn(t) = &mut over {
        t.others_open = 2;
    }
    holds(&case, &[consumer(1, 0), over]);
}

#[test]
fn a_returned_message_may_pass_older_ones_on_disk_on_an_exclusive_queue() {
    // m8 and m9 are paged; c1 (selecting color 2) takes m9 and leaves, so m9
    // goes back into memory, and the drain's consumer gets it before m8,
    // still on disk: allowed, as Artemis puts a returned message at the head.
    let case = CaseSettings {
        exclusive: true,
        ..plain()
    };
    let mut ops: Vec<Op> = (0..8).map(|_| send(None)).collect();
    ops.push(Op::Resize {
        max_memory_messages: 1,
        max_size_bytes: None,
    });
    ops.push(send(None));
    ops.push(send_with(None, |s| s.color = 2));
    ops.push(Op::Subscribe {
        conn: 0,
        spec: ConsumerSpec {
            credit: CreditKind::Window(1),
            priority: 0,
            selector: Some(2),
            browser: false,
        },
    });
    holds(&case, &ops);
}

#[test]
fn a_message_the_broker_finds_due_after_its_expiry_goes_to_the_expiry_address() {
    // Found under CPU load ("Expired: m3 reached the expiry address before
    // its expiry"): the queue's default delay runs from the broker's clock
    // reading when it takes the message, a moment after the sender stamped
    // the ttl. A ttl one millisecond over the delay then ends at or before
    // the due time whenever the millisecond turns during the send, and the
    // message is never delivered (README: a message whose ttl ends before it
    // is due). Many sends, so that some cross a millisecond.
    let case = CaseSettings {
        default_message_delay: Duration::from_millis(13),
        ..plain()
    };
    let mut ops = vec![consumer(100, 0)];
    ops.extend((0..40).map(|_| send_with(None, |s| s.ttl_ms = Some(14))));
    ops.push(Op::Advance { ms: 30 });
    holds(&case, &ops);
}

#[test]
fn the_model_keeps_a_deadline_the_broker_measured_as_a_span() {
    use super::reference::{Model, Sent, Span};
    let case = CaseSettings {
        default_message_delay: Duration::from_millis(13),
        ..plain()
    };
    let sent = |expires| Sent {
        group: None,
        closes_group: false,
        durable: false,
        color: 0,
        priority: 4,
        // Sent in 1_000..=1_007: the broker read its clock in there.
        due: Some(Span {
            lo: 1_013,
            hi: 1_020,
        }),
        expires,
    };
    let mut model = Model::new(driver::model_settings(&case));
    let spec = match consumer(1, 0) {
        Op::Subscribe { spec, .. } => spec,
        _ => unreachable!("consumer builds a Subscribe"),
    };
    model.subscribe(1, spec, Span { lo: 990, hi: 991 });
    // Due at 1_014 or later by the broker's clock: it may expire unseen.
    let expired = model.send(
        sent(Some(1_014)),
        Span {
            lo: 1_000,
            hi: 1_007,
        },
    );
    model
        .expired(
            expired,
            Span {
                lo: 1_007,
                hi: 1_008,
            },
        )
        .expect("due at or after its expiry");
    // Not owed to the idle consumer before the latest moment it can fall due.
    model.send(
        sent(None),
        Span {
            lo: 1_000,
            hi: 1_007,
        },
    );
    model.check_idle(1_018, 1_019).expect("not surely due yet");
    assert!(model.check_idle(1_030, 1_031).is_err(), "owed by then");
}
