"""Sending and receiving: routing, headers, bodies, expiry, transactions."""

import time

from clients import Client, escape, unique


def test_send_receive_queue_with_receipts(client_factory, queue_name):
    producer = client_factory()
    consumer = client_factory()
    consumer.subscribe(queue_name)
    bodies = [unique("m") for _ in range(10)]
    for b in bodies:
        producer.send(queue_name, b)  # waits for its RECEIPT
    got = [m.body for m in consumer.get_n(len(bodies))]
    assert got == bodies, "a single consumer must see queue messages in send order"
    consumer.assert_no_message()


def test_volume_in_order_without_loss(client_factory, queue_name):
    """Pipelined sends (no receipt until the last) exercise frames split across reads."""
    producer, consumer = client_factory(), client_factory()
    consumer.subscribe(queue_name)
    n = 2000
    for i in range(n - 1):
        producer.send(queue_name, f"v{i:05d}" + "." * (i % 300), receipt=False)
    producer.send(queue_name, f"v{n - 1:05d}")
    got = [m.body[:6] for m in consumer.get_n(n, timeout=20)]
    assert got == [f"v{i:05d}" for i in range(n)]


def test_message_sent_before_subscribe_is_kept(client_factory, queue_name):
    producer = client_factory()
    producer.send(queue_name, "early")
    consumer = client_factory()
    consumer.subscribe(queue_name)
    assert consumer.get().body == "early"


def test_plain_name_is_a_queue(client_factory):
    name = unique("plain")
    producer = client_factory()
    a, b = client_factory(), client_factory()
    a.subscribe(name)
    b.subscribe(name)
    producer.send(name, "once")
    got = a.drain() + b.drain()
    assert [m.body for m in got] == ["once"], "a plain destination is anycast, like /queue/"


def test_queue_is_anycast(client_factory, queue_name):
    producer = client_factory()
    a, b = client_factory(), client_factory()
    a.subscribe(queue_name)
    b.subscribe(queue_name)
    bodies = [f"m{i}" for i in range(20)]
    for body in bodies:
        producer.send(queue_name, body)
    got_a = [m.body for m in a.drain()]
    got_b = [m.body for m in b.drain()]
    assert sorted(got_a + got_b) == sorted(bodies), (got_a, got_b)
    assert len(got_a + got_b) == len(bodies), "each queue message goes to exactly one consumer"
    assert got_a and got_b, f"both consumers should share the load: a={got_a} b={got_b}"


def test_topic_is_multicast(client_factory, topic_name):
    producer = client_factory()
    subs = [client_factory() for _ in range(3)]
    for s in subs:
        s.subscribe(topic_name)
    bodies = [f"m{i}" for i in range(10)]
    for body in bodies:
        producer.send(topic_name, body)
    for s in subs:
        assert [m.body for m in s.get_n(len(bodies))] == bodies
        s.assert_no_message(0.3)


def test_topic_without_subscribers_drops(client_factory, topic_name):
    producer = client_factory()
    producer.send(topic_name, "nobody listening")
    late = client_factory()
    late.subscribe(topic_name)
    late.assert_no_message()


def test_user_headers_end_to_end(client_factory, queue_name):
    c = client_factory()
    c.subscribe(queue_name)
    headers = {"x-order-id": "12345", "correlation-id": "abc-1", "reply-to": "/queue/replies",
               "content-type": "application/json", "custom_underscore": "v"}
    c.send(queue_name, '{"a": 1}', headers=headers)
    msg = c.get()
    for k, v in headers.items():
        assert msg.headers.get(k) == v, (k, msg.headers)
    assert msg.body == '{"a": 1}'


def test_header_escaping_round_trip(client_factory, queue_name):
    c = client_factory()
    c.subscribe(queue_name)
    value = "a:b\nc\\d::\\n"
    c.send(queue_name, "esc", headers={"x-tricky": value, "x-colon": "k:v"})
    msg = c.get()
    assert msg.headers.get("x-tricky") == value, msg.headers
    assert msg.headers.get("x-colon") == "k:v", msg.headers


def test_header_escaping_on_the_wire(raw_factory, queue_name):
    """The broker must decode escapes on input and encode them again on output (1.2)."""
    raw = raw_factory()
    assert raw.connect(version="1.2").command == "CONNECTED"
    raw.send_frame("SUBSCRIBE", {"destination": queue_name, "id": "s1", "receipt": "r1"})
    raw.expect_receipt("r1")
    raw.send_frame("SEND", {"destination": queue_name, "x-h": "a:b\nc\\d", "receipt": "r2"},
                   b"body")
    frames = [raw.read_frame(), raw.read_frame()]
    msg = next(f for f in frames if f.command == "MESSAGE")
    assert msg.headers.get("x-h") == "a:b\nc\\d", msg.headers
    wire = next(line for line in msg.raw_header_lines if line.startswith("x-h:"))
    assert wire == "x-h:" + escape("a:b\nc\\d"), wire


def test_body_with_nul_bytes_via_content_length(client_factory, queue_name):
    c = client_factory(auto_decode=False)
    c.subscribe(queue_name)
    body = b"\x00start\x00middle\x00\x00end\x00\xff\xfe"
    c.send(queue_name, body, headers={"content-length": str(len(body))})
    msg = c.get()
    assert msg.body == body
    assert msg.headers.get("content-length") == str(len(body))


