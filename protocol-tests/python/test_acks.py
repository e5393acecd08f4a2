"""Acknowledgement modes, NACK, redelivery on disconnect, prefetch windows."""

import pytest

from clients import unique


def _send_all(client_factory, queue_name, n):
    p = client_factory()
    bodies = [f"m{i}" for i in range(n)]
    for b in bodies:
        p.send(queue_name, b)
    return bodies


def _leftovers(client_factory, queue_name):
    c = client_factory()
    c.subscribe(queue_name, ack="client-individual")
    return [m.body for m in c.drain()]


def test_auto_ack_consumes(client_factory, queue_name):
    bodies = _send_all(client_factory, queue_name, 5)
    c = client_factory()
    c.subscribe(queue_name, ack="auto")
    assert [m.body for m in c.get_n(5)] == bodies
    c.disconnect()
    assert _leftovers(client_factory, queue_name) == []


def test_client_ack_is_cumulative(client_factory, queue_name):
    bodies = _send_all(client_factory, queue_name, 5)
    c = client_factory()
    c.subscribe(queue_name, ack="client")
    got = c.get_n(5)
    assert [m.body for m in got] == bodies
    c.ack(got[2])  # acks m0, m1 and m2 together
    c.disconnect()
    assert _leftovers(client_factory, queue_name) == ["m3", "m4"]


def test_client_individual_ack_is_per_message(client_factory, queue_name):
    _send_all(client_factory, queue_name, 5)
    c = client_factory()
    c.subscribe(queue_name, ack="client-individual")
    got = c.get_n(5)
    c.ack(got[1])
    c.ack(got[3])
    c.disconnect()
    assert _leftovers(client_factory, queue_name) == ["m0", "m2", "m4"]


def test_client_ack_stomp_1_1_uses_message_id(client_factory, queue_name):
    _send_all(client_factory, queue_name, 3)
    c = client_factory(version="1.1")
    c.subscribe(queue_name, ack="client-individual")
    got = c.get_n(3)
    c.ack(got[0])  # 1.1: ACK carries message-id + subscription
    c.disconnect()
    assert _leftovers(client_factory, queue_name) == ["m1", "m2"]


def test_ack_of_unknown_id_is_an_error(raw_factory, queue_name):
    raw = raw_factory()
    assert raw.connect().command == "CONNECTED"
    raw.send_frame("ACK", {"id": "no-such-ack-id", "receipt": "r"})
    assert raw.read_frame().command == "ERROR"


def test_nack_redelivers_with_redelivered_header(client_factory, queue_name):
    _send_all(client_factory, queue_name, 1)
    c = client_factory()
    c.subscribe(queue_name, ack="client-individual")
    first = c.get()
    assert first.headers.get("redelivered", "false") != "true", first.headers
    c.nack(first)
    second = c.get()
    assert second.body == first.body
    assert second.headers.get("redelivered") == "true", second.headers
    c.ack(second)
    c.assert_no_message()


def test_unacked_messages_go_to_another_subscriber_on_disconnect(client_factory, queue_name):
    _send_all(client_factory, queue_name, 1)
    a = client_factory()
    a.subscribe(queue_name, ack="client-individual")
    assert a.get().body == "m0"
    b = client_factory()
    b.subscribe(queue_name, ack="client-individual")
    b.assert_no_message(0.5)  # still held by a
    a.disconnect()
    again = b.get()
    assert again.body == "m0"
    assert again.headers.get("redelivered") == "true", again.headers


def test_unacked_messages_redelivered_when_socket_dies(client_factory, queue_name):
    _send_all(client_factory, queue_name, 3)
    a = client_factory()
    a.subscribe(queue_name, ack="client")
    assert [m.body for m in a.get_n(3)] == ["m0", "m1", "m2"]
    b = client_factory()
    b.subscribe(queue_name, ack="client")
    a.drop()  # no DISCONNECT frame, like a crashed client
    assert [m.body for m in b.get_n(3)] == ["m0", "m1", "m2"]


def test_unsubscribe_releases_unacked(client_factory, queue_name):
    _send_all(client_factory, queue_name, 1)
    a = client_factory()
    sub = a.subscribe(queue_name, ack="client-individual")
    assert a.get().body == "m0"
    a.unsubscribe(sub)
    b = client_factory()
    b.subscribe(queue_name, ack="client-individual")
    assert b.get().body == "m0"


@pytest.mark.parametrize("header", ["prefetch", "activemq.prefetchSize"])
def test_prefetch_one_lets_second_subscriber_take_second_message(client_factory, queue_name,
                                                                  header):
    a = client_factory()
    a.subscribe(queue_name, ack="client", headers={header: "1"})
    p = client_factory()
    p.send(queue_name, "first")
    p.send(queue_name, "second")
    first = a.get()
    assert first.body == "first"
    a.assert_no_message(0.5)  # window of 1 is full until the ACK
    b = client_factory()
    b.subscribe(queue_name, ack="client", headers={header: "1"})
    assert b.get().body == "second"
    a.ack(first)
    a.assert_no_message(0.5)
    p.send(queue_name, "third")
    # a acked and has room again; b still holds "second" un-acked.
    assert a.get().body == "third"
    b.assert_no_message(0.3)


def test_prefetch_window_bounds_in_flight(client_factory, queue_name):
    bodies = _send_all(client_factory, queue_name, 10)
    c = client_factory()
    c.subscribe(queue_name, ack="client-individual", headers={"prefetch": "3"})
    got = c.get_n(3)
    c.assert_no_message(0.5)
    c.ack(got[0])
    got.append(c.get())
    c.assert_no_message(0.5)
    for m in got[1:]:
        c.ack(m)
    got += c.get_n(3)
    assert [m.body for m in got] == bodies[:7]


def test_default_window_delivers_many_without_acks(client_factory, queue_name):
    bodies = _send_all(client_factory, queue_name, 50)
    c = client_factory()
    c.subscribe(queue_name, ack="client")
    got = c.get_n(50)
    assert [m.body for m in got] == bodies
    c.ack(got[-1])


def test_message_id_unique_and_subscription_header(client_factory, queue_name):
    _send_all(client_factory, queue_name, 20)
    c = client_factory()
    sub = c.subscribe(queue_name, sub_id=unique("sub"))
    got = c.get_n(20)
    ids = [m.headers["message-id"] for m in got]
    assert len(set(ids)) == 20, ids
    assert all(m.headers.get("subscription") == sub for m in got)
