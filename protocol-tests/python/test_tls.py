"""TLS with real clients: stomp.py over TLS with a login, python-qpid-proton over amqps://
with PLAIN and with SASL EXTERNAL (a client certificate), and passwords refused on plain ports
when the broker keeps them to TLS. Certificates are made by openssl for each run (tls_certs.py).

SCRAM over amqps:// is Qpid JMS's test (jms/TlsTest): the python-qpid-proton wheel is built
without Cyrus SASL, so its only mechanisms are ANONYMOUS, PLAIN and EXTERNAL."""

import pytest
from proton import ConnectionException, Message, SSLDomain
from proton.utils import BlockingConnection

from amqp import QUEUE
from broker import DEFAULT_CONFIG, PASSWORD, USER, Broker, free_port
from clients import Client, unique
from tls_certs import make_certs


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory):
    certs = make_certs(tmp_path_factory.mktemp("certs"), client_cn=USER)
    stomp_tls, amqps = free_port(), free_port()
    config = DEFAULT_CONFIG + f"""
[security]
require_tls_for_passwords = true

[tls]
cert_file = "{certs['server.pem']}"
key_file = "{certs['server.key']}"
ca_file = "{certs['ca.pem']}"
client_auth = "optional"

[[acceptors.extra]]
name = "stomp-tls"
bind = "127.0.0.1:{stomp_tls}"
protocols = ["stomp"]
tls = true

[[acceptors.extra]]
name = "amqps"
bind = "127.0.0.1:{amqps}"
protocols = ["amqp"]
tls = true
"""
    b = Broker(config)
    try:
        b.start()
        b._wait_for_port(stomp_tls, 10)
        b._wait_for_port(amqps, 10)
        b.stomp_tls_port, b.amqps_port, b.certs = stomp_tls, amqps, certs
        yield b
    finally:
        b.cleanup()


def test_stomppy_over_tls_with_login(tls_broker):
    port = tls_broker.stomp_tls_port
    c = Client(port, host="localhost", connect=False)
    try:
        c.conn.set_ssl(for_hosts=[("localhost", port)], ca_certs=str(tls_broker.certs["ca.pem"]))
        connected = c.connect(USER, PASSWORD)
        assert connected is not None and connected.cmd == "CONNECTED"
        dest = "/queue/" + unique("tls")
        c.send(dest, "over TLS")
        c.subscribe(dest)
        assert c.get().body == "over TLS"
    finally:
        c.close()


def test_stomp_passcode_refused_on_the_plain_port(tls_broker):
    c = Client(tls_broker.stomp_port, connect=False)
    try:
        with pytest.raises(Exception):
            c.connect(USER, PASSWORD)
        assert c.listener.errors, "an ERROR frame says why"
        assert "TLS" in c.listener.errors[-1].headers.get("message", "")
    finally:
        c.close()


def ssl_domain(broker, client_cert=False) -> SSLDomain:
    domain = SSLDomain(SSLDomain.MODE_CLIENT)
    domain.set_trusted_ca_db(str(broker.certs["ca.pem"]))
    domain.set_peer_authentication(SSLDomain.VERIFY_PEER_NAME)
    if client_cert:
        domain.set_credentials(
            str(broker.certs["client.pem"]), str(broker.certs["client.key"]), None
        )
    return domain


def exchange_one(conn) -> None:
    address = unique("amqps.q")
    conn.create_sender(address, options=QUEUE).send(Message(body="amqps"))
    r = conn.create_receiver(address, options=QUEUE)
    assert r.receive(timeout=5.0).body == "amqps"
    r.accept()


def test_proton_amqps_with_plain(tls_broker):
    conn = BlockingConnection(
        f"amqps://localhost:{tls_broker.amqps_port}",
        timeout=5.0,
        ssl_domain=ssl_domain(tls_broker),
        user=USER,
        password=PASSWORD,
        allowed_mechs="PLAIN",
    )
    try:
        exchange_one(conn)
    finally:
        conn.close()


def test_proton_amqps_with_external_and_a_client_certificate(tls_broker):
    conn = BlockingConnection(
        f"amqps://localhost:{tls_broker.amqps_port}",
        timeout=5.0,
        ssl_domain=ssl_domain(tls_broker, client_cert=True),
        allowed_mechs="EXTERNAL",
    )
    try:
        exchange_one(conn)
    finally:
        conn.close()


def test_proton_plain_refused_on_the_plain_port(tls_broker):
    with pytest.raises(ConnectionException):
        BlockingConnection(
            f"amqp://127.0.0.1:{tls_broker.amqp_port}",
            timeout=5.0,
            user=USER,
            password=PASSWORD,
            allowed_mechs="PLAIN",
            allow_insecure_mechs=True,
        ).close()
