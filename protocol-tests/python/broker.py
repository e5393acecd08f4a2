"""Start, kill and restart a real `weir serve` process for black-box tests.

Each Broker owns a temp dir holding its config file, data dir and log. Ports are
picked free on 127.0.0.1 and kept across restarts, so clients reconnect to the
same address after a `kill -9` on the same data dir.
"""

import os
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_BIN = REPO_ROOT / "target" / "release" / "weir"

USER = "admin"
PASSWORD = "secret"
MAX_FRAME_SIZE = 65536
DECLARED_QUEUE = "declared.q"
DECLARED_MAX_DELIVERY_ATTEMPTS = 3

DEFAULT_CONFIG = f"""
[[users]]
name = "{USER}"
password = "{PASSWORD}"

[[users]]
name = "guest"
password = "guest"

[limits]
max_frame_size = {MAX_FRAME_SIZE}

[[queues]]
name = "{DECLARED_QUEUE}"
max_delivery_attempts = {DECLARED_MAX_DELIVERY_ATTEMPTS}
"""


class BrokerError(RuntimeError):
    pass


def weir_bin() -> Path:
    return Path(os.environ.get("WEIR_BIN", str(DEFAULT_BIN)))


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Broker:
    def __init__(self, config_body: str = DEFAULT_CONFIG, log_level: str | None = None):
        self._tmp = tempfile.TemporaryDirectory(prefix="weir-ptest-")
        self.dir = Path(self._tmp.name)
        self.data_dir = self.dir / "data"
        self.data_dir.mkdir()
        self.config_path = self.dir / "weir.toml"
        self.config_path.write_text(
            f'[broker]\ndata_dir = "{self.data_dir}"\n' + config_body
        )
        self.log_path = self.dir / "weir.log"
        self.stomp_port = free_port()
        self.amqp_port = free_port()
        # The management HTTP listener (API, health, /metrics) on a port of its own.
        self.http_port = free_port()
        self.log_level = log_level or os.environ.get("WEIR_LOG", "info")
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    @property
    def host(self) -> str:
        return "127.0.0.1"

    def start(self, timeout: float = 30.0) -> "Broker":
        binary = weir_bin()
        if not binary.is_file() or not os.access(binary, os.X_OK):
            raise BrokerError(
                f"broker binary {binary} is missing or not executable "
                "(build with `cargo build --release` or set WEIR_BIN)"
            )
        self.starts += 1
        log = open(self.log_path, "ab")
        log.write(f"\n===== start #{self.starts} =====\n".encode())
        log.flush()
        self.proc = subprocess.Popen(
            [
                str(binary),
                "serve",
                "--config", str(self.config_path),
                "--data-dir", str(self.data_dir),
                "--stomp", f"127.0.0.1:{self.stomp_port}",
                "--amqp", f"127.0.0.1:{self.amqp_port}",
                "--http", f"127.0.0.1:{self.http_port}",
                "--log", self.log_level,
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        self._wait_for_port(self.stomp_port, timeout)
        return self

    def _wait_for_port(self, port: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise BrokerError(
                    f"broker exited with code {self.proc.returncode} before listening "
                    f"on {port}; log:\n{self.log_tail()}"
                )
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.05)
        raise BrokerError(f"broker not listening on {port} after {timeout}s; log:\n{self.log_tail()}")

    def kill9(self) -> None:
        """Simulate a crash: SIGKILL, no chance to flush anything."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def restart_after_crash(self) -> "Broker":
        self.kill9()
        # Ports are reused; a killed listener's socket is gone at once on Linux
        # (SO_REUSEADDR on the server side is the broker's business).
        return self.start()

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def cleanup(self) -> None:
        self.stop()
        self._tmp.cleanup()
