"""Frame boundaries as TCP delivers them: split, coalesced, CRLF, repeated headers."""

import time

from clients import RawStomp, unique


def _subscribe(raw, dest, sub="s1"):
    raw.send_frame("SUBSCRIBE", {"destination": dest, "id": sub, "receipt": "sub-r"})
    raw.expect_receipt("sub-r")


def test_frames_split_into_single_bytes(broker, queue_name):
    raw = RawStomp(broker.stomp_port)
    try:
        connect = b"CONNECT\naccept-version:1.2\nhost:localhost\nlogin:admin\npasscode:secret\n\n\0"
        send = (f"SEND\ndestination:{queue_name}\ncontent-length:7\nreceipt:r1\n\n".encode()
                + b"a\0b\0c\0d" + b"\0")
        for data in (connect, send):
            for i in range(len(data)):
                raw.send_bytes(data[i:i + 1])
                time.sleep(0.001)
            if data is connect:
                assert raw.read_frame().command == "CONNECTED"
        assert raw.read_frame().headers.get("receipt-id") == "r1"
        _subscribe(raw, queue_name)
        msg = raw.read_frame()
        assert msg.command == "MESSAGE" and msg.body == b"a\0b\0c\0d"
    finally:
        raw.close()


def test_many_frames_in_one_write(broker, queue_name):
    raw = RawStomp(broker.stomp_port)
    try:
        assert raw.connect().command == "CONNECTED"
        n = 200
        batch = b"".join(
            f"SEND\ndestination:{queue_name}\nreceipt:r{i}\n\nbody {i}\0\n".encode()
            for i in range(n)
        )
        raw.send_bytes(batch)
        receipts = [raw.read_frame().headers.get("receipt-id") for _ in range(n)]
        assert receipts == [f"r{i}" for i in range(n)], "receipts must come back in frame order"
        _subscribe(raw, queue_name)
        bodies = [raw.read_frame().body for _ in range(n)]
        assert bodies == [f"body {i}".encode() for i in range(n)]
    finally:
        raw.close()


def test_crlf_line_endings(broker, queue_name):
    raw = RawStomp(broker.stomp_port)
    try:
        raw.send_bytes(b"CONNECT\r\naccept-version:1.2\r\nhost:localhost\r\n"
                       b"login:admin\r\npasscode:secret\r\n\r\n\0")
        assert raw.read_frame().command == "CONNECTED"
        raw.send_bytes(f"SEND\r\ndestination:{queue_name}\r\nx-h:v\r\nreceipt:r1\r\n\r\n"
                       "crlf body\0".encode())
        assert raw.read_frame().headers.get("receipt-id") == "r1"
        _subscribe(raw, queue_name)
        msg = raw.read_frame()
        assert msg.body == b"crlf body"
        assert msg.headers.get("x-h") == "v", "the \\r of a CRLF is not part of the value"
    finally:
        raw.close()


def test_repeated_header_first_value_wins(broker, queue_name):
    raw = RawStomp(broker.stomp_port)
    try:
        assert raw.connect().command == "CONNECTED"
        raw.send_bytes(f"SEND\ndestination:{queue_name}\nx-dup:first\nx-dup:second\n"
                       "receipt:r1\n\nd\0".encode())
        assert raw.read_frame().headers.get("receipt-id") == "r1"
        _subscribe(raw, queue_name)
        msg = raw.read_frame()
        assert msg.headers.get("x-dup") == "first", msg.raw_header_lines
    finally:
        raw.close()


def test_heart_beat_eols_between_frames_are_ignored(broker, queue_name):
    raw = RawStomp(broker.stomp_port)
    try:
        assert raw.connect().command == "CONNECTED"
        raw.send_bytes(b"\n\n\r\n")
        raw.send_frame("SEND", {"destination": queue_name, "receipt": "r1"}, b"x")
        raw.send_bytes(b"\n")
        assert raw.read_frame().headers.get("receipt-id") == "r1"
    finally:
        raw.close()


def test_unsubscribe_stops_delivery(client_factory, queue_name):
    c = client_factory()
    sub = c.subscribe(queue_name)
    c.send(queue_name, "before")
    assert c.get().body == "before"
    c.unsubscribe(sub)
    c.send(queue_name, "after")
    c.assert_no_message()
    other = client_factory()
    other.subscribe(queue_name)
    assert other.get().body == "after", "message sent after UNSUBSCRIBE stays on the queue"


def test_two_subscriptions_one_connection(client_factory):
    q1, q2 = f"/queue/{unique('a')}", f"/queue/{unique('b')}"
    c = client_factory()
    s1 = c.subscribe(q1)
    s2 = c.subscribe(q2)
    c.send(q1, "one")
    c.send(q2, "two")
    got = {m.body: m.headers.get("subscription") for m in c.get_n(2)}
    assert got == {"one": s1, "two": s2}
