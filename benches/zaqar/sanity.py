"""Checks a Zaqar v2 server with python-zaqarclient before it is loaded:
create a queue, post, claim, delete with the claim, and claim nothing more.

Usage: sanity.py URL PROJECT QUEUE
"""
import sys
import uuid

from zaqarclient.queues.v2 import client


def main(url, project, name):
    conf = {"auth_opts": {"backend": "noauth", "options": {"os_project_id": project}}}
    zaqar = client.Client(url, version=2, conf=conf)
    zaqar.client_uuid = str(uuid.UUID("5a9a7c1e-0000-4000-8000-0000000000ff"))
    queue = zaqar.queue(name, force_create=True)
    queue.post([{"body": {"n": i}, "ttl": 300} for i in range(3)])
    claim = queue.claim(ttl=60, grace=60, limit=10)
    got = sorted(m.body["n"] for m in claim)
    if got != [0, 1, 2]:
        raise SystemExit(f"claimed {got}, expected [0, 1, 2]")
    for message in claim:
        message.delete()
    left = [m.body for m in queue.claim(ttl=60, grace=60, limit=10)]
    if left:
        raise SystemExit(f"claimed {left} after deleting every message")
    queue.delete()
    print(f"sanity: {url} ok")


if __name__ == "__main__":
    main(*sys.argv[1:4])
