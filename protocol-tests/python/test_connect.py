"""CONNECT / STOMP: version negotiation, CONNECTED headers, authentication."""

import pytest

from clients import Client, unique


@pytest.mark.parametrize(
    "accept, expected",
    [("1.0,1.1,1.2", "1.2"), ("1.2", "1.2"), ("1.1", "1.1"), ("1.0,1.1", "1.1"), ("1.0", "1.0")],
)
def test_version_negotiation_picks_highest_common(raw_factory, accept, expected):
    raw = raw_factory()
    frame = raw.connect(version=accept)
    assert frame.command == "CONNECTED", frame
    # A 1.0 server may omit `version`; anything newer must state it.
    assert frame.headers.get("version", "1.0") == expected, frame.headers


def test_no_accept_version_means_stomp_1_0(raw_factory):
    raw = raw_factory()
    frame = raw.connect(version=None)
    assert frame.command == "CONNECTED", frame
    assert frame.headers.get("version", "1.0") == "1.0", frame.headers


def test_no_common_version_is_an_error(raw_factory):
    raw = raw_factory()
    frame = raw.connect(version="2.0,3.1")
    assert frame.command == "ERROR", frame
    # The spec asks the server to name the versions it supports.
    assert "1.2" in frame.headers.get("version", ""), frame.headers
    _, closed = raw.read_until_closed()
    assert closed, "connection left open after version mismatch"


def test_stomp_command_is_accepted_as_connect(raw_factory):
    raw = raw_factory()
    frame = raw.connect(version="1.2", command="STOMP")
    assert frame.command == "CONNECTED", frame
    assert frame.headers.get("version") == "1.2"


def test_connected_headers(raw_factory):
    a = raw_factory().connect(version="1.1,1.2", heart_beat="0,0")
    b = raw_factory().connect(version="1.1,1.2", heart_beat="0,0")
    for frame in (a, b):
        assert frame.command == "CONNECTED", frame
        assert frame.headers.get("server", "").lower().startswith("weir"), frame.headers
        assert frame.headers.get("session"), frame.headers
        # The server states its own capability; with the client's 0,0 the effective
        # rate is "none" whatever it says, so only the form is checked here.
        beats = frame.headers.get("heart-beat", "").split(",")
        assert len(beats) == 2 and all(x.isdigit() for x in beats), frame.headers
    assert a.headers["session"] != b.headers["session"], "session ids must be unique"


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
def test_stomppy_each_version_round_trip(broker, client_factory, version, queue_name):
    c = client_factory(version=version)
    assert c.listener.connected_frame is not None
    if version != "1.0":
        assert c.listener.connected_frame.headers.get("version") == version
    c.subscribe(queue_name, ack="auto")
    c.send(queue_name, f"hello {version}")
    msg = c.get()
    assert msg.body == f"hello {version}"
    assert msg.headers["destination"] == queue_name
    assert msg.headers.get("message-id")
    if version != "1.0":
        assert msg.headers.get("subscription")


@pytest.mark.parametrize(
    "login, passcode",
    [("admin", "wrong"), ("nobody", "secret"), ("", "")],
    ids=["wrong-passcode", "unknown-user", "empty"],
)
def test_wrong_credentials_error_and_close(raw_factory, login, passcode):
    raw = raw_factory()
    frame = raw.connect(version="1.2", login=login, passcode=passcode)
    assert frame.command == "ERROR", frame
    frames, closed = raw.read_until_closed()
    assert closed, "connection must be closed after a failed login"
    assert not any(f.command == "CONNECTED" for f in frames)


def test_missing_credentials_rejected(raw_factory):
    raw = raw_factory()
    frame = raw.connect(version="1.2", login=None, passcode=None)
    assert frame.command == "ERROR", "users are configured, so an anonymous CONNECT must fail"


def test_wrong_credentials_with_stomppy(broker):
    c = Client(broker.stomp_port, connect=False)
    try:
        with pytest.raises(Exception):
            c.connect("admin", "not-the-password")
        assert c.listener.errors, "stomp.py saw no ERROR frame"
    finally:
        c.close()


def test_second_user_from_config(client_factory, queue_name):
    c = client_factory(login="guest", passcode="guest")
    c.send(queue_name, unique("body"))


def test_frames_before_connect_are_refused(raw_factory, queue_name):
    raw = raw_factory()
    raw.send_frame("SEND", {"destination": queue_name}, b"sneaky")
    frames, closed = raw.read_until_closed()
    assert frames and frames[0].command == "ERROR", frames
    assert closed
