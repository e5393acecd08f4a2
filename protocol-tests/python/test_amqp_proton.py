"""AMQP 1.0 with python-qpid-proton: SASL, settle modes, delays, dispositions, credit,
dynamic nodes with the anonymous relay, and group ids."""

import time

import pytest
from proton import Delivery, Message, symbol, uint
from proton.reactor import AtLeastOnce, AtMostOnce

from amqp import QUEUE, TOPIC, connect, pump, receive_or_none, settle_next
from broker import DEFAULT_CONFIG
from clients import unique

SLACK_MS = 2  # millisecond clocks of client and broker


@pytest.fixture(scope="module")
def broker_config():
    return DEFAULT_CONFIG + "\n[security]\nallow_anonymous = true\n"


@pytest.fixture
def conns(broker, track_connections):
    return lambda **kwargs: track_connections(connect(broker, **kwargs))


@pytest.fixture
def conn(conns):
    return conns()


@pytest.fixture
def address():
    return unique("amqp.q")


# ---- SASL ----


def test_sasl_plain_connects_and_exchanges_a_message(conn, address):
    conn.create_sender(address, options=QUEUE).send(Message(body="plain"))
    r = conn.create_receiver(address, options=QUEUE)
    assert r.receive().body == "plain"
    r.accept()


def test_sasl_anonymous_when_allowed(conns, address):
    c = conns(mechs="ANONYMOUS")
    c.create_sender(address, options=QUEUE).send(Message(body="anon"))
    r = c.create_receiver(address, options=QUEUE)
    assert r.receive().body == "anon"
    r.accept()


# ---- settle modes ----


def test_unsettled_send_is_accepted_and_unsettled_receive_needs_accept(conns, address):
    c = conns()
    delivery = c.create_sender(address, options=[QUEUE, AtLeastOnce()]).send(
        Message(body="at least once", properties={"k": "v", "n": 7}, durable=True)
    )
    assert delivery.remote_state == Delivery.ACCEPTED

    r = c.create_receiver(address, options=[QUEUE, AtLeastOnce()])
    m = r.receive()
    assert (m.body, m.properties, m.durable) == ("at least once", {"k": "v", "n": 7}, True)
    # Not accepted: closing the connection gives it back.
    c.close()

    c2 = conns()
    r2 = c2.create_receiver(address, options=[QUEUE, AtLeastOnce()])
    again = r2.receive()
    assert again.body == "at least once"
    assert again.delivery_count >= 1, "a delivery that was not settled counts as an attempt"
    r2.accept()
    assert receive_or_none(r2) is None


def test_presettled_send_and_receive(conn, address):
    s = conn.create_sender(address, options=[QUEUE, AtMostOnce()])
    for i in range(20):
        s.send(Message(body=f"m{i}"))
    r = conn.create_receiver(address, credit=20, options=[QUEUE, AtMostOnce()])
    assert [r.receive().body for _ in range(20)] == [f"m{i}" for i in range(20)]
    assert receive_or_none(r) is None


def test_topic_copies_to_each_receiver(conn):
    address = unique("amqp.t")
    # Two links of one connection need their own names (proton's default is per address).
    r1 = conn.create_receiver(address, credit=5, name=unique("r1"), options=TOPIC)
    r2 = conn.create_receiver(address, credit=5, name=unique("r2"), options=TOPIC)
    conn.create_sender(address, options=TOPIC).send(Message(body="fan out"))
    assert r1.receive().body == "fan out"
    assert r2.receive().body == "fan out"
    r1.accept()
    r2.accept()


def test_message_sections_round_trip(conn, address):
    sent = Message(
        id="id-1",
        correlation_id="corr-1",
        subject="subj",
        content_type="application/json",
        reply_to="somewhere",
        body=b'{"a": 1}',
        properties={"s": "x", "i": 1, "f": 1.5, "b": True},
        annotations={symbol("x-opt-custom"): "kept"},
        priority=7,
        ttl=60.0,
    )
    conn.create_sender(address, options=QUEUE).send(sent)
    r = conn.create_receiver(address, options=QUEUE)
    got = r.receive()
    r.accept()
    assert got.id == "id-1"
    assert got.correlation_id == "corr-1"
    assert got.subject == "subj"
    assert got.content_type == "application/json"
    assert got.reply_to == "somewhere"
    assert got.body == b'{"a": 1}'
    assert got.properties == {"s": "x", "i": 1, "f": 1.5, "b": True}
    assert got.annotations.get(symbol("x-opt-custom")) == "kept"
    assert got.priority == 7
    assert 0 < got.ttl <= 60.0


