"""Helpers over python-qpid-proton's blocking API for the AMQP 1.0 tests.

`connect` opens a `BlockingConnection` with the SASL mechanism asked for; `Caps` puts
node capabilities (`queue` / `topic`) on a link the way Qpid JMS does; `settle_next`
gives a received delivery any outcome, including `modified` with its flags, which the
blocking API does not expose; `pump` lets the event loop run so a disposition or flow
actually goes out before the test looks at the broker again.
"""

import socket
import struct
import time

from proton import Data, Delivery, Timeout, symbol
from proton.reactor import LinkOption
from proton.utils import BlockingConnection

from broker import PASSWORD, USER

TIMEOUT = 5.0


def url(broker) -> str:
    return f"amqp://127.0.0.1:{broker.amqp_port}"


def connect(broker, user=USER, password=PASSWORD, mechs="PLAIN", **kwargs) -> BlockingConnection:
    if mechs == "ANONYMOUS":
        return BlockingConnection(url(broker), timeout=TIMEOUT, allowed_mechs="ANONYMOUS", **kwargs)
    return BlockingConnection(
        url(broker),
        timeout=TIMEOUT,
        user=user,
        password=password,
        allowed_mechs=mechs,
        # PLAIN without TLS is what a loopback test does; proton refuses it unless told.
        allow_insecure_mechs=True,
        **kwargs,
    )


class Caps(LinkOption):
    """Capabilities on the link's node: the source of a receiver, the target of a sender."""

    def __init__(self, *capabilities: str):
        self.capabilities = capabilities

    def apply(self, link):
        node = link.source if link.is_receiver else link.target
        node.capabilities.put_array(False, Data.SYMBOL)
        node.capabilities.enter()
        for c in self.capabilities:
            node.capabilities.put_symbol(c)
        node.capabilities.exit()


QUEUE = Caps("queue")
TOPIC = Caps("topic")


def pump(conn: BlockingConnection, seconds: float = 0.2) -> None:
    """Runs the connection's event loop for a while (sends pending frames, reads replies)."""
    try:
        conn.wait(lambda: False, timeout=seconds)
    except Timeout:
        pass


def settle_next(receiver, state, failed=False, undeliverable=False) -> None:
    """Settles the oldest unsettled delivery taken with receive() with `state`."""
    delivery = receiver.fetcher.unsettled.popleft()
    if state == Delivery.MODIFIED:
        delivery.local.failed = failed
        delivery.local.undeliverable = undeliverable
    delivery.update(state)
    delivery.settle()
    pump(receiver.connection)


def receive_or_none(receiver, timeout=1.0):
    try:
        return receiver.receive(timeout=timeout)
    except Timeout:
        return None


# ---- raw frames, for what a polite client will not send ----

SASL_HEADER = b"AMQP\x03\x01\x00\x00"
AMQP_HEADER = b"AMQP\x00\x01\x00\x00"


def frame(body: bytes, frame_type: int = 0, channel: int = 0) -> bytes:
    """size, doff=2, type, channel, then the body."""
    return struct.pack(">IBBH", 8 + len(body), 2, frame_type, channel) + body


def described_list(code: int, *fields) -> bytes:
    """A performative: descriptor ulong `code`, then the fields encoded by proton's codec."""
    d = Data()
    d.put_described()
    d.enter()
    d.put_ulong(code)
    d.put_list()
    d.enter()
    for f in fields:
        d.put_object(f)
    d.exit()
    d.exit()
    return d.encode()


def read_exact(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise EOFError(f"peer closed after {len(out)} of {n} bytes")
        out += chunk
    return out


def read_frame(sock: socket.socket):
    """(type, channel, decoded body or None for an empty heartbeat frame)."""
    size, doff, ftype, channel = struct.unpack(">IBBH", read_exact(sock, 8))
    rest = read_exact(sock, size - 8)
    body = rest[doff * 4 - 8:]
    if not body:
        return ftype, channel, None
    d = Data()
    d.decode(body)
    return ftype, channel, d.get_object()


def raw_sasl_anonymous(port: int, timeout: float = TIMEOUT) -> socket.socket:
    """A socket past SASL ANONYMOUS and the AMQP header: the next bytes are ours to send."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    sock.sendall(SASL_HEADER)
    assert read_exact(sock, 8) == SASL_HEADER
    read_frame(sock)  # sasl-mechanisms
    sock.sendall(frame(described_list(0x41, symbol("ANONYMOUS")), frame_type=1))
    _, _, outcome = read_frame(sock)
    assert outcome.descriptor == 0x44, outcome
    assert outcome.value[0] == 0, f"SASL outcome {outcome.value}"
    sock.sendall(AMQP_HEADER)
    assert read_exact(sock, 8) == AMQP_HEADER
    return sock


def read_until_close(sock: socket.socket, deadline_s: float = TIMEOUT):
    """Reads frames until a `close` performative (0x18); returns it, or None on EOF."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        try:
            _, _, perf = read_frame(sock)
        except (EOFError, ConnectionResetError):
            return None
        if perf is not None and getattr(perf, "descriptor", None) == 0x18:
            return perf
    raise AssertionError("no close frame in time")
