"""Receipted persistent messages survive `kill -9`; acked ones stay gone."""

N = 200
ACKED = 50


def test_persistent_messages_survive_kill_9(broker, client_factory, queue_name):
    p = client_factory()
    bodies = [f"durable-{i:04d}" for i in range(N)]
    for b in bodies:
        # The RECEIPT may only come once the message is on disk.
        p.send(queue_name, b, headers={"persistent": "true"})

    c = client_factory()
    c.subscribe(queue_name, ack="client-individual", headers={"prefetch": str(ACKED)})
    first = c.get_n(ACKED)
    assert [m.body for m in first] == bodies[:ACKED]
    for m in first:
        c.ack(m)  # each waits for its RECEIPT

    broker.restart_after_crash()

    c2 = client_factory()
    c2.subscribe(queue_name, ack="client-individual")
    got = c2.get_n(N - ACKED, timeout=10)
    assert [m.body for m in got] == bodies[ACKED:], "all un-acked messages, once, in order"
    c2.assert_no_message(1.5)
    for m in got:
        c2.ack(m)


def test_transactional_persistent_sends_survive_kill_9(broker, client_factory, queue_name):
    p = client_factory()
    tx = p.begin()
    for i in range(10):
        p.send(queue_name, f"tx-{i}", headers={"persistent": "true"}, transaction=tx)
    p.commit(tx)  # the COMMIT receipt covers all ten
    aborted = p.begin()
    p.send(queue_name, "never", headers={"persistent": "true"}, transaction=aborted)
    p.abort(aborted)

    broker.restart_after_crash()

    c = client_factory()
    c.subscribe(queue_name)
    assert [m.body for m in c.drain()] == [f"tx-{i}" for i in range(10)]


def test_headers_survive_restart(broker, client_factory, queue_name):
    p = client_factory()
    p.send(queue_name, "with headers",
           headers={"persistent": "true", "x-k": "a:b\nc", "content-type": "text/plain"})
    broker.restart_after_crash()
    c = client_factory()
    c.subscribe(queue_name)
    m = c.get(timeout=10)
    assert m.body == "with headers"
    assert m.headers.get("x-k") == "a:b\nc"
    assert m.headers.get("content-type") == "text/plain"
    assert m.headers.get("persistent") == "true"


def test_repeated_crashes_never_duplicate(broker, client_factory, queue_name):
    p = client_factory()
    bodies = [f"r-{i:03d}" for i in range(60)]
    for b in bodies:
        p.send(queue_name, b, headers={"persistent": "true"})
    remaining = bodies
    for _ in range(3):
        c = client_factory()
        c.subscribe(queue_name, ack="client-individual", headers={"prefetch": "20"})
        got = c.get_n(20, timeout=10)
        assert [m.body for m in got] == remaining[:20]
        for m in got:
            c.ack(m)
        remaining = remaining[20:]
        broker.restart_after_crash()
    c = client_factory()
    c.subscribe(queue_name)
    c.assert_no_message(1.5)
