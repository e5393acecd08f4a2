"""AMQP 1.0 with python-qpid-proton: connect, queues and topics, credit, outcomes, dynamic
nodes, the anonymous relay, selectors, browsing, transactions, durable subscriptions, delays
and STOMP <-> AMQP conversion."""

import time

import pytest
from proton import ConnectionException, Message, symbol, Timeout
from proton.reactor import Copy, DurableSubscription, Selector
from proton.utils import LinkDetached, SendException

from amqp_clients import connect, run_tx, unique


@pytest.fixture
def amqp(broker, track_connections):
    return lambda **kwargs: track_connections(connect(broker, **kwargs))


def receive_all(receiver, n, timeout=5):
    out = []
    for _ in range(n):
        m = receiver.receive(timeout=timeout)
        receiver.accept()
        out.append(m)
    return out


def assert_empty(receiver, timeout=0.5):
    with pytest.raises(Timeout):
        receiver.receive(timeout=timeout)


# -- connect -------------------------------------------------------------------------


def test_sasl_plain(amqp):
    amqp().close()


def test_anonymous_refused_when_users_are_configured(broker):
    # DEFAULT_CONFIG has users, so anonymous access is off: ANONYMOUS gets an auth outcome.
    with pytest.raises(ConnectionException):
        connect(broker, user=None)


def test_wrong_password_is_refused(broker):
    with pytest.raises(ConnectionException):
        connect(broker, password="wrong")


def test_sole_connection_for_container(broker):
    from proton.handlers import MessagingHandler
    from proton.reactor import Container

    class TwoOpens(MessagingHandler):
        def __init__(self):
            super().__init__()
            self.errors = []

        def on_start(self, event):
            for _ in range(2):
                event.container.connect(
                    f"amqp://admin:secret@127.0.0.1:{broker.amqp_port}", allowed_mechs="PLAIN",
                    desired_capabilities=[symbol("sole-connection-for-container")])

        def on_connection_remote_close(self, event):
            cond = event.connection.remote_condition
            self.errors.append((cond.name, dict(cond.info or {})) if cond else None)
            event.container.stop()

        def on_connection_opened(self, event):
            pass

    h = TwoOpens()
    c = Container(h)
    c.container_id = unique("solo")
    c.run()
    assert h.errors and h.errors[0][0] == "amqp:invalid-field"
    assert h.errors[0][1].get(symbol("invalid-field")) == symbol("container-id")


# -- queues and topics ---------------------------------------------------------------


def test_queue_settled_and_unsettled(amqp):
    q = unique("q")
    c = amqp()
    s = c.create_sender(q)
    for i in range(20):
        s.send(Message(body=f"m{i}", durable=i % 2 == 0))
    r = c.create_receiver(q, credit=5)
    got = [m.body for m in receive_all(r, 20)]
    assert got == [f"m{i}" for i in range(20)]
    assert_empty(r)


def test_large_message_spans_frames(amqp):
    q = unique("q")
    c = amqp()
    body = "x" * 300_000  # several frames at the test broker's 64 KiB max frame size
    c.create_sender(q).send(Message(body=body))
    r = c.create_receiver(q, credit=1)
    assert r.receive(timeout=5).body == body
    r.accept()


def test_large_and_small_bodies_interleaved_arrive_whole_and_in_order(amqp):
    # One frame or several, shared or copied on the way out: every body intact, in order.
    q = unique("q")
    c = amqp()
    bodies = [
        bytes((i * 7 + j) % 256 for j in range(size))
        for i, size in enumerate([20_000, 10, 4096, 4095, 70_000, 1, 16_384, 300] * 4)
    ]
    s = c.create_sender(q)
    for body in bodies:
        s.send(Message(body=body))
    r = c.create_receiver(q, credit=len(bodies))
    got = [bytes(m.body) for m in receive_all(r, len(bodies))]
    assert [len(b) for b in got] == [len(b) for b in bodies]
    assert got == bodies


def test_topic_fan_out(amqp):
    t = unique("t")
    c = amqp()
    subs = [c.create_receiver(f"topic://{t}", credit=10, name=unique("sub")) for _ in range(3)]
    s = c.create_sender(f"topic://{t}")
    s.send(Message(body="all"))
    for r in subs:
        assert r.receive(timeout=5).body == "all"
        r.accept()


def test_release_and_reject(amqp):
    q = unique("q")
    c = amqp()
    c.create_sender(q).send(Message(body="again"))
    r = c.create_receiver(q, credit=1)
    m = r.receive(timeout=5)
    r.release(delivered=False)
    m2 = r.receive(timeout=5)
    assert m2.body == "again"
    r.release(delivered=True)  # modified delivery-failed: counts an attempt
    m3 = r.receive(timeout=5)
    assert m3.body == "again"
    r.reject()
    assert_empty(r)


def test_drain_ends_with_no_credit(amqp):
    q = unique("q")
    c = amqp()
    c.create_sender(q).send(Message(body="one"))
    r = c.create_receiver(q, credit=0)
    link = r.link
    link.drain(10)
    c.wait(lambda: not link.draining(), msg="drain to finish", timeout=5)
    assert link.credit == 0
    m = r.receive(timeout=5)
    assert m.body == "one"
    r.accept()


def test_missing_queue_with_autocreate_off_is_not_found(broker, amqp):
    # The declared queue exists; anything is auto-created in DEFAULT_CONFIG, so this checks
    # that an attach to a declared queue works and a bad address is refused.
    c = amqp()
    with pytest.raises(LinkDetached):
        c.create_receiver("", credit=1)


# -- dynamic nodes, relay, selectors, browse -----------------------------------------


