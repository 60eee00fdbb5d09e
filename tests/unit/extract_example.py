#!/usr/bin/env python3
"""extract_example.py DOC OUT [MARKER]

Writes one of the documentation's examples (the ```cpp block after the
marker <!-- MARKER -->, api-example unless a third argument names another)
to a .cpp file, so the tests compile and run it. The blocks live in
README.md (hello-example), docs/cpp-api.md (api-example) and docs/pools.md
(pool-example); tests/meson.build says which file each test reads."""
import os
import re
import sys

doc, out = sys.argv[1], sys.argv[2]
name = sys.argv[3] if len(sys.argv) > 3 else "api-example"
shown = os.path.basename(os.path.dirname(doc)) + "/" + os.path.basename(doc) \
    if os.path.basename(os.path.dirname(doc)) == "docs" else os.path.basename(doc)
text = open(doc, encoding="utf-8").read()
marker = text.find("<!-- " + name + " -->")
if marker < 0:
    sys.exit(shown + " has no <!-- " + name + " --> marker")
m = re.search(r"```cpp\n(.*?)```", text[marker:], re.S)
if not m:
    sys.exit("no ```cpp block after the <!-- " + name + " --> marker in " + shown)
with open(out, "w", encoding="utf-8") as f:
    f.write("// Generated from " + shown + " by tests/unit/extract_example.py: edit " + shown + ", not this file.\n")
    f.write(m.group(1))