# ---- delays ----


def _timed_receive(r, timeout=6.0):
    m = r.receive(timeout=timeout)
    r.accept()
    return m, int(time.time() * 1000)


def test_x_opt_delivery_time_holds_until_that_time(conn, address):
    r = conn.create_receiver(address, options=QUEUE)
    due = int(time.time() * 1000) + 1200
    s = conn.create_sender(address, options=QUEUE)
    s.send(Message(body="timed", annotations={symbol("x-opt-delivery-time"): due}))
    s.send(Message(body="now"))
    m, _ = _timed_receive(r)
    assert m.body == "now", "an undelayed message waited behind a delayed one"
    m, at = _timed_receive(r)
    assert m.body == "timed"
    assert at >= due - SLACK_MS, f"{due - at} ms early"


def test_x_opt_delivery_delay_is_relative(conn, address):
    r = conn.create_receiver(address, options=QUEUE)
    sent_at = int(time.time() * 1000)
    conn.create_sender(address, options=QUEUE).send(
        Message(body="relative", annotations={symbol("x-opt-delivery-delay"): 800})
    )
    m, at = _timed_receive(r)
    assert m.body == "relative"
    assert at - sent_at >= 800 - SLACK_MS, f"delivered after {at - sent_at} ms"


def test_absolute_delivery_time_beats_relative_delay(conn, address):
    r = conn.create_receiver(address, options=QUEUE)
    due = int(time.time() * 1000) + 1000
    conn.create_sender(address, options=QUEUE).send(
        Message(
            body="both",
            annotations={
                symbol("x-opt-delivery-time"): due,
                symbol("x-opt-delivery-delay"): 10,
            },
        )
    )
    m, at = _timed_receive(r)
    assert m.body == "both"
    assert at >= due - SLACK_MS


def test_negative_delay_is_rejected(conn, address):
    from proton.utils import SendException

    s = conn.create_sender(address, options=[QUEUE, AtLeastOnce()])
    with pytest.raises(SendException) as err:
        s.send(Message(body="bad", annotations={symbol("x-opt-delivery-delay"): -5}))
    assert err.value.state == Delivery.REJECTED


# ---- dispositions ----


def test_released_goes_back_without_counting_an_attempt(conn, address):
    conn.create_sender(address, options=QUEUE).send(Message(body="r"))
    r = conn.create_receiver(address, options=QUEUE)
    first = r.receive()
    settle_next(r, Delivery.RELEASED)
    again = r.receive()
    assert again.body == "r"
    assert again.delivery_count == first.delivery_count
    r.accept()


def test_modified_delivery_failed_counts_an_attempt(conn, address):
    conn.create_sender(address, options=QUEUE).send(Message(body="m"))
    r = conn.create_receiver(address, options=QUEUE)
    first = r.receive()
    settle_next(r, Delivery.MODIFIED, failed=True)
    again = r.receive()
    assert again.body == "m"
    assert again.delivery_count == first.delivery_count + 1
    r.accept()


def test_modified_undeliverable_here_goes_to_another_receiver(conns, address):
    c1, c2 = conns(), conns()
    c1.create_sender(address, options=QUEUE).send(Message(body="elsewhere"))
    r1 = c1.create_receiver(address, credit=10, options=QUEUE)
    assert r1.receive().body == "elsewhere"
    settle_next(r1, Delivery.MODIFIED, undeliverable=True)
    assert receive_or_none(r1) is None, "came back to the receiver that refused it"
    r2 = c2.create_receiver(address, options=QUEUE)
    assert r2.receive().body == "elsewhere"
    r2.accept()


def test_rejected_is_not_redelivered(conn, address):
    conn.create_sender(address, options=QUEUE).send(Message(body="poison"))
    r = conn.create_receiver(address, options=QUEUE)
    assert r.receive().body == "poison"
    settle_next(r, Delivery.REJECTED)
    assert receive_or_none(r) is None


# ---- credit ----


