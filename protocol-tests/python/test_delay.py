"""Delayed delivery through stomp.py: every header form, a queue default delay
from the config, an explicit 0 overriding it, the maximum, ttl < delay, and the
due time visible on delivery."""

import time

import pytest

from broker import DEFAULT_CONFIG
from clients import unique


@pytest.fixture(scope="module")
def broker_config():
    return DEFAULT_CONFIG + """
[address_settings."slow.#"]
default_message_delay = "1s"

[address_settings."capped.#"]
max_message_delay = "2s"

[address_settings."clamped.#"]
max_message_delay = "1s"
delay_over_max = "clamp"
"""


def _now_ms():
    return int(time.time() * 1000)


def _receive_after(client, queue, headers, min_delay_s, body="x"):
    c = client
    c.subscribe(queue)
    start = time.monotonic()
    c.send(queue, body, headers=headers)
    frame = c.get(timeout=10)
    took = time.monotonic() - start
    assert frame.body == body
    assert took >= min_delay_s - 0.05, f"delivered after {took:.3f}s, expected >= {min_delay_s}s"
    return frame, took


@pytest.mark.parametrize(
    "header,value,delay_s",
    [
        ("AMQ_SCHEDULED_DELAY", "800", 0.8),
        ("x-delay", "800", 0.8),
        ("delay", "1", 1.0),
    ],
)
def test_relative_delay_headers(client_factory, header, value, delay_s):
    q = "/queue/" + unique("d")
    frame, took = _receive_after(client_factory(), q, {header: value}, delay_s)
    assert took < delay_s + 2.0
    assert int(frame.headers["delivery-time"]) <= _now_ms()


@pytest.mark.parametrize("header", ["AMQ_SCHEDULED_TIME", "_AMQ_SCHED_DELIVERY"])
def test_absolute_delivery_time_headers(client_factory, header):
    q = "/queue/" + unique("abs")
    due = _now_ms() + 900
    frame, _ = _receive_after(client_factory(), q, {header: str(due)}, 0.85)
    assert frame.headers["delivery-time"] == str(due)
    assert _now_ms() >= due


def test_absolute_beats_relative(client_factory):
    q = "/queue/" + unique("both")
    due = _now_ms() + 700
    frame, took = _receive_after(
        client_factory(), q, {"AMQ_SCHEDULED_DELAY": "5000", "AMQ_SCHEDULED_TIME": str(due)}, 0.65
    )
    assert took < 3.0, "the absolute time wins over the 5 s relative delay"


def test_queue_default_delay_and_explicit_zero(client_factory):
    q = "/queue/slow." + unique("q")
    c = client_factory()
    c.subscribe(q)
    start = time.monotonic()
    c.send(q, "default")
    c.send(q, "now", headers={"x-delay": "0"})
    first = c.get(timeout=5)
    assert first.body == "now", "an explicit 0 overrides the queue default"
    assert time.monotonic() - start < 0.5
    second = c.get(timeout=5)
    assert second.body == "default"
    assert time.monotonic() - start >= 0.95


def test_delay_over_the_maximum_is_an_error_with_receipt(raw_factory):
    raw = raw_factory()
    raw.connect()
    raw.send_frame("SEND", {"destination": "/queue/capped.x", "AMQ_SCHEDULED_DELAY": "10000",
                            "receipt": "too-long"}, b"x")
    frame = raw.read_frame()
    assert frame.command == "ERROR"
    assert frame.headers.get("receipt-id") == "too-long"
    assert "exceeds" in frame.headers["message"]


def test_delay_over_the_maximum_is_clamped_when_configured(client_factory):
    q = "/queue/clamped." + unique("c")
    _, took = _receive_after(client_factory(), q, {"AMQ_SCHEDULED_DELAY": "60000"}, 0.95)
    assert took < 5.0, "clamped to the 1 s maximum"


@pytest.mark.parametrize("value", ["-5", "soon", "99999999999999999"])
def test_malformed_broker_delay_is_an_error(raw_factory, value):
    raw = raw_factory()
    raw.connect()
    raw.send_frame("SEND", {"destination": "/queue/bad", "AMQ_SCHEDULED_DELAY": value,
                            "receipt": "r"}, b"x")
    frame = raw.read_frame()
    assert frame.command == "ERROR", frame
    assert frame.headers.get("receipt-id") == "r"


@pytest.mark.parametrize("value", ["-5", "soon"])
def test_x_delay_that_is_not_a_delay_is_a_plain_header(raw_factory, value):
    # x-delay and delay are ordinary header names in many applications (delay_headers).
    raw = raw_factory()
    raw.connect()
    raw.send_frame("SEND", {"destination": "/queue/bad", "x-delay": value, "receipt": "r"}, b"x")
    frame = raw.read_frame()
    assert frame.command == "RECEIPT", frame
    assert frame.headers.get("receipt-id") == "r"


def test_ttl_shorter_than_delay_is_never_delivered(client_factory):
    q = "/queue/" + unique("ttl")
    c = client_factory()
    c.subscribe(q)
    c.send(q, "never", headers={"AMQ_SCHEDULED_DELAY": "800", "ttl": "300"})
    c.send(q, "kept", headers={"AMQ_SCHEDULED_DELAY": "800", "ttl": "5000"})
    got = [f.body for f in c.drain(quiet=2.0)]
    assert got == ["kept"]
