"""Zaqar's reserved queue metadata end to end: `_default_message_ttl`,
`_max_messages_post_size`, `_max_claim_count` with `_dead_letter_queue` and
`_dead_letter_queue_messages_ttl`, and the refusal of unknown `_` keys.

Driven with python-zaqarclient 4.7.0 unchanged (noauth backend, project `ptest`, so a
queue NAME is the Weir queue `ptest/NAME`), raw HTTP for the error bodies and exact
sizes, and stomp.py where a message must be seen from the other side.

Zaqar's shortest message ttl is 60 s and Weir enforces the same range (60 s to 14
days), with no test-only clock. So the default ttl is shown by what the broker stored
(the ttl Zaqar lists, and the absolute `expires` a STOMP consumer gets, which is what
the core expires the message by), not by waiting a minute for it to go.
"""

import json
import urllib.request
import uuid

import pytest
from zaqarclient.transport import errors as zaqar_errors

from clients import unique
from zaqar_support import ANONYMOUS_CONFIG, PROJECT, shown


@pytest.fixture(scope="module")
def broker_config():
    return ANONYMOUS_CONFIG


def raw(broker, method, path, body=None, content_type="application/json"):
    """Raw HTTP to the default project: status and parsed JSON (or None).
    `body` is sent as given when it is bytes, else as its JSON."""
    if body is not None and not isinstance(body, bytes):
        body = json.dumps(body).encode()
    req = urllib.request.Request(
        f"http://127.0.0.1:{broker.http_port}{path}", data=body, method=method)
    req.add_header("Client-ID", str(uuid.uuid4()))
    req.add_header("Content-Type", content_type)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            text = resp.read()
            return resp.status, json.loads(text) if text else None
    except urllib.error.HTTPError as e:
        text = e.read()
        return e.code, json.loads(text) if text else None


def listed(broker, name, **params):
    """Bodies and ttls of the default-project queue `name`, everything included."""
    query = "&".join(f"{k}={v}" for k, v in {"echo": "true", "include_claimed": "true",
                                               **params}.items())
    status, doc = raw(broker, "GET", f"/v2/queues/{name}/messages?{query}")
    assert status == 200, doc
    return [(m["body"], m["ttl"]) for m in doc["messages"]]


# --- the reserved keys as a GET shows them -------------------------------------------

def test_a_queue_shows_the_reserved_keys_it_leaves_unset_at_their_defaults(zaqar, broker):
    name = unique("zdef")
    q = zaqar.queue(name, force_create=True)
    assert q.metadata() == shown()
    # The client replaces what the GET showed and removes what it does not keep.
    q.metadata(new_meta={"colour": "blue", "_default_message_ttl": 120})
    assert q.metadata(force_reload=True) == shown(colour="blue", _default_message_ttl=120)
    q.metadata(new_meta={"colour": "red"})
    assert q.metadata(force_reload=True) == shown(colour="red")
    q.post([{"body": "x"}])
    assert [m.ttl for m in q.messages(echo=True)] == [3600], "the default shown holds"

    req = urllib.request.Request(
        f"http://127.0.0.1:{broker.http_port}/v2/queues?detailed=true&limit=1000")
    req.add_header("Client-ID", str(uuid.uuid4()))
    req.add_header("X-Project-Id", PROJECT)
    with urllib.request.urlopen(req, timeout=10) as resp:
        listed = {x["name"]: x["metadata"] for x in json.loads(resp.read())["queues"]}
    assert listed[name] == shown(colour="red"), "a detailed listing shows them too"

    # A value Weir cannot honour is refused, naming its key.
    with pytest.raises(zaqar_errors.MalformedRequest) as refused:
        q.metadata(new_meta={"_enable_encrypt_messages": True})
    assert "_enable_encrypt_messages" in str(refused.value)


# --- _default_message_ttl ------------------------------------------------------------

def test_default_message_ttl_is_the_ttl_of_messages_posted_without_one(zaqar, client_factory):
    name = unique("zttl")
    q = zaqar.queue(name, force_create=True)
    q.metadata(new_meta={"_default_message_ttl": 60})
    assert q.metadata(force_reload=True) == shown(_default_message_ttl=60)
    q.post([{"body": "default"}, {"body": "own", "ttl": 300}])
    assert {m.body: m.ttl for m in q.messages(echo=True)} == {"default": 60, "own": 300}

    # The stored expiry, as a STOMP consumer sees it: 60 s after the post.
    stomp = client_factory()
    stomp.subscribe(f"/queue/{PROJECT}/{name}", sub_id="s", ack="client-individual")
    frames = {json.loads(f.body): f for f in stomp.get_n(2)}
    for body, ttl in [("default", 60), ("own", 300)]:
        headers = frames[body].headers
        assert int(headers["expires"]) - int(headers["timestamp"]) == ttl * 1000, body