def test_credit_limits_deliveries_and_drain_ends_it(conn, address):
    s = conn.create_sender(address, options=QUEUE)
    for i in range(5):
        s.send(Message(body=i))
    r = conn.create_receiver(address, credit=None, options=QUEUE)  # no credit yet
    pump(conn, 0.5)
    assert r.fetcher.has_message == 0, "delivered without credit"

    r.link.flow(2)
    conn.wait(lambda: r.fetcher.has_message == 2, timeout=5)
    pump(conn, 0.3)
    assert r.fetcher.has_message == 2, "more than the credit given"
    assert [r.receive().body for _ in range(2)] == [0, 1]
    r.accept()
    r.accept()

    # Drain with more credit than messages: the broker sends what it has and then
    # uses up the rest of the credit (flow with drain), so the link ends at 0.
    r.link.drain(10)
    conn.wait(lambda: r.link.credit == 0, timeout=5)
    assert r.fetcher.has_message == 3
    assert [r.receive().body for _ in range(3)] == [2, 3, 4]
    for _ in range(3):
        r.accept()


# ---- request/reply ----


def test_dynamic_receiver_and_anonymous_relay_request_reply(conns):
    service_address = unique("amqp.service")
    service = conns()
    requests = service.create_receiver(service_address, credit=10, options=QUEUE)
    relay = service.create_sender(None)  # anonymous relay: `to` per message

    client = conns()
    replies = client.create_receiver(None, dynamic=True, credit=10)
    reply_to = replies.link.remote_source.address
    assert reply_to, "the broker did not name the dynamic node"
    s = client.create_sender(service_address, options=QUEUE)
    for i in range(3):
        s.send(Message(body=f"req {i}", reply_to=reply_to, correlation_id=f"c{i}"))

    for _ in range(3):
        req = requests.receive()
        requests.accept()
        relay.send(Message(address=req.reply_to, body=req.body.upper(), correlation_id=req.correlation_id))

    got = [replies.receive() for _ in range(3)]
    for _ in got:
        replies.accept()
    assert [(m.body, m.correlation_id) for m in got] == [(f"REQ {i}", f"c{i}") for i in range(3)]


def test_anonymous_relay_to_a_fresh_address(conn):
    # With auto-create on (the default) a fresh address simply works.
    relay = conn.create_sender(None)
    address = unique("amqp.relay")
    relay.send(Message(address=address, body="via relay"))
    r = conn.create_receiver(address, options=QUEUE)
    assert r.receive().body == "via relay"
    r.accept()


# ---- groups ----


def test_group_id_keeps_each_group_on_one_receiver_in_order(conns, address):
    c1, c2 = conns(), conns()
    r1 = c1.create_receiver(address, credit=100, options=QUEUE)
    r2 = c2.create_receiver(address, credit=100, options=QUEUE)
    s = conns().create_sender(address, options=QUEUE)
    for seq in range(10):
        for g in range(4):
            s.send(Message(body=seq, group_id=f"g{g}", group_sequence=seq + 1))

    per_receiver = {}
    deadline = time.monotonic() + 10
    total = 0
    while total < 40 and time.monotonic() < deadline:
        for name, (c, r) in {"r1": (c1, r1), "r2": (c2, r2)}.items():
            m = receive_or_none(r, timeout=0.1)
            if m is not None:
                r.accept()
                per_receiver.setdefault(name, {}).setdefault(m.group_id, []).append(m.body)
                total += 1
    assert total == 40
    owners = {}
    for name, groups in per_receiver.items():
        for g, seqs in groups.items():
            assert g not in owners, f"{g} on {owners.get(g)} and {name}"
            owners[g] = name
            assert seqs == list(range(10)), f"{g} at {name}: {seqs}"
    assert len(owners) == 4


def test_group_sequence_minus_one_as_uint_passes_through(conn, address):
    conn.create_sender(address, options=QUEUE).send(
        Message(body="closing", group_id="gx", group_sequence=uint(4294967295))
    )
    r = conn.create_receiver(address, options=QUEUE)
    m = r.receive()
    r.accept()
    assert m.group_id == "gx"
    assert m.group_sequence in (4294967295, -1)


def test_group_id_as_application_property(conns, address):
    c1, c2 = conns(), conns()
    r1 = c1.create_receiver(address, credit=50, options=QUEUE)
    r2 = c2.create_receiver(address, credit=50, options=QUEUE)
    s = conns().create_sender(address, options=QUEUE)
    for i in range(20):
        s.send(Message(body=i, properties={"JMSXGroupID": "by-property"}))
    got = {"r1": [], "r2": []}
    deadline = time.monotonic() + 10
    while len(got["r1"]) + len(got["r2"]) < 20 and time.monotonic() < deadline:
        for name, r in (("r1", r1), ("r2", r2)):
            m = receive_or_none(r, timeout=0.1)
            if m is not None:
                r.accept()
                got[name].append(m.body)
    assert sorted(map(len, got.values())) == [0, 20], got
    assert max(got.values(), key=len) == list(range(20))
