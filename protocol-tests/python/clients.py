"""Thin synchronous wrappers over the STOMP clients the tests use.

`Client` drives stomp.py (a real third-party client). `RawStomp` speaks bytes over a
plain socket, for what a polite client library will not send: exact CONNECT headers,
malformed frames, silence after negotiating heart-beats.
"""

import queue
import socket
import threading
import time
import uuid

import stomp

from broker import PASSWORD, USER

RECEIVE_TIMEOUT = 5.0
QUIET_PERIOD = 1.0
IO_THREAD_EXIT_TIMEOUT = 5.0


def unique(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


class _Listener(stomp.ConnectionListener):
    def __init__(self):
        self.messages: "queue.Queue" = queue.Queue()
        self.receipts: set[str] = set()
        self.errors: list = []
        self.connected_frame = None
        self.disconnected = threading.Event()
        self.cond = threading.Condition()

    def on_connected(self, frame):
        self.connected_frame = frame

    def on_message(self, frame):
        self.messages.put(frame)

    def on_receipt(self, frame):
        with self.cond:
            self.receipts.add(frame.headers.get("receipt-id"))
            self.cond.notify_all()

    def on_error(self, frame):
        with self.cond:
            self.errors.append(frame)
            self.cond.notify_all()

    def on_disconnected(self):
        self.disconnected.set()
        with self.cond:
            self.cond.notify_all()


_CONNECTION_CLASSES = {
    "1.0": stomp.Connection10,
    "1.1": stomp.Connection11,
    "1.2": stomp.Connection12,
}


class Client:
    """A stomp.py connection whose every frame can wait for its RECEIPT."""

    def __init__(self, port, version="1.2", login=USER, passcode=PASSWORD,
                 heartbeats=(0, 0), auto_decode=True, connect=True, host="127.0.0.1"):
        self.version = version
        cls = _CONNECTION_CLASSES[version]
        kwargs = dict(reconnect_attempts_max=1, auto_decode=auto_decode)
        if version != "1.0":
            kwargs["heartbeats"] = heartbeats
        self.conn = cls([(host, port)], **kwargs)
        self.listener = _Listener()
        self.conn.set_listener("test", self.listener)
        if connect:
            self.connect(login, passcode)

    def connect(self, login=USER, passcode=PASSWORD):
        self.conn.connect(login, passcode, wait=True)
        return self.listener.connected_frame

    # -- receipts ---------------------------------------------------------
    def wait_receipt(self, receipt_id, timeout=RECEIVE_TIMEOUT):
        deadline = time.monotonic() + timeout
        with self.listener.cond:
            while receipt_id not in self.listener.receipts:
                if self.listener.errors:
                    raise AssertionError(
                        f"ERROR frame instead of RECEIPT {receipt_id}: "
                        f"{self.listener.errors[-1].headers} {self.listener.errors[-1].body!r}"
                    )
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"no RECEIPT {receipt_id} within {timeout}s")
                self.listener.cond.wait(left)

    def _receipted(self, fn, *args, receipt=True, **kwargs):
        if not receipt:
            fn(*args, **kwargs)
            return
        rid = unique("r")
        fn(*args, receipt=rid, **kwargs)
        self.wait_receipt(rid)

    # -- frames -----------------------------------------------------------
    def send(self, destination, body, headers=None, transaction=None, receipt=True):
        headers = dict(headers or {})
        if transaction is not None:
            headers["transaction"] = transaction
        self._receipted(self.conn.send, destination, body, headers=headers, receipt=receipt)

    def subscribe(self, destination, sub_id=None, ack="auto", headers=None, receipt=True):
        sub_id = sub_id or unique("sub")
        self._receipted(self.conn.subscribe, destination, sub_id, ack=ack,
                        headers=dict(headers or {}), receipt=receipt)
        return sub_id

    def unsubscribe(self, sub_id, receipt=True):
        self._receipted(self.conn.unsubscribe, sub_id, receipt=receipt)

    def _ack_args(self, frame):
        h = frame.headers
        if self.version == "1.2":
            return (h["ack"],)
        if self.version == "1.1":
            return (h["message-id"], h["subscription"])
        return (h["message-id"],)

    def ack(self, frame, transaction=None, receipt=True):
        rid = unique("r") if receipt else None
        self.conn.ack(*self._ack_args(frame), transaction=transaction, receipt=rid)
        if rid:
            self.wait_receipt(rid)

    def nack(self, frame, transaction=None, receipt=True):
        rid = unique("r") if receipt else None
        self.conn.nack(*self._ack_args(frame), transaction=transaction, receipt=rid)
        if rid:
            self.wait_receipt(rid)

    def begin(self):
        tx = unique("tx")
        self._receipted(self.conn.begin, transaction=tx)
        return tx

    def commit(self, tx):
        self._receipted(self.conn.commit, transaction=tx)

    def abort(self, tx):
        self._receipted(self.conn.abort, tx)

    # -- receiving --------------------------------------------------------
    def get(self, timeout=RECEIVE_TIMEOUT):
        try:
            return self.listener.messages.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(
                f"no MESSAGE within {timeout}s (errors: "
                f"{[(e.headers, e.body) for e in self.listener.errors]})"
            ) from None

    def get_n(self, n, timeout=RECEIVE_TIMEOUT):
        return [self.get(timeout) for _ in range(n)]

    def drain(self, quiet=QUIET_PERIOD):
        """Every message that arrives until `quiet` seconds pass without one."""
        out = []
        while True:
            try:
                out.append(self.listener.messages.get(timeout=quiet))
            except queue.Empty:
                return out

    def assert_no_message(self, wait=QUIET_PERIOD):
        try:
            frame = self.listener.messages.get(timeout=wait)
        except queue.Empty:
            return
        raise AssertionError(f"unexpected MESSAGE {frame.headers} {frame.body!r}")

    # -- lifecycle --------------------------------------------------------
    def disconnect(self, timeout=RECEIVE_TIMEOUT):
        """Graceful DISCONNECT: returns once the broker confirmed it with a RECEIPT."""
        if not self.conn.is_connected():
            return
        rid = unique("r")
        self.conn.send_frame("DISCONNECT", {"receipt": rid})
        try:
            self.wait_receipt(rid, timeout)
        finally:
            self._hard_close()

    def drop(self):
        """Close the socket without DISCONNECT, like a crashed client."""
        self._hard_close()

    def _hard_close(self):
        # Shut the socket down so stomp.py's IO thread sees the end and leaves, and
        # only then close it: closed under a thread still reading, its descriptor is
        # reused by the next connection this process opens, and the old TLS reader
        # eats that connection's first bytes (a record header: five bytes).
        transport = self.conn.transport
        transport.running = False
        sock = getattr(transport, "socket", None)
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        io_thread = getattr(transport, "io_thread", None)
        if io_thread is not None and io_thread is not threading.current_thread():
            io_thread.join(IO_THREAD_EXIT_TIMEOUT)
        sock = getattr(transport, "socket", None)
        if sock is not None:
            try:
                sock.close()
            except OSError:
                pass
        transport.stop()

    def close(self):
        try:
            self.disconnect(timeout=2.0)
        except Exception:  # noqa: BLE001 - best-effort teardown; the test already decided
            self._hard_close()