def test_without_default_message_ttl_a_message_lives_zaqars_default(zaqar):
    q = zaqar.queue(unique("zttl"), force_create=True)
    q.post([{"body": "plain"}])
    assert [m.ttl for m in q.messages(echo=True)] == [3600]


def test_default_message_ttl_outside_zaqars_range_is_refused(broker):
    for bad in [59, 1_209_601, "60", -1]:
        name = unique("zttl")
        status, doc = raw(broker, "PUT", f"/v2/queues/{name}", {"_default_message_ttl": bad})
        assert status == 400, bad
        assert doc["title"] == "Invalid API request"
        assert "_default_message_ttl" in doc["description"]
        assert raw(broker, "GET", f"/v2/queues/{name}")[0] == 404, "not created"
    name = unique("zttl")
    assert raw(broker, "PUT", f"/v2/queues/{name}", {"_default_message_ttl": 1_209_600})[0] == 201
    assert raw(broker, "POST", f"/v2/queues/{name}/messages",
               {"messages": [{"body": 1}]})[0] == 201
    assert listed(broker, name) == [(1, 1_209_600)]


# --- _max_messages_post_size ---------------------------------------------------------

def post_of_size(size, count=1):
    """A post body of exactly `size` bytes holding `count` messages."""
    def body(pad):
        return json.dumps({"messages": [{"body": "x" * pad, "ttl": 60}] +
                           [{"body": "y", "ttl": 60}] * (count - 1)}).encode()
    pad = size - len(body(0))
    assert pad >= 0
    out = body(pad)
    assert len(out) == size
    return out


def test_post_over_max_messages_post_size_is_refused_and_stores_nothing(broker):
    name = unique("zsize")
    assert raw(broker, "PUT", f"/v2/queues/{name}", {"_max_messages_post_size": 256})[0] == 201
    status, doc = raw(broker, "POST", f"/v2/queues/{name}/messages", post_of_size(257, count=3))
    assert status == 400
    assert doc["title"] == "Invalid API request"
    assert doc["description"].startswith("Message collection size is too large.")
    assert "256" in doc["description"]
    assert listed(broker, name) == []
    status, doc = raw(broker, "POST", f"/v2/queues/{name}/messages", post_of_size(256, count=3))
    assert status == 201, doc
    assert len(doc["resources"]) == 3
    bodies = [b for b, _ in listed(broker, name)]
    assert len(bodies) == 3 and set(bodies[0]) == {"x"} and bodies[1:] == ["y", "y"]


def test_max_messages_post_size_reaches_the_client(zaqar):
    q = zaqar.queue(unique("zsize"), force_create=True)
    q.metadata(new_meta={"_max_messages_post_size": 100})
    with pytest.raises(zaqar_errors.MalformedRequest) as refused:
        q.post([{"body": "z" * 200, "ttl": 60}])
    assert "Max size 100" in str(refused.value)
    assert list(q.messages(echo=True)) == []
    q.post([{"body": "small", "ttl": 60}])
    assert [m.body for m in q.messages(echo=True)] == ["small"]


def test_max_messages_post_size_outside_zaqars_range_is_refused(broker):
    for bad in [0, 262_145, "100"]:
        name = unique("zsize")
        status, doc = raw(broker, "PUT", f"/v2/queues/{name}", {"_max_messages_post_size": bad})
        assert status == 400, bad
        assert "_max_messages_post_size" in doc["description"]


# --- _max_claim_count, _dead_letter_queue, _dead_letter_queue_messages_ttl -------------

def test_a_message_claimed_more_than_max_claim_count_moves_to_the_dead_letter_queue(
        zaqar, client_factory):
    name, dlq_name = unique("zsrc"), unique("zdlq")
    q = zaqar.queue(name, force_create=True)
    q.metadata(new_meta={"_max_claim_count": 2, "_dead_letter_queue": dlq_name,
                         "_dead_letter_queue_messages_ttl": 120})
    q.post([{"body": "poison", "ttl": 300}, {"body": "fine", "ttl": 300}])

    # Claimed twice (the count allows it), released each time.
    for n in [1, 2]:
        claim = q.claim(ttl=60, grace=60, limit=1)
        got = list(claim)
        assert [(m.body, m.claim_count) for m in got] == [("poison", n)]
        claim.delete()
    # The third claim would exceed it: the message moves, the next one is claimed.
    claim = q.claim(ttl=60, grace=60, limit=2)
    assert [(m.body, m.claim_count) for m in claim] == [("fine", 1)]
    claim.delete()
    assert [m.body for m in q.messages(echo=True, include_claimed=True)] == ["fine"]
    assert q.stats["messages"]["total"] == 1

    dlq = zaqar.queue(dlq_name)
    moved = list(dlq.messages(echo=True))
    assert [(m.body, m.ttl) for m in moved] == [("poison", 120)]

    stomp = client_factory()
    stomp.subscribe(f"/queue/{PROJECT}/{dlq_name}", sub_id="d", ack="client-individual")
    frame = stomp.get()
    assert json.loads(frame.body) == "poison"
    assert frame.headers["content-type"].startswith("application/json")
    assert int(frame.headers["expires"]) - int(frame.headers["timestamp"]) == 120_000
    stomp.ack(frame)
    stomp.assert_no_message()
    assert list(dlq.messages(echo=True)) == []
    assert [m.body for m in q.messages(echo=True)] == ["fine"], "the source kept the rest"


