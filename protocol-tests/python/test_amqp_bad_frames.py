"""AMQP bad input over raw sockets: the offender gets a close with an error, others go on."""

import socket
import struct

import pytest
from proton import Message

from amqp import (
    AMQP_HEADER,
    QUEUE,
    SASL_HEADER,
    connect,
    described_list,
    frame,
    raw_sasl_anonymous,
    read_exact,
    read_until_close,
)
from broker import DEFAULT_CONFIG, MAX_FRAME_SIZE
from clients import unique

OPEN = 0x10


@pytest.fixture(scope="module")
def broker_config():
    return DEFAULT_CONFIG + "\n[security]\nallow_anonymous = true\n"


def _still_serves(broker):
    c = connect(broker)
    try:
        address = unique("bad.q")
        c.create_sender(address, options=QUEUE).send(Message(body="fine"))
        r = c.create_receiver(address, options=QUEUE)
        assert r.receive().body == "fine"
        r.accept()
    finally:
        c.close()


def _close_error(close):
    """The `error` field of a close performative: (condition, description)."""
    fields = close.value
    assert fields, f"close without an error: {close}"
    error = fields[0]
    assert error is not None, "close without an error"
    return str(error.value[0]), (error.value[1] if len(error.value) > 1 else None)


def test_wrong_protocol_header_is_answered_with_ours_then_closed(broker):
    with socket.create_connection(("127.0.0.1", broker.amqp_port), timeout=5) as s:
        s.sendall(b"AMQP\x09\x01\x00\x00")
        assert read_exact(s, 8) in (SASL_HEADER, AMQP_HEADER)
        assert s.recv(1) == b""
    _still_serves(broker)


def test_unknown_type_code_gets_a_close_with_a_decode_error(broker):
    # A second, healthy connection open the whole time must not notice.
    healthy = connect(broker)
    try:
        address = unique("bad.healthy")
        sender = healthy.create_sender(address, options=QUEUE)
        with raw_sasl_anonymous(broker.amqp_port) as s:
            s.sendall(frame(described_list(OPEN, "bad-input-test")))
            # 0x00 0x53 0x11 = described begin, then 0xff: no such type code.
            s.sendall(frame(b"\x00\x53\x11\xff\xff\xff"))
            close = read_until_close(s)
            assert close is not None, "connection dropped without a close frame"
            condition, _ = _close_error(close)
            assert condition.startswith("amqp:"), condition
        sender.send(Message(body="unaffected"))
        r = healthy.create_receiver(address, options=QUEUE)
        assert r.receive().body == "unaffected"
        r.accept()
    finally:
        healthy.close()
    _still_serves(broker)


def test_frame_over_the_max_frame_size_gets_a_close(broker):
    with raw_sasl_anonymous(broker.amqp_port) as s:
        s.sendall(frame(described_list(OPEN, "big-frame-test")))
        # Only the header of a frame claiming 4 x the broker's max_frame_size: the size
        # field alone must be enough to refuse it.
        s.sendall(struct.pack(">IBBH", 4 * MAX_FRAME_SIZE, 2, 0, 0) + b"\x00\x53\x11")
        close = read_until_close(s)
        assert close is not None, "connection dropped without a close frame"
        condition, _ = _close_error(close)
        assert condition in ("amqp:connection:framing-error", "amqp:frame-size-too-small"), condition
    _still_serves(broker)


def test_performative_before_open_gets_a_close(broker):
    with raw_sasl_anonymous(broker.amqp_port) as s:
        # begin before open: wrong state.
        s.sendall(frame(described_list(0x11, None, 0, 100, 100)))
        close = read_until_close(s)
        assert close is not None, "connection dropped without a close frame"
        condition, _ = _close_error(close)
        assert condition.startswith("amqp:"), condition
    _still_serves(broker)
