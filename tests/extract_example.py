#!/usr/bin/env python3
"""Writes the README's API example (the ```cpp block after the marker
<!-- api-example -->) to a .cpp file, so the tests compile and run it."""
import re
import sys

readme, out = sys.argv[1], sys.argv[2]
text = open(readme, encoding="utf-8").read()
marker = text.find("<!-- api-example -->")
if marker < 0:
    sys.exit("README.md has no <!-- api-example --> marker")
m = re.search(r"```cpp\n(.*?)```", text[marker:], re.S)
if not m:
    sys.exit("no ```cpp block after the <!-- api-example --> marker")
with open(out, "w", encoding="utf-8") as f:
    f.write("// Generated from README.md by tests/extract_example.py: edit the README, not this file.\n")
    f.write(m.group(1))
