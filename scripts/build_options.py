#!/usr/bin/env python3
"""scripts/build_options.py BUILD_DIR -Dname=value...: exits 0 when the meson
build in BUILD_DIR already has every option as given, 1 otherwise (an option
it does not know, another value, an argument that is not -Dname=value, or no
readable introspection data). scripts/setup.sh reconfigures on 1."""
import json
import os
import sys


def same(stored, wanted):
    if isinstance(stored, bool):
        return wanted.lower() == ("true" if stored else "false")
    if isinstance(stored, list):
        return wanted in (",".join(map(str, stored)), " ".join(map(str, stored)))
    return str(stored) == wanted


def main():
    build, args = sys.argv[1], sys.argv[2:]
    try:
        with open(os.path.join(build, "meson-info", "intro-buildoptions.json")) as f:
            stored = {o["name"]: o["value"] for o in json.load(f)}
    except (OSError, ValueError, KeyError):
        return 1
    wanted = {}
    for a in args:
        if not a.startswith("-D") or "=" not in a:
            return 1
        name, value = a[2:].split("=", 1)
        wanted[name] = value  # the last one wins, as in meson
    return 0 if all(n in stored and same(stored[n], v) for n, v in wanted.items()) else 1


if __name__ == "__main__":
    sys.exit(main())
