"""A Python producer process for the tests.

    pyproducer.py NAME ID COUNT [--size B] [--text] [--no-wait]

Attaches to box NAME, prints "ready <entry>", waits for a line on stdin
(unless --no-wait), posts COUNT messages in tests/support/helper.cpp's format (id,
seq, pattern; --size bytes) or, with --text, "ID:SEQ", posting each again
while the box is full, and prints "done stored=N full=N".
"""
import sys
import time

import shmbox
from conftest import pattern_message


def main(argv):
    name, pid_id, count = argv[1], int(argv[2]), int(argv[3])
    size = int(argv[argv.index("--size") + 1]) if "--size" in argv else 64
    text = "--text" in argv
    with shmbox.Producer.attach(name) as p:
        print(f"ready {p.entry}", flush=True)
        if "--no-wait" not in argv:
            sys.stdin.readline()
        full = 0
        for seq in range(count):
            msg = f"{pid_id}:{seq}".encode() if text else pattern_message(pid_id, seq, size)
            while True:
                st = p.post(msg)
                if st.stored:
                    break
                assert st == shmbox.PostStatus.FULL, st
                full += 1
                time.sleep(0.0002)
        print(f"done stored={count} full={full}", flush=True)


if __name__ == "__main__":
    main(sys.argv)
