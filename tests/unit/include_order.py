#!/usr/bin/env python3
"""lib/'s includes run one way: from higher layers to lower ones.

    include_order.py LIB_DIR        checks every #include "..." under LIB_DIR
    include_order.py --self-test    checks the checker on the samples below

lib/ has one folder per concern (lib/README.md is the map). LAYERS below is
the order, lowest first: a file may include a header of its own folder or of
a folder earlier in the table, never of a later one. Public headers
("shmbox/...") are below everything. Fails (exit 1) naming file and line for
every include that goes up, names a folder the table does not know, or
names a lib/ header without its folder (so the folder of every include is
visible where it is written).
"""

import pathlib
import re
import sys
import tempfile

# Lowest first. One line per folder: what it is (lib/README.md says more).
LAYERS = [
    "base",       # errors, fault points, the access friend, futex, /dev/shm files, process identity
    "segment",    # the box file: layout, create/open/validate, the OFD byte locks on it
    "ring",       # the slot protocol and the waits it makes (wake.hpp)
    "ownership",  # lease, hand-over, heirs' take-over
    "wake",       # the futex waits and wakes, the owner's sleep, eventfd, notify hub
    "ordering",   # priority store, stash, custom buffers, resize
    "handles",    # Box, Producer, Owner, Heir, owner modes
    "request",    # request/reply: Requester, Owner::reply
    "inspect",    # verify, info, peek, gc
    "pool",       # the pool segment and table, take/give back, the supervisor
    "c",          # the C layer
]

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def check(lib):
    """Every problem as 'file:line: message', in file order."""
    lib = pathlib.Path(lib)
    rank = {name: i for i, name in enumerate(LAYERS)}
    problems = []
    for path in sorted(lib.rglob("*")):
        if path.suffix not in (".hpp", ".cpp", ".h", ".c") or not path.is_file():
            continue
        rel = path.relative_to(lib)
        where = f"lib/{rel.as_posix()}"
        if len(rel.parts) != 2:
            problems.append(f"{where}:1: a lib/ source outside the layer folders ({', '.join(LAYERS)})")
            continue
        own = rel.parts[0]
        if own not in rank:
            problems.append(f"{where}:1: folder '{own}' is not in the layer table of tests/unit/include_order.py")
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            target = m.group(1)
            if target.startswith("shmbox/"):
                continue  # the public headers: below every layer
            parts = target.split("/")
            if len(parts) != 2:
                problems.append(f"{where}:{n}: #include \"{target}\": name lib/ headers with their folder (\"<folder>/{parts[-1]}\")")
                continue
            if parts[0] not in rank:
                problems.append(f"{where}:{n}: #include \"{target}\": folder '{parts[0]}' is not in the layer table")
                continue
            if not (lib / target).is_file():
                problems.append(f"{where}:{n}: #include \"{target}\": no such header under lib/")
                continue
            if rank[parts[0]] > rank[own]:
                problems.append(f"{where}:{n}: #include \"{target}\" goes up: {own} (layer {rank[own]}) "
                                f"may include only {', '.join(LAYERS[: rank[own] + 1])}")
    return problems


def self_test():
    """The checker finds an upward include, an unknown folder, a bare name,
    and passes a good tree."""
    with tempfile.TemporaryDirectory() as d:
        lib = pathlib.Path(d)
        (lib / "base").mkdir()
        (lib / "ring").mkdir()
        (lib / "base" / "a.hpp").write_text('#include "shmbox/types.hpp"\n')
        (lib / "ring" / "b.hpp").write_text('#include "base/a.hpp"\n#include "ring/b.hpp"\n')
        assert check(lib) == [], check(lib)
        (lib / "base" / "up.cpp").write_text('// x\n#include "ring/b.hpp"\n')
        got = check(lib)
        assert len(got) == 1 and got[0].startswith("lib/base/up.cpp:2: ") and "goes up" in got[0], got
        (lib / "base" / "up.cpp").unlink()
        (lib / "ring" / "bare.cpp").write_text('#include "a.hpp"\n')
        got = check(lib)
        assert len(got) == 1 and "with their folder" in got[0], got
        (lib / "ring" / "bare.cpp").unlink()
        (lib / "attic").mkdir()
        (lib / "attic" / "c.cpp").write_text("\n")
        got = check(lib)
        assert len(got) == 1 and "not in the layer table" in got[0], got
    print("include_order.py: self-test ok")


def main(argv):
    if len(argv) == 2 and argv[1] == "--self-test":
        self_test()
        return 0
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    self_test()
    problems = check(argv[1])
    for p in problems:
        print(p)
    if problems:
        print(f"include_order.py: {len(problems)} include(s) break the layer order (the table: tests/unit/include_order.py)")
        return 1
    print(f"include_order.py: every include under {argv[1]} goes down the layers")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