# --------------------------------------------------------------------------
# Raw socket client

_ESCAPES = {"\\": "\\\\", "\n": "\\n", ":": "\\c", "\r": "\\r"}
_UNESCAPES = {"\\\\": "\\", "\\n": "\n", "\\c": ":", "\\r": "\r"}


def escape(value: str) -> str:
    return "".join(_ESCAPES.get(c, c) for c in value)


def unescape(value: str) -> str:
    out, i = [], 0
    while i < len(value):
        pair = value[i:i + 2]
        if pair in _UNESCAPES:
            out.append(_UNESCAPES[pair])
            i += 2
        else:
            out.append(value[i])
            i += 1
    return "".join(out)


class Frame:
    def __init__(self, command, headers, body, raw_header_lines):
        self.command = command
        self.headers = headers
        self.body = body
        self.raw_header_lines = raw_header_lines

    def __repr__(self):
        return f"Frame({self.command!r}, {self.headers!r}, {self.body[:200]!r})"


class Closed(Exception):
    pass


class RawStomp:
    def __init__(self, port, host="127.0.0.1"):
        self.sock = socket.create_connection((host, port), timeout=RECEIVE_TIMEOUT)
        self.buf = b""
        self.heartbeats_seen = 0
        self.eof = False
        self.pending: list[Frame] = []  # frames read past while waiting for a RECEIPT

    def send_bytes(self, data: bytes):
        self.sock.sendall(data)

    def send_frame(self, command, headers=None, body=b"", escape_headers=True):
        lines = [command]
        for k, v in (headers or {}).items():
            if escape_headers:
                k, v = escape(k), escape(str(v))
            lines.append(f"{k}:{v}")
        data = ("\n".join(lines) + "\n\n").encode() + body + b"\0"
        self.sock.sendall(data)

    def connect(self, version="1.2", login=USER, passcode=PASSWORD, heart_beat=None,
                extra=None, command="CONNECT"):
        headers = {}
        if version is not None:
            headers["accept-version"] = version
        headers["host"] = "localhost"
        if login is not None:
            headers["login"] = login
        if passcode is not None:
            headers["passcode"] = passcode
        if heart_beat is not None:
            headers["heart-beat"] = heart_beat
        headers.update(extra or {})
        self.send_frame(command, headers, escape_headers=False)
        return self.read_frame()

    def _fill(self, deadline):
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        self.sock.settimeout(left)
        try:
            chunk = self.sock.recv(65536)
        except socket.timeout:
            raise TimeoutError from None
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            self.eof = True
            raise Closed
        self.buf += chunk

    def read_frame(self, timeout=RECEIVE_TIMEOUT, unescape_headers=True) -> Frame:
        """Next frame; heart-beat EOLs before it are counted and skipped.

        Raises TimeoutError if none arrives, Closed if the peer closed first.
        """
        if self.pending:
            return self.pending.pop(0)
        deadline = time.monotonic() + timeout
        while True:
            while self.buf[:1] in (b"\n", b"\r"):
                if self.buf.startswith(b"\r\n"):
                    self.buf = self.buf[2:]
                elif self.buf.startswith(b"\n"):
                    self.buf = self.buf[1:]
                elif len(self.buf) == 1:
                    break  # a lone \r: wait for its \n
                else:
                    self.buf = self.buf[1:]
                self.heartbeats_seen += 1
            end = self.buf.find(b"\n\n")
            end_crlf = self.buf.find(b"\r\n\r\n")
            if end_crlf != -1 and (end == -1 or end_crlf < end):
                head, body_start = self.buf[:end_crlf], end_crlf + 4
            elif end != -1:
                head, body_start = self.buf[:end], end + 2
            else:
                self._fill(deadline)
                continue
            lines = head.decode("utf-8", "replace").replace("\r\n", "\n").split("\n")
            command, header_lines = lines[0], lines[1:]
            headers = {}
            for line in header_lines:
                k, _, v = line.partition(":")
                if unescape_headers:
                    k, v = unescape(k), unescape(v)
                headers.setdefault(k, v)
            if "content-length" in headers:
                n = int(headers["content-length"])
                if len(self.buf) < body_start + n + 1:
                    self._fill(deadline)
                    continue
                body = self.buf[body_start:body_start + n]
                self.buf = self.buf[body_start + n + 1:]
            else:
                nul = self.buf.find(b"\0", body_start)
                if nul == -1:
                    self._fill(deadline)
                    continue
                body = self.buf[body_start:nul]
                self.buf = self.buf[nul + 1:]
            return Frame(command, headers, body, header_lines)

    def expect_receipt(self, receipt_id, timeout=RECEIVE_TIMEOUT) -> None:
        """Wait for RECEIPT `receipt_id`; other frames (MESSAGEs may overtake a RECEIPT)
        stay queued for the next read_frame."""
        deadline = time.monotonic() + timeout
        seen = []
        while True:
            frame = self._read_fresh(max(0.0, deadline - time.monotonic()))
            if frame.command == "RECEIPT" and frame.headers.get("receipt-id") == receipt_id:
                self.pending.extend(seen)
                return
            if frame.command == "ERROR":
                raise AssertionError(f"ERROR instead of RECEIPT {receipt_id}: {frame}")
            seen.append(frame)

    def _read_fresh(self, timeout):
        saved, self.pending = self.pending, []
        try:
            return self.read_frame(timeout)
        finally:
            self.pending = saved + self.pending

    def read_until_closed(self, timeout=RECEIVE_TIMEOUT) -> tuple[list, bool]:
        """Frames received until the peer closes; (frames, closed_within_timeout)."""
        frames = []
        deadline = time.monotonic() + timeout
        while True:
            try:
                frames.append(self.read_frame(timeout=max(0.0, deadline - time.monotonic())))
            except Closed:
                return frames, True
            except (TimeoutError, OSError):
                return frames, self.eof

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass
