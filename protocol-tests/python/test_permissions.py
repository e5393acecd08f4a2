"""Permissions per address pattern as third-party clients see them: a denied send is an
ERROR frame naming the permission and the address for stomp.py, and a refused link with
amqp:unauthorized-access for proton, whose connection stays usable."""

import pytest
from proton import Message
from proton.utils import LinkDetached

from amqp import QUEUE, connect
from broker import PASSWORD, USER
from clients import Client, unique

CONFIG = f"""
[[users]]
name = "{USER}"
password = "{PASSWORD}"
roles = ["ops"]

[[users]]
name = "guest"
password = "guest"
roles = ["dev"]

[security.permissions."#"]
send = ["ops"]
consume = ["ops"]
create_address = ["ops"]
create_durable_queue = ["ops"]

[security.permissions."open.#"]
send = ["ops", "dev"]
consume = ["ops", "dev"]
create_address = ["ops", "dev"]
create_durable_queue = ["ops", "dev"]
"""


@pytest.fixture(scope="module")
def broker_config():
    return CONFIG


def test_stomp_denied_send_is_an_error_naming_permission_and_address(broker):
    secret = unique("secret")
    guest = Client(broker.stomp_port, login="guest", passcode="guest")
    try:
        with pytest.raises(AssertionError) as err:
            guest.send(f"/queue/{secret}", "x")
        assert f"may not send at '{secret}'" in str(err.value), str(err.value)
    finally:
        guest.close()
    allowed = Client(broker.stomp_port, login="guest", passcode="guest")
    try:
        allowed.send(f"/queue/open.{unique('q')}", "x")
    finally:
        allowed.close()


def test_proton_denied_sender_is_refused_and_the_connection_stays(broker):
    c = connect(broker, user="guest", password="guest")
    try:
        with pytest.raises(LinkDetached) as err:
            c.create_sender(unique("secret"), options=QUEUE)
        assert "unauthorized-access" in str(err.value), str(err.value)
        address = unique("open.q")
        c.create_sender(address, options=QUEUE).send(Message(body="ok"))
        r = c.create_receiver(address, options=QUEUE)
        assert r.receive().body == "ok"
        r.accept()
    finally:
        c.close()
