//! The auditor's live operations over a real store: cancel, reschedule and
//! edit hold across a restart, listings page every message exactly once, and
//! a cancel racing the timer never both delivers and cancels.

use super::*;
use crate::core::message::{Value, WireForm};
use std::collections::HashMap;

/// Publishes `body` to `address`, due at `due_ms`, and waits for its receipt.
async fn send(broker: &Broker, address: &str, body: &str, due_ms: u64, durable: bool) {
    let message = Message {
        address: Arc::from(address),
        ..delayed(body, due_ms, durable)
    };
    send_message(broker, message).await;
}

fn query(queue: Option<&str>, limit: usize) -> ScheduleQuery {
    ScheduleQuery {
        queue: queue.map(str::to_owned),
        limit,
        preview_bytes: 64,
        ..ScheduleQuery::default()
    }
}

/// Every page of `query`, in order.
async fn all_pages(schedule: &Schedule, mut query: ScheduleQuery) -> Vec<ScheduledSummary> {
    let mut out = Vec::new();
    loop {
        let page = schedule.list_page(&query).await.unwrap();
        assert!(page.items.len() <= query.limit);
        out.extend(page.items);
        match page.next {
            Some(next) => query.cursor = Some(next),
            None => return out,
        }
    }
}

/// The id of the waiting message whose body is `body`.
async fn id_of(schedule: &Schedule, queue: &str, body: &str) -> String {
    let items = list_all(schedule, queue).await;
    let found = items.iter().find(|e| e.body_preview == body);
    found.expect("waiting").id.clone()
}

/// Stops the schedule and lets go of the store, as a broker shutting down does.
async fn stop(broker: Broker, schedule: Arc<Schedule>) {
    schedule.shutdown().await;
    drop(schedule);
    drop(broker);
}

#[tokio::test]
async fn a_cancelled_message_never_arrives_not_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let due = now_ms() + 1_500;
    let (broker, schedule) = open(dir.path(), 2);
    for i in 0..6 {
        send(&broker, "q", &i.to_string(), due + i, true).await;
    }
    // "1" waits in the window, "5" on disk only (a window of 2).
    let in_memory = id_of(&schedule, "q", "1").await;
    let on_disk = id_of(&schedule, "q", "5").await;
    let cancelled = schedule.cancel(&in_memory).await.unwrap();
    assert_eq!(cancelled.body_preview, "1");
    assert_eq!(cancelled.queue, "q");
    schedule.cancel(&on_disk).await.unwrap();
    assert!(matches!(
        schedule.view(&in_memory).await,
        Err(ScheduleEditError::NotFound(_))
    ));
    stop(broker, schedule).await;

    let (broker, schedule) = open(dir.path(), 2);
    assert!(matches!(
        schedule.cancel(&on_disk).await,
        Err(ScheduleEditError::NotFound(_))
    ));
    let (_sub, mut rx) = consume(&broker);
    let got = receive(&mut rx, 6).await;
    let bodies: Vec<String> = got.iter().map(|(d, _)| body(d)).collect();
    assert_eq!(bodies, ["0", "2", "3", "4"]);
    assert!(receive(&mut rx, 1).await.is_empty(), "nothing more arrives");
    schedule.shutdown().await;
}

#[tokio::test]
async fn a_rescheduled_message_arrives_at_its_new_time() {
    let dir = tempfile::tempdir().unwrap();
    let (broker, schedule) = open(dir.path(), 1024);
    let now = now_ms();
    send(&broker, "q", "late-made-early", now + 60_000, true).await;
    send(&broker, "q", "early-made-late", now + 200, false).await;
    send(&broker, "q", "past", now + 60_000, true).await;
    let earlier = id_of(&schedule, "q", "late-made-early").await;
    let later = id_of(&schedule, "q", "early-made-late").await;
    let past = id_of(&schedule, "q", "past").await;

    let new_early = now + 500;
    let new_late = now + 1_200;
    let moved = schedule.reschedule(&earlier, new_early).await.unwrap();
    assert_eq!(moved.due_ms, new_early);
    assert_ne!(moved.id, earlier, "the due time is part of the id");
    schedule.reschedule(&later, new_late).await.unwrap();
    // Into the past: due now.
    let past_moved = schedule.reschedule(&past, 1).await.unwrap();
    assert!(past_moved.due_ms >= now);
    // Past the queue's max_message_delay (15 minutes by default).
    let too_far = schedule.reschedule(&moved.id, now_ms() + 3_600_000).await;
    assert!(
        matches!(
            too_far,
            Err(ScheduleEditError::OutOfRange {
                max_ms: 900_000,
                ..
            })
        ),
        "{too_far:?}"
    );
    assert!(matches!(
        schedule.reschedule(&earlier, now + 100).await,
        Err(ScheduleEditError::NotFound(_))
    ));
    assert!(matches!(
        schedule.reschedule("nonsense", now).await,
        Err(ScheduleEditError::BadId(_))
    ));

    let (_sub, mut rx) = consume(&broker);
    let got = receive(&mut rx, 3).await;
    assert_eq!(body(&got[0].0), "past", "due at once");
    assert!(receive(&mut rx, 1).await.is_empty(), "each once");
    let arrivals: HashMap<String, u64> = got.iter().map(|(d, at)| (body(d), *at)).collect();
    assert_eq!(arrivals.len(), 3, "{arrivals:?}");
    assert!(past_moved.due_ms <= now_ms());
    let early_at = arrivals["late-made-early"];
    assert!(
        (new_early..new_late).contains(&early_at),
        "arrived at {} ms",
        early_at - now
    );
    let late_at = arrivals["early-made-late"];
    assert!(
        late_at >= new_late,
        "arrived {} ms early",
        new_late - late_at
    );
    schedule.shutdown().await;
}

