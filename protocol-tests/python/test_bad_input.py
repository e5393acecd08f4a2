"""Bad bytes on one connection: ERROR frame, that connection closed, nobody else affected."""

import time

import pytest

from broker import MAX_FRAME_SIZE
from clients import unique


@pytest.fixture
def bystander(client_factory, queue_name):
    """A healthy client that must keep working while another connection misbehaves."""
    c = client_factory()
    c.subscribe(queue_name)
    c.send(queue_name, "before")
    assert c.get().body == "before"
    yield c
    body = unique("after")
    c.send(queue_name, body)  # fails the test if the broker or this connection died
    assert c.get().body == body


def _connected_raw(raw_factory):
    raw = raw_factory()
    assert raw.connect().command == "CONNECTED"
    return raw


def _assert_error_then_close(raw, what):
    frames, closed = raw.read_until_closed(timeout=5)
    commands = [f.command for f in frames]
    assert "ERROR" in commands, f"{what}: expected an ERROR frame, got {frames}"
    assert closed, f"{what}: connection still open after the ERROR frame"


BAD_FRAMES = {
    "unknown-command": b"FROBNICATE\ndestination:/queue/x\n\nbody\0",
    "header-without-colon": b"SEND\ndestination:/queue/x\nthis line has no colon\n\nbody\0",
    "bad-escape": b"SEND\ndestination:/queue/x\nx-h:bad\\tescape\n\nbody\0",
    "content-length-not-a-number": b"SEND\ndestination:/queue/x\ncontent-length:abc\n\nbody\0",
    "content-length-too-short": b"SEND\ndestination:/queue/x\ncontent-length:1\n\nbody\0",
    "send-without-destination": b"SEND\nreceipt:r1\n\nbody\0",
    "subscribe-without-id": b"SUBSCRIBE\ndestination:/queue/x\nreceipt:r1\n\n\0",
    "lowercase-command": b"send\ndestination:/queue/x\n\nbody\0",
    "binary-junk": b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\n\n\0",
}


@pytest.mark.parametrize("name", sorted(BAD_FRAMES))
def test_malformed_frame_after_connect(raw_factory, bystander, name):
    raw = _connected_raw(raw_factory)
    raw.send_bytes(BAD_FRAMES[name])
    _assert_error_then_close(raw, name)


def test_garbage_instead_of_connect(raw_factory, bystander):
    raw = raw_factory()
    raw.send_bytes(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n\0")
    _assert_error_then_close(raw, "HTTP request")


def test_oversized_frame_with_content_length(raw_factory, bystander, queue_name):
    raw = _connected_raw(raw_factory)
    size = MAX_FRAME_SIZE * 4
    raw.send_bytes(f"SEND\ndestination:{queue_name}\ncontent-length:{size}\n\n".encode())
    # A broker may refuse on the header alone; give it the chance before the body.
    time.sleep(0.3)
    try:
        for _ in range(size // 16384):
            raw.send_bytes(b"y" * 16384)
        raw.send_bytes(b"\0")
    except OSError:
        pass  # it closed on us mid-body: fine, as long as an ERROR came first
    _assert_error_then_close(raw, "oversized frame (content-length)")
    consumer_sees = bystander.drain(0.3)
    assert not any(len(m.body) >= size for m in consumer_sees), "oversized frame was routed"


def test_oversized_frame_without_terminator(raw_factory, bystander, queue_name):
    """No content-length, no NUL: the broker must not buffer without bound."""
    raw = _connected_raw(raw_factory)
    raw.send_bytes(f"SEND\ndestination:{queue_name}\n\n".encode())
    try:
        for _ in range((MAX_FRAME_SIZE * 4) // 16384):
            raw.send_bytes(b"z" * 16384)
    except OSError:
        pass
    _assert_error_then_close(raw, "oversized frame (no terminator)")


def test_oversized_headers(raw_factory, bystander):
    raw = _connected_raw(raw_factory)
    try:
        raw.send_bytes(b"SEND\ndestination:/queue/x\nx-big:" + b"h" * (MAX_FRAME_SIZE * 2))
    except OSError:
        pass
    _assert_error_then_close(raw, "oversized header")


def test_many_bad_connections_in_a_row(raw_factory, bystander):
    for i in range(20):
        raw = raw_factory()
        raw.send_bytes(b"NOT-STOMP\n\n\0")
        _assert_error_then_close(raw, f"bad connection {i}")
        raw.close()


def test_abrupt_close_mid_frame(raw_factory, bystander, queue_name):
    raw = _connected_raw(raw_factory)
    raw.send_bytes(f"SEND\ndestination:{queue_name}\ncontent-length:100\n\nhalf".encode())
    raw.close()
    # The half frame must never be delivered as a message.
    assert bystander.drain(0.5) == []
