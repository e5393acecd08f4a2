"""Message grouping through stomp.py: one consumer per group, in order, groups
move when a consumer leaves, JMSXGroupSeq -1 closes a group, autogroup through a
connection factory chosen by virtual host, group-first-key, rebalance with pause,
and no head-of-line blocking."""

import collections
import time

import pytest
import stomp

from broker import DEFAULT_CONFIG
from clients import Client, unique


@pytest.fixture(scope="module")
def broker_config():
    return DEFAULT_CONFIG + """
[connection_factories.orders]
autogroup = true

[connection_factories.fixed]
group_id = "Group-0"

[address_settings."firstkey.#"]
group_first_key = "JMSXGroupFirstForConsumer"

[address_settings."rebalance.#"]
group_rebalance = true
group_rebalance_pause_dispatch = true
"""


def _by_group(frames):
    groups = collections.defaultdict(list)
    for f in frames:
        groups[f.headers["JMSXGroupID"]].append(int(f.body.split("-")[1]))
    return groups


def test_ten_groups_of_fifty_each_on_one_consumer_in_order(client_factory):
    q = "/queue/" + unique("grp")
    a, b = client_factory(), client_factory()
    a.subscribe(q, ack="auto")
    b.subscribe(q, ack="auto")
    p = client_factory()
    for i in range(50):
        for g in range(10):
            p.send(q, f"g{g}-{i}", headers={"JMSXGroupID": f"g{g}"}, receipt=(i == 49 and g == 9))
    got_a, got_b = a.drain(), b.drain()
    assert len(got_a) + len(got_b) == 500
    ga, gb = _by_group(got_a), _by_group(got_b)
    assert not set(ga) & set(gb), "a group was split over two consumers"
    assert ga and gb, "groups are spread over both consumers"
    for seqs in list(ga.values()) + list(gb.values()):
        assert seqs == list(range(50)), "order within a group"


def test_closed_consumer_hands_its_groups_over_in_order(client_factory):
    q = "/queue/" + unique("move")
    a, b = client_factory(), client_factory()
    a.subscribe(q, ack="client-individual", headers={"prefetch": "1000"})
    b.subscribe(q, ack="client-individual", headers={"prefetch": "1000"})
    p = client_factory()
    for i in range(20):
        for g in range(4):
            p.send(q, f"g{g}-{i}", headers={"JMSXGroupID": f"g{g}"}, receipt=False)
    p.send(q, "g0-20", headers={"JMSXGroupID": "g0"})
    time.sleep(0.3)
    # A acknowledges nothing and leaves: its groups, unacked messages first, go to B.
    held_by_a = _by_group(a.drain())
    a.drop()
    moved = [f for f in b.drain() if f.headers["JMSXGroupID"] in held_by_a]
    for g, seqs in _by_group(moved).items():
        assert seqs == sorted(seqs), f"order of {g} after the move"
        assert seqs[: len(held_by_a[g])] == held_by_a[g], "redelivered first"
    assert all(f.headers.get("redelivered") == "true"
               for f in moved if int(f.body.split("-")[1]) in held_by_a[f.headers["JMSXGroupID"]])


def test_group_sequence_minus_one_releases_the_group(client_factory):
    q = "/queue/" + unique("close")
    a = client_factory()
    a.subscribe(q, ack="client-individual", headers={"prefetch": "1"})
    p = client_factory()
    p.send(q, "last", headers={"JMSXGroupID": "G", "JMSXGroupSeq": "-1"})
    first = a.get()
    # A holds its only credit; once the group is closed the next message may bind elsewhere.
    b = client_factory()
    b.subscribe(q, ack="client-individual", headers={"prefetch": "1"})
    p.send(q, "next", headers={"JMSXGroupID": "G"})
    assert b.get().body == "next"
    a.ack(first)


def _vhost_connection(port, vhost):
    conn = stomp.Connection12([("127.0.0.1", port)], vhost=vhost, heartbeats=(0, 0))
    conn.connect("guest", "guest", wait=True)
    return conn


