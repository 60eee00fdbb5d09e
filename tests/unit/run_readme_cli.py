#!/usr/bin/env python3
"""run_readme_cli.py CLI README

Runs README.md's "CLI in five lines" (the ```sh block after <!-- cli-example -->)
line by line, with CLI for `shmbox` and a box of this run for `jobs`: every
line must exit 0, and the `recv` line must print the messages the `post`
line posted, one per line, in order. Every command has a timeout; the box
is removed however it ends. Named as the tests name their boxes
(t-<SHMBOX_TEST_RUN>-..., scripts/shm_names.sh)."""
import os
import re
import shlex
import subprocess
import sys

cli, readme = sys.argv[1], sys.argv[2]
run = os.environ.get("SHMBOX_TEST_RUN", "")
box = f"t-{run + '-' if run else ''}readme-cli-{os.getpid()}"


def fail(why):
    print("FAIL: " + why, file=sys.stderr)
    sys.exit(1)


text = open(readme, encoding="utf-8").read()
m = re.search(r"<!-- cli-example -->\s*```sh\n(.*?)```", text, re.S)
if not m:
    fail("README.md has no ```sh block after <!-- cli-example -->")
lines = [line.split("#", 1)[0].strip() for line in m.group(1).splitlines()]
lines = [line for line in lines if line]
posted = []
try:
    for line in lines:
        argv = shlex.split(line)
        if argv[0] != "shmbox" or len(argv) < 3 or argv[2] != "jobs":
            fail(f"not a `shmbox COMMAND jobs ...` line: {line}")
        argv = [cli, argv[1], box] + argv[3:]
        r = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        if r.returncode != 0:
            fail(f"`{line}` exited {r.returncode}: {r.stderr.strip()}")
        if argv[1] == "post":
            posted = argv[3:]
        if argv[1] == "recv" and r.stdout.splitlines() != posted:
            fail(f"`{line}` printed {r.stdout.splitlines()}, not what was posted: {posted}")
    if argv[1] != "rm" or os.path.exists("/dev/shm/shmbox." + box):
        fail("the block does not end by removing its box")
    print(f"ok: {len(lines)} lines, box {box}")
except subprocess.TimeoutExpired as e:
    fail(f"{e.cmd} did not exit within {e.timeout} s")
finally:
    if os.path.exists("/dev/shm/shmbox." + box):
        os.unlink("/dev/shm/shmbox." + box)
