"""AMQP SASL against the default config (users defined, anonymous not allowed)."""

import pytest
from proton import ConnectionException, Message

from amqp import QUEUE, connect
from clients import unique


def test_plain_with_the_right_password(broker):
    c = connect(broker)
    try:
        address = unique("auth.q")
        c.create_sender(address, options=QUEUE).send(Message(body="ok"))
        r = c.create_receiver(address, options=QUEUE)
        assert r.receive().body == "ok"
        r.accept()
    finally:
        c.close()


def test_wrong_password_fails_with_an_auth_outcome(broker):
    with pytest.raises(ConnectionException) as err:
        connect(broker, password="wrong")
    # The SASL outcome `auth` shows up in proton as unauthorized-access, not a bare EOF.
    assert "unauthorized" in str(err.value) or "auth" in str(err.value).lower(), str(err.value)


def test_unknown_user_fails(broker):
    with pytest.raises(ConnectionException):
        connect(broker, user="nobody", password="x")


def test_anonymous_refused_when_users_are_configured(broker):
    with pytest.raises(ConnectionException):
        connect(broker, mechs="ANONYMOUS")