def test_a_claim_of_only_dead_letters_is_no_claim(zaqar):
    name, dlq_name = unique("zsrc"), unique("zdlq")
    q = zaqar.queue(name, force_create=True)
    q.metadata(new_meta={"_max_claim_count": 1, "_dead_letter_queue": dlq_name})
    q.post([{"body": "once", "ttl": 300}])
    claim = q.claim(ttl=60, limit=5)
    assert [m.body for m in claim] == ["once"]
    claim.delete()
    again = q.claim(ttl=60, limit=5)
    assert again.id is None and list(again) == [], "204: nothing left to claim"
    assert list(q.messages(echo=True, include_claimed=True)) == []
    moved = list(zaqar.queue(dlq_name).messages(echo=True))
    assert [m.body for m in moved] == ["once"]
    # Without _dead_letter_queue_messages_ttl the message keeps its own ttl there.
    assert moved[0].ttl == 300


def test_a_dead_letter_is_not_held_by_the_dead_letter_queues_default_delay(
        zaqar, client_factory):
    name, dlq_name = unique("zsrc"), unique("zdlq")
    dlq = zaqar.queue(dlq_name, force_create=True)
    dlq.metadata(new_meta={"_default_message_delay": 600})
    q = zaqar.queue(name, force_create=True)
    q.metadata(new_meta={"_max_claim_count": 1, "_dead_letter_queue": dlq_name})
    q.post([{"body": "moved", "ttl": 300}])
    q.claim(ttl=60, limit=1).delete()
    assert q.claim(ttl=60, limit=1).id is None
    assert [m.body for m in dlq.messages(echo=True)] == ["moved"], "due at once"
    stomp = client_factory()
    stomp.subscribe(f"/queue/{PROJECT}/{dlq_name}", sub_id="d", ack="client-individual")
    assert json.loads(stomp.get().body) == "moved"


def test_max_claim_count_without_a_dead_letter_queue_changes_nothing(zaqar):
    q = zaqar.queue(unique("zsrc"), force_create=True)
    q.metadata(new_meta={"_max_claim_count": 1})
    q.post([{"body": "kept", "ttl": 300}])
    for n in [1, 2, 3]:
        claim = q.claim(ttl=60, limit=1)
        assert [(m.body, m.claim_count) for m in claim] == [("kept", n)]
        claim.delete()
    assert [m.body for m in q.messages(echo=True)] == ["kept"]


def test_dead_letter_metadata_outside_zaqars_range_is_refused(broker):
    for bad in [{"_max_claim_count": 0}, {"_max_claim_count": "2"},
                {"_dead_letter_queue": 5}, {"_dead_letter_queue": "no/slash"},
                {"_dead_letter_queue_messages_ttl": 59}]:
        name = unique("zdl")
        status, doc = raw(broker, "PUT", f"/v2/queues/{name}", bad)
        assert status == 400, bad
        assert doc["title"] == "Invalid API request"
        assert next(iter(bad)) in doc["description"], bad


# --- unknown reserved keys -------------------------------------------------------------

def test_unknown_reserved_metadata_keys_are_refused(broker):
    name = unique("zkey")
    status, doc = raw(broker, "PUT", f"/v2/queues/{name}", {"_flavour": "x", "colour": "blue"})
    assert status == 400
    assert doc["title"] == "Invalid API request"
    assert "'_flavour'" in doc["description"]
    assert raw(broker, "GET", f"/v2/queues/{name}")[0] == 404, "not created"

    assert raw(broker, "PUT", f"/v2/queues/{name}", {"colour": "blue", "_max_claim_count": 3})[0] == 201
    patch = [{"op": "add", "path": "/metadata/_colour", "value": "red"}]
    status, doc = raw(broker, "PATCH", f"/v2/queues/{name}", patch,
                      content_type="application/openstack-messaging-v2.0-json-patch")
    assert status == 400
    assert "'_colour'" in doc["description"]
    assert raw(broker, "GET", f"/v2/queues/{name}") == (
        200, shown(colour="blue", _max_claim_count=3)), "unchanged"

    # Keys without `_` are the user's, whatever they hold.
    patch = [{"op": "add", "path": "/metadata/colour_", "value": {"any": ["thing"]}}]
    status, doc = raw(broker, "PATCH", f"/v2/queues/{name}", patch,
                      content_type="application/openstack-messaging-v2.0-json-patch")
    assert status == 200
    assert doc == shown(colour="blue", _max_claim_count=3, colour_={"any": ["thing"]})
