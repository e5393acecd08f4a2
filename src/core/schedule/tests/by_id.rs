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
