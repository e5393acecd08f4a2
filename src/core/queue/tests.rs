//! Whole-queue behaviour over a real store, with limits small enough that
//! paging, redelivery delays, exclusivity and the dispatch gates all happen.

use crate::core::consumer::{ConsumerOptions, CreditMode, Delivery, Release};
use crate::core::deliveries::{self, Deliveries};
use crate::core::settings::QueueSettings;
use crate::core::tests::open;
use crate::core::{Broker, Message, RoutingType, Subscription};
use std::sync::Arc;
use std::time::Duration;

fn msg(body: &str, group: Option<&str>) -> Message {
    Message {
        address: Arc::from("q"),
        body: bytes::Bytes::copy_from_slice(body.as_bytes()),
        group_id: group.map(Arc::from),
        priority: 4,
        ..Default::default()
    }
}

fn send(broker: &Broker, body: &str, group: Option<&str>) {
    broker
        .publish(msg(body, group), RoutingType::Anycast)
        .unwrap();
}

fn consumer(broker: &Broker, window: u32, priority: i32) -> (Subscription, Deliveries) {
    let (tx, rx) = deliveries::channel();
    let options = ConsumerOptions {
        credit: CreditMode::Window(window),
        priority,
        ..Default::default()
    };
    let sub = broker
        .subscribe("q", RoutingType::Anycast, options, tx)
        .unwrap();
    (sub, rx)
}

fn browser(broker: &Broker, window: u32) -> (Subscription, Deliveries) {
    let (tx, rx) = deliveries::channel();
    let options = ConsumerOptions {
        credit: CreditMode::Window(window),
        browse: true,
        ..Default::default()
    };
    let sub = broker
        .subscribe("q", RoutingType::Anycast, options, tx)
        .unwrap();
    (sub, rx)
}

fn body(d: &Delivery) -> String {
    String::from_utf8_lossy(&d.message.body).into_owned()
}

/// Receives `n` deliveries, acknowledging each if `ack`.
async fn receive(rx: &mut Deliveries, n: usize, ack: bool) -> Vec<Delivery> {
    let mut got = Vec::new();
    while got.len() < n {
        let d = tokio::time::timeout(Duration::from_secs(5), rx.recv())
            .await
            .unwrap_or_else(|_| panic!("only {} of {n} delivered", got.len()))
            .expect("open");
        if ack {
            d.queue.ack(d.consumer, &[d.seq]).unwrap();
        }
        got.push(d);
    }
    got
}

async fn nothing_more(rx: &mut Deliveries) {
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(rx.try_recv().is_err(), "nothing more expected");
}

fn small(max_memory_messages: usize) -> QueueSettings {
    QueueSettings {
        max_memory_messages,
        ..QueueSettings::default()
    }
}

async fn stalled_group_holds_back_only_itself(depth: usize) {
    let dir = tempfile::tempdir().unwrap();
    let broker = open(dir.path(), small(10));
    let (_stalled, mut srx) = consumer(&broker, 1, 0);
    send(&broker, "g-0", Some("g"));
    receive(&mut srx, 1, false).await;
    for i in 1..depth {
        send(&broker, &format!("g-{i}"), Some("g"));
    }
    for i in 0..5 {
        send(&broker, &format!("u-{i}"), None);
    }
    let (_free, mut frx) = consumer(&broker, 100, 0);
    let got = receive(&mut frx, 5, true).await;
    let bodies: Vec<String> = got.iter().map(body).collect();
    assert_eq!(bodies, ["u-0", "u-1", "u-2", "u-3", "u-4"]);
    nothing_more(&mut frx).await;
    assert!(broker.queue("q").unwrap().stats().ready <= 10 + 100);
}

/// Selects messages whose `color` property is this.
#[derive(Debug)]
struct ColorIs(i64);

impl crate::core::consumer::MessageFilter for ColorIs {
    fn matches(&self, message: &Message) -> bool {
        message.property("color") == Some(&crate::core::Value::Int(self.0))
    }
}

