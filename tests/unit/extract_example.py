#!/usr/bin/env python3
"""Writes one of the README's examples (the ```cpp block after the marker,
<!-- api-example --> unless a third argument names another) to a .cpp
file, so the tests compile and run it."""
import re
import sys

readme, out = sys.argv[1], sys.argv[2]
name = sys.argv[3] if len(sys.argv) > 3 else "api-example"
text = open(readme, encoding="utf-8").read()
marker = text.find("<!-- " + name + " -->")
if marker < 0:
    sys.exit("README.md has no <!-- " + name + " --> marker")
m = re.search(r"```cpp\n(.*?)```", text[marker:], re.S)
if not m:
    sys.exit("no ```cpp block after the <!-- " + name + " --> marker")
with open(out, "w", encoding="utf-8") as f:
    f.write("// Generated from README.md by tests/unit/extract_example.py: edit the README, not this file.\n")
    f.write(m.group(1))