#[tokio::test]
async fn an_edited_message_arrives_edited_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let due = now_ms() + 1_500;
    let (broker, schedule) = open(dir.path(), 1024);
    let original = Message {
        properties: vec![("note".into(), Value::String("original".into()))].into(),
        // As a protocol keeps it to forward unchanged.
        wire: Some(WireForm {
            format: 7,
            bytes: bytes::Bytes::from_static(b"original encoding"),
        }),
        ..delayed("old body", due, true)
    };
    send_message(&broker, original).await;
    let id = id_of(&schedule, "q", "old body").await;
    let before = schedule.view(&id).await.unwrap();
    assert_eq!(before.body_text.as_deref(), Some("old body"));
    assert_eq!(
        before.summary.properties,
        [PropertyEntry {
            name: "note".into(),
            value: PropertyValue::String("original".into()),
        }]
    );

    let edited = schedule
        .edit(
            &id,
            MessageEdit {
                properties: Some(vec![PropertyEntry {
                    name: "note".into(),
                    value: PropertyValue::String("edited".into()),
                }]),
                body: Some(bytes::Bytes::from_static(b"new body")),
                headers: HeaderEdit {
                    priority: Some(8),
                    content_type: Some(Some("application/json".into())),
                    correlation_id: Some(Some("order-7".into())),
                    reply_to: Some(Some("replies".into())),
                    subject: Some(Some("audit".into())),
                    group_id: Some(Some("g1".into())),
                    expires_ms: Some(Some(due + 3_600_000)),
                    group_seq: None,
                },
            },
        )
        .await
        .unwrap();
    assert_eq!(edited.id, id, "an edit keeps the due time");
    assert_eq!(edited.headers.priority, 8);
    assert_eq!(edited.group_id.as_deref(), Some("g1"));
    assert_eq!(schedule.view(&id).await.unwrap().body, "new body");
    stop(broker, schedule).await;

    let (broker, schedule) = open(dir.path(), 1024);
    assert_eq!(
        schedule.view(&id).await.unwrap().body_text.as_deref(),
        Some("new body")
    );
    let (_sub, mut rx) = consume(&broker);
    let got = receive(&mut rx, 2).await;
    assert_eq!(got.len(), 1);
    let (delivery, at) = &got[0];
    assert!(*at >= due, "not early");
    assert_eq!(body(delivery), "new body");
    assert_eq!(
        delivery.message.property("note"),
        Some(&Value::String("edited".into()))
    );
    let m = &delivery.message;
    assert_eq!(m.priority, 8);
    assert_eq!(m.content_type.as_deref(), Some("application/json"));
    assert_eq!(m.correlation_id.as_deref(), Some("order-7"));
    assert_eq!(m.reply_to.as_deref(), Some("replies"));
    assert_eq!(m.subject.as_deref(), Some("audit"));
    assert_eq!(m.group_id.as_deref(), Some("g1"));
    assert_eq!(m.expires_at, Some(due + 3_600_000));
    assert!(
        delivery.message.wire.is_none(),
        "the original encoding is not forwarded"
    );
    schedule.shutdown().await;
}

#[tokio::test]
async fn an_edit_keeps_the_window_bytes_right() {
    let dir = tempfile::tempdir().unwrap();
    let (broker, schedule) = open(dir.path(), 1024);
    let due = now_ms() + 60_000;
    send(&broker, "q", "small", due, false).await;
    let bytes = || schedule.inner.window.lock().bytes;
    let before = bytes();
    let id = id_of(&schedule, "q", "small").await;
    let big = bytes::Bytes::from(vec![b'x'; 10_000]);
    let edit = MessageEdit {
        body: Some(big),
        ..MessageEdit::default()
    };
    schedule.edit(&id, edit).await.unwrap();
    assert_eq!(bytes(), before + 10_000 - "small".len());
    schedule.cancel(&id).await.unwrap();
    assert_eq!(bytes(), 0);
    schedule.shutdown().await;
}

