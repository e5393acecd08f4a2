"""AMQP idle timeout: heart-beats keep a quiet connection open; a silent peer is closed."""

import socket
import struct
import time

import pytest
from proton import Message

from amqp_clients import connect, unique
from broker import DEFAULT_CONFIG


@pytest.fixture(scope="module")
def broker_config():
    return DEFAULT_CONFIG.replace("[limits]\n", '[limits]\nheartbeat = "500ms"\n')


def test_quiet_client_kept_alive_by_heartbeats(broker):
    c = connect(broker)
    q = unique("q")
    s = c.create_sender(q)
    # Far beyond our 1 s idle timeout: proton's empty frames must keep the connection open,
    # and ours must keep proton from timing out.
    deadline = time.monotonic() + 3
    c.wait(lambda: time.monotonic() > deadline, timeout=10, msg="quiet period")
    s.send(Message(body="still here"))
    r = c.create_receiver(q, credit=1)
    assert r.receive(timeout=5).body == "still here"
    r.accept()
    c.close()


def test_silent_peer_is_closed(broker):
    # Longer than the broker's 10 s handshake timeout, so the broker acts first.
    sock = socket.create_connection(("127.0.0.1", broker.amqp_port), timeout=18)
    sock.sendall(b"AMQP\x03\x01\x00\x00")
    got = b""
    deadline = time.monotonic() + 20
    # Read until the broker gives up on us (EOF) or the deadline.
    while time.monotonic() < deadline:
        chunk = sock.recv(4096)
        if not chunk:
            break
        got += chunk
    assert got.startswith(b"AMQP\x03\x01\x00\x00")
    assert time.monotonic() < deadline, "the broker should drop a peer that never authenticates"
