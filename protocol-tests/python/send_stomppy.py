"""CLI used by the Node suite: send messages with stomp.py, each confirmed by a RECEIPT.

usage: send_stomppy.py PORT DESTINATION BODY [BODY ...] [--header K=V ...]
"""

import argparse
import sys

from clients import Client


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("port", type=int)
    ap.add_argument("destination")
    ap.add_argument("bodies", nargs="+")
    ap.add_argument("--header", action="append", default=[])
    args = ap.parse_args()
    headers = dict(h.split("=", 1) for h in args.header)
    c = Client(args.port)
    try:
        for body in args.bodies:
            c.send(args.destination, body, headers=headers)
    finally:
        c.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