#[tokio::test]
async fn pages_return_every_message_once_in_due_order() {
    let dir = tempfile::tempdir().unwrap();
    // A small window: entries in memory, on disk, and memory-only (not durable).
    let (broker, schedule) = open(dir.path(), 16);
    let base = now_ms() + 60_000;
    let queues = ["a", "b", "c", "d", "e"];
    let n = 300;
    for i in 0..n {
        let queue = queues[i % queues.len()];
        let due = base + (i as u64 * 37 % 101) * 10;
        send(&broker, queue, &i.to_string(), due, i % 4 != 0).await;
    }
    let listed = all_pages(&schedule, query(None, 7)).await;
    assert_eq!(listed.len(), n);
    let distinct: HashSet<&str> = listed.iter().map(|e| e.body_preview.as_str()).collect();
    assert_eq!(distinct.len(), n, "each exactly once");
    let keys: Vec<ScheduleKey> = listed.iter().map(|e| parse_key(&e.id).unwrap()).collect();
    assert!(keys.windows(2).all(|w| w[0] < w[1]), "in due order");
    assert!(listed.windows(2).all(|w| w[0].due_ms <= w[1].due_ms));

    let mut per_queue = 0;
    for queue in queues {
        let listed = all_pages(&schedule, query(Some(queue), 9)).await;
        assert!(listed.iter().all(|e| e.queue == queue));
        per_queue += listed.len();
    }
    assert_eq!(per_queue, n);
    assert!(matches!(
        schedule.list_page(&query(Some("nowhere"), 1)).await,
        Err(ScheduleEditError::UnknownQueue(_))
    ));
    schedule.shutdown().await;
}

#[tokio::test]
async fn a_due_time_range_lists_and_counts_only_its_messages() {
    let dir = tempfile::tempdir().unwrap();
    let (broker, schedule) = open(dir.path(), 8);
    let base = now_ms() + 60_000;
    for i in 0..50u64 {
        let queue = if i % 2 == 0 { "even" } else { "odd" };
        send(&broker, queue, &i.to_string(), base + i * 10, i % 3 != 0).await;
    }
    let range = ScheduleQuery {
        from_ms: Some(base + 100),
        to_ms: Some(base + 200),
        ..query(None, 4)
    };
    let listed = all_pages(&schedule, range.clone()).await;
    let bodies: Vec<&str> = listed.iter().map(|e| e.body_preview.as_str()).collect();
    let expected: Vec<String> = (10..20).map(|i| i.to_string()).collect();
    assert_eq!(bodies, expected);
    let even = all_pages(
        &schedule,
        ScheduleQuery {
            queue: Some("even".into()),
            ..range
        },
    )
    .await;
    let bodies: Vec<&str> = even.iter().map(|e| e.body_preview.as_str()).collect();
    assert_eq!(bodies, ["10", "12", "14", "16", "18"]);

    let timeline = schedule.timeline(None, base..base + 500, 5).await.unwrap();
    assert_eq!(timeline.bucket_ms, 100);
    assert_eq!(timeline.counts, [10, 10, 10, 10, 10]);
    let odd = schedule
        .timeline(Some("odd"), base + 100..base + 300, 2)
        .await
        .unwrap();
    assert_eq!(odd.counts, [5, 5]);
    schedule.shutdown().await;
}

