"""Heart-beats as negotiated in CONNECT/CONNECTED (STOMP 1.1+)."""

import time

from clients import Closed


def _negotiated(frame):
    sx, sy = (int(x) for x in frame.headers["heart-beat"].split(","))
    return sx, sy


def test_silent_client_is_disconnected(raw_factory):
    raw = raw_factory()
    frame = raw.connect(version="1.2", heart_beat="500,0")
    assert frame.command == "CONNECTED", frame
    _, sy = _negotiated(frame)
    assert sy > 0, f"server should want our heart-beats, answered {frame.headers['heart-beat']}"
    interval = max(500, sy) / 1000
    started = time.monotonic()
    frames, closed = raw.read_until_closed(timeout=interval * 3 + 5)
    elapsed = time.monotonic() - started
    assert closed, f"a client silent for {elapsed:.1f}s (beat every {interval}s) was not dropped"
    assert elapsed >= interval, f"dropped after {elapsed:.2f}s, before one interval ({interval}s)"


def test_client_sending_heart_beats_stays_connected(raw_factory):
    raw = raw_factory()
    frame = raw.connect(version="1.2", heart_beat="300,0")
    assert frame.command == "CONNECTED", frame
    _, sy = _negotiated(frame)
    beat = max(300, sy) / 1000 / 2  # beat faster than promised
    deadline = time.monotonic() + 4
    while time.monotonic() < deadline:
        raw.send_bytes(b"\n")
        try:
            raw.read_frame(timeout=beat)
        except TimeoutError:
            pass
        except Closed:
            raise AssertionError("dropped although heart-beats were sent") from None
    raw.send_frame("DISCONNECT", {"receipt": "bye"})
    assert raw.read_frame().headers.get("receipt-id") == "bye"


def test_server_sends_heart_beats_when_asked(raw_factory):
    raw = raw_factory()
    frame = raw.connect(version="1.2", heart_beat="0,300")
    assert frame.command == "CONNECTED", frame
    sx, _ = _negotiated(frame)
    assert sx > 0, f"we asked for beats every 300 ms, server offered {frame.headers['heart-beat']}"
    interval = max(sx, 300) / 1000
    try:
        raw.read_frame(timeout=interval * 5 + 1)
    except TimeoutError:
        pass
    # One EOL may trail the CONNECTED frame itself (allowed by the spec), so ask for 4.
    assert raw.heartbeats_seen >= 4, (
        f"expected >= 4 heart-beats in {interval * 5 + 1:.1f}s, saw {raw.heartbeats_seen}"
    )


def test_no_heart_beats_means_no_timeout(raw_factory):
    raw = raw_factory()
    frame = raw.connect(version="1.2", heart_beat="0,0")
    assert frame.command == "CONNECTED"
    try:
        raw.read_frame(timeout=2.5)
        raise AssertionError("unexpected frame")
    except TimeoutError:
        pass
    assert raw.heartbeats_seen <= 1, "heart-beats sent although 0,0 was negotiated"
    raw.send_frame("DISCONNECT", {"receipt": "bye"})
    assert raw.read_frame().headers.get("receipt-id") == "bye"