def test_dynamic_queue_request_reply(amqp):
    c = amqp()
    reply = c.create_receiver(None, dynamic=True, credit=5)
    addr = reply.link.remote_source.address
    assert addr
    q = unique("svc")
    c.create_sender(q).send(Message(body="ping", reply_to=addr))
    svc = c.create_receiver(q, credit=1)
    req = svc.receive(timeout=5)
    svc.accept()
    c.create_sender(req.reply_to).send(Message(body="pong"))
    assert reply.receive(timeout=5).body == "pong"
    reply.accept()


def test_anonymous_relay(amqp):
    q = unique("q")
    c = amqp()
    anon = c.create_sender(None)
    anon.send(Message(address=q, body="via relay"))
    r = c.create_receiver(q, credit=1)
    assert r.receive(timeout=5).body == "via relay"
    r.accept()


def test_selector(amqp):
    q = unique("q")
    c = amqp()
    s = c.create_sender(q)
    for color in ["red", "blue", "red"]:
        s.send(Message(body=color, properties={"color": color}))
    r = c.create_receiver(q, credit=10, options=Selector("color = 'red'"))
    assert [m.body for m in receive_all(r, 2)] == ["red", "red"]
    assert_empty(r)


def test_bad_selector_refused(amqp):
    c = amqp()
    with pytest.raises(LinkDetached):
        c.create_receiver(unique("q"), credit=1, options=Selector("color = "))


def test_browse_does_not_consume(amqp):
    q = unique("q")
    c = amqp()
    s = c.create_sender(q)
    for i in range(3):
        s.send(Message(body=f"b{i}"))
    b = c.create_receiver(q, credit=10, options=Copy())
    assert [b.receive(timeout=5).body for _ in range(3)] == ["b0", "b1", "b2"]
    b.close()
    r = c.create_receiver(q, credit=10)
    assert [m.body for m in receive_all(r, 3)] == ["b0", "b1", "b2"]


# -- transactions ----------------------------------------------------------------------


def test_transaction_commit_and_rollback(broker, amqp):
    q = unique("q")
    run_tx(broker, q, ["rolled back"], commit=False)
    run_tx(broker, q, ["c1", "c2"], commit=True)
    c = amqp()
    r = c.create_receiver(q, credit=10)
    assert [m.body for m in receive_all(r, 2)] == ["c1", "c2"]
    assert_empty(r)


def test_transactional_receive_rolled_back_is_redelivered(broker, amqp):
    q = unique("q")
    c = amqp()
    c.create_sender(q).send(Message(body="keep"))
    c.close()
    h = run_tx(broker, unique("other"), [], commit=False, take_from=q, to_take=1)
    assert h.taken == ["keep"] and h.discharged == "aborted"
    c = amqp()
    r = c.create_receiver(q, credit=1)
    assert r.receive(timeout=5).body == "keep"
    r.accept()


# -- durable subscriptions, delays -----------------------------------------------------


def test_durable_subscription_survives_restart(broker, amqp):
    t = unique("t")
    cid = unique("client")
    c = amqp(container_id=cid)
    sub = c.create_receiver(f"topic://{t}", name="sub1", options=DurableSubscription(), credit=10)
    c.close()  # the link is not closed (no detach closed=true), so the subscription stays
    p = amqp()
    p.create_sender(f"topic://{t}").send(Message(body="while away", durable=True))
    p.close()
    broker.stop()
    broker.start()
    c = connect(broker, container_id=cid)
    try:
        sub = c.create_receiver(f"topic://{t}", name="sub1", options=DurableSubscription(), credit=10)
        assert sub.receive(timeout=5).body == "while away"
        sub.accept()
    finally:
        c.close()


def test_delivery_time_annotation_delays(amqp):
    q = unique("q")
    c = amqp()
    m = Message(body="later")
    m.annotations = {symbol("x-opt-delivery-delay"): 1500}
    c.create_sender(q).send(m)
    r = c.create_receiver(q, credit=1)
    start = time.monotonic()
    assert r.receive(timeout=10).body == "later"
    assert time.monotonic() - start >= 1.0
    r.accept()


def test_negative_delay_rejected(amqp):
    c = amqp()
    m = Message(body="never")
    m.annotations = {symbol("x-opt-delivery-delay"): -5}
    with pytest.raises(SendException):
        c.create_sender(unique("q")).send(m)


# -- cross-protocol --------------------------------------------------------------------


def test_stomp_to_amqp(client_factory, amqp):
    q = unique("q")
    c = amqp()
    r = c.create_receiver(q, credit=1)
    client_factory().send(f"/queue/{q}", "from stomp", headers={
        "content-type": "text/plain", "color": "red", "correlation-id": "c-1",
        "reply-to": "/queue/back", "JMSXGroupID": "g1",
    })
    m = r.receive(timeout=5)
    r.accept()
    body = m.body if isinstance(m.body, str) else bytes(m.body).decode()
    assert body == "from stomp"
    assert m.content_type == "text/plain"
    assert m.properties["color"] == "red"
    assert m.correlation_id == "c-1"
    assert m.reply_to == "/queue/back"
    assert m.group_id == "g1"


def test_amqp_to_stomp(client_factory, amqp):
    q = unique("q")
    consumer = client_factory()
    consumer.subscribe(f"/queue/{q}")
    c = amqp()
    c.create_sender(q).send(Message(
        body="from amqp", content_type="text/plain", properties={"color": "blue", "n": 3},
        correlation_id="c-2", reply_to="back", group_id="g2"))
    f = consumer.get()
    assert f.body == "from amqp"
    assert f.headers["content-type"].startswith("text/plain")
    assert f.headers["color"] == "blue" and f.headers["n"] == "3"
    assert f.headers["correlation-id"] == "c-2"
    assert f.headers["reply-to"] == "back"
    assert f.headers["JMSXGroupID"] == "g2"
