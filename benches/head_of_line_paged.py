#!/usr/bin/env python3
"""Head-of-line blocking past the memory limit, over raw STOMP sockets.

The scenario of the queue-semantics issue: with `max_memory_messages = 100`,
consumer S (prefetch 1, never acks) owns group G; N messages of G are sent,
then 10 ungrouped and one with `AMQ_SCHEDULED_DELAY: 500`. A second consumer
subscribing afterwards must get all 11 promptly, however deep G's backlog on
disk is: the delayed one at its due time, the others at once.

Starts its own broker from BINARY on a fresh data dir for each depth.

    benches/head_of_line_paged.py target/release/weir [--depths 300,1000,10000]
"""

import argparse
import os
import socket
import subprocess
import tempfile
import time

MEMORY = 100


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Conn:
    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.buf = b""
        self.sock.sendall(b"CONNECT\naccept-version:1.2\nhost:/\nheart-beat:0,0\n\n\0")
        assert next(self.frames(5)).startswith(b"CONNECTED")

    def frames(self, timeout):
        deadline = time.time() + timeout
        while True:
            while b"\0" in self.buf:
                frame, _, rest = self.buf.partition(b"\0")
                self.buf = rest.lstrip(b"\r\n")
                yield frame
            left = deadline - time.time()
            if left <= 0:
                return
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(65536)
            except socket.timeout:
                return
            if not data:
                return
            self.buf += data


def run(binary, depth):
    with tempfile.TemporaryDirectory() as d:
        config = os.path.join(d, "weir.toml")
        with open(config, "w") as f:
            f.write(f"[queue_defaults]\nmax_memory_messages = {MEMORY}\n")
        port = free_port()
        broker = subprocess.Popen(
            [binary, "serve", "--config", config, "--data-dir", os.path.join(d, "data"),
             "--stomp", f"127.0.0.1:{port}", "--amqp", "off", "--http", "off", "--log", "warn"])
        try:
            for _ in range(100):
                try:
                    socket.create_connection(("127.0.0.1", port)).close()
                    break
                except OSError:
                    time.sleep(0.05)
            stalled = Conn(port)
            stalled.sock.sendall(b"SUBSCRIBE\nid:1\ndestination:/queue/q\n"
                                 b"ack:client-individual\nactivemq.prefetchSize:1\n\n\0")
            producer = Conn(port)
            out = bytearray()
            for i in range(depth):
                out += b"SEND\ndestination:/queue/q\nJMSXGroupID:G\n\nG-%d\0" % i
            for i in range(10):
                out += b"SEND\ndestination:/queue/q\n\nU-%d\0" % i
            out += b"SEND\ndestination:/queue/q\nAMQ_SCHEDULED_DELAY:500\nreceipt:r\n\nD\0"
            producer.sock.sendall(bytes(out))
            for frame in producer.frames(60):
                if frame.startswith(b"RECEIPT"):
                    break
            start = time.time()
            second = Conn(port)
            second.sock.sendall(b"SUBSCRIBE\nid:2\ndestination:/queue/q\nack:auto\n\n\0")
            got, first_ten = 0, None
            for frame in second.frames(5):
                if frame.startswith(b"MESSAGE"):
                    got += 1
                    if got == 10:
                        first_ten = time.time() - start
                    if got == 11:
                        break
            total = time.time() - start
            ten = f"{first_ten * 1000:.0f} ms" if first_ten is not None else "-"
            print(f"depth {depth:>6} ({depth // MEMORY}x memory): second consumer got {got}/11; "
                  f"10 ungrouped in {ten}, all 11 in {total * 1000:.0f} ms")
        finally:
            broker.kill()
            broker.wait()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("binary")
    parser.add_argument("--depths", default="300,1000,10000")
    args = parser.parse_args()
    for depth in (int(d) for d in args.depths.split(",")):
        run(args.binary, depth)


if __name__ == "__main__":
    main()
