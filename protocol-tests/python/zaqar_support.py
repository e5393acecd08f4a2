"""What the Zaqar test modules share: the project python-zaqarclient works in, the
broker config its noauth backend needs, a client, and the reserved metadata a queue
shows for the keys it leaves unset.

python-zaqarclient 4.7.0 runs unchanged with its noauth backend and project `PROJECT`,
so its queue NAME is the Weir queue `PROJECT/NAME` (see the README's Zaqar section).
"""

from zaqarclient.queues.v2 import client as zaqar_client

from broker import DEFAULT_CONFIG

PROJECT = "ptest"

# The noauth backend sends no credentials: the broker lets anonymous clients in (its
# users still log in over STOMP and AMQP). A module overrides `broker_config` with it.
ANONYMOUS_CONFIG = DEFAULT_CONFIG + "\n[security]\nallow_anonymous = true\n"

# As Zaqar's queue resource shows them when unset, at Weir's limits (Zaqar's defaults).
# Zaqar shows the dead-letter keys as None too; Weir leaves them out (see the README).
RESERVED_DEFAULTS = {
    "_max_messages_post_size": 262_144,
    "_default_message_ttl": 3600,
    "_default_message_delay": 0,
    "_enable_encrypt_messages": False,
}


def client(broker):
    conf = {"auth_opts": {"backend": "noauth", "options": {"os_project_id": PROJECT}}}
    return zaqar_client.Client(f"http://127.0.0.1:{broker.http_port}", version=2, conf=conf)


def shown(**metadata):
    """Queue metadata as a GET shows it: `metadata` over the reserved defaults."""
    return {**RESERVED_DEFAULTS, **metadata}