#[tokio::test]
async fn a_selector_finds_a_group_head_beyond_one_scan_of_the_disk() {
    // Two hundred groups on disk whose heads a selector rejects, then one
    // whose head it takes: a pass looks at a bounded number of heads, and
    // the next ones look further instead of at the same ones again.
    let dir = tempfile::tempdir().unwrap();
    let broker = open(dir.path(), small(1));
    let colored = |body: &str, group: &str, color: i64| Message {
        properties: vec![(Arc::from("color"), crate::core::Value::Int(color))].into(),
        ..msg(body, Some(group))
    };
    for i in 0..200 {
        let m = colored(&format!("g{i}"), &format!("g{i}"), 1);
        broker.publish(m, RoutingType::Anycast).unwrap();
    }
    let hit = colored("hit", "g200", 0);
    broker.publish(hit, RoutingType::Anycast).unwrap();
    let (tx, mut rx) = deliveries::channel();
    let options = ConsumerOptions {
        credit: CreditMode::Window(1),
        filter: Some(Arc::new(ColorIs(0))),
        ..Default::default()
    };
    let _picky = broker
        .subscribe("q", RoutingType::Anycast, options, tx)
        .unwrap();
    let got = receive(&mut rx, 1, true).await;
    assert_eq!(body(&got[0]), "hit");
}

#[tokio::test]
async fn a_stalled_group_deeper_than_memory_holds_back_only_itself() {
    stalled_group_holds_back_only_itself(30).await;
    stalled_group_holds_back_only_itself(100).await;
    stalled_group_holds_back_only_itself(1000).await;
}

#[tokio::test]
async fn a_paged_group_keeps_its_order_when_its_owner_leaves() {
    let dir = tempfile::tempdir().unwrap();
    let broker = open(dir.path(), small(4));
    let (owner, mut orx) = consumer(&broker, 2, 0);
    for i in 0..20 {
        send(&broker, &format!("{i}"), Some("g"));
        send(&broker, &format!("x{i}"), Some("h"));
    }
    let held = receive(&mut orx, 2, false).await;
    assert_eq!(held.iter().map(body).collect::<Vec<_>>(), ["0", "x0"]);
    drop(owner);
    let (_next, mut nrx) = consumer(&broker, 100, 0);
    let got = receive(&mut nrx, 40, true).await;
    let g: Vec<String> = got
        .iter()
        .filter(|d| !body(d).starts_with('x'))
        .map(body)
        .collect();
    assert_eq!(g, (0..20).map(|i| i.to_string()).collect::<Vec<_>>());
    assert!(got[0].redelivered());
}

fn with_redelivery_delay(ms: u64) -> QueueSettings {
    QueueSettings {
        redelivery_delay: Duration::from_millis(ms),
        max_memory_messages: 4,
        ..QueueSettings::default()
    }
}

#[tokio::test]
async fn a_redelivery_delay_holds_back_the_group_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let broker = open(dir.path(), with_redelivery_delay(200));
    let (owner, mut orx) = consumer(&broker, 2, 0);
    for i in 1..=5 {
        send(&broker, &format!("G-{i}"), Some("G"));
    }
    receive(&mut orx, 2, false).await;
    drop(owner);
    let (_next, mut nrx) = consumer(&broker, 10, 0);
    // Nothing of the group may overtake the two that wait.
    nothing_more(&mut nrx).await;
    let got = receive(&mut nrx, 5, true).await;
    let bodies: Vec<String> = got.iter().map(body).collect();
    assert_eq!(bodies, ["G-1", "G-2", "G-3", "G-4", "G-5"]);
}

#[tokio::test]
async fn a_redelivery_delay_on_an_ungrouped_message_holds_back_only_it() {
    let dir = tempfile::tempdir().unwrap();
    let broker = open(dir.path(), with_redelivery_delay(150));
    let (_c, mut rx) = consumer(&broker, 10, 0);
    send(&broker, "a", None);
    let a = receive(&mut rx, 1, false).await.remove(0);
    a.queue.release(a.consumer, a.seq, Release::Failed).unwrap();
    send(&broker, "b", None);
    let got = receive(&mut rx, 2, true).await;
    assert_eq!(got.iter().map(body).collect::<Vec<_>>(), ["b", "a"]);
    assert!(got[1].redelivered());
}

#[tokio::test]
async fn an_exclusive_consumer_keeps_the_queue_until_it_leaves() {
    let dir = tempfile::tempdir().unwrap();
    let settings = QueueSettings {
        exclusive: true,
        max_memory_messages: 4,
        ..QueueSettings::default()
    };
    let broker = open(dir.path(), settings);
    let (first, mut frx) = consumer(&broker, 3, 0);
    let (_high, mut hrx) = consumer(&broker, 100, 10);
    for i in 0..10 {
        send(&broker, &i.to_string(), None);
    }
    let held = receive(&mut frx, 3, false).await;
    assert_eq!(held.iter().map(body).collect::<Vec<_>>(), ["0", "1", "2"]);
    nothing_more(&mut hrx).await;
    drop(first);
    let got = receive(&mut hrx, 10, true).await;
    let bodies: Vec<String> = got.iter().map(body).collect();
    assert_eq!(bodies, (0..10).map(|i| i.to_string()).collect::<Vec<_>>());
}

