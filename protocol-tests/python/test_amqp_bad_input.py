"""AMQP bad input: the specific error condition on the right endpoint, others unaffected."""

import socket
import struct

import pytest
from proton import Message
from proton.utils import LinkDetached

from amqp_clients import connect, unique
from broker import DEFAULT_CONFIG, DECLARED_QUEUE


@pytest.fixture(scope="module")
def broker_config():
    return DEFAULT_CONFIG.replace("[limits]\n", "[limits]\nmax_message_size = 100000\n")


def read_until_eof(sock, limit=1 << 16):
    got = b""
    sock.settimeout(10)
    while len(got) < limit:
        chunk = sock.recv(4096)
        if not chunk:
            break
        got += chunk
    return got


def test_wrong_protocol_header_answered_and_closed(broker):
    sock = socket.create_connection(("127.0.0.1", broker.amqp_port))
    sock.sendall(b"AMQP\x01\x01\x00\x00")  # TLS: not offered
    got = read_until_eof(sock)
    assert got[:8] == b"AMQP\x03\x01\x00\x00"
    assert len(got) == 8


def test_garbage_frame_closes_with_decode_error_others_unaffected(broker):
    other = connect(broker)
    q = unique("q")
    sender = other.create_sender(q)
    # A raw client: SASL PLAIN, then an AMQP frame whose body is not a performative.
    sock = socket.create_connection(("127.0.0.1", broker.amqp_port))
    sock.sendall(b"AMQP\x03\x01\x00\x00")
    fields = b"\xa3\x05PLAIN" + b"\xa0\x0d\x00admin\x00secret"
    init = b"\x00\x53\x41\xc0" + bytes([len(fields) + 1, 2]) + fields
    sock.sendall(struct.pack(">IBBH", 8 + len(init), 2, 1, 0) + init)
    sock.sendall(b"AMQP\x00\x01\x00\x00")
    body = b"\x00\x53\x10\xc0\x03\x01\xa1\x00"  # open with an empty container id... then junk
    sock.sendall(struct.pack(">IBBH", 8 + len(body), 2, 0, 0) + body)
    junk = b"\xff\xff\xff\xff"
    sock.sendall(struct.pack(">IBBH", 8 + len(junk), 2, 0, 0) + junk)
    got = read_until_eof(sock)
    assert b"amqp:decode-error" in got
    sender.send(Message(body="fine"))  # the other connection carries on
    r = other.create_receiver(q, credit=1)
    assert r.receive(timeout=5).body == "fine"
    r.accept()
    other.close()


def test_message_over_max_size_detaches_link(broker):
    c = connect(broker)
    s = c.create_sender(unique("q"))
    with pytest.raises(Exception):
        s.send(Message(body="x" * 200_000), timeout=5)
    c.close()


def test_declared_queue_attach_works(broker):
    c = connect(broker)
    r = c.create_receiver(DECLARED_QUEUE, credit=1)
    r.close()
    c.close()
