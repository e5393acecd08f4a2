"""With auto-create off, an attach to a missing queue is refused with amqp:not-found."""

import pytest
from proton.utils import LinkDetached, SendException

from amqp_clients import connect, unique
from broker import DEFAULT_CONFIG, DECLARED_QUEUE


@pytest.fixture(scope="module")
def broker_config():
    return "auto_create_queues = false\n" + DEFAULT_CONFIG


def test_receiver_to_missing_queue_not_found(broker):
    c = connect(broker)
    with pytest.raises(LinkDetached) as e:
        c.create_receiver(unique("missing"), credit=1)
    assert "amqp:not-found" in str(e.value)
    c.create_receiver(DECLARED_QUEUE, credit=1).close()
    c.close()


def test_sender_to_missing_queue_not_found(broker):
    c = connect(broker)
    with pytest.raises(LinkDetached) as e:
        c.create_sender(unique("missing"))
    assert "amqp:not-found" in str(e.value)
    c.close()