#[tokio::test]
async fn dispatch_waits_for_enough_consumers_then_stays_on() {
    let dir = tempfile::tempdir().unwrap();
    let settings = QueueSettings {
        consumers_before_dispatch: 2,
        delay_before_dispatch: None,
        ..QueueSettings::default()
    };
    let broker = open(dir.path(), settings);
    let (a, mut arx) = consumer(&broker, 10, 0);
    send(&broker, "1", None);
    send(&broker, "2", None);
    nothing_more(&mut arx).await;
    let (_b, mut brx) = consumer(&broker, 10, 0);
    let got = receive(&mut arx, 1, true).await.len() + receive(&mut brx, 1, true).await.len();
    assert_eq!(got, 2);
    drop(a);
    send(&broker, "3", None);
    assert_eq!(body(&receive(&mut brx, 1, true).await[0]), "3");
}

#[tokio::test]
async fn dispatch_without_a_wait_when_the_delay_is_zero() {
    let dir = tempfile::tempdir().unwrap();
    let settings = QueueSettings {
        consumers_before_dispatch: 2,
        delay_before_dispatch: Some(Duration::ZERO),
        ..QueueSettings::default()
    };
    let broker = open(dir.path(), settings);
    let (_a, mut arx) = consumer(&broker, 10, 0);
    send(&broker, "1", None);
    receive(&mut arx, 1, true).await;
}

#[tokio::test]
async fn a_browser_sees_the_whole_queue_in_memory_and_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    let broker = open(dir.path(), small(10));
    for i in 0..150 {
        let group = (i % 3 == 0).then_some("g");
        send(&broker, &i.to_string(), group);
    }
    let (_b, mut brx) = browser(&broker, 7);
    let mut seen = Vec::new();
    while seen.len() < 150 {
        let got = receive(&mut brx, 7.min(150 - seen.len()), false).await;
        for d in &got {
            seen.push(body(d));
        }
        // A browser's window refills as its deliveries are acknowledged.
        let seqs: Vec<u64> = got.iter().map(|d| d.seq).collect();
        got[0].queue.ack(got[0].consumer, &seqs).unwrap();
    }
    assert_eq!(seen, (0..150).map(|i| i.to_string()).collect::<Vec<_>>());
    nothing_more(&mut brx).await;
    // It took nothing.
    let (_c, mut crx) = consumer(&broker, 1000, 0);
    receive(&mut crx, 150, true).await;
}

#[tokio::test]
async fn every_way_a_message_leaves_gives_its_bytes_back() {
    // Messages in memory, paged, in flight and waiting out a redelivery
    // delay, taken out by acknowledgement, management take, clear and the
    // queue's deletion: the broker's budget ends where it began.
    let dir = tempfile::tempdir().unwrap();
    let settings = QueueSettings {
        redelivery_delay: Duration::from_secs(60),
        ..small(4)
    };
    let broker = open(dir.path(), settings);
    let global = broker.memory().clone();
    for i in 0..12 {
        send(&broker, &format!("m{i}"), None);
    }
    let queue = broker.queue("q").unwrap();
    assert!(global.used() > 0);
    let (sub, mut rx) = consumer(&broker, 3, 0);
    let got = receive(&mut rx, 3, false).await;
    queue.ack(got[0].consumer, &[got[0].seq]).unwrap();
    queue
        .release(got[1].consumer, got[1].seq, Release::Failed)
        .unwrap();
    let taken = queue.take_messages(&[got[1].seq]);
    assert!(taken.iter().all(Result::is_ok), "{taken:?}");
    queue.delete_records(&taken.into_iter().flatten().collect::<Vec<_>>());
    // One paged out (or paged back in by now), once the writer has stored it.
    let paged = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match queue.take_messages(&[7]).pop() {
                Some(Err(crate::core::queue::Untaken::NotWrittenYet(_))) => {
                    tokio::time::sleep(Duration::from_millis(10)).await
                }
                other => break other,
            }
        }
    })
    .await
    .expect("written");
    assert!(matches!(paged, Some(Ok(_))), "{paged:?}");
    let (removed, _) = queue.clear();
    assert!(removed > 0);
    assert_eq!(
        global.used(),
        queue.memory().used(),
        "only the one still in flight is charged"
    );
    assert!(queue.memory().used() > 0);
    drop(sub);
    drop(rx);
    broker
        .delete_queue_as("q", &crate::core::security::Principal::unrestricted())
        .unwrap();
    drop(queue);
    drop(got);
    tokio::time::timeout(Duration::from_secs(5), async {
        while global.used() != 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{} bytes still charged", global.used()));
}
