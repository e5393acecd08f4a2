//! Waiting messages found by message id: in one queue only, on disk past
//! the window, in memory only, and across a restart.

use super::*;

async fn send(broker: &Broker, address: &str, id: &str, due_ms: u64, durable: bool) {
    let message = Message {
        address: Arc::from(address),
        message_id: Some(Arc::from(id)),
        ..delayed(id, due_ms, durable)
    };
    send_message(broker, message).await;
}

async fn found(schedule: &Schedule, queue: &str, ids: &[&str]) -> Vec<String> {
    schedule
        .find_by_message_ids(queue, ids)
        .await
        .unwrap()
        .iter()
        .map(|e| String::from_utf8_lossy(&e.message.body).into_owned())
        .collect()
}

#[tokio::test]
async fn a_waiting_message_is_found_by_id_in_its_own_queue_only() {
    let dir = tempfile::tempdir().unwrap();
    let (broker, schedule) = open(dir.path(), 2);
    broker.queue_or_create("q", true).unwrap();
    broker.queue_or_create("other", true).unwrap();
    let later = now_ms() + 60_000;
    // More than a page of lookups on disk; the window holds two.
    for i in 0..70u64 {
        send(&broker, "q", &format!("m{i}"), later + i, true).await;
    }
    send(&broker, "other", "m5", later, true).await;
    send(&broker, "other", "elsewhere", later, true).await;
    // Not durable (nor is the queue): in memory only while the window holds it.
    send(&broker, "q", "memory", later - 1, false).await;

    assert_eq!(
        found(&schedule, "q", &["m69", "nope", "m5", "memory"]).await,
        ["memory", "m5", "m69"],
        "in due order"
    );
    assert!(found(&schedule, "q", &["elsewhere"]).await.is_empty());
    assert!(found(&schedule, "q", &[]).await.is_empty());
    assert!(matches!(
        schedule.find_by_message_ids("nowhere", &["m5"]).await,
        Err(ScheduleEditError::UnknownQueue(_))
    ));

    // Cancelled by the key found: found no more, in this run or the next.
    let hit = schedule.find_by_message_ids("q", &["m7"]).await.unwrap();
    schedule.cancel(&format_key(&hit[0].key)).await.unwrap();
    assert!(found(&schedule, "q", &["m7"]).await.is_empty());
    schedule.shutdown().await;
    drop(schedule);
    drop(broker);

    let (_broker, schedule) = open(dir.path(), 2);
    assert_eq!(found(&schedule, "q", &["m7", "m8"]).await, ["m8"]);
    assert_eq!(found(&schedule, "other", &["m5"]).await, ["m5"]);
    assert!(
        found(&schedule, "q", &["memory"]).await.is_empty(),
        "not durable: gone with the restart"
    );
    schedule.shutdown().await;
}

/// Entries the index holds under `id` in `queue`, whether or not they still wait.
fn indexed(schedule: &Schedule, broker: &Broker, queue: &str, id: &str) -> usize {
    let queue = broker.queue(queue).unwrap().id();
    schedule
        .inner
        .ids
        .keys_of(queue, id)
        .map_or(0, |keys| keys.len())
}

#[tokio::test]
async fn a_queue_never_looked_up_by_id_keeps_no_index() {
    let dir = tempfile::tempdir().unwrap();
    let (broker, schedule) = open(dir.path(), 2);
    let later = now_ms() + 60_000;
    for i in 0..10u64 {
        send(&broker, "q", &format!("m{i}"), later + i, true).await;
    }
    let q = broker.queue("q").unwrap();
    assert!(!schedule.has_id_index(q.id()));
    assert!(!schedule.inner.ids.kept(), "scheduling enters nothing");
    assert_eq!(schedule.records_read_by_id(), 0);
    schedule.shutdown().await;
}

#[tokio::test]
async fn after_the_build_a_miss_reads_no_record_and_a_hit_reads_one() {
    let dir = tempfile::tempdir().unwrap();
    let (broker, schedule) = open(dir.path(), 2);
    let later = now_ms() + 60_000;
    // More than a chunk of the build's reads; the window holds two.
    for i in 0..1100u64 {
        send(&broker, "q", &format!("m{i}"), later + i, true).await;
    }
    assert_eq!(found(&schedule, "q", &["m1050"]).await, ["m1050"]);
    let built = schedule.records_read_by_id();
    assert!(built >= 1098, "the build read the queue's records: {built}");
    assert!(found(&schedule, "q", &["nope", "m5000"]).await.is_empty());
    assert_eq!(schedule.records_read_by_id(), built, "a miss reads nothing");
    assert_eq!(found(&schedule, "q", &["m700"]).await, ["m700"]);
    assert_eq!(
        schedule.records_read_by_id(),
        built + 1,
        "a hit on disk reads one"
    );
    schedule.shutdown().await;
}

