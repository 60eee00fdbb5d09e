#!/usr/bin/env python3
"""doxygen's INPUT_FILTER for include/shmbox (doc/Doxyfile.in): prints the
header named by argv[1] with its plain // comments made doxygen comments.

* the file's opening comment block becomes its @file description;
* a full-line // comment becomes /// (it documents what follows it);
* a trailing // comment after code becomes ///< (it documents that line);
* tool markers (NOLINT, IWYU pragma) are left alone (a trailing comment in
  an inline body becomes ///< too; doxygen ignores it there).
Line numbers do not change.
"""
import re
import sys

TOOL = re.compile(r"//\s*(NOLINT|IWYU pragma:)")


def main(path):
    lines = open(path, encoding="utf-8").read().split("\n")
    out = []
    opening = True  # still in the file's first comment block
    for line in lines:
        stripped = line.lstrip()
        if opening and stripped.startswith("//"):
            text = stripped[2:]
            out.append(("/// @file" if not out else "///") + text)
            continue
        opening = False
        if stripped.startswith("//") and not stripped.startswith("///") and not TOOL.match(stripped):
            out.append(line[: len(line) - len(stripped)] + "///" + stripped[2:])
            continue
        m = re.match(r"^(.*?[;{},)])(\s*)//(?!/)(.*)$", line)
        if m and not stripped.startswith("#") and not TOOL.match("//" + m.group(3)) and '"' not in m.group(1):
            out.append(f"{m.group(1)}{m.group(2)}///<{m.group(3)}")
            continue
        out.append(line)
    sys.stdout.write("\n".join(out))


if __name__ == "__main__":
    main(sys.argv[1])
