"""Fixtures: one broker process per test module, clients that clean up after themselves.

A module that needs a different broker config overrides the `broker_config` fixture.
"""

import pytest

from broker import DEFAULT_CONFIG, Broker
from clients import Client, RawStomp, unique


@pytest.fixture(scope="module")
def broker_config():
    return DEFAULT_CONFIG


@pytest.fixture(scope="module")
def broker(broker_config):
    b = Broker(broker_config)
    try:
        b.start()
        yield b
    finally:
        b.cleanup()


@pytest.fixture(autouse=True)
def _broker_log_on_failure(request):
    """Show the broker's log tail under a failed test: the broker's side of the story."""
    yield
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed and "broker" in request.fixturenames:
        b = request.getfixturevalue("broker")
        alive = "alive" if b.alive() else f"exited {b.proc.returncode if b.proc else None}"
        print(f"\n--- broker ({alive}) log tail ---\n{b.log_tail()}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)


@pytest.fixture
def client_factory(broker):
    """Open stomp.py clients to the module's broker; all are closed after the test."""
    opened = []

    def make(**kwargs):
        c = Client(broker.stomp_port, **kwargs)
        opened.append(c)
        return c

    yield make
    for c in opened:
        c.close()


@pytest.fixture
def client(client_factory):
    return client_factory()


@pytest.fixture
def zaqar(broker):
    """python-zaqarclient on the module's broker (see zaqar_support.py); the module's
    `broker_config` must let anonymous clients in."""
    import zaqar_support  # only Zaqar modules need the client installed

    return zaqar_support.client(broker)


@pytest.fixture
def raw_factory(broker):
    opened = []

    def make():
        r = RawStomp(broker.stomp_port)
        opened.append(r)
        return r

    yield make
    for r in opened:
        r.close()


@pytest.fixture
def queue_name():
    return f"/queue/{unique('q')}"


@pytest.fixture
def topic_name():
    return f"/topic/{unique('t')}"


@pytest.fixture
def track_connections():
    """Registers AMQP connections to close after the test, whichever helper opened them."""
    opened = []

    def track(connection):
        opened.append(connection)
        return connection

    yield track
    for c in opened:
        try:
            c.close()
        except Exception:  # a test may have had the broker close it already
            pass