def test_large_body_under_limit(client_factory, queue_name):
    c = client_factory()
    c.subscribe(queue_name)
    body = "x" * 60000
    c.send(queue_name, body)
    assert c.get().body == body


def test_large_and_small_bodies_interleaved_arrive_whole_and_in_order(client_factory, queue_name):
    # Large bodies leave the broker as the slices they arrived in, small ones
    # copied between them: each body must come back byte for byte, in order.
    c = client_factory(auto_decode=False)
    c.subscribe(queue_name)
    bodies = [
        bytes((i * 7 + j) % 256 for j in range(size))
        for i, size in enumerate([20_000, 10, 4096, 4095, 60_000, 1, 16_384, 300] * 4)
    ]
    for body in bodies:
        c.send(queue_name, body, headers={"content-length": str(len(body))})
    got = [m.body for m in c.get_n(len(bodies))]
    assert [len(b) for b in got] == [len(b) for b in bodies]
    assert got == bodies


def test_expired_messages_are_not_delivered(client_factory, queue_name):
    p = client_factory()
    now_ms = int(time.time() * 1000)
    p.send(queue_name, "already expired", headers={"expires": str(now_ms - 60_000)})
    p.send(queue_name, "short ttl", headers={"ttl": "200"})
    p.send(queue_name, "expires later", headers={"expires": str(now_ms + 600_000)})
    p.send(queue_name, "long ttl", headers={"ttl": "600000"})
    p.send(queue_name, "no expiry")
    time.sleep(0.6)  # let the 200 ms ttl run out while nobody is subscribed
    c = client_factory()
    c.subscribe(queue_name)
    got = [m.body for m in c.drain()]
    assert got == ["expires later", "long ttl", "no expiry"]


def test_expires_zero_means_never(client_factory, queue_name):
    p = client_factory()
    p.send(queue_name, "forever", headers={"expires": "0"})
    c = client_factory()
    c.subscribe(queue_name)
    assert c.get().body == "forever"


def test_transaction_abort_discards_sends(client_factory, queue_name):
    p, c = client_factory(), client_factory()
    c.subscribe(queue_name)
    tx = p.begin()
    p.send(queue_name, "in tx 1", transaction=tx)
    p.send(queue_name, "in tx 2", transaction=tx)
    c.assert_no_message(0.5)
    p.abort(tx)
    p.send(queue_name, "after abort")
    assert [m.body for m in c.drain()] == ["after abort"]


def test_transaction_commit_delivers_in_order(client_factory, queue_name):
    p, c = client_factory(), client_factory()
    c.subscribe(queue_name)
    tx = p.begin()
    for i in range(5):
        p.send(queue_name, f"tx {i}", transaction=tx)
    c.assert_no_message(0.5)  # nothing visible before COMMIT
    p.commit(tx)
    assert [m.body for m in c.get_n(5)] == [f"tx {i}" for i in range(5)]


def test_transaction_ack_abort_then_commit(client_factory, queue_name):
    p = client_factory()
    p.send(queue_name, "acked in tx")
    c = client_factory()
    c.subscribe(queue_name, ack="client-individual")
    msg = c.get()
    tx = c.begin()
    c.ack(msg, transaction=tx)
    c.abort(tx)  # the ACK is undone: the message is still owed
    c.disconnect()

    c2 = client_factory()
    c2.subscribe(queue_name, ack="client-individual")
    again = c2.get()
    assert again.body == "acked in tx", "an aborted ACK must not consume the message"
    tx = c2.begin()
    c2.ack(again, transaction=tx)
    c2.commit(tx)
    c2.disconnect()

    c3 = client_factory()
    c3.subscribe(queue_name, ack="client-individual")
    c3.assert_no_message()


def test_unknown_transaction_is_an_error(raw_factory, queue_name):
    raw = raw_factory()
    assert raw.connect().command == "CONNECTED"
    raw.send_frame("SEND", {"destination": queue_name, "transaction": "never-begun",
                            "receipt": "r"}, b"x")
    frame = raw.read_frame()
    assert frame.command == "ERROR", frame


def test_receipt_on_every_frame(raw_factory, queue_name):
    raw = raw_factory()
    assert raw.connect().command == "CONNECTED"
    frames = [
        ("SUBSCRIBE", {"destination": queue_name, "id": "s", "ack": "client"}),
        ("BEGIN", {"transaction": "t1"}),
        ("SEND", {"destination": queue_name, "transaction": "t1"}),
        ("COMMIT", {"transaction": "t1"}),
        ("UNSUBSCRIBE", {"id": "s"}),
        ("DISCONNECT", {}),
    ]
    for i, (cmd, headers) in enumerate(frames):
        rid = f"rcpt-{i}"
        raw.send_frame(cmd, dict(headers, receipt=rid), b"")
        seen = []
        while True:
            f = raw.read_frame()
            seen.append(f)
            if f.command == "RECEIPT":
                assert f.headers.get("receipt-id") == rid, (cmd, seen)
                break
            assert f.command == "MESSAGE", (cmd, seen)
