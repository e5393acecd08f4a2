//! A message whose ttl ends before its delay (Zaqar's ttl < delay): it waits,
//! listed and found by id, until its ttl ends, then leaves as an expired
//! message does, never delivered; a durable one across a restart too.

use super::*;

/// Queues whose expired messages go to `expired`.
fn open_expiring(dir: &std::path::Path) -> (Broker, Arc<Schedule>) {
    let queues = QueueSettings {
        expiry_address: Some("expired".to_owned()),
        ..QueueSettings::default()
    };
    open_full(dir, queues, ScheduleOptions::default())
}

fn expiring(id: &str, due_ms: u64, expires_ms: u64, durable: bool) -> Message {
    Message {
        message_id: Some(Arc::from(id)),
        expires_at: Some(expires_ms),
        ..delayed(id, due_ms, durable)
    }
}

async fn ids_found(schedule: &Schedule, id: &str) -> usize {
    schedule
        .find_by_message_ids("q", &[id])
        .await
        .unwrap()
        .len()
}

#[tokio::test]
async fn a_message_whose_ttl_ends_first_waits_until_then_and_is_never_delivered() {
    for durable in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let (broker, schedule) = open_expiring(dir.path());
        let (_sub, mut rx) = consume(&broker);
        let (_expired_sub, mut expired) = consume_window(&broker, "expired", 100);
        let sent = now_ms();
        let (due, expires) = (sent + 3_000, sent + 400);
        send_message(&broker, expiring("short", due, expires, durable)).await;
        let q = broker.queue("q").unwrap();

        // Waiting, as any delayed message: counted, listed, found by id.
        assert_eq!(schedule.delayed(q.id()), 1, "durable {durable}");
        let listed = list_all(&schedule, "q").await;
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].due_ms, due, "the due time, not the expiry");
        assert_eq!(listed[0].headers.expires_ms, Some(expires));
        assert_eq!(ids_found(&schedule, "short").await, 1);
        assert_eq!(q.totals().expired, 0);

        // At its expiry it goes to the expiry address, not before.
        let got = receive(&mut expired, 1).await;
        assert_eq!(
            got.len(),
            1,
            "durable {durable}: expired to the expiry address"
        );
        assert!(got[0].1 >= expires, "{} ms early", expires - got[0].1);
        assert!(got[0].1 < due, "at its expiry, not at its due time");
        assert_eq!(body(&got[0].0), "short");
        assert_eq!(schedule.delayed(q.id()), 0);
        assert!(list_all(&schedule, "q").await.is_empty());
        assert_eq!(ids_found(&schedule, "short").await, 0);
        assert_eq!(q.totals().expired, 1);
        assert_eq!(q.totals().enqueued, 0, "it never entered its queue");
        assert_eq!(schedule.lateness().count, 0, "nothing was delivered late");

        // Past its due time too: never delivered.
        tokio::time::sleep(Duration::from_millis(due.saturating_sub(now_ms()) + 100)).await;
        assert!(rx.try_recv().is_err(), "durable {durable}: never delivered");
        schedule.shutdown().await;
    }
}

#[tokio::test]
async fn a_durable_one_waits_across_a_restart_until_its_ttl_ends() {
    let dir = tempfile::tempdir().unwrap();
    let sent = now_ms();
    let (due, expires) = (sent + 5_000, sent + 1_200);
    {
        let (broker, schedule) = open_expiring(dir.path());
        send_message(&broker, expiring("short", due, expires, true)).await;
        schedule.shutdown().await;
    }
    let (broker, schedule) = open_expiring(dir.path());
    let (_sub, mut rx) = consume(&broker);
    let (_expired_sub, mut expired) = consume_window(&broker, "expired", 100);
    let q = broker.queue("q").unwrap();
    assert!(now_ms() < expires, "the restart took too long to test this");
    assert_eq!(schedule.delayed(q.id()), 1);
    assert_eq!(list_all(&schedule, "q").await.len(), 1);
    assert_eq!(ids_found(&schedule, "short").await, 1);

    let got = receive(&mut expired, 1).await;
    assert_eq!(got.len(), 1, "expired to the expiry address");
    assert!(got[0].1 >= expires);
    assert_eq!(q.totals().expired, 1);
    assert!(list_all(&schedule, "q").await.is_empty());
    assert!(rx.try_recv().is_err());
    schedule.shutdown().await;
    drop((_sub, rx, _expired_sub, expired, got, q, schedule, broker));

    // Its record went with it: the next start neither lists nor expires it again.
    let (broker, schedule) = open_expiring(dir.path());
    assert!(list_all(&schedule, "q").await.is_empty());
    assert_eq!(broker.queue("q").map_or(0, |q| q.totals().expired), 0);
    schedule.shutdown().await;
}

#[tokio::test]
async fn a_rescheduled_one_keeps_its_ttl() {
    let dir = tempfile::tempdir().unwrap();
    let (broker, schedule) = open_expiring(dir.path());
    let (_sub, mut rx) = consume(&broker);
    let sent = now_ms();
    // Due before its ttl ends, then moved past it: it expires instead.
    send_message(&broker, expiring("moved", sent + 200, sent + 600, true)).await;
    let id = list_all(&schedule, "q").await[0].id.clone();
    let moved = schedule.reschedule(&id, sent + 3_000).await.unwrap();
    assert_eq!(moved.due_ms, sent + 3_000);
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert!(
        list_all(&schedule, "q").await.is_empty(),
        "removed at its ttl"
    );
    assert_eq!(broker.queue("q").unwrap().totals().expired, 1);
    assert!(rx.try_recv().is_err());
    schedule.shutdown().await;
}

#[tokio::test]
async fn an_edit_that_lengthens_the_ttl_lets_it_be_delivered_when_due() {
    let dir = tempfile::tempdir().unwrap();
    let (broker, schedule) = open_expiring(dir.path());
    let (_sub, mut rx) = consume(&broker);
    let sent = now_ms();
    let due = sent + 900;
    send_message(&broker, expiring("edited", due, sent + 300, true)).await;
    let id = list_all(&schedule, "q").await[0].id.clone();
    let edit = MessageEdit {
        headers: HeaderEdit {
            expires_ms: Some(Some(sent + 60_000)),
            ..HeaderEdit::default()
        },
        ..MessageEdit::default()
    };
    schedule.edit(&id, edit).await.unwrap();
    let got = receive(&mut rx, 1).await;
    assert_eq!(got.len(), 1, "delivered when due");
    assert!(got[0].1 >= due, "{} ms early", due - got[0].1);
    assert_eq!(broker.queue("q").unwrap().totals().expired, 0);
    schedule.shutdown().await;
}
