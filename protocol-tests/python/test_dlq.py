"""NACKed too often: the message leaves its queue for `DLQ`.

Own module, so its broker's DLQ holds only what these tests put there.
"""

from broker import DECLARED_MAX_DELIVERY_ATTEMPTS, DECLARED_QUEUE
from clients import unique

DEFAULT_MAX_DELIVERY_ATTEMPTS = 10


def _nack_until_gone(c, body, limit):
    """NACK every delivery of `body`; return how many deliveries there were."""
    deliveries = 0
    while deliveries <= limit:
        msgs = c.drain(quiet=1.0)
        if not msgs:
            return deliveries
        for m in msgs:
            assert m.body == body, m.body
            if deliveries > 0:
                assert m.headers.get("redelivered") == "true", m.headers
            deliveries += 1
            c.nack(m)
    return deliveries


def _dlq_receives(client_factory, body):
    dlq = client_factory()
    dlq.subscribe("/queue/DLQ", ack="client-individual")
    for m in dlq.drain():
        dlq.ack(m)
        if m.body == body:
            return m
    raise AssertionError(f"{body!r} not found on /queue/DLQ")


def test_declared_queue_moves_to_dlq_after_max_attempts(client_factory):
    dest = f"/queue/{DECLARED_QUEUE}"
    body = unique("poison")
    client_factory().send(dest, body)
    c = client_factory()
    c.subscribe(dest, ack="client-individual")
    deliveries = _nack_until_gone(c, body, DECLARED_MAX_DELIVERY_ATTEMPTS + 2)
    assert deliveries == DECLARED_MAX_DELIVERY_ATTEMPTS, (
        f"max_delivery_attempts={DECLARED_MAX_DELIVERY_ATTEMPTS} but delivered {deliveries} times"
    )
    _dlq_receives(client_factory, body)


def test_default_max_delivery_attempts_is_ten(client_factory, queue_name):
    body = unique("poison")
    client_factory().send(queue_name, body)
    c = client_factory()
    c.subscribe(queue_name, ack="client-individual")
    deliveries = _nack_until_gone(c, body, DEFAULT_MAX_DELIVERY_ATTEMPTS + 2)
    assert deliveries == DEFAULT_MAX_DELIVERY_ATTEMPTS
    _dlq_receives(client_factory, body)


def test_acked_after_a_nack_does_not_reach_dlq(client_factory):
    dest = f"/queue/{DECLARED_QUEUE}"
    body = unique("ok-on-retry")
    client_factory().send(dest, body)
    c = client_factory()
    c.subscribe(dest, ack="client-individual")
    c.nack(c.get())
    retry = c.get()
    assert retry.body == body
    c.ack(retry)
    dlq = client_factory()
    dlq.subscribe("/queue/DLQ")
    assert body not in [m.body for m in dlq.drain()]
