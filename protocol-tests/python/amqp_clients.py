"""python-qpid-proton helpers for the AMQP suites: blocking connections that clean up, and a
small reactor handler for local transactions (the blocking API has none)."""

import uuid

from proton import Message
from proton.handlers import MessagingHandler, TransactionHandler
from proton.reactor import Container
from proton.utils import BlockingConnection

from broker import PASSWORD, USER


def url(broker, user=USER, password=PASSWORD):
    if user is None:
        return f"amqp://127.0.0.1:{broker.amqp_port}"
    return f"amqp://{user}:{password}@127.0.0.1:{broker.amqp_port}"


def connect(broker, user=USER, password=PASSWORD, container_id=None, **kwargs):
    mechs = "PLAIN" if user is not None else "ANONYMOUS"
    container = Container()
    container.container_id = container_id or unique("c")
    return BlockingConnection(
        url(broker, user, password), allowed_mechs=mechs, timeout=10, container=container, **kwargs
    )


def unique(prefix="a"):
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


class TxRun(MessagingHandler, TransactionHandler):
    """Declares a transaction, sends `to_send` to `address` in it (and receives `to_take`
    from `take_from` in it), then commits or rolls back; records the outcome."""

    def __init__(self, broker, address, to_send, commit, take_from=None, to_take=0):
        super().__init__(auto_accept=False, prefetch=0)
        self.broker = broker
        self.address = address
        self.to_send = list(to_send)
        self.commit = commit
        self.take_from = take_from
        self.to_take = to_take
        self.taken = []
        self.discharged = None
        self.error = None

    def on_start(self, event):
        self.conn = event.container.connect(url(self.broker), allowed_mechs="PLAIN")
        self.sender = event.container.create_sender(self.conn, self.address)
        if self.take_from:
            self.receiver = event.container.create_receiver(self.conn, self.take_from)
        event.container.declare_transaction(self.conn, handler=self)

    def on_transaction_declared(self, event):
        self.txn = event.transaction
        for body in self.to_send:
            self.txn.send(self.sender, Message(body=body))
        if self.to_take:
            self.receiver.flow(self.to_take)
        else:
            self.finish()

    def on_message(self, event):
        self.taken.append(event.message.body)
        self.txn.accept(event.delivery)
        if len(self.taken) == self.to_take:
            self.finish()

    def finish(self):
        if self.commit:
            self.txn.commit()
        else:
            self.txn.abort()

    def on_transaction_committed(self, event):
        self.discharged = "committed"
        self.conn.close()

    def on_transaction_aborted(self, event):
        self.discharged = "aborted"
        self.conn.close()

    def on_transaction_declare_failed(self, event):
        self.error = "declare failed"
        self.conn.close()

    def on_transaction_commit_failed(self, event):
        self.error = "commit failed"
        self.conn.close()


def run_tx(broker, address, to_send, commit, take_from=None, to_take=0):
    h = TxRun(broker, address, to_send, commit, take_from, to_take)
    c = Container(h)
    c.container_id = unique("tx")
    c.run()
    assert h.error is None, h.error
    return h
