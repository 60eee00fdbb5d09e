#!/usr/bin/env python3
"""examples/python/producer.py - a Python producer to start from.

    python3 producer.py BOX [MESSAGE ...]     posts each argument as one message
    some-command | python3 producer.py BOX    posts each line of stdin (without its newline)

Options:
    --lane L      post into lane L (default: the box's default lane)
    --retry S     keep posting a message the full box refused, for up to S seconds
    --create      create the box first if it does not exist (capacity 1024, slot 256 bytes)

Prints what happened to the messages ("stored=5 full=0 dropped=0 ..."), and
exits 0 when every message was stored, 3 when some were not (as `shmbox post`
does), 1 on an error (the library's message on stderr).

Needs the shmbox package (pip install . at the top of the tree; or
PYTHONPATH=build/python after scripts/setup.sh).
"""
import argparse
import collections
import sys
import time

import shmbox


def main():
    ap = argparse.ArgumentParser(description="Post messages into a shmbox box.")
    ap.add_argument("box")
    ap.add_argument("messages", nargs="*")
    ap.add_argument("--lane", type=int, default=None)
    ap.add_argument("--retry", type=float, default=0.0, metavar="SECONDS")
    ap.add_argument("--create", action="store_true")
    args = ap.parse_intermixed_args()

    if args.create:
        try:
            shmbox.Box.create(args.box, capacity=1024, slot_size=256).close()
        except shmbox.Exists:
            pass

    messages = args.messages or (line.rstrip("\n") for line in sys.stdin)
    tally = collections.Counter()
    try:
        with shmbox.Producer.attach(args.box) as producer:
            for text in messages:
                deadline = time.monotonic() + args.retry
                while True:
                    try:
                        status = producer.post(text.encode(), lane=args.lane)
                    except shmbox.TooLarge as e:  # counted by the box as too_large
                        print(f"producer: {e}", file=sys.stderr)
                        status = shmbox.PostStatus.TOO_LARGE
                    # 'full' (reject) and 'timeout' (block) may succeed later; drops are final.
                    if status in ("full", "timeout") and time.monotonic() < deadline:
                        time.sleep(0.001)
                        continue
                    break
                tally[status] += 1
    except shmbox.Error as e:  # no such box, no permission, too many producers, ...
        print(f"producer: {e}", file=sys.stderr)
        return 1
    print(" ".join(f"{s}={tally[s]}" for s in shmbox.PostStatus if s != "error"))
    not_stored = sum(n for s, n in tally.items() if not shmbox.PostStatus(s).stored)
    return 3 if not_stored else 0


if __name__ == "__main__":
    sys.exit(main())