#[tokio::test]
async fn the_index_follows_entries_scheduled_released_cancelled_and_rescheduled() {
    let dir = tempfile::tempdir().unwrap();
    let (broker, schedule) = open(dir.path(), 4);
    let (_sub, mut rx) = consume(&broker);
    let now = now_ms();
    let later = now + 60_000;
    send(&broker, "q", "soon", now + 300, true).await;
    send(&broker, "q", "cancelled", later, true).await;
    send(&broker, "q", "moved", later + 1, true).await;
    send(&broker, "q", "volatile", later + 2, false).await;
    // Its ttl ends before it is due: removed then.
    let expiring = Message {
        expires_at: Some(now + 350),
        ..delayed("expiring", later, true)
    };
    send_message(
        &broker,
        Message {
            message_id: Some(Arc::from("expiring")),
            ..expiring
        },
    )
    .await;
    for i in 0..20u64 {
        send(&broker, "q", &format!("far{i}"), later + 100 + i, true).await;
    }
    assert_eq!(
        found(&schedule, "q", &["soon", "expiring"]).await,
        ["soon", "expiring"]
    );
    let q = broker.queue("q").unwrap();
    assert!(schedule.has_id_index(q.id()), "built by the first lookup");

    // Scheduled after the build, in memory and on disk only: found.
    send(&broker, "q", "after", later + 3, false).await;
    send(&broker, "q", "after-far", later + 500, true).await;
    assert_eq!(
        found(&schedule, "q", &["after", "after-far", "volatile", "far19"]).await,
        ["volatile", "after", "far19", "after-far"]
    );

    // Released when due: in its queue, not waiting any more.
    assert_eq!(receive(&mut rx, 1).await.len(), 1);
    assert!(found(&schedule, "q", &["soon"]).await.is_empty());
    assert_eq!(
        indexed(&schedule, &broker, "q", "soon"),
        0,
        "left the index"
    );
    // Expired just after the release.
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert!(found(&schedule, "q", &["expiring"]).await.is_empty());
    assert_eq!(indexed(&schedule, &broker, "q", "expiring"), 0);

    let hit = schedule
        .find_by_message_ids("q", &["cancelled"])
        .await
        .unwrap();
    schedule.cancel(&format_key(&hit[0].key)).await.unwrap();
    assert!(found(&schedule, "q", &["cancelled"]).await.is_empty());
    assert_eq!(indexed(&schedule, &broker, "q", "cancelled"), 0);

    let hit = schedule.find_by_message_ids("q", &["moved"]).await.unwrap();
    let moved = schedule
        .reschedule(&format_key(&hit[0].key), later + 900)
        .await
        .unwrap();
    let again = schedule.find_by_message_ids("q", &["moved"]).await.unwrap();
    assert_eq!(again.len(), 1);
    assert_eq!(
        format_key(&again[0].key),
        moved.id,
        "found under its new key"
    );
    assert_eq!(
        indexed(&schedule, &broker, "q", "moved"),
        1,
        "not its old key"
    );
    schedule.shutdown().await;
}

#[tokio::test]
async fn messages_scheduled_while_the_index_is_built_are_found() {
    let dir = tempfile::tempdir().unwrap();
    let (broker, schedule) = open(dir.path(), 8);
    let later = now_ms() + 60_000;
    for i in 0..3000u64 {
        send(&broker, "q", &format!("m{i}"), later + i, i % 3 != 0).await;
    }
    let producer = {
        let broker = broker.clone();
        tokio::spawn(async move {
            for i in 0..300u64 {
                send(&broker, "q", &format!("n{i}"), later + i, i % 2 == 0).await;
            }
        })
    };
    let first = found(&schedule, "q", &["m2999"]).await;
    producer.await.unwrap();
    assert_eq!(first, ["m2999"]);
    for i in [0u64, 1, 150, 298, 299] {
        let id = format!("n{i}");
        assert_eq!(
            found(&schedule, "q", &[&id]).await,
            std::slice::from_ref(&id)
        );
    }
    schedule.shutdown().await;
}
