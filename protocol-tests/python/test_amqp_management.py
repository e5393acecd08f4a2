"""AMQP connections of a real client (python-qpid-proton) as the management API and
/metrics count them: listed with protocol, container id and address, counted under
protocol="amqp" apart from STOMP, and gone once closed."""

import base64
import json
import re
import time
import urllib.request

from amqp_clients import connect, unique
from broker import PASSWORD, USER

# One weir_connections sample: its labels and its value.
SAMPLE = re.compile(r"^weir_connections\{(?P<labels>[^}]*)\} (?P<value>\d+)$")


def get(broker, path):
    request = urllib.request.Request(f"http://127.0.0.1:{broker.http_port}{path}")
    login = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    request.add_header("Authorization", f"Basic {login}")
    with urllib.request.urlopen(request, timeout=10) as r:
        assert r.status == 200
        return r.read().decode()


def connection_counts(broker):
    """weir_connections as {(protocol, transport, tls): count}; a kind with no open
    connection has no sample."""
    counts = {}
    for line in get(broker, "/metrics").splitlines():
        m = SAMPLE.match(line)
        if m:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m["labels"]))
            counts[(labels["protocol"], labels["transport"], labels["tls"])] = int(m["value"])
    return counts


def local_address(connection):
    # proton keeps its socket behind the transport's selectable; the broker sees
    # this end of it as the connection's peer.
    host, port = connection.conn.transport._selectable.getsockname()[:2]
    return f"{host}:{port}"


def eventually(check, timeout=5.0):
    """check() once it holds, or its last answer: a closed connection leaves the
    broker's registry when its task ends, just after the client returns."""
    deadline = time.monotonic() + timeout
    while True:
        answer = check()
        if answer or time.monotonic() > deadline:
            return answer
        time.sleep(0.05)


AMQP = ("amqp", "tcp", "false")
STOMP = ("stomp", "tcp", "false")


def test_amqp_connections_are_listed_and_counted_by_protocol(
    broker, client_factory, track_connections
):
    assert connection_counts(broker).get(AMQP, 0) == 0, "a fresh broker"
    stomp = client_factory()
    ids = [unique("mgmt"), unique("mgmt")]
    amqp = [track_connections(connect(broker, container_id=i)) for i in ids]
    addresses = [local_address(c) for c in amqp]

    listed = json.loads(get(broker, "/api/connections"))
    for container_id, address in zip(ids, addresses):
        mine = [c for c in listed if c["client_id"] == container_id]
        assert len(mine) == 1, listed
        c = mine[0]
        assert (c["protocol"], c["version"], c["transport"]) == ("amqp", "1.0", "tcp"), c
        assert c["peer"] == address, c
        assert c["tls"] is False and c["user"] == USER, c
    assert sum(c["protocol"] == "amqp" for c in listed) == 2, listed
    assert eventually(lambda: connection_counts(broker).get(STOMP) == 1)
    counts = connection_counts(broker)
    assert counts.get(AMQP) == 2, counts

    amqp[0].close()
    assert eventually(lambda: connection_counts(broker).get(AMQP) == 1), connection_counts(broker)
    listed = json.loads(get(broker, "/api/connections"))
    assert [c["client_id"] for c in listed if c["protocol"] == "amqp"] == [ids[1]], listed
    assert connection_counts(broker).get(STOMP) == 1, "closing AMQP leaves STOMP alone"

    amqp[1].close()
    assert eventually(lambda: AMQP not in connection_counts(broker)), connection_counts(broker)