def test_autogroup_by_virtual_host(broker, client_factory):
    q = "/queue/" + unique("auto")
    a, b = client_factory(), client_factory()
    a.subscribe(q)
    b.subscribe(q)
    producers = [_vhost_connection(broker.stomp_port, "orders") for _ in range(3)]
    try:
        for i in range(20):
            for n, conn in enumerate(producers):
                conn.send(q, f"p{n}-{i}")
        time.sleep(0.5)
        got = a.drain() + b.drain()
    finally:
        for conn in producers:
            conn.disconnect()
    assert len(got) == 60
    groups = {f.headers.get("JMSXGroupID") for f in got}
    assert None not in groups and len(groups) == 3, "one generated group per producer"
    group_of_producer = {}
    for f in got:
        producer = f.body.split("-")[0]
        assert f.headers["JMSXGroupID"] == group_of_producer.setdefault(producer, f.headers["JMSXGroupID"])


def test_fixed_group_id_by_virtual_host(broker, client_factory):
    q = "/queue/" + unique("fixed")
    c = client_factory()
    c.subscribe(q)
    conn = _vhost_connection(broker.stomp_port, "fixed")
    try:
        conn.send(q, "x")
        conn.send(q, "y", headers={"JMSXGroupID": "mine"})
        got = c.get_n(2)
    finally:
        conn.disconnect()
    assert got[0].headers["JMSXGroupID"] == "Group-0"
    assert got[1].headers["JMSXGroupID"] == "mine", "an explicit group id wins"


def test_group_first_key_once_per_group_per_consumer(client_factory):
    q = "/queue/firstkey." + unique("fk")
    c = client_factory()
    c.subscribe(q)
    p = client_factory()
    for i in range(3):
        for g in ("a", "b"):
            p.send(q, f"{g}-{i}", headers={"JMSXGroupID": g})
    got = c.get_n(6)
    firsts = [f.body for f in got if f.headers.get("JMSXGroupFirstForConsumer") == "true"]
    assert sorted(firsts) == ["a-0", "b-0"]


def test_rebalance_with_pause_never_shares_a_group(client_factory):
    q = "/queue/rebalance." + unique("rb")
    a = client_factory()
    a.subscribe(q, ack="client-individual")
    p = client_factory()
    for g in range(6):
        p.send(q, f"g{g}-0", headers={"JMSXGroupID": f"g{g}"})
    held = a.get_n(6)
    b = client_factory()
    b.subscribe(q, ack="client-individual")
    for g in range(6):
        p.send(q, f"g{g}-1", headers={"JMSXGroupID": f"g{g}"})
    # While A holds the first message of every group, nobody gets the second.
    b.assert_no_message(0.5)
    a.assert_no_message(0.1)
    for f in held:
        a.ack(f)
    second = a.drain() + b.drain()
    assert sorted(f.body for f in second) == sorted(f"g{g}-1" for g in range(6))
    assert {f.headers["subscription"] for f in second} != set(), "dispatched after the acks"


def test_busy_group_does_not_block_other_messages(client_factory):
    q = "/queue/" + unique("hol")
    slow = client_factory()
    slow.subscribe(q, ack="client-individual", headers={"prefetch": "1"})
    p = client_factory()
    for i in range(100):
        p.send(q, f"grouped-{i}", headers={"JMSXGroupID": "G"}, receipt=False)
    p.send(q, "sync")
    first = slow.get()  # G is bound to the slow consumer, which now has no credit.
    fast = client_factory()
    fast.subscribe(q, ack="auto")
    for i in range(50):
        p.send(q, f"free-{i}", receipt=False)
    p.send(q, "end")
    got = [f.body for f in fast.drain()]
    assert [b for b in got if b.startswith("free-")] == [f"free-{i}" for i in range(50)]
    assert not any(b.startswith("grouped-") for b in got), "the group stays with its consumer"
    slow.ack(first)