/// Many messages fall due at once while an auditor cancels each: every one
/// is either delivered or cancelled, never both, never neither.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_racing_the_timer_wins_or_loses_whole() {
    let dir = tempfile::tempdir().unwrap();
    let (broker, schedule) = open(dir.path(), 64);
    let n = 200usize;
    let mut outcomes = (0, 0);
    for (round, offset) in [-8i64, -4, -2, 0, 1, 3].into_iter().enumerate() {
        let due = now_ms() + 300;
        let queue = format!("race{round}");
        let (_sub, mut rx) = consume_window(&broker, &queue, 100_000);
        for i in 0..n {
            send(&broker, &queue, &i.to_string(), due, i % 2 == 0).await;
        }
        let ids: Vec<(String, String)> = list_all(&schedule, &queue)
            .await
            .into_iter()
            .map(|e| (e.id, e.body_preview))
            .collect();
        assert_eq!(ids.len(), n);
        let start = due as i64 + offset;
        tokio::time::sleep(Duration::from_millis(
            start.saturating_sub(now_ms() as i64).max(0) as u64,
        ))
        .await;
        let mut cancelled = HashSet::new();
        let mut already_due = HashSet::new();
        for (id, body) in &ids {
            match schedule.cancel(id).await {
                Ok(_) => assert!(cancelled.insert(body.clone())),
                Err(ScheduleEditError::AlreadyDue(_)) => assert!(already_due.insert(body.clone())),
                Err(e) => panic!("round {round}: {e}"),
            }
        }
        let mut got = receive(&mut rx, n - cancelled.len()).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        while let Ok(d) = rx.try_recv() {
            got.push((d, now_ms()));
        }
        let delivered: HashSet<String> = got.iter().map(|(d, _)| body(d)).collect();
        assert_eq!(delivered.len(), got.len(), "round {round}: delivered twice");
        assert!(
            cancelled.is_disjoint(&delivered),
            "round {round}: cancelled and delivered"
        );
        assert_eq!(
            cancelled.len() + delivered.len(),
            n,
            "round {round}: lost some"
        );
        assert_eq!(already_due, delivered, "round {round}");
        outcomes.0 += cancelled.len();
        outcomes.1 += delivered.len();
    }
    // Both sides of the race were met (not a test that cannot fail).
    assert!(outcomes.0 > 0 && outcomes.1 > 0, "{outcomes:?}");
    schedule.shutdown().await;
}

#[tokio::test]
async fn a_rescheduled_grouped_message_goes_to_its_group_owner() {
    let dir = tempfile::tempdir().unwrap();
    let (broker, schedule) = open(dir.path(), 1024);
    let (_a, mut rx_a) = consume_window(&broker, "g", 100);
    let (_b, mut rx_b) = consume_window(&broker, "g", 100);
    let grouped = |body: &str, due: Option<u64>| Message {
        address: Arc::from("g"),
        group_id: Some(Arc::from("G")),
        due_at: due,
        ..delayed(body, 0, true)
    };
    send_message(&broker, grouped("first", None)).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (first, mut owner_rx, mut other_rx) = match rx_a.try_recv() {
        Ok(d) => (d, rx_a, rx_b),
        Err(_) => (rx_b.try_recv().expect("one consumer got it"), rx_b, rx_a),
    };
    let owner = first.consumer;
    send_message(&broker, grouped("later", Some(now_ms() + 60_000))).await;
    let id = id_of(&schedule, "g", "later").await;
    assert_eq!(
        schedule
            .view(&id)
            .await
            .unwrap()
            .summary
            .group_id
            .as_deref(),
        Some("G")
    );
    schedule.reschedule(&id, now_ms() + 100).await.unwrap();
    let got = receive(&mut owner_rx, 1).await;
    assert_eq!(got.len(), 1, "the group's owner received it");
    let (delivery, _) = &got[0];
    assert_eq!(body(delivery), "later");
    assert_eq!(delivery.consumer, owner);
    assert_eq!(delivery.message.group_id.as_deref(), Some("G"));
    assert!(other_rx.try_recv().is_err(), "not the other consumer");
    schedule.shutdown().await;
}

#[test]
fn header_edits_name_what_they_refuse() {
    let json = |text: &str| -> serde_json::Map<String, serde_json::Value> {
        serde_json::from_str(text).unwrap()
    };
    let edit = HeaderEdit::from_json(
        &json(r#"{"priority": 0, "ttl_ms": 500, "content_type": null, "group_seq": -1}"#),
        1_000,
    )
    .unwrap();
    assert_eq!(edit.priority, Some(0));
    assert_eq!(edit.expires_ms, Some(Some(1_500)));
    assert_eq!(edit.content_type, Some(None), "null clears");
    assert_eq!(edit.group_seq, Some(Some(-1)));
    assert_eq!(edit.reply_to, None, "left out, left alone");
    for (text, field) in [
        (r#"{"message_id": "x"}"#, "message_id"),
        (r#"{"queue": "other"}"#, "queue"),
        (r#"{"user_id": "mallory"}"#, "user_id"),
        (r#"{"due_ms": 5}"#, "due_ms"),
        (r#"{"colour": "red"}"#, "colour"),
        (r#"{"priority": 10}"#, "priority"),
        (r#"{"priority": "high"}"#, "priority"),
        (r#"{"subject": 5}"#, "subject"),
        (r#"{"expires_ms": -1}"#, "expires_ms"),
        (r#"{"ttl_ms": 5, "expires_ms": 9}"#, "ttl_ms"),
    ] {
        let e = HeaderEdit::from_json(&json(text), 0).unwrap_err();
        assert_eq!(e.field, field, "{text}: {e}");
    }
}
