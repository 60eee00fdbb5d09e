#!/usr/bin/env python3
"""extract_example.py DOC OUT [MARKER [LANG]]

Writes one of the documentation's examples (the ```LANG block after the
marker <!-- MARKER -->: api-example and cpp unless told) to a file, so the
tests compile and run it. The blocks live in README.md (hello-example, the
C++ producer and owner; hello-python; install-cmake and install-meson, the
Install section's lines), docs/cpp-api.md (api-example), docs/pools.md
(pool-example) and docs/c-api.md (c-hello-example, in C); tests/meson.build
and tests/package/package_test.sh say which file each test reads."""
import os
import re
import sys

doc, out = sys.argv[1], sys.argv[2]
name = sys.argv[3] if len(sys.argv) > 3 else "api-example"
lang = sys.argv[4] if len(sys.argv) > 4 else "cpp"
shown = os.path.basename(os.path.dirname(doc)) + "/" + os.path.basename(doc) \
    if os.path.basename(os.path.dirname(doc)) == "docs" else os.path.basename(doc)
text = open(doc, encoding="utf-8").read()
marker = text.find("<!-- " + name + " -->")
if marker < 0:
    sys.exit(shown + " has no <!-- " + name + " --> marker")
m = re.match(r"\s*```" + re.escape(lang) + r"\n(.*?)```", text[marker + len("<!-- " + name + " -->"):], re.S)
if not m:
    sys.exit("no ```" + lang + " block right after the <!-- " + name + " --> marker in " + shown)
note = "Generated from " + shown + " by tests/unit/extract_example.py: edit " + shown + ", not this file."
with open(out, "w", encoding="utf-8") as f:
    f.write({"cpp": "// " + note, "c": "/* " + note + " */"}.get(lang, "# " + note) + "\n")
    f.write(m.group(1))
