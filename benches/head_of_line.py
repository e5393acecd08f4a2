#!/usr/bin/env python3
"""Head-of-line benchmark (issue 5, benchmark 2), over raw STOMP sockets.

A slow consumer (prefetch 1, 10 ms per message) owns group G; 100 messages of G
are queued, then 1,000 ungrouped ones while three idle consumers wait. We time
how long the ungrouped ones take to drain, and compare with the same run
without the grouped messages in front. Weir keeps each group in its own lane,
so the ratio should be near 1; a broker that serves the queue strictly in
order waits for the whole group first (about 1 s here).

    benches/head_of_line.py HOST:PORT [--runs 3]
"""

import argparse
import socket
import statistics
import threading
import time
import uuid


class Conn:
    def __init__(self, addr):
        host, port = addr.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        self.send("CONNECT", {"accept-version": "1.2", "host": "/", "heart-beat": "0,0"})
        assert self.recv()[0] == "CONNECTED"

    def send(self, command, headers, body=b""):
        head = command + "\n" + "".join(f"{k}:{v}\n" for k, v in headers.items()) + "\n"
        self.sock.sendall(head.encode() + body + b"\0")

    def recv(self):
        while True:
            self.buf = self.buf.lstrip(b"\r\n")
            end = self.buf.find(b"\0")
            if end >= 0:
                frame, self.buf = self.buf[:end], self.buf[end + 1 :]
                head, _, body = frame.partition(b"\n\n")
                lines = head.decode().split("\n")
                headers = dict(l.split(":", 1) for l in lines[1:] if ":" in l)
                return lines[0], headers, body
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed")
            self.buf += chunk


def run(addr, with_group):
    q = "/queue/hol-" + uuid.uuid4().hex[:8]
    slow = Conn(addr)
    slow.send("SUBSCRIBE", {"id": "s", "destination": q, "ack": "client-individual",
                            "prefetch": "1", "receipt": "r"})
    assert slow.recv()[0] == "RECEIPT"
    producer = Conn(addr)
    if with_group:
        for i in range(100):
            producer.send("SEND", {"destination": q, "JMSXGroupID": "G"}, f"g{i}".encode())
        producer.send("SEND", {"destination": q, "receipt": "g"}, b"")
        assert producer.recv()[0] == "RECEIPT"

    stop = threading.Event()
    done = threading.Event()
    lock = threading.Lock()
    received = [0]

    def count(body):
        # Every ungrouped message counts, whichever consumer got it.
        if body.startswith(b"u"):
            with lock:
                received[0] += 1
                if received[0] >= 1000:
                    done.set()

    def slow_loop():
        slow.sock.settimeout(0.2)
        while not stop.is_set():
            try:
                _, h, body = slow.recv()
            except (socket.timeout, ConnectionError, OSError):
                continue
            count(body)
            time.sleep(0.010)  # 10 ms of work per message
            try:
                slow.send("ACK", {"id": h["ack"]})
            except OSError:
                return

    threading.Thread(target=slow_loop, daemon=True).start()
    idle = [Conn(addr) for _ in range(3)]
    for n, c in enumerate(idle):
        c.send("SUBSCRIBE", {"id": f"i{n}", "destination": q, "ack": "auto", "receipt": "r"})
        assert c.recv()[0] == "RECEIPT"

    def idle_loop(n, c):
        while not done.is_set():
            try:
                _, _, body = c.recv()
            except (ConnectionError, OSError):
                return
            count(body)

    for n, c in enumerate(idle):
        threading.Thread(target=idle_loop, args=(n, c), daemon=True).start()
    start = time.monotonic()
    for i in range(1000):
        producer.send("SEND", {"destination": q}, f"u{i}".encode())
    done.wait(60)
    took = time.monotonic() - start
    stop.set()
    time.sleep(0.3)
    for c in idle + [slow, producer]:
        c.sock.close()
    return took, received[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("addr")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    plain, grouped = [], []
    for _ in range(args.runs):
        t, n = run(args.addr, False)
        plain.append(t)
        t2, n2 = run(args.addr, True)
        grouped.append(t2)
        print(f"run: without group {t*1000:.1f} ms ({n} received), "
              f"behind 100 grouped {t2*1000:.1f} ms ({n2} received)")
    a, b = statistics.median(plain), statistics.median(grouped)
    print(f'{{"without_group_ms": {a*1000:.1f}, "behind_group_ms": {b*1000:.1f}, "ratio": {b/a:.2f}}}')


if __name__ == "__main__":
    main()
